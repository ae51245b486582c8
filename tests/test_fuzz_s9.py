"""The session-9 fuzz templates (tilewright/fuzz/templates_s9.py: clusters, T.alloc_var initial values
under warp specialization, T.Persistent; tilewright/fuzz/ops_cases.py: ops.matmul and ops.attention
called twice): a few seeded cases of each on the backends where they matter, none may give a wrong
answer, an internal error or a crash, and each must run (not only refusals or skips).  The
references are not vacuous (a perturbed output is judged wrong), and the op-level cases catch a
seeded stale-plan fault (a plan cache key that forgets the strides, or causal).  (On the CPU the ops
keep no bound fast plans -- ``_DensePlan``, ``from_pointers`` -- which test_s9_fuzz_gpu.py covers.)"""

from __future__ import annotations

import pytest
from shared_fuzz import assert_reference_can_fail, assert_some_case_ran, run_quick_cases

from tilewright.fuzz.ops_cases import OPS
from tilewright.fuzz.runner import run_case
from tilewright.fuzz.templates import TEMPLATES
from tilewright.fuzz.templates_s9 import S9

# template -> (backends, cases, seed); the op-level cases are the slow ones
QUICK = {"cluster_ring": (("emulator:sm_90a", "interpret"), 6, 91),
         "cluster_gemm": (("emulator:sm_90a", "emulator:gfx942"), 3, 92),
         "ws_var_init": (("emulator:sm_90a", "emulator:sm_80"), 6, 93),
         "persistent_tiles": (("emulator:sm_90a", "interpret"), 3, 94),
         "ops_matmul": (("emulator:sm_90a",), 2, 95),
         "ops_attention": (("emulator:sm_90a",), 1, 96)}
# the op-level draws kept small here (the long runs take them as drawn)
SMALL = {"ops_attention": {"b": 1, "hkv": 1, "sq": 65, "sk": 77, "d": 64},
         "ops_matmul": {"m": 33, "n": 40, "k": 32}}


@pytest.mark.parametrize("name", [t.name for t in S9 + OPS])
def test_s9_template_quick_cases(name):
    assert set(QUICK) == {t.name for t in S9 + OPS}
    backends, cases, seed = QUICK[name]
    seen = run_quick_cases(name, backends, cases, seed, adjust=lambda p: p.update(SMALL.get(name, {})),
                           allowed=("ok", "refused", "skipped"))
    assert_some_case_ran(name, seen, backends[:1])


@pytest.mark.parametrize("name", [t.name for t in S9 + OPS])
def test_s9_reference_is_not_vacuous(name):
    """The expected outputs themselves pass; one element moved by a little more than the tolerance fails."""
    assert_reference_can_fail(name, 1)


def test_cluster_ring_runs_only_where_there_are_clusters():
    case = TEMPLATES["cluster_ring"].make({"cx": 2, "cy": 2, "nx": 1, "ny": 2, "n": 64, "shift": 1, "mode": "exchange",
                                           "dtype": "float32", "seed": 3})
    assert run_case(case, "emulator:sm_90a").status == "ok"
    assert run_case(case, "emulator:sm_80").status == "refused"


# ---------------------------------------------------------------- seeded stale-plan faults
def test_a_plan_key_without_strides_is_caught(monkeypatch):
    """ops.matmul's plan key forgetting the operands' strides: the previous call (B transposed) leaves
    a plan that the checked call (B row-major, same shapes) must not use."""
    from tilewright.ops import dispatch

    real = dispatch._matmul_key

    def forgetful(a, b, bias, activation, out_dtype, hashed=True):
        key = real(a, b, bias, activation, out_dtype, hashed)
        return None if key is None else tuple(x for x in key if not (isinstance(x, tuple) and len(x) == 2 and
                                                                     all(isinstance(s, int) for s in x)))
    p = {"m": 40, "n": 40, "k": 40, "dtype": "float16", "ta": False, "tb": False, "bias": False, "act": "none",
         "out32": True, "cand": 0, "sms": 2, "change": "stride", "seed": 4}
    case = TEMPLATES["ops_matmul"].make(p)
    assert run_case(case, "interpret").status == "ok"
    monkeypatch.setattr(dispatch, "_matmul_key", forgetful)
    assert run_case(case, "interpret").status in ("wrong", "crash")


def test_a_plan_key_without_causal_is_caught(monkeypatch):
    from tilewright.ops import attention_dispatch as ad

    real = ad._launch_plan
    p = {"mode": "dense", "b": 1, "hkv": 1, "group": 2, "sq": 33, "sk": 64, "d": 64, "causal": True,
         "dtype": "float16", "splits": 1, "lse": True, "persistent": False, "sms": 2, "variant": "flatmerge",
         "change": "causal", "seed": 6}
    case = TEMPLATES["ops_attention"].make(p)
    assert run_case(case, "interpret").status == "ok"
    memo: dict = {}

    def stale(q, k, v, causal, *rest):  # a launch-plan memo whose key forgets causal
        key = (q.shape, q.stride(), k.shape, q.dtype)
        if key not in memo:
            memo[key] = real(q, k, v, causal, *rest)
        return memo[key]

    monkeypatch.setattr(ad, "_launch_plan", stale)
    outcome = run_case(case, "interpret")
    assert outcome.status == "wrong", outcome
