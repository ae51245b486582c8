"""Fragments that T.Parallel loops index past their declared shape (issue 12 item 3, part 3).

TileLang's attention-sink backward examples declare ``sinks = T.alloc_fragment([heads])`` and use
``sinks[i]`` for ``i`` in ``T.Parallel(block_M)``; its registers follow the loops, so the program
computes as if the fragment had ``block_M`` elements.  ``frontend.widen_fragments`` gives it that
shape (with a warning) when every use is an element access inside T.Parallel loops; other uses keep
the out-of-range error.  Kernels run in the tile interpreter and, lowered for ``sm_90a`` and
``gfx942``, in the thread-level emulator (race detector on), against float64 NumPy references.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_compat_refusals import run_everywhere
from zoo import close, f64, poisoned, rand

import tilewright as tw
import tilewright.language as T
from tilewright.errors import CompileError, TilewrightWarning


@pytest.fixture
def rng():
    return np.random.default_rng(2026_1209)


def sink_like(heads, block_M, dim):
    @T.prim_func
    def main(S: T.Tensor((heads,), "float32"), X: T.Tensor((heads, block_M, dim), "float32"),
             O: T.Tensor((heads, block_M), "float32")):
        with T.Kernel(heads, threads=128) as by:
            x = T.alloc_fragment((block_M, dim), "float32")
            s = T.alloc_fragment((block_M,), "float32")
            sinks = T.alloc_fragment([heads], "float32")
            T.copy(X[by, 0, 0], x)
            for i in T.Parallel(block_M):
                sinks[i] = S[by]
            T.reduce_sum(x, s, dim=1)
            for i in T.Parallel(block_M):
                s[i] += T.exp2(sinks[i] * 1.44269504)
            T.copy(s, O[by, 0])

    return main


@pytest.mark.parametrize("heads", [1, 8])
def test_fragment_indexed_past_its_shape_by_parallel_loops(rng, heads):
    block_M, dim = 64, 32
    with pytest.warns(TilewrightWarning, match="fragment sinks is declared with shape"):
        func = sink_like(heads, block_M, dim)

    def check(args):
        s, x, o = args
        close(o, f64(x).sum(axis=2) + np.exp2(f64(s) * 1.44269504)[:, None], rtol=1e-5, atol=1e-5)

    run_everywhere(func, lambda: (rand(rng, (heads,)), rand(rng, (heads, block_M, dim)), poisoned((heads, block_M))),
                   check)


def test_fragment_used_whole_keeps_its_shape():
    @T.prim_func
    def main(X: T.Tensor((64,), "float32"), O: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=128):
            f = T.alloc_fragment([8], "float32")
            for i in T.Parallel(64):
                f[i] = X[i]
            T.copy(f, O)

    with pytest.raises(CompileError, match="index out of range"):
        tw.compile(main, target="cuda -arch=sm_90a")
