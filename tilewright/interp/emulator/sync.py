"""Compiling the warp-level synchronisation statements: mbarrier arrive / expect-tx, named barriers,
``setmaxnreg`` and async-proxy fences.  They run only cooperatively (``coop.py``): a kernel that
contains one is executed warp by warp (see ``needs_cooperation``)."""

from __future__ import annotations

import numpy as np

from ...ir import thread as th
from .errors import DivergenceError, EmulatorError
from .support import _Where

# the statements only the cooperative mode executes
COOPERATIVE_ONLY = (th.MbarrierArrive, th.MbarrierExpectTx, th.NamedBarrier, th.SetMaxNReg, th.ClusterBarrier)


class SyncCompiler:
    """Mixin of ``_Program``: warp-level synchronisation."""

    def _coop_only(self, st, where, what: str):
        if st.coop is None:  # run_thread_kernel routes every kernel containing these to coop.py
            raise where.error(EmulatorError, f"{what} reached outside cooperative emulation (emulator bug)")

    def _elect(self, st, where, what: str) -> None:
        """``elect.sync`` (how the printers pick the elected lane) needs every lane of the warp."""
        if st.mask is not None and not st.mask.all():
            raise where.error(DivergenceError, f"{what} elects one lane with elect.sync, which needs the whole warp; "
                                               "here control flow splits it")

    def _active(self, st) -> int:
        return st.L if st.mask is None else int(np.count_nonzero(st.mask))

    def mbarrier_arrive(self, s: th.MbarrierArrive):
        where = _Where(s)
        fi = self.cexpr(s.index, where)
        ftx = self.cexpr(s.expect_tx, where) if s.expect_tx is not None else None
        place = self._shared_of(s.bar, where)[0]
        fcta = self.cexpr(s.cta, where) if s.cta is not None else None
        count = int(s.count)
        if count < 1:
            raise where.error(EmulatorError, f"mbarrier arrive with count {count}: it must be at least 1")

        def arrive(st):
            self._coop_only(st, where, "mbarrier arrive")
            if s.elected:
                self._elect(st, where, "an elected mbarrier arrive")
            threads = 1 if s.elected else self._active(st)
            tx = 0 if ftx is None else int(self._first_active(st, ftx)) * threads
            rank = None
            if fcta is not None:  # another block's barrier: every executing lane must name the same block
                ranks = np.broadcast_to(fcta(st, st.mask), (st.L,))
                ranks = np.unique(ranks if st.mask is None else ranks[st.mask])
                if len(ranks) != 1:
                    raise where.error(EmulatorError, "the threads of one warp arrive on the mbarriers of different "
                                                     f"blocks of the cluster ({', '.join(map(str, ranks))}) in one "
                                                     "statement: the emulator supports one block per warp")
                rank = int(ranks[0])
            st.coop.mbar_arrive(st, (place, int(self._first_active(st, fi))), threads * count, tx, where, rank)

        return arrive

    def cluster_barrier(self, s: th.ClusterBarrier):
        where = _Where(s)

        def cluster_barrier(st):
            self._coop_only(st, where, "cluster barrier")
            st.coop.cluster_barrier(st, bool(s.arrive), bool(s.wait), where)

        return cluster_barrier

    def mbarrier_expect_tx(self, s: th.MbarrierExpectTx):
        where = _Where(s)
        fi, fn = self.cexpr(s.index, where), self.cexpr(s.nbytes, where)
        place = self._shared_of(s.bar, where)[0]

        def expect_tx(st):
            self._coop_only(st, where, "mbarrier expect-tx")
            self._elect(st, where, "mbarrier expect-tx")
            st.coop.mbar_expect_tx(st, (place, int(self._first_active(st, fi))), int(self._first_active(st, fn)),
                                   where)

        return expect_tx

    def named_barrier(self, s: th.NamedBarrier):
        where = _Where(s)
        fid = self.cexpr(s.barrier_id, where)
        count, arrive_only = int(s.count), bool(s.arrive_only)

        def named(st):
            self._coop_only(st, where, "named barrier")
            bid = int(self._first_active(st, fid))
            if not 0 <= bid <= 15:
                raise where.error(EmulatorError, f"named barrier id {bid}: the hardware has barriers 0..15")
            st.coop.barrier(st, bid, count, arrive_only, where)

        return named

    def set_max_nreg(self, s: th.SetMaxNReg):
        where = _Where(s)
        count = int(s.count)
        if not 24 <= count <= 256 or count % 8:
            raise where.error(EmulatorError, f"setmaxnreg {count}: the register count must be a multiple of 8 "
                                             "in 24..256")
        target = self.k.target
        if target is not None and getattr(target, "vendor", "nvidia") != "nvidia":
            raise where.error(EmulatorError, f"setmaxnreg has no meaning on {target.arch} (NVIDIA sm_90a only)")
        wg = 128

        def setmaxnreg(st):
            self._coop_only(st, where, "setmaxnreg")
            if st.T % wg:
                raise where.error(EmulatorError, f"setmaxnreg is executed by whole warpgroups of {wg} threads; the "
                                                 f"block has {st.T}")
            group = int(st.tid[0]) // wg
            # a warpgroup-collective (.sync.aligned): its four warps meet here with the same value
            st.coop.barrier(st, ("setmaxnreg", group), wg, False, where, kind="setmaxnreg of warpgroup",
                            extra=(count, bool(s.increase)))
            st.coop.set_registers(st, group, count, bool(s.increase), self._launch_registers(st.T), where)

        return setmaxnreg

    def _launch_registers(self, threads: int) -> int:
        """Registers per thread the launch gives a kernel that uses setmaxnreg: the device compiler
        sets it to the launch bounds' budget (the register file over the threads of the blocks
        asked to be resident, at most 255, a multiple of 8)."""
        target = self.k.target
        per_sm = getattr(target, "register_file_per_sm", 65536)
        cap = getattr(target, "registers_per_thread", 255)
        min_blocks = int(self.k.attrs.get("min_blocks_per_sm") or 1)
        return min(per_sm // (threads * min_blocks), cap) // 8 * 8

    def fence_proxy_async(self, s: th.FenceProxyAsync):
        # the executing threads' shared-memory writes become visible to the async proxy: TMA stores
        # may read them (the race detectors report a store over writes not fenced)
        def fence(st):
            if st.races is not None:
                st.races.fence(st)

        return fence
