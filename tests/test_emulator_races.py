"""Races the emulator must report (it is the oracle: a race on a GPU is an error on the CPU), with
the kernel line, and programs without a single meaning refused at compile time.

* Replicated stores: positions of a ``T.Parallel`` held by two replicas (threads t and t + 64) that
  both do an in-place update ``S[i] = S[i] * 2`` — the second may read the first one's result.  The
  compiler now stores by one replica; the tests take the guard out of the lowered code again.
* Colliding indices (``acc[i % 64] += ...``): iterations run by different threads update one element.
* A per-thread ``T.alloc_local`` element written in a ``T.Parallel`` and read outside it.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import tilewright
import tilewright.language as T
from tilewright.errors import CompileError
from tilewright.interp.emulator import RaceError, run_thread_kernel
from tilewright.ir import expr as E
from tilewright.ir import thread as th
from tilewright.ir import tile as t
from tilewright.ir.visitor import map_stmt, walk
from tilewright.passes.pipeline import PassContext, run_pipeline
from tilewright.target.base import Target

TARGETS = ("cuda -arch=sm_80", "hip -arch=gfx942")


def _lower(func, target):
    return run_pipeline(func, PassContext(Target.parse(target)))


def _is_replica_guard(cond) -> bool:
    """``(tx & m) == 0``: the guard that leaves a store to one replica."""
    return (isinstance(cond, E.BinOp) and cond.op == "==" and E.const_value(cond.b) == 0
            and isinstance(cond.a, E.BinOp) and cond.a.op == "&")


def _unguard_replicas(kernel):
    """The lowered kernel as the compiler made it before replicas stored only once: every replica
    runs the loop body and stores (what c324353 fixed)."""
    found = []

    def f(s):
        if isinstance(s, t.IfThenElse) and s.else_body is None and _is_replica_guard(s.cond):
            found.append(s)
            return s.then_body
        return None

    out = dataclasses.replace(kernel, body=map_stmt(kernel.body, f))
    assert found, "the lowering should guard the stores of replicated positions"
    return out


def _inplace_shared(n=256, threads=128):
    @T.prim_func
    def f(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=threads):
            S = T.alloc_shared((n,), "float32")
            T.copy(A, S)
            for i in T.Parallel(n):
                S[i] = S[i] * 2.0  # the in-place line
            T.copy(S, B)

    return f


def _inplace_global(n=256, threads=128):
    @T.prim_func
    def f(B: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=threads):
            for i in T.Parallel(n):
                B[i] = B[i] * 2.0  # the in-place line
    return f


@pytest.mark.parametrize("target", TARGETS)
def test_replicas_updating_shared_memory_in_place_are_a_race(target):
    rng = np.random.default_rng(1)
    k = _lower(_inplace_shared(), target)
    a = rng.standard_normal(256).astype(np.float32)
    b = np.full(256, np.nan, np.float32)
    run_thread_kernel(k, [a, b])  # the compiler's code: one replica stores, no race
    np.testing.assert_allclose(b, 2 * a.astype(np.float64), rtol=1e-6)
    with pytest.raises(RaceError, match=r"(?s)shared byte.*S\[i\] = S\[i\] \* 2\.0  # the in-place line"):
        run_thread_kernel(_unguard_replicas(k), [a, np.full(256, np.nan, np.float32)])


@pytest.mark.parametrize("target", TARGETS)
def test_replicas_updating_global_memory_in_place_are_a_race(target):
    rng = np.random.default_rng(2)
    k = _lower(_inplace_global(), target)
    a = rng.standard_normal(256).astype(np.float32)
    b = a.copy()
    run_thread_kernel(k, [b])
    np.testing.assert_allclose(b, 2 * a.astype(np.float64), rtol=1e-6)
    with pytest.raises(RaceError, match=r"(?s)changes B\[\d+\].*B\[i\] = B\[i\] \* 2\.0  # the in-place line"):
        run_thread_kernel(_unguard_replicas(k), [a.copy()])


def test_race_checks_are_on_when_running_through_compile():
    """``execution_backend="emulator"`` checks races: the GPU's wrong answer is an error here."""
    f = _inplace_shared()
    k = tilewright.compile(f, target=TARGETS[0], execution_backend="emulator")
    k.thread_kernel = _unguard_replicas(k.thread_kernel)
    a = np.random.default_rng(3).standard_normal(256).astype(np.float32)
    with pytest.raises(RaceError, match="in-place line"):
        k(a, np.full(256, np.nan, np.float32))


def test_global_reads_of_another_threads_store_need_a_barrier():
    """Thread t stores B[t], then reads B[t ^ 1], which its neighbour stored: the compiler puts a
    barrier in between; without it the read is a race."""
    @T.prim_func
    def f(A: T.Tensor((128,), "float32"), B: T.Tensor((128,), "float32"), C: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            tx = T.get_thread_binding()
            B[tx] = A[tx] + 1.0
            C[tx] = B[tx ^ 1]  # the exchange line

    a = np.random.default_rng(4).standard_normal(128).astype(np.float32)
    for target in TARGETS:
        k = _lower(f, target)
        b, c = np.full(128, np.nan, np.float32), np.full(128, np.nan, np.float32)
        run_thread_kernel(k, [a, b, c])
        np.testing.assert_allclose(c, (a.astype(np.float64) + 1)[np.arange(128) ^ 1], rtol=1e-6)
        unsynced = dataclasses.replace(k, body=map_stmt(k.body, lambda s: [] if isinstance(s, th.Barrier) else None))
        with pytest.raises(RaceError, match=r"(?s)reads B\[\d+\].*the exchange line"):
            run_thread_kernel(unsynced, [a, np.full(128, np.nan, np.float32), np.full(128, np.nan, np.float32)])


def _colliding(n=256, threads=128):
    @T.prim_func
    def f(A: T.Tensor((n,), "float32"), B: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=threads):
            acc = T.alloc_shared((64,), "float32")
            for i in T.Parallel(64):
                acc[i] = 0.0
            for i in T.Parallel(n):
                acc[i % 64] += A[i]  # the colliding line
            T.copy(acc, B)

    return f


@pytest.mark.parametrize("target", TARGETS)
def test_colliding_parallel_updates_of_shared_memory_are_a_race(target):
    k = tilewright.compile(_colliding(), target=target, execution_backend="emulator")
    a = np.random.default_rng(5).standard_normal(256).astype(np.float32)
    with pytest.raises(RaceError, match=r"(?s)acc.*the colliding line"):
        k(a, np.full(64, np.nan, np.float32))


def test_colliding_parallel_updates_are_a_race_in_the_interpreter():
    k = tilewright.compile(_colliding(), target="interpret")
    a = np.random.default_rng(6).standard_normal(256).astype(np.float32)
    with pytest.raises(tilewright.errors.TilewrightError, match="race"):
        k(a, np.full(64, np.nan, np.float32))


def test_same_value_stores_by_colliding_iterations_are_benign():
    """Iterations storing the same value to one element is no race (every target agrees)."""
    @T.prim_func
    def f(A: T.Tensor((256,), "float32"), B: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((64,), "float32")
            for i in T.Parallel(256):
                S[i % 64] = A[i % 64] * 3.0
            T.copy(S, B)

    a = np.random.default_rng(7).standard_normal(256).astype(np.float32)
    for target, backend in (("interpret", None), *((tg, "emulator") for tg in TARGETS)):
        k = tilewright.compile(f, target=target, execution_backend=backend) if backend else \
            tilewright.compile(f, target=target)
        b = np.full(64, np.nan, np.float32)
        k(a, b)
        np.testing.assert_allclose(b, 3 * a[:64].astype(np.float64), rtol=1e-6)


def test_per_thread_local_read_outside_the_parallel_loop_is_refused():
    """``loc`` is per-thread: T.Parallel spreads loc[i] over the threads, so after the loop loc[63]
    holds a value only in the thread that ran iteration 63 (the others store garbage to Z[0])."""
    with pytest.raises(CompileError, match=r"(?s)loc.*per-thread.*Z\[0\] = loc\[n - 1\]"):
        n = 64

        @T.prim_func
        def f(A: T.Tensor((n,), "float32"), Z: T.Tensor((1,), "float32")):
            with T.Kernel(1, threads=128):
                loc = T.alloc_local((n,), "float32")
                for i in T.Parallel(n):
                    loc[i] = A[i] * 2.0
                Z[0] = loc[n - 1]

        tilewright.compile(f, target="interpret")


def test_per_thread_local_used_inside_parallel_loops_only_runs_everywhere():
    n = 64

    @T.prim_func
    def f(A: T.Tensor((n,), "float32"), Z: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=128):
            loc = T.alloc_local((n,), "float32")
            for i in T.Parallel(n):
                loc[i] = A[i] * 2.0
                Z[i] = loc[i] + 1.0

    a = np.random.default_rng(8).standard_normal(n).astype(np.float32)
    for target, backend in (("interpret", None), *((tg, "emulator") for tg in TARGETS)):
        k = tilewright.compile(f, target=target, execution_backend=backend) if backend else \
            tilewright.compile(f, target=target)
        z = np.full(n, np.nan, np.float32)
        k(a, z)
        np.testing.assert_allclose(z, 2 * a.astype(np.float64) + 1, rtol=1e-6)


def test_barriers_are_in_the_lowered_code():
    """Guard for the tests above: the shared in-place kernel has barriers around the update."""
    k = _lower(_inplace_shared(), TARGETS[0])
    bars = []
    walk(k.body, lambda s: bars.append(s) if isinstance(s, th.Barrier) else None)
    assert len(bars) >= 2
