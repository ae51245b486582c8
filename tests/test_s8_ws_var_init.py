"""Warp specialization moves a kernel's top-level declarations to the top of the block; a
``T.alloc_var`` initial value that reads what earlier statements computed must still be taken where
it was written (a wrong answer before: the GEMM below scaled by 1 instead of 7), while one made of
parameters and never-written tensors moves up with its declaration so the producer sees it too.
Both forms of the pass: the GEMM mainloop (``warp_specialize``) and the general loop
(``warp_specialize_loop``), on the sm_90a emulator against float64 with poisoned outputs."""

from __future__ import annotations

import numpy as np
import pytest

import tilewright
import tilewright.language as T

SM90A = "cuda -arch=sm_90a"


def _gemm_scaled(init_from):
    @T.prim_func
    def g(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16"), C: T.Tensor((64, 64), "float32"),
          S: T.Tensor((2,), "int32")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((32, 64), "float16")
            acc = T.alloc_fragment((64, 64), "float32")
            a = T.alloc_var("int32", init=1)
            a = S[0] + 6
            n = S[1] + a
            if init_from == "var":
                b = T.alloc_var("int32", init=a)
            elif init_from == "let":
                b = T.alloc_var("int32", init=n - S[1])
            else:  # a tensor the kernel only reads: may move up
                b = T.alloc_var("int32", init=S[0] + 6)
            T.clear(acc)
            for k in T.Pipelined(2, num_stages=2):
                T.copy(A[0, k * 32], A_s)
                T.copy(B[k * 32, 0], B_s)
                T.gemm(A_s, B_s, acc)
            for i, j in T.Parallel(64, 64):
                C[i, j] = acc[i, j] * b
    return g


@pytest.mark.parametrize("init_from", ["var", "let", "tensor"])
def test_gemm_mainloop_keeps_a_var_initial_value_in_program_order(init_from):
    k = tilewright.compile(_gemm_scaled(init_from), target=SM90A, execution_backend="emulator",
                           pass_configs={"tw.warp_specialize": True})
    assert k.num_threads == 256  # the pass applied
    rng = np.random.default_rng(3)
    a = rng.uniform(-1, 1, (64, 64)).astype(np.float16)
    b = rng.uniform(-1, 1, (64, 64)).astype(np.float16)
    c = np.full((64, 64), np.nan, np.float32)
    k(a, b, c, np.array([1, 5], np.int32))
    want = (a.astype(np.float64) @ b.astype(np.float64)) * 7
    np.testing.assert_allclose(c, want, rtol=1e-3, atol=1e-3)


def test_general_loop_keeps_a_var_initial_value_in_program_order():
    @T.prim_func
    def f(A: T.Tensor((256, 64), "float16"), C: T.Tensor((64, 64), "float32"), S: T.Tensor((1,), "int32")):
        with T.Kernel(1, threads=128):
            r = T.alloc_var("int32", init=0)
            r = S[0] * 3
            w = T.alloc_var("int32", init=r + 1)  # 3 * S[0] + 1, not 1
            As = T.alloc_shared((64, 64), "float16")
            acc = T.alloc_fragment((64, 64), "float32")
            T.clear(acc)
            for k in T.Pipelined(4, num_stages=2):
                T.copy(A[k * 64, 0], As)
                for i, j in T.Parallel(64, 64):
                    acc[i, j] += T.cast(As[i, j], "float32") * w
            T.copy(acc, C)

    rng = np.random.default_rng(4)
    a = rng.standard_normal((256, 64)).astype(np.float16)
    c = np.full((64, 64), np.nan, np.float32)
    kern = tilewright.compile(f, target=SM90A, execution_backend="emulator",
                              pass_configs={"tw.warp_specialize": True, "tw.enable_wgmma": True})
    assert kern.num_threads == 256
    kern(a, c, np.array([2], np.int32))
    ref = 7 * sum(a[64 * k:64 * (k + 1)].astype(np.float64) for k in range(4))
    np.testing.assert_allclose(c, ref, rtol=1e-4, atol=1e-3)
