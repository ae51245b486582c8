"""Fragments indexed by serial loop variables inside ``T.Parallel`` (issue 12 item 3, part 1).

TileLang reads ``src[i, k]`` in a ``T.Parallel(K)`` loop inside ``for i in T.serial(4)`` as each
thread's own element: the register is an expression of ``i`` when every thread holds its elements
(``lowering_context.frag_register``); a fragment of a layout the compiler chose is otherwise read
through shared memory, and a T.gemm accumulator read along a serial loop over its thread-distributed
dimension is refused with TileLang's words ("thread-distributed fragment", "T.reduce_sum").

Each kernel runs in the tile interpreter and, lowered for ``sm_90a`` and ``gfx942``, in the thread-level
emulator (race detector on), on fresh random inputs with NaN-poisoned outputs, against float64 NumPy
references.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_compat_refusals import run_everywhere
from zoo import close, f64, poisoned, rand

import tilewright as tw
import tilewright.language as T
from tilewright.errors import CompileError

TARGETS = ("cuda -arch=sm_90a", "hip -arch=gfx942")


@pytest.fixture
def rng():
    return np.random.default_rng(2026_1202)


def register_along_serial_loop(K):
    """rs holds the row sums of src (thread k holds row k of both): src[k, i] is register i."""
    @T.prim_func
    def main(A: T.Tensor((K, 4), "float32"), B: T.Tensor((K,), "float32")):
        with T.Kernel(1, threads=128):
            src = T.alloc_fragment((K, 4), "float32")
            rs = T.alloc_fragment((K,), "float32")
            T.copy(A, src)
            T.reduce_sum(src, rs, dim=1)
            for i in T.serial(4):
                for k in T.Parallel(K):
                    rs[k] = rs[k] * 0.5 + src[k, i] * (i + 1)
            T.copy(rs, B)

    return main


def test_register_indexed_by_a_serial_loop_variable(rng):
    K = 128
    func = register_along_serial_loop(K)

    def check(args):
        a, b = args
        want = f64(a).sum(axis=1)
        for i in range(4):
            want = want * 0.5 + f64(a)[:, i] * (i + 1)
        close(b, want)

    run_everywhere(func, lambda: (rand(rng, (K, 4)), poisoned((K,))), check)
    src = tw.compile(func, target="cuda -arch=sm_90a").get_kernel_source()
    assert "src[i]" in src  # the register is the loop variable itself, no shared-memory round trip
    assert "xchg" not in src


def reducer_rows(K, two_loops):
    """TileLang's reducer_v2 wide plan: serial loops outside, T.Parallel over the fragment's columns."""
    if two_loops:
        @T.prim_func
        def main(A: T.Tensor((4, K), "float32"), A2: T.Tensor((4, K), "float32"), B: T.Tensor((4, 4), "float32")):
            with T.Kernel(1, threads=128):
                src = T.alloc_fragment((4, K), "float32")
                src2 = T.alloc_fragment((4, K), "float32")
                T.copy(A, src)
                T.copy(A2, src2)
                acc = T.alloc_reducer((4, 4), "float32", op="sum")
                T.reducer_init(acc)
                for i in T.serial(4):
                    for j in T.serial(4):
                        for k in T.Parallel(K):
                            T.reducer_update(acc[i, j], src[i, k] * src2[j, k])
                result = T.alloc_fragment((4, 4), "float32")
                T.finalize_reducer(acc, result)
                T.copy(result, B)
        return main

    @T.prim_func
    def main(A: T.Tensor((4, K), "float32"), B: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=128):
            src = T.alloc_fragment((4, K), "float32")
            T.copy(A, src)
            acc = T.alloc_reducer((4,), "float32", op="sum")
            T.reducer_init(acc)
            for i in T.serial(4):
                for k in T.Parallel(K):
                    T.reducer_update(acc[i], src[i, k])
            result = T.alloc_fragment((4,), "float32")
            T.finalize_reducer(acc, result)
            T.copy(result, B)

    return main


def test_reducer_over_fragment_rows_picked_by_serial_loops(rng):
    K = 256
    run_everywhere(reducer_rows(K, False), lambda: (rand(rng, (4, K)), poisoned((4,))),
                   lambda args: close(args[1], f64(args[0]).sum(axis=1), rtol=1e-5, atol=1e-4))
    run_everywhere(reducer_rows(K, True), lambda: (rand(rng, (4, K)), rand(rng, (4, K)), poisoned((4, 4))),
                   lambda args: close(args[2], f64(args[0]) @ f64(args[1]).T, rtol=1e-5, atol=1e-4))


def serial_inside_parallel(n, hc, h, hb):
    """deepseek_mhc's mhc_post: a serial loop inside T.Parallel reads b_local[i_hci, i1_h]."""
    @T.prim_func
    def main(a: T.Tensor((n, hc, hc), "float32"), b: T.Tensor((n, hc, h), "float32"),
             c: T.Tensor((n, hc), "float32"), d: T.Tensor((n, h), "float32"), x: T.Tensor((n, hc, h), "float32")):
        with T.Kernel(n, threads=128) as i_n:
            x_shared = T.alloc_shared((hc, hb), "float32")
            b_shared = T.alloc_shared((hc, hb), "float32")
            d_shared = T.alloc_shared(hb, "float32")
            x_local = T.alloc_fragment((hc, hb), "float32")
            b_local = T.alloc_fragment((hc, hb), "float32")
            d_local = T.alloc_fragment(hb, "float32")
            a_local = T.alloc_fragment((hc, hc), "float32")
            c_local = T.alloc_fragment(hc, "float32")
            T.copy(a[i_n, 0, 0], a_local)
            T.copy(c[i_n, 0], c_local)
            for i0_h in T.Pipelined(T.ceildiv(h, hb), num_stages=2):
                T.copy(b[i_n, 0, i0_h * hb], b_shared)
                T.copy(d[i_n, i0_h * hb], d_shared)
                T.copy(b_shared, b_local)
                T.copy(d_shared, d_local)
                for i_hco, i1_h in T.Parallel(hc, hb):
                    x_local[i_hco, i1_h] = c_local[i_hco] * d_local[i1_h]
                    for i_hci in T.serial(hc):
                        x_local[i_hco, i1_h] += a_local[i_hci, i_hco] * b_local[i_hci, i1_h]
                T.copy(x_local, x_shared)
                T.copy(x_shared, x[i_n, 0, i0_h * hb])

    return main


def test_serial_loop_inside_parallel_reads_a_fragment(rng):
    n, hc, h, hb = 2, 4, 512, 256
    func = serial_inside_parallel(n, hc, h, hb)

    def make():
        return (rand(rng, (n, hc, hc)), rand(rng, (n, hc, h)), rand(rng, (n, hc)), rand(rng, (n, h)),
                poisoned((n, hc, h)))

    def check(args):
        a, b, c, d, x = (f64(v) for v in args)
        close(args[4], c[:, :, None] * d[:, None, :] + np.einsum("nio,nih->noh", a, b), rtol=1e-5, atol=1e-4)

    run_everywhere(func, make, check)


def split_rows(S, BM, N):
    """flash_decoding's combine: rows lse_local[k, :] picked by a pipelined loop variable."""
    @T.prim_func
    def main(L: T.Tensor((S, N), "float32"), O: T.Tensor((N,), "float32")):
        with T.Kernel(N // BM, threads=128) as bx:
            lse_local = T.alloc_fragment([S, BM], "float32")
            split = T.alloc_fragment([BM], "float32")
            mx = T.alloc_fragment([BM], "float32")
            tot = T.alloc_fragment([BM], "float32")
            T.copy(L[:, bx * BM:(bx + 1) * BM], lse_local)
            T.reduce_max(lse_local, mx, dim=0, clear=True)
            T.clear(tot)
            for k in T.Pipelined(S):
                T.copy(lse_local[k, :], split)
                for i in T.Parallel(BM):
                    tot[i] += T.exp2(split[i] - mx[i])
            for k in T.serial(S):
                for i in T.Parallel(BM):
                    tot[i] += lse_local[k, i]
            T.copy(tot, O[bx * BM:(bx + 1) * BM])

    return main


def test_fragment_rows_picked_by_a_pipelined_loop(rng):
    S, BM, N = 4, 64, 256
    func = split_rows(S, BM, N)

    def check(args):
        a = f64(args[0])
        close(args[1], np.exp2(a - a.max(axis=0)).sum(axis=0) + a.sum(axis=0), rtol=1e-5, atol=1e-4)

    run_everywhere(func, lambda: (rand(rng, (S, N)), poisoned((N,))), check)


def serial_reduce_of_gemm_output(M, N, KD):
    """TileLang issue 2393: a serial loop over a gemm accumulator's row, which four threads share."""
    @T.prim_func
    def main(Q: T.Tensor((M, KD), "float16"), Kk: T.Tensor((N, KD), "float16"), out: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=128):
            Qs = T.alloc_shared((M, KD), "float16")
            Ks = T.alloc_shared((N, KD), "float16")
            acc = T.alloc_fragment((M, N), "float32")
            s = T.alloc_fragment((M,), "float32")
            T.copy(Q, Qs)
            T.copy(Kk, Ks)
            T.clear(acc)
            T.gemm(Qs, Ks, acc, transpose_B=True)
            T.fill(s, 0.0)
            for i in T.Parallel(M):
                for j in T.serial(N):
                    s[i] += acc[i, j]
            T.copy(s, out)

    return main


@pytest.mark.parametrize("target", TARGETS)
def test_serial_reduce_of_a_gemm_accumulator_is_refused(target):
    func = serial_reduce_of_gemm_output(64, 64, 64)
    with pytest.raises(CompileError) as info:
        tw.compile(func, target=target, execution_backend="emulator")
    msg = str(info.value)
    assert "thread-distributed fragment" in msg and "T.reduce_sum" in msg
    assert info.value.loc is not None  # the error names the kernel line


def unknown_range_index(N, store):
    """A fragment column picked by a value read at run time: read through shared memory; written, refused."""
    @T.prim_func
    def main(A: T.Tensor((N, 4), "float32"), B: T.Tensor((N,), "float32"), R: T.Tensor((1,), "int32")):
        with T.Kernel(1, threads=128):
            src = T.alloc_fragment((N, 4), "float32")
            rs = T.alloc_fragment((N,), "float32")
            T.copy(A, src)
            T.reduce_sum(src, rs, dim=1)
            r = R[0]
            for k in T.Parallel(N):
                if store:
                    src[k, r] = rs[k]
                else:
                    rs[k] = rs[k] + src[k, r]
            T.copy(rs, B)

    return main


def test_fragment_index_read_at_run_time(rng):
    N = 128
    run_everywhere(unknown_range_index(N, False),
                   lambda: (rand(rng, (N, 4)), poisoned((N,)), np.array([2], np.int32)),
                   lambda args: close(args[1], f64(args[0]).sum(axis=1) + f64(args[0])[:, 2]))
    with pytest.raises(CompileError, match="thread-distributed fragment"):
        tw.compile(unknown_range_index(N, True), target="cuda -arch=sm_90a", execution_backend="emulator")
