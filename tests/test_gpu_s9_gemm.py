"""Session 9 GEMM candidates on the GPU (sm_90): the chunked TMA-store epilogue (``store_cols``) and the
64x128 tiles for 128 x N x K, through ``ops.matmul`` with each configuration forced, against float64 with
NaN-poisoned outputs, ragged shapes, fp16 / bf16, bias and activation.  Skipped without an H100/H200."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or getattr(torch.version, "hip", None) or \
        torch.cuda.get_device_capability() != (9, 0):
    pytest.skip("needs an sm_90 NVIDIA GPU with a CUDA build of PyTorch", allow_module_level=True)

from tilewright.ops import dispatch  # noqa: E402
from tilewright.ops.gemm_configs import GemmConfig  # noqa: E402

NEW = [
    GemmConfig("direct", 128, 256, 64, 4, 256, wgmma=True, ws=True, tma_store=True, store_cols=128),
    GemmConfig("direct", 128, 256, 64, 4, 256, wgmma=True, ws=True, tma_store=True, store_cols=64),
    GemmConfig("direct", 256, 128, 64, 4, 256, wgmma=True, ws=True, tma_store=True, store_cols=64),
    GemmConfig("persistent", 128, 256, 64, 4, 256, group_M=8, wgmma=True, ws=True, tma_store=True, store_cols=128),
    GemmConfig("direct", 128, 256, 64, 4, 256, wgmma=True, ws=True, tma_store=True, store_cols=128, cluster=(1, 2)),
    GemmConfig("persistent", 256, 128, 64, 4, 256, group_M=8, wgmma=True, ws=True, tma_store=True, store_cols=64),
    GemmConfig("direct", 128, 256, 64, 4, 256, wgmma=True, ws=True, tma_store=True, c_in_ring=True),
    GemmConfig("direct", 256, 128, 64, 4, 256, wgmma=True, ws=True, tma_store=True, c_in_ring=True),
    GemmConfig("direct", 64, 128, 64, 8, 256, wgmma=True, ws=True, tma_store=True),
    GemmConfig("direct", 64, 128, 64, 8, 128, wgmma=True, ws=True, tma_store=True),
    GemmConfig("direct", 64, 128, 64, 8, 256, wgmma=True, ws=True, tma_store=True, cluster=(2, 1)),
    GemmConfig("direct", 64, 128, 64, 8, 256, wgmma=True, ws=True, tma_store=True, cluster=(1, 2)),
]


def _rel(got, want) -> float:
    assert torch.isfinite(got).all(), "outputs left unwritten (NaN poison)"
    rounding = {torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}[got.dtype]
    return (got.double() - want).abs().max().item() / want.abs().max().item() - rounding


@pytest.mark.parametrize("cfg", NEW, ids=lambda c: c.short().replace(" ", "_"))
@pytest.mark.parametrize("M, N, K", [(4096, 4096, 4096), (128, 8192, 8192), (1000, 1496, 1000), (77, 264, 3000)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_new_configs_match_float64(cfg, M, N, K, dtype):
    g = torch.Generator(device="cuda").manual_seed(M + N + K)
    a = torch.randn(M, K, device="cuda", generator=g).to(dtype)
    b = torch.randn(K, N, device="cuda", generator=g).to(dtype)
    want = a.double() @ b.double()
    out = torch.full((M, N), float("nan"), device="cuda", dtype=dtype)
    dispatch.matmul_impl(a, b, None, None, None, config=cfg, out=out)
    assert _rel(out, want) < 2e-3, cfg.short()


@pytest.mark.parametrize("cfg", NEW[:8], ids=lambda c: c.short().replace(" ", "_"))
def test_chunked_epilogue_with_bias_activation_and_transposed_weight(cfg):
    g = torch.Generator(device="cuda").manual_seed(7)
    a = torch.randn(600, 1000, device="cuda", generator=g).to(torch.bfloat16)
    w = torch.randn(1496, 1000, device="cuda", generator=g).to(torch.bfloat16)
    bias = torch.randn(1496, device="cuda", generator=g).to(torch.bfloat16)
    want = torch.nn.functional.silu(a.double() @ w.double().t() + bias.double())
    out = torch.full((600, 1496), float("nan"), device="cuda", dtype=torch.bfloat16)
    dispatch.matmul_impl(a, w.t(), bias, "silu", None, config=cfg, out=out)
    assert _rel(out, want) < 2e-3, cfg.short()
