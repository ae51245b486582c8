"""``KPackedLayout``: a shared tile whose rows are K and columns M or N (a B operand ``K x N`` or a
transposed A ``K x M``), stored so that each column's K values are adjacent.

AMD matrix instructions (MFMA, WMMA) give every lane a run of consecutive K values of one row of A
or one column of B.  In a row-major ``K x N`` tile those values are a row apart: a lane would gather
them with one 2-byte read each.  Here the K rows are cut into groups of ``group`` rows, and within
a group column ``n`` keeps its ``group`` values together (a *pack*, ``group * elem_bytes`` bytes, at
most 16): a lane reads its run with one 64- or 128-bit load.

    offset(k, n) = lead + (k // group) * (N * group) + slot(n) * group + k % group

``slot`` permutes 16-byte units of a pack row (a unit holds ``16 / pack_bytes`` packs): unit ``u``
goes to ``u ^ ((u // period) % period)`` (an XOR of its low bits with the next ones; ``period`` is
the units the LDS serves per clock, 8 with 32 banks, 16 with 64), so that the
16-byte stores of the copy that fills the tile (lane ``t`` writes units ``t * k + j``, see
``lower_copy_packed``) fall into distinct banks within each 8-lane phase, while the reads of
consecutive columns by consecutive lanes stay a permutation of one aligned group of units."""

from __future__ import annotations

from . import dtype as dt
from .layout import SharedLayout, _strides


class KPackedLayout(SharedLayout):
    packed = True

    def __init__(self, shape, dtype: str, group: int, window: int = 128, mode: str = "xor"):
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
        period = window // 16
        while period > 1 and (not units or units % period):
            period //= 2
        self.period = period
        self.mode = mode if period > 1 else "xor"
        # "pad": a 16-byte gap after every ``period`` units instead of the XOR (linear addresses)
        gaps = units // period if self.mode == "pad" else 0
        self.row_elems = cols * group + gaps * self.packs_per_unit * group

    @property
    def numel(self) -> int:
        lead = 1
        for x in self.shape[:-2]:
            lead *= int(x)
        return lead * (int(self.shape[-2]) // self.group) * self.row_elems

    def slot(self, n):
        """Physical pack index of column ``n`` within its pack row (exprs, ints or NumPy arrays)."""
        if self.period <= 1:
            return n
        ppu, p = self.packs_per_unit, self.period
        u = n // ppu if ppu > 1 else n
        sw = u + u // p if self.mode == "pad" else u ^ ((u // p) % p)
        return sw * ppu + n % ppu if ppu > 1 else sw

    def offset(self, idx):
        *lead, k, n = idx
        g = self.group
        stage = (int(self.shape[-2]) // g) * self.row_elems
        off = 0
        mult = stage
        for x, size in zip(reversed(lead), reversed(self.shape[:-2])):
            off = off + x * mult
            mult *= int(size)
        return off + (k // g) * self.row_elems + self.slot(n) * g + k % g

    def __repr__(self):
        return f"Shared{self.shape}({self.dtype}, K packed by {self.group}, {self.mode})"


def pack_group(run_elems: int, dtype: str) -> int:
    """Rows per pack for lanes reading runs of ``run_elems`` K values: the run, at most 16 bytes."""
    g = max(1, min(run_elems, 16 // dt.nbytes(dtype)))
    while g & (g - 1):
        g -= 1
    return g


class SwizzledRowsLayout(SharedLayout):
    """Row-major with the 16-byte-chunk XOR swizzle of ``SharedLayout``, sized to an LDS that serves
    ``window`` bytes per clock (128: 32 banks, 256: 64 banks): chunk ^= (row // rep) % period, where
    ``rep`` rows fill one window, so that the rows one read phase touches at a column fall into
    distinct 16-byte bank groups."""

    def __init__(self, shape, dtype: str, window: int = 128):
        super().__init__(shape, dtype, swizzle=True)
        if self.swizzle:
            chunks = self.shape[-1] * self.elem_bytes // 16
            wchunks = window // 16
            self.period = wchunks
            while chunks % self.period:
                self.period //= 2
            self.rep = max(wchunks // chunks, 1)

    def offset(self, idx):
        if not self.swizzle:
            return super().offset(idx)
        *lead, row, col = idx
        strides = _strides(self.shape)
        off = 0
        for x, s in zip(lead, strides[:-2]):
            off = off + x * s
        ce, width = self.chunk_elems, self.shape[-1]
        sw = (row // self.rep) % self.period if self.rep > 1 else row % self.period
        return off + row * width + ((col // ce) ^ sw) * ce + col % ce


class PaddedRowsLayout(SharedLayout):
    """Row-major with each row followed by 16 bytes of padding: a row is an odd number of 16-byte
    chunks apart from the next, so rows read at one column fall into distinct bank groups, with
    addresses that stay linear in the row (no XOR to compute per access).  For tiles written
    element by element from registers, where the swizzle's per-access address math costs
    registers.  Flagged ``swizzle`` so vector accesses stay within 16 bytes (rows are 16-byte
    aligned, not more)."""

    def __init__(self, shape, dtype: str, window: int = 0):
        super().__init__(shape, dtype)
        self.window = window  # nonzero: a stand-in for SwizzledRowsLayout(window), see unpad_operand_layouts
        self.pad = max(16 // self.elem_bytes, 1)
        row_bytes = self.shape[-1] * self.elem_bytes
        self.swizzle = len(self.shape) >= 2 and row_bytes % 16 == 0
        self.row_stride = self.shape[-1] + (self.pad if self.swizzle else 0)

    @property
    def numel(self) -> int:
        lead = 1
        for x in self.shape[:-2]:
            lead *= int(x)
        return lead * int(self.shape[-2]) * self.row_stride if len(self.shape) >= 2 else super().numel

    def offset(self, idx):
        if len(self.shape) < 2:
            return super().offset(idx)
        *lead, row, col = idx
        stage = int(self.shape[-2]) * self.row_stride
        off = 0
        mult = stage
        for x, n in zip(reversed(lead), reversed(self.shape[:-2])):
            off = off + x * mult
            mult *= int(n)
        return off + row * self.row_stride + col

    def __repr__(self):
        return f"Shared{self.shape}({self.dtype}, rows padded by {self.pad})"
