"""``T.Parallel`` lowering (part of ``lower_to_threads``).

The loop iterates by its layout: thread ``tid`` handles the positions ``layout.index(tid, r)`` for
each register ``r`` (an unrolled sequence).  Registers come in *groups* of ``g`` consecutive
positions along the innermost loop dimension (verified on the layout's tables for every thread).
Within a group, a global or shared access whose address advances by one element per position,
whose bounds mask is the same for the whole group and whose start is aligned to ``g`` elements is
done as one vector access (up to 16 bytes); every other access is done per element.
"""

from __future__ import annotations

import numpy as np

from ..errors import CompileError
from ..ir import dtype as dt
from ..ir import expr as E
from ..ir import thread as th
from ..ir import tile as t
from ..ir.layout import StripedLayout
from ..ir.reducer import ReducerUpdate
from ..ir.verifier import exprs_of
from ..ir.visitor import loads_in, map_stmt, walk
from .analysis import uses_var
from .index_algebra import linear_terms
from .lower_exprs import Env, lower_expr
from .lowering_context import LoweringContext


def contiguity(layout, max_group: int) -> int:
    """Largest g (power of two, <= max_group) such that registers r0..r0+g-1 (r0 % g == 0) hold
    consecutive positions along the last dimension in every thread that holds any of them, starting
    at a multiple of g (a padded layout's last round is empty in some threads: the whole group is,
    and the loop skips it there)."""
    tab = layout.table
    shape = layout.shape
    inner = shape[-1]
    g = 1
    while g * 2 <= max_group and layout.num_regs % (g * 2) == 0:
        cand = g * 2
        ok = True
        for r0 in range(0, layout.num_regs, cand):
            filled = tab[:, r0] >= 0
            base = tab[filled, r0]
            if np.any((base % inner) % cand != 0):
                ok = False
                break
            for k in range(1, cand):
                if np.any((tab[:, r0 + k] >= 0) != filled) or np.any(tab[filled, r0 + k] != base + k):
                    ok = False
                    break
            if not ok:
                break
        if not ok:
            break
        g = cand
    return g


def lower_parallel(ctx: LoweringContext, p: t.ParallelFor, env: Env, lower_stmt) -> list:
    from .lower_store_matrix import try_store_matrix

    stored = try_store_matrix(ctx, p, env)  # an accumulator -> 16-bit shared tile copy: stmatrix on sm_90
    if stored is not None:
        return stored
    layout = ctx.parallel_layouts[p]
    widest = max([dt.nbytes(b.dtype) for b in _mem_buffers(p)] or [4])
    most = max(16 // widest, 1)
    if p.coalesced_width is not None:  # the author's bound on the vector width
        most = min(most, p.coalesced_width)
    packed = any(dt.is_subbyte(b.dtype) and b.scope == "global" for b in _mem_buffers(p))  # two per byte: one by one
    g = contiguity(layout, most) if _vectorizable_body(p.body) and not packed else 1
    out: list = []
    inner_var = p.vars[-1]
    env = env.child()
    # fragments converted through shared memory are read from the scratch in this loop only: the
    # scratch is reused by later statements, and the registers stay the fragment's home
    env.frag_redirect = dict(env.frag_redirect)
    env.replica_guard = replica_guard(ctx, layout)
    effects = _Effects(p) if env.replica_guard is not None else None
    if env.replica_guard is not None and effects.atomic_result and not effects.registers:
        # an atomic's previous value belongs to the one thread that performs it, and every replica
        # would use it: iterate with one holder per position (threads beyond the positions idle)
        layout = StripedLayout(p.extents, layout.num_threads, replicate=False)
        g = contiguity(layout, most) if _vectorizable_body(p.body) else 1
        env.replica_guard = replica_guard(ctx, layout)
    elif env.replica_guard is UNGUARDABLE and effects.only_in_memory():
        # the loop follows a reduced fragment whose positions have several holders at different
        # registers, and no thread guard leaves one: an in-place update s[i] = s[i] + r[i] would be
        # applied twice; iterate by a striped layout instead (the fragment is read through shared memory)
        layout = StripedLayout(p.extents, layout.num_threads)
        g = contiguity(layout, most) if _vectorizable_body(p.body) and not packed else 1
        env.replica_guard = replica_guard(ctx, layout)
    elif env.replica_guard is UNGUARDABLE and (effects.atomic or effects.updated_in_place()):
        from ..errors import CompileError

        raise CompileError("this T.Parallel loop follows a reduced fragment whose positions are held by several "
                           "threads, writes a fragment and updates shared/global memory in place: the update "
                           "would be applied more than once", p.loc,
                           hint="split the loop: one T.Parallel for the fragment writes, one for the memory update")
    ctx.begin_scratch()
    mismatched = _mismatched_fragments(ctx, p, layout, env)
    if mismatched and env.thread_dep:
        from ..errors import CompileError

        # (the conversion's block barriers would wait for threads that did not take the branch: a hang)
        raise CompileError(f"this T.Parallel loop reads fragment {mismatched[0].name} in another layout, which goes "
                           "through shared memory between two block barriers, under a condition that differs "
                           "between threads (a warp vote)", p.loc,
                           hint="convert the fragment (T.copy into one of the loop's layout) before the `if`")
    for buf in mismatched:
        out.extend(convert_through_shared(ctx, buf, env, p.loc))
    for r0 in range(0, layout.num_regs, g):
        pos0 = layout.index(ctx.tid, r0)
        group_env = env.child()
        group_env.active = layout.valid_np(ctx.tid_np, r0)
        for v, x in zip(p.vars, pos0):
            group_env.sym[v] = E.as_expr(x)
        pre, post, vec_stores = _plan_vectors(ctx, p, group_env, inner_var, g)
        body: list = list(pre)
        for k in range(g):
            e = group_env.child()
            e.k = k
            e.active = layout.valid_np(ctx.tid_np, r0 + k)
            if k:
                e.sym[inner_var] = group_env.sym[inner_var] + k
            body.extend(_lower_body(ctx, p.body, e, lower_stmt, vec_stores, k))
        body.extend(post)
        if env.replica_guard is not None and env.replica_guard is not UNGUARDABLE:
            body = _by_one_replica(p, body, env.replica_guard, effects)
        valid = _valid_expr(layout, ctx, r0)
        if valid is not None:
            out.append(t.IfThenElse(valid, t.SeqStmt(body), None, loc=p.loc))
        else:
            out.extend(body)
    return out


def replication_bits(layout, nthreads: int) -> list:
    """Thread-index bits m such that threads t and t ^ m hold the same elements in the same
    registers (replicas of one another)."""
    tab = layout.table
    tids = np.arange(nthreads)
    bits = []
    m = 1
    while m < nthreads:
        partner = tids ^ m
        if (partner < nthreads).all() and np.array_equal(tab[tids], tab[partner]):
            bits.append(m)
        m <<= 1
    return bits


UNGUARDABLE = "unguardable"  # replica_guard: positions held by several threads, no thread-index guard picks one


def replica_guard(ctx, layout):
    """True in exactly one holder of each loop position (None when every position has one holder):
    side effects that must happen once (atomics, stores to memory) are guarded by it.  Holders are
    replicas by thread-index bits (t, t ^ m), by a thread range (96 threads over 16 threads' worth of
    positions: t, t + 16, ..., t + 80) or by groups of consecutive threads (a row held by threads
    7r..7r+6); ``UNGUARDABLE`` when no such guard leaves exactly one holder of every position."""
    n = ctx.nthreads
    tab = layout.table[:n]
    held = tab[tab >= 0]
    if held.size == 0 or np.bincount(held).max() <= 1:
        return None
    tids = np.arange(n)

    def exactly_once(chosen) -> bool:
        rows = tab[chosen]
        counts = np.bincount(rows[rows >= 0], minlength=int(held.max()) + 1)
        return bool((counts[np.unique(held)] == 1).all())

    mask = 0
    for b in replication_bits(layout, n):
        mask |= b
    by_bits = (tids & mask) == 0
    if mask and exactly_once(by_bits):
        return E.binary("==", ctx.tid & mask, 0)
    holds = (tab >= 0).any(axis=1)
    first: dict = {}
    reps = np.array([first.setdefault(row.tobytes(), tid) == tid for tid, row in enumerate(tab)]) & holds
    if not reps.any():
        return UNGUARDABLE
    bound = int(tids[reps].max()) + 1
    below = E.binary("<", ctx.tid, bound)
    if exactly_once(by_bits & (tids < bound)):
        return below if mask == 0 else E.binary("and", E.binary("==", ctx.tid & mask, 0), below)
    for period in range(2, bound + 1):
        q = int(np.argmin(reps[:period])) if not reps[:period].all() else period
        if q and exactly_once((tids % period < q) & (tids < bound)):
            cond = E.binary("<", E.binary("%", ctx.tid, period), q)
            return cond if bound >= n else E.binary("and", cond, below)
    return UNGUARDABLE


def _by_one_replica(p: t.ParallelFor, body: list, guard, effects: _Effects) -> list:
    """A body that writes memory only (no registers the replicas keep) runs in one replica: the
    others would only read what it stores, racing with the store; else its stores are guarded."""
    if effects.stored and not effects.registers:
        return [t.IfThenElse(guard, t.SeqStmt(body), None, loc=p.loc)]
    in_place = effects.updated_in_place()
    if in_place:
        # the replicas must all run the body for their registers, and would read the buffer while
        # the storing replica updates it: no order of the threads makes that well-defined
        names = ", ".join(sorted(b.name for b in in_place))
        raise CompileError(f"this T.Parallel loop updates {names} in place and also writes registers, over a "
                           "layout where several threads hold each position: they would read it while one of "
                           "them writes it", p.loc,
                           hint=f"update {names} in a T.Parallel loop of its own (or copy it to a fragment first)")
    return _stores_by_one_replica(body, guard)


def _stores_by_one_replica(body: list, guard) -> list:
    """Stores to shared or global memory done by one replica of each loop position only: replicas
    hold the same positions, so an in-place update (``S[i] = S[i] * 2``) done by two of them would
    read what the other already wrote and apply twice; registers stay per-thread."""
    def memory(b) -> bool:
        return b.scope in ("shared", "global")

    def f(s):
        if isinstance(s, t.BufferStore) and memory(s.buffer) or isinstance(s, th.VecCopy) and memory(s.dst):
            return t.IfThenElse(guard, s, None, loc=s.loc)
        return None

    return [map_stmt(s, f) for s in body]


def _fragment_loads(p) -> list:
    out = []

    def f(s):
        for e in exprs_of(s):
            out.extend(ld for ld in loads_in(e) if ld.buffer.scope == "fragment")

    walk(p.body, f)
    return out


def _mismatched_fragments(ctx, p, layout, env) -> list:
    """Fragments read in the loop that some thread does not hold, in a fixed register, at the
    positions it iterates over (e.g. an MFMA accumulator read in an MFMA operand layout)."""
    from ..errors import CompileError

    bad = []
    loads = _fragment_loads(p)
    if not loads:
        return bad
    for r in range(layout.num_regs):
        e = env.child()
        for v, x in zip(p.vars, layout.index(ctx.tid, r)):
            e.sym[v] = E.as_expr(x)
        active = layout.valid_np(ctx.tid_np, r)
        for ld in loads:
            if ld.buffer in bad:
                continue
            try:
                idx = tuple(lower_expr(ctx, i, e) for i in ld.indices)
                ctx.frag_register(ld.buffer, idx, {ctx.tid: ctx.tid_np}, p.loc, active=active)
            except CompileError as err:
                if "does not hold" in err.message or "different registers" in err.message:
                    bad.append(ld.buffer)
                else:
                    raise
    return bad


def convert_through_shared(ctx, buf, env, loc) -> list:
    """Write fragment ``buf`` to a shared scratch tile (row-major) so that the loop reads it
    from there; the barriers order the exchange (and protect the scratch across loop iterations)."""
    lay = ctx.layouts[buf]
    numel = int(np.prod(buf.shape))
    scratch = ctx.alloc_scratch(ctx.fresh(f"{buf.name}_xchg"), numel, buf.dtype)
    out = [th.Comment(f"layout conversion of {buf.name} through shared memory"),
           ctx.scratch_decl(scratch), th.Barrier()]
    local = ctx.local_of[buf]
    for r in range(lay.num_regs):
        off = ctx.strided_offset(buf, lay.index(ctx.tid, r))
        store = t.BufferStore(scratch, (off,), E.Load(local, (E.as_expr(r),)), loc=loc)
        valid = _valid_expr(lay, ctx, r)
        out.append(store if valid is None else t.IfThenElse(valid, store, None, loc=loc))
    out.append(th.Barrier())
    env.frag_redirect[buf] = scratch
    return out


def _valid_expr(layout, ctx, r):
    fn = getattr(layout, "valid_expr", None)
    if fn is not None:
        return fn(ctx.tid, r)
    v = layout.valid_np(ctx.tid_np, r)
    if v is None or bool(np.all(v)):
        return None
    # a reduced layout of a padded layout: express validity through the source layout
    src = getattr(layout, "src", None)
    if src is not None and hasattr(src, "valid_expr"):
        return src.valid_expr(ctx.tid, layout.rep[r])
    raise NotImplementedError("partial layout without a validity expression")


class _Effects:
    """What a T.Parallel body does, in one walk: the shared/global buffers it stores to and reads,
    whether it stores to registers (fragments, locals), updates atomically, or holds statements
    other than stores, branches and atomics (loops, lets, ...)."""

    def __init__(self, p: t.ParallelFor):
        self.stored, self.loaded = set(), set()
        self.registers = self.atomic = self.atomic_result = self.other = False

        def f(s):
            if isinstance(s, t.BufferStore):
                if s.buffer.scope in ("global", "shared"):
                    self.stored.add(s.buffer)
                else:
                    self.registers = True
            elif isinstance(s, (t.Atomic, ReducerUpdate)):  # done once per iteration, like an atomic
                self.atomic = True
                self.atomic_result = self.atomic_result or getattr(s, "result", None) is not None  # reducers have none
            elif not isinstance(s, (t.SeqStmt, t.IfThenElse, t.Evaluate)):
                self.other = True
            for e in exprs_of(s):
                self.loaded.update(ld.buffer for ld in loads_in(e) if ld.buffer.scope in ("global", "shared"))

        walk(p.body, f)

    def only_in_memory(self) -> bool:
        """Stores to shared/global memory or atomic updates, and nothing else."""
        return bool(self.stored or self.atomic) and not (self.registers or self.other)

    def updated_in_place(self) -> set:
        """The shared/global buffers the body stores to and also reads."""
        return self.stored & self.loaded


def _mem_buffers(p) -> list:
    out = []

    def f(s):
        if isinstance(s, t.BufferStore) and s.buffer.scope in ("global", "shared"):
            out.append(s.buffer)
        for e in exprs_of(s):
            out.extend(ld.buffer for ld in loads_in(e) if ld.buffer.scope in ("global", "shared"))

    walk(p.body, f)
    return out


def _vectorizable_body(body) -> bool:
    """Bodies made of lets, stores and bounds-guarded stores (what copies and epilogues produce)."""
    stmts = body.stmts if isinstance(body, t.SeqStmt) else [body]
    for s in stmts:
        if isinstance(s, (t.BufferStore, t.LetStmt)):
            continue
        if isinstance(s, t.IfThenElse) and s.else_body is None and isinstance(s.then_body, t.BufferStore):
            continue
        return False
    return True


def _group_uniform(ctx, cond, inner_var, g) -> bool:
    """True if ``cond`` (lowered, in terms of the group's first position) has the same value at
    every position of the group: each comparison involving the innermost index is ``x < n`` with
    x the innermost index plus a multiple of g, and n a multiple of g."""
    if cond is None:
        return True
    terms = _conjuncts(cond)
    for c in terms:
        if not uses_var(c, inner_var):
            continue
        if not (isinstance(c, E.BinOp) and c.op == "<"):
            return False
        n = E.const_value(c.b)
        if n is None or n % g or not _unit_step_from_aligned(c.a, inner_var, g):
            return False
    return True


def _conjuncts(c) -> list:
    if isinstance(c, E.BinOp) and c.op == "and":
        return _conjuncts(c.a) + _conjuncts(c.b)
    return [c]


def _address_ok(ctx, buf, idx, inner_var, g) -> bool:
    """The access buf[idx] advances by one element per step of ``inner_var`` and its start is a
    multiple of g elements (given 16-byte aligned base pointers).  The element-contiguous dimension
    is the last one, or for a global tensor the one dimension ``inner_var`` indexes if its stride is
    1 (a column-major ``T.StridedTensor`` read down its first dimension)."""
    unit = len(idx) - 1
    if buf.scope == "shared":
        lay = ctx.shared_layouts.get(buf)
        if lay is not None and lay.swizzle and g * dt.nbytes(buf.dtype) > 16:
            return False
        if getattr(lay, "packed", False):  # KPackedLayout: consecutive columns are a pack apart
            return False
        strides = buf.strides
    elif buf.scope == "global":
        strides = buf.strides
        using = [d for d, x in enumerate(idx) if uses_var(x, inner_var)]
        unit = using[0] if len(using) == 1 else unit
    else:
        return False
    if not isinstance(strides[unit], int) or strides[unit] != 1:  # a symbolic unit stride: element by element
        return False
    for d, x in enumerate(idx):
        if d == unit:
            if not _unit_step_from_aligned(x, inner_var, g):
                return False
        else:
            if uses_var(x, inner_var):
                return False
            s = strides[d]
            if not isinstance(s, int) or s % g:
                return False
    return True


def _unit_step_from_aligned(x, inner_var, g) -> bool:
    """``x == inner_var + (a multiple of g)``: ``inner_var`` once with coefficient 1 and every other
    term a multiple of g.  The other terms need not be affine (a fragment layout's ``(lane % 4) * 2``
    is a multiple of 2 whatever the lane)."""
    terms, const = linear_terms(x)
    if const % g:
        return False
    seen = False
    for coef, atom in terms:
        if atom is inner_var:
            if coef != 1 or seen:
                return False
            seen = True
        elif uses_var(atom, inner_var) or coef % g:
            return False
    return seen


def _plan_vectors(ctx, p, env, inner_var, g):
    """Vector loads to issue before the group and vector stores after it."""
    pre, post, vec_stores = [], [], {}
    if g == 1:
        return pre, post, vec_stores
    stmts = p.body.stmts if isinstance(p.body, t.SeqStmt) else [p.body]
    written = {s.buffer for s in stmts if isinstance(s, t.BufferStore)} | \
        {s.then_body.buffer for s in stmts if isinstance(s, t.IfThenElse)}
    # positions in terms of a symbolic innermost index, to check affinity in it
    jvar = E.Var("__j", "int32", kind="loop")
    probe = env.child()
    probe.sym[inner_var] = jvar
    # the body's lets (`idx = Index[i]; ... X[idx, j]`) are bound per element only later, in
    # _lower_body; an address that uses one is planned with the let's value in place of its name
    # (exact, so _address_ok judges the real address) -- unless the value reads memory the body
    # writes, which the group's element order decides: such an access is not vectorized
    first = env.child()
    unbound = []
    for s in stmts:
        if not isinstance(s, t.LetStmt):
            continue
        if any(ld.buffer in written for ld in loads_in(s.value)):
            unbound.append(s.var)
            continue
        probe.sym[s.var] = lower_expr(ctx, s.value, probe)
        first.sym[s.var] = lower_expr(ctx, s.value, first)

    def lowered_idx(idx):
        return tuple(lower_expr(ctx, i, probe) for i in idx)

    def plannable(*exprs) -> bool:
        return not any(e is not None and uses_var(e, v) for e in exprs for v in unbound)

    # loads (possibly under a bounds Select produced by copy expansion, or in a guarded store)
    for s in stmts:
        guard = None
        exprs = exprs_of(s)
        if isinstance(s, t.IfThenElse) and isinstance(s.then_body, t.BufferStore):
            guard = s.cond
            exprs = exprs_of(s.then_body)
        for e in exprs:
            for sel, ld in _masked_loads(e):
                if guard is not None:
                    if sel is not None:
                        continue
                    sel = _Guard(guard)
                buf = ld.buffer
                if buf.scope not in ("global", "shared") or buf in written:
                    continue
                idx_j = lowered_idx(ld.indices)
                cond = lower_expr(ctx, sel.cond, probe) if sel is not None else None
                if not plannable(*idx_j, cond) or not _address_ok(ctx, buf, idx_j, jvar, g):
                    continue
                if not _group_uniform(ctx, cond, jvar, g):
                    continue
                tmp = ctx.local_buffer(ctx.fresh("v"), g, buf.dtype)
                idx0 = tuple(lower_expr(ctx, i, first) for i in ld.indices)
                fb, off = ctx.flat_access(buf, idx0)
                pred = lower_expr(ctx, sel.cond, first) if sel is not None else None
                pre.append(th.LocalDecl(tmp))
                pre.append(th.VecCopy(tmp, E.as_expr(0), fb, off, g, pred, loc=s.loc))
                env.vec_loads[id(ld)] = tmp
                if sel is not None and not isinstance(sel, _Guard):
                    env.vec_loads[id(sel)] = tmp  # the whole masked read is the zero-filled vector
    # stores
    for s in stmts:
        store, cond = (s, None) if isinstance(s, t.BufferStore) else \
            (s.then_body, s.cond) if isinstance(s, t.IfThenElse) else (None, None)
        if store is None or store.buffer.scope not in ("global", "shared"):
            continue
        if sum(1 for x in stmts if isinstance(x, t.BufferStore) and x.buffer is store.buffer) > 1:
            continue
        idx_j = lowered_idx(store.indices)
        cond_j = lower_expr(ctx, cond, probe) if cond is not None else None
        if not plannable(*idx_j, cond_j) or not _address_ok(ctx, store.buffer, idx_j, jvar, g):
            continue
        if not _group_uniform(ctx, cond_j, jvar, g):
            continue
        tmp = ctx.local_buffer(ctx.fresh("o"), g, store.buffer.dtype)
        idx0 = tuple(lower_expr(ctx, i, first) for i in store.indices)
        fb, off = ctx.flat_access(store.buffer, idx0)
        pred = lower_expr(ctx, cond, first) if cond is not None else None
        pre.append(th.LocalDecl(tmp))
        post.append(th.VecCopy(fb, off, tmp, E.as_expr(0), g, pred, loc=s.loc))
        vec_stores[id(s)] = tmp
    return pre, post, vec_stores


class _Guard:
    """A store's guard used as the predicate of the vector loads feeding it."""

    def __init__(self, cond):
        self.cond = cond


def _masked_loads(e) -> list:
    """(Select or None, Load) pairs: a load either bare or as ``select(cond, load, 0)``."""
    out = []
    seen = set()

    def visit(x):
        if isinstance(x, E.Select) and isinstance(x.a, E.Load) and isinstance(x.b, E.Const) and x.b.value == 0:
            out.append((x, x.a))
            seen.add(id(x.a))
            visit(x.cond)
            return
        if isinstance(x, E.Load):
            if id(x) not in seen:
                out.append((None, x))
            for i in x.indices:
                visit(i)
            return
        from ..ir.visitor import expr_children

        for c in expr_children(x):
            visit(c)

    visit(e)
    return out


def _lower_body(ctx, body, env, lower_stmt, vec_stores, k) -> list:
    stmts = body.stmts if isinstance(body, t.SeqStmt) else [body]
    out = []
    for s in stmts:
        if id(s) in vec_stores:
            store = s if isinstance(s, t.BufferStore) else s.then_body
            tmp = vec_stores[id(s)]
            st = t.BufferStore(tmp, (E.as_expr(k),), lower_expr(ctx, store.value, env, s.loc), loc=s.loc)
            if isinstance(s, t.IfThenElse):
                # the value may read out of bounds where the guard is false: compute it under the guard
                # (the vector store after the group carries the same, group-uniform guard)
                st = t.IfThenElse(lower_expr(ctx, s.cond, env, s.loc), st, None, loc=s.loc)
            out.append(st)
            continue
        if isinstance(s, t.LetStmt):
            v = E.Var(ctx.fresh(s.var.name), s.var.dtype, kind="let")
            out.append(t.LetStmt(v, lower_expr(ctx, s.value, env, s.loc), loc=s.loc))
            env.sym[s.var] = v
            continue
        out.extend(lower_stmt(s, env))
    return out
