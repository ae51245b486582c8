"""Reduction operands TileLang accepts (issue 12): a ``T.reshape`` view of a fragment as the
source, and all-reduce widths that are not a power of two (TileLang refuses those; here the
reduction is computed -- through shared memory when the threads holding one result are not paired
by thread-index bits -- and checked).  In the interpreter and on the sm_90a / gfx942 emulators,
against float64 references with poisoned outputs."""

from __future__ import annotations

import numpy as np
import pytest
from zoo import poisoned, rand

import tilewright as tw
import tilewright.language as T

TARGETS = ["interpret", "cuda -arch=sm_90a", "hip -arch=gfx942"]


@pytest.fixture
def rng():
    return np.random.default_rng()


def run(func, target, *args):
    tw.compile(func, target=target, execution_backend=None if target == "interpret" else "emulator")(*args)


def reshaped_sum(rows, hidden, groups, threads):
    @T.prim_func
    def kernel(A: T.Tensor((rows, hidden), "float32"), B: T.Tensor((rows, groups), "float32")):
        with T.Kernel(1, threads=threads):
            src = T.alloc_fragment((rows, hidden), "float32")
            dst = T.alloc_fragment((rows, groups), "float32")
            view = T.reshape(src, (rows, groups, hidden // groups))  # before the data: a view, not a copy
            for i, j in T.Parallel(rows, hidden):
                src[i, j] = A[i, j] * 2.0
            T.reduce_sum(view, dst, dim=2)
            T.copy(dst, B)

    return kernel


@pytest.mark.parametrize("target", TARGETS)
def test_reduce_of_a_reshaped_fragment(target, rng):
    a = rand(rng, (2, 192))
    b = poisoned((2, 6))
    run(reshaped_sum(2, 192, 6, 128), target, a, b)
    np.testing.assert_allclose(b, 2 * a.astype(np.float64).reshape(2, 6, 32).sum(2), rtol=1e-5, atol=1e-5)


def width_reduce(width, scale, dim, op):
    fn = T.reduce_sum if op == "sum" else T.reduce_max
    shape = (1, width) if dim == 1 else (width, scale)
    out = (1,) if dim == 1 else (scale,)

    @T.prim_func
    def kernel(A: T.Tensor(shape, "float32"), B: T.Tensor(out, "float32")):
        with T.Kernel(1, threads=width * scale):
            s = T.alloc_fragment(shape, "float32")
            d = T.alloc_fragment(out, "float32")
            T.copy(A, s)
            fn(s, d, dim=dim)
            T.copy(d, B)

    return kernel


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(("width", "scale", "dim"), [(48, 1, 1), (96, 1, 1), (48, 2, 0), (64, 3, 0)])
@pytest.mark.parametrize("op", ["sum", "max"])
def test_all_reduce_width_not_a_power_of_two(width, scale, dim, op, target, rng):
    if target.startswith("hip") and (width * scale) % 64:
        pytest.skip("AMD blocks are whole waves of 64")
    shape = (1, width) if dim == 1 else (width, scale)
    a = rand(rng, shape)
    b = poisoned((1,) if dim == 1 else (scale,))
    run(width_reduce(width, scale, dim, op), target, a, b)
    x = a.astype(np.float64)
    np.testing.assert_allclose(b, x.sum(dim) if op == "sum" else x.max(dim), rtol=1e-5, atol=1e-5)
