"""Tile operations TileLang accepts that tilewright refused (issue 12 item 3): ``T.fill`` / ``T.clear``
of one element, ``T.cumsum`` / ``T.cummax`` of a region or a view, tile atomics on a region or a whole
buffer.

Each kernel runs in the tile interpreter and, lowered for ``sm_90a`` and ``gfx942``, in the thread-level
emulator (race detector on), on fresh random inputs with NaN-poisoned outputs, against float64 NumPy
references.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_compat_refusals import run_everywhere
from zoo import close, f64, poisoned, rand

import tilewright.language as T


@pytest.fixture
def rng():
    return np.random.default_rng(2026_1201)


# --------------------------------------------------------------------------------------------
# T.fill / T.clear of a single element


def fill_one_element(N):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32"), C: T.Tensor((2,), "int32")):
        with T.Kernel(1, threads=128) as _:
            total = T.alloc_var("float32")
            T.clear(total)  # a T.alloc_var: one element
            counts = T.alloc_shared((2,), "int32")
            T.fill(counts[0], 0)  # one element of a shared buffer
            T.fill(counts[1], 7)
            T.sync_threads()
            for i in T.serial(N):
                total += A[i]
            for i in T.Parallel(N):
                B[i] = A[i] + total
            if T.get_thread_binding() == 0:
                C[0] = counts[0]
                C[1] = counts[1]

    return main


def test_fill_and_clear_of_one_element(rng):
    N = 64
    func = fill_one_element(N)

    def make():
        return rand(rng, (N,)), poisoned((N,)), np.full((2,), -99, np.int32)

    def check(args):
        a, b, c = args
        close(b, f64(a) + f64(a).sum(), rtol=1e-5, atol=1e-4)
        assert c.tolist() == [0, 7]

    run_everywhere(func, make, check)


# --------------------------------------------------------------------------------------------
# tile atomics with a scalar value: a region or a whole buffer, every element updated once


def atomic_region_scalar(M, N, bm, bn, op):
    atomic = getattr(T, f"atomic_{op}")

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), V: T.Tensor((1,), "float32")):
        with T.Kernel(T.ceildiv(M, bm), T.ceildiv(N, bn), threads=64) as (bx, by):
            atomic(A[bx * bm:(bx + 1) * bm, by * bn:(by + 1) * bn], V[0])

    return main


@pytest.mark.parametrize("op", ["add", "max"])
def test_tile_atomic_of_a_scalar_into_a_region(rng, op):
    M, N = 96, 80  # 80 is not a multiple of the 32-wide blocks: the last column block is partial
    func = atomic_region_scalar(M, N, 32, 32, op)
    a0 = rand(rng, (M, N))
    v = rand(rng, (1,), lo=-0.3, hi=0.3)

    def check(args):
        a, _ = args
        want = f64(a0) + f64(v)[0] if op == "add" else np.maximum(f64(a0), f64(v)[0])
        close(a, want)

    run_everywhere(func, lambda: (a0.copy(), v), check)


def atomic_whole_buffer():
    @T.prim_func
    def main(A: T.Tensor((1,), "float32"), B: T.Tensor((1,), "float32"), C: T.Tensor((4,), "float32")):
        with T.Kernel(1) as _:
            A_local = T.alloc_local([1], "float32")
            T.copy(A, A_local)
            T.clear(B)
            T.atomic_add(B, A_local)  # a one-element tile
            T.atomic_add(B, 1)  # a scalar into the whole buffer
            T.atomic_max(C, A[0])

    return main


def test_tile_atomic_into_a_whole_buffer(rng):
    func = atomic_whole_buffer()
    c0 = rand(rng, (4,))

    def make():
        return rand(rng, (1,)), poisoned((1,)), c0.copy()

    def check(args):
        a, b, c = args
        close(b, f64(a) + 1.0)
        close(c, np.maximum(f64(c0), f64(a)[0]))

    run_everywhere(func, make, check)


# --------------------------------------------------------------------------------------------
# scans of a region or a view


def scan_ref(a, dim, reverse, op):
    x = np.flip(f64(a), dim) if reverse else f64(a)
    y = np.cumsum(x, axis=dim) if op == "cumsum" else np.maximum.accumulate(x, axis=dim)
    return np.flip(y, dim) if reverse else y


def scan_strided(M, N, pitch_src, pitch_dst, op, dim, reverse, scope):
    scan = getattr(T, op)

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32"), G: T.Tensor((M, pitch_dst), "float32")):
        with T.Kernel(1, threads=128) as _:
            src = T.alloc_shared((M, pitch_src), "float32")
            dst = T.alloc_shared((M, pitch_dst), "float32")
            for i, j in T.Parallel(M, pitch_src):
                src[i, j] = -7.0
            for i, j in T.Parallel(M, pitch_dst):
                dst[i, j] = -9.0
            for i, j in T.Parallel(M, N):
                src[i, j] = A[i, j]
            if scope == "fragment":
                frag = T.alloc_fragment((M, N), "float32")
                T.copy(src[0:M, 0:N], frag)
                scan(src=frag, dst=dst[0:M, 0:N], dim=dim, reverse=reverse)
            else:
                scan(src=src[0:M, 0:N], dst=dst[0:M, 0:N], dim=dim, reverse=reverse)
            for i, j in T.Parallel(M, N):
                B[i, j] = dst[i, j]
            T.copy(dst, G)  # the columns past N keep their value

    return main


@pytest.mark.parametrize("op", ["cumsum", "cummax"])
@pytest.mark.parametrize("dim,reverse", [(0, False), (1, True)])
@pytest.mark.parametrize("scope", ["shared", "fragment"])
def test_scan_of_a_strided_region(rng, op, dim, reverse, scope):
    M, N = 8, 40
    func = scan_strided(M, N, 64, 80, op, dim, reverse, scope)

    def check(args):
        a, b, g = args
        close(b, scan_ref(a, dim, reverse, op), rtol=1e-5, atol=1e-4)
        assert np.all(g[:, N:] == -9.0)

    run_everywhere(func, lambda: (rand(rng, (M, N)), poisoned((M, N)), poisoned((M, 80))), check)


def scan_offset_rows(H, W, r0, r1, op, dim):
    scan = getattr(T, op)

    @T.prim_func
    def main(A: T.Tensor((H, W), "float32"), B: T.Tensor((H, W), "float32")):
        with T.Kernel(1, threads=128):
            A_shared = T.alloc_shared((H, W), "float32")
            T.copy(A, A_shared)
            scan(A_shared[r0:r1, :], dim=dim)  # in place, rows r0..r1 only
            T.copy(A_shared, B)

    return main


@pytest.mark.parametrize("op", ["cumsum", "cummax"])
@pytest.mark.parametrize("dim", [0, 1])
def test_scan_of_rows_at_an_offset(rng, op, dim):
    H, W, r0, r1 = 128, 8, 64, 128
    func = scan_offset_rows(H, W, r0, r1, op, dim)

    def check(args):
        a, b = args
        want = f64(a).copy()
        want[r0:r1] = scan_ref(a[r0:r1], dim, False, op)
        close(b, want, rtol=1e-5, atol=1e-4)

    run_everywhere(func, lambda: (rand(rng, (H, W)), poisoned((H, W))), check)


def cumsum_of_a_view(hidden):
    @T.prim_func
    def main(x: T.Tensor((4, hidden), "float32"), y: T.Tensor((4, hidden), "float32")):
        with T.Kernel(4, threads=128) as pid:
            smem = T.alloc_shared((hidden,), "float32")
            T.copy(x[pid, :], smem)
            T.cumsum(T.view(smem, (1, hidden)), dim=1)
            T.copy(smem, y[pid, :])

    return main


def test_cumsum_of_a_view(rng):
    func = cumsum_of_a_view(128)
    run_everywhere(func, lambda: (rand(rng, (4, 128)), poisoned((4, 128))),
                   lambda args: close(args[1], np.cumsum(f64(args[0]), axis=1), rtol=1e-5, atol=1e-4))


# --------------------------------------------------------------------------------------------
# T.gemm with a float32 A fragment where no matrix instruction takes float32 from registers (sm_90a):
# A is staged through shared memory and multiplied by float32 FMA (at least as exact as TileLang's tf32)


def gemm_fp32_fragment_a(M, N, K, bk, trans_b, dtype="float32"):
    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((N, K) if trans_b else (K, N), dtype),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128):
            acc = T.alloc_fragment((M, N), "float32")
            T.clear(acc)
            for ko in T.Pipelined(K // bk, num_stages=2):
                a_s = T.alloc_shared((M, bk), dtype)
                b_s = T.alloc_shared((N, bk) if trans_b else (bk, N), dtype)
                a_f = T.alloc_fragment((M, bk), dtype)
                T.copy(A[0, ko * bk], a_s)
                if trans_b:
                    T.copy(B[0, ko * bk], b_s)
                else:
                    T.copy(B[ko * bk, 0], b_s)
                T.copy(a_s, a_f)
                for i, k in T.Parallel(M, bk):
                    a_f[i, k] = a_f[i, k] * 2.0
                T.gemm(a_f, b_s, acc, transpose_B=trans_b)
            T.copy(acc, C)

    return main


@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "tfloat32"])
def test_gemm_with_a_float32_fragment_operand(rng, trans_b, dtype):
    M, N, K, bk = 32, 32, 64, 32
    func = gemm_fp32_fragment_a(M, N, K, bk, trans_b, dtype)

    def make():
        return rand(rng, (M, K)), rand(rng, (N, K) if trans_b else (K, N)), poisoned((M, N))

    def check(args):
        a, b, c = args
        close(c, 2.0 * f64(a) @ (f64(b).T if trans_b else f64(b)), rtol=1e-5, atol=1e-4)

    run_everywhere(func, make, check)


# --------------------------------------------------------------------------------------------
# tile copies and fills of a run-time extent


def copy_dynamic_into_static():
    length = T.dynamic("len")

    @T.prim_func
    def main(g: T.Tensor((length,), "int32"), out: T.Tensor((1024,), "int32")):
        with T.Kernel(1, threads=64):
            s = T.alloc_shared((1024,), "int32")
            for i in T.Parallel(1024):
                s[i] = -5
            T.copy(g[0:length], s)  # (len,) into (1024,): the elements both have
            T.copy(s, out)

    return main


@pytest.mark.parametrize("n", [100, 1500])
def test_copy_of_a_run_time_length_into_a_fixed_tile(rng, n):
    func = copy_dynamic_into_static()

    def check(args):
        g, out = args
        want = np.full(1024, -5, np.int64)
        m = min(n, 1024)
        want[:m] = g[:m]
        np.testing.assert_array_equal(out, want)

    run_everywhere(func, lambda: (rng.integers(-1000, 1000, n).astype(np.int32), np.full(1024, -9, np.int32)),
                   check)


def fill_dynamic_slice():
    num_tokens = T.dynamic("num_tokens")

    @T.prim_func
    def main(x: T.Tensor((num_tokens,), "int64"), lo: T.int32, hi: T.int32):
        with T.Kernel(1, threads=128):
            a, b = T.alloc_var(T.int32), T.alloc_var(T.int32)
            a = lo
            b = hi
            T.fill(x[a:b], 3)  # TileLang issue 1008: a slice whose extent is computed in the kernel

    return main


@pytest.mark.parametrize("lo,hi", [(5, 777), (10, 10), (600, 1000)])
def test_fill_of_a_slice_computed_in_the_kernel(rng, lo, hi):
    func = fill_dynamic_slice()
    x0 = rng.integers(-50, 50, 1000).astype(np.int64)

    def check(args):
        want = x0.copy()
        want[lo:hi] = 3
        np.testing.assert_array_equal(args[0], want)

    run_everywhere(func, lambda: (x0.copy(), np.int32(lo), np.int32(hi)), check)
