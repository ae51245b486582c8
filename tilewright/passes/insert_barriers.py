"""Pass ``insert_barriers``: barriers between tile statements that share memory.

Needs: Tile IR after ``expand_tile_ops`` (tile statements: Copy, Gemm, Reduce, ParallelFor,
BufferStore, ...), with pipelines already structured by ``pipeline_loops``.
Guarantees: between any two statements where one writes a shared (or global) buffer that the
other reads or writes, a ``Barrier`` executes — also across loop iterations (the loop body is
analysed as if it followed itself) and after either branch of an ``if``.  Statements are
treated as executed by different threads (a conservative but simple rule).  Async copies that a
pipelined loop (``pipeline_loops``: its ``ring_buffers``) issues inside its own body are excluded:
the pipeline's own wait + barrier order them.  Its prologue's async copies, which stand before the
loop in whatever encloses it (another loop, an ``if``), are writes of their ring slots like any
other: a barrier separates them from earlier reads of the ring (say the previous round's gemm).
A pipelined loop leaves its rings read and written at its end (its lowering reaches past its last
barrier), so whatever touches them after it waits for a barrier.
The compiler's TMA copies are excluded everywhere: their issuers order them with mbarriers (full
and empty rings).  A ``T.tma_copy`` is like a prologue's async copy: its mbarrier orders the reads
after it, but nothing orders its write against earlier reads of its tile by other threads (the
previous iteration's gemm), so it waits for a barrier after them -- unless it runs in a thread
partition that hands data over through mbarriers, whose program orders that itself.  Barriers are
never placed inside a ``T.Parallel`` body or a branch on a per-thread condition (the
``ir.uniformity`` analysis decides which conditions are per-thread).

Per region: inside a ``ThreadPartition`` the barriers between its own statements synchronize its
threads only (lowering makes them named barriers over the partition); a partition whose accesses
conflict with what the block did before gets a block barrier in front of it, and everything it
accessed counts as unordered for the block until the next block barrier after it.
"""

from __future__ import annotations

from ..errors import InternalError
from ..ir import thread as th
from ..ir import tile as t
from ..ir.tile_ops import buffer_accesses, collective_name
from ..ir.uniformity import Uniformity
from ..ir.verifier import exprs_of
from ..ir.visitor import child_stmts, loads_in, walk

_TRACKED = ("shared", "global")


class _State:
    """Buffers accessed since the last barrier.  ``synced_*``: accessed by thread partitions that
    order their hand-offs with mbarriers (producer/consumer): unordered for the block, but not for
    the sibling partitions, which must not be separated by a block barrier (they run concurrently
    and wait on each other, so one would deadlock)."""

    def __init__(self, reads=(), writes=(), synced_reads=(), synced_writes=()):
        self.reads = set(reads)
        self.writes = set(writes)
        self.synced_reads = set(synced_reads)
        self.synced_writes = set(synced_writes)

    def copy(self):
        return _State(self.reads, self.writes, self.synced_reads, self.synced_writes)

    def merge(self, o):
        self.reads |= o.reads
        self.writes |= o.writes
        self.synced_reads |= o.synced_reads
        self.synced_writes |= o.synced_writes

    def clear(self):
        for x in (self.reads, self.writes, self.synced_reads, self.synced_writes):
            x.clear()

    def flush(self):
        """The mbarrier-ordered partitions are over: their accesses count for the block."""
        self.reads |= self.synced_reads
        self.writes |= self.synced_writes
        self.synced_reads.clear()
        self.synced_writes.clear()


def insert_barriers(func: t.PrimFunc) -> t.PrimFunc:
    func.body = _seq(func.body, _State(), _Where(Uniformity(func), None))[0]
    return func


class _Where:
    """The uniformity analysis and the ThreadPartition being analysed (None: the whole block)."""

    def __init__(self, uniformity: Uniformity, region, rings=frozenset()):
        self.uniformity = uniformity
        self.region = region
        self.rings = rings  # ring buffers of the enclosing pipelined loops: their in-loop copies are ordered

    def inside(self, loop: t.For) -> _Where:
        rings = loop.attrs.get("ring_buffers")
        return _Where(self.uniformity, self.region, self.rings | rings) if rings else self


def _accesses(s, rings=frozenset()) -> tuple[set, set, set]:
    """Shared/global buffers a statement (tree) reads and writes, and the ring buffers its prologue
    async copies write; TMA copies and a pipeline's in-loop async copies (into ``rings``) excluded.
    A prologue's writes must wait for earlier accesses but need no barrier after them (the
    pipeline waits and synchronizes before any read; its prologue stages fill different slots)."""
    reads, writes, issued = set(), set(), set()

    def f(x, rings):
        if isinstance(x, t.Copy) and x.mode == "tma" and x.user_sync:  # T.tma_copy: see the module doc
            reads.add(x.src.buffer)
            issued.add(x.dst.buffer)
            return
        if isinstance(x, t.Copy) and (x.mode == "tma" or x.mode == "async" and x.dst.buffer in rings):
            return
        if isinstance(x, t.Copy) and x.mode == "async":
            reads.add(x.src.buffer)
            issued.add(x.dst.buffer)
            return
        if isinstance(x, t.For) and x.attrs.get("ring_buffers"):  # a nested pipelined loop: its own copies
            rings = rings | x.attrs["ring_buffers"]
        for c in child_stmts(x):
            f(c, rings)
        for buf, is_write in buffer_accesses(x):  # tile ops: as their declarations say
            (writes if is_write else reads).add(buf)
        if isinstance(x, t.BufferStore):
            writes.add(x.buffer)
        for e in exprs_of(x):
            for ld in loads_in(e):
                reads.add(ld.buffer)

    f(s, rings)
    reads = {b for b in reads if b.scope in _TRACKED}
    writes = {b for b in writes if b.scope in _TRACKED}
    return reads, writes, issued


def _conflict(state: _State, reads: set, writes: set) -> bool:
    # global memory written and then read by other threads of the block also needs ordering,
    # but writes by different statements to disjoint global elements are the common case
    # (epilogues); only read-after-write and write-after-read are tracked for global buffers
    for b in writes:
        if b in state.reads or (b in state.writes and b.scope == "shared"):
            return True
    return any(b in state.writes for b in reads)


def _seq(s, state: _State, w: _Where):
    """Returns (new statement, state after it)."""
    if isinstance(s, t.SeqStmt):
        out = []
        for x in s.stmts:
            nx, state = _seq(x, state, w)
            out.append(nx)
        return t.SeqStmt(out, s.loc), state
    if isinstance(s, th.Barrier):
        state.clear()
        return s, state
    if isinstance(s, t.Kernel):
        body, st = _seq(s.body, state, w)
        return t.Kernel(s.grid, s.threads, s.block_vars, body, s.loc, dict(s.attrs)), st
    if isinstance(s, t.For):
        # pass 1 finds the state at the end of the body; pass 2 starts from pre-loop + that state
        # (_seq rebuilds containers and never mutates leaves, so analysing the body twice is safe)
        wi = w.inside(s)
        _, end1 = _seq(s.body, state.copy(), wi)
        start = state.copy()
        start.merge(end1)
        body, end = _seq(s.body, start, wi)
        rings = s.attrs.get("ring_buffers")
        if rings:
            # past the loop's last barrier its lowering may still touch the ring: the gemm prefetches
            # the (nonexistent) next slot's first K step, register-staged copies store their (guarded
            # off) last copies; whatever comes after the loop (the next round's prologue) must wait
            end.reads |= rings
            end.writes |= rings
        return t.For(s.var, s.start, s.extent, body, s.kind, s.num_stages, s.loc, s.attrs), end
    if isinstance(s, t.ThreadPartition):
        reads, writes, issued = _accesses(s.body, w.rings)
        synced = _uses_mbarriers(s.body)
        if not synced:
            state.flush()
        out = []
        if _conflict(state, reads, writes | issued):
            out.append(th.Barrier(loc=s.loc))
            state = _State()
        body, _ = _seq(s.body, _State(), _Where(w.uniformity, s, w.rings))
        (state.synced_reads if synced else state.reads).update(reads)
        (state.synced_writes if synced else state.writes).update(writes)
        out.append(t.ThreadPartition(s.base, s.count, s.role, body, s.loc))
        return (t.SeqStmt(out) if len(out) > 1 else out[0]), state
    if isinstance(s, t.IfThenElse) and w.uniformity.is_uniform(s.cond, w.region) and (
            _has_tile_ops(s) or _needs_inner_barrier(s, w)):
        # the condition itself may read shared memory another thread just wrote (T.any_of(mask_s))
        cond_reads = {ld.buffer for ld in loads_in(s.cond) if ld.buffer.scope in _TRACKED}
        state.flush()
        fence = _conflict(state, cond_reads, set())
        if fence:
            state = _State()
        state.reads |= cond_reads
        a, sa = _seq(s.then_body, state.copy(), w)
        a_rest, leading = _without_leading_barrier(a)
        if s.else_body is None and leading:
            # the branch starts with a barrier: one before the ``if`` (a uniform condition) orders the
            # same accesses and leaves both paths synchronized (say the stages of a pipeline prologue
            # under a run-time trip-count guard: one barrier, not one per stage)
            return t.SeqStmt([th.Barrier(loc=s.loc), t.IfThenElse(s.cond, a_rest, None, s.loc)]), sa
        if s.else_body is not None:
            b, sb = _seq(s.else_body, state.copy(), w)
        else:
            b, sb = None, state.copy()
        sa.merge(sb)
        out = t.IfThenElse(s.cond, a, b, s.loc)
        return (t.SeqStmt([th.Barrier(loc=s.loc), out]) if fence else out), sa
    if isinstance(s, t.IfThenElse) and _has_tile_ops(s) and _needs_inner_barrier(s, w):
        # the verifier refuses tile operations under per-thread conditions; one that reaches here
        # (a pass made the condition look per-thread) would lose the barrier its branch needs
        raise InternalError("a branch on a per-thread condition ("
                            f"{w.uniformity.reason(s.cond, w.region)}) orders tile operations with a barrier, "
                            "which its threads cannot all reach", "insert_barriers", s.loc)
    reads, writes, issued = _accesses(s, w.rings)
    if not reads and not writes and not issued:
        return s, state
    state.flush()
    if _conflict(state, reads, writes | issued):
        state = _State()
        state.reads |= reads
        state.writes |= writes
        return t.SeqStmt([th.Barrier(loc=s.loc), s]), state
    state.reads |= reads
    state.writes |= writes
    return s, state


def _without_leading_barrier(s):
    """(``s`` without its first statement, True) when that statement is a ``Barrier``, else (s, False)."""
    if isinstance(s, th.Barrier):
        return t.SeqStmt([]), True
    if isinstance(s, t.SeqStmt) and s.stmts:
        first, leading = _without_leading_barrier(s.stmts[0])
        if leading:
            return t.SeqStmt([first, *s.stmts[1:]], s.loc), True
    return s, False


def _uses_mbarriers(s) -> bool:
    found = []
    walk(s, lambda x: found.append(x) if isinstance(x, (th.MbarrierWait, th.MbarrierArrive)) else None)
    return bool(found)


def _needs_inner_barrier(s: t.IfThenElse, w: _Where) -> bool:
    """Whether a branch orders accesses among its own statements (``s[tx] = 1`` then a scan of
    ``s``): then it is analysed statement by statement, not as one statement."""
    found = []
    for body in (s.then_body, s.else_body):
        if body is not None:
            walk(_seq(body, _State(), w)[0], lambda x: found.append(x) if isinstance(x, th.Barrier) else None)
    return bool(found)


def _has_tile_ops(s) -> bool:
    found = [False]

    def f(x):
        if isinstance(x, t.ParallelFor) or collective_name(x) is not None:
            found[0] = True

    walk(s, f)
    return found[0]
