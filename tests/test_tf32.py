"""``T.tfloat32``: TileLang's dtype for float32 GEMM operands that tensor cores may round to a 10-bit
mantissa.  Here it is float32 (ir/dtype.py): tensors are float32, and a GEMM of tfloat32 operands is
the float32 GEMM, at least as exact as a tf32 one -- so TileLang's tests, which compare against a
reference with tf32-truncated operands at a 1e-2 tolerance, accept it, and so does a float64
reference at float32 accuracy."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from toolchains import needs_nvrtc

import tilewright
import tilewright.language as T

BACKENDS = {
    "interpret": {"target": "interpret"},
    "emulator-sm80": {"target": "cuda -arch=sm_80", "execution_backend": "emulator"},
    "emulator-sm90a": {"target": "cuda -arch=sm_90a", "execution_backend": "emulator"},
}


def tf32_gemm(M, N, K, trans_a, trans_b, block_M=32, block_N=32, block_K=16):
    a_shape = (K, M) if trans_a else (M, K)
    b_shape = (N, K) if trans_b else (K, N)
    a_tile = (block_K, block_M) if trans_a else (block_M, block_K)
    b_tile = (block_N, block_K) if trans_b else (block_K, block_N)

    @T.prim_func
    def gemm(A: T.Tensor(a_shape, T.tfloat32), B: T.Tensor(b_shape, T.tfloat32), C: T.Tensor((M, N), T.float32)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            A_s = T.alloc_shared(a_tile, T.tfloat32)
            B_s = T.alloc_shared(b_tile, T.tfloat32)
            C_f = T.alloc_fragment((block_M, block_N), T.float32)
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
                if trans_a:
                    T.copy(A[k * block_K, by * block_M], A_s)
                else:
                    T.copy(A[by * block_M, k * block_K], A_s)
                if trans_b:
                    T.copy(B[bx * block_N, k * block_K], B_s)
                else:
                    T.copy(B[k * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, C_f, trans_a, trans_b)
            T.copy(C_f, C[by * block_M, bx * block_N])

    return gemm


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("trans", [(False, False), (False, True), (True, False)], ids=["nn", "nt", "tn"])
def test_tfloat32_gemm_is_float32_exact(trans, backend):
    M, N, K = 64, 64, 48
    rng = np.random.default_rng(sum(trans) + 21)
    kernel = tilewright.compile(tf32_gemm(M, N, K, *trans), **BACKENDS[backend])
    a = rng.standard_normal((K, M) if trans[0] else (M, K)).astype(np.float32)
    b = rng.standard_normal((N, K) if trans[1] else (K, N)).astype(np.float32)
    c = np.full((M, N), np.nan, np.float32)
    kernel(torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(c))  # float32 tensors for tfloat32
    a64 = a.astype(np.float64).T if trans[0] else a.astype(np.float64)
    b64 = b.astype(np.float64).T if trans[1] else b.astype(np.float64)
    want = a64 @ b64
    # float32 accumulation over K: far inside tf32's 2**-11 relative rounding of each operand
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5 * np.sqrt(K))
    # TileLang's own check: operands truncated to tf32 (bits - 0x1000), 1e-2
    def trunc(x):
        return (x.view(np.int32) - 0x1000).view(np.float32).astype(np.float64)

    ta = trunc(a).T if trans[0] else trunc(a)
    tb = trunc(b).T if trans[1] else trunc(b)
    np.testing.assert_allclose(c, ta @ tb, rtol=1e-2, atol=1e-2)


def test_tfloat32_spellings():
    assert T.dtype(T.tfloat32) == "float32" and T.tfloat32.bits == 32
    assert T.tfloat32.as_torch() is torch.float32


@needs_nvrtc
def test_nvrtc_compiles_tfloat32_gemm():
    tilewright.compile(tf32_gemm(128, 128, 64, False, True), target="cuda -arch=sm_80")


@pytest.mark.skipif(not (torch.cuda.is_available() and not getattr(torch.version, "hip", None)),
                    reason="needs an NVIDIA GPU with a CUDA build of PyTorch")
def test_gpu_tfloat32_gemm():
    M, N, K = 256, 256, 128
    kernel = tilewright.compile(tf32_gemm(M, N, K, False, False, 64, 64, 32), target="cuda")
    g = torch.Generator().manual_seed(22)
    a, b = torch.randn(M, K, generator=g), torch.randn(K, N, generator=g)
    c = torch.full((M, N), float("nan"), device="cuda")
    kernel(a.cuda(), b.cuda(), c)
    want = a.double() @ b.double()
    torch.testing.assert_close(c.cpu().double(), want, rtol=1e-5, atol=1e-4)
