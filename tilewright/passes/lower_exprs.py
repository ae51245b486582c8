"""Expression lowering for ``lower_to_threads``: Tile IR expressions -> thread IR expressions.

Variables are replaced through a symbolic environment (loop variables of a ``T.Parallel`` become
the layout's position expressions for the current register); loads become flat loads of global,
shared or local buffers, fragment loads become register reads (see ``LoweringContext``), and loads
that a vectorized group already fetched become reads of the group's temporary.  With fast math
(``tl.enable_fast_math`` / ``tw.fast_math``) the float32 math calls that have a fast spelling take it
(``exp2`` -> ``__exp2``: on CUDA one ``ex2.approx.ftz`` instead of exp2f's range fix-ups around it).
"""

from __future__ import annotations

import numpy as np

from ..ir import expr as E
from .lowering_context import LoweringContext


class Env:
    """Where lowering stands: variable bindings and vectorized-load temporaries."""

    def __init__(self, sym: dict | None = None):
        self.sym: dict = dict(sym or {})
        self.vec_loads: dict = {}  # id(original Load) -> temp local buffer
        self.k = 0  # element within a vector group
        self.in_parallel = False  # inside a T.Parallel body: stores are this thread's elements
        self.frag_redirect: dict = {}  # fragment -> shared scratch holding it row-major
        self.active = None  # bool per thread: which threads execute this position (padded layouts)
        self.replica_guard = None  # condition selecting one replica of a replicated loop position
        self.thread_dep = False  # under control flow that differs between threads

    def child(self) -> Env:
        e = Env(self.sym)
        e.vec_loads = dict(self.vec_loads)
        e.k = self.k
        e.in_parallel = self.in_parallel
        e.frag_redirect = self.frag_redirect
        e.active = self.active
        e.replica_guard = self.replica_guard
        e.thread_dep = self.thread_dep
        return e


def lower_expr(ctx: LoweringContext, e, env: Env, loc=None):
    if not isinstance(e, E.Expr):
        return e
    if isinstance(e, E.Var):
        return env.sym.get(e, e)
    if isinstance(e, E.Const):
        return e
    tmp = env.vec_loads.get(id(e)) if env.vec_loads else None
    if tmp is not None:  # a load (or a bounds-masked load) fetched by the group's vector read
        return E.Load(tmp, (E.as_expr(env.k),))
    if isinstance(e, E.Load):
        idx = tuple(lower_expr(ctx, i, env, loc) for i in e.indices)
        buf = e.buffer
        if buf.scope == "fragment" and buf in env.frag_redirect:
            return E.Load(env.frag_redirect[buf], (ctx.strided_offset(buf, idx),))
        if buf.scope == "fragment":
            reg = ctx.frag_register(buf, idx, {ctx.tid: ctx.tid_np}, loc, env.active)
            return E.Load(ctx.local_of[buf], (E.as_expr(reg),))
        flat_buf, off = ctx.flat_access(buf, idx)
        return E.Load(flat_buf, (off,))
    if isinstance(e, E.BinOp):
        return E.binary(e.op, lower_expr(ctx, e.a, env, loc), lower_expr(ctx, e.b, env, loc))
    if isinstance(e, E.UnOp):
        return E.unary(e.op, lower_expr(ctx, e.a, env, loc))
    if isinstance(e, E.Call):
        name = ctx.fast_math.get(e.name, e.name) if e.dtype == "float32" else e.name
        return E.call(name, [lower_expr(ctx, a, env, loc) for a in e.args], e.dtype)
    if isinstance(e, E.Cast):
        return E.cast(e.dtype, lower_expr(ctx, e.a, env, loc))
    if isinstance(e, E.Select):
        return E.select(lower_expr(ctx, e.cond, env, loc), lower_expr(ctx, e.a, env, loc),
                        lower_expr(ctx, e.b, env, loc))
    return e


def numeric(ctx: LoweringContext, e):
    """Evaluate a lowered index expression for all threads (None if it depends on anything else)."""
    from .analysis import eval_expr

    try:
        return np.broadcast_to(np.asarray(eval_expr(e, ctx.thread_values()), dtype=np.int64), (ctx.nthreads,))
    except (KeyError, ValueError):
        return None
