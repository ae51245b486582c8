"""TileLang's ``T.reshape(buf, shape)`` and ``T.view(buf, shape=None, dtype=None)``: another shape
for the same elements, no copy.

A view is resolved where it is used: ``view[i, j]`` reads (and ``view[i, j] = v`` writes) the element
of the underlying buffer at the same row-major position, so every later stage of the compiler sees
only the buffer itself (its layout, barriers and memory planning stay exact).  Tile operations
(``T.copy``, ``T.gemm``, ...) take buffers and slices of buffers, not views: a slice of a view is
in general not a rectangle of the buffer, so they are refused with a CompileError that says so --
except ``T.copy`` to or from a whole view, or from/to a start element of one (``T.copy(view[i, j],
tile)``: the view's rectangle from (i, j)), which become element loops (``copy_through_view``,
``copy_view_tile``).  ``T.Tensor(shape, dtype, buf.data)`` in a kernel is ``T.reshape(buf, shape)``.
A view of a kernel parameter is a view of global memory like any other (row-major positions of its
logical shape, whatever its strides).

A view with another dtype (``T.view(buf, shape, dtype=...)``) reinterprets the bits of the same
storage, little-endian as the GPUs and the CPU backends are: a view of the same width reads each
element's bits as the other type; a narrower one (a float32 tile seen as bfloat16, twice as many
elements) reads part ``k % r`` of element ``k // r``; a wider one (bfloat16 seen as float32) joins
``r`` consecutive elements.  Writing through a narrower view would change part of an element another
thread may be writing, so it is refused; the 4-bit types have no byte address to reinterpret.
"""

from __future__ import annotations

import builtins as _builtins
import math as _math

from ..frontend import builder as _b
from ..ir import dtype as _dt
from ..ir import expr as _e
from ..ir import tile as _t

__all__ = ["copy_through_view", "reshape", "view"]  # reinterpret: through attrs.reinterpret (handles)

_UINT = {8: "uint8", 16: "uint16", 32: "uint32", 64: "uint64"}


def reinterpret(value, dtype):
    """``T.reinterpret(value, dtype)`` (also TVM's order ``(dtype, value)``): the same bits as
    ``dtype``, which must have the width of ``value``'s type."""
    if isinstance(value, str) and not isinstance(dtype, str):
        value, dtype = dtype, value
    d = _dt.canon(dtype)
    x = _e.as_expr(value)
    if _dt.bits(d) != _dt.bits(x.dtype) or _dt.is_subbyte(d):
        raise _b.error(f"T.reinterpret: {x.dtype} ({_dt.bits(x.dtype)} bits) and {d} ({_dt.bits(d)} bits) differ in "
                       "width (or are 4-bit types, which have no bits of their own in a byte)",
                       hint="reinterpret between types of one width, e.g. float32 <-> uint32")
    return _bitcast(d, x)


def _bitcast(dtype: str, x):
    return x if x.dtype == dtype else _e.Call("reinterpret", (x,), dtype)


class BufferView:
    """``base`` seen with shape ``shape`` (row-major order) and element type ``dtype`` (the same
    bits: see the module docstring)."""

    def __init__(self, base: _t.Buffer, shape: tuple, dtype: str | None = None):
        self.base = base
        self.shape = shape
        self.dtype = dtype or base.dtype
        self.scope = base.scope
        self.name = f"{base.name}.reshape{shape}" if dtype is None else f"{base.name}.view({self.dtype}){shape}"
        self.wide, self.narrow = _dt.bits(self.dtype), _dt.bits(base.dtype)  # view bits, base bits

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def _linear(self, idx):
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
        return lin

    def _base_indices(self, idx) -> tuple:
        return self._at(self._linear(idx))

    def _at(self, lin) -> tuple:
        """The indices of the base element at row-major position ``lin``."""
        out = []
        for n in reversed(self.base.shape):
            out.append(lin % n)
            lin = lin // n
        return tuple(reversed(out))

    def __getitem__(self, idx):
        lin, base, vb, bb = self._linear(idx), self.base, self.wide, self.narrow
        if vb == bb and self.dtype == base.dtype:
            load = _e.Load(base, self._at(lin))
            b = _b.current_or_none()
            if b is not None:  # remembered for T.copy(view[i, j], tile) (copy_view_tile)
                b.__dict__.setdefault("_view_elements", {})[id(load)] = (load, self, idx if isinstance(idx, tuple)
                                                                         else (idx,))
            return load
        if vb == bb:
            return _bitcast(self.dtype, _e.Load(base, self._at(lin)))
        if vb < bb:  # part lin % r of element lin // r
            r = bb // vb
            word = _bitcast(_UINT[bb], _e.Load(base, self._at(lin // r)))
            part = _e.cast(_UINT[vb], word >> _e.cast(_UINT[bb], (lin % r) * vb))
            return _bitcast(self.dtype, part)
        r = vb // bb  # elements lin * r .. lin * r + r - 1, the first in the low bits
        acc = None
        for j in range(r):
            piece = _e.cast(_UINT[vb], _bitcast(_UINT[bb], _e.Load(base, self._at(lin * r + j))))
            piece = piece << _e.Const(bb * j, _UINT[vb]) if j else piece
            acc = piece if acc is None else acc | piece
        return _bitcast(self.dtype, acc)

    def store_element(self, idx, value, loc=None):
        """The store ``view[idx] = value`` (the frontend's assignment calls this, and emits the
        statement returned): a wider view stores several elements, all but the last emitted here."""
        stores = self.stores(idx, value, loc)
        for s in stores[:-1]:
            _b.current().emit(s)
        return stores[-1]

    def stores(self, idx, value, loc=None) -> list:
        """The element stores of ``view[idx] = value``."""
        lin, base, vb, bb = self._linear(idx), self.base, self.wide, self.narrow
        value = _e.cast(self.dtype, value)
        if vb == bb:
            return [_t.BufferStore(base, self._at(lin), _bitcast(base.dtype, value), loc=loc)]
        if vb < bb:
            raise _b.error(f"writing through {self.name} would change part of a {base.dtype} element of {base.name}, "
                           "which other threads may be writing: not supported",
                           hint=f"write {base.name} itself, or view it with a type at least as wide")
        r, bits = vb // bb, _bitcast(_UINT[vb], value)
        stores = []
        for j in range(r):
            piece = _e.cast(_UINT[bb], bits >> _e.Const(bb * j, _UINT[vb]) if j else bits)
            stores.append(_t.BufferStore(base, self._at(lin * r + j), _bitcast(base.dtype, piece), loc=loc))
        return stores

    def __repr__(self) -> str:
        b = self.base.name
        return f"view {self.name} of {b} (a T.reshape / T.view: index its elements, or use {b})"


def view_element(x):
    """(view, indices) when ``x`` is the load ``view[indices]`` of this kernel (a start element of a
    view for T.copy), else None."""
    b = _b.current_or_none()
    hit = None if b is None else b.__dict__.get("_view_elements", {}).get(id(x))
    return None if hit is None or hit[0] is not x else hit[1:]


def is_view_element(x) -> bool:
    return isinstance(x, _e.Load) and view_element(x) is not None


def copy_view_tile(src, dst) -> None:
    """``T.copy(view[i, j], tile)`` / ``T.copy(tile, view[i, j])``: the rectangle of the view that
    starts at (i, j) and has the tile's shape (leading view dimensions of extent 1), as one
    T.Parallel element loop; its parts outside the view are not read (zeros) and not written, as
    for any T.copy of a global tile."""
    from ..frontend.regions import to_region

    b = _b.current()
    at_src = is_view_element(src)
    view, start = view_element(src if at_src else dst)
    other = dst if at_src else src
    r = to_region(other, None, "copy destination" if at_src else "copy source")
    shape = tuple(r.shape) or (1,)
    while len(shape) > view.ndim and shape[0] == 1:
        shape = shape[1:]
    if len(shape) > view.ndim:
        raise _b.error(f"T.copy: a tile of shape {tuple(r.shape)} does not fit in {view.name}, which has "
                       f"{view.ndim} dimension(s)")
    ext = (1,) * (view.ndim - len(shape)) + shape  # the tile's dimensions are the view's last ones
    vs = tuple(_e.Var(b.fresh("e"), "int32", kind="loop") for _ in shape)
    full = (_e.as_expr(0),) * (view.ndim - len(shape)) + vs
    vidx = tuple(_e.as_expr(st) + v for st, v in zip(start, full))
    inside = None
    for i, n, e in zip(vidx, view.shape, ext):
        c = i < n if e > 1 or not isinstance(i, _e.Const) else None
        if c is not None:
            inside = c if inside is None else inside & c
    other_at = element_of(r, (_e.as_expr(0),) * (len(r.shape) - len(shape)) + vs if r.shape else ())
    if at_src:
        value = view[vidx]
        if inside is not None:
            value = _e.select(inside, value, _e.Const(0, value.dtype))
        store = _t.BufferStore(other_at.buffer, other_at.indices, _e.cast(other_at.buffer.dtype, value), loc=b.loc)
    else:
        stores = view.stores(vidx, other_at, b.loc)
        store = stores[0] if len(stores) == 1 else _t.SeqStmt(stores)
        if inside is not None:
            store = _t.IfThenElse(inside, store, None, loc=b.loc)
    b.emit(_t.ParallelFor(vs, shape, store, loc=b.loc))


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
    """``src`` seen with another ``shape`` (``T.reshape``) and/or ``dtype`` (its bits reinterpreted)."""
    base = src.base if isinstance(src, BufferView) else src
    if dtype is None or _dt.canon(dtype) == getattr(src, "dtype", None):
        return reshape(src, src.shape if shape is None else shape)
    d = _dt.canon(dtype)
    if not isinstance(base, _t.Buffer):
        raise _b.error(f"T.view takes a buffer, got {src!r}")
    if isinstance(src, BufferView) and src.dtype != base.dtype:
        raise _b.error(f"T.view of {src.name}, itself a view with another dtype, is not supported",
                       hint=f"view {base.name} directly")
    vb, bb = _dt.bits(d), _dt.bits(base.dtype)
    if _dt.is_subbyte(d) or _dt.is_subbyte(base.dtype) or max(vb, bb) % min(vb, bb) or max(vb, bb) > 64:
        raise _b.error(f"T.view(dtype={d!r}) of the {base.dtype} buffer {base.name}: the bits of one type must be "
                       "a whole number of the other's (4-bit types have no byte of their own)")
    if base.scope == "global":
        raise _b.error("T.view of a kernel parameter with another dtype is not supported",
                       hint="declare the parameter with the dtype you read it as")
    if shape is None:
        shape = (*base.shape[:-1], base.shape[-1] * bb // vb)
    shape = _shape(shape, "T.view")
    if _math.prod(shape) * vb != _math.prod(base.shape) * bb:
        raise _b.error(f"T.view: {base.name} holds {_math.prod(base.shape)} x {bb} bits, shape {shape} of {d} "
                       f"{_math.prod(shape)} x {vb}")
    return BufferView(base, shape, d)


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
    at = _remap(vs, s_shape, d_shape)
    if isinstance(d, BufferView):  # a store through the view (one with another dtype stores its bits)
        stores = d.stores(at, value, b.loc)
        store = stores[0] if len(stores) == 1 else _t.SeqStmt(stores)
    else:
        store_at = element_of(d, at)
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
