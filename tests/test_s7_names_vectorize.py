"""``T.vectorized`` loops (TileLang's test_tilelang_language_vectorize kernels): each thread's loop is
done with vector accesses where the addresses are provably contiguous and aligned, element by
element elsewhere, and computes exactly what the loop one iteration at a time computes.

Each kernel runs in the tile interpreter and, lowered for ``sm_90a`` and ``gfx942``, on the
thread-level emulator (race detector on), against float64 NumPy references with NaN-poisoned
outputs; the lane counts of the lowered vector accesses are checked.  The GPU runs are in
test_s7_names_gpu.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from zoo import close, f64, poisoned, rand

import tilewright as tw
import tilewright.language as T
from tilewright.interp.emulator import run_thread_kernel
from tilewright.ir import thread as th
from tilewright.ir.visitor import walk

TARGETS = ("cuda -arch=sm_90a", "hip -arch=gfx942")


@pytest.fixture
def rng():
    return np.random.default_rng(7_312)


def run_everywhere(func, make_args, check):
    args = make_args()
    tw.compile(func, target="interpret")(*args)
    check(args, "interpret")
    kernels = {}
    for target in TARGETS:
        args = make_args()
        kern = tw.compile(func, target=target, execution_backend="emulator")
        run_thread_kernel(kern.thread_kernel, args, check_races=True)
        check(args, target)
        kernels[target] = kern
    return kernels


def lanes(kern, name: str) -> set:
    """Lane counts of the vector accesses to the buffer ``name`` (reads and writes)."""
    out = set()

    def f(s):
        if isinstance(s, th.VecCopy) and name in (s.src.name, s.dst.name):
            out.add(s.lanes)

    walk(kern.thread_kernel.body, f)
    return out


def column_major_copy(N, M, stride_A, stride_B):
    @T.prim_func
    def main(A: T.StridedTensor[(N, M), (1, stride_A), T.float32], B: T.StridedTensor[(N, M), (1, stride_B), T.float32]):
        with T.Kernel(M // 64, threads=64) as bx:
            tx = T.get_thread_binding(0)
            col = bx * 64 + tx
            for row in T.vectorized(N):
                B[row, col] = A[row, col]

    return main


@pytest.mark.parametrize("stride_a,stride_b,want", [(16, 16, 4), (18, 20, 2), (20, 24, 4), (17, 16, 4), (17, 19, 0)])
def test_column_major_copy_uses_the_widest_vectors_the_strides_allow(rng, stride_a, stride_b, want):
    N, M = 16, 128
    bases = []

    def args():
        base_a = rand(rng, (M, stride_a))
        base_b = np.full((M, stride_b), -7.0, dtype=np.float32)
        base_b[:, :N] = np.nan
        bases.append(base_b)
        return [np.lib.stride_tricks.as_strided(base_a, (N, M), (4, 4 * stride_a)),
                np.lib.stride_tricks.as_strided(base_b, (N, M), (4, 4 * stride_b))]

    def check(a, where):
        close(a[1], f64(a[0]))
        assert (bases[-1][:, N:] == -7.0).all(), f"{where}: the padding between columns was written"

    kernels = run_everywhere(column_major_copy(N, M, stride_a, stride_b), args, check)
    for kern in kernels.values():
        got = lanes(kern, "A") | lanes(kern, "B")
        if want == 0:  # odd pitches: no aligned vector anywhere, the scalar loop
            assert got == set()
        else:
            assert max(got) == want
    if (stride_a, stride_b) == (17, 16):  # A's odd pitch: B stored with float4s, A read element by element
        assert lanes(kernels[TARGETS[0]], "A") == set() and lanes(kernels[TARGETS[0]], "B") == {4}


def invariant_index(N, M, K, dtype="float32"):
    @T.prim_func
    def main(A: T.Tensor[(N, M), dtype], B: T.Tensor[(N, M), dtype], C: T.Tensor[(N, M // K), dtype]):
        with T.Kernel(N // 64, threads=64) as bx:
            tx = T.get_thread_binding(0)
            row = bx * 64 + tx
            for col in T.vectorized(M):
                B[row, col] = A[row, col] * C[row, col // K]

    return main


@pytest.mark.parametrize("M,K", [(32, 2), (32, 4), (48, 6), (56, 14)])
def test_invariant_index_reads_are_per_element_and_the_rest_vectors(rng, M, K):
    N = 64

    def args():
        return [rand(rng, (N, M)), poisoned((N, M)), rand(rng, (N, M // K))]

    def check(a, where):
        close(a[1], f64(a[0]) * f64(a[2])[:, np.arange(M) // K])

    for kern in run_everywhere(invariant_index(N, M, K), args, check).values():
        assert lanes(kern, "A") == {4} and lanes(kern, "B") == {4}


def test_half_precision_uses_eight_lanes(rng):
    N, M, K = 64, 64, 8

    def args():
        return [rand(rng, (N, M), "float16"), poisoned((N, M), "float16"), rand(rng, (N, M // K), "float16")]

    def check(a, where):
        want = (f64(a[0]) * f64(a[2])[:, np.arange(M) // K]).astype(np.float16)
        close(a[1], f64(want), rtol=2e-3, atol=2e-3)

    for kern in run_everywhere(invariant_index(N, M, K, "float16"), args, check).values():
        assert lanes(kern, "A") == {8}


def accumulate(M, K, into_global):
    @T.prim_func
    def main(A: T.Tensor[(M, K), T.float32], B: T.Tensor[(M,), T.float32]):
        with T.Kernel(M // 64, threads=64) as bx:
            row = bx * 64 + T.get_thread_binding(0)
            if into_global:
                B[row] = 0.0
                for k in T.vectorized(K):
                    B[row] = B[row] + A[row, k]
            else:
                acc = T.alloc_local((1,), T.float32)
                acc[0] = 0.0
                for k in T.vectorized(K):
                    acc[0] = acc[0] + A[row, k]
                B[row] = acc[0]

    return main


@pytest.mark.parametrize("into_global", [True, False], ids=["global", "local"])
def test_accumulation_keeps_its_order(rng, into_global):
    M, K = 64, 8

    def args():
        return [rand(rng, (M, K)), poisoned((M,))]

    def check(a, where):
        close(a[1], f64(a[0]).sum(axis=1))

    for kern in run_everywhere(accumulate(M, K, into_global), args, check).values():
        assert lanes(kern, "B") == set()
        # (read-modify-write of global B: the barrier pass puts a barrier in the loop, which stays scalar)
        assert lanes(kern, "A") == (set() if into_global else {4})


def prefix_sum(M, K):
    """A loop-carried dependence: iteration k reads what iteration k - 1 stored."""

    @T.prim_func
    def main(A: T.Tensor[(M, K), T.float32], B: T.Tensor[(M, K + 1), T.float32]):
        with T.Kernel(M // 64, threads=64) as bx:
            row = bx * 64 + T.get_thread_binding(0)
            B[row, 0] = 0.0
            for k in T.vectorized(K):
                B[row, k + 1] = B[row, k] + A[row, k]

    return main


def test_loop_carried_dependence_is_not_vectorized_across(rng):
    M, K = 64, 8

    def args():
        return [rand(rng, (M, K)), poisoned((M, K + 1))]

    def check(a, where):
        close(a[1], np.concatenate([np.zeros((M, 1)), np.cumsum(f64(a[0]), axis=1)], axis=1))

    for kern in run_everywhere(prefix_sum(M, K), args, check).values():
        assert lanes(kern, "B") == set()


def uniform_fill(n):
    @T.prim_func
    def main(A: T.Tensor[(64,), T.float32]):
        with T.Kernel(1, threads=128):
            for i in T.vectorized(n):
                A[i] = T.cast(i + 1, T.float32) * 0.5

    return main


@pytest.mark.parametrize("n", [4, 8, 6])
def test_block_uniform_stores_are_done_once(n):
    def args():
        return [poisoned((64,))]

    def check(a, where):
        close(a[0][:n], (np.arange(n) + 1) * 0.5)
        assert np.isnan(a[0][n:]).all(), f"{where}: wrote past the loop"

    kernels = run_everywhere(uniform_fill(n), args, check)  # the race detector: one writer per element
    assert lanes(kernels[TARGETS[0]], "A") == ({4} if n % 4 == 0 else {2})


def test_vectorized_loop_with_a_symbolic_extent_stays_scalar(rng):
    n = T.dynamic("n")

    @T.prim_func
    def main(A: T.Tensor[(64, n), T.float32], B: T.Tensor[(64, n), T.float32]):
        with T.Kernel(1, threads=64) as _:
            tx = T.get_thread_binding(0)
            for j in T.vectorized(n):
                B[tx, j] = A[tx, j] + 1.0

    def args():
        return [rand(rng, (64, 12)), poisoned((64, 12))]

    def check(a, where):
        close(a[1], f64(a[0]) + 1)

    for kern in run_everywhere(main, args, check).values():
        assert lanes(kern, "A") == set()
