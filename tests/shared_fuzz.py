"""What the quick fuzz tests share (test_fuzz_s8.py, test_fuzz_s9.py, test_fuzz_new.py): a few seeded
cases of a template run on some backends, and the check that a template's reference can fail.  Not a
test file."""

from __future__ import annotations

import numpy as np

from tilewright.fuzz.runner import judge, run_case
from tilewright.fuzz.templates import TEMPLATES


def run_quick_cases(name, backends, cases, seed, adjust=None, allowed=("ok", "refused")):
    """``cases`` cases of template ``name`` drawn from ``seed`` (each draw changed in place by ``adjust``
    when given), each run on every backend: none may end other than in ``allowed`` (a wrong answer, an
    internal error, a crash).  Returns each case's outcomes, backend -> ``Outcome``."""
    tpl = TEMPLATES[name]
    rng = np.random.default_rng(seed)
    seen = []
    for _ in range(cases):
        p = dict(tpl.draw(rng), seed=int(rng.integers(2**31)))
        if adjust is not None:
            adjust(p)
        case = tpl.make(p)
        outcomes = {b: run_case(case, b) for b in backends}
        bad = {b: (o.status, o.detail) for b, o in outcomes.items() if o.status not in allowed}
        assert not bad, (name, p, bad)
        seen.append(outcomes)
    return seen


def assert_some_case_ran(name, seen, backends):
    """On each of ``backends`` at least one case ran and was right (not only refusals or skips)."""
    for b in backends:
        assert any(o[b].status == "ok" for o in seen), (name, b, [o[b].detail for o in seen])


def assert_reference_can_fail(name, nudge):
    """The expected outputs themselves pass; one element moved to ``2 * x + nudge`` (a little more than
    the tolerance) fails."""
    tpl = TEMPLATES[name]
    case = tpl.make(dict(tpl.draw(np.random.default_rng(5)), seed=5))
    got = [np.copy(a) if isinstance(a, np.ndarray) else a for a in case.args]
    for k, want in case.expected.items():
        got[k] = want.astype(np.asarray(case.args[k]).dtype)
    assert judge(case, got).status == "ok"
    k, want = next(iter(case.expected.items()))
    where = tuple(int(v) for v in np.argwhere(np.isfinite(want))[0])
    got[k][where] = got[k][where] * 2 + nudge
    assert judge(case, got).status == "wrong"
