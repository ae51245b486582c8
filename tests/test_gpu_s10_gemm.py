"""Session 10 GEMM candidates on the GPU (sm_90; ``gemm_configs.s10_candidates``): one 256x192 tile per block
(chunked C, clusters of two, or C in the ring at four stages), persistent 128x192 pairs with 64-column chunks,
and the 128-row tiles (128-deep K steps, one consumer warpgroup, A multicast), through ``ops.matmul`` with each
configuration forced, against float64 with NaN-poisoned outputs, ragged shapes, fp16 / bf16, bias and activation.
And the persistent GEMM without warp specialization (its TMA ring inside the tile loop set up once, phases
carried across tiles: ``passes/pipeline_loops``).  Skipped without an H100/H200."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or getattr(torch.version, "hip", None) or \
        torch.cuda.get_device_capability() != (9, 0):
    pytest.skip("needs an sm_90 NVIDIA GPU with a CUDA build of PyTorch", allow_module_level=True)

from tilewright.ops import dispatch, gemm_configs  # noqa: E402
from tilewright.ops.gemm_configs import GemmConfig  # noqa: E402

# (the listed candidates, and the kernels left off the list after the 02:07 UTC run, still selectable by name)
WIDE = gemm_configs.s10_candidates(2000, 3000, 1000) + [GemmConfig.parse(x) for x in (
    "direct 256x192x64 s4 t256 wgmma ws tma-store/ring", "persistent 128x192x64 s5 t256 g8 wgmma ws tma-store/64 c2x1")]
# (with the heuristic's choice since the mid-session run of 2026-12-02: one consumer warpgroup of 128x64)
ROWS = [gemm_configs.heuristic(128, 8192, 8192, "float16", "sm_90", 132)] + gemm_configs.s10_candidates(
    128, 8192, 8192) + [GemmConfig.parse("direct 128x64x128 s4 t256 wgmma ws tma-store")]


def _rel(got, want) -> float:
    assert torch.isfinite(got).all(), "outputs left unwritten (NaN poison)"
    rounding = {torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}[got.dtype]
    return (got.double() - want).abs().max().item() / want.abs().max().item() - rounding


def _run(cfg, M, N, K, dtype, seed=0):
    g = torch.Generator(device="cuda").manual_seed(M + N + K + seed)
    a = torch.randn(M, K, device="cuda", generator=g).to(dtype)
    b = torch.randn(K, N, device="cuda", generator=g).to(dtype)
    out = torch.full((M, N), float("nan"), device="cuda", dtype=dtype)
    dispatch.matmul_impl(a, b, None, None, None, config=cfg, out=out)
    return _rel(out, a.double() @ b.double())


@pytest.mark.parametrize("cfg", WIDE, ids=lambda c: c.short().replace(" ", "_"))
@pytest.mark.parametrize("M, N, K", [(2000, 3000, 1000), (4096, 4096, 4096), (300, 1000, 264), (2056, 584, 72)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_wide_candidates_match_float64(cfg, M, N, K, dtype):
    assert _run(cfg, M, N, K, dtype) < 2e-3, cfg.short()


@pytest.mark.parametrize("cfg", ROWS, ids=lambda c: c.short().replace(" ", "_"))
@pytest.mark.parametrize("M, N, K", [(128, 8192, 8192), (77, 264, 3000), (128, 200, 392)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_row_candidates_match_float64(cfg, M, N, K, dtype):
    assert _run(cfg, M, N, K, dtype) < 2e-3, cfg.short()


def run_bias_silu_transposed(cfg, M, seed=7):
    """``silu(A @ W^T + bias)`` in bf16 by ``cfg`` (ops.matmul, W transposed) against float64: the relative error."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(M, 1000, device="cuda", generator=g).to(torch.bfloat16)
    w = torch.randn(1496, 1000, device="cuda", generator=g).to(torch.bfloat16)
    bias = torch.randn(1496, device="cuda", generator=g).to(torch.bfloat16)
    want = torch.nn.functional.silu(a.double() @ w.double().t() + bias.double())
    out = torch.full((M, 1496), float("nan"), device="cuda", dtype=torch.bfloat16)
    dispatch.matmul_impl(a, w.t(), bias, "silu", None, config=cfg, out=out)
    return _rel(out, want)


@pytest.mark.parametrize("cfg", WIDE + ROWS, ids=lambda c: c.short().replace(" ", "_"))
def test_candidates_with_bias_activation_and_transposed_weight(cfg):
    assert run_bias_silu_transposed(cfg, 600 if cfg.block_N > 64 else 120) < 2e-3, cfg.short()


@pytest.mark.parametrize("cfg", [
    GemmConfig("persistent", 128, 128, 64, 4, 256, group_M=8, wgmma=True),                  # 5 K steps / 4 slots
    GemmConfig("persistent", 128, 256, 64, 3, 256, group_M=8, wgmma=True, tma_store=True),  # 5 K steps / 3 slots
], ids=lambda c: c.short().replace(" ", "_"))
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_persistent_without_warp_specialization_carries_ring_phases_across_tiles(cfg, dtype):
    """Many tiles per block, K steps not a multiple of the slots: each tile leaves some slots an odd number
    of phases on; a parity that ignored the earlier tiles would hang or read a stale slot."""
    assert _run(cfg, 2000, 3000, 320, dtype) < 2e-3, cfg.short()
    assert _run(cfg, 1000, 1496, 264, dtype, seed=1) < 2e-3, cfg.short()
