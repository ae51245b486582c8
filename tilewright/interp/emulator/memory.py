"""Global and shared memory buffers for element and vector accesses: bounds, alignment and race
checks around every access."""

from __future__ import annotations

import numpy as np

from ...ir import dtype as dt
from .errors import RaceError
from .support import _check_align, _check_range, _fix, _uint_of

# memory buffers (global / shared) for element and vector accesses


class _GlobalMem:
    def __init__(self, b, gi):
        self.b, self.gi = b, gi
        self.nd = dt.to_numpy(b.dtype)

    def backing(self, st):
        return st.glob[self.gi]

    def positions(self, st, idx, w, need, what, where, nbytes):
        """Flat positions of ``w`` consecutive elements (``w`` None: one) at ``idx`` for the lanes in
        ``need``; returns (positions [w, n] or [n], lane indices)."""
        arr = st.glob[self.gi]
        span = 1 if w is None else w
        lanes = st.lane if need is None else np.flatnonzero(need)
        idx = np.broadcast_to(idx, (st.L,))[lanes]
        if len(lanes):
            _check_range(st, idx, 0, arr.size - span, None, what, where)
            _check_align(st, idx * self.nd.itemsize, nbytes, None, what, where)
        if w is None:
            return idx, lanes
        return idx[None, :] + np.arange(w)[:, None], lanes

    def read_rows(self, st, idx, w, need, what, where, nbytes):
        arr = st.glob[self.gi]
        if not isinstance(idx, np.ndarray):
            if need is None or need.any():
                _check_range(st, idx, 0, arr.size - w, need, what, where)
                _check_align(st, idx * self.nd.itemsize, nbytes, need, what, where)
                if st.graces is not None:
                    self.track_read(st, np.full(st.L, int(idx)), w, need, where)
                return [arr[int(idx) + j] for j in range(w)]
            return [self.nd.type(0)] * w
        idx = _check_range(st, idx, 0, arr.size - w, need, what, where)
        _check_align(st, idx * self.nd.itemsize, nbytes, need, what, where)
        if st.graces is not None:
            self.track_read(st, idx, w, need, where)
        return arr[idx[None, :] + np.arange(w)[:, None]]

    def track_read(self, st, idx, w, need, where):
        """Record a read of ``w`` (None: one) elements at ``idx`` by the lanes in ``need``."""
        lanes = st.lane if need is None else np.flatnonzero(need)
        if not len(lanes):
            return
        pos = np.broadcast_to(idx, (st.L,))[lanes]
        if w is not None:
            pos = pos[None, :] + np.arange(w)[:, None]
        st.graces.read(self.gi, pos, lanes, where, self.b.name)

    def write(self, st, idx, vals, need, w, what, where, nbytes=None):
        arr = st.glob[self.gi]
        pos, lanes = self.positions(st, idx, w, need, what, where, nbytes or self.nd.itemsize)
        if not len(lanes):
            return
        vals = np.broadcast_to(vals, (st.L,) if w is None else (w, st.L))[..., lanes]
        if st.graces is not None or st.races is not None:
            _check_duplicate_stores(st, pos, vals, lanes, where, self.b.name)
        if st.graces is not None:
            st.graces.write(self.gi, pos, arr[pos], _fix(vals, self.nd), np.broadcast_to(lanes, pos.shape), where,
                            self.b.name)
        arr[pos] = vals


class _SharedMem:
    def __init__(self, b, place, off, nd):
        self.b, self.place, self.off, self.nd = b, place, off, nd
        self.n = b.shape[0]

    def backing(self, st):
        return st.sviews[self.nd]

    def positions(self, st, idx, w, need, what, where, nbytes):
        span = 1 if w is None else w
        lanes = st.lane if need is None else np.flatnonzero(need)
        idx = np.broadcast_to(idx, (st.L,))[lanes]
        if len(lanes):
            _check_range(st, idx, 0, self.n - span, None, what, where)
            _check_align(st, self.off + idx * self.nd.itemsize, nbytes, None, what, where)
        pos = st.sbase[self.place][lanes] + idx
        if w is None:
            return pos, lanes
        return pos[None, :] + np.arange(w)[:, None], lanes

    def read_rows(self, st, idx, w, need, what, where, nbytes):
        idx = _check_range(st, np.broadcast_to(idx, (st.L,)), 0, self.n - w, need, what, where)
        _check_align(st, self.off + idx * self.nd.itemsize, nbytes, need, what, where)
        pos = (st.sbase[self.place] + idx)[None, :] + np.arange(w)[:, None]
        if st.banks is not None:
            lanes = st.lane if need is None else np.flatnonzero(need)
            st.banks.record(st, where, self.b.name, pos[0, lanes], self.nd.itemsize, w * self.nd.itemsize, lanes,
                            "read")
        if st.races is not None:
            lanes = st.lane if need is None else np.flatnonzero(need)
            st.races.access(pos[:, lanes].reshape(-1), self.nd.itemsize, None, where, self.b.name,
                            np.tile(st.tid[lanes], w))
        return st.sviews[self.nd][pos]

    def write(self, st, idx, vals, need, w, what, where, nbytes=None):
        pos, lanes = self.positions(st, idx, w, need, what, where, nbytes or self.nd.itemsize)
        if not len(lanes):
            return
        vals = np.broadcast_to(_fix(vals, self.nd), (st.L,) if w is None else (w, st.L))[..., lanes]
        view = st.sviews[self.nd]
        if st.banks is not None:
            st.banks.record(st, where, self.b.name, pos if w is None else pos[0], self.nd.itemsize,
                            (1 if w is None else w) * self.nd.itemsize, lanes, "write")
        if st.races is not None:
            tids = np.broadcast_to(st.tid[lanes], pos.shape)
            st.races.write(pos.reshape(-1), self.nd, np.ascontiguousarray(vals).reshape(-1), tids.reshape(-1),
                           where, self.b.name)
        view[pos] = vals

    def land(self, st, pos, vals, lanes, where):
        """Complete an async copy issued earlier (``pos`` [k, n], ``vals`` [k, n])."""
        if st.races is not None:
            tids = np.broadcast_to(st.tid[lanes], pos.shape)
            st.races.retire(pos, self.nd.itemsize)
            st.races.write(pos.reshape(-1), self.nd, np.ascontiguousarray(vals).reshape(-1), tids.reshape(-1),
                           where, self.b.name)
        st.sviews[self.nd][pos] = vals


def _check_duplicate_stores(st, pos, vals, lanes, where, name):
    flat_pos = np.asarray(pos).reshape(-1)
    flat_val = np.ascontiguousarray(vals).reshape(-1)
    order = np.argsort(flat_pos, kind="stable")
    p, v = flat_pos[order], flat_val[order].view(_uint_of(flat_val.dtype))
    clash = (p[1:] == p[:-1]) & (v[1:] != v[:-1])
    if clash.any():
        i = int(np.flatnonzero(clash)[0])
        raise where.error(RaceError, f"threads store different values to {name}[{int(p[i])}] in one statement")


