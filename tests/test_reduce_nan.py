"""NaN in max/min reductions (issue 12): by default ``T.reduce_max`` / ``reduce_min`` /
``reduce_absmax`` drop NaN elements, as TileLang's reductions (``fmaxf``, ``__hmax``) do on a GPU;
``nan_propagate=True`` makes a NaN element win, with ``clear=False`` too.  Elementwise ``T.max`` /
``T.min`` drop a NaN operand as the printed ``fmaxf`` / ``fminf`` do.  The interpreter and the emulators
of sm_90a and gfx942 agree (``test_reducer_gpu.py`` runs the same kernels on a GPU).  Also the
reduction of a per-thread ``T.alloc_local`` array, which each thread folds itself."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from zoo import poisoned, rand

import tilewright as tw
import tilewright.language as T

TARGETS = ["interpret", "cuda -arch=sm_90a", "hip -arch=gfx942"]
NP = {"float16": np.float16, "float32": np.float32}


@pytest.fixture
def rng():
    return np.random.default_rng()


def run(func, target, *args):
    tw.compile(func, target=target, execution_backend=None if target == "interpret" else "emulator")(*args)


def nan_reduce(op, M, N, dtype, threads, nan_propagate, clear):
    fn = {"max": T.reduce_max, "min": T.reduce_min, "absmax": T.reduce_absmax}[op]

    @T.prim_func
    def kernel(A: T.Tensor((M, N), dtype), B: T.Tensor((M,), dtype)):
        with T.Kernel(1, threads=threads):
            a = T.alloc_fragment((M, N), dtype)
            b = T.alloc_fragment((M,), dtype)
            T.copy(A, a)
            if not clear:
                T.fill(b, -0.5)
            fn(a, b, dim=1, clear=clear, nan_propagate=nan_propagate)
            T.copy(b, B)

    return kernel


def nan_reference(op, a, nan_propagate, clear):
    x = np.asarray(a, np.float64)
    if op == "absmax":
        x = np.abs(x)
    if nan_propagate:
        r = x.max(1) if op != "min" else x.min(1)
        if not clear:
            old = -0.5
            r = np.where(np.isnan(r), r, np.minimum(r, old) if op == "min" else np.maximum(r, old))
        return r
    with warnings.catch_warnings():  # the all-NaN row
        warnings.simplefilter("ignore", RuntimeWarning)
        r = np.nanmax(x, 1) if op != "min" else np.nanmin(x, 1)
    if not clear:
        r = np.fmin(r, -0.5) if op == "min" else np.fmax(r, -0.5)
    return r


CASES = [(op, dtype, nanp, clear) for op in ("max", "min", "absmax") for dtype in ("float16", "float32")
         for nanp in (False, True) for clear in (True, False)]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(("op", "dtype", "nan_propagate", "clear"), CASES)
def test_nan_in_max_min_reductions(op, dtype, nan_propagate, clear, target, rng):
    M, N = 8, 64
    a = rand(rng, (M, N), dtype)
    a[1, 7] = np.nan  # one NaN row, one row of NaN only, the rest plain
    a[5, :] = np.nan
    b = poisoned((M,), dtype)
    run(nan_reduce(op, M, N, dtype, 128, nan_propagate, clear), target, a, b)
    want = nan_reference(op, a, nan_propagate, clear)
    np.testing.assert_allclose(np.asarray(b, np.float64), want, rtol=1e-3, atol=1e-3)  # NaN == NaN here
    assert np.isnan(b[1]) == nan_propagate and np.isnan(b[5]) == (nan_propagate or clear)


def elementwise_max(N, dtype):
    @T.prim_func
    def kernel(A: T.Tensor((N,), dtype), B: T.Tensor((N,), dtype), C: T.Tensor((N,), dtype)):
        with T.Kernel(1, threads=64):
            for i in T.Parallel(N):
                C[i] = T.max(A[i], B[i]) - T.min(A[i], B[i])

    return kernel


@pytest.mark.parametrize("target", TARGETS)
def test_elementwise_max_min_drop_nan(target, rng):
    a, b = rand(rng, (128,)), rand(rng, (128,))
    a[::7] = np.nan
    b[::5] = np.nan
    c = poisoned((128,))
    run(elementwise_max(128, "float32"), target, a, b, c)
    x, y = a.astype(np.float64), b.astype(np.float64)
    np.testing.assert_allclose(c, np.fmax(x, y) - np.fmin(x, y), rtol=1e-6)


def local_reduce(op, dtype, shape, dim):
    fn = {"sum": T.reduce_sum, "max": T.reduce_max, "min": T.reduce_min, "abssum": T.reduce_abssum}[op]
    kept = tuple(n for d, n in enumerate(shape) if d != dim)
    numel = int(np.prod(shape))

    @T.prim_func
    def kernel(A: T.Tensor((64, numel), dtype), B: T.Tensor((64, int(np.prod(kept))), dtype)):
        with T.Kernel(1, threads=64):
            tx = T.get_thread_binding()
            src = T.alloc_local(shape, dtype)
            dst = T.alloc_local(kept, dtype)
            for k in T.serial(numel):
                src[k // shape[1], k % shape[1]] = A[tx, k]
            fn(src, dst, dim=dim)
            for k in T.serial(int(np.prod(kept))):
                B[tx, k] = dst[k]

    return kernel


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(("op", "dtype", "dim"), [("sum", "float16", 0), ("max", "float32", 0),
                                                  ("min", "float16", 0), ("abssum", "float32", 0)])
def test_per_thread_local_reduction(op, dtype, dim, target, rng):
    shape = (8, 4)
    a = rand(rng, (64, 32), dtype)
    b = poisoned((64, 4), dtype)
    run(local_reduce(op, dtype, shape, dim), target, a, b)
    x = a.astype(np.float64).reshape(64, 8, 4)
    want = {"sum": x.sum(1), "max": x.max(1), "min": x.min(1), "abssum": np.abs(x).sum(1)}[op]
    tol = 2e-2 if dtype == "float16" else 1e-5
    np.testing.assert_allclose(b.astype(np.float64), want, rtol=tol, atol=tol)
