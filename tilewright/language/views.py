"""TileLang's ``T.reshape(buf, shape)`` and ``T.view(buf, shape=None, dtype=None)``: another shape
for the same elements, no copy.

A view is resolved where it is used: ``view[i, j]`` reads (and ``view[i, j] = v`` writes) the element
of the underlying buffer at the same row-major position, so every later stage of the compiler sees
only the buffer itself (its layout, barriers and memory planning stay exact).  Tile operations
(``T.copy``, ``T.gemm``, ...) take buffers and slices of buffers, not views: a slice of a view is
in general not a rectangle of the buffer, so they are refused with a CompileError that says so.
A view with another dtype (reinterpreting bits) is refused too.
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
    if base.scope == "global":
        raise _b.error("T.reshape of a kernel parameter is not supported",
                       hint="declare the parameter with the shape you index it by")
    if _math.prod(shape) != _math.prod(base.shape):
        raise _b.error(f"T.reshape: {base.name} has {_math.prod(base.shape)} elements, shape {shape} has "
                       f"{_math.prod(shape)}")
    return base if shape == tuple(base.shape) else BufferView(base, shape)


def view(src, shape=None, dtype=None):
    """``src`` seen with another ``shape`` (``T.reshape``); a different ``dtype`` is not supported."""
    base = src.base if isinstance(src, BufferView) else src
    if dtype is not None and _dt.canon(dtype) != getattr(base, "dtype", None):
        raise _b.error(f"T.view(dtype={_dt.canon(dtype)!r}) of a {getattr(base, 'dtype', '?')} buffer reinterprets "
                       "its bits, which is not supported", hint="convert values with T.Cast instead")
    return reshape(src, src.shape if shape is None else shape)
