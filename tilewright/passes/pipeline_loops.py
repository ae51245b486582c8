"""Pass ``pipeline_loops``: software pipelining of ``T.Pipelined`` loops.

Needs: verified Tile IR.
Guarantees: every ``For`` of kind ``pipelined`` becomes a ``serial`` loop.  When ``num_stages`` is
2 or more, each global -> shared ``Copy`` at the top level of the loop body whose source position
depends only on the loop variable and loop-invariant values, and whose shared destination (a whole
buffer) is used nowhere outside the loop, is issued ``num_stages - 1`` iterations ahead into a
``num_stages``-deep ring of that buffer:

    prologue: copies for iterations 0 .. S-2 (guarded), one commit each
    loop k:   wait until the copy for k has landed; barrier
              issue the copy for k + S - 1 into slot (k + S - 1) % S (guarded); commit
              the rest of the body, reading slot k % S

The barrier at the top of iteration k also guarantees that every thread is done with slot
(k - 1) % S before it is overwritten.

The prologue stands immediately before the loop, inside whatever encloses it (another loop, an
``if``), and runs again with every round of an enclosing loop.  The new loop's
``attrs["ring_buffers"]`` names its ring buffers: its in-loop copies into them are the ones the
pipeline orders (``insert_barriers`` leaves them out, the register-staged lowering may defer their
stores to the end of this loop's body); the prologue's copies into them are ordinary writes that
must follow earlier reads of the ring (``insert_barriers`` puts a barrier before them when an
enclosing loop reads the ring in a previous round) and that store before the loop starts.

When the rest of the body is a single ``T.gemm`` reading only ring buffers (the GEMM mainloop), the
wait and barrier move to the end of the iteration instead — wait for slot k + 1, barrier — with one
wait + barrier for slot 0 before the loop, and ``func.plans.mainloops[gemm]`` records that the gemm
is the body of a pipelined mainloop over the ring (``GemmMainloop``: its slot, the next slot, the
first slot).  That shape lets the gemm lowering overlap operand loads with the barrier wait (for
mma.sync: the next iteration's first K step is loaded right after it); the schedule itself is the
lowering's (``lower_gemm``), not Tile IR's.  ``tw.disable_gemm_prefetch`` and ``optimize_level <= 1``
keep the plain shape.  Copies marked ``mode="async"`` are left out of the generic
barrier analysis; their ordering is this structure.

A TMA ring of a loop nested in another loop (a persistent kernel's tile loop) initialises its
mbarriers once, at the top of the kernel, not in the prologue of every round: PTX leaves
``mbarrier.init`` on a location that holds a valid mbarrier undefined ("invalidate the mbarrier
object using mbarrier.inval first", PTX ISA, mbarrier.init).  The phases then continue from round to
round: a per-thread bit mask ``<k>_phases`` (bit ``s``: slot ``s`` has completed an odd number of
phases in earlier rounds) makes the wait for iteration ``it`` one for parity
``(bit (it % S) + it // S) % 2``, and after each round's loop every thread flips the bits of the slots
that completed an odd number of phases in it (slot ``s``: ``ceil((n - s) / S)`` of ``n`` iterations).

On targets with a tensor memory accelerator (sm_90), when every such copy is a plain 2-D tile of a
tensor TMA can describe (``tma_eligible``), the copies become ``mode="tma"``: one thread issues
bulk tensor loads that arrive on one mbarrier per ring slot, and "wait until the copy for k has
landed" is a wait on slot k % S's mbarrier for phase parity (k // S) % 2.  The ring buffers are
recorded in ``func.plans.rings`` (``PipelineRing``: stages, TMA or not, the slot mbarriers), which
gives TMA-filled ones the TMA shared layout.  This takes the per-thread copy instructions out of the loop
(on the H200 they, not the bytes, were what cp.async cost a GEMM).  ``tw.disable_tma`` (or
TileLang's ``tl.disable_tma_lower``) keeps cp.async.
"""

from __future__ import annotations

from ..ir import dtype as dt
from ..ir import expr as E
from ..ir import thread as th
from ..ir import tile as t
from ..ir.layout import SharedLayout, tma_boxes
from ..ir.plans import GemmMainloop, PipelineRing
from ..ir.tile_ops import buffer_accesses, decl_of, op_binds, rebuild_op
from ..ir.uniformity import thread_sets
from ..ir.visitor import free_vars, map_stmt, rebuild, rewrite_expr, substitute, walk


def pipeline_loops(func: t.PrimFunc, ctx=None) -> t.PrimFunc:
    # optimize_level <= 1 trades speed for register pressure and compile time: no operand prefetch
    no_prefetch = bool(ctx is not None and (ctx.options.get("tw.disable_gemm_prefetch")
                                            or ctx.options.get("optimize_level", 2) <= 1))
    tma = bool(ctx is not None and ctx.target.has("tma") and ctx.options.get("optimize_level", 2) >= 2
               and not ctx.options.get("tw.disable_tma") and not ctx.options.get("tl.disable_tma_lower"))
    allocs: dict = {}
    walk(func.body, lambda s: allocs.__setitem__(s.buffer, s) if isinstance(s, t.Alloc) else None)
    restaged: dict = {}  # old buffer -> new staged buffer

    # TMA issue and mbarrier initialisation are block-level (one thread of the block does them):
    # loops run by a thread partition keep cp.async
    in_partition = {s for s, ts in thread_sets(func.body, 1 << 30).items() if ts != (0, 1 << 30)}

    nested = _pipelined_in_loops(func.body)  # (uids: map_stmt may hand over rebuilt nodes)
    kernel_top: list = []  # mbarrier set-up of nested rings, for the top of the kernel around them

    def rewrite(s):
        if isinstance(s, t.For) and s.kind == "pipelined":
            once = kernel_top if s.uid in nested else None
            hoisted, s = _hoist_shared_allocs(s)
            out = _pipeline(s, func, allocs, restaged, no_prefetch, tma and s not in in_partition, func.plans,
                            once)
            return t.SeqStmt([*hoisted, out]) if hoisted else out
        if isinstance(s, t.Kernel) and kernel_top:
            # (post-order: every loop of this kernel was rewritten before it)
            top = list(kernel_top)
            kernel_top.clear()
            return rebuild(s, body=t.SeqStmt([*top, th.Barrier(loc=s.loc), s.body]))
        return None

    func.body = map_stmt(func.body, rewrite)
    if restaged:
        def realloc(s):
            if isinstance(s, t.Alloc) and s.buffer in restaged:
                return t.Alloc(restaged[s.buffer], loc=s.loc)
            return None

        func.body = map_stmt(func.body, realloc)
    return func


def _pipelined_in_loops(root) -> set:
    """The uids of the pipelined loops that run inside another loop (their prologue runs once a round)."""
    from ..ir.visitor import child_stmts

    out: set = set()
    stack = [(root, False)]
    while stack:
        s, inside = stack.pop()
        if isinstance(s, t.For):
            if s.kind == "pipelined" and inside:
                out.add(s.uid)
            inside = True
        stack.extend((c, inside) for c in child_stmts(s))
    return out


def _hoist_shared_allocs(loop: t.For):
    """(the shared ``Alloc``s at the top level of a pipelined loop's body, the loop without them):
    TileLang allows ``T.alloc_shared`` inside a ``T.Pipelined`` body, and the prologue issued before
    the loop copies into those buffers, so they are declared before it (a shared buffer's place is
    fixed for the whole kernel either way)."""
    body = _flatten(loop.body)
    hoisted = [s for s in body if isinstance(s, t.Alloc) and s.buffer.scope == "shared"]
    if not hoisted:
        return [], loop
    rest = [s for s in body if not (isinstance(s, t.Alloc) and s.buffer.scope == "shared")]
    new_body = t.SeqStmt(rest) if len(rest) != 1 else rest[0]
    return hoisted, rebuild(loop, body=new_body)


def _flatten(body) -> list:
    if isinstance(body, t.SeqStmt):
        out = []
        for x in body.stmts:
            out.extend(_flatten(x))
        return out
    return [body]


def _defined_in(body) -> set:
    out: set = set()

    def f(s):
        if isinstance(s, t.LetStmt) or isinstance(s, (t.For,)):
            out.add(s.var)
        elif isinstance(s, t.ParallelFor):
            out.update(s.vars)
        else:
            out.update(op_binds(s))  # tile ops: as their declarations say (return_prev)

    walk(body, f)
    return out


def _buffers_touched(stmt) -> list:
    """(buffer, is_write) pairs of every access in a statement tree."""
    from ..ir.verifier import exprs_of
    from ..ir.visitor import loads_in

    out = []

    def f(s):
        out.extend(buffer_accesses(s))  # tile ops: as their declarations say
        if isinstance(s, t.BufferStore):
            out.append((s.buffer, True))
        for e in exprs_of(s):
            out.extend((ld.buffer, False) for ld in loads_in(e))

    walk(stmt, f)
    return out


def tma_eligible(c: t.Copy) -> bool:
    """A global -> shared tile copy that TMA boxes can do: same dtype, the tensor contiguous in its
    last dimension with other strides static multiples of 16 bytes, at most 5 dimensions, box
    extents static and at most 256, the shared tile 2-D (after dropping the copy's unit dims)
    that the TMA layout can hold (``SharedLayout.tma_compatible``)."""
    src, dst = c.src, c.dst
    buf = src.buffer
    if buf.dtype != dst.buffer.dtype or dt.nbytes(buf.dtype) not in (1, 2, 4) or buf.ndim > 5:
        return False
    if dt.is_subbyte(buf.dtype):  # two per byte: copied element by element
        return False
    if buf.attrs.get("address"):  # T.make_tensor on an address: the host has no tensor map of it
        return False
    if any(isinstance(n, int) and n == 0 for n in buf.shape):  # an empty tensor: no tensor map describes it
        return False
    esize = dt.nbytes(buf.dtype)
    unit_last = isinstance(buf.strides[-1], int) and buf.strides[-1] == 1  # a run-time stride is not 1
    if not unit_last or not all(isinstance(x, int) and x * esize % 16 == 0 for x in buf.strides[:-1]):
        return False
    if not all(isinstance(x, int) and 0 < x <= 256 for x in src.extents):
        return False
    kept = [x for d, x in enumerate(src.extents) if d not in src.squeezed]
    tile = tuple(dst.buffer.shape[-2:])  # a whole 2-D tile, or one slot of a ring (leading dims indexed)
    if any(d not in dst.squeezed for d in range(dst.buffer.ndim - 2)) or not dst.is_full() and dst.buffer.ndim == 2:
        return False
    if any(not (E.const_value(x) == 0) for x in dst.starts[-2:]):
        return False
    if len(kept) != 2 or tuple(kept) != tile or src.squeezed and max(src.squeezed) >= buf.ndim - 1:
        return False
    return SharedLayout.tma_compatible(tile, buf.dtype)


def _pipeline(loop: t.For, func, allocs, restaged, no_prefetch=False, tma=False, plans=None, kernel_top=None):
    """``loop`` pipelined (module docstring); ``kernel_top`` (a list: the loop runs inside another loop)
    receives what a TMA ring sets up once for the whole kernel."""
    stages = loop.num_stages
    serial = t.For(loop.var, loop.start, loop.extent, loop.body, "serial", 0, loop.loc, dict(loop.attrs))
    if stages < 2:
        return serial
    body = _flatten(loop.body)
    inner_defs = _defined_in(loop.body)
    candidates = []
    for s in body:
        if not (isinstance(s, t.Copy) and s.src.buffer.scope == "global" and s.dst.buffer.scope == "shared"
                and s.mode == "sync") or dt.is_subbyte(s.src.buffer.dtype):  # 4-bit: element loops, not staged
            continue
        if not s.dst.is_full() or s.dst.buffer not in allocs or s.dst.buffer in restaged:
            continue
        fv = set()
        for st in s.src.starts:
            fv |= free_vars(st)
        if fv & (inner_defs - {loop.var}):
            continue
        candidates.append(s)
    if not candidates:
        return serial
    # a candidate's buffer must not be written by anything else in the loop, nor used outside it
    cand_bufs = {c.dst.buffer for c in candidates}
    for s in body:
        for buf, write in _buffers_touched(s):
            if buf in cand_bufs and write and not (s in candidates and s.dst.buffer is buf):
                cand_bufs.discard(buf)
    outside = _buffers_touched_outside(func.body, loop)
    cand_bufs -= outside
    candidates = [c for c in candidates if c.dst.buffer in cand_bufs]
    if not candidates:
        return serial

    use_tma = tma and all(tma_eligible(c) and not c.disable_tma for c in candidates)
    bar = None
    if use_tma:
        bar = t.Buffer(f"{loop.var.name}_mbar", (stages,), "uint64", "shared", loc=loop.loc)
        arrivals = sum(tma_boxes(c.dst.buffer.shape, c.dst.buffer.dtype)[0] for c in candidates)
    new_bufs = {}
    for c in candidates:
        old = c.dst.buffer
        nb = t.Buffer(old.name, (stages,) + tuple(old.shape), old.dtype, "shared", loc=old.loc)
        nb.attrs.update(old.attrs)
        plans.rings[nb] = PipelineRing(stages, use_tma, bar)
        new_bufs[old] = nb
        restaged[old] = nb

    # the loop's own ring buffers: its in-loop copies into them are ordered by the pipeline's wait +
    # barrier; the same copies in the prologue (before the loop, inside whatever encloses it) are not
    ring_bufs = frozenset(new_bufs.values())
    rel = loop.var - loop.start  # iteration number 0, 1, ...

    def issue_stage(ahead) -> t.Stmt:
        """Every copy of iteration rel + ahead into its ring slot, under one guard rel + ahead < extent
        (one block of code: with TMA, one thread's issue sequence)."""
        copies = [issue(c, ahead) for c in candidates]
        guard = rel + ahead < loop.extent
        if isinstance(guard, E.Const):
            return t.SeqStmt(copies if guard.value else [])
        return t.IfThenElse(guard, t.SeqStmt(copies), None, loc=loop.loc)

    def issue(c: t.Copy, ahead) -> t.Stmt:
        """The copy of iteration rel + ahead into its ring slot."""
        it = rel + ahead
        src_starts = tuple(substitute(x, {loop.var: loop.start + it}) for x in c.src.starts)
        src = t.Region(c.src.buffer, src_starts, c.src.extents, c.src.squeezed)
        nb = new_bufs[c.dst.buffer]
        slot = it % stages
        dst = t.Region(nb, (E.as_expr(slot),) + tuple(c.dst.starts), (1,) + tuple(c.dst.extents),
                       (0,) + tuple(d + 1 for d in c.dst.squeezed))
        if use_tma:
            return t.Copy(src, dst, c.loc, mode="tma", barrier=(bar, slot), coalesced_width=c.coalesced_width)
        return t.Copy(src, dst, c.loc, mode="async", disable_tma=c.disable_tma, coalesced_width=c.coalesced_width)

    phases = None  # a nested ring's phase bits from earlier rounds (module docstring)
    if use_tma and kernel_top is not None:
        phases = t.Buffer(f"{loop.var.name}_phases", (1,), "int32", "var", loc=loop.loc)

    def wait_for(it):
        """Wait until the copies of iteration ``it`` have landed (before the block barrier)."""
        if use_tma:
            parity = it // stages
            if phases is not None:
                parity = (E.Load(phases, (E.as_expr(0),)) >> (it % stages)) + parity
            return th.MbarrierWait(bar, it % stages, parity % 2, loc=loop.loc)
        return th.AsyncWait(stages - 2, loc=loop.loc)

    prologue = [t.Alloc(bar, loc=loop.loc), th.MbarrierInit(bar, arrivals, loc=loop.loc),
                th.Barrier(loc=loop.loc)] if use_tma else []
    after = []
    if phases is not None:
        # set up once at the kernel's top; this round's odd phase counts flipped after the loop
        kernel_top += [t.Alloc(bar, loc=loop.loc), th.MbarrierInit(bar, arrivals, loc=loop.loc),
                       t.Alloc(phases, E.as_expr(0), loc=loop.loc)]
        # the block barrier stays in each round's prologue: the round's first TMA loads overwrite ring slots
        # that threads were still reading at the end of the previous round (the emulator's race check)
        prologue = [th.Barrier(loc=loop.loc)]
        n = E.emax(loop.extent, 0)
        odd = sum(((n + (stages - 1 - s_)) // stages % 2) * (1 << s_) for s_ in range(stages))
        after = [t.BufferStore(phases, (E.as_expr(0),), E.Load(phases, (E.as_expr(0),)) ^ odd, loc=loop.loc)]
    for s_ in range(stages - 1):
        # in the prologue rel is 0: substitute the loop variable by start
        prologue.append(_fold_guard(map_stmt(issue_stage(s_), lambda x: _subst_stmt(x, {loop.var: loop.start}))))
        if not use_tma:
            prologue.append(th.AsyncCommit(loc=loop.loc))
    drain = [] if use_tma else [th.AsyncWait(0, loc=loop.loc)]

    rest = [s for s in body if s not in candidates]
    slot_now = rel % stages
    rest_stmt = t.SeqStmt(rest)
    rest_stmt = _restage(rest_stmt, new_bufs, slot_now)
    if _prefetchable(rest_stmt, new_bufs) and not no_prefetch:
        # the GEMM mainloop shape: [copies..., gemm, wait for the next slot, barrier]
        gemm = rest_stmt.stmts[0]
        first_wait = wait_for(E.as_expr(0))
        if use_tma and not (isinstance(loop.extent, E.Const) and loop.extent.value > 0):
            # a loop that may run no iteration (T.Pipelined(lo, hi) with hi <= lo at run time) issued no
            # copy in the prologue: a wait on slot 0's mbarrier would hang
            first_wait = t.IfThenElse(E.as_expr(0) < loop.extent, first_wait, None, loc=loop.loc)
        pre = [first_wait, th.Barrier(loc=loop.loc)]
        new_body = [issue_stage(stages - 1)]
        if use_tma:
            new_body.append(th.Comment("copies issued by the tensor memory accelerator"))
            # the last iteration has no next slot to wait for: an mbarrier phase nobody fills would hang
            step_wait = t.IfThenElse(rel + 1 < loop.extent, wait_for(rel + 1), None, loc=loop.loc)
        else:
            new_body.append(th.AsyncCommit(loc=loop.loc))
            step_wait = th.AsyncWait(stages - 2, loc=loop.loc)
        new_body += [gemm, step_wait, th.Barrier(loc=loop.loc)]
        plans.mainloops[gemm] = GemmMainloop(stages, slot_now, (rel + 1) % stages,
                                             substitute(slot_now, {loop.var: loop.start}), use_tma)
        new_loop = t.For(loop.var, loop.start, loop.extent, t.SeqStmt(new_body), "serial", 0, loop.loc,
                         dict(loop.attrs, pipelined=stages, ring_buffers=ring_bufs))
        return [*prologue, *pre, new_loop, *drain, *after]
    new_body = [wait_for(rel), th.Barrier(loc=loop.loc), issue_stage(stages - 1)]
    if not use_tma:
        new_body.append(th.AsyncCommit(loc=loop.loc))
    new_body.append(rest_stmt)
    new_loop = t.For(loop.var, loop.start, loop.extent, t.SeqStmt(new_body), "serial", 0, loop.loc,
                     dict(loop.attrs, pipelined=stages, ring_buffers=ring_bufs))
    return [*prologue, new_loop, *drain, *after]


def _prefetchable(rest, new_bufs) -> bool:
    stmts = rest.stmts if isinstance(rest, t.SeqStmt) else [rest]
    if len(stmts) != 1 or not isinstance(stmts[0], t.Gemm):
        return False
    g = stmts[0]
    ring = set(new_bufs.values())
    return g.a.buffer in ring and g.b.buffer in ring and not g.clear_accum


def _buffers_touched_outside(root, loop) -> set:
    out: set = set()

    def visit(s):
        if s is loop:
            return
        from ..ir.visitor import child_stmts

        for buf, _ in _buffers_touched_shallow(s):
            out.add(buf)
        for c in child_stmts(s):
            visit(c)

    visit(root)
    return out


def _buffers_touched_shallow(s) -> list:
    from ..ir.verifier import exprs_of
    from ..ir.visitor import loads_in

    out = list(buffer_accesses(s))
    if isinstance(s, t.BufferStore):
        out.append((s.buffer, True))
    for e in exprs_of(s):
        out.extend((ld.buffer, False) for ld in loads_in(e))
    return out


def _fold_guard(s):
    """A prologue stage whose guard is known (a static trip count) without its ``if``: a stage under
    an ``if`` that might be false leaves barrier insertion unsure whether its barrier ran."""
    if isinstance(s, t.IfThenElse) and isinstance(s.cond, E.Const):
        return s.then_body if s.cond.value else t.SeqStmt([])
    return s


def _subst_stmt(s, mapping):
    """Substitute variables in the expressions of one statement (regions, loads, conditions)."""
    def sub_region(r):
        return t.Region(r.buffer, tuple(substitute(x, mapping) for x in r.starts), r.extents, r.squeezed)

    if isinstance(s, t.Copy):
        bar = None if s.barrier is None else (s.barrier[0], substitute(s.barrier[1], mapping))
        return t.Copy(sub_region(s.src), sub_region(s.dst), s.loc, s.mode, bar, s.disable_tma, s.coalesced_width)
    if isinstance(s, t.IfThenElse):
        return t.IfThenElse(substitute(s.cond, mapping), s.then_body, s.else_body, s.loc)
    return None


def _restage(stmt, new_bufs: dict, slot):
    """Point every use of a ring-buffered shared buffer at ring slot ``slot``."""
    def fix_expr(e):
        def f(x):
            if isinstance(x, E.Load) and x.buffer in new_bufs:
                return E.Load(new_bufs[x.buffer], (slot,) + tuple(x.indices))
            return None

        return rewrite_expr(e, f)

    def fix_region(r):
        if r.buffer in new_bufs:
            return t.Region(new_bufs[r.buffer], (E.as_expr(slot),) + tuple(fix_expr(x) for x in r.starts),
                            (1,) + tuple(r.extents), (0,) + tuple(d + 1 for d in r.squeezed))
        return t.Region(r.buffer, tuple(fix_expr(x) for x in r.starts), r.extents, r.squeezed)

    def f(s):
        if isinstance(s, t.Reduce) and (s.src in new_bufs or s.dst in new_bufs):
            from ..errors import CompileError

            raise CompileError("a pipelined shared buffer cannot be reduced directly", s.loc,
                               hint="copy it to a fragment first")
        if decl_of(s) is not None:  # tile ops: their declarations rebuild them
            return rebuild_op(s, fix_region, fix_expr)
        if isinstance(s, t.BufferStore):
            if s.buffer in new_bufs:
                return t.BufferStore(new_bufs[s.buffer], (slot,) + tuple(fix_expr(i) for i in s.indices),
                                     fix_expr(s.value), s.loc)
            return t.BufferStore(s.buffer, tuple(fix_expr(i) for i in s.indices), fix_expr(s.value), s.loc)
        if isinstance(s, t.LetStmt):
            return t.LetStmt(s.var, fix_expr(s.value), s.loc)
        if isinstance(s, t.IfThenElse):
            return t.IfThenElse(fix_expr(s.cond), s.then_body, s.else_body, s.loc)
        return None

    return map_stmt(stmt, f)
