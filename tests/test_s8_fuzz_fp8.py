"""Fuzz findings (session 8, template ``fp8_cast``) on the AMD-only fnuz 8-bit floats.

1. ``T.cast(x, "float8_e4m3fnuz" / "float8_e5m2fnuz", sat=False)`` saturated like the default cast
   (a value beyond the largest finite one became that value) on every backend: ``cast_modes`` only
   knew the two OCP formats as 8-bit floats.  Without saturation the fnuz formats, which have no
   infinity, give NaN (HIP's ``__HIP_NOSAT`` conversion; ml_dtypes' conversion).
2. A CUDA target given an fnuz buffer crashed in the code generator (``KeyError`` in
   ``codegen/cuda.py``); it is now a ``CompileError`` naming the parameter (CUDA has no such type).

Outputs start at a finite value the kernel never writes (-3: NaN is what some elements must hold);
the reference is ml_dtypes' conversion in float32.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tilewright as tw
import tilewright.language as T
from tilewright.errors import CompileError

FNUZ = ("float8_e4m3fnuz", "float8_e5m2fnuz")
BACKENDS = (("interpret", None), ("hip -arch=gfx942", "emulator"), ("hip -arch=gfx90a", "emulator"))
N = 64


def cast_both(dtype):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), dtype), C: T.Tensor((N,), dtype)):
        with T.Kernel(1, threads=64):
            for i in T.Parallel(N):
                B[i] = T.cast(A[i], dtype, sat=False)
                C[i] = T.cast(A[i], dtype)

    return main


@pytest.mark.parametrize("target,backend", BACKENDS)
@pytest.mark.parametrize("dtype", FNUZ)
def test_fnuz_cast_without_saturation_gives_nan_beyond_the_range(dtype, target, backend):
    npdt = getattr(ml_dtypes, dtype)
    top = float(ml_dtypes.finfo(npdt).max)
    rng = np.random.default_rng(8_301)
    x = (rng.uniform(-1, 1, N) * top * rng.choice([0.5, 1.0, 3.0], N)).astype(np.float32)
    x[:6] = [top * 4, -top * 4, np.inf, -np.inf, top, -top]
    b = np.full(N, -3.0, np.float32).astype(npdt)
    c = b.copy()
    kw = {"execution_backend": backend} if backend else {}
    tw.compile(cast_both(dtype), target=target, **kw)(x, b, c)
    over = np.abs(x) > top * 1.0625  # beyond the rounding range of the largest finite value
    want_b = x.astype(npdt).astype(np.float64)  # ml_dtypes: round to nearest even, NaN past the range
    assert np.isnan(want_b[over]).all() and over[:4].all()
    np.testing.assert_array_equal(b.astype(np.float64), want_b)
    want_c = np.clip(x, -top, top).astype(npdt).astype(np.float64)  # satfinite
    np.testing.assert_array_equal(c.astype(np.float64), want_c)


def test_hip_source_calls_the_encoder_without_saturation():
    src = tw.compile(cast_both("float8_e5m2fnuz"), target="hip -arch=gfx942",
                     execution_backend="emulator").get_kernel_source()
    body = src[src.index("extern \"C\" __global__"):]  # the kernel, past the helper definitions
    assert "tw_f32_to_e5m2fnuz_nosat(" in body and "tw_f32_to_e5m2fnuz(" in body


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("dtype", FNUZ)
def test_cuda_refuses_fnuz_buffers_naming_the_parameter(dtype, arch):
    with pytest.raises(CompileError, match=f"parameter B has type {dtype}.*CUDA targets do not have"):
        tw.compile(cast_both(dtype), target=f"cuda -arch={arch}", execution_backend="emulator")


def test_cuda_refuses_an_fnuz_value_inside_a_kernel():
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=64):
            for i in T.Parallel(N):
                B[i] = T.cast(T.cast(A[i], "float8_e4m3fnuz"), "float32")

    with pytest.raises(CompileError, match="a value has type float8_e4m3fnuz"):
        tw.compile(main, target="cuda -arch=sm_90a", execution_backend="emulator")
    tw.compile(main, target="hip -arch=gfx942", execution_backend="emulator")  # fine where it exists
