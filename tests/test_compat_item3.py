"""Kernels TileLang accepts, accepted here with the right answers (issue 12, item 3).

Each kernel is written as a TileLang user writes it and run in the tile interpreter and, lowered for
``sm_90a`` and ``gfx942``, in the thread-level emulator (race detector on), against float64 NumPy
references with NaN-poisoned outputs:

a. tile operations under a thread-index condition (``if tx < 128: T.copy(...)``, ``T.fill``,
   ``T.gemm``, ``T.reduce_*``; ``T.get_thread_binding()`` and ``T.Kernel(...) as`` thread forms);
b. a conditional body inside ``T.Pipelined`` (block-sparse GEMM);
c. ``T.Parallel`` over a dynamic extent;
d. shared buffers whose size is a symbolic kernel size (known at launch);
e. ``T.Kernel(threads=...)`` with no grid;
f. element-to-element ``T.copy(A[i, j], B[i, j])``;
g. reductions into ``dst[0]`` / a one-element buffer;
h. fragments larger than the register file: local memory and a warning, not a refusal;
i. strided views with dynamic dimensions.
"""

from __future__ import annotations

import numpy as np
import pytest
from zoo import close, f64, poisoned, rand

import tilewright as tw
import tilewright.language as T
from tilewright.interp.emulator import run_thread_kernel

TARGETS = ("cuda -arch=sm_90a", "hip -arch=gfx942")


@pytest.fixture
def rng():
    return np.random.default_rng(12_3)


def run_everywhere(func, make_args, check, targets=TARGETS):
    """Run ``func`` in the interpreter and on the emulator of each target, on fresh arguments each time."""
    args = make_args()
    tw.compile(func, target="interpret")(*args)
    check(args, "interpret")
    for target in targets:
        args = make_args()
        kern = tw.compile(func, target=target, execution_backend="emulator")
        run_thread_kernel(kern.thread_kernel, args, check_races=True)
        check(args, target)


def checked(fn):
    """``check(args, where)`` from ``fn(args)``, naming where a mismatch happened."""
    def check(args, where):
        try:
            fn(args)
        except AssertionError as e:
            raise AssertionError(f"on {where}: {e}") from None
    return check


# --------------------------------------------------------------------------------------------
# a. tile operations under a thread-index condition


def test_fill_and_copy_under_thread_condition(rng):
    """Warpgroup 0 copies A to B through shared memory while warpgroup 1 fills C: each tile op is
    spread over its own 128 threads."""
    n = 256

    @T.prim_func
    def k(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32"), C: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=256) as (bx,):
            tx = T.get_thread_binding()
            S = T.alloc_shared((n,), "float32")
            S2 = T.alloc_shared((n,), "float32")
            if tx < 128:
                T.copy(A[0:n], S)
                T.copy(S, B[0:n])
            else:
                T.fill(S2, 3.0)
                T.copy(S2, C[0:n])

    def args():
        return [rand(rng, (n,)), poisoned((n,)), poisoned((n,))]

    @checked
    def check(a):
        close(a[1], f64(a[0]))
        close(a[2], np.full(n, 3.0))

    run_everywhere(k, args, check)


def test_gemm_and_reduce_under_thread_condition(rng):
    M, N, K = 64, 64, 32

    @T.prim_func
    def k(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32"),
          R: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=256) as (bx,):
            tx = T.get_thread_binding()
            A_s = T.alloc_shared((M, K), "float16")
            B_s = T.alloc_shared((K, N), "float16")
            C_f = T.alloc_fragment((M, N), "float32")
            R_f = T.alloc_fragment((M,), "float32")
            if tx < 128:
                T.copy(A[0, 0], A_s)
                T.copy(B[0, 0], B_s)
                T.clear(C_f)
                T.gemm(A_s, B_s, C_f)
                T.copy(C_f, C[0, 0])
                T.reduce_sum(C_f, R_f, dim=1)
                T.copy(R_f, R[0])

    def args():
        return [rand(rng, (M, K), "float16"), rand(rng, (K, N), "float16"), poisoned((M, N)), poisoned((M,))]

    @checked
    def check(a):
        ref = f64(a[0]) @ f64(a[1])
        close(a[2], ref, rtol=1e-3, atol=1e-3)
        close(a[3], ref.sum(axis=1), rtol=1e-3, atol=1e-3)

    run_everywhere(k, args, check)


def test_thread_binding_from_kernel_frame(rng):
    """The thread index from ``T.get_thread_binding(0)`` and from ``T.thread_binding``'s spelling in the
    frame; the upper warpgroup copies."""
    n = 512

    @T.prim_func
    def k(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=256) as (bx,):
            tx = T.get_thread_binding(0)
            S = T.alloc_shared((n,), "float32")
            if tx >= 128:
                T.copy(A[0:n], S)
                for i in T.Parallel(n):
                    S[i] = S[i] * 2.0
                T.copy(S, B[0:n])

    def args():
        return [rand(rng, (n,)), poisoned((n,))]

    run_everywhere(k, args, checked(lambda a: close(a[1], f64(a[0]) * 2.0)))


@pytest.mark.parametrize("stages", [0, 2])
def test_operand_copies_split_between_warpgroups_in_pipelined_gemm(rng, stages):
    """Warpgroup 0 loads A's tile and warpgroup 1 B's in each step of a (pipelined) K loop, then the
    whole block multiplies: the barriers order the partitions' copies before the gemm."""
    M = N = K = 128

    @T.prim_func
    def k(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=256):
            tx = T.get_thread_binding()
            A_s = T.alloc_shared((M, 32), "float16")
            B_s = T.alloc_shared((32, N), "float16")
            C_f = T.alloc_fragment((M, N), "float32")
            T.clear(C_f)
            for ko in T.Pipelined(K // 32, num_stages=stages):
                if tx < 128:
                    T.copy(A[0, ko * 32], A_s)
                else:
                    T.copy(B[ko * 32, 0], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[0, 0])

    def args():
        return [rand(rng, (M, K), "float16"), rand(rng, (K, N), "float16"), poisoned((M, N))]

    run_everywhere(k, args, checked(lambda a: close(a[2], f64(a[0]) @ f64(a[1]), rtol=1e-3, atol=1e-3)))


def test_thread_condition_and_uniform_condition_together(rng):
    """``if tx < 128 and Flag[bx] > 0:`` (TileLang accepts a thread range combined with a uniform
    condition): the blocks whose flag is set copy with threads 0..127; the others write nothing."""
    n = 256

    @T.prim_func
    def k(A: T.Tensor((4, n), "float32"), Flag: T.Tensor((4,), "int32"), B: T.Tensor((4, n), "float32")):
        with T.Kernel(4, threads=256) as bx:
            tx = T.get_thread_binding()
            S = T.alloc_shared((n,), "float32")
            if tx < 128 and Flag[bx] > 0:
                T.copy(A[bx, 0:n], S)
                T.copy(S, B[bx, 0:n])

    def args():
        return [rand(rng, (4, n)), np.array([1, 0, 1, 1], np.int32), poisoned((4, n))]

    @checked
    def check(a):
        close(a[2][[0, 2, 3]], f64(a[0])[[0, 2, 3]])
        assert np.isnan(a[2][1]).all()

    run_everywhere(k, args, check)


def test_thread_condition_with_per_thread_value_refused():
    from tilewright.errors import CompileError

    with pytest.raises(CompileError, match="per-thread|thread index"):
        @T.prim_func
        def k(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=256):
                tx = T.get_thread_binding()
                v = T.alloc_var("int32", 0)
                v = tx % 3
                if tx < 128 and v == 0:
                    T.copy(A, B)


def test_thread_condition_not_a_range_refused():
    from tilewright.errors import CompileError

    with pytest.raises(CompileError, match="thread index"):
        @T.prim_func
        def k(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=256):
                tx = T.get_thread_binding()
                if tx % 2 == 0:
                    T.copy(A, B)


def test_ws_region_under_thread_conditions(rng):
    """``with T.ws(1):`` inside ``if tx >= 128:`` is warpgroup 1 (every thread of it takes the
    branch); inside ``if tx < 64:`` it is refused (half of warpgroup 0 would never reach it), and
    under a per-thread data condition too -- before, the latter compiled and lost elements."""
    from tilewright.errors import CompileError

    n = 256

    def build(case, n=n):
        @T.prim_func
        def k(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
            with T.Kernel(1, threads=256):
                tx = T.get_thread_binding()
                v = T.alloc_var("int32", 0)
                v = tx % 3
                if case == "covering":
                    if tx >= 128:
                        with T.ws(1):
                            T.copy(A, B)
                elif case == "partial":
                    if tx < 64:
                        with T.ws(0):
                            T.copy(A, B)
                else:
                    if v == 0:
                        with T.ws(0):
                            T.copy(A, B)

        return k

    run_everywhere(build("covering"), lambda: [rand(rng, (n,)), poisoned((n,))],
                   checked(lambda a: close(a[1], f64(a[0]))))
    with pytest.raises(CompileError, match="warp-aligned|whole number of warps"):
        build("partial")
    with pytest.raises(CompileError, match="thread partition warpgroup 0 under an `if`"):
        build("per_thread")


# --------------------------------------------------------------------------------------------
# b. a conditional body inside T.Pipelined: block-sparse GEMM


def block_sparse_gemm(M, N, K, bm, bn, bk, stages, threads=128):
    kb = K // bk

    @T.prim_func
    def k(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), Mask: T.Tensor((M // bm, kb), "bool"),
          C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn), "float16")
            C_f = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_f)
            for ko in T.Pipelined(kb, num_stages=stages):
                if Mask[by, ko]:
                    T.copy(A[by * bm, ko * bk], A_s)
                    T.copy(B[ko * bk, bx * bn], B_s)
                    T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * bm, bx * bn])

    return k


@pytest.mark.parametrize("stages", [0, 2, 3])
def test_block_sparse_gemm_in_pipelined_loop(rng, stages):
    M, N, K, bm, bn, bk = 128, 128, 128, 64, 64, 32
    func = block_sparse_gemm(M, N, K, bm, bn, bk, stages)

    def args():
        mask = rng.random((M // bm, K // bk)) < 0.5
        mask[0, 0] = True
        mask[1] = False  # a row of blocks with nothing: C stays zero there
        return [rand(rng, (M, K), "float16"), rand(rng, (K, N), "float16"), mask, poisoned((M, N))]

    @checked
    def check(a):
        mask = np.repeat(a[2], bk, axis=1)  # (M // bm, K)
        ref = np.zeros((M, N))
        for i in range(M // bm):
            rows = slice(i * bm, (i + 1) * bm)
            ref[rows] = (f64(a[0][rows]) * mask[i]) @ f64(a[1])
        close(a[3], ref, rtol=1e-3, atol=1e-3)

    run_everywhere(func, args, check)


def partly_conditional_gemm(M, N, K, bm, bn, bk, stages, variant):
    """A pipelined K loop whose body is partly conditional: ``copy_cond`` pipelines B's copy while
    A's tile is copied (mask set) or cleared (mask unset) under the condition; ``gemm_cond`` copies
    both and multiplies only where the mask is set."""

    @T.prim_func
    def k(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), Mask: T.Tensor((M // bm, K // bk), "bool"),
          C: T.Tensor((M, N), "float32")):
        with T.Kernel(N // bn, M // bm, threads=128) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn), "float16")
            C_f = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_f)
            for ko in T.Pipelined(K // bk, num_stages=stages):
                if variant == "gemm_cond":
                    T.copy(A[by * bm, ko * bk], A_s)
                    T.copy(B[ko * bk, bx * bn], B_s)
                    if Mask[by, ko]:
                        T.gemm(A_s, B_s, C_f)
                else:
                    T.copy(B[ko * bk, bx * bn], B_s)
                    if Mask[by, ko]:
                        T.copy(A[by * bm, ko * bk], A_s)
                    else:
                        T.clear(A_s)
                    T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * bm, bx * bn])

    return k


@pytest.mark.parametrize("variant", ["copy_cond", "gemm_cond"])
def test_partly_conditional_body_in_pipelined_loop(rng, variant):
    """The unconditional copies are pipelined (cp.async / TMA ring), the conditional part stays in
    the loop body; sm_80 too (its cp.async waits under a per-block condition)."""
    M, N, K, bm, bn, bk = 256, 128, 128, 128, 128, 32
    func = partly_conditional_gemm(M, N, K, bm, bn, bk, 2, variant)

    def args():
        mask = rng.random((M // bm, K // bk)) < 0.5
        mask[0, 0], mask[1, 0] = True, False
        return [rand(rng, (M, K), "float16"), rand(rng, (K, N), "float16"), mask, poisoned((M, N))]

    @checked
    def check(a):
        mask = np.repeat(a[2], bk, axis=1)
        ref = np.zeros((M, N))
        for i in range(M // bm):
            rows = slice(i * bm, (i + 1) * bm)
            ref[rows] = (f64(a[0][rows]) * mask[i]) @ f64(a[1])
        close(a[3], ref, rtol=1e-3, atol=1e-3)

    run_everywhere(func, args, check, targets=("cuda -arch=sm_80",) + TARGETS)


def tilelang_block_sparse_gemm(M, N, K, bm, bn, bk, stages, threads=128):
    """The block-sparse GEMM as TileLang's example writes it: a mask per (row block, column block,
    k block), rasterized blocks, the result through a shared tile."""
    mask_shape = (M // bm, N // bn, K // bk)

    @T.prim_func
    def k(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), BlockMask: T.Tensor(mask_shape, "bool"),
          C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            A_shared = T.alloc_shared((bm, bk), "float16")
            B_shared = T.alloc_shared((bk, bn), "float16")
            C_local = T.alloc_fragment((bm, bn), "float32")
            C_shared = T.alloc_shared((bm, bn), "float16")
            T.use_swizzle(panel_size=10, enable=True)
            T.clear(C_local)
            for ko in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                if BlockMask[by, bx, ko]:
                    T.copy(A[by * bm, ko * bk], A_shared)
                    T.copy(B[ko * bk, bx * bn], B_shared)
                    T.gemm(A_shared, B_shared, C_local)
            T.copy(C_local, C_shared)
            T.copy(C_shared, C[by * bm, bx * bn])

    return k


def block_sparse_ref(a, b, mask, bm, bn, bk):
    M, N = a.shape[0], b.shape[1]
    ref = np.zeros((M, N))
    for i, j, kk in zip(*np.nonzero(mask)):
        ref[i * bm:(i + 1) * bm, j * bn:(j + 1) * bn] += \
            f64(a[i * bm:(i + 1) * bm, kk * bk:(kk + 1) * bk]) @ f64(b[kk * bk:(kk + 1) * bk, j * bn:(j + 1) * bn])
    return ref


@pytest.mark.parametrize("stages", [2, 3])
def test_tilelang_block_sparse_gemm(rng, stages, size=(256, 256, 128)):
    M, N, K = size
    bm, bn, bk = 128, 128, 32
    func = tilelang_block_sparse_gemm(M, N, K, bm, bn, bk, stages)

    def args():
        mask = rng.random((M // bm, N // bn, K // bk)) < 0.5
        mask[0, 0, :] = True
        mask[-1, -1, :] = False
        return [rand(rng, (M, K), "float16"), rand(rng, (K, N), "float16"), mask, poisoned((M, N), "float16")]

    run_everywhere(func, args, checked(lambda a: close(a[3], block_sparse_ref(a[0], a[1], a[2], bm, bn, bk),
                                                       rtol=1e-2, atol=2e-2)))


# --------------------------------------------------------------------------------------------
# e. T.Kernel(threads=...) with no grid: one block


def test_kernel_without_grid_is_one_block(rng):
    n = 256

    @T.prim_func
    def k(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(threads=128):
            S = T.alloc_shared((n,), "float32")
            T.copy(A, S)
            for i in T.Parallel(n):
                B[i] = S[n - 1 - i] + 1.0

    def args():
        return [rand(rng, (n,)), poisoned((n,))]

    run_everywhere(k, args, checked(lambda a: close(a[1], f64(a[0])[::-1] + 1.0)))
    assert [str(g) for g in tw.compile(k, target="cuda -arch=sm_90a", execution_backend="emulator").spec.grid] == ["1"]


# --------------------------------------------------------------------------------------------
# f. element-to-element T.copy


def test_element_to_element_copy(rng):
    """``T.copy(A[i, j], B[j, i])`` copies one element (converting its dtype), here a transpose
    through a shared row and a fragment element written back."""
    n = 16

    @T.prim_func
    def k(A: T.Tensor((n, n), "float32"), B: T.Tensor((n, n), "float16"), D: T.Tensor((n,), "float32"),
          E: T.Tensor((n, n), "float32")):
        with T.Kernel(n, threads=64) as bx:
            S = T.alloc_shared((n,), "float32")
            F = T.alloc_fragment((n,), "float32")
            G = T.alloc_fragment((n,), "float32")
            for j in T.serial(n):
                T.copy(A[bx, j], S[j])
            for j in T.serial(n):
                T.copy(S[j], B[j, bx])
            T.copy(S, F)
            T.copy(F[3], D[bx])
            for j in T.Parallel(n):  # inside T.Parallel: each iteration's own element
                T.copy(F[n - 1 - j], G[j])
            for j in T.Parallel(n):
                T.copy(G[j], E[bx, j])

    def args():
        return [rand(rng, (n, n)), poisoned((n, n), "float16"), poisoned((n,)), poisoned((n, n))]

    @checked
    def check(a):
        close(a[1], f64(a[0]).T, rtol=1e-3, atol=1e-3)
        close(a[2], f64(a[0])[:, 3])
        close(a[3], f64(a[0])[:, ::-1])

    run_everywhere(k, args, check)


# --------------------------------------------------------------------------------------------
# g. reductions into dst[0] and into a scalar


def test_reduce_into_one_element_buffer_subscript(rng):
    M, N = 64, 32

    @T.prim_func
    def k(A: T.Tensor((M, N), "float32"), B: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=128):
            F = T.alloc_fragment((M, N), "float32")
            R = T.alloc_fragment((M,), "float32")
            Tot = T.alloc_fragment((1,), "float32")
            T.copy(A, F)
            T.reduce_max(F, R, dim=1)
            T.reduce_sum(R, Tot[0], dim=0)
            T.copy(Tot, B)

    def args():
        return [rand(rng, (M, N)), poisoned((1,))]

    run_everywhere(k, args, checked(lambda a: close(a[1], [f64(a[0]).max(axis=1).sum()])))


def test_reduce_into_scalar_var_seen_by_every_thread(rng):
    """``T.reduce_sum(F, s)`` with ``s = T.alloc_var(...)``: every thread holds the total (used in a
    T.Parallel that spans all threads); ``clear=False`` adds onto the value s held."""
    n = 256

    @T.prim_func
    def k(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32"), C: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=128):
            F = T.alloc_fragment((n,), "float32")
            s = T.alloc_var("float32")
            m = T.alloc_var("float32", 10.0)
            T.copy(A, F)
            T.reduce_sum(F, s, dim=0)
            T.reduce_max(F, m, dim=0, clear=False)
            for i in T.Parallel(n):
                B[i] = A[i] / s
            C[0] = m

    def args():
        return [rand(rng, (n,), lo=0.5, hi=2.0), poisoned((n,)), poisoned((1,))]

    @checked
    def check(a):
        close(a[1], f64(a[0]) / f64(a[0]).sum())
        close(a[2], [10.0])

    run_everywhere(k, args, check)


def test_reduce_into_one_element_local(rng):
    """``T.reduce_absmax(F, L, dim=0)`` with ``L = T.alloc_local((1,), ...)``: each row's scale,
    held by every thread."""

    @T.prim_func
    def k(A: T.Tensor((4, 128), "float32"), B: T.Tensor((4, 128), "float32")):
        with T.Kernel(4, threads=128) as bx:
            F = T.alloc_fragment((128,), "float32")
            L = T.alloc_local((1,), "float32")
            T.copy(A[bx, :], F)
            T.reduce_absmax(F, L, dim=0)
            for i in T.Parallel(128):
                B[bx, i] = A[bx, i] / L[0]

    def args():
        return [rand(rng, (4, 128)), poisoned((4, 128))]

    run_everywhere(k, args, checked(lambda a: close(a[1], f64(a[0]) / np.abs(f64(a[0])).max(axis=1, keepdims=True))))


def test_reduce_into_part_of_a_buffer_refused():
    from tilewright.errors import CompileError

    with pytest.raises(CompileError, match="whole buffer") as e:
        @T.prim_func
        def k(A: T.Tensor((64,), "float32"), B: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=64):
                F = T.alloc_fragment((64,), "float32")
                R = T.alloc_fragment((4,), "float32")
                T.copy(A, F)
                T.reduce_sum(F, R[1], dim=0)
                T.copy(R, B)
    assert "R[1]" in str(e.value) or "line" in str(e.value)


# --------------------------------------------------------------------------------------------
# c. T.Parallel over an extent known only at launch


def test_parallel_over_kernel_argument(rng):
    """``T.Parallel(n)`` with ``n`` an int32 argument: elements n.. stay untouched (still NaN)."""
    size = 1000

    @T.prim_func
    def k(A: T.Tensor((size,), "float32"), B: T.Tensor((size,), "float32"), n: T.int32):
        with T.Kernel(1, threads=128):
            for i in T.Parallel(n):
                B[i] = A[i] * 2.0

    for n in (1, 130, 777):
        def args(n=n):
            return [rand(rng, (size,)), poisoned((size,)), n]

        @checked
        def check(a, n=n):
            close(a[1][:n], f64(a[0])[:n] * 2.0)
            assert np.isnan(a[1][n:]).all()

        run_everywhere(k, args, check)


def test_parallel_over_symbolic_rows_through_shared(rng):
    """``T.Parallel(N, 64)`` with N a T.dynamic size, over a shared tile of N rows...  the rows a
    block handles: at most 8, a ragged last block; written to shared and read back reversed."""
    N = T.dynamic("N")

    @T.prim_func
    def k(A: T.Tensor((N, 64), "float32"), B: T.Tensor((N, 64), "float32")):
        with T.Kernel(T.ceildiv(N, 8), threads=128) as bx:
            S = T.alloc_shared((8, 64), "float32")
            rows = T.min(8, N - bx * 8)
            for i, j in T.Parallel(rows, 64):
                S[i, j] = A[bx * 8 + i, j] + 1.0
            for i, j in T.Parallel(rows, 64):
                B[bx * 8 + i, j] = S[rows - 1 - i, 63 - j]

    def ref(a):
        out = np.empty_like(f64(a))
        for b0 in range(0, a.shape[0], 8):
            blk = f64(a[b0:b0 + 8]) + 1.0
            out[b0:b0 + 8] = blk[::-1, ::-1]
        return out

    for rows in (8, 37):
        def args(rows=rows):
            return [rand(rng, (rows, 64)), poisoned((rows, 64))]

        run_everywhere(k, args, checked(lambda a: close(a[1], ref(a[0]))))


def test_parallel_over_two_symbolic_dims(rng):
    M, N = T.dynamic("M"), T.dynamic("N")

    @T.prim_func
    def k(A: T.Tensor((M, N), "float32"), B: T.Tensor((N, M), "float32")):
        with T.Kernel(1, threads=64):
            for i, j in T.Parallel(M, N):
                B[j, i] = A[i, j] - 0.5

    def args():
        return [rand(rng, (13, 21)), poisoned((21, 13))]

    run_everywhere(k, args, checked(lambda a: close(a[1], f64(a[0]).T - 0.5)))


def test_parallel_over_kernel_argument_in_each_warpgroup(rng):
    """Run-time-extent T.Parallel loops inside the two branches of ``if tx < 128``: each spread over
    its warpgroup's threads."""

    @T.prim_func
    def k(A: T.Tensor((1000,), "float32"), B: T.Tensor((1000,), "float32"), C: T.Tensor((1000,), "float32"),
          n: T.int32):
        with T.Kernel(1, threads=256):
            tx = T.get_thread_binding()
            if tx < 128:
                for i in T.Parallel(n):
                    B[i] = A[i] * 2.0
            else:
                for i in T.Parallel(n):
                    C[i] = A[i] + 1.0

    def args():
        return [rand(rng, (1000,)), poisoned((1000,)), poisoned((1000,)), 900]

    @checked
    def check(a):
        close(a[1][:900], f64(a[0])[:900] * 2.0)
        close(a[2][:900], f64(a[0])[:900] + 1.0)
        assert np.isnan(a[1][900:]).all() and np.isnan(a[2][900:]).all()

    run_everywhere(k, args, check)


def test_parallel_dynamic_extent_over_fragment_refused():
    from tilewright.errors import CompileError

    with pytest.raises(CompileError, match="fragment") as e:
        @T.prim_func
        def k(A: T.Tensor((64,), "float32"), n: T.int32):
            with T.Kernel(1, threads=64):
                F = T.alloc_fragment((64,), "float32")
                T.copy(A, F)
                for i in T.Parallel(n):
                    F[i] = F[i] * 2.0  # the refused line
                T.copy(F, A)
    assert "F[i] = F[i] * 2.0  # the refused line" in str(e.value)


def test_parallel_extent_from_thread_index_refused():
    from tilewright.errors import CompileError

    with pytest.raises(CompileError, match="thread index"):
        @T.prim_func
        def k(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64):
                tx = T.get_thread_binding()
                for i in T.Parallel(tx + 1):
                    A[i] = 0.0


# --------------------------------------------------------------------------------------------
# h. fragments beyond the register file: local memory and a warning


def test_fragment_beyond_register_file_compiles_with_a_warning(rng):
    """A (128, 256) float32 fragment over 32 threads is 1024 registers per thread (four times the
    register file): compiled, with a warning naming the fragment, and right on the emulator."""
    from tilewright.errors import TilewrightWarning

    M, N = 128, 256

    @T.prim_func
    def k(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=32):
            F = T.alloc_fragment((M, N), "float32")
            T.copy(A, F)
            for i, j in T.Parallel(M, N):
                F[i, j] = F[i, j] * 3.0 + 1.0
            T.copy(F, B)

    with pytest.warns(TilewrightWarning, match=r"F\(128, 256\).*local memory"):
        kern = tw.compile(k, target="cuda -arch=sm_90a", execution_backend="emulator")
    a = [rand(rng, (M, N)), poisoned((M, N))]
    run_thread_kernel(kern.thread_kernel, a, check_races=True)
    close(a[1], f64(a[0]) * 3.0 + 1.0)
    a = [rand(rng, (M, N)), poisoned((M, N))]
    tw.compile(k, target="interpret")(*a)
    close(a[1], f64(a[0]) * 3.0 + 1.0)


# --------------------------------------------------------------------------------------------
# i. strided tensors with dynamic dimensions and strides: element by element where vectors can't


def test_column_major_tensor_of_dynamic_size_both_directions(rng):
    """A column-major (M, K) tensor, M and K symbolic (its innermost stride is M, known only at
    launch): read into shared and fragment tiles, written back column-major, ragged last block."""
    M, K = T.dynamic("M"), T.dynamic("K")

    @T.prim_func
    def k(A: T.Tensor((M, K), "float16", strides=(1, M)), B: T.Tensor((M, K), "float16", strides=(1, M)),
          C: T.Tensor((M, K), "float32")):
        with T.Kernel(T.ceildiv(M, 64), threads=128) as bx:
            S = T.alloc_shared((64, 32), "float16")
            F = T.alloc_fragment((64, 32), "float32")
            T.copy(A[bx * 64, 0], S)
            T.copy(A[bx * 64, 0], F)
            T.copy(S, B[bx * 64, 0])
            T.copy(F, C[bx * 64, 0])

    def args():
        return [np.asfortranarray(rand(rng, (100, 32), "float16")), np.asfortranarray(poisoned((100, 32), "float16")),
                poisoned((100, 32))]

    @checked
    def check(a):
        close(a[1], f64(a[0]))
        close(a[2], f64(a[0]))

    run_everywhere(k, args, check)


def test_pipelined_gemm_over_column_major_operand(rng):
    """A pipelined GEMM whose A is column-major with a symbolic M: the pipelined copies of A cannot
    use TMA or vectors (a run-time stride), they load element by element."""
    M = T.dynamic("M")
    K, N = 64, 64

    @T.prim_func
    def k(A: T.Tensor((M, K), "float16", strides=(1, M)), B: T.Tensor((K, N), "float16"),
          C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(M, 64), threads=128) as bx:
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((32, N), "float16")
            C_f = T.alloc_fragment((64, N), "float32")
            T.clear(C_f)
            for ko in T.Pipelined(K // 32, num_stages=2):
                T.copy(A[bx * 64, ko * 32], A_s)
                T.copy(B[ko * 32, 0], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[bx * 64, 0])

    def args():
        return [np.asfortranarray(rand(rng, (100, K), "float16")), rand(rng, (K, N), "float16"), poisoned((100, N))]

    run_everywhere(k, args, checked(lambda a: close(a[2], f64(a[0]) @ f64(a[1]), rtol=1e-3, atol=1e-3)))


# --------------------------------------------------------------------------------------------
# d. shared buffers sized at launch


def dynamic_rows_reversed():
    """Rows of a (N, 64) tensor staged in a shared buffer of N rows (N symbolic) and written back
    in reverse order, the rows scaled by a kernel argument; the shared buffer follows a static one."""
    N = T.dynamic("N")

    @T.prim_func
    def k(A: T.Tensor((N, 64), "float32"), B: T.Tensor((N, 64), "float32"), scale: T.float32):
        with T.Kernel(1, threads=128):
            W = T.alloc_shared((64,), "float32")
            S = T.alloc_shared((N, 64), "float32")
            T.fill(W, scale)
            T.copy(A, S)
            for i, j in T.Parallel(N, 64):
                B[i, j] = S[N - 1 - i, j] * W[j]

    return k


def test_shared_buffer_sized_at_launch(rng):
    k = dynamic_rows_reversed()
    for rows in (1, 77, 150):
        def args(rows=rows):
            return [rand(rng, (rows, 64)), poisoned((rows, 64)), 1.5]

        run_everywhere(k, args, checked(lambda a: close(a[1], f64(a[0])[::-1] * 1.5)))


def test_shared_size_at_launch_reaches_the_launcher():
    """The launch spec carries the bytes expression; the launcher evaluates it per call, and a size
    over the target's shared memory is an ArgumentError naming the buffer (emulator here)."""
    from tilewright.errors import ArgumentError
    from tilewright.ir.analysis import eval_expr

    k = dynamic_rows_reversed()
    kern = tw.compile(k, target="hip -arch=gfx942", execution_backend="emulator")
    expr, name, base = kern.spec.shared_at_launch
    assert name == "S" and base >= 64 * 4
    n_var = kern.spec.dyn_vars[0]  # (a compile may be shared by equal functions: the spec's own symbol)
    assert eval_expr(expr, {n_var: 10}) == base + 10 * 64 * 4
    assert kern.spec.shared_bytes == 64 * 1024  # what the kernel addresses: the target's limit
    too_many = (64 * 1024 - base) // (64 * 4) + 1
    a = [np.zeros((too_many, 64), np.float32), np.zeros((too_many, 64), np.float32), 1.0]
    with pytest.raises(ArgumentError, match="shared buffer S"):
        run_thread_kernel(kern.thread_kernel, a)


def test_shared_size_at_launch_survives_pickling_and_the_disk_cache():
    """Worker processes get the spec pickled; the disk cache keeps the buffer's offset and rebuilds
    the expression from the function: both evaluate as the compiled spec does."""
    import pickle

    from tilewright.compiler import _cache_meta, _spec_from_cache
    from tilewright.ir.analysis import eval_expr
    from tilewright.target.base import Target

    func = dynamic_rows_reversed()
    kern = tw.compile(func, target="cuda -arch=sm_90a", execution_backend="emulator")
    want = eval_expr(kern.spec.shared_at_launch[0], {kern.spec.dyn_vars[0]: 100})
    spec = pickle.loads(pickle.dumps(kern.spec))
    assert eval_expr(spec.shared_at_launch[0], {spec.dyn_vars[0]: 100}) == want
    entry = dict(_cache_meta(kern.spec), code_object=b"", source="")
    cached = _spec_from_cache(func, Target.parse("cuda -arch=sm_90a"), entry)
    assert eval_expr(cached.shared_at_launch[0], {cached.dyn_vars[0]: 100}) == want
    assert cached.shared_at_launch[1:] == kern.spec.shared_at_launch[1:]


def test_copy_of_symbolic_length_into_dynamic_shared(rng):
    """TileLang's feature-request shape: a 1-D buffer of the argument's length, copied in with a
    slice 0:len and out whole."""
    n = T.dynamic("n")

    @T.prim_func
    def k(X: T.Tensor((n,), "int32"), Y: T.Tensor((n,), "int32")):
        with T.Kernel(1, threads=64):
            S = T.alloc_shared((n,), "int32")
            T.copy(X[0:n], S)
            for i in T.Parallel(n):
                S[i] = S[i] * 2 + 1
            T.copy(S, Y)

    def args():
        return [rng.integers(-1000, 1000, size=333).astype(np.int32), np.full(333, -7, np.int32)]

    run_everywhere(k, args, checked(lambda a: np.testing.assert_array_equal(a[1], a[0] * 2 + 1)))


def test_tiles_of_a_dynamic_shared_buffer_through_fragments(rng):
    """Compile-time tiles (16 rows) of a shared buffer of N rows, N not a multiple of 16: staged from
    global, read into a fragment, scaled, written out; the rows past N are not read (zero) and not
    written, as for a global tensor."""
    N = T.dynamic("N")

    @T.prim_func
    def k(A: T.Tensor((N, 64), "float16"), B: T.Tensor((N, 64), "float32")):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((N, 64), "float16")
            F = T.alloc_fragment((16, 64), "float32")
            for r in T.serial(T.ceildiv(N, 16)):
                T.copy(A[r * 16, 0], S[r * 16:r * 16 + 16, :])
            for r in T.serial(T.ceildiv(N, 16)):
                T.copy(S[r * 16:r * 16 + 16, :], F)
                for i, j in T.Parallel(16, 64):
                    F[i, j] = F[i, j] * 2.0 + 1.0
                T.copy(F, B[r * 16, 0])

    for rows in (70, 16):
        def args(rows=rows):
            return [rand(rng, (rows, 64), "float16"), poisoned((rows, 64))]

        run_everywhere(k, args, checked(lambda a: close(a[1], f64(a[0]) * 2.0 + 1.0)))


def _refused(build, *words):
    from tilewright.errors import CompileError

    with pytest.raises(CompileError) as e:
        build()
    for w in words:
        assert w in str(e.value), str(e.value)


def test_dynamic_shared_refusals():
    def two_buffers():
        n = T.dynamic("n")

        @T.prim_func
        def k(X: T.Tensor((n,), "float32")):
            with T.Kernel(1, threads=64):
                S = T.alloc_shared((n,), "float32")
                S2 = T.alloc_shared((n,), "float32")
                T.copy(X, S)
                T.copy(S, S2)
                T.copy(S2, X)

    def reduce_on_it():
        n = T.dynamic("n")

        @T.prim_func
        def k(X: T.Tensor((16, n), "float32"), Z: T.Tensor((16,), "float32")):
            with T.Kernel(1, threads=128):
                S = T.alloc_shared((16, n), "float32")
                R = T.alloc_fragment((16,), "float32")
                T.copy(X, S)
                T.reduce_sum(S, R, dim=1)
                T.copy(R, Z)

    def sized_by_block():
        @T.prim_func
        def k(X: T.Tensor((64,), "float32")):
            with T.Kernel(4, threads=64) as bx:
                S = T.alloc_shared((bx + 1,), "float32")
                T.fill(S, 0.0)

    _refused(two_buffers, "second shared buffer")
    _refused(reduce_on_it, "Reduce", "compile-time tile shape")
    _refused(sized_by_block, "not known when the kernel is launched")


def test_parallel_over_strided_tensor_of_dynamic_length(rng):
    """A 1-D tensor of symbolic length and symbolic stride (a strided view), read in a T.Parallel
    over its run-time length: element by element, for contiguous and every-other-element views."""
    n, stride = T.dynamic("n"), T.dynamic("stride")

    @T.prim_func
    def k(x: T.Tensor((n,), "int32", strides=(stride,)), y: T.Tensor((n,), "int32")):
        with T.Kernel(1, threads=64):
            for i in T.Parallel(n):
                result = x[i] + 3
                y[i] = result

    for step, length in ((1, 17), (2, 39), (3, 130)):
        def args(step=step, length=length):
            base = rng.integers(-100, 100, size=step * length).astype(np.int32)
            return [base[::step], np.full(length, -7, np.int32)]

        run_everywhere(k, args, checked(lambda a: np.testing.assert_array_equal(a[1], a[0] + 3)))


def test_no_room_left_for_a_dynamic_shared_buffer_refused():
    """The buffers of compile-time size take all of gfx942's 64 KiB: nothing is left for the one
    sized at launch; refused at compile time, naming the large buffer."""
    from tilewright.errors import CompileError

    n = T.dynamic("n")

    @T.prim_func
    def k(X: T.Tensor((n,), "float32"), Y: T.Tensor((16384,), "float32")):
        with T.Kernel(1, threads=64):
            Big = T.alloc_shared((16384,), "float32")
            S = T.alloc_shared((n,), "float32")
            T.copy(Y, Big)
            T.copy(X, S)
            T.copy(S, X)
            T.copy(Big, Y)

    with pytest.raises(CompileError, match=r"65536 bytes of shared memory.*Big") as e:
        tw.compile(k, target="hip -arch=gfx942", execution_backend="emulator")
    assert "S (" not in str(e.value)
