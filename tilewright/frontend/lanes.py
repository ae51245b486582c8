"""``T.Ramp(base, stride, lanes)`` subscripts: several consecutive elements read or written at once.

TileLang writes ``B[t, T.Ramp(0, 1, 4)] = A[T.Ramp(t - 2, 1, 4)]`` for a 4-lane vector access.
Here a subscript holding a ``Ramp`` is a ``LaneAccess``: one element access per lane, the lane's
index in the ramp's dimension being ``base + stride * lane``.  Storing into one stores each lane;
storing one into a buffer reads each lane.  As a tile-op operand (``T.atomic_addx2(Dst[T.Ramp(0, 1,
2)], ...)``) a unit-stride ramp is the region ``base : base + lanes``.

A lane index below zero counts from the end of its dimension, as a negative Python index does
(TileLang issue 2554: a vector access whose index sign is known only at run time): an index that
cannot be proved non-negative becomes ``i < 0 ? i + extent : i``, so ``A[T.Ramp(t - 2, 1, 4)]`` with
``t = 0`` reads ``A[n - 2], A[n - 1], A[0], A[1]``.
"""

from __future__ import annotations

from ..ir import expr as E
from ..ir.analysis import is_nonnegative
from ..ir.tile import Buffer, BufferStore, Region
from .builder import error


class Ramp:
    """``T.Ramp(base, stride, lanes)``: the indices ``base, base + stride, ..., base + stride * (lanes - 1)``."""

    def __init__(self, base, stride, lanes):
        if isinstance(lanes, E.Const):
            lanes = lanes.value
        if isinstance(stride, E.Const):
            stride = stride.value
        if isinstance(lanes, bool) or not isinstance(lanes, int) or lanes < 1:
            raise error(f"T.Ramp(base, stride, lanes): lanes must be a positive int known when the kernel is read, "
                        f"got {lanes!r}")
        if isinstance(stride, bool) or not isinstance(stride, (int, E.Expr)):
            raise error(f"T.Ramp(base, stride, lanes): stride must be an int or an integer kernel value, "
                        f"got {stride!r}")
        if isinstance(base, bool) or not isinstance(base, (int, E.Expr)):
            raise error(f"T.Ramp(base, stride, lanes): base must be an int or an integer kernel value, got {base!r}")
        self.base, self.stride, self.lanes = base, stride, lanes

    def lane(self, k: int):
        return E.as_expr(self.base) + self.stride * k if k else E.as_expr(self.base)

    def __repr__(self) -> str:
        return f"T.Ramp({self.base}, {self.stride}, {self.lanes})"


def has_ramp(idx) -> bool:
    return isinstance(idx, tuple) and any(isinstance(i, Ramp) for i in idx) or isinstance(idx, Ramp)


def _wrapped(i, extent):
    """A lane index; below zero it counts from the end of the dimension (see the module)."""
    i = E.as_expr(i)
    c = E.const_value(i)
    if c is not None:
        return E.as_expr(c + extent) if c < 0 else i
    if is_nonnegative(i):
        return i
    return E.select(i < 0, i + extent, i)


class LaneValues:
    """One scalar per lane: the value of a ``LaneAccess`` and of arithmetic on one (``B[T.Ramp(...)] * 2``)."""

    def __init__(self, values: list):
        self.values = values
        self.lanes = len(values)

    def lane_value(self, k: int):
        return self.values[k]

    def _map(self, other, fn):
        if isinstance(other, LaneValues):
            if other.lanes != self.lanes:
                raise error(f"an operation on {self.lanes} lanes and {other.lanes} lanes")
            return LaneValues([fn(self.lane_value(k), other.lane_value(k)) for k in range(self.lanes)])
        if not isinstance(other, (int, float, E.Expr)) or isinstance(other, bool):
            return NotImplemented
        return LaneValues([fn(self.lane_value(k), other) for k in range(self.lanes)])

    def __add__(self, o):
        return self._map(o, lambda a, b: a + b)

    def __radd__(self, o):
        return self._map(o, lambda a, b: b + a)

    def __sub__(self, o):
        return self._map(o, lambda a, b: a - b)

    def __rsub__(self, o):
        return self._map(o, lambda a, b: b - a)

    def __mul__(self, o):
        return self._map(o, lambda a, b: a * b)

    def __rmul__(self, o):
        return self._map(o, lambda a, b: b * a)

    def __truediv__(self, o):
        return self._map(o, lambda a, b: a / b)

    def __neg__(self):
        return LaneValues([-self.lane_value(k) for k in range(self.lanes)])

    def store_elements(self, buf, idx, loc) -> list:
        """``dst[...] = lanes``: ``dst``'s subscript is a ramp or a slice of as many elements."""
        if not isinstance(idx, tuple):
            idx = (idx,)
        if has_ramp(idx):
            return LaneAccess(buf, idx).stores(self, loc)
        slices = [d for d, i in enumerate(idx) if isinstance(i, slice)]
        if len(slices) != 1:
            raise error(f"{buf.name}: store {self.lanes} lanes into a T.Ramp subscript or a slice of one dimension")
        d = slices[0]
        s = idx[d]
        lo = 0 if s.start is None else s.start
        if s.step not in (None, 1):
            raise error(f"{buf.name}: slices with a step are not supported")
        n = None if s.stop is None else E.const_value(E.as_expr(s.stop) - lo)
        if n is not None and n != self.lanes:
            raise error(f"{buf.name}: the slice holds {n} elements, the value {self.lanes} lanes")
        ramp_idx = tuple(Ramp(lo, 1, self.lanes) if k == d else i for k, i in enumerate(idx))
        return LaneAccess(buf, ramp_idx).stores(self, loc)


class LaneAccess(LaneValues):
    """``buf[..., T.Ramp(...), ...]``: one element access per lane (see the module docstring)."""

    def __init__(self, buf: Buffer, idx: tuple):
        ramps = [d for d, i in enumerate(idx) if isinstance(i, Ramp)]
        if len(ramps) != 1:
            raise error(f"{buf.name}: a subscript may hold one T.Ramp, got {len(ramps)}",
                        hint="index the other dimensions with scalars")
        if len(idx) != buf.ndim:
            raise error(f"{buf.name} has {buf.ndim} dimension(s) {tuple(buf.shape)} but is indexed with {len(idx)}")
        if any(isinstance(i, slice) for i in idx):
            raise error(f"{buf.name}: a subscript with a T.Ramp cannot also hold a slice")
        self.buffer, self.idx, self.dim = buf, idx, ramps[0]
        self.lanes = idx[self.dim].lanes

    def lane_index(self, k: int) -> tuple:
        out = []
        for d, i in enumerate(self.idx):
            v = i.lane(k) if isinstance(i, Ramp) else i
            out.append(_wrapped(v, self.buffer.shape[d]))
        return tuple(out)

    def lane_value(self, k: int) -> E.Expr:
        return E.Load(self.buffer, self.lane_index(k))

    @property
    def dtype(self) -> str:
        return self.buffer.dtype

    def as_region(self) -> Region:
        """A unit-stride ramp of non-negative indices as a tile-op operand."""
        ramp = self.idx[self.dim]
        if E.const_value(E.as_expr(ramp.stride)) != 1 or not is_nonnegative(E.as_expr(ramp.base)):
            raise error(f"{self.buffer.name}[{ramp!r}] as a tile operand needs stride 1 and a base known to be "
                        "non-negative", hint="use a slice, base:base+lanes")
        starts = tuple(E.as_expr(ramp.base) if d == self.dim else E.as_expr(i) for d, i in enumerate(self.idx))
        extents = tuple(self.lanes if d == self.dim else 1 for d in range(self.buffer.ndim))
        squeezed = tuple(d for d in range(self.buffer.ndim) if d != self.dim)
        return Region(self.buffer, starts, extents, squeezed)

    def stores(self, value, loc) -> list:
        """The statements storing ``value`` (a ``LaneAccess`` of as many lanes, or one scalar for every lane)."""
        if isinstance(value, LaneValues) and value.lanes != self.lanes:
            raise error(f"{self.buffer.name}: a store of {self.lanes} lanes gets a value of {value.lanes} lanes")
        if isinstance(value, (Buffer, Region)):
            raise error(f"{self.buffer.name}: store a T.Ramp subscript of the source (B[T.Ramp(...)]) or a scalar "
                        "into a T.Ramp subscript, not a tile", hint="use T.copy for tiles")
        out = []
        for k in range(self.lanes):
            v = value.lane_value(k) if isinstance(value, LaneValues) else value
            out.append(BufferStore(self.buffer, self.lane_index(k), E.cast(self.buffer.dtype, v), loc=loc))
        return out

    def __repr__(self) -> str:
        return f"{self.buffer.name}[{', '.join(map(repr, self.idx))}]"


__all__ = ["LaneAccess", "LaneValues", "Ramp", "has_ramp"]
