"""``T.__exp2``: 2**x with fast math — on CUDA the hardware's ``ex2.approx.ftz.f32`` (one MUFU.EX2;
exp2f adds range fix-ups around it), on HIP the backend's exp2, in float64 the accurate exp2.  The
flash-attention softmax of ``ops.attention`` uses it.  Checked against float64 on the interpreter,
on the emulator of the CUDA and AMD lowerings, and through NVRTC."""

from __future__ import annotations

import numpy as np
import pytest
from toolchains import needs_hip_compiler, needs_nvrtc

import tilewright
import tilewright.language as T


def exp2_kernel(dtype):
    @T.prim_func
    def fast_exp2(A: T.Tensor((256,), dtype), B: T.Tensor((256,), dtype)):
        with T.Kernel(2, threads=128) as bx:
            for i in T.Parallel(128):
                B[bx * 128 + i] = T.__exp2(A[bx * 128 + i])

    return fast_exp2


@pytest.mark.parametrize("target, backend", [("interpret", None), ("cuda -arch=sm_90a", "emulator"),
                                             ("hip -arch=gfx942", "emulator")])
@pytest.mark.parametrize("dtype, tol", [("float32", 1e-6), ("float64", 1e-14)])
def test_fast_exp2_matches_float64(target, backend, dtype, tol):
    if dtype == "float64" and target.startswith("hip"):
        pytest.skip("float64 transcendentals need AMD's device library")
    a = np.random.default_rng(1).uniform(-20, 20, 256).astype(dtype)
    b = np.full(256, np.nan, dtype)
    tilewright.compile(exp2_kernel(dtype), target=target, execution_backend=backend)(a, b)
    np.testing.assert_allclose(b, np.exp2(a.astype(np.float64)), rtol=tol)


@needs_nvrtc
def test_fast_exp2_is_one_hardware_instruction():
    from tilewright.toolchain import nvrtc

    k = tilewright.compile(exp2_kernel("float32"), target="cuda -arch=sm_90a", execution_backend="emulator")
    src = k.get_kernel_source()
    assert "ex2.approx.ftz.f32" in src and "exp2f" not in src
    nvrtc.compile_cuda(src, "sm_90a", [k.thread_kernel.name])
    # the helper is printed only where the intrinsic is called
    plain = tilewright.compile(_accurate(), target="cuda -arch=sm_90a", execution_backend="emulator")
    assert "ex2.approx" not in plain.get_kernel_source()


def _accurate():
    @T.prim_func
    def accurate_exp2(A: T.Tensor((256,), "float32"), B: T.Tensor((256,), "float32")):
        with T.Kernel(2, threads=128) as bx:
            for i in T.Parallel(128):
                B[bx * 128 + i] = T.exp2(A[bx * 128 + i])

    return accurate_exp2


@needs_hip_compiler
def test_fast_exp2_compiles_for_amd():
    k = tilewright.compile(exp2_kernel("float32"), target="hip -arch=gfx942")
    assert "tw_exp2f" in k.get_kernel_source()
