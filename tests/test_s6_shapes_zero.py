"""Static zero-size dimensions (TileLang's issue 1697: a GEMM with K = 0): the tensor is empty, the loops
over it run no iteration, and the kernel still writes its outputs (C = A @ B = 0).  Runs in the tile
interpreter and, lowered for sm_90a and gfx942, in the thread-level emulator, with the output poisoned
first.  The GPU run is in test_s6_shapes_gpu.py."""

from __future__ import annotations

import numpy as np
import pytest
from zoo import close, poisoned, rand

import tilewright as tw
import tilewright.language as T

BACKENDS = (("interpret", None), ("cuda -arch=sm_90a", "emulator"), ("hip -arch=gfx942", "emulator"))


def matmul(M, N, K, block_M, block_N, block_K):
    @T.prim_func
    def main(A: T.Tensor((M, K), T.float16), B: T.Tensor((K, N), T.float16), C: T.Tensor((M, N), T.float16)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), T.float16)
            B_shared = T.alloc_shared((block_K, block_N), T.float16)
            C_local = T.alloc_fragment((block_M, block_N), T.float32)
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
                T.copy(A[by * block_M, k * block_K], A_shared)
                T.copy(B[k * block_K, bx * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            T.copy(C_local, C[by * block_M, bx * block_N])

    return main


@pytest.mark.parametrize("target,backend", BACKENDS)
def test_gemm_with_empty_reduction_dimension_writes_zeros(target, backend):
    kern = tw.compile(matmul(128, 192, 0, 64, 64, 32), out_idx=-1, target=target, execution_backend=backend)
    a, b = np.zeros((128, 0), np.float16), np.zeros((0, 192), np.float16)
    c = poisoned((128, 192), "float16")
    kern(a, b, c)
    close(c, np.zeros((128, 192)))
    assert kern(a, b).shape == (128, 192)


def test_same_kernel_with_a_real_reduction_dimension():
    rng = np.random.default_rng(1697)
    kern = tw.compile(matmul(128, 192, 64, 64, 64, 32), out_idx=-1, target="interpret")
    a, b = rand(rng, (128, 64), "float16"), rand(rng, (64, 192), "float16")
    close(kern(a, b), a.astype(np.float64) @ b.astype(np.float64), rtol=2e-2, atol=2e-2)


def test_empty_argument_must_have_the_declared_shape():
    kern = tw.compile(matmul(128, 192, 0, 64, 64, 32), out_idx=-1, target="interpret")
    with pytest.raises(tw.errors.ArgumentError, match=r"argument A has shape \(128, 1\)"):
        kern(np.zeros((128, 1), np.float16), np.zeros((0, 192), np.float16))


def test_elementwise_over_an_empty_tensor_runs_no_iteration():
    @T.prim_func
    def scale(A: T.Tensor((0, 64), T.float32), B: T.Tensor((4,), T.float32)):
        with T.Kernel(1, threads=64):
            for i in T.serial(0):
                for j in T.Parallel(64):
                    A[i, j] = A[i, j] * 2.0
            for i in T.Parallel(4):
                B[i] = 1.0

    for target, backend in BACKENDS:
        kern = tw.compile(scale, target=target, execution_backend=backend)
        b = poisoned((4,))
        kern(np.zeros((0, 64), np.float32), b)
        close(b, np.ones(4))
