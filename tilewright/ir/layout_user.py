"""A fragment layout the program gives (``T.annotate_layout({frag: T.Fragment(...)})``).

TileLang's ``T.Fragment(shape, forward_fn)`` maps each logical element (and, with ``replicate=k``,
each of its ``k`` replicas) to ``(thread, local index)``.  ``UserFragmentLayout`` is built from the
tables of that map, evaluated on every element: thread ``t``'s register ``r`` holds logical element
``table[t, r]`` (registers are the local indices the program uses, in increasing order).

Lowering needs ``index(tid, r)`` as an expression of the thread index for each (unrolled) register.
It is found from the tables: the flat logical index of register ``r`` in thread ``t`` must be
``G(t) + H[r]`` with ``G`` additive over the bits of ``t`` (``G(t) = sum of bit_b(t) * w_b``), which
holds for every layout written with ``+ - * // %`` by powers of two, the layouts TileLang's own
lowering accepts.  Which threads hold register ``r`` must be a union of a few thread ranges, or the
threads of a range whose index has some bits fixed.  A layout outside those forms is refused with a
``LayoutFitError`` saying why.
"""

from __future__ import annotations

import numpy as np

from . import expr as E
from .layout import FragmentLayout, _strides, _unflatten

_MAX_RANGES = 4  # holders of one register: at most this many ranges of consecutive threads


class LayoutFitError(ValueError):
    """The layout's tables have no form this module can express per thread (message says why)."""


class UserFragmentLayout(FragmentLayout):
    kind = "user"

    def __init__(self, shape, table: np.ndarray, name: str = "?"):
        """``table[t, r]``: the flat logical index register ``r`` of thread ``t`` holds (-1: none)."""
        self.shape = tuple(shape)
        self.num_threads = table.shape[0]
        self.name = name
        used = (table >= 0).any(axis=0)
        self._table = table[:, used]  # registers that hold nothing anywhere are dropped
        self.num_regs = self._table.shape[1]
        self._weights, self._offsets, self._base = _fit_additive(self._table, self.num_threads)
        self._nbits = max(int(self.num_threads - self._base - 1).bit_length(), 1)
        self._ranges = [_thread_ranges(self._table[:, r] >= 0) for r in range(self.num_regs)]

    @classmethod
    def from_holders(cls, shape, threads: np.ndarray, regs: np.ndarray, num_threads: int, name: str = "?"):
        """From ``threads`` / ``regs``, each ``[numel, replicas]``: the holder of each flat element and replica
        (what ``T.Fragment`` gives)."""
        shape = tuple(shape)
        numel = int(np.prod(shape))
        if threads.max() >= num_threads:
            bad = int(np.nonzero((threads >= num_threads).any(axis=1))[0][0])
            raise LayoutFitError(f"it places element {_unflatten_int(bad, shape)} in thread {int(threads[bad].max())}, "
                                 f"but the block has {num_threads} threads")
        used = np.unique(regs)
        compact = np.searchsorted(used, regs)  # registers numbered by the local indices the layout uses
        table = np.full((num_threads, len(used)), -1, dtype=np.int64)
        flat = np.broadcast_to(np.arange(numel)[:, None], threads.shape)
        order = np.lexsort((flat.ravel(), compact.ravel(), threads.ravel()))
        t_s, r_s, f_s = threads.ravel()[order], compact.ravel()[order], flat.ravel()[order]
        clash = np.nonzero((t_s[1:] == t_s[:-1]) & (r_s[1:] == r_s[:-1]) & (f_s[1:] != f_s[:-1]))[0]
        if len(clash):
            k = int(clash[0])
            raise LayoutFitError(f"it puts elements {_unflatten_int(int(f_s[k]), shape)} and "
                                 f"{_unflatten_int(int(f_s[k + 1]), shape)} at the same local index "
                                 f"{int(used[r_s[k]])} of thread {int(t_s[k])}")
        table[t_s, r_s] = f_s
        return cls(shape, table, name)

    # the table is known up front (FragmentLayout computes it from index() otherwise)
    @property
    def table(self) -> np.ndarray:
        return self._table

    def _thread_part(self, tid):
        out = 0
        if self._base:
            tid = tid - self._base  # (threads below the base hold nothing: their registers are guarded off)
        for lo, width, w in self._weights:
            term = tid // (1 << lo) if lo else tid
            if lo + width < self._nbits:  # (the top bits need no modulo: tid < num_threads)
                term = term % (1 << width)
            out = out + term * w if w != 1 else out + term
        return out

    def index(self, tid, r: int) -> tuple:
        f = self._thread_part(tid) + int(self._offsets[r])
        return _unflatten(f, self.shape)

    def valid(self, r: int):
        return None if (self._table[:, r] >= 0).all() else "partial"

    def valid_np(self, tids, r):
        v = self._table[:, r] >= 0
        return None if v.all() else v[np.asarray(tids)]

    def valid_expr(self, tid, r):
        """Predicate (or None) for thread ``tid`` holding something in register ``r``."""
        ranges = self._ranges[r]
        if ranges == [(0, self.num_threads)]:
            return None
        cond = None
        for piece in ranges:
            c = None
            if piece[0] == "bits":  # threads in [lo, hi) whose index has ``value`` under ``bits``
                _, bits, value, lo, hi = piece
                c = E.binary("==", tid & bits, value)
            elif piece[0] == "period":  # threads in [lo, hi) with (t - lo) % P < L
                _, period, length, lo, hi = piece
                c = E.binary("<", (tid - lo) % period, length)
            else:
                lo, hi = piece
            if lo > 0:
                c = (tid >= lo) if c is None else E.binary("and", c, tid >= lo)
            if hi < self.num_threads:
                c = (tid < hi) if c is None else E.binary("and", c, tid < hi)
            cond = c if cond is None else E.binary("or", cond, c)
        return cond

    def holders(self) -> np.ndarray:
        """The threads holding any element."""
        return np.nonzero((self._table >= 0).any(axis=1))[0]

    def __repr__(self):
        return f"User{self.shape}({self.name}, T={self.num_threads}, regs={self.num_regs})"


def _unflatten_int(f: int, shape) -> tuple:
    return tuple(int(x) for x in _unflatten(f, shape))


def _fit_additive(table: np.ndarray, num_threads: int):
    """``G(t) = sum bit_b(t - base) * w_b`` and ``H[r]`` with ``table[t, r] = G(t) + H[r]`` wherever held,
    ``base`` the first thread holding anything (a layout over threads 32..95 is additive in ``t - 32``);
    ``G`` returned as (lowest bit, bit count, weight) runs of bits whose weights double, and ``base``."""
    valid = table >= 0
    base = int(np.nonzero(valid.any(axis=1))[0][0])
    table, valid = table[base:], valid[base:]
    num_threads -= base
    tids = np.arange(num_threads)
    nbits = max(int(num_threads - 1).bit_length(), 1)
    w = []
    for b in range(nbits):
        bit = 1 << b
        lo = tids[((tids & bit) == 0) & ((tids | bit) < num_threads)]
        hi = lo | bit
        both = valid[lo] & valid[hi]
        diffs = (table[hi] - table[lo])[both]
        if diffs.size and not (diffs == diffs[0]).all():
            raise LayoutFitError(f"the element a register holds does not move by a fixed step when bit {b} of the "
                                 "thread index flips (write the layout with + - * and // % by powers of two)")
        w.append(int(diffs[0]) if diffs.size else 0)
    g = np.zeros(num_threads, dtype=np.int64)
    for b, wb in enumerate(w):
        g += ((tids >> b) & 1) * wb
    offsets = np.zeros(table.shape[1], dtype=np.int64)
    for r in range(table.shape[1]):
        held = np.nonzero(valid[:, r])[0]
        offsets[r] = table[held[0], r] - g[held[0]]
        if not (table[held, r] == g[held] + offsets[r]).all():
            raise LayoutFitError("the elements of one register are not spread over the threads the same way in "
                                 "every register (write the layout with + - * and // % by powers of two)")
    runs = []
    b = 0
    while b < nbits:
        if w[b] == 0:
            b += 1
            continue
        start = b
        while b + 1 < nbits and w[b + 1] == 2 * w[b]:
            b += 1
        runs.append((start, b - start + 1, w[start]))
        b += 1
    return runs, offsets, base


def _thread_ranges(mask: np.ndarray) -> list:
    """The threads where ``mask`` is set, as at most ``_MAX_RANGES`` pieces: ``(lo, hi)``, a run of
    consecutive threads; ``("bits", bits, value, lo, hi)``, the threads of ``[lo, hi)`` whose index has
    ``value`` under ``bits`` (e.g. lanes 0, 4, 8, ... of each warp: a column slice of a matrix
    accumulator); ``("period", P, L, lo, hi)``, the threads of ``[lo, hi)`` with ``(t - lo) % P < L``
    (e.g. the first 28 lanes of each warp: a row slice of one).  Pieces are taken greedily, each
    covering as many consecutive runs as it can."""
    idx = np.nonzero(mask)[0]
    if not len(idx):
        raise LayoutFitError("a local index is held by no thread")
    breaks = np.nonzero(np.diff(idx) != 1)[0]
    starts = [int(idx[0])] + [int(idx[k + 1]) for k in breaks]
    ends = [int(idx[k]) + 1 for k in breaks] + [int(idx[-1]) + 1]
    if len(starts) <= _MAX_RANGES:
        return list(zip(starts, ends))
    pieces, i = [], 0
    while i < len(starts):
        j_bits, bits = i, None
        while j_bits + 1 < len(starts):
            fixed = _fixed_bits(np.concatenate([np.arange(starts[k], ends[k]) for k in range(i, j_bits + 2)]))
            if fixed is None:
                break
            j_bits, bits = j_bits + 1, fixed
        j_per = i
        length = ends[i] - starts[i]
        while (j_per + 1 < len(starts) and ends[j_per + 1] - starts[j_per + 1] == length
               and starts[j_per + 1] - starts[j_per] == (starts[i + 1] - starts[i])):
            j_per += 1
        if j_bits == j_per == i:
            pieces.append((starts[i], ends[i]))
        elif j_bits >= j_per:
            pieces.append(("bits",) + bits)
        else:
            pieces.append(("period", starts[i + 1] - starts[i], length, starts[i], ends[j_per]))
        i = max(j_bits, j_per) + 1
    if len(pieces) > _MAX_RANGES:
        raise LayoutFitError(f"the threads holding one local index form {len(starts)} separate ranges, not "
                             f"{_MAX_RANGES} or fewer runs, runs repeating with a period, or runs with some index "
                             "bits fixed")
    return pieces


def _fixed_bits(idx: np.ndarray):
    """``(bits, value, lo, hi)`` when ``idx`` (sorted) is exactly the threads of ``[lo, hi)`` whose index
    has ``value`` under ``bits``; None otherwise."""
    lo, hi = int(idx[0]), int(idx[-1]) + 1
    and_all, or_all = int(np.bitwise_and.reduce(idx)), int(np.bitwise_or.reduce(idx))
    bits = ~(and_all ^ or_all) & ((1 << max(hi - 1, 1).bit_length()) - 1)
    value = and_all & bits
    span = np.arange(lo, hi)
    if bits and np.array_equal(span[(span & bits) == value], idx):
        return (bits, value, lo, hi)
    return None


def flat_index(shape, idx) -> np.ndarray:
    """Row-major flat index of NumPy index arrays."""
    out = 0
    for x, s in zip(idx, _strides(shape)):
        out = out + np.asarray(x, dtype=np.int64) * s
    return out
