"""``KPackedLayout``: a shared tile whose rows are K and columns M or N (a B operand ``K x N`` or a
transposed A ``K x M``), stored so that each column's K values are adjacent.

AMD matrix instructions (MFMA, WMMA) give every lane a run of consecutive K values of one row of A
or one column of B.  In a row-major ``K x N`` tile those values are a row apart: a lane would gather
them with one 2-byte read each.  Here the K rows are cut into groups of ``group`` rows, and within
a group column ``n`` keeps its ``group`` values together (a *pack*, ``group * elem_bytes`` bytes, at
most 16): a lane reads its run with one 64- or 128-bit load.

    offset(k, n) = lead + (k // group) * (N * group) + slot(n) * group + k % group

``slot`` permutes 16-byte units of a pack row (a unit holds ``16 / pack_bytes`` packs): unit ``u``
goes to ``u ^ ((u // period) % period)`` (an XOR of its low bits with the next ones), so that the
16-byte stores of the copy that fills the tile (lane ``t`` writes units ``t * k + j``, see
``lower_copy_packed``) fall into distinct banks within each 8-lane phase, while the reads of
consecutive columns by consecutive lanes stay a permutation of one aligned group of units."""

from __future__ import annotations

from . import dtype as dt
from .layout import SharedLayout, _strides


class KPackedLayout(SharedLayout):
    packed = True

    def __init__(self, shape, dtype: str, group: int):
        super().__init__(shape, dtype)
        rows, cols = self.shape[-2], self.shape[-1]
        if len(self.shape) < 2 or rows % group or group * self.elem_bytes > 16:
            raise ValueError(f"cannot pack {self.shape} {dtype} by {group} rows")
        self.group = group
        self.pack_bytes = group * self.elem_bytes
        self.packs_per_unit = max(16 // self.pack_bytes, 1)
        units = cols // self.packs_per_unit if cols % self.packs_per_unit == 0 else 0
        # the XOR changes the low bits of a unit index only: it stays inside an aligned group of
        # ``period`` units, so the period must divide the units of a pack row
        period = 8
        while period > 1 and (not units or units % period):
            period //= 2
        self.period = period

    def slot(self, n):
        """Physical pack index of column ``n`` within its pack row (exprs, ints or NumPy arrays)."""
        if self.period <= 1:
            return n
        ppu, p = self.packs_per_unit, self.period
        u = n // ppu if ppu > 1 else n
        sw = u ^ ((u // p) % p)
        return sw * ppu + n % ppu if ppu > 1 else sw

    def offset(self, idx):
        *lead, k, n = idx
        strides = _strides(self.shape)
        off = 0
        for x, s in zip(lead, strides[:-2]):
            off = off + x * s
        g, cols = self.group, self.shape[-1]
        return off + (k // g) * (cols * g) + self.slot(n) * g + k % g

    def __repr__(self):
        return f"Shared{self.shape}({self.dtype}, K packed by {self.group})"


def pack_group(run_elems: int, dtype: str) -> int:
    """Rows per pack for lanes reading runs of ``run_elems`` K values: the run, at most 16 bytes."""
    g = max(1, min(run_elems, 16 // dt.nbytes(dtype)))
    while g & (g - 1):
        g -= 1
    return g
