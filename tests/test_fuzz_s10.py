"""The session-10 fuzz templates (tilewright/fuzz/templates_s10.py: two gemms chained by a cast
fragment, a user split-K, 2-D reductions with atomics, the user's WS attention with each ping-pong /
overlap knob; tilewright/fuzz/ops_cases_s10.py: non-causal
ops.attention at head dim 80..128 as planned for sm_90a): a few seeded cases of each on the backends
where they matter, none may give a wrong answer, an internal error or a crash, and each must run (not
only refusals).  The references are not vacuous (a perturbed output is judged wrong), and the
op-level case exercises the configuration it is for (two K/V stages, ping-pong, the overlap)."""

from __future__ import annotations

import numpy as np
import pytest

from tilewright.fuzz import ops_cases
from tilewright.fuzz.ops_cases_s10 import OPS_S10
from tilewright.fuzz.runner import judge, run_case
from tilewright.fuzz.templates import TEMPLATES
from tilewright.fuzz.templates_s10 import S10

# template -> (backends, cases, seed)
QUICK = {"chain_gemm": (("emulator:sm_90a", "emulator:sm_80", "emulator:gfx942", "interpret"), 4, 101),
         "splitk_user": (("emulator:sm_90a", "emulator:sm_80", "emulator:gfx1100", "interpret"), 4, 102),
         "reduce_2d": (("emulator:sm_90a", "emulator:gfx942", "interpret"), 4, 103),
         "ws_attn_knobs": (("emulator:sm_90a", "interpret"), 2, 105),
         "ops_attention_nc": (("emulator:sm_90a",), 1, 104)}
# the op-level draw kept small here (the long runs take it as drawn)
SMALL = {"ops_attention_nc": {"b": 1, "hkv": 1, "group": 2, "sq": 129, "sk": 150, "d": 80, "mode": "dense"}}


@pytest.mark.parametrize("name", [t.name for t in S10 + OPS_S10])
def test_s10_template_quick_cases(name):
    assert set(QUICK) == {t.name for t in S10 + OPS_S10}
    backends, cases, seed = QUICK[name]
    tpl = TEMPLATES[name]
    rng = np.random.default_rng(seed)
    seen = []
    for _ in range(cases):
        p = dict(tpl.draw(rng), seed=int(rng.integers(2**31)), **SMALL.get(name, {}))
        case = tpl.make(p)
        outcomes = {b: run_case(case, b) for b in backends}
        bad = {b: (o.status, o.detail) for b, o in outcomes.items() if o.status not in ("ok", "refused", "skipped")}
        assert not bad, (name, p, bad)
        seen.append(outcomes)
    assert any(o[backends[0]].status == "ok" for o in seen), (name, [o[backends[0]].detail for o in seen])


@pytest.mark.parametrize("name", [t.name for t in S10 + OPS_S10])
def test_s10_reference_is_not_vacuous(name):
    """The expected outputs themselves pass; one element moved by a little more than the tolerance fails."""
    tpl = TEMPLATES[name]
    case = tpl.make(dict(tpl.draw(np.random.default_rng(7)), seed=7))
    got = [np.copy(a) if isinstance(a, np.ndarray) else a for a in case.args]
    for k, want in case.expected.items():
        got[k] = want.astype(np.asarray(case.args[k]).dtype)
    assert judge(case, got).status == "ok"
    for k, want in case.expected.items():
        where = tuple(int(v) for v in np.argwhere(np.isfinite(want))[0])
        bad = [np.copy(a) if isinstance(a, np.ndarray) else a for a in got]
        bad[k][where] = bad[k][where] * 2 + 1
        assert judge(case, bad).status == "wrong", k


def test_the_noncausal_case_takes_the_new_configuration():
    """The checked call of an ops_attention_nc case is planned with two K/V stages, ping-pong and the
    overlap (attention_dispatch.HOPPER_NONCAUSAL_OVERRIDES), on the grid and the persistent kernel."""
    for persistent in (False, True):
        p = dict(TEMPLATES["ops_attention_nc"].draw(np.random.default_rng(3)), seed=3, change="same",
                 persistent=persistent, sms=2, **SMALL["ops_attention_nc"])
        assert run_case(TEMPLATES["ops_attention_nc"].make(p), "emulator:sm_90a").status == "ok"
        planned = [(key, cfg) for key, cfg in ops_cases.BUILT if key[0] == "attention" and cfg]
        assert planned, ops_cases.BUILT
        key, cfg = planned[-1]
        assert cfg.get("tw.pingpong") and cfg.get("tw.attention_overlap"), cfg
        assert key[17:20] == (128, 128, 2), key  # block_M, block_N, two stages
        assert (len(key) > 24 and key[-2] == 2) == persistent, key  # (the persistent grid of `sms` blocks)


def test_splitk_user_reaches_an_empty_split():
    """The split-K template's draw includes splits with no K block (the session-10 hang)."""
    tpl = TEMPLATES["splitk_user"]
    rng = np.random.default_rng(0)
    empty = 0
    for _ in range(200):
        p = tpl.draw(rng)
        kb = -(-p["k"] // p["bk"])
        per = -(-kb // p["splits"])
        empty += (p["splits"] - 1) * per >= kb
    assert empty >= 10
