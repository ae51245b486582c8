"""Kernels TileLang accepts that tilewright refused, and errors raised as TileLang raises them
(issue 12: the "kernel refused" and "error text differs" classes of TileLang's own tests).

Each kernel is written as a TileLang user writes it and run in the tile interpreter and, lowered for
``sm_90a`` and ``gfx942``, in the thread-level emulator (race detector on), against float64 NumPy
references with NaN-poisoned outputs:

a. ``T.reshape`` / ``T.view`` of a kernel parameter, ``T.copy`` through a whole view, ``T.transpose``;
b. ``T.alloc_global`` workspaces (allocated by each call, a hidden parameter);
c. atomics: ``T.atomic_add(use_tma=True)``, ``return_prev=True`` in a ``T.Parallel`` loop whose
   positions would be replicated over threads, ``T.atomic_addx2/x4(return_prev=True)``;
d. slices whose start holds a non-affine term, ``T.tma_copy`` shared -> global, a block mask read
   from a fragment steering tile copies;
e. sizes declared ``T.dynamic(name, "int64")``;
f. errors: "No valid warp partition", memory orders and float initializers (ValueError), a reshape to
   another element count (AssertionError), ``T.assume`` checked per call, a zero grid dimension.
"""

from __future__ import annotations

import numpy as np
import pytest
from zoo import close, f64, poisoned, rand

import tilewright as tw
import tilewright.language as T
from tilewright.errors import ArgumentError, CompileError, TilewrightWarning
from tilewright.interp.emulator import run_thread_kernel

TARGETS = ("cuda -arch=sm_90a", "hip -arch=gfx942")


@pytest.fixture
def rng():
    return np.random.default_rng(2026_12)


def run_everywhere(func, make_args, check, targets=TARGETS, out_idx=None):
    """Run ``func`` in the interpreter and on the emulator of each target, on fresh arguments each
    time; ``check(args)`` compares (``out_idx`` given: the arguments hold the inputs only and the
    kernel's return value is appended).  The emulator runs with the race detector, except for a
    kernel with hidden parameters (T.alloc_global), which goes through the kernel call."""
    def once(kern, where, emulate):
        args = make_args()
        if out_idx is not None:
            out = kern(*args)
            args = args + (list(out) if isinstance(out, list) else [out])
        elif emulate and len(args) == len(kern.params):
            run_thread_kernel(kern.thread_kernel, args, check_races=True)
        else:
            kern(*args)
        try:
            check(args)
        except AssertionError as e:
            raise AssertionError(f"on {where}: {e}") from None

    once(tw.compile(func, target="interpret", out_idx=out_idx), "interpret", False)
    for target in targets:
        once(tw.compile(func, target=target, execution_backend="emulator", out_idx=out_idx), target, True)


# --------------------------------------------------------------------------------------------
# a. views of parameters, copies through views, transpose


def reshape_param(N, M, dtype, how="reshape"):
    @T.prim_func
    def main(A: T.Tensor((N,), dtype), B: T.Tensor((N // M, M), dtype)):
        with T.Kernel(1, threads=128) as _:
            A_2d = T.reshape(A, [N // M, M]) if how == "reshape" else T.view(A, [N // M, M])
            T.copy(A_2d, B)

    return main


@pytest.mark.parametrize("how", ["reshape", "view"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_reshape_of_a_kernel_parameter(rng, how, dtype):
    N, M = 1024, 32

    def args():
        return [rand(rng, (N,), dtype), poisoned((N // M, M), dtype)]

    run_everywhere(reshape_param(N, M, dtype, how), args, lambda a: close(a[1], f64(a[0]).reshape(N // M, M), 0, 0))


def reshape_on_chip(N, M, scope):
    @T.prim_func
    def main(A: T.Tensor((N // M, M), "float32"), B: T.Tensor((N,), "float32"), C: T.Tensor((N // M, M), "float32")):
        with T.Kernel(1, threads=128) as _:
            if scope == "shared":
                S = T.alloc_shared((N // M, M), "float32")
            else:
                S = T.alloc_fragment((N // M, M), "float32")
            T.copy(A, S)
            T.copy(T.reshape(S, [N]), B)  # a view as a copy source
            T.copy(B[0:N], T.reshape(S, [N]))  # and as a destination
            for i, j in T.Parallel(N // M, M):
                S[i, j] = S[i, j] * 2.0
            T.copy(S, C)

    return main


@pytest.mark.parametrize("scope", ["shared", "fragment"])
def test_copy_through_a_view_of_an_on_chip_buffer(rng, scope):
    N, M = 1024, 32

    def args():
        return [rand(rng, (N // M, M)), poisoned((N,)), poisoned((N // M, M))]

    def check(a):
        close(a[1], f64(a[0]).reshape(N), 0, 0)
        close(a[2], 2 * f64(a[0]), 0, 0)

    run_everywhere(reshape_on_chip(N, M, scope), args, check)


def test_reshape_to_another_element_count_raises_assertion_error():
    with pytest.raises(AssertionError, match=r"has 1024 elements, shape \(32, 33\) has 1056"):
        reshape_param_bad()


def reshape_param_bad():
    @T.prim_func
    def main(A: T.Tensor((1024,), "float32"), B: T.Tensor((32, 32), "float32")):
        with T.Kernel(1) as _:
            T.copy(T.reshape(A, [32, 33]), B)

    return main


def transpose_tiles(M, N, bm, bn, dtype):
    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((N, M), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            tile = T.alloc_shared((bm, bn), dtype)
            tile_T = T.alloc_shared((bn, bm), dtype)
            T.copy(A[by * bm:(by + 1) * bm, bx * bn:(bx + 1) * bn], tile)
            T.transpose(tile, tile_T)
            T.copy(tile_T, B[bx * bn:(bx + 1) * bn, by * bm:(by + 1) * bm])

    return main


@pytest.mark.parametrize("M,N,bm,bn", [(128, 128, 64, 64), (128, 64, 64, 32)])
def test_transpose_in_shared_memory(rng, M, N, bm, bn):
    def args():
        return [rand(rng, (M, N), "float16"), poisoned((N, M), "float16")]

    run_everywhere(transpose_tiles(M, N, bm, bn, "float16"), args, lambda a: close(a[1], f64(a[0]).T, 0, 0))


def test_transpose_of_mismatched_shapes_is_refused():
    with pytest.raises(CompileError, match=r"T.transpose takes a 2-D tile of shape \(m, n\) and a destination of "
                                           r"shape \(n, m\); got \(64, 32\) and \(64, 32\)"):
        @T.prim_func
        def main(A: T.Tensor((64, 32), "float32")):
            with T.Kernel(1, threads=128) as _:
                S = T.alloc_shared((64, 32), "float32")
                S2 = T.alloc_shared((64, 32), "float32")
                T.copy(A, S)
                T.transpose(S, S2)


# --------------------------------------------------------------------------------------------
# b. T.alloc_global


def through_workspace(N, block_N):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        C = T.alloc_global((N,), "float32")
        with T.Kernel(T.ceildiv(N, block_N), threads=block_N) as bx:
            T.copy(A[bx * block_N:(bx + 1) * block_N], C[bx * block_N:(bx + 1) * block_N])
            for i in T.Parallel(block_N):
                C[bx * block_N + i] = C[bx * block_N + i] * 3.0
            T.copy(C[bx * block_N:(bx + 1) * block_N], B[bx * block_N:(bx + 1) * block_N])

    return main


def test_alloc_global_workspace_with_out_idx(rng):
    N = 1024
    run_everywhere(through_workspace(N, 128), lambda: [rand(rng, (N,))], lambda a: close(a[1], 3 * f64(a[0]), 1e-6, 1e-6),
                   out_idx=[1])


def test_alloc_global_workspace_outputs_passed(rng):
    N = 512
    run_everywhere(through_workspace(N, 64), lambda: [rand(rng, (N,)), poisoned((N,))],
                   lambda a: close(a[1], 3 * f64(a[0]), 1e-6, 1e-6))


def test_alloc_global_sized_by_a_dynamic_dimension(rng):
    n = T.dynamic("n")

    @T.prim_func
    def main(A: T.Tensor((n, 64), "float32"), B: T.Tensor((n, 64), "float32")):
        W = T.alloc_global((n, 64), "float32")
        with T.Kernel(n, threads=64) as bx:
            for j in T.Parallel(64):
                W[bx, j] = A[bx, j] + 1.0
            for j in T.Parallel(64):
                B[bx, j] = W[bx, j] * W[bx, j]

    for rows in (3, 17):
        run_everywhere(main, lambda rows=rows: [rand(rng, (rows, 64))],
                       lambda a: close(a[1], (f64(a[0]) + 1) ** 2, 1e-6, 1e-6), out_idx=[1])


def test_alloc_global_in_the_eager_style(rng):
    @tw.jit(target="interpret")
    def scaled(A, block_N, dtype):
        N = T.const("N")
        A: T.Tensor[[N], dtype]
        B = T.empty([N], dtype=dtype)
        C = T.alloc_global([N], dtype)
        with T.Kernel(T.ceildiv(N, block_N), threads=block_N) as bx:
            T.copy(A[bx * block_N:(bx + 1) * block_N], C[bx * block_N:(bx + 1) * block_N])
            T.copy(C[bx * block_N:(bx + 1) * block_N], B[bx * block_N:(bx + 1) * block_N])
        return B

    a = rand(rng, (256,))
    close(scaled(a, 64, "float32"), f64(a), 0, 0)


# --------------------------------------------------------------------------------------------
# c. atomics


def tile_atomic_add(rows, cols, repeats, dtype):
    @T.prim_func
    def main(V: T.Tensor((rows, cols), dtype), out: T.Tensor((rows, cols), dtype)):
        with T.Kernel(1, threads=64):
            S = T.alloc_shared((rows, cols), dtype)
            T.copy(V, S)
            for _ in range(repeats):
                T.atomic_add(out, S, use_tma=True)

    return main


@pytest.mark.parametrize("rows,cols,repeats", [(16, 16, 16), (16, 24, 1)])
def test_atomic_add_use_tma_gives_the_same_sums(rng, rows, cols, repeats):
    start = rand(rng, (rows, cols))

    def args():
        return [rand(np.random.default_rng(7), (rows, cols)), start.copy()]

    def check(a):
        close(a[1], f64(start) + repeats * f64(a[0]), 1e-5, 1e-5)

    with pytest.warns(TilewrightWarning, match=r"use_tma=True\) has no effect"):
        func = tile_atomic_add(rows, cols, repeats, "float32")
    run_everywhere(func, args, check)


def return_prev_in_parallel(M, N, bm, bn, threads, dtype):
    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype), old: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, bm), T.ceildiv(N, bn), threads=threads) as (bx, by):
            for i, j in T.Parallel(bm, bn):
                ii = bx * bm + i
                jj = by * bn + j
                if ii < M and jj < N:
                    old[ii, jj] = T.atomic_add(B[ii, jj], A[ii, jj], return_prev=True)

    return main


@pytest.mark.parametrize("bm,bn", [(8, 16), (4, 8), (8, 64)], ids=["replicated", "fewer-than-threads", "exact"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_atomic_add_return_prev_in_parallel_loop(rng, bm, bn, dtype):
    """64 threads over 128 positions of float32 (vectors of 4: half the threads would replicate the
    other half), over 32 positions (fewer than the threads) and over exactly 512."""
    M, N = 32, 64
    b0 = rand(rng, (M, N), dtype)

    def args():
        return [rand(np.random.default_rng(3), (M, N), dtype), b0.copy(), poisoned((M, N), dtype)]

    def check(a):
        close(a[2], f64(b0), 0, 0)
        close(a[1], f64(b0) + f64(a[0]), 1e-3, 1e-3)

    targets = TARGETS if dtype == "float32" else TARGETS[:1]  # HIP has no 16-bit atomic add returning the old value
    run_everywhere(return_prev_in_parallel(M, N, bm, bn, 64, dtype), args, check, targets)


def addx_return_prev(n, let_bound, dtype="float32"):
    @T.prim_func
    def main(Dst: T.Tensor((n,), dtype), Val: T.Tensor((n,), dtype), Prev: T.Tensor((n,), dtype)):
        with T.Kernel(1, threads=64):
            if let_bound:
                dst = Dst[0:n]
                val = Val[0:n]
            else:
                dst, val = Dst[0:n], Val[0:n]
            if n == 2:
                Prev[0:n] = T.atomic_addx2(dst, val, return_prev=True)
            else:
                Prev[0:n] = T.atomic_addx4(dst, val, return_prev=True)

    return main


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("let_bound", [False, True])
def test_atomic_addx_return_prev(rng, n, let_bound):
    d0 = rand(rng, (n,))

    def args():
        return [d0.copy(), rand(np.random.default_rng(5), (n,)), poisoned((n,))]

    def check(a):
        close(a[2], f64(d0), 0, 0)
        close(a[0], f64(d0) + f64(a[1]), 1e-6, 1e-6)

    run_everywhere(addx_return_prev(n, let_bound), args, check)


def test_atomic_addx_return_prev_into_a_slice_of_another_length_is_refused():
    with pytest.raises(CompileError, match=r"2 packed values are stored into a slice of 2 consecutive elements"):
        @T.prim_func
        def main(Dst: T.Tensor((4,), "float32"), Prev: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=64):
                Prev[0:4] = T.atomic_addx2(Dst[0:2], Dst[2:4], return_prev=True)


# --------------------------------------------------------------------------------------------
# d. slices with opaque starts, TMA stores, block masks read from fragments


def gather_rows(batch, seq, dim, block):
    @T.prim_func
    def main(Q: T.Tensor((batch, seq, dim), "float16"), O: T.Tensor((batch, seq, dim), "float16")):
        with T.Kernel(seq // block, batch, threads=128) as (bx, by):
            S = T.alloc_shared((block, dim), "float16")
            q_tile = T.if_then_else(by < 1, bx, bx + 1) % (seq // block)  # not affine: an opaque start term
            T.copy(Q[by, q_tile * block:(q_tile + 1) * block, :], S)
            T.copy(S, O[by, bx * block:(bx + 1) * block, :])

    return main


def test_slice_whose_start_is_not_affine(rng):
    batch, seq, dim, block = 3, 256, 64, 64
    tiles = seq // block

    def check(a):
        ref = np.empty((batch, seq, dim))
        for by in range(batch):
            for bx in range(tiles):
                q = (bx if by < 1 else bx + 1) % tiles
                ref[by, bx * block:(bx + 1) * block] = f64(a[0])[by, q * block:(q + 1) * block]
        close(a[1], ref, 0, 0)

    run_everywhere(gather_rows(batch, seq, dim, block),
                   lambda: [rand(rng, (batch, seq, dim), "float16"), poisoned((batch, seq, dim), "float16")], check)


def gemm_tma_store(M, N, K, bm, bn, bk, stages):
    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn), "float16")
            C_s = T.alloc_shared((bm, bn), "float16")
            C_f = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(B[k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C_s)
            T.tma_copy(C_s, C[by * bm, bx * bn])  # TileLang's TMA store: no barrier
            T.tma_store_wait(read=False)

    return main


@pytest.mark.parametrize("stages", [2, 3])
def test_tma_copy_from_shared_to_global_needs_no_barrier(rng, stages):
    M = N = K = 128

    def args():
        return [rand(rng, (M, K), "float16"), rand(rng, (K, N), "float16"), poisoned((M, N), "float16")]

    run_everywhere(gemm_tma_store(M, N, K, 64, 64, 32, stages), args,
                   lambda a: close(a[2], f64(a[0]) @ f64(a[1]), 1e-2, 2e-2))


def blocksparse_copy(M, N, bm, bn, mask_dtype, stages):
    n_s = N // bn

    @T.prim_func
    def main(A: T.Tensor((M, N), "float16"), B: T.Tensor((M, N), "float16"), Mask: T.Tensor((M // bm, n_s), mask_dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm)) as (bx, by):
            A_s = T.alloc_shared((bm, bn), "float16")
            mask_f = T.alloc_fragment((n_s,), mask_dtype)
            T.copy(Mask[by, :], mask_f)
            for i in T.Pipelined(n_s, num_stages=stages):
                a = mask_f[i]  # the same in every thread: the fragment is a block-wide table
                if a >= 0:
                    T.copy(A[a, 0], A_s)
                    T.copy(A_s, B[by * bm:(by + 1) * bm, i * bn:(i + 1) * bn])

    return main


@pytest.mark.parametrize("stages", [1, 2])
def test_block_mask_fragment_steers_tile_copies(rng, stages):
    M = N = 256
    bm = bn = 64
    mask = (rng.integers(0, (M - bm) // bm + 1, (M // bm, N // bn)) * bm).astype(np.int32)
    mask[0, 1] = mask[2, 3] = -1  # blocks left alone

    def check(a):
        for by in range(M // bm):
            for i in range(N // bn):
                got = a[1][by * bm:(by + 1) * bm, i * bn:(i + 1) * bn]
                r = mask[by, i]
                if r >= 0:
                    close(got, f64(a[0])[r:r + bm, 0:bn], 0, 0)
                else:
                    assert np.isnan(got.astype(np.float32)).all(), (by, i)

    run_everywhere(blocksparse_copy(M, N, bm, bn, "int32", stages), lambda: [rand(rng, (M, N), "float16"),
                   poisoned((M, N), "float16"), mask.copy()], check)


def test_fragment_read_outside_parallel_and_reduced_stays_a_fragment():
    """A fragment a reduction writes is per-thread data: a copy under a condition on it is refused."""
    with pytest.raises(CompileError, match=r"T.copy under an `if` that depends on"):
        @T.prim_func
        def main(A: T.Tensor((64, 64), "float32"), B: T.Tensor((64, 64), "float32")):
            with T.Kernel(1, threads=128):
                F = T.alloc_fragment((64, 64), "float32")
                R = T.alloc_fragment((64,), "float32")
                S = T.alloc_shared((64, 64), "float32")
                T.copy(A, F)
                T.reduce_max(F, R, dim=1)
                for k in T.serial(64):
                    if R[k] > 0:
                        T.copy(A, S)
                        T.copy(S, B)


# --------------------------------------------------------------------------------------------
# e. 64-bit dynamic sizes


def fill_symbolic(value, dtype):
    n = T.dynamic("n", "int64")
    block_n = 512

    @T.prim_func
    def main(x: T.Tensor[n, dtype]):
        with T.Kernel(T.ceildiv(n, block_n), threads=128) as bx:
            for i in T.Parallel(block_n):
                x[bx * block_n + i] = value

    return main


@pytest.mark.parametrize("size", [512, 2048])
def test_int64_dynamic_size_runs_for_small_sizes(size):
    run_everywhere(fill_symbolic(1.5, "float32"), lambda: [poisoned((size,))],
                   lambda a: close(a[0], np.full(size, 1.5), 0, 0))


def test_int64_dynamic_size_is_a_64_bit_parameter():
    for target in TARGETS:
        src = tw.compile(fill_symbolic(1.0, "bfloat16"), target=target, execution_backend="emulator").get_kernel_source()
        assert "long long n" in src, target


def test_int64_dynamic_size_accepts_sizes_beyond_int32():
    from tilewright.runtime.launcher import check_dynamic_sizes

    n64, n32 = T.dynamic("n", "int64"), T.dynamic("m")
    check_dynamic_sizes("k", [], {n64: 2**32})
    with pytest.raises(ArgumentError, match=r"the dynamic size m must lie in 0..2147483647"):
        check_dynamic_sizes("k", [], {n32: 2**32})


def test_int32_dynamic_size_beyond_int32_says_how_to_declare_it():
    from tilewright.binding.args import given_dyn

    m = T.dynamic("m")
    with pytest.raises(ArgumentError, match=r"does not fit in int32; declare it m = T.dynamic\('m', 'int64'\)"):
        given_dyn("k", [m], {"m": 2**32})
    assert given_dyn("k", [T.dynamic("n", "int64")], {"n": 2**32})


# --------------------------------------------------------------------------------------------
# f. errors raised as TileLang raises them


def gemm_kernel(M, N, K, threads, policy):
    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, 1, threads=threads):
            A_s = T.alloc_shared((M, K), "float16")
            B_s = T.alloc_shared((K, N), "float16")
            C_f = T.alloc_fragment((M, N), "float32")
            T.clear(C_f)
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, C_f, policy=policy)
            T.copy(C_f, C)

    return main


@pytest.mark.parametrize("target", ["cuda -arch=sm_90a", "cuda -arch=sm_80", "hip -arch=gfx942"])
@pytest.mark.parametrize("M,N,threads", [(16, 104, 384), (288, 8, 544)])
def test_gemm_without_a_warp_partition_says_so_first(target, M, N, threads):
    if target.startswith("hip") and threads % 64:
        threads = threads // 64 * 64 + 64
    with pytest.raises(CompileError, match=r"^No valid warp partition: T.gemm tile .* cannot be split over"):
        tw.compile(gemm_kernel(M, N, 32, threads, T.GemmWarpPolicy.Square), target=target,
                   execution_backend="emulator")


def atomic_load(order):
    @T.prim_func
    def kernel(source: T.Tensor((1,), T.int32), output: T.Tensor((1,), T.int32)):
        with T.Kernel(1, threads=1):
            output[0] = T.atomic_load(source[0], memory_order=order)

    return kernel


def atomic_store(order):
    @T.prim_func
    def kernel(destination: T.Tensor((1,), T.int32)):
        with T.Kernel(1, threads=1):
            T.atomic_store(destination[0], 7, memory_order=order)

    return kernel


@pytest.mark.parametrize("order", ["relaxed", "consume", "acquire", "seq_cst"])
def test_atomic_load_takes_load_orders(order):
    src, out = np.array([41], np.int32), np.array([-1], np.int32)
    tw.compile(atomic_load(order), target="interpret")(src, out)
    assert out[0] == 41


@pytest.mark.parametrize("order", ["release", "acq_rel", "invalid"])
def test_atomic_load_refuses_other_orders_with_value_error(order):
    with pytest.raises(ValueError, match=f"atomic_load does not support memory_order='{order}'"):
        atomic_load(order)


@pytest.mark.parametrize("order", ["relaxed", "release", "seq_cst"])
def test_atomic_store_takes_store_orders(order):
    dst = np.array([-1], np.int32)
    tw.compile(atomic_store(order), target="interpret")(dst)
    assert dst[0] == 7


@pytest.mark.parametrize("order", ["consume", "acquire", "acq_rel", "invalid"])
def test_atomic_store_refuses_other_orders_with_value_error(order):
    with pytest.raises(ValueError, match=f"atomic_store does not support memory_order='{order}'"):
        atomic_store(order)


def test_alloc_var_initializer_beyond_float32_raises_value_error():
    with pytest.raises(ValueError, match="exceeds maximum of float32"):
        @T.prim_func
        def kernel(A: T.Tensor((1,), T.float32)):
            with T.Kernel(1):
                value = T.alloc_var(T.float32, init=1e300)
                A[0] = value


def test_alloc_var_initializer_within_float64_is_kept():
    @T.prim_func
    def kernel(A: T.Tensor((1,), T.float64)):
        with T.Kernel(1):
            value = T.alloc_var(T.float64, init=1e300)
            A[0] = value

    out = np.array([np.nan])
    tw.compile(kernel, target="interpret")(out)
    assert out[0] == 1e300


def assume_kernel():
    N = T.dynamic("N")

    @T.prim_func
    def main(A: T.Tensor((N,), T.float32)):
        with T.Kernel(1, threads=32):
            T.assume(N % 4 == 0)
            tx = T.get_thread_binding()
            if tx < N:
                A[tx] = 1.0

    return main


@pytest.mark.parametrize("target", ["interpret", "cuda -arch=sm_90a"])
def test_assume_on_sizes_is_checked_by_every_call(target):
    kern = tw.compile(assume_kernel(), target=target, execution_backend=None if target == "interpret" else "emulator")
    a = poisoned((8,))
    kern(a)
    close(a, np.ones(8), 0, 0)
    with pytest.raises(RuntimeError, match=r"Assume: N % 4 == 0 does not hold for these arguments \(N=6\)"):
        kern(poisoned((6,)))


def zero_grid():
    n = T.dynamic("num_tokens")

    @T.prim_func
    def kernel(out: T.Tensor[(n,), T.float32]):
        with T.Kernel(n, threads=1) as pid:
            out[pid] = T.float32(1.0)

    return kernel


@pytest.mark.parametrize("target", ["interpret", "cuda -arch=sm_90a"])
def test_zero_grid_dimension_at_launch_raises(target):
    kern = tw.compile(zero_grid(), target=target, execution_backend=None if target == "interpret" else "emulator")
    out = poisoned((4,))
    kern(out)
    close(out, np.ones(4), 0, 0)
    with pytest.raises(ArgumentError, match=r"grid dimension x of T.Kernel is 0 with these argument sizes"):
        kern(np.zeros(0, np.float32))


def test_alloc_global_workspace_is_not_a_profiler_input():
    """The profiler makes inputs for the declared parameters only: a reference sees the same ones."""
    N = 256
    kern = tw.compile(through_workspace(N, 64), target="interpret", out_idx=[1])
    profiler = kern.get_profiler()
    (a,) = profiler.random_inputs()
    assert a.shape == (N,)
    profiler.assert_allclose(lambda a: 3 * f64(a), atol=1e-6, rtol=1e-6)
