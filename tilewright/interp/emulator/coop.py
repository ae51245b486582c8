"""Cooperative execution of one block, for kernels whose control flow diverges around
synchronisation (warp-specialised producer/consumer kernels).

Each warp (``W`` lanes: 32 on NVIDIA and gfx11, 64 on CDNA) is one ``_State`` and runs the compiled
program in its own Python thread; exactly one thread runs at a time (a baton passed through a
condition variable), so execution is deterministic.  A warp advances until it blocks on a block
barrier, a named barrier (``bar.sync``), a warpgroup's ``setmaxnreg`` or an mbarrier wait whose
phase has not completed; then the next runnable warp (round robin) runs.  When no warp can run
and some have not finished, the block would hang on a GPU: ``DeadlockError`` lists every warp's
wait site (statement and source line) and the state of what it waits for.

Synchronisation semantics:

* Barriers (``Barrier`` = barrier 0 over every thread, ``NamedBarrier(id, count)``) count whole
  warps (a warp arrives with ``W`` threads; a warp split by control flow is a ``DivergenceError``).
  The phase completes when ``count`` threads arrived.  A warp arriving twice in one phase (more
  threads than ``count``), two counts for one id in one phase, and arrivals left over when the
  block ends are errors.
* mbarriers: ``MbarrierInit`` runs on warp 0's thread 0 (as the CUDA printer emits it); a phase
  completes when its arrivals reach the initialised count and its transaction bytes are zero.
  ``MbarrierArrive`` arrives once per executing thread (once per warp with ``elected``); arrivals
  beyond what the phase still expects are an error.  ``TmaLoad`` is issued by warp 0's elected lane
  (as printed; other warps skip it, which a deadlock report mentions); it reads global memory when
  issued and its bytes land in shared memory when its phase completes.  ``MbarrierWait`` blocks
  until the phase of its parity completed; a wait that returns on a phase this warp already waited
  for, or that skips (or blocks behind) a completed phase it never waited for, is a wrong-parity
  error.  A phase left incomplete when the block ends (an arrive count that never completes) is
  an error.
* Thread-block clusters (a kernel with ``cluster_dims`` using a cluster feature): the blocks of one
  cluster run together as one group of warps (warps are numbered over the cluster, block by block
  in rank order); each block has its own shared memory, mbarriers, named barriers and register
  pool.  ``MbarrierArrive`` with ``cta`` arrives on the barrier at the same place in that block; a
  multicast ``TmaLoad`` lands its box at the same offset in every block of its mask and completes
  its bytes on the mbarrier at the same place there (no arrival: each block's own producer arrives
  with the bytes it expects); ``ClusterBarrier`` arrive / wait count every thread of the cluster.
  An access to a block of the cluster whose warps have all finished is an error (the GPU would
  touch the shared memory of an exited block).
* Shared memory ordering (always on in this mode): vector clocks per warp, and one per mbarrier
  for the bytes its TMA loads land.  A release (any arrive) publishes the warp's clock to the
  barrier phase, an acquire (a completed wait) joins it.  A read of bytes whose last writer is
  not ordered before it, a write over bytes another warp read or wrote without being ordered
  after that access (a ring slot reused while its consumer has not released it), and a TMA load
  over such bytes are ``RaceError``.  Within a warp, lanes are treated as one agent (warp-
  synchronous), except that one statement's lanes may not store different values to one byte.
"""

from __future__ import annotations

import threading

import numpy as np

from ...ir import thread as th
from ...ir.visitor import walk
from .coop_races import _CoopRaces, _loc_text, _WarpRaces
from .errors import DeadlockError, DivergenceError, EmulatorError

_COORDINATOR = -1


class _Abort(BaseException):
    """Unwinds a warp's thread when the block failed elsewhere."""


class _Barrier:
    """A hardware barrier (id 0: the block barrier) in its current phase."""

    def __init__(self, name: str):
        self.name = name
        self.gen = 0
        self.count = 0
        self.arrived: dict = {}  # warp -> where it arrived
        self.vc = None
        self.done_vc: dict = {}  # generation -> joined clocks of its arrivals
        self.extra = None  # setmaxnreg: (count, increase) the warpgroup agreed on


class _Mbar:
    """One mbarrier: the current phase's arrivals and transaction bytes, completed phases, the
    clocks each completed phase publishes, TMA bytes waiting for the phase to land."""

    def __init__(self, name: str, count: int, agent: int, nagents: int, rank: int = 0):
        self.name, self.count, self.agent, self.rank = name, count, agent, rank
        self.arrived = 0
        self.tx = 0
        self.phase = 0  # completed phases
        self.vc = np.zeros(nagents, np.int64)
        self.phase_vc: dict = {}
        self.landings: list = []  # (positions, values) of TMA loads of the current phase
        self.observed: dict = {}  # warp -> last phase its waits observed
        self.last = None  # where the latest arrival happened
        self.skipped_tma = 0  # TmaLoads that warps other than warp 0 executed (not issued)
        self.expects: list = []  # (warp, its clock, where) of the expect-tx without arrival of this phase
        self.init = (0, 0)  # (warp, its clock) of the initialisation


class CoopBlock:
    """One block -- or the blocks of one thread-block cluster (``firsts``: their linear indices in
    rank order) -- run cooperatively: the warps' states, scheduler and synchronisation objects.
    Warps are numbered over the cluster (``gwarp`` = rank * warps per block + warp)."""

    def __init__(self, prog, kernel, grid, first, globals_: dict, scalars: dict, warp_size: int,
                 banks=None):
        from .state import _State

        T = kernel.num_threads
        if T % warp_size:
            raise EmulatorError(f"{T} threads are not whole warps of {warp_size}: cooperative emulation needs "
                                "whole warps")
        firsts = list(first) if isinstance(first, (list, tuple)) else [first]
        self.W, self.T, self.S = warp_size, T, kernel.shared_bytes
        self.wpb = T // warp_size  # warps per block
        self.nblocks = len(firsts)
        self.nwarps = n = self.wpb * self.nblocks
        self.firsts, self.first, self.grid = firsts, firsts[0], grid
        agents = _mbarrier_agents(prog, kernel)
        self.mbar_agents = {(r,) + key: name if self.nblocks == 1 else f"{name} of block rank {r}"
                            for r in range(self.nblocks) for key, name in agents.items()}
        self.nagents = n + len(self.mbar_agents)
        self.agent_names = [self.warp_name(w) for w in range(n)] + [f"the TMA loads landing on mbarrier {name}"
                                                                     for name in self.mbar_agents.values()]
        self.agent_index = {key: n + i for i, key in enumerate(self.mbar_agents)}
        self.vc = np.zeros((n, self.nagents), np.int64)
        self.vc[np.arange(n), np.arange(n)] = 1
        self.named: dict = {}
        self.mbars: dict = {}
        self.initial_passes: list = [[] for _ in range(n)]  # per warp: waits that passed a fresh barrier
        self.registers: dict = {}  # (rank, warpgroup) -> registers per thread after its setmaxnreg
        self.cluster_bar = _Barrier("the cluster barrier")
        self.cluster_arrived: dict = {}  # warp -> generation of the cluster barrier it arrived in, not waited yet
        self.remote: list = [[] for _ in firsts]  # per block: (warp, its clock, where) of peers' accesses to it
        self.exited: set = set()
        self.trackers = [_CoopRaces(self, r) for r in range(self.nblocks)] if self.S else None
        self.tracker = self.trackers[0] if self.S else None
        self.states = []
        self.smems = []
        for r, b in enumerate(firsts):
            smem = np.full(self.S, 0xFF, np.uint8) if self.S else None
            self.smems.append(smem)
            for w in range(self.wpb):
                st = _State(prog, kernel, grid, b, 1, globals_, scalars, True, coop=self, warp=w,
                            warp_size=warp_size, smem=smem, banks=banks, gwarp=r * self.wpb + w, rank=r)
                self.states.append(st)
        self.sviews_of = [self.states[r * self.wpb].sviews for r in range(self.nblocks)] if self.S else None
        self.sviews = self.sviews_of[0] if self.S else None
        # scheduler
        self.cv = threading.Condition()
        self.turn = _COORDINATOR
        self.done = [False] * n
        self.waiting: list = [None] * n  # (ready, describe, where) of a blocked warp
        self.failure: BaseException | None = None
        self.aborting = False

    def races_of(self, warp: int, rank: int = 0):
        return _WarpRaces(self.trackers[rank], warp) if self.trackers is not None else None

    def block_name(self, rank: int = 0) -> str:
        b, (gx, gy) = self.firsts[rank], self.grid[:2]
        return f"block ({b % gx}, {(b // gx) % gy}, {b // (gx * gy)})"

    def warp_name(self, w: int) -> str:
        r, lw = divmod(w, self.wpb)
        name = f"warp {lw} (threads {lw * self.W}..{lw * self.W + self.W - 1})"
        return name if self.nblocks == 1 else f"{self.block_name(r)} (cluster rank {r}) {name}"

    def _exited(self, rank: int) -> bool:
        return all(self.done[rank * self.wpb:(rank + 1) * self.wpb])

    def _block_exit(self, rank: int) -> None:
        """When block ``rank``'s last warp finished: every access of a peer to its shared memory
        (remote arrive, multicast) must be ordered before its exit (by a cluster barrier, or by a
        wait of the block that observed it); otherwise the GPU may run it after the block exited."""
        if rank in self.exited or not self._exited(rank):
            return
        self.exited.add(rank)
        warps = range(rank * self.wpb, (rank + 1) * self.wpb)
        exit_vc = np.max(self.vc[list(warps)], axis=0)
        for g, clock, where in self.remote[rank]:
            if exit_vc[g] < clock:
                self.failure = where.error(EmulatorError, f"{self.block_name(rank)} (cluster rank {rank}) may exit "
                                                          f"before this access of {self.warp_name(g)} to its shared "
                                                          "memory: nothing orders the access before the exit (a "
                                                          "cluster barrier at the end of the kernel?)")
                return

    def _note_remote(self, st, rank: int, where) -> None:
        if rank != st.rank:
            self.remote[rank].append((st.gwarp, int(self.vc[st.gwarp, st.gwarp]), where))

    def _ordered_after_init(self, st, m: _Mbar, where, what: str) -> None:
        """A peer's use of ``m`` must be ordered after ``m``'s initialisation in its own block (a cluster
        barrier between them), whatever order the emulator happened to run the blocks in."""
        g, clock = m.init
        if m.rank != st.rank and self.vc[st.gwarp, g] < clock:
            raise where.error(EmulatorError, f"{self.warp_name(st.gwarp)} {what} mbarrier {m.name} of "
                                             f"{self.block_name(m.rank)}, and nothing orders that after the "
                                             "barrier's MbarrierInit there (a cluster barrier after the "
                                             "initialisation?)")

    # ------------------------------------------------------------------ scheduler
    def run(self, body) -> None:
        threads = [threading.Thread(target=self._warp_main, args=(w, body), daemon=True,
                                    name=f"tilewright-emulator-warp{w}") for w in range(self.nwarps)]
        for t in threads:
            t.start()
        last = self.nwarps - 1
        try:
            while self.failure is None:
                w = self._pick(last)
                if w is None:
                    break
                last = w
                self._switch_to(w)
                if self.done[w] and self.failure is None:
                    self._block_exit(w // self.wpb)
            if self.failure is None and not all(self.done):
                self.failure = self._deadlock()
        finally:
            self.aborting = True
            for w, t in enumerate(threads):
                if not self.done[w]:
                    self._switch_to(w)
                t.join()
        if self.failure is not None:
            raise self.failure
        self._check_end()

    def _pick(self, last: int):
        n = self.nwarps
        for k in range(1, n + 1):
            w = (last + k) % n
            if self.done[w]:
                continue
            waiting = self.waiting[w]
            if waiting is None or waiting[0]():
                return w
        return None

    def _switch_to(self, w: int) -> None:
        with self.cv:
            self.turn = w
            self.cv.notify_all()
            while self.turn != _COORDINATOR:
                self.cv.wait()

    def _warp_main(self, w: int, body) -> None:
        with self.cv:
            while self.turn != w:
                self.cv.wait()
        try:
            if not self.aborting:
                with np.errstate(all="ignore"):  # inactive lanes may divide by zero or overflow
                    body(self.states[w])
        except _Abort:
            pass
        except BaseException as e:  # noqa: BLE001 - handed to the coordinator, which re-raises it
            if self.failure is None:
                self.failure = e
        finally:
            with self.cv:
                self.done[w] = True
                self.turn = _COORDINATOR
                self.cv.notify_all()

    def block(self, w: int, ready, describe, where) -> None:
        """Block warp ``w`` until ``ready()``; ``describe()`` says what it waits for."""
        if ready():
            return
        self.waiting[w] = (ready, describe, where)
        with self.cv:
            self.turn = _COORDINATOR
            self.cv.notify_all()
            while self.turn != w:
                self.cv.wait()
        self.waiting[w] = None
        if self.aborting:
            raise _Abort

    def _deadlock(self) -> EmulatorError:
        lines, loc, wrong = [], None, None
        for w in range(self.nwarps):
            if self.done[w]:
                lines.append(f"  {self.warp_name(w)} has finished")
                continue
            _, describe, where = self.waiting[w]
            if loc is None:
                loc = where.loc
            text, parity_problem = describe()
            if parity_problem and wrong is None:
                wrong = f"wrong-parity mbarrier wait: {self.warp_name(w)} {parity_problem}"
                loc = where.loc
            lines.append(f"  {self.warp_name(w)} waits {text}\n{_loc_text(where)}")
        where_ = self.block_name() if self.nblocks == 1 else "the cluster of " + ", ".join(
            self.block_name(r) for r in range(self.nblocks))
        head = wrong or f"deadlock in {where_}: every warp that has not finished is blocked"
        if wrong:
            head += f"\ndeadlock in {where_}:"
        return DeadlockError(head + "\n" + "\n".join(lines), loc)

    def _check_end(self) -> None:
        from .tma_store import check_stores_waited

        for st in self.states:
            check_stores_waited(st, lambda j, st=st: self.block_name(st.rank))
        for b in list(self.named.values()) + [self.cluster_bar]:
            if b.arrived:
                w, where = next(iter(b.arrived.items()))
                raise where.error(DeadlockError, f"{self.block_name(w // self.wpb)} ends with "
                                                 f"{len(b.arrived) * self.W} of "
                                                 f"{b.count} threads arrived at {b.name} (first: {self.warp_name(w)}): "
                                                 "its count never completes")
        for m in self.mbars.values():
            if m.arrived or m.tx or m.landings:
                msg = (f"{self.block_name(m.rank)} ends with phase {m.phase} of mbarrier {m.name} incomplete: "
                       f"{m.arrived} of {m.count} arrivals, {m.tx} transaction bytes outstanding: its arrive count "
                       "never completes")
                if m.last is not None:
                    raise m.last.error(EmulatorError, msg)
                raise EmulatorError(msg)

    # ------------------------------------------------------------------ barriers
    def _whole_warp(self, st, where, what: str) -> None:
        if st.mask is not None and not st.mask.all():
            lane = int(np.flatnonzero(~st.mask)[0])
            raise where.error(DivergenceError, f"{st.where(lane)} skips a {what} that other threads of its warp "
                                               "execute (control flow splits the warp)")

    def barrier(self, st, bid, count: int, arrive_only: bool, where, kind: str = "named barrier", extra=None):
        w = st.gwarp
        what = "barrier" if kind == "barrier" else f"{kind} {bid[1] if isinstance(bid, tuple) else bid}"
        bid = (st.rank, bid)  # each block of a cluster has its own barriers
        self._whole_warp(st, where, what)
        if count <= 0 or count % self.W or count > self.T:
            raise where.error(EmulatorError, f"{what} over {count} threads: the count must be a positive multiple "
                                             f"of the warp size {self.W}, at most the block's {self.T} threads")
        b = self.named.get(bid)
        if b is None:
            b = self.named[bid] = _Barrier(what)
        if b.arrived and b.count != count:
            other = next(iter(b.arrived))
            raise where.error(EmulatorError, f"{self.warp_name(w)} arrives at {what} counting {count} threads, "
                                             f"while {self.warp_name(other)} arrived in the same phase counting "
                                             f"{b.count}")
        if w in b.arrived:
            raise where.error(EmulatorError, f"{self.warp_name(w)} arrives twice at {what} in one phase: more "
                                             f"threads arrive than its count {count} (a bar.arrive not matched by "
                                             "the other side's bar.sync?)")
        if extra is not None:
            if b.arrived and b.extra != extra:
                raise where.error(EmulatorError, f"the warps of one warpgroup execute {what} with different "
                                                 f"values ({b.extra} and {extra})")
            b.extra = extra
        b.count = count
        b.arrived[w] = where
        b.vc = self.vc[w].copy() if b.vc is None else np.maximum(b.vc, self.vc[w])
        gen = b.gen
        if len(b.arrived) * self.W == count:
            b.done_vc[gen] = b.vc
            b.done_vc.pop(gen - 2, None)
            b.gen += 1
            b.arrived = {}
            b.vc = None
        self.vc[w, w] += 1  # later accesses of this warp are not covered by what it published
        if arrive_only:
            return

        def describe():
            ws = ", ".join(str(x) for x in sorted(b.arrived))
            return (f"at {what} ({len(b.arrived) * self.W} of {count} threads arrived in this phase; warps: "
                    f"{ws or 'none'})"), None

        self.block(w, lambda: b.gen > gen, describe, where)
        np.maximum(self.vc[w], b.done_vc[gen], out=self.vc[w])

    def cluster_barrier(self, st, arrive: bool, wait: bool, where) -> None:
        """``barrier.cluster.arrive`` (every thread of the warp; release) and/or ``.wait`` (until every
        thread of every block of the cluster arrived in the phase this warp arrived in; acquire).  A
        relaxed arrival is taken as a release too: only the compiler emits one, right after an
        MbarrierInit, whose ``fence.mbarrier_init.release.cluster`` publishes the barriers."""
        w = st.gwarp
        b = self.cluster_bar
        self._whole_warp(st, where, "cluster barrier")
        if arrive:
            if w in self.cluster_arrived:
                raise where.error(EmulatorError, f"{self.warp_name(w)} arrives at the cluster barrier again before "
                                                 "waiting on its previous arrival (barrier.cluster.wait missing?)")
            self.cluster_arrived[w] = b.gen
            b.arrived[w] = where
            b.vc = self.vc[w].copy() if b.vc is None else np.maximum(b.vc, self.vc[w])
            if len(b.arrived) == self.nwarps:
                b.done_vc[b.gen] = b.vc
                b.done_vc.pop(b.gen - 2, None)
                b.gen += 1
                b.arrived = {}
                b.vc = None
            self.vc[w, w] += 1
        if not wait:
            return
        gen = self.cluster_arrived.pop(w, None)
        if gen is None:
            raise where.error(EmulatorError, f"{self.warp_name(w)} waits at the cluster barrier without having "
                                             "arrived (barrier.cluster.arrive missing?): it would hang")

        def describe():
            return (f"at the cluster barrier ({len(b.arrived) * self.W} of {self.nwarps * self.W} threads of the "
                    "cluster arrived in this phase)"), None

        self.block(w, lambda: b.gen > gen, describe, where)
        np.maximum(self.vc[w], b.done_vc[gen], out=self.vc[w])

    # ------------------------------------------------------------------ setmaxnreg
    def set_registers(self, st, group: int, count: int, increase: bool, launch: int, where) -> None:
        """Warpgroup ``group``'s per-thread registers become ``count`` (each of its warps calls this
        after the warpgroup met).  The block's pool is what the launch gave it (``launch`` per
        thread); a decrease returns registers to it at once, an increase waits until the pool
        holds them (``setmaxnreg.inc`` retries until then: a split that never fits hangs)."""
        regs = self.registers
        rank = st.rank
        cur = regs.get((rank, group), launch)
        # an increase below (or a decrease above) the current count changes nothing here (this
        # also covers the other warps of the warpgroup, which meet here after the first applied it)
        count = max(cur, count) if increase else min(cur, count)
        if cur == count:
            return
        pool = launch * self.T
        ngroups = self.T // 128

        def used(new: int) -> int:
            return sum((new if g == group else regs.get((rank, g), launch)) * 128 for g in range(ngroups))

        if increase:
            def describe():
                return (f"at setmaxnreg.inc {count} of warpgroup {group}: the block's {pool} registers hold "
                        f"{used(cur)} in use, {used(count)} needed (no warpgroup gives any back)"), None

            self.block(st.gwarp, lambda: used(count) <= pool, describe, where)
        regs[(rank, group)] = count

    # ------------------------------------------------------------------ mbarriers
    def mbar_init(self, st, key, name: str, n: int, count: int, where) -> None:
        if st.warp != 0 or (st.mask is not None and not st.mask[0]):
            return  # printed as `if (warp == 0 && threadIdx.x == 0)`
        for i in range(n):
            full = (st.rank, key, i)
            agent = self.agent_index[full]
            self.mbars[full] = _Mbar(f"{name}[{i}]", count, agent, self.nagents, st.rank)
            self.mbars[full].init = (st.gwarp, int(self.vc[st.gwarp, st.gwarp]))  # for peers: ordered after it?

    def mbar(self, key, where, rank: int = 0) -> _Mbar:
        """The mbarrier at shared place ``key`` = (place, index) of block ``rank`` of the cluster."""
        full = (rank,) + tuple(key)
        m = self.mbars.get(full)
        if m is None:
            raise where.error(EmulatorError, f"mbarrier {self.mbar_agents.get(full, key)} is used before its "
                                             "MbarrierInit (or before the barrier that publishes it"
                                             f"{'' if self.nblocks == 1 else ': a cluster barrier for peers'})")
        return m

    def _peer(self, st, rank: int, where, what: str) -> int:
        """Block ``rank`` of the cluster, checked to exist and not to have exited."""
        rank = int(rank)
        if not 0 <= rank < self.nblocks:
            raise where.error(EmulatorError, f"{what} names block rank {rank} of a cluster of {self.nblocks} block(s)")
        if rank != st.rank and self._exited(rank):
            raise where.error(EmulatorError, f"{what} touches {self.block_name(rank)} (cluster rank {rank}), whose "
                                             "warps have all exited: a block must not exit while its peers may still "
                                             "access its shared memory (a cluster barrier before the end?)")
        return rank

    def mbar_arrive(self, st, key, arrivals: int, tx: int, where, rank=None) -> None:
        w = st.gwarp
        rank = st.rank if rank is None else self._peer(st, rank, where, "a remote mbarrier arrive")
        self._note_remote(st, rank, where)
        m = self.mbar(key, where, rank)
        self._ordered_after_init(st, m, where, "arrives on")
        left = m.count - m.arrived
        if arrivals > left:
            raise where.error(EmulatorError, f"{self.warp_name(w)} brings {arrivals} arrivals to mbarrier {m.name}, "
                                             f"whose phase {m.phase} expects only {left} more (initialised for "
                                             f"{m.count}): over-arrival (arrive from one elected thread?)")
        m.arrived += arrivals
        m.tx += tx
        m.last = where
        np.maximum(m.vc, self.vc[w], out=m.vc)
        self._try_complete(m)
        self.vc[w, w] += 1

    def mbar_expect_tx(self, st, key, nbytes: int, where) -> None:
        m = self.mbar(key, where, st.rank)
        m.tx += nbytes
        m.last = where
        m.expects.append((st.gwarp, int(self.vc[st.gwarp, st.gwarp]), where))

    def tma_issue(self, st, key, pos, vals, where, name: str, expect_bytes=None, arrives: bool = True,
                  multicast=None) -> None:
        if multicast is not None:
            return self._tma_multicast(st, key, pos, vals, where, name, expect_bytes, arrives, int(multicast))
        m = self.mbar(key, where, st.rank)
        if self.trackers is not None:
            self.trackers[st.rank].tma_issue(st.gwarp, pos, vals.dtype.itemsize, where, name)
        nbytes = vals.size * vals.dtype.itemsize
        # mbarrier.arrive.expect_tx(bytes) (this box's, or a T.tma_copy's total on its first box,
        # none on its later boxes; T.tma_copy raises the bytes without arriving), then the copy's
        # complete_tx(bytes) when it lands
        expect = nbytes if expect_bytes is None else int(expect_bytes)
        if expect and arrives:
            self.mbar_arrive(st, key, 1, expect, where)
        elif expect:
            self.mbar_expect_tx(st, key, expect, where)
        m.landings.append((pos, vals))
        m.tx -= nbytes
        self._try_complete(m)

    def _tma_multicast(self, st, key, pos, vals, where, name, expect_bytes, arrives, mask: int) -> None:
        """``.multicast::cluster``: the issuing thread's expect (and arrival) on its own barrier, the box
        landing at ``pos`` in every block of ``mask``, its bytes completing there on the barrier at
        ``key``'s place."""
        ranks = [r for r in range(16) if mask >> r & 1]
        if not ranks:
            raise where.error(EmulatorError, "a multicast TMA load with an empty ctaMask")
        for r in ranks:
            self._peer(st, r, where, "a multicast TMA load")
            self._note_remote(st, r, where)
        nbytes = vals.size * vals.dtype.itemsize
        expect = nbytes if expect_bytes is None else int(expect_bytes)
        if expect and arrives:
            self.mbar_arrive(st, key, 1, expect, where)
        elif expect:
            self.mbar_expect_tx(st, key, expect, where)
        for r in ranks:
            m = self.mbar(key, where, r)
            self._ordered_after_init(st, m, where, "multicasts a TMA load onto")
            if self.trackers is not None:
                self.trackers[r].tma_issue(st.gwarp, pos, vals.dtype.itemsize, where, name)
            m.landings.append((pos, vals))
            m.tx -= nbytes  # may go below zero until the block's own producer expects the bytes (as on the GPU)
            self._try_complete(m)

    def _try_complete(self, m: _Mbar) -> None:
        if m.arrived != m.count or m.tx != 0:
            return
        for w, clock, where in m.expects:
            if m.vc[w] < clock:
                # no arrival of the phase comes after the expect (none by that warp later, none by a
                # warp that synchronised with it): on the GPU the phase may complete before the
                # bytes are expected, and its waiters read the tile before it lands
                raise where.error(EmulatorError, f"{self.warp_name(w)} raises the expected bytes of mbarrier "
                                                 f"{m.name} (T.tma_copy / expect_tx) after the arrivals that "
                                                 f"complete its phase {m.phase}: nothing orders it before the "
                                                 "phase completes, so waiters may read the tile before it lands "
                                                 "(arrive on the barrier with T.barrier_arrive after the copy, from "
                                                 "the threads that run it)")
        clock = m.phase + 1
        for pos, vals in m.landings:
            self.sviews_of[m.rank][vals.dtype][pos] = vals
            if self.trackers is not None:
                self.trackers[m.rank].tma_land(pos, vals.dtype.itemsize, m.agent, clock)
        vc = m.vc.copy()
        vc[m.agent] = clock
        m.phase_vc[m.phase] = vc
        m.phase_vc.pop(m.phase - 2, None)
        m.phase += 1
        m.arrived, m.tx, m.landings, m.expects = 0, 0, [], []
        m.vc[:] = 0

    def mbar_wait(self, st, key, parity: int, where, phase=None) -> None:
        """Block warp ``st`` until the phase of ``parity`` has completed; then check the protocol: the
        phase it returns on is ``phase`` when the wait names one (``MbarrierWait.phase``), else the one
        after the last it waited for."""
        w = st.gwarp
        m = self.mbar(key, where, st.rank)
        par = parity & 1
        last = m.observed.get(w)

        def parity_problem():
            # the newest completed phase this warp never waited for, while it waits on another parity
            seen = -1 if last is None else last
            if m.phase - 1 > seen and (m.phase - 1) % 2 != par:
                return (f"waits for parity {par} of mbarrier {m.name}, but phase {m.phase - 1} (parity "
                        f"{(m.phase - 1) % 2}), which it never waited for, has completed")
            return None

        def describe():
            tma = (f"; {m.skipped_tma} TMA load(s) executed by warps other than warp 0 were not issued (TMA is "
                   "issued from warp 0)") if m.skipped_tma else ""
            return (f"for parity {par} of mbarrier {m.name}: its phase {m.phase} has {m.arrived} of {m.count} "
                    f"arrivals and {m.tx} transaction bytes outstanding{tma}"), parity_problem()

        self.block(w, lambda: m.phase % 2 != par, describe, where)
        seen = m.phase - 1
        if phase is not None and seen != phase:
            raise where.error(EmulatorError, f"wrong-parity mbarrier wait: {self.warp_name(w)} waits for phase "
                                             f"{phase} (parity {par}) of mbarrier {m.name} and returns on phase "
                                             f"{seen}")
        # (a wait that names its phase may skip the phases other threads waited for)
        if phase is None and last is not None and seen <= last:
            raise where.error(EmulatorError, f"wrong-parity mbarrier wait: {self.warp_name(w)} waits for parity "
                                             f"{par} of mbarrier {m.name} and returns at once on phase {seen}, which "
                                             f"it already waited for (phase {m.phase} has not completed)")
        if phase is None and (last is not None and seen > last + 1 or last is None and seen > 0):
            skipped = 0 if last is None else last + 1
            raise where.error(EmulatorError, f"wrong-parity mbarrier wait: {self.warp_name(w)} waits for parity "
                                             f"{par} of mbarrier {m.name} and observes phase {seen}, skipping phase "
                                             f"{skipped}, which it never waited for")
        m.observed[w] = seen
        if seen < 0:
            # passed on a fresh barrier's 'previous phase': right for a producer's first wait on an
            # 'empty' barrier, a wrong parity for a consumer's wait on a 'full' one; races name it
            self.initial_passes[w].append((m.name, par, where))
        if seen >= 0:
            np.maximum(self.vc[w], m.phase_vc[seen], out=self.vc[w])


def _mbarrier_agents(prog, kernel) -> dict:
    """(shared place, index) -> printable name, for every mbarrier the kernel initialises."""
    cached = getattr(prog, "_mbar_agents", None)
    if cached is not None:
        return cached
    out: dict = {}

    def f(s):
        if isinstance(s, th.MbarrierInit) and s.bar in prog.shared:
            place = prog.shared[s.bar][0]
            for i in range(int(s.bar.shape[0])):
                out[(place, i)] = f"{s.bar.name}[{i}]"

    walk(kernel.body, f)
    prog._mbar_agents = out
    return out
