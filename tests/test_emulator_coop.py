"""Cooperative emulation of warp-specialised kernels, built directly in thread IR: a producer warp
fills a 2-slot mbarrier-guarded shared ring (plain stores + mbarrier arrive, or TMA) while consumer
warps compute from it, checked against float64; and seeded synchronisation faults, each reported
with the source line of the statement at fault.  Also: the new synchronisation nodes print for
CUDA (and compile with NVRTC for sm_90a), and HIP refuses the ones AMD has no meaning for."""

import dataclasses

import numpy as np
import pytest

from tilewright.errors import CompileError, SourceLocation, ToolchainError
from tilewright.interp.emulator import (
    DeadlockError,
    DivergenceError,
    EmulatorError,
    RaceError,
    run_thread_kernel,
)
from tilewright.interp.emulator.mode import needs_cooperation
from tilewright.ir import expr as E
from tilewright.ir import thread as th
from tilewright.ir import tile as t
from tilewright.ir.layout import SharedLayout
from tilewright.ir.visitor import map_stmt
from tilewright.target.base import Target

SM90 = "cuda -arch=sm_90a"
CH = 64  # elements per ring slot (plain-store ring)
STEPS = 6  # chunks streamed through the ring: each slot is reused three times


def loc(line: int, text: str) -> SourceLocation:
    return SourceLocation("ring_kernel.py", line, 4, "    " + text, "ring")


def store(buf, idx, value, line=None):
    s = t.BufferStore(buf, (E.as_expr(idx),), E.as_expr(value))
    if line is not None:
        s.loc = loc(line, f"{buf.name}[...] = ...")
    return s


def load(buf, idx):
    return E.Load(buf, (E.as_expr(idx),))


def fdiv(a, b):
    return E.binary("//", a, b)


def kernel(params, body, threads, shared_bytes, target=SM90, tensor_maps=(), tx=None, bx=None):
    tx = tx if tx is not None else E.Var("tx", "int32", kind="thread")
    bx = bx if bx is not None else E.Var("bx", "int32", kind="block")
    return th.ThreadKernel(name="ws", params=list(params), dyn_vars=[], grid=(E.as_expr(1),), num_threads=threads,
                           shared_bytes=shared_bytes, body=t.SeqStmt(body), thread_var=tx, block_vars=(bx,),
                           target=Target.parse(target), tensor_maps=list(tensor_maps))


def _mutate(k, fn):
    return dataclasses.replace(k, body=map_stmt(k.body, fn))


# --------------------------------------------------------------------------------------------
# a producer warp and a consumer warpgroup around a 2-slot ring


def ring_kernel(*, consumer_warps=4, fill="store"):
    """Warp 0 streams STEPS chunks of A into a 2-slot shared ring; warps 1.. (a warpgroup) each
    accumulate ``acc += ring[slot][c] * (k + 1)`` for their column ``c``, then write Out.

    ``fill``: how the producer fills a slot: "store" (plain stores), "cp.async" (async copies it waits
    for before arriving) or "tma" (a TMA load that arrives on ``full`` itself).

    Slot s: ``full[s]`` (1 arrival: the producer's elected lane, or its TMA load) says it is
    filled; ``empty[s]`` (one elected arrival per consumer warp) says it was read.  Round r of a
    slot waits parity r % 2 on full and (r + 1) % 2 on empty (a fresh barrier's 'previous phase'
    counts as complete, so the first round does not wait)."""
    tx = E.Var("tx", "int32", kind="thread")
    k = E.Var("k", "int32", kind="loop")
    threads = 32 * (1 + consumer_warps)
    nconsumer = 32 * consumer_warps
    tma = fill == "tma"
    if tma:
        A = t.Buffer("A", (STEPS * 8, 4), "float32", "global")  # 16-byte rows: an unswizzled box
        slot_elems = 32
    else:
        A = t.Buffer("A", (STEPS * CH,), "float32", "global")
        slot_elems = CH
    Out = t.Buffer("Out", (nconsumer,), "float32", "global")
    ring = t.Buffer("ring", (2 * slot_elems,), "float32", "shared")
    full = t.Buffer("full", (2,), "uint64", "shared")
    empty = t.Buffer("empty", (2,), "uint64", "shared")
    acc = t.Buffer("acc", (1,), "float32", "local")
    ring_bytes = 2 * slot_elems * 4
    s = k % 2
    rnd = fdiv(k, 2)
    tmaps = []
    if tma:
        tmap = th.TensorMap(A, (8, 4), 0)
        tmaps.append(tmap)
        produce = [th.TmaLoad(ring, s * slot_elems, SharedLayout((8, 4), "float32", tma=True), tmap, (k * 8, 0),
                              full, s, loc=loc(20, "T.tma_copy(A[k * 8, 0], ring[k % 2], full[k % 2])"))]
    elif fill == "cp.async":
        produce = [th.AsyncCopy(ring, s * CH + tx * 2, A, k * CH + tx * 2, 8, loc=loc(20, "T.copy(A[...], ring[...])")),
                   th.AsyncCommit(), th.AsyncWait(0)]
        produce.append(th.MbarrierArrive(full, s, elected=True, loc=loc(22, "T.mbarrier_arrive(full[k % 2])")))
    else:
        produce = [store(ring, s * CH + tx * 2 + j, load(A, k * CH + tx * 2 + j), line=20 + j) for j in range(2)]
        produce.append(th.MbarrierArrive(full, s, elected=True, loc=loc(22, "T.mbarrier_arrive(full[k % 2])")))
    producer = t.For(k, 0, STEPS, t.SeqStmt(
        [th.MbarrierWait(empty, s, (rnd + 1) % 2, loc=loc(18, "T.mbarrier_wait_parity(empty[k % 2], (k // 2 + 1) % 2)"))]
        + produce))
    c = (tx - 32) % slot_elems
    consumer = t.SeqStmt([
        th.LocalDecl(acc, init=0.0),
        t.For(k, 0, STEPS, t.SeqStmt([
            th.MbarrierWait(full, s, rnd % 2, loc=loc(30, "T.mbarrier_wait_parity(full[k % 2], k // 2 % 2)")),
            store(acc, 0, load(acc, 0) + load(ring, s * slot_elems + c) * E.cast("float32", k + 1), line=31),
            th.MbarrierArrive(empty, s, elected=True, loc=loc(32, "T.mbarrier_arrive(empty[k % 2])")),
        ])),
        store(Out, tx - 32, load(acc, 0), line=34),
    ])
    body = [
        th.SharedDecl(ring, 0), th.SharedDecl(full, ring_bytes), th.SharedDecl(empty, ring_bytes + 16),
        th.MbarrierInit(full, 1, loc=loc(10, "full = T.alloc_barrier([1, 1])")),
        th.MbarrierInit(empty, consumer_warps, loc=loc(11, "empty = T.alloc_barrier([4, 4])")),
        th.Barrier(loc=loc(12, "T.sync_threads()")),
        t.IfThenElse(tx < 32, producer, consumer, loc=loc(14, "if tx < 32:")),
    ]
    return kernel([A, Out], body, threads, ring_bytes + 32, tx=tx, tensor_maps=tmaps)


def ring_reference(a, nconsumer, slot_elems):
    a = a.astype(np.float64).reshape(STEPS, slot_elems)
    c = np.arange(nconsumer) % slot_elems
    return sum(a[k, c] * (k + 1) for k in range(STEPS))


@pytest.mark.parametrize("fill", ["store", "cp.async", "tma"])
def test_producer_warp_and_consumer_warpgroup_share_a_ring(fill):
    rng = np.random.default_rng(11)
    tma = fill == "tma"
    k = ring_kernel(fill=fill)
    assert needs_cooperation(k)
    shape = (STEPS * 8, 4) if tma else (STEPS * CH,)
    a = rng.standard_normal(shape).astype(np.float32)
    out = np.full(128, np.nan, np.float32)
    run_thread_kernel(k, [a, out], check_races=True)
    np.testing.assert_allclose(out, ring_reference(a, 128, 32 if tma else CH), rtol=1e-5, atol=1e-5)


def test_warp_specialised_gemm_with_a_tma_producer():
    """C (16x8) = A (16xK) @ B (Kx8): warp 0 loads swizzled (16x8) A and (8x8) B boxes with TMA into a
    2-stage ring (both loads arrive on the stage's 'full' barrier, initialised for 2); a consumer
    warpgroup (one C element per thread) accumulates from the swizzled tiles and releases the stage."""
    M, N, BK, KT = 16, 8, 8, 6
    K = BK * KT
    tx = E.Var("tx", "int32", kind="thread")
    k = E.Var("k", "int32", kind="loop")
    kk = E.Var("kk", "int32", kind="loop")
    A = t.Buffer("A", (M, K), "float32", "global")
    B = t.Buffer("B", (K, N), "float32", "global")
    C = t.Buffer("C", (M * N,), "float32", "global")
    a_s = t.Buffer("a_s", (2 * M * BK,), "float32", "shared")
    b_s = t.Buffer("b_s", (2 * BK * N,), "float32", "shared")
    full = t.Buffer("full", (2,), "uint64", "shared")
    empty = t.Buffer("empty", (2,), "uint64", "shared")
    acc = t.Buffer("acc", (1,), "float32", "local")
    lay_a, lay_b = SharedLayout((M, BK), "float32", tma=True), SharedLayout((BK, N), "float32", tma=True)
    assert lay_a.tma_swizzle == lay_b.tma_swizzle == 32  # 32-byte rows: the consumers read through the swizzle
    ta, tb = th.TensorMap(A, (M, BK), 32), th.TensorMap(B, (BK, N), 32)
    s, rnd = k % 2, fdiv(k, 2)
    producer = t.For(k, 0, KT, t.SeqStmt([
        th.MbarrierWait(empty, s, (rnd + 1) % 2),
        th.TmaLoad(a_s, s * (M * BK), lay_a, ta, (0, k * BK), full, s),
        th.TmaLoad(b_s, s * (BK * N), lay_b, tb, (k * BK, 0), full, s),
    ]))
    c = tx - 32
    i, j = fdiv(c, N), c % N
    step = store(acc, 0, load(acc, 0) + load(a_s, s * (M * BK) + lay_a.offset((i, kk)))
                 * load(b_s, s * (BK * N) + lay_b.offset((kk, j))))
    consumer = t.SeqStmt([
        th.LocalDecl(acc, init=0.0),
        t.For(k, 0, KT, t.SeqStmt([th.MbarrierWait(full, s, rnd % 2), t.For(kk, 0, BK, step),
                                   th.MbarrierArrive(empty, s, elected=True)])),
        store(C, c, load(acc, 0)),
    ])
    body = [th.SharedDecl(a_s, 0), th.SharedDecl(b_s, 1024), th.SharedDecl(full, 1536), th.SharedDecl(empty, 1552),
            th.MbarrierInit(full, 2), th.MbarrierInit(empty, 4), th.Barrier(),
            t.IfThenElse(tx < 32, producer, consumer)]
    kern = kernel([A, B, C], body, 160, 1568, tx=tx, tensor_maps=[ta, tb])
    rng = np.random.default_rng(12)
    a, b = rng.standard_normal((M, K)).astype(np.float32), rng.standard_normal((K, N)).astype(np.float32)
    out = np.full(M * N, np.nan, np.float32)
    run_thread_kernel(kern, [a, b, out], check_races=True)
    np.testing.assert_allclose(out.reshape(M, N), a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-5)


def test_missing_arrive_is_a_deadlock_listing_every_wait():
    k = _mutate(ring_kernel(), lambda s: [] if isinstance(s, th.MbarrierArrive) and s.bar.name == "empty" else None)
    a = np.random.default_rng(1).standard_normal(STEPS * CH).astype(np.float32)
    with pytest.raises(DeadlockError) as e:
        run_thread_kernel(k, [a, np.full(128, np.nan, np.float32)])
    msg = str(e.value)
    assert "warp 0 (threads 0..31) waits for parity 0 of mbarrier empty[0]" in msg
    assert "phase 0 has 0 of 4 arrivals" in msg
    assert "line 18" in msg and "line 30" in msg  # the producer's and the consumers' wait sites
    for w in range(1, 5):
        assert f"warp {w} (threads" in msg


def test_wrong_parity_wait_is_reported_at_its_line():
    def flip(s):
        if isinstance(s, th.MbarrierWait) and s.bar.name == "full":
            return th.MbarrierWait(s.bar, s.index, (s.parity + 1) % 2, loc=loc(30, "wait(full, flipped parity)"))
        return None

    k = _mutate(ring_kernel(), flip)
    a = np.random.default_rng(2).standard_normal(STEPS * CH).astype(np.float32)
    # the consumers' first wait returns at once on the fresh 'full' barrier; they read the slot before
    # it is filled, and the producer's fill then overwrites what they read
    with pytest.raises(RaceError, match=r"wait for parity 1 of mbarrier full\[\d\] returned at once.*wrong-parity") as e:
        run_thread_kernel(k, [a, np.full(128, np.nan, np.float32)])
    assert "line 30" in str(e.value) and "line 20" in str(e.value)


def test_wrong_parity_wait_that_would_hang_is_named():
    """A second-round wait with the first round's parity on a barrier whose phase the warp already
    consumed returns at once: reported at the wait."""
    bar = t.Buffer("bar", (1,), "uint64", "shared")

    def build(tx, Out):
        w = th.MbarrierWait(bar, 0, E.as_expr(0), loc=loc(130, "T.mbarrier_wait_parity(bar[0], 0)"))
        return [th.SharedDecl(bar, 0), th.MbarrierInit(bar, 1), th.Barrier(),
                t.IfThenElse(tx < 32, th.MbarrierArrive(bar, 0, elected=True),
                             t.SeqStmt([w, th.MbarrierWait(bar, 0, E.as_expr(0), loc=loc(131, "wait again"))]))]

    k, _ = _two_warp_kernel(build)
    with pytest.raises(EmulatorError, match="wrong-parity mbarrier wait.*already waited for") as e:
        run_thread_kernel(k, [np.full(64, np.nan, np.float32)])
    assert "line 131" in str(e.value)

    def skipped(tx, Out):  # the consumer waits for parity 1 after phase 0 completed: it would hang
        return [th.SharedDecl(bar, 0), th.MbarrierInit(bar, 1), th.Barrier(),
                t.IfThenElse(tx < 32, th.MbarrierArrive(bar, 0, elected=True)), th.Barrier(),
                t.IfThenElse(tx >= 32, th.MbarrierWait(bar, 0, E.as_expr(1), loc=loc(140, "wait(bar, 1)")))]

    k, _ = _two_warp_kernel(skipped)
    with pytest.raises(DeadlockError, match="wrong-parity mbarrier wait: warp 1 .* phase 0 .parity 0.") as e:
        run_thread_kernel(k, [np.full(64, np.nan, np.float32)])
    assert "line 140" in str(e.value)


@pytest.mark.parametrize("fill", ["store", "cp.async", "tma"])
def test_early_slot_reuse_is_a_race_at_the_overwrite(fill):
    """The consumers release a slot (arrive on 'empty') before reading it: the producer's next fill
    overwrites bytes a consumer still reads."""
    def early(s):
        if isinstance(s, t.SeqStmt) and len(s.stmts) == 3 and isinstance(s.stmts[2], th.MbarrierArrive):
            return t.SeqStmt([s.stmts[0], s.stmts[2], s.stmts[1]])
        return None

    tma = fill == "tma"
    k = _mutate(ring_kernel(fill=fill), early)
    shape = (STEPS * 8, 4) if tma else (STEPS * CH,)
    a = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    with pytest.raises(RaceError, match="ring slot reused before its consumer released it") as e:
        run_thread_kernel(k, [a, np.full(128, np.nan, np.float32)])
    assert ("line 20" in str(e.value)) and "ring_kernel.py" in str(e.value)


def test_a_read_before_the_fill_completes_is_a_race():
    """The consumers do not wait on 'full': they read a slot the producer fills unordered."""
    k = _mutate(ring_kernel(), lambda s: [] if isinstance(s, th.MbarrierWait) and s.bar.name == "full" else None)
    a = np.random.default_rng(4).standard_normal(STEPS * CH).astype(np.float32)
    with pytest.raises(RaceError, match="ring") as e:
        run_thread_kernel(k, [a, np.full(128, np.nan, np.float32)])
    assert "line 20" in str(e.value) or "line 31" in str(e.value)


# --------------------------------------------------------------------------------------------
# named barriers, over-arrival, incomplete arrive counts, setmaxnreg


def _two_warp_kernel(build, threads=64, shared_bytes=16, target=SM90):
    tx = E.Var("tx", "int32", kind="thread")
    Out = t.Buffer("Out", (threads,), "float32", "global")
    return kernel([Out], build(tx, Out), threads, shared_bytes, tx=tx, target=target), Out


def test_named_barrier_orders_a_producer_and_a_consumer_warp():
    """Warp 0 writes shared memory and arrives (bar.arrive); warp 1 syncs on the same barrier and reads."""
    buf = t.Buffer("buf", (32,), "float32", "shared")

    def build(tx, Out):
        return [th.SharedDecl(buf, 0),
                t.IfThenElse(tx < 32,
                             t.SeqStmt([store(buf, tx, E.cast("float32", tx) * 3.0),
                                        th.NamedBarrier(1, 64, arrive_only=True)]),
                             t.SeqStmt([th.NamedBarrier(1, 64), store(Out, tx, load(buf, 63 - tx))]))]

    k, _ = _two_warp_kernel(build, shared_bytes=128)
    out = np.full(64, np.nan, np.float32)
    run_thread_kernel(k, [out], check_races=True)
    np.testing.assert_array_equal(out[32:], (63 - np.arange(32, 64)) * 3.0)
    # without the barrier the consumer's read is unordered
    k2 = _mutate(k, lambda s: [] if isinstance(s, th.NamedBarrier) else None)
    with pytest.raises(RaceError):
        run_thread_kernel(k2, [np.full(64, np.nan, np.float32)], check_races=True)


def test_a_named_barrier_one_warp_never_reaches():
    def build(tx, Out):
        return [t.IfThenElse(tx < 32, th.NamedBarrier(2, 64, loc=loc(40, "T.barrier_sync(2, 64)"))),
                store(Out, tx, 1.0)]

    k, _ = _two_warp_kernel(build)
    with pytest.raises(DeadlockError) as e:
        run_thread_kernel(k, [np.full(64, np.nan, np.float32)])
    msg = str(e.value)
    assert "named barrier 2 (32 of 64 threads arrived" in msg and "line 40" in msg
    assert "warp 1 (threads 32..63) has finished" in msg


def test_named_barrier_over_arrival_and_count_mismatch():
    def twice(tx, Out):  # the producer arrives for two phases before the consumer syncs once
        return [t.IfThenElse(tx < 32,
                             t.SeqStmt([th.NamedBarrier(1, 64, arrive_only=True, loc=loc(50, "T.barrier_arrive(1)")),
                                        th.NamedBarrier(1, 64, arrive_only=True, loc=loc(51, "T.barrier_arrive(1)"))]),
                             th.NamedBarrier(1, 64))]

    k, _ = _two_warp_kernel(twice)
    with pytest.raises(EmulatorError, match="arrives twice at named barrier 1 in one phase: more threads arrive") as e:
        run_thread_kernel(k, [np.full(64, np.nan, np.float32)])
    assert "line 51" in str(e.value)

    def mismatch(tx, Out):
        return [t.IfThenElse(tx < 32, th.NamedBarrier(1, 64),
                             th.NamedBarrier(1, 96, loc=loc(60, "T.barrier_sync(1, 96)")))]

    k, _ = _two_warp_kernel(mismatch, threads=96)
    with pytest.raises(EmulatorError, match="counting 96 threads") as e:
        run_thread_kernel(k, [np.full(96, np.nan, np.float32)])
    assert "line 60" in str(e.value)

    def leftover(tx, Out):  # arrive-only with nobody syncing: the count never completes
        return [t.IfThenElse(tx < 32, th.NamedBarrier(3, 64, arrive_only=True, loc=loc(70, "T.barrier_arrive(3)")))]

    k, _ = _two_warp_kernel(leftover)
    with pytest.raises(DeadlockError, match="32 of 64 threads arrived at named barrier 3") as e:
        run_thread_kernel(k, [np.full(64, np.nan, np.float32)])
    assert "line 70" in str(e.value)


def test_mbarrier_over_arrival_and_an_arrive_count_that_never_completes():
    bar = t.Buffer("bar", (1,), "uint64", "shared")

    def every_thread(tx, Out):  # 32 threads arrive on a barrier expecting one arrival
        return [th.SharedDecl(bar, 0), th.MbarrierInit(bar, 1), th.Barrier(),
                t.IfThenElse(tx < 32, th.MbarrierArrive(bar, 0, loc=loc(80, "T.mbarrier_arrive(bar[0])")))]

    k, _ = _two_warp_kernel(every_thread)
    with pytest.raises(EmulatorError, match="brings 32 arrivals to mbarrier bar.0., whose phase 0 expects only 1 more"):
        run_thread_kernel(k, [np.full(64, np.nan, np.float32)])

    def too_few(tx, Out):  # initialised for two arrivals, one warp arrives
        return [th.SharedDecl(bar, 0), th.MbarrierInit(bar, 2), th.Barrier(),
                t.IfThenElse(tx < 32, th.MbarrierArrive(bar, 0, elected=True, loc=loc(90, "T.mbarrier_arrive")))]

    k, _ = _two_warp_kernel(too_few)
    with pytest.raises(EmulatorError, match="1 of 2 arrivals.*never completes") as e:
        run_thread_kernel(k, [np.full(64, np.nan, np.float32)])
    assert "line 90" in str(e.value)


def test_setmaxnreg_is_a_warpgroup_collective():
    def build(tx, Out):
        return [t.IfThenElse(tx < 128, th.SetMaxNReg(40, False), th.SetMaxNReg(232, True)), store(Out, tx, 2.0)]

    k, _ = _two_warp_kernel(build, threads=256)
    out = np.full(256, np.nan, np.float32)
    run_thread_kernel(k, [out])
    assert (out == 2.0).all()

    def split(tx, Out):  # two warps of the second warpgroup never execute it
        return [t.IfThenElse(tx < 192, th.SetMaxNReg(232, True, loc=loc(100, "T.set_max_nreg(232, 1)")))]

    k, _ = _two_warp_kernel(split, threads=256)
    with pytest.raises(DeadlockError, match="setmaxnreg of warpgroup 1"):
        run_thread_kernel(k, [np.full(256, np.nan, np.float32)])
    k, _ = _two_warp_kernel(lambda tx, Out: [th.SetMaxNReg(20, False, loc=loc(110, "T.set_max_nreg(20, 0)"))],
                            threads=128)
    with pytest.raises(EmulatorError, match="multiple of 8 in 24..256") as e:
        run_thread_kernel(k, [np.full(128, np.nan, np.float32)])
    assert "line 110" in str(e.value)


def test_block_barrier_split_inside_a_warp_is_divergence():
    k, _ = _two_warp_kernel(lambda tx, Out: [t.IfThenElse(tx < 16, th.NamedBarrier(1, 64))])
    with pytest.raises(DivergenceError, match="splits the warp"):
        run_thread_kernel(k, [np.full(64, np.nan, np.float32)])


def test_elected_arrive_needs_the_whole_warp():
    bar = t.Buffer("bar", (1,), "uint64", "shared")

    def build(tx, Out):  # elect.sync under `if tx == 0` would hang the printed code
        return [th.SharedDecl(bar, 0), th.MbarrierInit(bar, 1), th.Barrier(),
                t.IfThenElse(tx == 0, th.MbarrierArrive(bar, 0, elected=True, loc=loc(150, "arrive")))]

    k, _ = _two_warp_kernel(build)
    with pytest.raises(DivergenceError, match="elect.sync") as e:
        run_thread_kernel(k, [np.full(64, np.nan, np.float32)])
    assert "line 150" in str(e.value)


def test_atomic_returns_the_previous_value():
    rng = np.random.default_rng(5)
    H = t.Buffer("H", (2,), "int32", "global")
    Prev = t.Buffer("Prev", (64,), "int32", "global")
    X = t.Buffer("X", (64,), "int32", "global")
    r = t.Buffer("r", (1,), "int32", "local")
    tx = E.Var("tx", "int32", kind="thread")
    body = [th.LocalDecl(r), th.AtomicRMW("add", H, E.as_expr(0), load(X, tx), scope="gpu", order="acq_rel",
                                          result=(r, 0)),
            store(Prev, tx, load(r, 0)),
            th.AtomicRMW("max", H, E.as_expr(1), load(X, tx), scope="cta", order="relaxed")]
    k = kernel([H, Prev, X], body, 64, 0, tx=tx)
    x = rng.integers(1, 100, 64).astype(np.int32)
    h, prev = np.array([5, -1], np.int32), np.full(64, -7, np.int32)
    run_thread_kernel(k, [h, prev, x])
    assert h[0] == 5 + x.sum() and h[1] == x.max()
    # lanes apply in some order: each sees the sum of those before it
    order = np.argsort(prev)
    np.testing.assert_array_equal(np.sort(prev), 5 + np.concatenate([[0], np.cumsum(x[order])[:-1]]))


def test_ordinary_kernels_stay_on_the_lockstep_path():
    tx = E.Var("tx", "int32", kind="thread")
    bx = E.Var("bx", "int32", kind="block")
    Out = t.Buffer("Out", (64,), "float32", "global")
    k = kernel([Out], [t.IfThenElse(bx < 1, th.Barrier()), store(Out, tx, 1.0)], 64, 0, tx=tx, bx=bx)
    assert not needs_cooperation(k)
    assert needs_cooperation(kernel([Out], [t.IfThenElse(tx < 32, th.Barrier())], 64, 0, tx=tx))


# --------------------------------------------------------------------------------------------
# printing


def _sync_kernel():
    tx = E.Var("tx", "int32", kind="thread")
    bar = t.Buffer("bar", (2,), "uint64", "shared")
    H = t.Buffer("H", (4,), "int32", "global")
    F = t.Buffer("F", (2,), "float32", "global")
    r = t.Buffer("r", (1,), "int32", "local")
    fr = t.Buffer("fr", (1,), "float32", "local")
    body = [
        th.SharedDecl(bar, 0), th.LocalDecl(r), th.LocalDecl(fr), th.MbarrierInit(bar, 4), th.Barrier(),
        t.IfThenElse(tx < 128, t.SeqStmt([
            th.SetMaxNReg(40, False),
            th.MbarrierExpectTx(bar, 1, E.as_expr(256)),
            th.MbarrierArrive(bar, 0, elected=True),
            th.MbarrierArrive(bar, 1, expect_tx=E.as_expr(128), elected=True),
            th.MbarrierArrive(bar, 0, count=2, expect_tx=E.as_expr(64)),
            th.NamedBarrier(1, 256, arrive_only=True),
        ]), t.SeqStmt([
            th.SetMaxNReg(232, True),
            th.NamedBarrier(1, 256),
            th.FenceProxyAsync(),
            th.MbarrierWait(bar, 0, E.as_expr(0)),
        ])),
        th.AtomicRMW("add", H, E.as_expr(0), tx, scope="cta", order="release", result=(r, 0)),
        th.AtomicRMW("max", H, E.as_expr(1), tx, scope="sys", order="seq_cst"),
        th.AtomicRMW("xor", H, E.as_expr(2), tx, result=(r, 0)),
        th.AtomicRMW("exch", H, E.as_expr(3), tx, scope="gpu", order="acquire", result=(r, 0)),
        th.AtomicRMW("max", F, E.as_expr(0), E.cast("float32", tx), scope="gpu", order="acq_rel", result=(fr, 0)),
        th.AtomicRMW("add", F, E.as_expr(1), E.cast("float32", tx), scope="cta", order="relaxed", result=(fr, 0)),
        store(H, 0, load(r, 0) + E.cast("int32", load(fr, 0))),
    ]
    return kernel([H, F], body, 256, 16, tx=tx)


def test_thread_ir_dumps_show_the_synchronisation_nodes():
    from tilewright.ir.thread_printer import print_thread_kernel

    text = print_thread_kernel(_sync_kernel())
    for want in ("setmaxnreg.dec(40)", "mbarrier_expect_tx(bar[1], 256)", "mbarrier_arrive(bar[0], elected)",
                 "mbarrier_arrive(bar[1], expect_tx=128, elected)", "mbarrier_arrive(bar[0], count=2, expect_tx=64)",
                 "named_barrier_arrive(id=1, threads=256)", "named_barrier_sync(id=1, threads=256)",
                 "fence_proxy_async()", "r[0] = atomic_add(H[0], tx, cta, release)"):
        assert want in text, want


def test_cuda_prints_the_synchronisation_nodes():
    from tilewright.codegen.cuda import print_cuda

    src = print_cuda(_sync_kernel())
    for want in ("mbarrier.arrive.shared::cta.b64 _, [%0];", "mbarrier.arrive.expect_tx.shared::cta.b64",
                 "mbarrier.expect_tx.relaxed.cta.shared::cta.b64", "mbarrier.arrive.shared::cta.b64 _, [%0], %1;",
                 "tw_elect_one()", "bar.arrive %0, %1;", "bar.sync %0, %1;", "setmaxnreg.dec.sync.aligned.u32 40;",
                 "setmaxnreg.inc.sync.aligned.u32 232;", "fence.proxy.async.shared::cta;",
                 "__threadfence_block();\n  r[0] = atomicAdd(", "__threadfence_system();", "tw_atomic_max(&H[1]",
                 "r[0] = atomicXor(", "r[0] = atomicExch(", "fr[0] = tw_atomic_max(&F[0]"):
        assert want in src, want


def test_nvrtc_compiles_the_synchronisation_nodes_for_sm90a():
    pytest.importorskip("cuda.bindings.nvrtc")
    from tilewright.codegen.cuda import print_cuda
    from tilewright.toolchain import nvrtc

    try:
        nvrtc.nvrtc_version()
    except ToolchainError as exc:
        pytest.skip(f"NVRTC is not usable here: {exc}")
    k = _sync_kernel()
    binary = nvrtc.compile_cuda(print_cuda(k), "sm_90a", [k.name])
    assert binary.arch == "sm_90a"


def test_hip_refuses_what_amd_has_no_meaning_for():
    from tilewright.codegen.hip import print_hip

    tx = E.Var("tx", "int32", kind="thread")
    H = t.Buffer("H", (4,), "int32", "global")
    r = t.Buffer("r", (1,), "int32", "local")
    ok = kernel([H], [th.LocalDecl(r), th.FenceProxyAsync(),
                      th.AtomicRMW("add", H, E.as_expr(0), tx, scope="cta", order="acq_rel", result=(r, 0)),
                      store(H, 1, load(r, 0))], 64, 0, target="hip -arch=gfx942", tx=tx)
    src = print_hip(ok)
    assert "__hip_atomic_fetch_add" in src and "__ATOMIC_ACQ_REL" in src and "__HIP_MEMORY_SCOPE_WORKGROUP" in src
    for node, what in ((th.NamedBarrier(1, 64, loc=loc(120, "T.barrier_sync(1, 64)")), "named barrier"),
                       (th.SetMaxNReg(40, False, loc=loc(120, "T.set_max_nreg(40, 0)")), "setmaxnreg")):
        k = kernel([H], [node], 64, 0, target="hip -arch=gfx942", tx=tx)
        with pytest.raises(CompileError, match=f"{what}.*has no AMD equivalent") as e:
            print_hip(k)
        assert "line 120" in str(e.value)
