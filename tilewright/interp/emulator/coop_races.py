"""Shared-memory ordering between the warps of a cooperatively run block (``coop.py``): vector
clocks per warp and per mbarrier (for the bytes its TMA loads land); a read not ordered after the
last write, a write (or an async copy / TMA load) over bytes another warp may still read, and any
access to bytes an async copy or TMA load still targets are ``RaceError``."""

from __future__ import annotations

import numpy as np

from .errors import RaceError


def _loc_text(where) -> str:
    text = f"      {where.text()}"
    if where.loc is not None:
        text += "\n" + "\n".join("    " + line for line in where.loc.excerpt().splitlines())
    return text


class _CoopRaces:
    """Per byte of the block's shared memory: the agent (warp, or an mbarrier's TMA landings) that
    last changed it and that agent's clock then; each warp's clock at its last read; async copies
    and TMA loads in flight to it."""

    def __init__(self, blk, rank: int = 0):
        self.blk = blk
        self.rank = rank  # which block of a cluster (coop.py) this shared memory belongs to
        S = blk.S
        self.wa = np.full(S, -1, np.int32)
        self.wc = np.zeros(S, np.int64)
        self.rc = np.zeros((blk.nwarps, S), np.int64)
        self.pending = np.zeros(S, np.int32)
        self.tma = np.zeros(S, np.int32)
        self.wgmma = np.zeros(S, np.int32)  # reads of wgmmas issued and not yet retired by a wait_group
        self.bulk = np.zeros(S, np.int32)  # reads of TMA stores issued and not yet retired by their wait
        self.unfenced = np.zeros(S, bool)  # changed by warp wa[byte], which has not run fence.proxy.async since

    def bulk_read(self, w, pos, sz, where, name):
        byts = self._bytes(pos, sz)
        self.access(w, pos, sz, where, name)
        bad = self.unfenced[byts]
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise where.error(RaceError, f"a TMA store issued by warp {w} reads shared byte {int(byts[i])} ({name}), "
                                         f"which {self.blk.agent_names[int(self.wa[byts[i]])]} wrote without a "
                                         "fence.proxy.async after it (the async proxy may not see the write)")
        np.add.at(self.bulk, byts, 1)

    def bulk_retire(self, pos, sz):
        np.subtract.at(self.bulk, self._bytes(pos, sz), 1)

    def fence(self, w):
        self.unfenced[self.wa == w] = False

    @staticmethod
    def _bytes(pos, sz):
        pos = np.asarray(pos).reshape(-1)
        return (pos[:, None] * sz + np.arange(sz)).reshape(-1)

    def _in_flight(self, byts, w, verb, where, name):
        for arr, what in ((self.pending, "an async copy"), (self.tma, "a TMA load")):
            hit = arr[byts] > 0
            if hit.any():
                b = int(byts[int(np.flatnonzero(hit)[0])])
                raise where.error(RaceError, f"warp {w} {verb} shared byte {b} ({name}) while {what} to it is still in "
                                             "flight (missing async wait or mbarrier wait?)")

    def _wgmma_reading(self, byts, who, where, name):
        hit = self.wgmma[byts] > 0
        if hit.any():
            b = int(byts[int(np.flatnonzero(hit)[0])])
            raise where.error(RaceError, f"{who} overwrites shared byte {b} ({name}) while a wgmma that reads it is "
                                         "still in flight (not retired by wgmma.wait_group: a ring slot released "
                                         "before the wait that covers its wgmma, or a wait_group count too high?)")

    def wgmma_issue(self, pos, sz):
        np.add.at(self.wgmma, self._bytes(pos, sz), 1)

    def wgmma_retire(self, pos, sz):
        np.subtract.at(self.wgmma, self._bytes(pos, sz), 1)

    def _note(self, reader: int) -> str:
        """What may explain warp ``reader``'s unordered read: waits that returned at once on a fresh
        mbarrier (wrong parity, if they meant to wait for its first phase)."""
        passes = self.blk.initial_passes[reader]
        if not passes:
            return ""
        name, par, where = passes[-1]
        return (f"\nnote: warp {reader}'s wait for parity {par} of mbarrier {name} returned at once on the "
                f"barrier's initial phase: if it meant to wait for the first completion, a wrong-parity wait\n"
                + _loc_text(where))

    def _unordered_writer(self, byts, w, verb, where, name):
        wa = self.wa[byts]
        other = (wa >= 0) & (wa != w)
        if other.any():
            known = self.blk.vc[w][np.where(other, wa, 0)]
            bad = other & (known < self.wc[byts])
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise where.error(RaceError, f"warp {w} {verb} shared byte {int(byts[i])} ({name}), which "
                                             f"{self.blk.agent_names[int(wa[i])]} wrote with nothing ordering the two "
                                             "(missing barrier, or missing/wrong mbarrier wait?)" + self._note(w))

    def _unreleased_readers(self, byts, w, who, where, name):
        vc = self.blk.vc[w]
        for u in range(self.blk.nwarps):
            if u == w:
                continue
            bad = self.rc[u, byts] > vc[u]
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise where.error(RaceError, f"{who} overwrites shared byte {int(byts[i])} ({name}) while warp {u} may "
                                             f"still read it: warp {u}'s read is not ordered before this write (a ring "
                                             "slot reused before its consumer released it: missing or early arrive "
                                             "on the slot's 'empty' barrier, or a missing wait on it?)" + self._note(u))

    def access(self, w, pos, sz, where, name, atomic=False):
        byts = self._bytes(pos, sz)
        self._in_flight(byts, w, "reads", where, name)
        if atomic:
            return
        self._unordered_writer(byts, w, "reads", where, name)
        self.rc[w, byts] = self.blk.vc[w, w]

    def write(self, w, pos, nd, vals, tids, where, name):
        sz = nd.itemsize
        byts = self._bytes(pos, sz)
        new = np.ascontiguousarray(vals).view(np.uint8).reshape(-1)
        self._in_flight(byts, w, "writes", where, name)
        order = np.argsort(byts, kind="stable")
        sb, sv = byts[order], new[order]
        clash = (sb[1:] == sb[:-1]) & (sv[1:] != sv[:-1])
        if clash.any():
            i = int(np.flatnonzero(clash)[0])
            raise where.error(RaceError, f"threads of warp {w} store different values to shared byte {int(sb[i])} "
                                         f"({name}) in one statement")
        changed = self.blk.smems[self.rank][byts] != new
        if not changed.any():
            return
        byts = byts[changed]
        self._wgmma_reading(byts, f"warp {w}", where, name)
        if self.bulk[byts].any():
            i = int(np.flatnonzero(self.bulk[byts])[0])
            raise where.error(RaceError, f"warp {w} changes shared byte {int(byts[i])} ({name}) while a TMA store "
                                         "still reads it (missing cp.async.bulk.wait_group.read by the issuing thread, "
                                         "and a barrier after it, before the buffer is written again)")
        self.unfenced[byts] = True
        self._unordered_writer(byts, w, "changes", where, name)
        self._unreleased_readers(byts, w, f"warp {w}", where, name)
        self.wa[byts] = w
        self.wc[byts] = self.blk.vc[w, w]

    def issue(self, pos, sz):
        np.add.at(self.pending, self._bytes(pos, sz), 1)

    def retire(self, pos, sz):
        np.subtract.at(self.pending, self._bytes(pos, sz), 1)

    def tma_issue(self, w, pos, sz, where, name):
        byts = self._bytes(pos, sz)
        self._in_flight(byts, w, "issues a TMA load over", where, name)
        self._wgmma_reading(byts, f"a TMA load issued by warp {w}", where, name)
        self._unordered_writer(byts, w, "issues a TMA load over", where, name)
        self._unreleased_readers(byts, w, f"a TMA load issued by warp {w}", where, name)
        self.tma[byts] += 1

    def tma_land(self, pos, sz, agent, clock):
        byts = self._bytes(pos, sz)
        self.tma[byts] -= 1
        self.unfenced[byts] = False  # written by the async proxy itself
        self.wa[byts] = agent
        self.wc[byts] = clock


class _WarpRaces:
    """The lockstep race detector's interface (see ``races.py``) for one warp of a cooperative block."""

    def __init__(self, tracker: _CoopRaces, warp: int):
        self.t, self.w = tracker, warp
        self.st = None

    def access(self, pos, sz, need, where, name, tids, atomic=False):
        if tids is None:
            st = self.t.blk.states[self.w]
            lanes = st.lane if need is None else np.flatnonzero(need)
            pos = np.broadcast_to(pos, (st.L,))[lanes]
        self.t.access(self.w, pos, sz, where, name, atomic)

    def write(self, pos, nd, vals, tids, where, name):
        self.t.write(self.w, pos, nd, vals, tids, where, name)

    def issue(self, pos, sz, where=None, name=None):
        if where is not None:  # an async copy: its bytes must be free for this warp when it is issued
            byts = self.t._bytes(pos, sz)
            self.t._unordered_writer(byts, self.w, "issues an async copy over", where, name)
            self.t._unreleased_readers(byts, self.w, f"an async copy issued by warp {self.w}", where, name)
        self.t.issue(pos, sz)

    def retire(self, pos, sz):
        self.t.retire(pos, sz)

    def wgmma_issue(self, pos, sz):
        self.t.wgmma_issue(pos, sz)

    def wgmma_retire(self, pos, sz):
        self.t.wgmma_retire(pos, sz)

    def barrier(self, active_blocks):
        pass  # ordering comes from the vector clocks

    def bulk_read(self, pos, sz, where, name, issuer):
        self.t.bulk_read(self.w, pos, sz, where, name)

    def bulk_retire(self, pos, sz):
        self.t.bulk_retire(pos, sz)

    def fence(self, st):
        self.t.fence(self.w)

    def overwrite_check(self, pos, sz, where, name, block):
        self.t.tma_issue(self.w, pos, sz, where, name)
