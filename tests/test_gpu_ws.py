"""Warp-specialized GEMMs on the GPU (the compiler's from a plain T.Pipelined loop, and the
hand-written one with TileLang's spellings) against float64 with poisoned outputs.  Skipped
without an sm_90 GPU."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or getattr(torch.version, "hip", None) or torch.cuda.get_device_capability() < (9, 0):
    pytest.skip("needs an sm_90 NVIDIA GPU with a CUDA build of PyTorch", allow_module_level=True)

from test_warp_specialize import ws_gemm, ws_gemm_tma  # noqa: E402

import tilewright  # noqa: E402
from tilewright.kernels import matmul  # noqa: E402


def _run(kernel, M, N, K, dtype=torch.float16, out=torch.float32):
    g = torch.Generator(device="cuda").manual_seed(M * 7 + N * 3 + K)
    a = torch.randn(M, K, device="cuda", generator=g).to(dtype)
    b = torch.randn(K, N, device="cuda", generator=g).to(dtype)
    c = torch.full((M, N), float("nan"), device="cuda", dtype=out)
    kernel(a, b, c)
    torch.cuda.synchronize()
    want = a.double() @ b.double()
    assert torch.isfinite(c).all(), "some outputs were never written"
    err = ((c.double() - want).abs().max() / want.abs().max()).item()
    assert err < 2e-3, err


@pytest.mark.parametrize("M, N, K, bm, bn, bk, stages, threads", [
    (1024, 1024, 1024, 128, 128, 64, 3, 128), (2000, 3000, 1000, 128, 128, 64, 4, 256),
    (256, 512, 4096, 64, 128, 64, 2, 128)])
def test_compiler_warp_specialized_gemm_on_gpu(M, N, K, bm, bn, bk, stages, threads):
    k = tilewright.compile(matmul(M, N, K, bm, bn, bk, out_dtype="float32", num_stages=stages, threads=threads),
                           target="cuda", pass_configs={"tw.warp_specialize": True})
    assert k.num_threads == threads + 128
    _run(k, M, N, K)


@pytest.mark.parametrize("M, N, K, stages", [(512, 512, 512, 2), (300, 200, 1000, 3)])
def test_hand_written_warp_specialized_gemm_on_gpu(M, N, K, stages):
    _run(tilewright.compile(ws_gemm(M, N, K, stages=stages), target="cuda"), M, N, K)


@pytest.mark.parametrize("M, N, K, bn, stages", [(512, 512, 512, 64, 2), (300, 264, 1000, 128, 3)])
def test_hand_written_tma_copy_gemm_on_gpu(M, N, K, bn, stages):
    _run(tilewright.compile(ws_gemm_tma(M, N, K, bn=bn, stages=stages), target="cuda"), M, N, K)
