"""TileLang's ``T.any_of(region)`` / ``T.all_of(region)``: whether any / every element of a small
buffer or slice (``T.any_of(mask[by, bx, k, :])``, ``T.all_of(mask_shared)``) is true, as one
boolean expression — the elements read one by one, joined by ``or`` / ``and``, which every backend
evaluates as written.  The region's extents must be compile-time constants."""

from __future__ import annotations

import itertools

from ..frontend import builder as _b
from ..frontend.regions import to_region as _to_region
from ..ir import expr as _e

__all__ = ["any_of", "all_of"]

_MAX_ELEMENTS = 4096  # each element is one term of the expression


def _terms(x, what: str):
    if isinstance(x, _e.Load):
        return [x]
    region = _to_region(x, what=f"argument of {what}")
    extents = list(region.extents)
    if any(not isinstance(n, int) for n in extents):
        raise _b.error(f"{what} needs a region of compile-time size; {region.buffer.name} has extents {region.extents}",
                       hint="slice a constant number of elements, e.g. mask[i, j, k, 0:4]")
    count = 1
    for n in extents:
        count *= n
    if count > _MAX_ELEMENTS:
        raise _b.error(f"{what} over {count} elements of {region.buffer.name}: at most {_MAX_ELEMENTS} are joined "
                       "into one expression", hint="reduce the mask with T.reduce_max into a fragment first")
    loads = []
    for offs in itertools.product(*[range(n) for n in extents]):
        idx = tuple(_e.as_expr(s) + o if o else _e.as_expr(s) for s, o in zip(region.starts, offs))
        loads.append(_e.Load(region.buffer, idx))
    return loads


def _join(op: str, x, what: str):
    terms = [t if t.dtype == "bool" else _e.binary("!=", t, 0) for t in _terms(x, what)]
    out = terms[0]
    for t in terms[1:]:
        out = _e.binary(op, out, t)
    return out


def any_of(x):
    """Whether any element of the buffer or slice ``x`` is true (nonzero)."""
    return _join("or", x, "T.any_of")


def all_of(x):
    """Whether every element of the buffer or slice ``x`` is true (nonzero)."""
    return _join("and", x, "T.all_of")
