"""Fragment layouts the program gives: ``T.annotate_layout({frag: T.Fragment(...)})`` (issue 12 item 3).

The fragment's elements live in the threads (and at the local indices) the layout names; T.Parallel
loops, reductions (over a part of the block's threads, as in TileLang's partial-thread reduction
tests), copies and fills over it follow it.  Each kernel runs in the tile interpreter (where layouts
are not observable) and, lowered for ``sm_90a`` and ``gfx942``, in the thread-level emulator (race
detector on), on fresh random inputs with NaN-poisoned outputs, against float64 NumPy references.
The layouts are checked in the lowered code through the plans (which threads hold what).  Reductions
over a set of threads TileLang refuses (not contiguous, not a power of two, not warp-aligned) are
refused with its words; a layout that conflicts with a gemm is a CompileError.
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
    return np.random.default_rng(2026_1207)


def partial_reduce(rows, width, threads, offset=0, vec=8):
    """x laid out over ``width // vec`` threads from ``offset``; the row sums replicated there."""
    nt = width // vec

    @T.prim_func
    def main(x: T.Tensor((rows, width), "float32"), out: T.Tensor((rows, width), "float32")):
        with T.Kernel(1, threads=threads):
            x_frag = T.alloc_fragment((rows, width), "float32")
            sum_frag = T.alloc_fragment((rows,), "float32")
            T.annotate_layout({
                x_frag: T.Fragment(x_frag.shape, forward_fn=lambda i, j: (offset + j // vec, i * vec + j % vec)),
                sum_frag: T.Fragment(sum_frag.shape, forward_fn=lambda i, rep: (offset + rep, i), replicate=nt),
            })
            for i, j in T.Parallel(rows, width):
                x_frag[i, j] = x[i, j]
            T.reduce_sum(x_frag, sum_frag, dim=1)
            for i, j in T.Parallel(rows, width):
                out[i, j] = x_frag[i, j] / sum_frag[i]

    return main


@pytest.mark.parametrize("rows,width,threads,offset", [(4, 512, 128, 0), (2, 512, 128, 32), (2, 256, 64, 0)])
def test_partial_thread_reduction(rng, rows, width, threads, offset):
    func = partial_reduce(rows, width, threads, offset)

    def check(args):
        x, out = args
        close(out, f64(x) / f64(x).sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)

    # threads 32..95 are two whole warps of 32, but not whole waves of 64: gfx942 refuses (the test below)
    targets = TARGETS if offset % 64 == 0 else TARGETS[:1]
    run_everywhere(func, lambda: (rand(rng, (rows, width)) + 2.0, poisoned((rows, width))), check, targets=targets)


def test_partial_thread_reduction_off_whole_waves_is_refused_on_gfx942():
    """Threads 32..95 are two whole warps of 32 but not whole waves of 64: gfx942 refuses, as TileLang would."""
    with pytest.raises(CompileError, match="warp-aligned participating thread range"):
        tw.compile(partial_reduce(2, 512, 128, 32), target="hip -arch=gfx942")


def two_group(block_threads, group_stride):
    @T.prim_func
    def main(x: T.Tensor((2, 512), "float32"), out: T.Tensor((2,), "float32")):
        with T.Kernel(1, threads=block_threads):
            x_frag = T.alloc_fragment((2, 512), "float32")
            out_frag = T.alloc_fragment((2,), "float32")
            T.annotate_layout({
                x_frag: T.Fragment(x_frag.shape, forward_fn=lambda i, j: (i * group_stride + j // 8, j % 8)),
                out_frag: T.Fragment(out_frag.shape, forward_fn=lambda i, rep: (i * group_stride + rep, 0),
                                     replicate=64),
            })
            for i, j in T.Parallel(2, 512):
                x_frag[i, j] = x[i, j]
            T.reduce_sum(x_frag, out_frag, dim=1)
            for i in T.Parallel(2):
                out[i] = out_frag[i]

    return main


@pytest.mark.parametrize("block_threads", [128, 256])
def test_two_groups_of_threads(rng, block_threads):
    func = two_group(block_threads, 64)

    def check(args):
        x, out = args
        close(out, f64(x).sum(axis=1), rtol=1e-5, atol=1e-5)

    run_everywhere(func, lambda: (rand(rng, (2, 512)), poisoned((2,))), check)


def refused_reduce(width_threads, base):
    @T.prim_func
    def main(x: T.Tensor((1, width_threads * 8), "float32"), out: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=128):
            x_frag = T.alloc_fragment((1, width_threads * 8), "float32")
            sum_frag = T.alloc_fragment((1,), "float32")
            T.annotate_layout({
                x_frag: T.Fragment(x_frag.shape, forward_fn=lambda i, j: (base + j // 8, j % 8)),
                sum_frag: T.Fragment(sum_frag.shape, forward_fn=lambda i, rep: (base + rep, 0),
                                     replicate=width_threads),
            })
            for i, j in T.Parallel(1, width_threads * 8):
                x_frag[i, j] = x[i, j]
            T.reduce_sum(x_frag, sum_frag, dim=1)
            for i in T.Parallel(1):
                out[i] = sum_frag[i]

    return main


@pytest.mark.parametrize("target", TARGETS)
def test_reductions_tilelang_refuses(target):
    with pytest.raises(CompileError, match="positive power of two"):
        tw.compile(refused_reduce(48, 0), target=target)
    with pytest.raises(CompileError, match="warp-aligned participating thread range"):
        tw.compile(refused_reduce(64, 16 if target.startswith("cuda") else 32), target=target)
    with pytest.raises(CompileError, match="one contiguous thread range"):
        tw.compile(two_group(256, 128), target=target)


def holder_of_each_element(fn, shape, threads):
    @T.prim_func
    def main(out: T.Tensor(shape, "float32")):
        with T.Kernel(1, threads=threads):
            tx = T.get_thread_binding()
            f = T.alloc_fragment(shape, "float32")
            T.annotate_layout({f: T.Fragment(shape, forward_fn=fn)})
            for i, j in T.Parallel(*shape):
                f[i, j] = T.cast(tx, "float32")
            T.copy(f, out)

    return main


@pytest.mark.parametrize("target", TARGETS)
def test_elements_live_in_the_threads_the_layout_names(target):
    """Each element records the thread that wrote it in the T.Parallel loop: the one the layout names."""
    cases = [((4, 512), 128, lambda i, j: (j // 8, i * 8 + j % 8)),
             ((4, 512), 128, lambda i, j: (32 + j // 8, i * 8 + j % 8)),
             ((2, 512), 256, lambda i, j: (i * 128 + j // 8, j % 8)),
             ((1, 2560), 128, lambda i, j: ((i * 2560 + j) // 4 % 128, (i * 2560 + j) // 512 * 4 + j % 4))]
    for shape, threads, fn in cases:
        kern = tw.compile(holder_of_each_element(fn, shape, threads), target=target, execution_backend="emulator")
        out = poisoned(shape)
        from tilewright.interp.emulator import run_thread_kernel

        run_thread_kernel(kern.thread_kernel, [out], check_races=True)
        i, j = np.indices(shape)
        np.testing.assert_array_equal(out, fn(i, j)[0].astype(np.float32))


def test_discontiguous_layout_without_reduction(rng):
    """Two thread groups far apart are fine for loops and copies (only reductions follow TileLang's rule)."""
    @T.prim_func
    def main(x: T.Tensor((2, 512), "float32"), out: T.Tensor((2, 512), "float32")):
        with T.Kernel(1, threads=256):
            x_frag = T.alloc_fragment((2, 512), "float32")
            T.annotate_layout({x_frag: T.Fragment(x_frag.shape, forward_fn=lambda i, j: (i * 128 + j // 8, j % 8))})
            T.copy(x, x_frag)
            for i, j in T.Parallel(2, 512):
                x_frag[i, j] = x_frag[i, j] * 3.0 - 1.0
            T.copy(x_frag, out)

    run_everywhere(main, lambda: (rand(rng, (2, 512)), poisoned((2, 512))),
                   lambda a: close(a[1], f64(a[0]) * 3.0 - 1.0, rtol=1e-6, atol=1e-6))


def absmax_packed(num_tokens, hidden, num_threads=128, nv=4):
    """TileLang's bf16 absmax regression: a copy into a fragment laid out by the program, a reshape,
    a reduction over the reshaped view."""
    def x_layout_fn(i, j):
        idx = i * hidden + j
        return idx // nv % num_threads, idx // (nv * num_threads) * nv + idx % nv

    @T.prim_func
    def main(A: T.Tensor((num_tokens, hidden), "bfloat16"), B: T.Tensor((num_tokens,), "float32")):
        with T.Kernel(num_tokens, threads=num_threads) as (pid,):
            src = T.alloc_fragment((1, hidden), "bfloat16")
            dst = T.alloc_fragment((1, 1), "bfloat16")
            T.annotate_layout({src: T.Fragment((1, hidden), forward_fn=x_layout_fn)})
            T.copy(A[pid, 0], src, disable_tma=True)
            src_reshaped = T.reshape(src, (1, 1, hidden))
            T.reduce_absmax(src_reshaped, dst, dim=2)
            B[pid] = T.cast(dst[0, 0], "float32")

    return main


def test_absmax_over_reshaped_user_layout(rng):
    import ml_dtypes

    n, h = 4, 2560

    def make():
        a = (rng.standard_normal((n, h)) * 3).astype(ml_dtypes.bfloat16)
        return a, poisoned((n,))

    def check(args):
        a, b = args
        close(b, np.abs(f64(a)).max(axis=1).astype(ml_dtypes.bfloat16).astype(np.float64), rtol=0, atol=0)

    run_everywhere(absmax_packed(n, h), make, check)


def test_user_layout_conflicting_with_gemm():
    @T.prim_func
    def main(A: T.Tensor((64, 32), "float16"), B: T.Tensor((32, 64), "float16"), C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            a_s = T.alloc_shared((64, 32), "float16")
            b_s = T.alloc_shared((32, 64), "float16")
            c = T.alloc_fragment((64, 64), "float32")
            T.annotate_layout({c: T.Fragment(c.shape, forward_fn=lambda i, j: (i * 2 + j // 32, j % 32))})
            T.copy(A, a_s)
            T.copy(B, b_s)
            T.clear(c)
            T.gemm(a_s, b_s, c)
            T.copy(c, C)

    for target in TARGETS:
        with pytest.raises(CompileError, match="laid out by its T.Fragment annotation"):
            tw.compile(main, target=target)


def test_bad_fragment_layouts():
    def kern(fn, shape=(4, 64), replicate=1):
        @T.prim_func
        def main(x: T.Tensor((4, 64), "float32"), out: T.Tensor((4, 64), "float32")):
            with T.Kernel(1, threads=128):
                f = T.alloc_fragment((4, 64), "float32")
                T.annotate_layout({f: T.Fragment(shape, forward_fn=fn, replicate=replicate)})
                T.copy(x, f)
                T.copy(f, out)

        return main

    with pytest.raises(CompileError, match="has shape"):
        kern(lambda i, j: (j, i), shape=(4, 32))
    with pytest.raises(CompileError, match="the block has 128 threads"):
        tw.compile(kern(lambda i, j: (j * 4 + i, 0)), target="cuda -arch=sm_90a")
    with pytest.raises(CompileError, match="same local index"):
        tw.compile(kern(lambda i, j: (j, 0)), target="cuda -arch=sm_90a")


def test_identity_layout_on_a_dtype_changing_view(rng):
    """TileLang's view test: an identity T.Layout on a T.view of a shared buffer is the view's own order."""
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 128), "int8")):
        with T.Kernel(1, threads=128):
            a_stage = T.alloc_shared((2, 64, 64), "float16")
            a_i8 = T.view(a_stage, (2, 64, 128), dtype="int8")
            T.annotate_layout({a_i8: T.Layout((2, 64, 128), lambda s, i, j: [s, i, j])})
            for i, j in T.Parallel(64, 64):
                a_stage[0, i, j] = A[i, j]
            for i, j in T.Parallel(64, 128):
                B[i, j] = a_i8[0, i, j]

    def check(args):
        a, b = args
        np.testing.assert_array_equal(b, a.view(np.int8).reshape(64, 128))

    run_everywhere(main, lambda: (rand(rng, (64, 64), "float16"), np.full((64, 128), 77, np.int8)), check)
    with pytest.raises(CompileError, match="is not a buffer"):
        @T.prim_func
        def other(A: T.Tensor((64, 64), "float16")):
            with T.Kernel(1, threads=128):
                a_stage = T.alloc_shared((2, 64, 64), "float16")
                a_i8 = T.view(a_stage, (2, 64, 128), dtype="int8")
                T.annotate_layout({a_i8: T.Layout((2, 64, 128), lambda s, i, j: [s, j, i])})
