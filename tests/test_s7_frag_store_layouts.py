"""T.Parallel loops that store to a fragment at positions other than their own (issue 12 item 3, part 2).

TileLang programs write a part of an accumulator (``T.clear(C_local[:M, :K])``), a transposed copy of
one (``dst_t[j, i] = src[i, j]``) or a reshaped view of one; the loop then iterates by the stored
fragment's layout (``passes.store_driven_layouts``) and reads the others through shared memory where
needed.  Each kernel runs in the tile interpreter and, lowered for ``sm_90a`` and ``gfx942``, in the
thread-level emulator (race detector on), on fresh random inputs with NaN-poisoned outputs, against
float64 NumPy references.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_compat_refusals import run_everywhere
from zoo import close, f64, poisoned, rand

import tilewright.language as T


@pytest.fixture
def rng():
    return np.random.default_rng(2026_1208)


def clear_part_of_accumulator(M, N, K, bk, cw=None):
    """TileLang's alias test: a slice of the accumulator cleared through an alias, then a gemm."""
    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((N, K), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128):
            a_s = T.alloc_shared((M, bk), "float16")
            b_s = T.alloc_shared((N, bk), "float16")
            c = T.alloc_fragment((M, N), "float32")
            for i, j in T.Parallel(M, N):
                c[i, j] = 5.0
            x = c[:M, :cw or bk]
            T.clear(x)
            for ko in T.Pipelined(K // bk, num_stages=0):
                T.copy(A[0, ko * bk], a_s)
                T.copy(B[0, ko * bk], b_s)
                T.gemm(a_s, b_s, c, transpose_B=True)
            T.copy(c, C)

    return main


@pytest.mark.parametrize("M,N,K,bk,cw", [(128, 128, 64, 32, None), (64, 64, 64, 16, None), (64, 64, 32, 16, 2)])
def test_clear_a_slice_of_an_accumulator(rng, M, N, K, bk, cw):
    """(cw = 2: the columns only every fourth lane of a warp holds in the matrix instructions' layouts)"""
    def check(args):
        a, b, c = args
        want = f64(a) @ f64(b).T
        want[:, cw or bk:] += 5.0
        close(c, want, rtol=1e-3, atol=1e-3)

    run_everywhere(clear_part_of_accumulator(M, N, K, bk, cw),
                   lambda: (rand(rng, (M, K), "float16"), rand(rng, (N, K), "float16"), poisoned((M, N))), check)


def transpose_accumulator(S, K):
    """gdn's chunk_o_bwd: the transpose of a gemm result, reduced along its rows."""
    @T.prim_func
    def main(Q: T.Tensor((S, K), "float16"), Kt: T.Tensor((S, K), "float16"), out: T.Tensor((S,), "float32"),
             D: T.Tensor((S, S), "float32")):
        with T.Kernel(1, threads=128):
            q_s = T.alloc_shared((S, K), "float16")
            k_s = T.alloc_shared((S, K), "float16")
            acc = T.alloc_fragment((S, S), "float32")
            acc_t = T.alloc_fragment((S, S), "float32")
            red = T.alloc_fragment((S,), "float32")
            T.copy(Q, q_s)
            T.copy(Kt, k_s)
            T.clear(acc)
            T.clear(acc_t)
            T.gemm(q_s, k_s, acc, transpose_B=True)
            for i, j in T.Parallel(S, S):
                acc_t[j, i] = acc[i, j] * 2.0
            T.reduce_sum(acc_t, red, dim=1)
            T.copy(red, out)
            T.copy(acc_t, D)

    return main


def test_transpose_of_an_accumulator(rng):
    S, K = 64, 32

    def check(args):
        q, k, out, d = args
        prod = f64(q) @ f64(k).T * 2.0
        close(d, prod.T, rtol=1e-3, atol=1e-3)
        close(out, prod.sum(axis=0), rtol=1e-3, atol=1e-2)

    run_everywhere(transpose_accumulator(S, K), lambda: (rand(rng, (S, K), "float16"), rand(rng, (S, K), "float16"),
                                                         poisoned((S,)), poisoned((S, S))), check)


def reshaped_accumulator(N, Q, H, K):
    """deepseek's fp8 indexer: a gemm result seen as (N, Q, H), updated through the view, reduced along H."""
    @T.prim_func
    def main(A: T.Tensor((N, K), "float16"), B: T.Tensor((Q * H, K), "float16"), W: T.Tensor((Q, H), "float32"),
             out: T.Tensor((N, Q), "float32")):
        with T.Kernel(1, threads=128):
            a_s = T.alloc_shared((N, K), "float16")
            b_s = T.alloc_shared((Q * H, K), "float16")
            s = T.alloc_fragment((N, Q * H), "float32")
            s3 = T.reshape(s, (N, Q, H))
            w = T.alloc_fragment((Q, H), "float32")
            logits = T.alloc_fragment((N, Q), "float32")
            T.copy(A, a_s)
            T.copy(B, b_s)
            T.copy(W, w)
            T.clear(s)
            T.gemm(a_s, b_s, s, transpose_B=True)
            for n, q, h in T.Parallel(N, Q, H):
                s3[n, q, h] = T.max(s3[n, q, h], 0) * w[q, h]
            T.reduce_sum(s3, logits, dim=-1)
            T.copy(logits, out)

    return main


def test_update_through_a_reshaped_accumulator(rng):
    N, Q, H, K = 64, 4, 16, 32

    def check(args):
        a, b, w, out = args
        s = np.maximum(f64(a) @ f64(b).T, 0).reshape(N, Q, H) * f64(w)[None]
        close(out, s.sum(axis=-1), rtol=1e-3, atol=1e-2)

    run_everywhere(reshaped_accumulator(N, Q, H, K),
                   lambda: (rand(rng, (N, K), "float16"), rand(rng, (Q * H, K), "float16"), rand(rng, (Q, H)),
                            poisoned((N, Q))), check)
