"""Session-10 fuzz templates on an NVIDIA GPU, through the fuzzer's own ``gpu`` backend (outputs
poisoned, float64 references): the kernel-level ones (two gemms chained by a cast fragment, a user
split-K with empty splits, 2-D reductions with atomics from every block) and ops.attention
non-causal at head dim 80..128 (on an H200: two K/V stages with ping-pong and the overlap,
``attention_dispatch.HOPPER_NONCAUSAL_OVERRIDES``), each op called with a previous signature twice
and then the checked one twice (the bound fast plans of repeat calls exist only on the GPU).  Also
the session-10 hang itself: a TMA-pipelined GEMM loop with no iteration (it never returned before
the fix).  Skipped without a CUDA GPU; about a minute on an H200."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or getattr(torch.version, "hip", None):
    pytest.skip("needs an NVIDIA GPU with a CUDA build of PyTorch", allow_module_level=True)

from test_s10_fuzz_empty_pipeline import _splitk  # noqa: E402

import tilewright  # noqa: E402
from tilewright.fuzz import ops_cases  # noqa: E402
from tilewright.fuzz.ops_cases_s10 import OPS_S10  # noqa: E402
from tilewright.fuzz.runner import run_case  # noqa: E402
from tilewright.fuzz.templates import TEMPLATES  # noqa: E402
from tilewright.fuzz.templates_s10 import S10  # noqa: E402

CASES = {"ops_attention_nc": 8, "ws_attn_knobs": 6}  # (their sm_90a kernels take NVRTC seconds each)


@pytest.mark.parametrize("name", [t.name for t in S10 + OPS_S10])
def test_s10_template_cases_on_the_gpu(name):
    tpl = TEMPLATES[name]
    rng = np.random.default_rng(10_100)
    statuses, noncausal_configs = [], 0
    for _ in range(CASES.get(name, 8)):
        p = dict(tpl.draw(rng), seed=int(rng.integers(2**31)))
        outcome = run_case(tpl.make(p), "gpu")
        assert outcome.status in ("ok", "refused"), (name, p, outcome)
        statuses.append(outcome.status)
        noncausal_configs += any(cfg.get("tw.pingpong") for key, cfg in ops_cases.BUILT if key[0] == "attention")
    assert "ok" in statuses, (name, statuses)
    if name == "ops_attention_nc" and torch.cuda.get_device_capability() == (9, 0):
        assert noncausal_configs, "no case took the non-causal sm_90a configuration"


def test_an_empty_tma_pipelined_loop_returns():
    """The last split of a user split-K has no K block: T.Pipelined(lo, hi) with hi == lo at run time."""
    M, N, K, splits = 33, 40, 64, 5
    func, per = _splitk(M, N, K, 32, 32, 16, splits, 2, 128)
    kernel = tilewright.compile(func, pass_configs={"tw.warp_specialize": False})
    g = torch.Generator().manual_seed(5)
    a = (torch.rand(M, K, generator=g) * 2 - 1).half().cuda()
    b = (torch.rand(K, N, generator=g) * 2 - 1).half().cuda()
    c = torch.full((splits, M, N), float("nan"), device="cuda")
    kernel(a, b, c)
    torch.cuda.synchronize()
    fa, fb = a.double().cpu(), b.double().cpu()
    for s in range(splits):
        lo, hi = min(s * per, 4) * 16, min((s + 1) * per, 4) * 16
        torch.testing.assert_close(c[s].double().cpu(), fa[:, lo:hi] @ fb[lo:hi], rtol=1e-2, atol=1e-2)
