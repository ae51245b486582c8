"""Compiling TMA stores (shared -> global bulk tensor copies), their commit and their read-wait.

A ``TmaStore`` is executed by its issuing thread only (``issuer``; as the CUDA printer emits it).  It
reads its shared box when issued — a read by that thread, so the race detectors check that the
writers of the box are ordered before it (barrier) and fenced for the async proxy
(``FenceProxyAsync``) — and writes the elements inside the tensor to global memory.  The box's
shared bytes stay *being read* until the issuer's ``TmaStoreWait`` retires the group: a write to
them before that is a ``RaceError``, and a block that ends with stores not waited for is an error
(the GPU would release the shared memory under the copy).  Groups are per issuing thread:
``TmaStoreCommit`` closes the open one, ``TmaStoreWait(n)`` retires all but the newest ``n``.
"""

from __future__ import annotations

import numpy as np

from ...ir import expr as E
from ...ir import thread as th
from .errors import DivergenceError, EmulatorError, EmulatorOutOfBoundsError, MisalignedAccessError
from .support import _Where


class BulkGroups:
    """One block's TMA-store groups of one issuing thread: the open group and the committed ones,
    each a list of (shared positions, element size, buffer name)."""

    def __init__(self):
        self.open: list = []
        self.committed: list = []

    def pending(self) -> bool:
        return bool(self.open or any(self.committed))


class TmaStoreCompiler:
    """Mixin of ``_Program``: TMA stores."""

    def _issuer_lanes(self, st, issuer: int, where):
        """Per block of the batch (cooperative: this warp), the lane of the issuing thread, or None
        when this state does not hold it (another warp)."""
        if st.coop is not None:
            if issuer // st.L != st.warp:
                return None
            lanes = np.array([issuer % st.L])
        else:
            lanes = np.arange(st.nb) * st.T + issuer
        if st.mask is not None and not np.asarray(st.mask)[lanes].all():
            raise where.error(DivergenceError, f"a TMA store (group) issued by thread {issuer}, which does not run "
                                               "this statement here (control flow skips it)")
        return lanes

    def _bulk(self, st, j: int) -> BulkGroups:
        g = st.bulk.get(j)
        if g is None:
            g = st.bulk[j] = BulkGroups()
        return g

    def tma_store(self, s: th.TmaStore):
        where = _Where(s)
        dst = s.tmap.param
        if s.src.scope != "shared" or dst.scope != "global":
            raise where.error(EmulatorError, "TMA stores go from shared memory to a global tensor")
        if s.src.dtype != dst.dtype:
            raise where.error(EmulatorError, f"TMA store between different dtypes ({s.src.dtype} -> {dst.dtype})")
        gi = self._global_of(dst, where)
        box = tuple(int(x) for x in s.tmap.box)
        if len(box) != len(s.coords) or len(box) != dst.ndim or not all(0 < x <= 256 for x in box):
            raise where.error(EmulatorError, f"TMA box {box} does not fit tensor {dst.name} of rank {dst.ndim}")
        lay = s.layout
        rows = int(np.prod(box[:-1]))
        if tuple(lay.shape) != (rows, box[-1]):
            raise where.error(EmulatorError, f"TMA box {box} read with a layout of shape {lay.shape}")
        grid = np.indices(box).reshape(len(box), -1)
        r, c = np.divmod(np.arange(rows * box[-1]), box[-1])
        src_off = np.asarray(lay.offset((r, c)), np.int64)
        fcoords = [self.cexpr(E.as_expr(x), where) for x in s.coords]
        fshape = [self.cexpr(E.as_expr(x), where) for x in dst.shape]
        fstrides = [self.cexpr(E.as_expr(x), where) for x in dst.strides]
        fsi = self.cexpr(s.src_index, where)
        splace, soff, snd = self._shared_of(s.src, where)
        nsrc = s.src.shape[0]
        issuer = int(s.issuer)
        period = max(128, 8 * lay.tma_swizzle)

        def at(f, st, lane):
            v = f(st, st.mask)
            return int(v[lane]) if isinstance(v, np.ndarray) and v.ndim else int(v)

        def store(st):
            lanes = self._issuer_lanes(st, issuer, where)
            if lanes is None:
                return
            for lane in lanes:
                j = int(st.block[lane])
                si = at(fsi, st, lane)
                if (soff + si * snd.itemsize) % period:
                    raise where.error(MisalignedAccessError, f"TMA store source {s.src.name}[{si}] is not "
                                                             f"{period}-byte aligned (its swizzle period)")
                if si < 0 or si + int(src_off.max()) >= nsrc:
                    raise where.error(EmulatorOutOfBoundsError, f"TMA box {box} at {s.src.name}[{si}] overruns its "
                                                                f"{nsrc} elements")
                pos = st.sbase[splace][lane if st.coop is None else 0] + si + src_off
                if st.races is not None:
                    st.races.bulk_read(pos, snd.itemsize, where, s.src.name, issuer)
                vals = st.sviews[snd][pos]
                g = [at(fcoords[d], st, lane) + grid[d] for d in range(len(box))]
                inside = np.ones(grid.shape[1], bool)
                flat = np.zeros(grid.shape[1], np.int64)
                for d in range(len(box)):
                    inside &= (g[d] >= 0) & (g[d] < at(fshape[d], st, lane))
                    flat += g[d] * at(fstrides[d], st, lane)
                st.glob[gi][flat[inside]] = vals[inside]
                self._bulk(st, j).open.append((pos, snd.itemsize))

        return store

    def tma_store_commit(self, s: th.TmaStoreCommit):
        where = _Where(s)
        issuer = int(s.issuer)

        def commit(st):
            lanes = self._issuer_lanes(st, issuer, where)
            if lanes is None:
                return
            for lane in lanes:
                g = self._bulk(st, int(st.block[lane]))
                g.committed.append(g.open)
                g.open = []

        return commit

    def tma_store_wait(self, s: th.TmaStoreWait):
        where = _Where(s)
        issuer, keep = int(s.issuer), int(s.pending)

        def wait(st):
            lanes = self._issuer_lanes(st, issuer, where)
            if lanes is None:
                return
            for lane in lanes:
                g = self._bulk(st, int(st.block[lane]))
                while len(g.committed) > keep:
                    for pos, sz in g.committed.pop(0):
                        if st.races is not None:
                            st.races.bulk_retire(pos, sz)

        return wait


def check_stores_waited(st, where_text: str) -> None:
    """At the end of a block: every TMA store's shared source must have been waited for."""
    for j, g in st.bulk.items():
        if g.pending():
            raise EmulatorError(f"{where_text(j)} ends while a TMA store may still read its shared source: the issuing "
                                "thread must run cp.async.bulk.commit_group and cp.async.bulk.wait_group.read before "
                                "the block exits")

