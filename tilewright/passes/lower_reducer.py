"""Reducer lowering (part of ``lower_to_threads``): ``ReducerUpdate`` and ``ReducerFinalize``
(``ir.reducer``).

Needs: the reducer's partials allocated as a per-thread array (``local``), one partial per reducer
element; ``lower_parallel`` setting ``env.replica_guard`` for a loop whose positions several threads
hold (``_Effects`` counts an update as a side effect to do once).
Guarantees:

* an update is ``partials[index] = op(partials[index], value)`` in the thread running the
  iteration -- in one replica only, so each iteration contributes once;
* the finalize combines every thread's partials: XOR shuffles inside each warp (every lane then holds
  its warp's totals), lane 0 of each warp writes them to a shared scratch, and after a barrier each
  thread folds the warps' totals of the destination elements it holds (in warp order, so that
  every holder computes the same bits), combines the starting value once and stores them in the
  destination fragment's registers.  A block whose threads are not a power of two or a multiple of
  the warp size exchanges every thread's partials through shared memory instead.
Max and min drop NaN contributions (``fmaxf``/``fminf``), as TileLang's reducers do.
"""

from __future__ import annotations

from ..errors import CompileError, InternalError
from ..ir import dtype as dt
from ..ir import expr as E
from ..ir import thread as th
from ..ir import tile as t
from ..ir.reducer import ReducerFinalize, ReducerUpdate, combine
from ..ir.tile_ops import register
from .lower_exprs import Env, lower_expr
from .lower_parallel import UNGUARDABLE, _valid_expr
from .lowering_context import LoweringContext


def lower_reducer_update(ctx: LoweringContext, s: ReducerUpdate, env: Env) -> list:
    if not env.in_parallel:
        raise InternalError("reducer update outside T.Parallel", "lower_to_threads", s.loc)
    part = ctx.local_of[s.partials]
    idx = lower_expr(ctx, s.index, env, s.loc)
    cur = E.Load(part, (idx,))
    st = t.BufferStore(part, (idx,), E.cast(part.dtype, combine(s.op, cur, lower_expr(ctx, s.value, env, s.loc))),
                       loc=s.loc)
    if env.replica_guard is UNGUARDABLE:
        raise CompileError(
            f"T.reducer_update of {s.reducer} in a T.Parallel loop whose iterations are held by several threads "
            "each, in a pattern no thread-index guard reduces to one: a contribution would be counted more than "
            "once", s.loc, hint="update the reducer in a T.Parallel loop of its own, over a tile whose size is a "
            "multiple of the thread count")
    if env.replica_guard is not None:
        return [t.IfThenElse(env.replica_guard, st, None, loc=s.loc)]
    return [st]


def lower_reducer_finalize(ctx: LoweringContext, s: ReducerFinalize, env: Env) -> list:
    if s.dst.scope != "fragment":
        raise CompileError(f"T.finalize_reducer({s.reducer}) writes a fragment, got {s.dst.name} in {s.dst.scope}",
                           s.loc)
    part = ctx.local_of[s.partials]
    n = part.shape[0]
    dst_l, dst_local = ctx.layouts[s.dst], ctx.local_of[s.dst]
    acc_t = part.dtype
    if dt.is_int(acc_t) and dt.bits(acc_t) < 32:
        # exchanged as 32-bit integers (what a shuffle moves); sums wrap the same once cast back
        acc_t = "int32" if dt.is_signed_int(acc_t) else "uint32"
    nt, ws = ctx.nthreads, ctx.target.warp_size
    pow2 = nt & (nt - 1) == 0
    out: list = [th.Comment(f"finalize_reducer {s.reducer} -> {s.dst.name} ({s.op} over {nt} threads)")]
    ctx.begin_scratch()
    if pow2 or nt % ws == 0:
        lanes = min(ws, nt)
        tot = ctx.local_buffer(ctx.fresh(f"{s.reducer}_tot"), n, acc_t)
        out.append(th.LocalDecl(tot))
        for e in range(n):
            out.append(t.BufferStore(tot, (E.as_expr(e),), E.cast(acc_t, E.Load(part, (E.as_expr(e),)))))
        m = 1
        while m < lanes:
            for e in range(n):
                cur = E.Load(tot, (E.as_expr(e),))
                out.append(t.BufferStore(tot, (E.as_expr(e),), combine(s.op, cur, E.Shuffle(cur, m, ws))))
            m <<= 1
        groups = nt // lanes
        scratch = ctx.alloc_scratch(ctx.fresh(f"{s.reducer}_warps"), groups * n, acc_t)
        out += [ctx.scratch_decl(scratch), th.Barrier()]
        writes = [t.BufferStore(scratch, ((ctx.tid // lanes) * n + e,), E.Load(tot, (E.as_expr(e),)))
                  for e in range(n)]
        out.append(t.IfThenElse(E.binary("==", ctx.tid % lanes, 0), t.SeqStmt(writes), None, loc=s.loc))
        out.append(th.Barrier())
        sources = [(g * n, 1) for g in range(groups)]
    else:
        scratch = ctx.alloc_scratch(ctx.fresh(f"{s.reducer}_threads"), nt * n, acc_t)
        out += [ctx.scratch_decl(scratch), th.Barrier()]
        out += [t.BufferStore(scratch, (ctx.tid * n + e,), E.cast(acc_t, E.Load(part, (E.as_expr(e),))))
                for e in range(n)]
        out.append(th.Barrier())
        sources = None
    seed = None
    if s.seed is not None:
        seed = E.cast(acc_t, lower_expr(ctx, E.Load(s.seed, (E.as_expr(0),)), env, s.loc))
    for r in range(dst_l.num_regs):
        e = ctx.strided_offset(s.dst, dst_l.index(ctx.tid, r))  # row-major: the reducer's flat index
        if sources is not None:
            v = None
            for base, _ in sources:
                x = E.Load(scratch, (base + e,))
                v = x if v is None else combine(s.op, v, x)
            body: list = []
        else:
            # fold every thread's partial of element e (a loop: the thread count may be large)
            fold = ctx.local_buffer(ctx.fresh("rfold"), 1, acc_t)
            j = E.Var(ctx.fresh("rj"), "int32", kind="loop")
            zero = E.as_expr(0)
            body = [th.LocalDecl(fold), t.BufferStore(fold, (zero,), E.Load(scratch, (e,))),
                    t.For(j, E.as_expr(1), E.as_expr(nt - 1),
                          t.BufferStore(fold, (zero,), combine(s.op, E.Load(fold, (zero,)),
                                                               E.Load(scratch, (j * n + e,)))), "serial")]
            v = E.Load(fold, (zero,))
        if seed is not None:
            v = combine(s.op, seed, v)
        st = t.SeqStmt(body + [t.BufferStore(dst_local, (E.as_expr(r),), E.cast(s.dst.dtype, v), loc=s.loc)])
        valid = _valid_expr(dst_l, ctx, r)
        out.append(st if valid is None else t.IfThenElse(valid, st, None, loc=s.loc))
    out.append(th.Barrier())  # the scratch is free for the next exchange
    return out


register(ReducerUpdate, "lower", lambda lowering, s, env: lower_reducer_update(lowering.ctx, s, env))
register(ReducerFinalize, "lower", lambda lowering, s, env: lower_reducer_finalize(lowering.ctx, s, env))
