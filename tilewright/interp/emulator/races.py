"""The lockstep shared-memory race detector: per block, who read and wrote each byte since the last
barrier, and which bytes async copies still target."""

from __future__ import annotations

import numpy as np

from .errors import RaceError


class _Races:
    """Per-block shared-memory access sets since the last barrier, at byte granularity.

    ``wmin``/``wmax``: smallest/largest thread that changed the byte; ``rmin``/``rmax``: the same for
    readers; ``pending``: async copies issued to the byte and not yet landed."""

    NONE_MIN = np.iinfo(np.int32).max

    def __init__(self, st):
        self.st = st
        n = st.nb * st.S
        self.wmin = np.full(n, self.NONE_MIN, np.int32)
        self.wmax = np.full(n, -1, np.int32)
        self.rmin = np.full(n, self.NONE_MIN, np.int32)
        self.rmax = np.full(n, -1, np.int32)
        self.pending = np.zeros(n, np.int32)

    def _bytes(self, pos, sz):
        pos = np.asarray(pos).reshape(-1)
        return (pos[:, None] * sz + np.arange(sz)).reshape(-1)

    def _describe(self, byte, name):
        S = self.st.S
        b = int(byte) // S
        return f"block {self.st.first + b}, shared byte {int(byte) % S} ({name})"

    def access(self, pos, sz, need, where, name, tids, atomic=False):
        """A read of elements ``pos`` (flat element positions of the ``sz``-byte view)."""
        st = self.st
        if tids is None:
            lanes = st.lane if need is None else np.flatnonzero(need)
            pos = np.broadcast_to(pos, (st.L,))[lanes]
            tids = st.tid[lanes]
        byts = self._bytes(pos, sz)
        tb = np.repeat(np.asarray(tids).reshape(-1), sz)
        pend = self.pending[byts] > 0
        if pend.any():
            i = int(np.flatnonzero(pend)[0])
            raise where.error(RaceError, f"thread {int(tb[i])} reads {self._describe(byts[i], name)} while an async "
                                         "copy to it is still pending (missing async wait?)")
        if atomic:
            return
        wmin, wmax = self.wmin[byts], self.wmax[byts]
        other = (wmax >= 0) & ~((wmin == tb) & (wmax == tb))
        if other.any():
            i = int(np.flatnonzero(other)[0])
            w = int(wmax[i]) if int(wmax[i]) != int(tb[i]) else int(wmin[i])
            raise where.error(RaceError, f"thread {int(tb[i])} reads {self._describe(byts[i], name)}, which thread "
                                         f"{w} wrote since the last barrier (missing barrier?)")
        np.minimum.at(self.rmin, byts, tb)
        np.maximum.at(self.rmax, byts, tb)

    def write(self, pos, nd, vals, tids, where, name):
        sz = nd.itemsize
        byts = self._bytes(pos, sz)
        new = np.ascontiguousarray(vals).view(np.uint8).reshape(-1)
        tb = np.repeat(np.asarray(tids).reshape(-1), sz)
        if self.pending[byts].any():
            i = int(np.flatnonzero(self.pending[byts])[0])
            raise where.error(RaceError, f"thread {int(tb[i])} writes {self._describe(byts[i], name)} while an "
                                         "async copy to it is still pending")
        order = np.argsort(byts, kind="stable")
        sb, sv = byts[order], new[order]
        clash = (sb[1:] == sb[:-1]) & (sv[1:] != sv[:-1])
        if clash.any():
            i = int(np.flatnonzero(clash)[0])
            raise where.error(RaceError, f"threads {int(tb[order][i])} and {int(tb[order][i + 1])} store different "
                                         f"values to {self._describe(sb[i], name)} in one statement")
        changed = self.st.smem[byts] != new
        if not changed.any():
            return
        byts, tb = byts[changed], tb[changed]
        rmin, rmax, wmin, wmax = self.rmin[byts], self.rmax[byts], self.wmin[byts], self.wmax[byts]
        other_r = (rmax >= 0) & ~((rmin == tb) & (rmax == tb))
        other_w = (wmax >= 0) & ~((wmin == tb) & (wmax == tb))
        bad = other_r | other_w
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            kind = "read" if other_r[i] else "wrote"
            o = (rmax if other_r[i] else wmax)[i]
            o = int(o) if int(o) != int(tb[i]) else int((rmin if other_r[i] else wmin)[i])
            raise where.error(RaceError, f"thread {int(tb[i])} changes {self._describe(byts[i], name)}, which thread "
                                         f"{o} {kind} since the last barrier (missing barrier?)")
        np.minimum.at(self.wmin, byts, tb)
        np.maximum.at(self.wmax, byts, tb)

    def issue(self, pos, sz, where=None, name=None):
        np.add.at(self.pending, self._bytes(pos, sz), 1)

    def overwrite_check(self, pos, sz, where, name, block):
        """A TMA load about to overwrite bytes: no thread may have read or written them since the
        last barrier (the copy is not ordered after those accesses)."""
        byts = self._bytes(pos, sz)
        touched = (self.rmax[byts] >= 0) | (self.wmax[byts] >= 0) | (self.pending[byts] > 0)
        if touched.any():
            i = int(np.flatnonzero(touched)[0])
            raise where.error(RaceError, f"a TMA load overwrites {self._describe(byts[i], name)}, which a thread "
                                         "accessed since the last barrier or a copy still targets (missing barrier "
                                         "or wait?)")

    def retire(self, pos, sz):
        np.subtract.at(self.pending, self._bytes(pos, sz), 1)

    def barrier(self, active_blocks):
        S = self.st.S
        for arr, v in ((self.wmin, self.NONE_MIN), (self.wmax, -1), (self.rmin, self.NONE_MIN), (self.rmax, -1)):
            if active_blocks is None:
                arr.fill(v)
            else:
                arr.reshape(-1, S)[active_blocks] = v
