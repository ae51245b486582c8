"""Session 12 ping-pong persistent GEMMs on the GPU (sm_90; ``gemm_configs.s12_candidates``,
passes/warp_specialize_pingpong.py): through ``ops.matmul`` with each configuration forced, against float64
with NaN-poisoned outputs, ragged shapes (tile counts odd and even, fewer tiles than SMs), fp16 / bf16, bias,
activation and a transposed weight.  Skipped without an H100/H200."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or getattr(torch.version, "hip", None) or \
        torch.cuda.get_device_capability() != (9, 0):
    pytest.skip("needs an sm_90 NVIDIA GPU with a CUDA build of PyTorch", allow_module_level=True)

from test_gpu_s10_gemm import _run, run_bias_silu_transposed  # noqa: E402

from tilewright.ops import gemm_configs  # noqa: E402

CANDIDATES = gemm_configs.s12_candidates(2000, 3000, 1000)
UNCLUSTERED = [c for c in CANDIDATES if c.cluster == (1, 1)]
# the kernels MEASURE-ME.md's bench commands compiled (N, K of their shapes; M is a dynamic size): ragged
# row counts make tile counts per block odd, even, and leave blocks without a tile
BENCHED = [(c, M, 3000, 1000) for c in CANDIDATES for M in (2000, 136, 2056)] + \
    [(c, M, 8192, 1024) for c in UNCLUSTERED for M in (8192, 2056)]
# and a ragged N and K (a new kernel: one configuration only, to keep the run short)
RAGGED = [(CANDIDATES[0], 300, 1000, 264)]


@pytest.mark.parametrize("cfg, M, N, K", BENCHED + RAGGED,
                         ids=lambda x: x.short().replace(" ", "_") if hasattr(x, "short") else str(x))
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_pingpong_matches_float64(cfg, M, N, K, dtype):
    assert _run(cfg, M, N, K, dtype) < 2e-3, cfg.short()


# (the first candidate, and the heuristic's choice for short K over many tiles since the mid-session run)
@pytest.mark.parametrize("cfg", [CANDIDATES[0], gemm_configs.heuristic(8192, 8192, 1024, "bfloat16", "sm_90", 132)],
                         ids=lambda c: c.short().replace(" ", "_"))
def test_pingpong_with_bias_activation_and_transposed_weight(cfg):
    assert run_bias_silu_transposed(cfg, 600, seed=12) < 2e-3, cfg.short()
