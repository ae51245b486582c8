"""The session-8 fuzz templates (tilewright/fuzz/templates_s8.py): a few seeded cases of each on the
interpreter and the sm_90a and gfx942 emulators; none may give a wrong answer, an internal error or a
crash, and each template must produce kernels that run on each backend (not only refusals).  Also
checked: the references are not vacuous (a perturbed output is judged wrong) and an integer output
may keep its sentinel only where the reference says it must."""

from __future__ import annotations

import numpy as np
import pytest
from shared_fuzz import assert_reference_can_fail, assert_some_case_ran, run_quick_cases

from tilewright.fuzz.runner import judge
from tilewright.fuzz.templates import TEMPLATES
from tilewright.fuzz.templates_s8 import S8

BACKENDS = ("interpret", "emulator:sm_90a", "emulator:gfx942")
CASES, SEED = 4, 808


@pytest.mark.parametrize("name", [t.name for t in S8])
def test_s8_template_quick_cases(name):
    def whole_waves(p):  # whole waves of 64: gfx942 refuses 32 or 96
        p.update(threads=max(p.get("threads", 64), 64))

    assert_some_case_ran(name, run_quick_cases(name, BACKENDS, CASES, SEED, adjust=whole_waves), BACKENDS)


@pytest.mark.parametrize("name", [t.name for t in S8])
def test_s8_reference_is_not_vacuous(name):
    """The expected outputs themselves pass; one element moved by a little more than the tolerance fails."""
    assert_reference_can_fail(name, 8)  # (fp8: far enough to land on another representable value)


def test_integer_sentinel_is_accepted_only_where_expected():
    p = {"variant": "window", "m": 8, "k": 1, "threads": 64, "blocks": 1, "dtype": "int32", "fill_n": 4,
         "start": 4, "seed": 1}
    case = TEMPLATES["vectorized"].make(p)
    got = [np.copy(a) for a in case.args]
    got[2] = case.expected[2].astype(np.int32)
    assert (got[2][:, :4] == np.iinfo(np.int32).min).all() and judge(case, got).status == "ok"
    got[2][0, 5] = np.iinfo(np.int32).min  # a column the loop must write
    assert judge(case, got).status == "wrong" and "never written" in judge(case, got).detail
