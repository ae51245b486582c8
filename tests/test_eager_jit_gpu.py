"""The eager-JIT style on an NVIDIA GPU: torch CUDA tensors in, outputs allocated on their device.

The programs are the ones of test_eager_jit.py (interpreter and emulators); here they run with
target="cuda" against a float64 reference, outputs passed in poisoned with NaN."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or getattr(torch.version, "hip", None):
    pytest.skip("needs an NVIDIA GPU with a CUDA build of PyTorch", allow_module_level=True)

from test_eager_jit import (  # noqa: E402
    make_add_sub,
    make_axpy,
    make_dynamic_macro,
    make_gemm,
    make_gemm_in_place,
    make_row_scale,
    make_scaled_copy,
)


def _randn(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, generator=g, device="cuda", dtype=torch.float32).to(dtype)


def _close(got, want, tol):
    np.testing.assert_allclose(got.double().cpu().numpy(), want.double().cpu().numpy(), rtol=tol, atol=tol)


def test_gemm_returns_output_on_the_device():
    gemm = make_gemm(target="cuda")
    a, b = _randn(256, 128, dtype=torch.float16, seed=1), _randn(128, 192, dtype=torch.float16, seed=2)
    c = gemm(a, b, block_M=64, block_N=64, block_K=32)
    assert c.device.type == "cuda" and c.dtype == torch.float32
    _close(c, a.double() @ b.double(), 2e-2)


def test_gemm_in_place_poisoned():
    gemm = make_gemm_in_place(target="cuda")
    a, b = _randn(128, 64, seed=3), _randn(64, 96, seed=4)
    c = torch.full((128, 96), float("nan"), device="cuda")
    gemm(a, b, c)
    _close(c, a.double() @ b.double(), 2e-2)  # tf32 may be used for float32 gemms


def test_two_outputs_scalar_and_dynamic():
    x, y = _randn(4, 256, seed=5), _randn(4, 256, seed=6)
    s, d = make_add_sub(target="cuda")(x, y)
    _close(s, x.double() + y.double(), 1e-6)
    _close(d, x.double() - 2 * y.double(), 1e-6)
    xv, yv = _randn(512, seed=7), _randn(512, seed=8)
    _close(make_axpy(target="cuda")(0.75, xv, yv), 0.75 * xv.double() + yv.double(), 1e-6)
    f = make_row_scale(target="cuda")
    w = _randn(32, seed=9)
    for rows in (5, 9):
        x2 = _randn(rows, 32, seed=10 + rows)
        _close(f(x2, w), x2.double() * w.double(), 1e-6)


def test_out_idx_and_macro():
    x = _randn(2, 128, seed=11)
    _close(make_scaled_copy(target="cuda")(x), x.double() * 0.5, 1e-6)
    a = _randn(3, 64, seed=12)
    b = torch.full((3, 64), float("nan"), device="cuda")
    make_dynamic_macro(target="cuda")(a, b)
    _close(b, a.double() - 1.0, 1e-6)


def test_outputs_without_tensor_inputs():
    import tilewright
    import tilewright.language as T

    @tilewright.jit(target="cuda")
    def iota(start: T.int32):
        Y = T.empty((256,), T.int32)
        with T.Kernel(4, threads=64) as bx:
            for i in T.Parallel(64):
                Y[bx * 64 + i] = bx * 64 + i + start
        return Y

    y = iota(7)
    assert y.device.type == "cuda"
    np.testing.assert_array_equal(y.cpu().numpy(), np.arange(256) + 7)
