"""TileLang's ``T.reshape(buf, shape)`` and ``T.view(buf, shape=None, dtype=None)``: another shape
for the same elements, no copy.

A view is resolved where it is used: ``view[i, j]`` reads (and ``view[i, j] = v`` writes) the element
of the underlying buffer at the same row-major position, so every later stage of the compiler sees
only the buffer itself (its layout, barriers and memory planning stay exact).  Tile operations
(``T.copy``, ``T.gemm``, ...) take buffers and slices of buffers, not views: a slice of a view is
in general not a rectangle of the buffer, so they are refused with a CompileError that says so --
except ``T.copy`` to or from a whole view, which becomes an element loop (``copy_through_view``).
A view of a kernel parameter is a view of global memory like any other (row-major positions of its
logical shape, whatever its strides).  A view with another dtype (reinterpreting bits) is refused.
"""

from __future__ import annotations

import builtins as _builtins
import math as _math

from ..frontend import builder as _b
from ..ir import dtype as _dt
from ..ir import expr as _e
from ..ir import tile as _t

__all__ = ["reshape", "view"]


class BufferView:
    """``base`` seen with shape ``shape`` (same number of elements, row-major order)."""

    def __init__(self, base: _t.Buffer, shape: tuple):
        self.base = base
        self.shape = shape
        self.dtype = base.dtype
        self.scope = base.scope
        self.name = f"{base.name}.reshape{shape}"

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def _base_indices(self, idx) -> tuple:
        if not isinstance(idx, tuple):
            idx = (idx,)
        if any(isinstance(i, slice) for i in idx):
            raise _b.error(f"slices of the view {self.name} are not supported: tile operations take buffers",
                           hint=f"index elements of the view in a T.Parallel loop, or slice {self.base.name} itself")
        if len(idx) != len(self.shape):
            raise _b.error(f"the view {self.name} has {len(self.shape)} dimension(s) but {len(idx)} indices are given")
        lin = _e.as_expr(0)
        for i, n in zip(idx, self.shape):
            lin = lin * n + i
        out = []
        for n in reversed(self.base.shape):
            out.append(lin % n)
            lin = lin // n
        return tuple(reversed(out))

    def __getitem__(self, idx):
        return _e.Load(self.base, self._base_indices(idx))

    def store_element(self, idx, value, loc=None) -> _t.BufferStore:
        """The store ``view[idx] = value`` (the frontend's assignment calls this)."""
        return _t.BufferStore(self.base, self._base_indices(idx), _e.cast(self.dtype, value), loc=loc)

    def __repr__(self) -> str:
        b = self.base.name
        return f"view {self.name} of {b} (a T.reshape / T.view: index its elements, or use {b})"


def _shape(shape, what: str) -> tuple:
    shape = (shape,) if isinstance(shape, _builtins.int) else tuple(shape)
    if not shape or not all(isinstance(s, _builtins.int) and not isinstance(s, _builtins.bool) and s > 0
                            for s in shape):
        raise _b.error(f"{what}: the shape must be positive compile-time ints, got {shape!r}")
    return shape


def reshape(src, shape):
    """``src`` (a shared, fragment or local buffer, or a view) seen with ``shape``."""
    base = src.base if isinstance(src, BufferView) else src
    if not isinstance(base, _t.Buffer):
        raise _b.error(f"T.reshape takes a buffer, got {src!r}")
    shape = _shape(shape, "T.reshape")
    if not all(isinstance(n, _builtins.int) for n in base.shape):
        raise _b.error(f"T.reshape of {base.name}, whose shape {tuple(base.shape)} is known only at launch, is not "
                       "supported", hint="index the buffer itself")
    if _math.prod(shape) != _math.prod(base.shape):
        from ..errors import CompileAssertionError

        raise CompileAssertionError(f"T.reshape: {base.name} has {_math.prod(base.shape)} elements, shape {shape} "
                                    f"has {_math.prod(shape)}", _b.current().loc)
    return base if shape == tuple(base.shape) else BufferView(base, shape)


def view(src, shape=None, dtype=None):
    """``src`` seen with another ``shape`` (``T.reshape``); a different ``dtype`` is not supported."""
    base = src.base if isinstance(src, BufferView) else src
    if dtype is not None and _dt.canon(dtype) != getattr(base, "dtype", None):
        raise _b.error(f"T.view(dtype={_dt.canon(dtype)!r}) of a {getattr(base, 'dtype', '?')} buffer reinterprets "
                       "its bits, which is not supported", hint="convert values with T.Cast instead")
    return reshape(src, src.shape if shape is None else shape)


def is_view(x) -> bool:
    return isinstance(x, BufferView)


def copy_through_view(src, dst) -> None:
    """``T.copy`` where a side is a whole view (``T.copy(T.reshape(A, ...), B)``): one T.Parallel
    loop over the view's shape storing element by element (dtype-converting); the other side is a
    buffer, a slice, a start element or a view of the same shape (unit dimensions aside)."""
    from ..frontend.regions import to_region

    b = _b.current()
    view_side = src if isinstance(src, BufferView) else dst
    shape = tuple(view_side.shape)

    def side(x, what):
        if isinstance(x, BufferView):
            return x, tuple(x.shape)
        r = to_region(x, shape, what)
        return r, tuple(r.shape)

    s, s_shape = side(src, "copy source")
    d, d_shape = side(dst, "copy destination")
    if _no_units(s_shape) != _no_units(d_shape):
        raise _b.error(f"T.copy: the source has shape {s_shape} but the destination has shape {d_shape}")
    vs = tuple(_e.Var(b.fresh("e"), "int32", kind="loop") for _ in s_shape)
    value = element_of(s, vs)
    store_at = element_of(d, _remap(vs, s_shape, d_shape))
    dbuf = store_at.buffer
    store = _t.BufferStore(dbuf, store_at.indices, _e.cast(dbuf.dtype, value), loc=b.loc)
    b.emit(_t.ParallelFor(vs, s_shape, store, loc=b.loc))


def _no_units(shape) -> tuple:
    return tuple(n for n in shape if n != 1)


def _remap(vs, from_shape, to_shape) -> tuple:
    """Loop variables over ``from_shape`` as indices over ``to_shape`` (equal but for unit dimensions)."""
    it = iter(v for v, n in zip(vs, from_shape) if n != 1)
    return tuple(_e.as_expr(0) if n == 1 else next(it) for n in to_shape)


def element_of(x, idx) -> _e.Load:
    """The element at ``idx`` (over ``shape``) of a view or of a region."""
    if isinstance(x, BufferView):
        return x[tuple(idx)]
    it = iter(idx)
    out = []
    for dim, start in enumerate(x.starts):
        out.append(start if dim in x.squeezed else start + next(it))
    return _e.Load(x.buffer, tuple(out))
