"""A static grid dimension of 0 (TileLang issue 1993): ``T.Kernel(0)`` compiles, as in TileLang, and every
call of it raises an ArgumentError naming the dimension, with the output left untouched (no block runs, and
none is silently launched in its place)."""

from __future__ import annotations

import numpy as np
import pytest
from zoo import rand

import tilewright as tw
import tilewright.language as T
from tilewright.errors import ArgumentError


def static_zero_grid(threads):
    @T.prim_func
    def kernel(out: T.Tensor[(4,), T.float32]):
        with T.Kernel(0, 2, threads=threads) as (bx, by):
            out[bx] = T.float32(1.0)

    return kernel


@pytest.mark.parametrize("target,threads", [("interpret", 1), ("cuda -arch=sm_90a", 32), ("hip -arch=gfx942", 64)])
def test_static_zero_grid_compiles_and_every_call_is_refused(target, threads):
    kern = tw.compile(static_zero_grid(threads), target=target,
                      execution_backend=None if target == "interpret" else "emulator")
    out = rand(np.random.default_rng(1993), (4,))
    before = out.copy()
    for _ in range(2):
        with pytest.raises(ArgumentError, match=r"grid dimension x of T.Kernel is 0: the kernel would run no block"):
            kern(out)
    np.testing.assert_array_equal(out, before)


def test_negative_static_grid_is_still_a_compile_error():
    with pytest.raises(tw.errors.CompileError, match="grid dimension x of T.Kernel is -1"):
        @T.prim_func
        def kernel(out: T.Tensor[(4,), T.float32]):
            with T.Kernel(-1, threads=32) as bx:
                out[bx] = T.float32(1.0)

        tw.compile(kernel, target="interpret")
