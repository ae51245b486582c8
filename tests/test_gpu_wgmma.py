"""wgmma GEMMs (pass config ``tw.enable_wgmma``) on an sm_90 GPU against float64 with poisoned
outputs: fp16/bf16, 1 and 2 consumer warpgroups, 64x64 to 128x256 tiles, ragged shapes, transposed
B, a ReLU epilogue, A from registers.  Skipped without an sm_90 GPU."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or getattr(torch.version, "hip", None) or torch.cuda.get_device_capability() < (9, 0):
    pytest.skip("needs an sm_90 NVIDIA GPU with a CUDA build of PyTorch", allow_module_level=True)

from test_wgmma import GEMMS, _gemm_serial  # noqa: E402

import tilewright  # noqa: E402
from tilewright.kernels import matmul  # noqa: E402

WGMMA = {"tw.enable_wgmma": True}
TORCH = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def _check(kernel, M, N, K, dtype="float16", trans_B=False, relu=False, out=torch.float32):
    g = torch.Generator(device="cuda").manual_seed(M * 7 + N * 3 + K)
    a = torch.randn(M, K, device="cuda", generator=g).to(TORCH[dtype])
    b = torch.randn(*((N, K) if trans_B else (K, N)), device="cuda", generator=g).to(TORCH[dtype])
    c = torch.full((M, N), float("nan"), device="cuda", dtype=out)
    kernel(a, b, c)
    torch.cuda.synchronize()
    want = a.double() @ (b.double().T if trans_B else b.double())
    if relu:
        want = want.clamp_min(0)
    assert torch.isfinite(c).all(), "some outputs were never written"
    err = ((c.double() - want).abs().max() / want.abs().max()).item()
    assert err < 2e-3, err


def _uses_wgmma(kernel) -> None:
    src = kernel.get_kernel_source()
    assert "wgmma.mma_async" in src and "mma.sync" not in src


LARGE = [
    (1024, 1024, 1024, 128, 256, 64, "float16", 256, True),
    (1024, 1024, 1024, 128, 256, 64, "bfloat16", 256, False),
    (2000, 3000, 1000, 128, 128, 64, "float16", 256, False),
    (4096, 4096, 512, 128, 256, 32, "bfloat16", 256, True),
]


@pytest.mark.parametrize("M, N, K, bm, bn, bk, dtype, threads, trans_B", GEMMS + LARGE)
@pytest.mark.parametrize("stages", [2, 3])
def test_wgmma_gemm_on_gpu(M, N, K, bm, bn, bk, dtype, threads, trans_B, stages):
    k = tilewright.compile(matmul(M, N, K, bm, bn, bk, dtype=dtype, out_dtype="float32", trans_B=trans_B,
                                  num_stages=stages, threads=threads), target="cuda", pass_configs=WGMMA)
    _uses_wgmma(k)
    _check(k, M, N, K, dtype, trans_B)


@pytest.mark.parametrize("trans_B", [False, True])
def test_wgmma_gemm_fed_by_cp_async_on_gpu(trans_B):
    M, N, K = 1000, 1000, 1000
    k = tilewright.compile(matmul(M, N, K, 128, 128, 32, out_dtype="float32", num_stages=3, threads=256,
                                  trans_B=trans_B), target="cuda", pass_configs={**WGMMA, "tw.disable_tma": True})
    _uses_wgmma(k)
    _check(k, M, N, K, trans_B=trans_B)


def test_wgmma_gemm_with_relu_on_gpu():
    M, N, K = 1000, 1000, 512
    k = tilewright.compile(matmul(M, N, K, 128, 256, 64, out_dtype="float32", threads=256, relu=True),
                           target="cuda", pass_configs=WGMMA)
    _check(k, M, N, K, relu=True)


def test_wgmma_with_a_from_registers_on_gpu():
    M, N, K = 512, 384, 256
    k = tilewright.compile(_gemm_serial(M, N, K, 128, 128, 32, 256), target="cuda", pass_configs=WGMMA)
    _uses_wgmma(k)
    _check(k, M, N, K)


def test_wgmma_with_half_output_on_gpu():
    M, N, K = 777, 640, 320
    k = tilewright.compile(matmul(M, N, K, 128, 128, 64, out_dtype="float16", threads=128), target="cuda",
                           pass_configs=WGMMA)
    _check(k, M, N, K, out=torch.float16)


def test_wgmma_under_warp_specialization_on_gpu():
    """Both options together: a TMA producer warpgroup and consumer warpgroups issuing wgmma."""
    M, N, K = 1024, 1024, 1024
    k = tilewright.compile(matmul(M, N, K, 128, 256, 64, out_dtype="float32", num_stages=3, threads=256),
                           target="cuda", pass_configs={**WGMMA, "tw.warp_specialize": True})
    _uses_wgmma(k)
    _check(k, M, N, K)


@pytest.mark.parametrize("M, N, K, bm, bn, bk, stages, threads, dtype, trans_A, trans_B", [
    (4096, 4096, 4096, 128, 256, 64, 4, 256, "float16", False, False),  # the H200 config
    (4096, 4096, 4096, 128, 256, 64, 4, 256, "bfloat16", False, True),
    (2000, 3000, 1000, 128, 256, 64, 4, 256, "float16", True, False),   # ragged, A stored K x M
    (2000, 3000, 1000, 128, 128, 64, 5, 128, "bfloat16", True, True),
    (136, 8192, 8192, 64, 128, 64, 4, 128, "float16", False, False),    # decode-like M
    (8192, 8192, 1024, 128, 256, 64, 3, 256, "bfloat16", False, False),
    (1000, 1000, 72, 128, 128, 64, 2, 128, "float16", False, True),     # fewer K tiles than stages
])
@pytest.mark.parametrize("configs", [{}, {"tl.disable_warp_specialized": True}, {"tl.disable_wgmma": True}])
def test_default_sm90a_gemm_on_gpu(M, N, K, bm, bn, bk, stages, threads, dtype, trans_A, trans_B, configs):
    """No pass configs: warp-specialized wgmma (one group in flight per consumer, setmaxnreg with two
    consumer warpgroups); and with TileLang's switches turning each part off."""
    f = matmul(M, N, K, bm, bn, bk, dtype=dtype, out_dtype="float32", trans_A=trans_A, trans_B=trans_B,
               num_stages=stages, threads=threads)
    k = tilewright.compile(f, target="cuda", pass_configs=configs)
    src = k.get_kernel_source()
    assert ("wgmma.mma_async" in src) is not bool(configs.get("tl.disable_wgmma"))
    assert ("wgmma.wait_group.sync.aligned 1" in src) is not bool(configs)
    g = torch.Generator(device="cuda").manual_seed(M + N + K)
    a = torch.randn(*((K, M) if trans_A else (M, K)), device="cuda", generator=g).to(TORCH[dtype])
    b = torch.randn(*((N, K) if trans_B else (K, N)), device="cuda", generator=g).to(TORCH[dtype])
    c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float32)
    k(a, b, c)
    torch.cuda.synchronize()
    want = (a.double().T if trans_A else a.double()) @ (b.double().T if trans_B else b.double())
    assert torch.isfinite(c).all(), "some outputs were never written"
    err = ((c.double() - want).abs().max() / want.abs().max()).item()
    assert err < 2e-3, err
