"""TileLang's scans over a tile: ``T.cumsum(src, dst=None, dim=0, reverse=False)`` and
``T.cummax(...)`` (inclusive prefix sums / maxima along ``dim`` of a shared or fragment buffer, a
slice of one or a ``T.reshape`` / ``T.view`` of one; ``dst`` defaults to ``src``, updated in place;
``reverse=True`` scans from the end).

A scan is written with the loops the language already has: a ``T.Parallel`` over the other
dimensions, around a serial loop along ``dim`` that carries the running value through ``dst``.
Each line of the scan is then done by one thread, in order, which is exact (the sums are added in
index order, as a float64 reference adds them) and needs no new operation in any backend.  A
fragment is scanned through a shared scratch copy (its elements live in fixed threads).
"""

from __future__ import annotations

import builtins as _builtins

from ..frontend import builder as _b
from ..ir import expr as _e
from ..ir import tile as _t

__all__ = ["cumsum", "cummax", "cummin"]


def _operand(x, role: str, what: str):
    """A scan operand as a Region or a view (``T.reshape`` / ``T.view``) of a shared or fragment buffer."""
    from ..frontend.regions import to_region
    from .views import BufferView

    base = x.base if isinstance(x, BufferView) else getattr(x, "buffer", x)
    if not isinstance(base, _t.Buffer) or base.scope not in ("shared", "fragment") or \
            not isinstance(x, (_t.Buffer, _t.Region, BufferView)):
        raise _b.error(f"{what}: the {role} must be a whole shared or fragment buffer, a slice of one or a view "
                       f"of one, got {x!r}",
                       hint="scan a T.alloc_shared / T.alloc_fragment buffer (copy global data there first)")
    return x if isinstance(x, BufferView) else to_region(x, what=f"{what} {role}")


def _store(dst, idx, value, loc):
    from .views import BufferView, element_of

    if isinstance(dst, BufferView):
        stores = dst.stores(idx, value, loc)
        return stores[0] if len(stores) == 1 else _t.SeqStmt(stores)
    at = element_of(dst, idx)
    return _t.BufferStore(at.buffer, at.indices, _e.cast(at.buffer.dtype, value), loc=loc)


def _scan(op: str, src, dst, dim, reverse, what: str) -> None:
    """Scan ``src`` (a buffer, a region of one or a view) into ``dst`` (default: ``src``) along ``dim``
    of the tile shape (a region's sliced dimensions; an indexed one is not a dimension of the tile)."""
    from .views import BufferView, element_of

    b = _b.current()
    if b.kernel is None:
        raise _b.error(f"{what} must be called inside `with T.Kernel(...)`")
    dst = src if dst is None else dst
    src, dst = _operand(src, "source", what), _operand(dst, "destination", what)
    shape = tuple(src.shape)
    name = src.name if isinstance(src, BufferView) else src.buffer.name
    if shape != tuple(dst.shape):
        raise _b.error(f"{what}: source {name} {shape} and destination {tuple(dst.shape)} differ in shape")
    if not all(isinstance(n, _builtins.int) for n in shape):
        raise _b.error(f"{what}: the scanned tile needs a compile-time shape, got {shape}")
    if not isinstance(dim, _builtins.int) or isinstance(dim, _builtins.bool):
        raise _b.error(f"{what}(dim={dim!r}) must be an int")
    nd = len(shape)
    if dim < 0:
        dim += nd
    if not 0 <= dim < nd:
        raise _b.error(f"{what}: dim={dim} is out of range for {name} of shape {shape}")
    dst_dtype = dst.dtype if isinstance(dst, BufferView) else dst.buffer.dtype
    scopes = {x.scope if isinstance(x, BufferView) else x.buffer.scope for x in (src, dst)}
    if "fragment" in scopes:
        # a fragment's elements sit in fixed threads: scan a shared copy, then copy the result back
        from . import alloc_shared, copy

        scratch = alloc_shared(shape, dst_dtype)
        copy(src, scratch)
        _scan(op, scratch, None, dim, reverse, what)
        copy(scratch, dst)
        return
    n = shape[dim]
    k = _e.Var(b.fresh("scan_k"), "int32", kind="loop")
    others = [i for i in range(nd) if i != dim]
    ovars = [_e.Var(b.fresh("scan_i"), "int32", kind="loop") for _ in others]
    pos = (n - 1 - k) if reverse else k
    prev = _e.emin(pos + 1, n - 1) if reverse else _e.emax(pos - 1, 0)

    def index(along):
        idx, it = [], iter(ovars)
        for d in range(nd):
            idx.append(along if d == dim else next(it))
        return tuple(idx)

    cur = _e.cast(dst_dtype, element_of(src, index(pos)))
    before = _e.cast(dst_dtype, element_of(dst, index(prev)))
    combined = before + cur if op == "sum" else (_e.emax(before, cur) if op == "max" else _e.emin(before, cur))
    value = _e.select(k == 0, cur, _e.cast(dst_dtype, combined))
    loop = _t.For(k, _e.as_expr(0), _e.as_expr(n), _store(dst, index(pos), value, b.loc), "serial", loc=b.loc)
    if ovars:
        loop = _t.ParallelFor(tuple(ovars), tuple(shape[d] for d in others), loop, loc=b.loc)
    b.emit(loop)


def cumsum(src, dst=None, dim=0, reverse=False):
    """Inclusive prefix sums of ``src`` along ``dim`` into ``dst`` (default: ``src`` in place)."""
    _scan("sum", src, dst, dim, _builtins.bool(reverse), "T.cumsum")


def cummax(src, dst=None, dim=0, reverse=False):
    """Inclusive running maxima of ``src`` along ``dim`` into ``dst`` (default: ``src`` in place)."""
    _scan("max", src, dst, dim, _builtins.bool(reverse), "T.cummax")


def cummin(src, dst=None, dim=0, reverse=False):
    """Inclusive running minima of ``src`` along ``dim`` into ``dst`` (default: ``src`` in place)."""
    _scan("min", src, dst, dim, _builtins.bool(reverse), "T.cummin")
