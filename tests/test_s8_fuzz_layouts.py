"""Fuzz finding (session 8, template ``store_driven``): ``T.clear`` of a ragged slice of a gemm
accumulator (``x = c[:15, :35]; T.clear(x)``) was refused ("element (0, 1) is needed by thread 1, which
does not hold it") although TileLang compiles it.  The loop over the slice iterates by the accumulator's
layout (``passes/store_driven_layouts``), but the threads holding one register of that layout, cut to the
slice, were more than four runs of threads (``ir/layout_user._thread_ranges``): a slice ending inside a
warp's columns keeps whole warps and every fourth lane of the next one, and a slice ending inside the
rows keeps the first lanes of every warp.  Such holders are now also described as runs repeating with a
period, next to plain runs and runs with index bits fixed.

Each kernel runs in the tile interpreter and on the thread-level emulator for sm_80, sm_90a and gfx942
(race detector on) on fresh random inputs with NaN-poisoned outputs, against float64 NumPy references.
"""

from __future__ import annotations

import numpy as np
import pytest
from zoo import close, f64, poisoned, rand

import tilewright as tw
import tilewright.language as T
from tilewright.interp.emulator import run_thread_kernel

TARGETS = ("cuda -arch=sm_80", "cuda -arch=sm_90a", "hip -arch=gfx942")


def clear_slice(M, N, K, a, b, threads):
    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32"),
             R: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=threads):
            a_s = T.alloc_shared((M, K), "float16")
            b_s = T.alloc_shared((K, N), "float16")
            c = T.alloc_fragment((M, N), "float32")
            r = T.alloc_fragment((M,), "float32")
            T.copy(A, a_s)
            T.copy(B, b_s)
            T.clear(c)
            T.gemm(a_s, b_s, c)
            x = c[:a, :b]
            T.clear(x)
            T.reduce_sum(c, r, dim=1)
            T.copy(c, C)
            T.copy(r, R)

    return main


@pytest.mark.parametrize("M,N,a,b,threads", [(16, 64, 15, 35, 128), (16, 64, 15, 35, 256), (16, 64, 16, 35, 128),
                                             (64, 64, 63, 33, 256), (32, 64, 7, 50, 128), (64, 128, 45, 97, 256)])
def test_clear_a_ragged_slice_of_an_accumulator(M, N, a, b, threads):
    K = 16
    rng = np.random.default_rng(8_302 + a * b)
    func = clear_slice(M, N, K, a, b, threads)

    def args():
        return [rand(rng, (M, K), "float16"), rand(rng, (K, N), "float16"), poisoned((M, N)), poisoned((M,))]

    def check(got, where):
        want = f64(got[0]) @ f64(got[1])
        want[:a, :b] = 0.0
        close(got[2], want, rtol=1e-3, atol=1e-3)
        close(got[3], want.sum(axis=1), rtol=1e-3, atol=1e-2)

    got = args()
    tw.compile(func, target="interpret")(*got)
    check(got, "interpret")
    for target in TARGETS:
        got = args()
        kern = tw.compile(func, target=target, execution_backend="emulator")
        run_thread_kernel(kern.thread_kernel, got, check_races=True)
        check(got, target)


def test_holders_as_periodic_runs_and_fixed_bits():
    """The pieces found for the holders of a register, and the predicate built from them, select
    exactly those threads."""
    from tilewright.ir import expr as E
    from tilewright.ir.layout_user import _thread_ranges
    from tilewright.passes.analysis import eval_expr

    t = np.arange(256)
    cases = [(t % 32 < 28) & (t < 128) | ((t >= 128) & (t < 156) & (t % 4 == 0)),  # rows then a column cut
             (t < 66) | ((t >= 68) & (t < 94) & (t % 4 < 2)),  # whole warps, then pairs of lanes
             (t % 64 < 16),  # a periodic run
             (t % 8 == 3)]  # fixed bits over the whole block
    for mask in cases:
        pieces = _thread_ranges(mask)
        assert len(pieces) <= 4, pieces
        tid = E.Var("tid", "int32")
        from tilewright.ir.layout_user import UserFragmentLayout

        lay = UserFragmentLayout.__new__(UserFragmentLayout)
        lay._ranges, lay.num_threads = [pieces], 256
        cond = lay.valid_expr(tid, 0)
        got = np.broadcast_to(np.asarray(eval_expr(cond, {tid: t})), t.shape).astype(bool)
        np.testing.assert_array_equal(got, mask)
