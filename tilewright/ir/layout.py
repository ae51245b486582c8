"""Layouts: where each element of an on-chip tile lives.

A ``FragmentLayout`` maps (thread, register) -> logical index of a fragment.  ``index(tid, r)`` is
written with ``+ - * // %`` only, so it is evaluated both symbolically (``tid`` an IR expression,
``r`` a Python int once loops over registers are unrolled) and on NumPy arrays (all threads at
once) to build ownership tables.  The tables are how passes check, at compile time, that a thread
reading a fragment element in a ``T.Parallel`` loop really holds it, and which register it is in.

A ``SharedLayout`` maps a logical index of a shared-memory tile to an element offset, with an XOR
swizzle of 16-byte chunks for tiles that matrix loads (ldmatrix / LDS reads) walk down columns of.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np

from . import dtype as dt


class FragmentLayout:
    shape: tuple
    num_threads: int
    num_regs: int
    kind = "fragment"

    def index(self, tid, r: int) -> tuple:
        raise NotImplementedError

    def valid(self, r: int):
        """Registers past the end of a padded layout hold nothing (None means all valid)."""
        return

    # ---------------------------------------------------------------- tables
    @cached_property
    def table(self) -> np.ndarray:
        """``[num_threads, num_regs]`` flat logical index of each register (-1 where invalid)."""
        tids = np.arange(self.num_threads)
        out = np.empty((self.num_threads, self.num_regs), dtype=np.int64)
        strides = _strides(self.shape)
        for r in range(self.num_regs):
            idx = self.index(tids, r)
            flat = np.zeros(self.num_threads, dtype=np.int64)
            for d, x in enumerate(idx):
                flat = flat + np.broadcast_to(np.asarray(x, dtype=np.int64), tids.shape) * strides[d]
            out[:, r] = flat
        for r in range(self.num_regs):
            v = self.valid_np(tids, r)
            if v is not None:
                out[~v, r] = -1
        return out

    def valid_np(self, tids, r):
        return None

    @cached_property
    def reg_of(self) -> np.ndarray:
        """``[num_threads, numel]``: the register holding each element in each thread, or -1."""
        n = int(np.prod(self.shape))
        out = np.full((self.num_threads, n), -1, dtype=np.int64)
        tab = self.table
        for r in range(self.num_regs):
            ok = tab[:, r] >= 0
            out[np.nonzero(ok)[0], tab[ok, r]] = r
        return out

    def check_complete(self) -> None:
        """Every element is held by some thread."""
        held = (self.reg_of >= 0).any(axis=0)
        if not held.all():
            raise ValueError(f"layout {self} leaves {int((~held).sum())} elements unowned")

    def signature(self) -> tuple:
        return (type(self).__name__, self.shape, self.num_threads, self.num_regs, self.table.tobytes())

    def same_as(self, other) -> bool:
        return (self.shape == other.shape and self.num_threads == other.num_threads
                and self.num_regs == other.num_regs and np.array_equal(self.table, other.table))


def _strides(shape) -> list:
    s, acc = [], 1
    for x in reversed(shape):
        s.append(acc)
        acc *= x
    return list(reversed(s))


class StripedLayout(FragmentLayout):
    """Row-major elements dealt to threads in chunks of ``vec`` consecutive elements:
    flat = ((r // vec) * T + t) * vec + r % vec.  When the tile has fewer chunks than threads,
    threads ``t`` and ``t + chunks`` hold the same chunk (replication); with ``replicate=False``
    threads ``t >= chunks`` hold nothing instead (each position has one holder)."""

    kind = "striped"

    def __init__(self, shape, num_threads: int, vec: int = 1, replicate: bool = True):
        self.shape = tuple(shape)
        self.num_threads = num_threads
        numel = int(np.prod(self.shape))
        if numel % vec:
            vec = 1
        self.vec = vec
        chunks = numel // vec
        if chunks >= num_threads:
            self.replicas = 1
            self.rounds = -(-chunks // num_threads)
            self.padded = chunks % num_threads != 0
        else:
            self.rounds = 1
            self.padded = num_threads % chunks != 0 or not replicate
            self.replicas = num_threads // chunks if not self.padded else 1
        self.chunks = chunks
        self.num_regs = self.rounds * vec

    def _flat(self, tid, r):
        t = tid % self.chunks if (self.replicas > 1) else tid
        return ((r // self.vec) * self.num_threads + t) * self.vec + r % self.vec

    def flat(self, tid, r):
        return self._flat(tid, r)

    def index(self, tid, r):
        f = self._flat(tid, r)
        return _unflatten(f, self.shape)

    def valid(self, r):
        return None if not self.padded else "padded"

    def valid_np(self, tids, r):
        if not self.padded:
            return None
        return self._flat(tids, r) < self.chunks * self.vec

    def valid_expr(self, tid, r):
        """Predicate expression (or None) for register r holding a real element."""
        if not self.padded:
            return None
        return self._flat(tid, r) < self.chunks * self.vec

    def __repr__(self):
        return f"Striped{self.shape}(T={self.num_threads}, vec={self.vec}, regs={self.num_regs})"


class WholeLayout(FragmentLayout):
    """Every thread holds every element, register ``r`` the ``r``-th in row-major order: how a
    ``T.Parallel`` loop that fills a per-thread (``local``) buffer iterates, each thread running it
    whole (a block-wide table that ``frontend.uniform_fragments`` made local is one)."""

    kind = "whole"

    def __init__(self, shape, num_threads: int):
        self.shape = tuple(shape)
        self.num_threads = num_threads
        self.num_regs = int(np.prod(self.shape))

    def flat(self, tid, r):
        return r

    def index(self, tid, r):
        return _unflatten(r, self.shape)

    def __repr__(self):
        return f"Whole{self.shape}(T={self.num_threads})"


def _unflatten(f, shape):
    idx = []
    for d in range(len(shape)):
        inner = int(np.prod(shape[d + 1 :])) if d + 1 < len(shape) else 1
        x = f // inner if inner != 1 else f
        if d > 0:
            x = x % shape[d]
        idx.append(x)
    return tuple(idx)


class SlicedLayout(FragmentLayout):
    """A tile reduced along ``dim``, dealt slice by slice (a slice: the elements that share every
    other index, e.g. one row for ``dim = 1``).  Threads form ``G = T / P`` groups of ``P``
    (a power of two, at most the slice's chunk count, so that the first round fills every lane);
    group ``g`` takes slices ``g, g + G, ...``, and deals each slice's chunks of ``vec`` elements to
    its lanes round by round:

        slice = sr * G + t // P,  position along dim = (rd * P + t % P) * vec + e,
        r = (sr * rounds + rd) * vec + e.

    Every register then holds one slice in every thread, so a reduction folds a fixed set of
    registers per result (what ``ReducedLayout`` needs) whatever the extents.  ``StripedLayout``
    is preferred where it already has that property (it vectorizes better across rows)."""

    kind = "sliced"

    def __init__(self, shape, dim: int, num_threads: int, vec: int = 1):
        self.shape = tuple(shape)
        self.dim = dim
        self.num_threads = num_threads
        extent = self.shape[dim]
        if dim != len(self.shape) - 1 or extent % vec:
            vec = 1
        self.vec = vec
        self.kept = tuple(x for d, x in enumerate(self.shape) if d != dim)
        self.slices = int(np.prod(self.kept)) if self.kept else 1
        self.chunks = extent // vec
        lanes = 1
        while lanes * 2 <= min(self.chunks, num_threads) and num_threads % (lanes * 2) == 0:
            lanes *= 2
        self.lanes = lanes
        self.groups = num_threads // lanes
        self.rounds = -(-self.chunks // lanes)
        self.slice_rounds = -(-self.slices // self.groups)
        self.num_regs = self.slice_rounds * self.rounds * vec

    def _coords(self, tid, r):
        e = r % self.vec
        q = r // self.vec
        rd, sr = q % self.rounds, q // self.rounds
        lane = tid if self.groups == 1 else tid % self.lanes
        s = sr if self.groups == 1 else tid // self.lanes + sr * self.groups
        return s, rd * self.lanes + lane, e

    def index(self, tid, r):
        s, chunk, e = self._coords(tid, r)
        pos = chunk * self.vec + e if self.vec > 1 else chunk
        kept = _unflatten(s, self.kept) if self.kept else ()
        return tuple(kept[: self.dim]) + (pos,) + tuple(kept[self.dim:])

    def valid(self, r):
        return "padded" if self.valid_np(np.arange(self.num_threads), r) is not None else None

    def valid_expr(self, tid, r):
        """Predicate expression (or None) for register r holding a real element."""
        q = r // self.vec
        rd, sr = q % self.rounds, q // self.rounds
        s, chunk, _ = self._coords(tid, r)
        conds = []
        if (sr + 1) * self.groups > self.slices:
            conds.append(s < self.slices)
        if (rd + 1) * self.lanes > self.chunks:
            conds.append(chunk < self.chunks)
        if not conds:
            return None
        return conds[0] if len(conds) == 1 else conds[0] & conds[1]

    def valid_np(self, tids, r):
        v = self.valid_expr(tids, r)
        return None if v is None else np.asarray(v)

    def __repr__(self):
        return f"Sliced{self.shape}(dim={self.dim}, T={self.num_threads}, lanes={self.lanes}, vec={self.vec})"


class MmaAccumLayout(FragmentLayout):
    """Accumulator of a warp-tiled matrix product: warps on a ``warps_m x warps_n`` grid, each warp
    covering a ``(M / warps_m) x (N / warps_n)`` sub-tile made of ``instr.m x instr.n`` atoms laid
    out by the instruction's C layout.  r = (mi * atoms_n + ni) * c_elems + e."""

    kind = "mma_c"

    def __init__(self, shape, instr, warps_m: int, warps_n: int, num_threads: int):
        self.shape = tuple(shape)
        self.instr = instr
        self.warps_m, self.warps_n = warps_m, warps_n
        self.num_threads = num_threads
        m, n = self.shape
        self.wm, self.wn = m // warps_m, n // warps_n
        self.atoms_m, self.atoms_n = self.wm // instr.m, self.wn // instr.n
        self.num_regs = self.atoms_m * self.atoms_n * instr.c_elems

    def warp_coords(self, tid):
        g = self.instr.group_size
        warp = tid // g
        return warp // self.warps_n, warp % self.warps_n, tid % g

    def index(self, tid, r):
        ce = self.instr.c_elems
        e = r % ce
        atom = r // ce
        mi, ni = atom // self.atoms_n, atom % self.atoms_n
        wmi, wni, lane = self.warp_coords(tid)
        row, col = self.instr.c_index(lane, e)
        return (wmi * self.wm + mi * self.instr.m + row, wni * self.wn + ni * self.instr.n + col)

    def reg(self, mi, ni, e) -> int:
        return (mi * self.atoms_n + ni) * self.instr.c_elems + e

    def __repr__(self):
        return f"MmaC{self.shape}({self.instr.name}, warps={self.warps_m}x{self.warps_n})"


class MmaOperandLayout(FragmentLayout):
    """The A operand of a warp-tiled product held in registers: rows split over ``warps_m``, the
    whole K per warp, atoms ``instr.m x instr.k`` in the instruction's A layout; warps with the same
    row block hold the same data.  r = (mi * atoms_k + kk) * a_elems + e."""

    kind = "mma_a"

    def __init__(self, shape, instr, warps_m: int, warps_n: int, num_threads: int):
        self.shape = tuple(shape)
        self.instr = instr
        self.warps_m, self.warps_n = warps_m, warps_n
        self.num_threads = num_threads
        m, k = self.shape
        self.wm = m // warps_m
        self.atoms_m, self.atoms_k = self.wm // instr.m, k // instr.k
        self.num_regs = self.atoms_m * self.atoms_k * instr.a_elems

    def index(self, tid, r):
        ae = self.instr.a_elems
        e = r % ae
        atom = r // ae
        mi, kk = atom // self.atoms_k, atom % self.atoms_k
        g = self.instr.group_size
        warp = tid // g
        wmi = warp // self.warps_n
        row, col = self.instr.a_index(tid % g, e)
        return (wmi * self.wm + mi * self.instr.m + row, kk * self.instr.k + col)

    def reg(self, mi, kk, e) -> int:
        return (mi * self.atoms_k + kk) * self.instr.a_elems + e

    def __repr__(self):
        return f"MmaA{self.shape}({self.instr.name}, warps={self.warps_m}x{self.warps_n})"


def _covers(rep, col) -> bool:
    """Register ``col`` holds, in every thread where it holds anything, the reduced element that
    register ``rep`` holds there (so it can be folded into ``rep``'s group, whose validity is ``rep``'s)."""
    filled = col >= 0
    return bool(np.array_equal(rep[filled], col[filled]))


class ReducedLayout(FragmentLayout):
    """The layout of ``reduce(src, dim)``: each thread holds the reduced elements its source
    registers cover.  ``groups[r']`` lists the source registers folded into register ``r'``; the
    grouping is the same in every thread (checked when built)."""

    kind = "reduced"

    def __init__(self, src: FragmentLayout, dim: int, out_shape):
        self.src = src
        self.dim = dim
        self.shape = tuple(out_shape)
        self.num_threads = src.num_threads
        tab = src.table  # [T, R]
        src_shape = src.shape
        strides = _strides(src_shape)
        keep = [d for d in range(len(src_shape)) if d != dim]
        # reduced flat index of each (t, r)
        coords = [(tab // strides[d]) % src_shape[d] for d in range(len(src_shape))]
        red = np.zeros_like(tab)
        acc = 1
        for d in reversed(keep):
            red = red + coords[d] * acc
            acc *= src_shape[d]
        red[tab < 0] = -1
        groups: list[list[int]] = []
        first_key: dict[bytes, int] = {}
        for r in range(src.num_regs):
            col = red[:, r]
            gi = first_key.get(col.tobytes())
            if gi is None and (col < 0).any():
                # a register a padded layout fills in some threads only (the last round of a row
                # that the threads do not divide) folds into the group of an earlier register that
                # holds the same reduced element wherever it is filled
                gi = next((g for g in range(len(groups)) if _covers(red[:, groups[g][0]], col)), None)
            if gi is not None:
                groups[gi].append(r)
                continue
            first_key[col.tobytes()] = len(groups)
            groups.append([r])
        # the grouping must be consistent: registers of different groups never share a reduced
        # index in any thread
        rep = [g[0] for g in groups]
        for gi in range(len(groups)):
            for gj in range(gi + 1, len(groups)):
                if np.any((red[:, rep[gi]] == red[:, rep[gj]]) & (red[:, rep[gi]] >= 0)):
                    raise ValueError("reduction grouping differs between threads")
        self.groups = groups
        self.rep = rep
        self.num_regs = len(groups)
        self._red = red

    def index(self, tid, r):
        full = self.src.index(tid, self.rep[r])
        out = tuple(x for d, x in enumerate(full) if d != self.dim)
        if len(out) < len(self.shape):  # (1,) result of a full 1-D reduction
            out = out + tuple(0 for _ in range(len(self.shape) - len(out)))
        if len(out) > len(self.shape):
            out = out[: len(self.shape)]
        return out

    def valid_np(self, tids, r):
        return self._red[:, self.rep[r]] >= 0

    def valid_expr(self, tid, r):
        """Predicate expression (or None) for register r holding a real element: that of the source
        register standing for its reduction group (the group's first, as in ``valid_np``), so that a
        reduction of a reduced, padded fragment knows which registers to leave out."""
        fn = getattr(self.src, "valid_expr", None)
        return fn(tid, self.rep[r]) if fn is not None else None

    def __repr__(self):
        return f"Reduced{self.shape}(from {self.src}, dim={self.dim})"


def sharing_masks(layout: FragmentLayout) -> list[int]:
    """Bits of the thread index in which threads holding the same element differ, when the sets
    of holders are cosets of a bit subspace (XOR-closed); used for reductions across threads."""
    reg_of = layout.reg_of
    holders = [np.nonzero(reg_of[:, f] >= 0)[0] for f in range(reg_of.shape[1])]
    masks = set()
    for h in holders:
        if len(h) <= 1:
            continue
        base = int(h[0])
        for x in h[1:]:
            masks.add(int(x) ^ base)
    # reduce to a basis of single bits when possible
    bits = sorted({1 << b for m in masks for b in range(32) if m >> b & 1})
    return bits


# --------------------------------------------------------------------------------------------
# shared memory


class SharedLayout:
    """Element offset of ``[stage,] row, col`` in a shared tile, with an optional XOR swizzle of
    16-byte chunks: chunk' = chunk ^ ((row // rep) % period), chosen so that 8 consecutive rows read
    at the same column fall into 8 different 16-byte bank groups (conflict-free ldmatrix).

    With ``tma`` the layout is the one the tensor memory accelerator writes: rows of 32, 64 or 128
    bytes use the TMA swizzle of that width (the same XOR pattern as above, which is why the two
    agree), and wider rows are cut into column blocks of 128 bytes stored one after the other
    (one TMA box each).  ``tma_swizzle`` is the TMA swizzle mode in bytes (0: none)."""

    def __init__(self, shape, dtype: str, swizzle: bool = False, tma: bool = False):
        self.shape = tuple(shape)
        self.dtype = dtype
        self.elem_bytes = dt.nbytes(dtype)
        self.swizzle = False
        self.chunk_elems = max(16 // self.elem_bytes, 1)
        self.block_cols = None  # columns per 128-byte column block (wide TMA rows)
        self.tma = tma
        self.tma_swizzle = 0
        row_bytes = self.shape[-1] * self.elem_bytes if len(self.shape) >= 2 else 0
        if tma and row_bytes > 128:
            self.block_cols = 128 // self.elem_bytes
            row_bytes = 128
        if (swizzle or tma) and len(self.shape) >= 2:
            if row_bytes % 16 == 0 and row_bytes >= 32:
                chunks = row_bytes // 16
                # the XOR must stay inside the row: chunk ^ x with x < period keeps an aligned group
                # of `period` chunks only when period is a power of two dividing the chunk count
                # (a 96-byte row has 6 chunks: 5 ^ 3 = 6 would land in the next row)
                self.period = 8
                while chunks % self.period:
                    self.period //= 2
                self.rep = max(8 // chunks, 1)
                self.swizzle = True
                self.tma_swizzle = row_bytes if tma else 0

    @staticmethod
    def tma_compatible(shape, dtype: str) -> bool:
        """Whether a tile of this shape can be written by TMA boxes in the ``tma`` layout.  The TMA
        swizzles by shared-address bits, repeating every 8 rows: every box (one per stage and
        128-byte column block) starts on that period only when the tile has a multiple of 8 rows."""
        if len(shape) < 2 or shape[-2] % 8:
            return False
        row_bytes = shape[-1] * dt.nbytes(dtype)
        return row_bytes in (16, 32, 64, 128) or (row_bytes > 128 and row_bytes % 128 == 0)

    @property
    def numel(self) -> int:
        return int(np.prod(self.shape))

    def offset(self, idx):
        """Flat element offset for a logical index tuple (IR exprs or ints or NumPy arrays)."""
        strides = _strides(self.shape)
        if not self.swizzle and self.block_cols is None:
            off = 0
            for x, s in zip(idx, strides):
                off = off + x * s if s != 1 else off + x
            return off
        *lead, row, col = idx
        off = 0
        for x, s in zip(lead, strides[:-2]):
            off = off + x * s
        width = self.shape[-1]
        if self.block_cols is not None:
            width = self.block_cols
            off = off + (col // width) * (self.shape[-2] * width)
            col = col % width
        if not self.swizzle:
            return off + row * width + col
        ce = self.chunk_elems
        chunk = col // ce
        sw = (row // self.rep) % self.period if self.rep > 1 else row % self.period
        return off + row * width + (chunk ^ sw) * ce + col % ce

    def __repr__(self):
        extra = ", swizzled" if self.swizzle else ""
        extra += ", tma" if self.tma else ""
        return f"Shared{self.shape}({self.dtype}{extra})"


def tma_boxes(tile_shape, dtype: str) -> tuple[int, int]:
    """(number of TMA boxes, columns per box) that write a 2-D shared tile in the ``tma`` layout:
    rows of more than 128 bytes take one box per 128-byte column block."""
    cols = tile_shape[-1]
    row_bytes = cols * dt.nbytes(dtype)
    if row_bytes > 128:
        per = 128 // dt.nbytes(dtype)
        return cols // per, per
    return 1, cols


class SimtAccumLayout(FragmentLayout):
    """Accumulator of a SIMT (no matrix instruction) tile product: threads on a ``tm x tn`` grid,
    thread (ti, tj) holding rows ti + tm*a and columns tj + tn*b (strided, so that a warp's reads
    of the A and B tiles spread over shared-memory banks).  r = a * (N / tn) + b."""

    kind = "simt_c"

    def __init__(self, shape, tm: int, tn: int, num_threads: int):
        self.shape = tuple(shape)
        self.tm, self.tn = tm, tn
        self.num_threads = num_threads
        self.per_m, self.per_n = self.shape[0] // tm, self.shape[1] // tn
        self.num_regs = self.per_m * self.per_n

    def index(self, tid, r):
        a, b = r // self.per_n, r % self.per_n
        return (tid // self.tn + self.tm * a, tid % self.tn + self.tn * b)

    def __repr__(self):
        return f"SimtC{self.shape}(threads={self.tm}x{self.tn})"
