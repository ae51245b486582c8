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
