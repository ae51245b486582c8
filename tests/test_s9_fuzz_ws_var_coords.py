"""Found by the fuzzer (template ``ws_var_init``): the GEMM form of warp specialization
(passes/warp_specialize.py) gave its producer a K loop whose TMA coordinates or trip count read a
``T.alloc_var`` that the program assigns before the loop (directly, or through an initial value
that reads an assigned variable or a let).  Those statements run in the consumers only, so the
producer loaded the tiles at an unassigned offset (zeros: every output wrong).  The pass now
leaves such a loop to ``warp_specialize_loop``, whose producer recomputes the prelude, or unchanged.
On the sm_90a emulator against float64, outputs poisoned."""

from __future__ import annotations

import numpy as np
import pytest

import tilewright
import tilewright.language as T

SM90A = "cuda -arch=sm_90a"
PAD = 24


def _gemm(offset_from, blocks=2, ksteps=2):
    K = 32 * ksteps
    rows = blocks * 64 + PAD

    @T.prim_func
    def g(A: T.Tensor((rows, K), "float16"), B: T.Tensor((K, 64), "float16"),
          C: T.Tensor((blocks * 64, 64), "float32"), S: T.Tensor((3,), "int32")):
        with T.Kernel(blocks, threads=128) as bx:
            a = T.alloc_var("int32", init=1)
            a = S[0] + 6
            n = S[1] + a
            nk = T.alloc_var("int32", init=ksteps)
            if offset_from == "var":
                o = T.alloc_var("int32", init=a)
            elif offset_from == "let":
                o = T.alloc_var("int32", init=n - S[1])
            elif offset_from == "assigned":
                o = T.alloc_var("int32", init=0)
                o = S[2] * 2 + 1
            elif offset_from == "trip_count":  # the K loop's extent from an assigned variable
                o = T.alloc_var("int32", init=3)
                nk = S[0] - S[0] + ksteps - 1
            else:  # a read-only tensor: the initial value moves up, the GEMM pass applies
                o = T.alloc_var("int32", init=S[2] + 1)
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((32, 64), "float16")
            acc = T.alloc_fragment((64, 64), "float32")
            T.clear(acc)
            for k in T.Pipelined(nk, num_stages=2):
                T.copy(A[bx * 64 + o, k * 32], A_s)
                T.copy(B[k * 32, 0], B_s)
                T.gemm(A_s, B_s, acc)
            for i, j in T.Parallel(64, 64):
                C[bx * 64 + i, j] = acc[i, j]
    return g


@pytest.mark.parametrize("offset_from", ["var", "let", "assigned", "trip_count", "tensor"])
def test_producer_coordinates_reading_assigned_variables(offset_from):
    blocks, ksteps = 2, 3
    k = tilewright.compile(_gemm(offset_from, blocks, ksteps), target=SM90A, execution_backend="emulator",
                           pass_configs={"tw.warp_specialize": True})
    s = [2, 5, 3]
    rng = np.random.default_rng(9)
    a = rng.uniform(-1, 1, (blocks * 64 + PAD, 32 * ksteps)).astype(np.float16)
    b = rng.uniform(-1, 1, (32 * ksteps, 64)).astype(np.float16)
    c = np.full((blocks * 64, 64), np.nan, np.float32)
    k(a, b, c, np.array(s, np.int32))
    off = {"var": s[0] + 6, "let": s[0] + 6, "assigned": 2 * s[2] + 1, "trip_count": 3, "tensor": s[2] + 1}[offset_from]
    steps = ksteps - 1 if offset_from == "trip_count" else ksteps
    fa, fb = a.astype(np.float64), b.astype(np.float64)
    want = np.concatenate([fa[r * 64 + off: r * 64 + off + 64, :32 * steps] @ fb[:32 * steps] for r in range(blocks)])
    np.testing.assert_allclose(c, want, rtol=1e-3, atol=1e-3)
    if offset_from == "tensor":
        assert k.num_threads == 256  # still warp-specialized by the GEMM pass
