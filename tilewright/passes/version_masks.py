"""Pass ``version_masks``: a ``T.Parallel`` store whose value is a mask that holds for the whole tile
gets a version without the mask, chosen by one block-uniform test.

Needs: Tile IR from the frontend (before ``warp_specialize``, which then sees an ordinary ``if`` in the
loop body, as in the library's attention kernel).  Off with ``tw.version_masks: False`` or
``optimize_level`` < 2, and on AMD targets unless ``tw.version_masks: True`` (there the two copies of
TileLang's attention loop took 256 VGPRs and spilled 12 on gfx1100, and no AMD GPU can measure a gain).

Applies to a ``T.Parallel`` nest whose body is one store ``B[...] = T.if_then_else(c, a, b)`` (not inside
another ``T.Parallel``), where ``c`` is a conjunction (``and``) of integer comparisons (``<``, ``<=``,
``>``, ``>=``) whose two sides are affine in the parallel variables with every other term *uniform*: a
constant, a block index, a kernel parameter, a symbolic size or the variable of an enclosing serial or
pipelined loop (no loads, no thread index, no let-bound value).  TileLang's flash-attention program masks
every key tile this way (``acc_s[i, j] = T.if_then_else(bx * bM + i >= k * bN + j, 0, -inf)``) although
only the tiles crossing the diagonal (or the end of the keys) need it.

Guarantees: the store becomes ::

    if <c holds at every point of the nest>:      # block-uniform: the box minimum / maximum of each side
        for ... in T.Parallel(...): B[...] = a     # fresh parallel variables
    else:
        <the original nest>

which stores the same values: for an affine ``d = sum(k_v * v) + u`` over ``v in [0, extent_v)``, the
minimum is ``u + sum(min(0, k_v) * (extent_v - 1))`` and the maximum ``u + sum(max(0, k_v) *
(extent_v - 1))``, so the test is exact for every comparison of the conjunction (it is a sufficient
condition for the conjunction, true exactly when each part holds over the whole box).  A test that folds
to a constant keeps the nest as it is (True: the frontend's folding already left no mask to drop).
"""

from __future__ import annotations

from ..ir import dtype as dt
from ..ir import expr as E
from ..ir import tile as t
from ..ir.visitor import rebuild, substitute

# Var kinds whose value is the same in every thread here: outside any T.Parallel nest a loop variable is
# a serial or pipelined loop's (the nest's own variables are told apart by the caller)
UNIFORM_KINDS = ("loop", "sloop", "param", "block", "dyn")


def version_masks(func: t.PrimFunc, ctx=None) -> t.PrimFunc:
    opts = ctx.options if ctx is not None else {}
    switch = opts.get("tw.version_masks")
    if switch is False or opts.get("optimize_level", 2) < 2:
        return func
    if switch is None and ctx is not None and ctx.target.kind == "hip":
        return func
    func.body = _rewrite(func.body)
    return func


def _rewrite(s):
    """Rewrite every eligible nest below ``s`` (nothing inside a T.Parallel nest is visited)."""
    if isinstance(s, t.ParallelFor):
        versioned = _version(s)
        return s if versioned is None else versioned
    if not hasattr(s, "__dataclass_fields__"):
        return s
    changes = {}
    for name in s.__dataclass_fields__:
        v = getattr(s, name)
        if isinstance(v, t.Stmt):
            nv = _rewrite(v)
            if nv is not v:
                changes[name] = nv
        elif isinstance(v, list) and any(isinstance(x, t.Stmt) for x in v):
            nl = [_rewrite(x) if isinstance(x, t.Stmt) else x for x in v]
            if any(a is not b for a, b in zip(nl, v)):
                changes[name] = nl
    return rebuild(s, **changes) if changes else s


def _version(nest: t.ParallelFor):
    store = nest.body
    if not isinstance(store, t.BufferStore) or not isinstance(store.value, E.Select):
        return None
    sel = store.value
    pvars = {v: ext for v, ext in zip(nest.vars, nest.extents)}
    test = _holds_everywhere(sel.cond, pvars)
    if test is None or isinstance(test, E.Const):
        return None
    fresh = tuple(E.Var(f"{v.name}_u", v.dtype, v.kind) for v in nest.vars)
    mapping = dict(zip(nest.vars, fresh))
    fast_store = t.BufferStore(store.buffer, tuple(substitute(i, mapping) for i in store.indices),
                               substitute(sel.a, mapping), loc=store.loc)
    fast = t.ParallelFor(fresh, nest.extents, fast_store, loc=nest.loc, coalesced_width=nest.coalesced_width)
    return t.IfThenElse(test, fast, nest, loc=nest.loc)


def _holds_everywhere(cond, pvars: dict):
    """A uniform boolean expression true exactly when ``cond`` holds at every point of the box
    ``pvars`` (var -> extent), or None when ``cond`` is not of the supported form."""
    if isinstance(cond, E.BinOp) and cond.op == "and":
        a, b = _holds_everywhere(cond.a, pvars), _holds_everywhere(cond.b, pvars)
        return None if a is None or b is None else E.binary("and", a, b)
    if not (isinstance(cond, E.BinOp) and cond.op in ("<", "<=", ">", ">=")):
        return None
    if not (dt.is_int(cond.a.dtype) and dt.is_int(cond.b.dtype)):
        return None
    d = _affine(E.binary("-", cond.a, cond.b), pvars)
    if d is None:
        return None
    coefs, uniform = d
    if not coefs:
        return None  # no parallel variable: nothing varies over the nest
    if cond.op in (">", ">="):  # the smallest d over the box must pass
        edge = sum(min(0, k) * (pvars[v] - 1) for v, k in coefs.items())
    else:
        edge = sum(max(0, k) * (pvars[v] - 1) for v, k in coefs.items())
    return E.binary(cond.op, E.binary("+", uniform, E.as_expr(edge, uniform.dtype)), E.as_expr(0, uniform.dtype))


def _affine(e, pvars: dict):
    """``({parallel var: int coefficient}, uniform expression)`` with ``e == sum(k * v) + uniform``,
    or None when ``e`` is not affine in the parallel variables with uniform other terms."""
    if isinstance(e, E.Const):
        return ({}, e) if dt.is_int(e.dtype) else None
    if isinstance(e, E.Var):
        if e in pvars:
            return {e: 1}, E.as_expr(0, e.dtype)
        return ({}, e) if e.kind in UNIFORM_KINDS else None
    if isinstance(e, E.BinOp) and e.op in ("+", "-"):
        a, b = _affine(e.a, pvars), _affine(e.b, pvars)
        if a is None or b is None:
            return None
        sign = 1 if e.op == "+" else -1
        coefs = dict(a[0])
        for v, k in b[0].items():
            coefs[v] = coefs.get(v, 0) + sign * k
        return {v: k for v, k in coefs.items() if k}, E.binary(e.op, a[1], b[1])
    if isinstance(e, E.BinOp) and e.op == "*":
        for x, y in ((e.a, e.b), (e.b, e.a)):
            if isinstance(y, E.Const) and dt.is_int(y.dtype):
                ax = _affine(x, pvars)
                if ax is None:
                    return None
                return {v: k * y.value for v, k in ax[0].items() if k * y.value}, E.binary("*", ax[1], y)
        a, b = _affine(e.a, pvars), _affine(e.b, pvars)  # a product of two uniform terms is uniform
        if a is None or b is None or a[0] or b[0]:
            return None
        return {}, e
    if isinstance(e, E.BinOp) and e.op in ("//", "%", "min", "max"):
        a, b = _affine(e.a, pvars), _affine(e.b, pvars)  # uniform only
        if a is None or b is None or a[0] or b[0]:
            return None
        return {}, e
    return None
