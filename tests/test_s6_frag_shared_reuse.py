"""Shared buffers whose lifetimes do not overlap share memory when, one after another, they would not
fit (passes/share_shared_memory.py; TileLang reuses shared memory the same way).

Kernels whose two big tiles together exceed the target's shared memory, but are used one after the
other, compile and give the float64 NumPy reference's results in the thread-level emulator (race
detector on: the barrier the pass inserts orders the old tile's last reads before the new one's
writes); kernels that fit are placed as before; tiles used together are still refused.
"""

from __future__ import annotations

import numpy as np
import pytest
from zoo import close, f64, poisoned, rand

import tilewright as tw
import tilewright.language as T
from tilewright.errors import CompileError
from tilewright.interp.emulator import run_thread_kernel

# rows of a (rows, 128) float32 tile: two of them exceed the target's shared memory, one fits
ROWS = {"cuda -arch=sm_90a": 256, "hip -arch=gfx942": 96}


def two_phases(rows, overlap=False):
    @T.prim_func
    def main(X: T.Tensor((rows, 128), "float32"), Z: T.Tensor((rows, 128), "float32"),
             Y: T.Tensor((rows, 128), "float32"), W: T.Tensor((rows, 128), "float32")):
        with T.Kernel(1, threads=256):
            a_s = T.alloc_shared((rows, 128), "float32")
            b_s = T.alloc_shared((rows, 128), "float32")
            T.copy(X, a_s)
            for i, j in T.Parallel(rows, 128):
                Y[i, j] = a_s[rows - 1 - i, j] * 2.0  # another thread's element: the reads need a barrier
            T.copy(Z, b_s)
            for i, j in T.Parallel(rows, 128):
                W[i, j] = b_s[i, 127 - j] + (a_s[i, j] if overlap else 1.0)

    return main


@pytest.mark.parametrize("target", list(ROWS))
def test_tiles_of_disjoint_lifetimes_share_shared_memory(target):
    rows = ROWS[target]
    kern = tw.compile(two_phases(rows), target=target, execution_backend="emulator")
    limit = kern.thread_kernel.target.max_shared_bytes
    assert 2 * rows * 128 * 4 > limit >= kern.thread_kernel.shared_bytes
    rng = np.random.default_rng(7)
    x, z = rand(rng, (rows, 128)), rand(rng, (rows, 128))
    y, w = poisoned((rows, 128)), poisoned((rows, 128))
    run_thread_kernel(kern.thread_kernel, [x, z, y, w], check_races=True)
    close(y, 2.0 * f64(x)[::-1])
    close(w, f64(z)[:, ::-1] + 1.0)


@pytest.mark.parametrize("target", list(ROWS))
def test_tiles_used_together_are_still_refused(target):
    with pytest.raises(CompileError, match="bytes of shared memory"):
        tw.compile(two_phases(ROWS[target], overlap=True), target=target, execution_backend="emulator")


def test_kernels_that_fit_are_placed_one_after_another():
    kern = tw.compile(two_phases(64), target="cuda -arch=sm_90a", execution_backend="emulator")
    assert kern.thread_kernel.shared_bytes >= 2 * 64 * 128 * 4  # no sharing where there is room


def gemm_with_staged_epilogue(M, N, K, bk, stages):
    """A pipelined gemm (warp-specialized on sm_90a: a TMA producer beside the consumers) whose
    float32 epilogue tile lives after the main loop, in the memory of the operand rings."""
    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=256):
            a_s = T.alloc_shared((M, bk), "float16")
            b_s = T.alloc_shared((bk, N), "float16")
            acc = T.alloc_fragment((M, N), "float32")
            c_s = T.alloc_shared((M, N), "float32")
            T.clear(acc)
            for ko in T.Pipelined(K // bk, num_stages=stages):
                T.copy(A[0, ko * bk], a_s)
                T.copy(B[ko * bk, 0], b_s)
                T.gemm(a_s, b_s, acc)
            T.copy(acc, c_s)
            for i, j in T.Parallel(M, N):
                C[i, j] = c_s[M - 1 - i, j] + 1.0

    return main


def test_warp_specialized_gemm_epilogue_reuses_the_rings():
    M, N, K, bk, stages = 128, 256, 192, 64, 3
    kern = tw.compile(gemm_with_staged_epilogue(M, N, K, bk, stages), target="cuda -arch=sm_90a",
                      execution_backend="emulator")
    tk = kern.thread_kernel
    assert tk.num_threads > 256  # warp-specialized: a producer warpgroup beside the consumers
    assert tk.shared_bytes <= tk.target.max_shared_bytes < stages * (M + N) * bk * 2 + M * N * 4
    rng = np.random.default_rng(11)
    a, b = rand(rng, (M, K), "float16"), rand(rng, (K, N), "float16")
    c = poisoned((M, N))
    run_thread_kernel(tk, [a, b, c], check_races=True)
    close(c, (f64(a) @ f64(b))[::-1] + 1.0, rtol=1e-3, atol=1e-3)
