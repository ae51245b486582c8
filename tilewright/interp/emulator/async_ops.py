"""Compiling asynchronous copies (cp.async groups), TMA loads and mbarriers (init, wait, arrive,
expect-tx)."""

from __future__ import annotations

import numpy as np

from ...ir import dtype as dt
from ...ir import expr as E
from ...ir import thread as th
from .errors import DivergenceError, EmulatorError, EmulatorOutOfBoundsError, MisalignedAccessError
from .support import _and, _rows, _Where


class _AsyncGroup(list):
    """One committed group of async copies, with the lanes that committed it (None: all)."""

    mask = None


class AsyncCompiler:
    """Mixin of ``_Program``: async copies, TMA and mbarriers."""

    def async_copy(self, s: th.AsyncCopy):
        where = _Where(s)
        if s.dst.scope != "shared" or s.src.scope != "global":
            raise where.error(EmulatorError, "async copies go from global to shared memory")
        nd = dt.to_numpy(s.dst.dtype)
        if s.src.dtype != s.dst.dtype:
            raise where.error(EmulatorError, f"async copy between different dtypes ({s.src.dtype} -> {s.dst.dtype})")
        if s.nbytes % nd.itemsize:
            raise where.error(EmulatorError, f"async copy of {s.nbytes} bytes is not whole {s.dst.dtype} elements")
        k = s.nbytes // nd.itemsize
        src_mem, dst_mem = self._mem(s.src, where), self._mem(s.dst, where)
        fp = self.cexpr(s.pred, where) if s.pred is not None else None
        fsi = self.cexpr(s.src_index, where)
        fdi = self.cexpr(s.dst_index, where)
        what_src = f"async copy from global {s.src.name}"
        what_dst = f"async copy to shared {s.dst.name}"

        def acopy(st):
            m = st.mask
            p = fp(st, m) if fp is not None else None
            act = m if p is None else _and(m, p)  # lanes that read the source; the others zero-fill
            if act is not None and not isinstance(act, np.ndarray):
                act = None if act else np.zeros(st.L, bool)
            if act is not None and act.any():
                vals = src_mem.read_rows(st, fsi(st, act), k, act, what_src, where, s.nbytes)
                vals = _rows(vals, st.L, nd) if isinstance(vals, list) else vals
            elif act is None:
                vals = src_mem.read_rows(st, fsi(st, None), k, None, what_src, where, s.nbytes)
                vals = _rows(vals, st.L, nd) if isinstance(vals, list) else vals
            else:
                vals = np.zeros((k, st.L), nd)
            if act is not None:
                vals = np.where(act, vals, nd.type(0))
            pos, lanes = dst_mem.positions(st, fdi(st, m), k, m, what_dst, where, s.nbytes)
            vals = vals[:, lanes]
            if st.races is not None:
                st.races.issue(pos, nd.itemsize, where, s.dst.name)
            st.async_open.append((dst_mem, pos, vals, lanes, where))

        return acopy

    def async_commit(self, s: th.AsyncCommit):
        def commit(st):
            # a thread partition commits its own groups: remember which lanes did (see wait)
            group = _AsyncGroup(st.async_open)
            group.mask = None if st.mask is None else np.array(st.mask, dtype=bool)
            st.async_groups.append(group)
            st.async_open = []

        return commit

    def async_wait(self, s: th.AsyncWait):
        where = _Where(s)
        keep = int(s.pending)

        def wait(st):
            if st.mask is not None:
                for g in st.async_groups[:max(len(st.async_groups) - keep, 0)]:
                    if g.mask is None or not np.array_equal(g.mask, st.mask):
                        raise where.error(DivergenceError, "async wait under thread-dependent control flow for "
                                                           "copies other threads committed is not supported by the "
                                                           "emulator")
            while len(st.async_groups) > keep:
                for dst_mem, pos, vals, lanes, w in st.async_groups.pop(0):
                    dst_mem.land(st, pos, vals, lanes, w)

        return wait

    # ---------------------------------------------------------------- TMA and mbarriers
    # Per block and mbarrier: the arrivals a phase expects, the arrivals so far, the number of
    # completed phases, and the TMA writes not yet landed (each tagged with its phase).  A TMA load
    # reads global memory when issued; its bytes land in shared memory at the first wait that
    # observes its phase complete, so a missing or wrong-parity wait reads stale data, and a wait
    # on a phase no load will complete is reported instead of hanging.

    def _block_values(self, st, f):
        v = f(st, None)
        return np.broadcast_to(v, (st.L,))[np.arange(st.nb) * st.T].astype(np.int64)

    def _first_active(self, st, f):
        """The value of ``f`` at the first active lane (a warp-level operand in cooperative mode)."""
        v = f(st, st.mask)
        if not isinstance(v, np.ndarray):
            return v
        return v[0 if st.mask is None else int(np.flatnonzero(st.mask)[0])]

    def mbarrier_init(self, s: th.MbarrierInit):
        where = _Where(s)
        place, off, _ = self._shared_of(s.bar, where)
        count = int(s.count)

        def init(st):
            if st.coop is not None:
                st.coop.mbar_init(st, place, s.bar.name, int(s.bar.shape[0]), count, where)
                return
            if st.mask is not None:
                raise where.error(DivergenceError, "mbarrier init under thread-dependent control flow")
            for i in range(int(s.bar.shape[0])):
                st.mbar[(place, i)] = {"count": count, "arrived": np.zeros(st.nb, np.int64),
                                       "phase": np.zeros(st.nb, np.int64), "pending": []}

        return init

    def _mbar(self, st, place, index, bar, where):
        state = st.mbar.get((place, int(index)))
        if state is None:
            raise where.error(EmulatorError, f"mbarrier {bar.name}[{int(index)}] is used before MbarrierInit")
        return state

    def tma_load(self, s: th.TmaLoad):
        where = _Where(s)
        if s.dst.scope != "shared" or s.tmap.param.scope != "global":
            raise where.error(EmulatorError, "TMA loads go from a global tensor to shared memory")
        src = s.tmap.param
        gi = self._global_of(src, where)
        nd = dt.to_numpy(src.dtype)
        if s.dst.dtype != src.dtype:
            raise where.error(EmulatorError, f"TMA load between different dtypes ({src.dtype} -> {s.dst.dtype})")
        box = tuple(int(x) for x in s.tmap.box)
        if len(box) != len(s.coords) or len(box) != src.ndim or not all(0 < x <= 256 for x in box):
            raise where.error(EmulatorError, f"TMA box {box} does not fit tensor {src.name} of rank {src.ndim}")
        lay = s.layout
        rows = int(np.prod(box[:-1]))
        if tuple(lay.shape) != (rows, box[-1]):
            raise where.error(EmulatorError, f"TMA box {box} written with a layout of shape {lay.shape}")
        grid = np.indices(box).reshape(len(box), -1)  # box element -> coordinate offsets per dim
        r, c = np.divmod(np.arange(rows * box[-1]), box[-1])
        dst_off = np.asarray(lay.offset((r, c)), np.int64)  # box element -> element offset in shared
        nbytes = rows * box[-1] * nd.itemsize
        fcoords = [self.cexpr(E.as_expr(x), where) for x in s.coords]
        fshape = [self.cexpr(E.as_expr(x), where) for x in src.shape]
        fstrides = [self.cexpr(E.as_expr(x), where) for x in src.strides]
        fdi, fbi = self.cexpr(s.dst_index, where), self.cexpr(s.bar_index, where)
        dplace, doff, dnd = self._shared_of(s.dst, where)
        bplace, _, _ = self._shared_of(s.bar, where)
        ndst = s.dst.shape[0]

        def read_box(st, j, coords, shape, strides, di):
            """Block ``j``'s box: its shared positions and the values read from global memory."""
            # the hardware swizzles by address bits with a period of 8 rows of the swizzle width;
            # a box starting elsewhere would not land in the layout the kernel reads
            period = max(128, 8 * lay.tma_swizzle)
            if (doff + int(di[j]) * nd.itemsize) % period:
                raise where.error(MisalignedAccessError, f"TMA destination {s.dst.name}[{int(di[j])}] is not "
                                                         f"{period}-byte aligned (its swizzle period)")
            if int(di[j]) < 0 or int(di[j]) + int(dst_off.max()) >= ndst:
                raise where.error(EmulatorOutOfBoundsError, f"TMA box {box} at {s.dst.name}[{int(di[j])}] "
                                                            f"overruns its {ndst} elements")
            g = [coords[d][j] + grid[d] for d in range(len(box))]
            inside = np.ones(grid.shape[1], bool)
            flat = np.zeros(grid.shape[1], np.int64)
            for d in range(len(box)):
                inside &= (g[d] >= 0) & (g[d] < shape[d][j])
                flat += g[d] * strides[d][j]
            vals = np.zeros(grid.shape[1], nd)
            vals[inside] = st.glob[gi][flat[inside]]
            return st.sbase[dplace][j * st.T if st.coop is None else 0] + int(di[j]) + dst_off, vals

        def tma_coop(st):
            if st.warp != s.issuer_warp:  # printed as issued by that warp's elected lane
                st.coop.mbar((bplace, int(self._first_active(st, fbi))), where, st.rank).skipped_tma += 1
                return
            if st.mask is not None and not st.mask.all():
                raise where.error(DivergenceError, f"a TMA load is issued by an elect.sync lane of warp "
                                                   f"{s.issuer_warp}, which needs the whole warp; here control flow "
                                                   "splits it")
            vals_of = [np.atleast_1d(self._first_active(st, f)) for f in fcoords], \
                [np.atleast_1d(self._first_active(st, f)) for f in fshape], \
                [np.atleast_1d(self._first_active(st, f)) for f in fstrides]
            di = np.atleast_1d(self._first_active(st, fdi))
            pos, vals = read_box(st, 0, *vals_of, di)
            st.coop.tma_issue(st, (bplace, int(self._first_active(st, fbi))), pos, vals, where, s.dst.name,
                              s.expect_bytes, s.arrives, s.multicast)

        def tma(st):
            if st.coop is not None:
                return tma_coop(st)
            if st.mask is not None:
                raise where.error(DivergenceError, "TMA load under thread-dependent control flow")
            if s.multicast is not None:
                raise where.error(EmulatorError, "a multicast TMA load outside cooperative emulation (emulator bug)")
            coords = [self._block_values(st, f) for f in fcoords]
            shape = [self._block_values(st, f) for f in fshape]
            strides = [self._block_values(st, f) for f in fstrides]
            di, bi = self._block_values(st, fdi), self._block_values(st, fbi)
            for j in range(st.nb):
                pos, vals = read_box(st, j, coords, shape, strides, di)
                state = self._mbar(st, bplace, bi[j], s.bar, where)
                if st.races is not None:
                    st.races.overwrite_check(pos, dnd.itemsize, where, s.dst.name, j)
                    st.races.issue(pos, dnd.itemsize)
                if s.expect_bytes == 0:  # a later box of a T.tma_copy: the phase its first box arrived in
                    state["pending"].append((j, int(state.setdefault("tx_phase", {}).get(j, state["phase"][j])), pos,
                                             vals, nbytes))
                    continue
                state.setdefault("tx_phase", {})[j] = int(state["phase"][j])
                state["pending"].append((j, int(state["phase"][j]), pos, vals, nbytes))
                if not s.arrives:  # T.tma_copy: the program arrives (its MbarrierArrive runs cooperatively)
                    continue
                state["arrived"][j] += 1
                if state["arrived"][j] > state["count"]:
                    raise where.error(EmulatorError, f"mbarrier {s.bar.name}[{int(bi[j])}] gets more arrivals than "
                                                     f"the {state['count']} it was initialised for")
                if state["arrived"][j] == state["count"]:
                    state["arrived"][j] = 0
                    state["phase"][j] += 1

        return tma

    def mbarrier_wait(self, s: th.MbarrierWait):
        where = _Where(s)
        fi, fp = self.cexpr(s.index, where), self.cexpr(s.parity, where)
        fph = None if s.phase is None else self.cexpr(s.phase, where)
        bplace, _, _ = self._shared_of(s.bar, where)

        def wait(st):
            if st.coop is not None:
                st.coop.mbar_wait(st, (bplace, int(self._first_active(st, fi))), int(self._first_active(st, fp)),
                                  where, None if fph is None else int(self._first_active(st, fph)))
                return
            if st.mask is not None:
                raise where.error(DivergenceError, "mbarrier wait under thread-dependent control flow is not "
                                                   "supported by the emulator")
            idx, par = self._block_values(st, fi), self._block_values(st, fp)
            for j in range(st.nb):
                state = self._mbar(st, bplace, idx[j], s.bar, where)
                done = int(state["phase"][j])
                # the hardware returns once the phase of this parity has completed: the current
                # phase (index `done`) has parity done % 2; waiting on it waits for loads to come
                if done % 2 == int(par[j]) % 2:
                    raise where.error(EmulatorError, f"waiting on phase parity {int(par[j])} of mbarrier "
                                                     f"{s.bar.name}[{int(idx[j])}] in block {st.first + j}, whose "
                                                     f"phase {done} has {int(state['arrived'][j])} of "
                                                     f"{state['count']} arrivals: the kernel would hang")
                keep = []
                for entry in state["pending"]:
                    b, phase, pos, vals, _ = entry
                    if b == j and phase < done:
                        if st.races is not None:
                            st.races.retire(pos, vals.dtype.itemsize)
                        st.sviews[vals.dtype][pos] = vals
                    else:
                        keep.append(entry)
                state["pending"] = keep

        return wait

