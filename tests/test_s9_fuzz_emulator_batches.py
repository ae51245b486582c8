"""Found by the fuzzer (template ``persistent_tiles``): a T.Persistent GEMM with more blocks than tiles
and a TMA pipeline (not warp-specialized) stopped the sm_90a emulator with "mbarrier init under
thread-dependent control flow".  The kernel is right: the condition (does this block have a tile in
this round?) differs between blocks, not threads; the emulator's lockstep mode ran several blocks
as one batch and saw their lanes diverge.  Such kernels now run one block per batch, as those with an
async-copy wait under a block-dependent condition already did.  Against float64, output poisoned."""

from __future__ import annotations

import numpy as np
import pytest

import tilewright
import tilewright.language as T


def persistent_gemm(M, N, K, bm, bn, bk, wave, stages):
    MB, NB = -(-M // bm), -(-N // bn)

    @T.prim_func
    def g(A: T.Tensor((M, K), "bfloat16"), B: T.Tensor((K, N), "bfloat16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(wave, threads=64) as bid:
            A_s = T.alloc_shared((bm, bk), "bfloat16")
            B_s = T.alloc_shared((bk, bn), "bfloat16")
            acc = T.alloc_fragment((bm, bn), "float32")
            for ti, tj in T.Persistent([MB, NB], wave, bid):
                T.clear(acc)
                for k in T.Pipelined(K // bk, num_stages=stages):
                    T.copy(A[ti * bm, k * bk], A_s)
                    T.copy(B[k * bk, tj * bn], B_s)
                    T.gemm(A_s, B_s, acc)
                T.copy(acc, C[ti * bm, tj * bn])
    return g


@pytest.mark.parametrize("M, N, wave", [(1, 96, 4), (130, 96, 5), (64, 32, 2)])
def test_persistent_tma_gemm_with_idle_blocks_on_the_emulator(M, N, wave):
    K = 64
    k = tilewright.compile(persistent_gemm(M, N, K, 64, 32, 32, wave, 3), target="cuda -arch=sm_90a",
                           execution_backend="emulator", pass_configs={"tw.warp_specialize": False})
    assert "mbarrier.init" in k.get_kernel_source()
    rng = np.random.default_rng(M + N)
    import ml_dtypes

    a = rng.uniform(-1, 1, (M, K)).astype(ml_dtypes.bfloat16)
    b = rng.uniform(-1, 1, (K, N)).astype(ml_dtypes.bfloat16)
    c = np.full((M, N), np.nan, np.float32)
    k(a, b, c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-4)
