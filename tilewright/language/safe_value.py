"""``T.annotate_safe_value({A: value})``: TileLang's value for reads of a global tensor out of its bounds.

Out-of-bounds elements of a global tensor are never read; by default a tile copy delivers zeros in
their place.  After ``T.annotate_safe_value({A: v})`` (to the end of the block it is written in; an
inner annotation of the same tensor overrides an outer one) a read of ``A`` out of bounds gives ``v``
(cast to ``A``'s dtype, then converted as the read value is):

* ``T.copy`` from ``A`` becomes an element loop in which each out-of-bounds element is ``v`` (and a
  global destination is written only within its bounds) — no vector or TMA loads for that copy;
* an element read ``A[i, j]`` in a store (``s[i] = A[i - 10]``) is guarded by an ``if`` on its bounds
  (the load is issued only in bounds; ``v`` is stored elsewhere); in a binding (``x = A[i - 10]``) it
  becomes ``A[i, j]`` if in bounds else ``v``.
"""

from __future__ import annotations

from ..frontend import builder as _b
from ..ir import expr as _e
from ..ir import tile as _t
from ..ir.analysis import bounds_condition
from ..ir.visitor import rewrite_expr

__all__ = ["annotate_safe_value"]


def annotate_safe_value(safe_value_map: dict) -> None:
    """``T.annotate_safe_value({A: value, ...})`` (see the module docstring)."""
    b = _b.current()
    if not isinstance(safe_value_map, dict):
        raise _b.error(f"T.annotate_safe_value takes a dict {{tensor: value}}, got {safe_value_map!r}")
    scopes = b.__dict__.setdefault("safe_values", [])
    for buf, value in safe_value_map.items():
        if not isinstance(buf, _t.Buffer) or buf.scope != "global":
            raise _b.error(f"T.annotate_safe_value: {getattr(buf, 'name', buf)!r} is not a global tensor (a kernel "
                           "parameter); only reads of global tensors can be out of bounds")
        if isinstance(value, _e.Expr) and _e.const_value(value) is None:
            raise _b.error(f"T.annotate_safe_value: the value for {buf.name} must be a constant, got {value}")
        scopes.append((b.blocks[-1], buf, _e.cast(buf.dtype, value)))


def safe_value(buf):
    """The value a read of ``buf`` out of bounds gives in the current block, or None (no annotation)."""
    b = _b.current_or_none()
    scopes = None if b is None else b.__dict__.get("safe_values")
    if not scopes:
        return None
    open_blocks = {id(x) for x in b.blocks}
    for block, annotated, value in reversed(scopes):
        if annotated is buf and id(block) in open_blocks:
            return value
    return None


def in_bounds(buf, indices):
    """The condition that ``indices`` lie inside ``buf`` (None when that is always so)."""
    return bounds_condition(buf.shape, indices)


def guarded_reads(value) -> list:
    """The distinct reads in ``value`` of annotated tensors that may be out of bounds: (load, condition, pad)."""
    b = _b.current_or_none()
    if b is None or not b.__dict__.get("safe_values") or not isinstance(value, _e.Expr):
        return []
    from ..ir.visitor import walk_expr

    found, seen = [], set()

    def visit(x):
        if isinstance(x, _e.Load) and x.buffer.scope == "global" and str(x) not in seen:
            pad = safe_value(x.buffer)
            cond = None if pad is None else in_bounds(x.buffer, x.indices)
            if cond is not None:
                seen.add(str(x))
                found.append((x, cond, pad))

    walk_expr(value, visit)
    return found


MAX_GUARDED_READS = 3  # a store reading more annotated elements at once branches 2**n ways


def guarded_store(value, make_store, loc):
    """The statement storing ``value`` (``make_store(v)``), where each read of an annotated tensor out
    of bounds gives its safe value: an ``if`` on each read's bounds, the load only on the in-bounds
    side (a select would still issue the load)."""
    reads = guarded_reads(value)
    if not reads:
        return make_store(value)
    if len(reads) > MAX_GUARDED_READS:
        raise _b.error(f"a store reading {len(reads)} elements of tensors with T.annotate_safe_value is not "
                       f"supported (at most {MAX_GUARDED_READS})", hint="bind some of the reads to names first")

    def branch(v, rest):
        if not rest:
            return make_store(v)
        load, cond, pad = rest[0]
        inside = branch(v, rest[1:])
        outside = branch(rewrite_expr(v, lambda x: pad if x is load or str(x) == str(load) else None), rest[1:])
        return _t.IfThenElse(cond, inside, outside, loc=loc)

    return branch(value, reads)


def guard_reads(value):
    """``value`` with each read of an annotated tensor guarded by its safe value (see the module)."""
    b = _b.current_or_none()
    if b is None or not b.__dict__.get("safe_values") or not isinstance(value, _e.Expr):
        return value

    def guard(x):
        if isinstance(x, _e.Load) and x.buffer.scope == "global":
            pad = safe_value(x.buffer)
            cond = None if pad is None else in_bounds(x.buffer, x.indices)
            if cond is not None:
                return _e.select(cond, x, pad)
        return None

    return rewrite_expr(value, guard)
