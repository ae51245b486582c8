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
        self.wgmma = np.zeros(n, np.int32)  # reads of wgmmas issued and not yet retired by a wait_group
        self.bulk = np.zeros(n, np.int32)  # reads of TMA stores issued and not yet retired by their wait
        self.writer = np.full(n, -1, np.int32)  # last thread that changed the byte
        self.unfenced = np.zeros(n, bool)  # changed by a thread that has not run fence.proxy.async since

    def bulk_read(self, pos, sz, where, name, issuer):
        """A TMA store issued by thread ``issuer`` reads these bytes until its wait retires them."""
        byts = self._bytes(pos, sz)
        self.access(pos, sz, None, where, name, np.full(np.asarray(pos).size, issuer, np.int32))
        bad = self.unfenced[byts]
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise where.error(RaceError, f"a TMA store reads {self._describe(byts[i], name)}, which thread "
                                         f"{int(self.writer[byts[i]])} wrote without a fence.proxy.async after it "
                                         "(the async proxy may not see the write)")
        np.add.at(self.bulk, byts, 1)

    def bulk_retire(self, pos, sz):
        np.subtract.at(self.bulk, self._bytes(pos, sz), 1)

    def fence(self, st):
        hit = np.flatnonzero(self.unfenced)
        if not hit.size:
            return
        active = np.zeros((st.nb, st.T), bool)
        lanes = st.lane if st.mask is None else np.flatnonzero(st.mask)
        active[st.block[lanes], st.tid[lanes]] = True
        clear = active[hit // st.S, self.writer[hit]]
        self.unfenced[hit[clear]] = False

    def wgmma_issue(self, pos, sz):
        np.add.at(self.wgmma, self._bytes(pos, sz), 1)

    def wgmma_retire(self, pos, sz):
        np.subtract.at(self.wgmma, self._bytes(pos, sz), 1)

    def _wgmma_reading(self, byts, who, where, name):
        hit = self.wgmma[byts] > 0
        if hit.any():
            i = int(np.flatnonzero(hit)[0])
            raise where.error(RaceError, f"{who} overwrites {self._describe(byts[i], name)} while a wgmma that reads "
                                         "it is still in flight (missing or too lax wgmma.wait_group?)")

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
        self._wgmma_reading(byts, f"thread {int(tb[0])}", where, name)
        if self.bulk[byts].any():
            i = int(np.flatnonzero(self.bulk[byts])[0])
            raise where.error(RaceError, f"thread {int(tb[i])} changes {self._describe(byts[i], name)} while a TMA "
                                         "store still reads it (missing cp.async.bulk.wait_group.read by the issuing "
                                         "thread, and a barrier after it, before the buffer is written again)")
        self.writer[byts] = tb
        self.unfenced[byts] = True
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
        self._wgmma_reading(byts, "a TMA load", where, name)
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


class _GlobalRaces:
    """Per batch of blocks (lockstep mode): who read and changed each element of the global buffers
    since the last barrier, so that an access by one thread to an element another thread of the
    same block changed (or a change of an element another thread read) is a ``RaceError`` — the
    replicated in-place update ``B[i] = B[i] * 2``, where a second replica may read the first one's
    result on a GPU.

    Accesses are recorded by lane (``block * T + thread``, unique in the batch) and only accesses of
    one block are compared: blocks are not ordered by barriers, but kernels order them by other
    means (atomics, flags), which this detector does not model.  An element touched by lanes of two
    blocks since the last barrier is left alone.  Buffers of more than ``MAX_ELEMENTS`` elements are
    not tracked (the bookkeeping is four int32 arrays per buffer, made once per run and cleared
    where touched when a batch starts)."""

    MAX_ELEMENTS = 1 << 22
    NONE_MIN = np.iinfo(np.int32).max

    def __init__(self):
        self.st = None
        self.bufs: dict = {}

    def begin(self, st):
        """A new batch of blocks: nothing it does is ordered with the last batch's accesses, which
        were other blocks'."""
        self.barrier(None)
        self.st = st

    def _of(self, gi):
        rec = self.bufs.get(gi)
        if rec is None:
            n = self.st.glob[gi].size
            if n > self.MAX_ELEMENTS:
                rec = False
            else:
                rec = [np.full(n, self.NONE_MIN, np.int32), np.full(n, -1, np.int32),
                       np.full(n, self.NONE_MIN, np.int32), np.full(n, -1, np.int32), [], 0]
            self.bufs[gi] = rec
        return rec

    def _others(self, lo, hi, lanes):
        """Which accesses were made since the last barrier by a thread other than ``lanes`` of the
        same block (``lo``/``hi``: smallest/largest lane that made them)."""
        T = self.st.T
        return (hi >= 0) & (lo // T == lanes // T) & (hi // T == lanes // T) & ~((lo == lanes) & (hi == lanes))

    def _record(self, rec, lo, hi, pos, lanes):
        np.minimum.at(rec[lo], pos, lanes)
        np.maximum.at(rec[hi], pos, lanes)
        n = rec[0].size
        if rec[5] < n:  # past n positions the next barrier clears everything: stop listing them
            rec[4].append(pos)
            rec[5] += pos.size
            if rec[5] >= n:
                rec[4].clear()

    def _who(self, lanes_i, lo_i, hi_i) -> int:
        o = int(hi_i) if int(hi_i) != int(lanes_i) else int(lo_i)
        return o % self.st.T

    def read(self, gi, pos, lanes, where, name):
        """Lanes ``lanes`` read elements ``pos`` (same shape, or ``pos`` [w, n] for ``lanes`` [n])."""
        rec = self._of(gi)
        if rec is False:
            return
        pos = np.asarray(pos)
        lanes = np.broadcast_to(np.asarray(lanes, np.int32), pos.shape).reshape(-1)
        pos = pos.reshape(-1)
        wmin, wmax = rec[0][pos], rec[1][pos]
        bad = self._others(wmin, wmax, lanes)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise where.error(RaceError, f"{self.st.where(int(lanes[i]))} reads {name}[{int(pos[i])}], which thread "
                                         f"{self._who(lanes[i], wmin[i], wmax[i])} of its block changed since the "
                                         "last barrier (missing barrier, or a store done by several threads?)")
        self._record(rec, 2, 3, pos, lanes)

    def write(self, gi, pos, old, new, lanes, where, name):
        """Lanes ``lanes`` store ``new`` over ``old`` at ``pos`` (all the same shape); stores that
        leave an element's bits unchanged are benign and ignored."""
        rec = self._of(gi)
        if rec is False:
            return
        pos = np.asarray(pos).reshape(-1)
        lanes = np.broadcast_to(np.asarray(lanes, np.int32), np.shape(old)).reshape(-1)
        old = np.ascontiguousarray(old).reshape(-1)
        new = np.ascontiguousarray(new, dtype=old.dtype).reshape(-1)
        changed = old.view(np.uint8).reshape(len(old), -1) != new.view(np.uint8).reshape(len(new), -1)
        changed = changed.any(axis=1)
        if not changed.any():
            return
        pos, lanes = pos[changed], lanes[changed]
        rmin, rmax, wmin, wmax = rec[2][pos], rec[3][pos], rec[0][pos], rec[1][pos]
        other_r, other_w = self._others(rmin, rmax, lanes), self._others(wmin, wmax, lanes)
        bad = other_r | other_w
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            kind = "read" if other_r[i] else "changed"
            lo, hi = (rmin[i], rmax[i]) if other_r[i] else (wmin[i], wmax[i])
            raise where.error(RaceError, f"{self.st.where(int(lanes[i]))} changes {name}[{int(pos[i])}], which thread "
                                         f"{self._who(lanes[i], lo, hi)} of its block {kind} since the last barrier "
                                         "(missing barrier, or a store done by several threads?)")
        self._record(rec, 0, 1, pos, lanes)

    def barrier(self, active_blocks):
        # every element touched since the last barrier is forgotten (also those of blocks that did
        # not take part: fewer reports, never a false one)
        for rec in self.bufs.values():
            if rec is False or not rec[5]:
                continue
            if rec[5] >= rec[0].size:
                for arr, v in zip(rec[:4], (self.NONE_MIN, -1, self.NONE_MIN, -1)):
                    arr.fill(v)
            else:
                touched = np.concatenate(rec[4])
                for arr, v in zip(rec[:4], (self.NONE_MIN, -1, self.NONE_MIN, -1)):
                    arr[touched] = v
            rec[4].clear()
            rec[5] = 0
