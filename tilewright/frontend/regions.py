"""Turning the user's subscripts into IR: ``A[i, j]`` (an element), ``A[a:b, :]`` (a region) and the
``T.copy`` start-point form whose extent comes from the other side of the copy."""

from __future__ import annotations

from ..ir.expr import Expr, Load, as_expr, const_value
from ..ir.tile import Buffer, Region
from .builder import error
from .lanes import LaneAccess, has_ramp


def subscript(buf: Buffer, idx):
    """``buf[idx]``: a ``Load`` when every index is a scalar, a ``Region`` when any is a slice."""
    if not isinstance(idx, tuple):
        idx = (idx,)
    if has_ramp(idx):  # T.Ramp lanes (frontend/lanes.py)
        return LaneAccess(buf, idx)
    if "layout_map" in buf.attrs:  # a shared buffer with an annotated T.Layout (language/layout_objects.py)
        return Load(buf, laid_out_index(buf, idx))
    if any(i is Ellipsis for i in idx):
        raise error(f"'...' is not supported in subscripts of {buf.name}")
    if buf.scope == "var" and len(idx) == 1 and buf.ndim == 1:
        pass
    if len(idx) != buf.ndim:
        raise error(
            f"{buf.name} has {buf.ndim} dimension(s) {tuple(buf.shape)} but is indexed with {len(idx)}",
            hint=f"write {buf.ndim} indices, e.g. {buf.name}[{', '.join('i' + str(k) for k in range(buf.ndim))}]",
        )
    if not any(isinstance(i, slice) for i in idx):
        return Load(buf, tuple(_index(buf, i) for i in idx))
    starts, extents, squeezed = [], [], []
    for d, i in enumerate(idx):
        if isinstance(i, slice):
            if i.step not in (None, 1):
                raise error(f"slices with a step are not supported ({buf.name}, dimension {d})")
            lo = 0 if i.start is None else i.start
            hi = buf.shape[d] if i.stop is None else i.stop
            ext = _extent(buf, d, lo, hi)
            starts.append(as_expr(lo))
            extents.append(ext)
        else:
            starts.append(_index(buf, i))
            extents.append(1)
            squeezed.append(d)
    return Region(buf, tuple(starts), tuple(extents), tuple(squeezed))


def laid_out_index(buf: Buffer, idx: tuple) -> tuple:
    """The physical index of logical element ``idx`` of a buffer with an annotated layout."""
    logical = buf.attrs["logical_shape"]
    if any(isinstance(i, slice) for i in idx):
        raise error(f"shared buffer {buf.name} has an annotated layout (T.annotate_layout): use it through its "
                    "elements", hint=f"index single elements, {buf.name}[i, j], in a T.Parallel loop")
    if len(idx) != len(logical):
        raise error(f"{buf.name} has {len(logical)} dimension(s) {tuple(logical)} but is indexed with {len(idx)}")
    return buf.attrs["layout_map"](tuple(_index(buf, i) for i in idx))


def _index(buf, i):
    if isinstance(i, (int, Expr)) and not isinstance(i, bool):
        return as_expr(i)
    if hasattr(i, "item"):
        return as_expr(i.item())
    raise error(f"cannot index {buf.name} with {i!r} (a {type(i).__name__})")


def _extent(buf, d, lo, hi):
    """Extent of ``lo:hi``: static when both are constants or ``hi - lo`` folds to a constant
    (``k*32 : (k+1)*32``); the symbolic dimension when the slice covers it whole; else the run-time
    integer ``hi - lo``."""
    diff = as_expr(hi) - as_expr(lo)
    v = const_value(diff)
    if v is None:
        v = _affine_difference(lo, hi)
    if v is None:
        if const_value(lo) == 0 and hi is buf.shape[d]:
            return buf.shape[d]
        if getattr(diff, "dtype", None) in ("int32", "int64"):
            # known only at run time (TileLang's T.fill(x[a:b], v) with a, b computed in the kernel): tile
            # copies and fills of such a region are element loops (frontend/dynamic_shared.py)
            return diff
        raise error(
            f"the slice extent of {buf.name} in dimension {d} is not a compile-time constant",
            hint="write slices as start:start+EXTENT with a constant EXTENT, e.g. A[k*32:(k+1)*32, :]",
        )
    if v <= 0:
        raise error(f"empty or negative slice extent {v} in {buf.name}, dimension {d}")
    return int(v)


def _affine_difference(lo, hi):
    """hi - lo for affine integer expressions (k+1)*32 - k*32 -> 32, where a term that is not affine
    itself (``q = T.if_then_else(c, a, b)`` in ``q*32 : (q+1)*32``) counts as one opaque variable."""
    a, b = _affine_terms(as_expr(hi)), _affine_terms(as_expr(lo))
    if a is None or b is None:
        return None
    keys = set(a) | set(b)
    diff = {k: a.get(k, 0) - b.get(k, 0) for k in keys}
    if any(v != 0 for k, v in diff.items() if k is not None):
        return None
    return diff.get(None, 0)


def _affine_terms(e):
    """``{term: coeff, None: constant}`` of an integer expression: affine in variables and in opaque
    terms (any other integer sub-expression, keyed by its text), None for a non-integer value."""
    from ..ir.analysis import affine_coeffs
    from ..ir.expr import BinOp, Cast, UnOp

    if isinstance(e, BinOp) and e.op in ("+", "-"):
        a, b = _affine_terms(e.a), _affine_terms(e.b)
        if a is None or b is None:
            return None
        out = dict(a)
        for k, v in b.items():
            out[k] = out.get(k, 0) + (v if e.op == "+" else -v)
        return out
    if isinstance(e, BinOp) and e.op == "*":
        a, b = _affine_terms(e.a), _affine_terms(e.b)
        if a is not None and b is not None and (len(a) == 1 or len(b) == 1):
            scale, terms = (a[None], b) if len(a) == 1 else (b[None], a)
            return {k: v * scale for k, v in terms.items()}
    if isinstance(e, UnOp) and e.op == "neg":
        a = _affine_terms(e.a)
        return None if a is None else {k: -v for k, v in a.items()}
    if isinstance(e, Cast) and e.dtype in ("int32", "int64"):
        return _affine_terms(e.a)
    plain = affine_coeffs(e)
    if plain is not None:
        return plain
    if getattr(e, "dtype", None) not in ("int32", "int64"):
        return None
    return {("term", str(e)): 1, None: 0}


def to_region(x, other_shape=None, what="operand") -> Region:
    """A ``Region`` for a tile-op operand: a Buffer (whole), a Region, or a start point (``Load``)
    whose extents are taken from ``other_shape`` (aligned to the trailing dimensions)."""
    laid_out = getattr(x, "buffer", x)
    if isinstance(laid_out, Buffer) and "layout_map" in laid_out.attrs:
        raise error(f"shared buffer {laid_out.name} has an annotated layout (T.annotate_layout), so it cannot be a "
                    f"tile {what}: tile operations place shared tiles themselves",
                    hint="copy it element by element in a T.Parallel loop, or remove the annotation")
    if isinstance(x, Buffer):
        return Region.full(x)
    if isinstance(x, Region):
        return x
    if isinstance(x, LaneAccess):
        return x.as_region()
    if isinstance(x, Load):
        buf = x.buffer
        if other_shape is None:
            raise error(f"the {what} {buf.name}[...] is a single element; give a slice or a whole buffer")
        other = [s for s in other_shape]
        nd = buf.ndim
        if len(other) > nd:
            squeezable = [s for s in other if s != 1]
            if len(squeezable) > nd:
                raise error(f"{buf.name} has {nd} dimensions but the other side of the copy has shape {tuple(other)}")
            other = squeezable
        ext = [1] * (nd - len(other)) + list(other)
        squeezed = tuple(range(nd - len(other)))
        return Region(buf, x.indices, tuple(ext), squeezed)
    raise error(f"cannot use {x!r} as a tile {what}; pass a buffer, a slice of one, or a start element A[i, j]")


def element_region(x: Load) -> Region:
    """``A[i, j]`` as a one-element tile (TileLang's element-to-element ``T.copy(A[i, j], B[k])``)."""
    nd = x.buffer.ndim
    return Region(x.buffer, x.indices, (1,) * nd, tuple(range(nd - 1)))


Buffer.subscript_rule = subscript  # buf[...] in kernel code builds loads and regions by these rules
