"""TileLang's scans over a tile: ``T.cumsum(src, dst=None, dim=0, reverse=False)`` and
``T.cummax(...)`` (inclusive prefix sums / maxima along ``dim`` of a shared or fragment buffer;
``dst`` defaults to ``src``, updated in place; ``reverse=True`` scans from the end).

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


def _scan(op: str, src, dst, dim, reverse, what: str) -> None:
    b = _b.current()
    if b.kernel is None:
        raise _b.error(f"{what} must be called inside `with T.Kernel(...)`")
    dst = src if dst is None else dst
    for x, role in ((src, "source"), (dst, "destination")):
        if not isinstance(x, _t.Buffer) or x.scope not in ("shared", "fragment"):
            raise _b.error(f"{what}: the {role} must be a whole shared or fragment buffer, got {x!r}",
                           hint="scan a T.alloc_shared / T.alloc_fragment buffer (copy global data there first)")
    if tuple(src.shape) != tuple(dst.shape):
        raise _b.error(f"{what}: source {src.name} {src.shape} and destination {dst.name} {dst.shape} differ in shape")
    if not isinstance(dim, _builtins.int) or isinstance(dim, _builtins.bool):
        raise _b.error(f"{what}(dim={dim!r}) must be an int")
    nd = len(src.shape)
    if dim < 0:
        dim += nd
    if not 0 <= dim < nd:
        raise _b.error(f"{what}: dim={dim} is out of range for {src.name} of shape {src.shape}")
    if src.scope == "fragment" or dst.scope == "fragment":
        # a fragment's elements sit in fixed threads: scan a shared copy, then copy the result back
        from . import alloc_shared, copy

        scratch = alloc_shared(src.shape, dst.dtype)
        copy(src, scratch)
        _scan(op, scratch, None, dim, reverse, what)
        copy(scratch, dst)
        return
    n = src.shape[dim]
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

    cur = _e.cast(dst.dtype, _e.Load(src, index(pos)))
    before = _e.Load(dst, index(prev))
    combined = before + cur if op == "sum" else (_e.emax(before, cur) if op == "max" else _e.emin(before, cur))
    value = _e.select(k == 0, cur, _e.cast(dst.dtype, combined))
    loop = _t.For(k, _e.as_expr(0), _e.as_expr(n), _t.BufferStore(dst, index(pos), value, loc=b.loc), "serial",
                  loc=b.loc)
    if ovars:
        loop = _t.ParallelFor(tuple(ovars), tuple(src.shape[d] for d in others), loop, loc=b.loc)
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
