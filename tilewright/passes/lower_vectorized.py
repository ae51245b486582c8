"""``T.vectorized`` loop lowering (part of ``lower_to_threads``).

Contract: ``for i in T.vectorized(n)`` is a loop every thread runs on its own (TileLang's per-thread
vectorized loop).  When ``n`` and the start are compile-time ints and the body is only lets, stores
and guarded stores (what ``T.Parallel`` vectorizes too), the loop is lowered as ``n // g`` groups of
``g`` consecutive iterations: a global or shared access that advances by one element per iteration,
from a start that is a multiple of ``g`` elements, is one vector access of ``g`` elements (at most
16 bytes; base pointers are 16-byte aligned, which the argument binder checks), everything else is
done per element, in the loop's order.  ``g`` is chosen to need the fewest memory instructions per
iteration (ties: the wider).  Otherwise, or when no access can be vectorized, the loop stays an
unrolled scalar loop.

Order is kept: a vector load is issued before its group only for buffers the body does not store
to, and a vector store is issued after its group only for a buffer the body neither reads nor
stores to elsewhere, so the group computes what the iterations one by one would (kernel pointers
are ``__restrict__``: distinct buffers do not overlap).  A store no thread index reaches is done by
thread 0, as outside the loop.
"""

from __future__ import annotations

from ..ir import dtype as dt
from ..ir import expr as E
from ..ir import thread as th
from ..ir import tile as t
from ..ir.verifier import exprs_of
from ..ir.visitor import loads_in, walk
from .lower_exprs import Env
from .lower_parallel import _lower_body, _plan_vectors, _vectorizable_body
from .lowering_context import LoweringContext


def lower_vectorized(ctx: LoweringContext, s: t.For, env: Env, lower_stmt, block_uniform_store) -> list | None:
    """The lowered statements of the vectorized loop ``s``, or None to lower it as a plain loop.
    ``block_uniform_store(store, env)``: whether a store is done by thread 0 only."""
    start, n = E.const_value(s.start), E.const_value(s.extent)
    if start is None or n is None or n < 2 or env.in_parallel or not _vectorizable_body(s.body):
        return None
    mem = _memory_accesses(s.body)
    if not mem or any(dt.is_subbyte(b.dtype) for b in mem):  # sub-byte types: two per byte, one by one
        return None
    widest = max(dt.nbytes(b.dtype) for b in mem)
    best = None  # (memory instructions per iteration, -g)
    g = 2
    while g <= n and g * widest <= 16:
        if n % g == 0 and start % g == 0:
            vec_loads, vec_stores = _plan_group(ctx, s, env, g)
            if vec_loads or vec_stores:  # at least one access vectorized
                cand = (_cost(s.body, vec_loads, vec_stores, g), -g)
                best = cand if best is None or cand < best else best
        g *= 2
    if best is None:
        return None
    return _emit(ctx, s, env, lower_stmt, block_uniform_store, -best[1])


def _memory_accesses(body) -> list:
    out = []

    def f(st):
        if isinstance(st, t.BufferStore) and st.buffer.scope in ("global", "shared"):
            out.append(st.buffer)
        for e in exprs_of(st):
            out.extend(ld.buffer for ld in loads_in(e) if ld.buffer.scope in ("global", "shared"))

    walk(body, f)
    return out


def _group_env(ctx, s, env, g):
    gvar = E.Var(ctx.fresh(f"{s.var.name}_v{g}"), "int32", kind="loop")
    e = env.child()
    e.sym[s.var] = gvar * g + s.start if E.const_value(s.start) else gvar * g
    return gvar, e


def _plan_group(ctx, s, env, g):
    """(vectorized loads, vectorized stores) of a trial plan with groups of g."""
    _, e = _group_env(ctx, s, env, g)
    _pre, _post, vec_stores = _plan_vectors(ctx, _AsLoop(s), e, s.var, g)
    stores = {k: v for k, v in vec_stores.items() if _may_defer(s.body, k)}
    new_loads = {k: v for k, v in e.vec_loads.items() if k not in env.vec_loads}
    return new_loads, stores


def _may_defer(body, store_id) -> bool:
    """A vector store happens after its group: only when no other statement of the body stores to
    its buffer and none reads it."""
    stmts = body.stmts if isinstance(body, t.SeqStmt) else [body]
    store = next(st for st in stmts if id(st) == store_id)
    buf = _stored(store)
    if sum(1 for st in stmts if _stored(st) is buf) > 1:
        return False
    return not any(ld.buffer is buf for st in stmts for e in exprs_of(st) for ld in loads_in(e))


def _stored(st):
    st = st.then_body if isinstance(st, t.IfThenElse) else st
    return st.buffer if isinstance(st, t.BufferStore) else None


def _cost(body, vec_loads, vec_stores, g) -> float:
    """Memory instructions per iteration: a vector access 1/g, any other global/shared access 1."""
    stmts = body.stmts if isinstance(body, t.SeqStmt) else [body]
    cost = 0.0
    for st in stmts:
        store = st.then_body if isinstance(st, t.IfThenElse) else st
        if isinstance(store, t.BufferStore) and store.buffer.scope in ("global", "shared"):
            cost += 1 / g if id(st) in vec_stores else 1
        for e in exprs_of(st):
            for ld in loads_in(e):
                if ld.buffer.scope in ("global", "shared"):
                    cost += 1 / g if id(ld) in vec_loads else 1
    return cost


def _emit(ctx, s, env, lower_stmt, block_uniform_store, g) -> list:
    gvar, e = _group_env(ctx, s, env, g)
    loop = _AsLoop(s)
    pre, post, vec_stores = _plan_vectors(ctx, loop, e, s.var, g)
    # keep only the stores that may wait for the end of the group (their VecCopy and temporary)
    keep = {k: v for k, v in vec_stores.items() if _may_defer(s.body, k)}
    dropped = {id(v) for k, v in vec_stores.items() if k not in keep}
    pre = [x for x in pre if not (isinstance(x, th.LocalDecl) and id(x.buffer) in dropped)]
    post = [x for x in post if not (isinstance(x, th.VecCopy) and id(x.src) in dropped)]
    stmts = s.body.stmts if isinstance(s.body, t.SeqStmt) else [s.body]
    guarded_post = []
    for x in post:
        store = next(st for st in stmts if id(st) in keep and keep[id(st)] is x.src)
        inner = store.then_body if isinstance(store, t.IfThenElse) else store
        uniform = block_uniform_store(inner, e)
        guarded_post.append(t.IfThenElse(ctx.tid == 0, x, None, loc=x.loc) if uniform else x)
    body: list = list(pre)
    for k in range(g):
        ek = e.child()
        ek.k = k
        if k:
            ek.sym[s.var] = e.sym[s.var] + k
        body.extend(_lower_body(ctx, s.body, ek, lower_stmt, keep, k))
    body.extend(guarded_post)
    return [t.For(gvar, E.as_expr(0), E.as_expr(E.const_value(s.extent) // g), t.SeqStmt(body), "unroll", loc=s.loc,
                  attrs={k: v for k, v in s.attrs.items() if k != "vectorized"})]


class _AsLoop:
    """The loop seen as ``_plan_vectors`` sees a ``T.Parallel`` loop (it reads only the body)."""

    def __init__(self, s: t.For):
        self.body = s.body
