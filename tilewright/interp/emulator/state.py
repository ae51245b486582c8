"""Binding kernel arguments, and the runtime state of one batch of blocks (or of one warp in
cooperative mode) that the compiled closures read and write."""

from __future__ import annotations

import numpy as np

from ...ir import dtype as dt
from ...ir import thread as th
from ..bind import bind_host_call, strided_span
from ..host_addresses import AddressBook
from .races import _GlobalRaces, _Races

ADDRESS_BOOK = "address book"  # the key of the call's AddressBook in the globals dict (not a Buffer)


def _bind_args(kernel: th.ThreadKernel, args: list, dyn: dict | None):
    # the binder of every backend (binding.args), so a call is refused here exactly as elsewhere
    bufs, values, dyn_vals = bind_host_call(kernel.attrs.get("source_func") or kernel.name, kernel.params,
                                            kernel.dyn_vars, args, dyn)
    globals_ = {p: strided_span(a) if p.attrs.get("explicit_strides") else a.reshape(-1)  # strided: own strides
                for p, a in bufs.items()}
    scalars = {p: dt.to_numpy(p.dtype).type(v) for p, v in values.items()}
    globals_[ADDRESS_BOOK] = AddressBook(bufs.values())
    for v in kernel.dyn_vars:
        scalars[v] = dt.to_numpy(v.dtype).type(dyn_vals[v])
    return globals_, scalars


# --------------------------------------------------------------------------------------------
# runtime state of one batch of blocks


class _State:
    """What the compiled closures see.  ``mask`` is None (every lane of the batch active) or a bool
    array ``[L]`` with at least one lane set.

    ``regs[slot]`` is a local buffer as a list of per-register values (an array ``[L]`` or a scalar
    when all lanes agree).  Values are never modified in place, so a value read from a register (or
    bound by a ``LetStmt``) stays valid after the register is overwritten, and uniform values such as
    cleared accumulators cost nothing until lanes diverge.

    In cooperative mode (``coop``, see ``coop.py``) a state holds one warp of one block: its lanes are
    threads ``warp * W .. warp * W + W - 1``; the block's shared memory is shared between its warps,
    and ``coop`` is the block's scheduler and synchronisation state."""

    __slots__ = (
        "L",
        "S",
        "T",
        "async_groups",
        "async_open",
        "banks",
        "mbar",
        "block",
        "bulk",
        "cache",
        "coop",
        "first",
        "glob",
        "addresses",
        "graces",
        "grid",
        "gwarp",
        "lane",
        "mask",
        "memo",
        "rng",
        "nb",
        "races",
        "rank",
        "regs",
        "sbase",
        "smem",
        "sviews",
        "tid",
        "vars",
        "warp",
    )

    def __init__(self, prog, kernel, grid, first: int, nb: int, globals_: dict, scalars: dict,
                 check_races: bool, coop=None, warp: int = 0, warp_size: int = 0, smem=None, graces=None,
                 banks=None, gwarp: int | None = None, rank: int = 0):
        T = kernel.num_threads
        self.T, self.S, self.nb, self.first, self.grid = T, kernel.shared_bytes, nb, first, grid
        self.coop, self.warp = coop, warp
        # a block of a cluster (coop.py): the warp's index over the cluster's warps, the block's rank
        self.gwarp, self.rank = (warp if gwarp is None else gwarp), rank
        self.banks = banks  # a bank_conflicts.BankCounter, or None
        if coop is None:
            self.L = L = nb * T
            self.lane = np.arange(L)
            self.tid = (self.lane % T).astype(np.int32)
            self.block = self.lane // T  # block of each lane within the batch
        else:
            self.L = L = warp_size
            self.lane = np.arange(L)
            self.tid = (warp * warp_size + self.lane).astype(np.int32)
            self.block = np.zeros(L, np.int64)
        self.vars = [None] * prog.nvars
        self.regs = [None] * prog.nregs
        self.cache = [None] * prog.ncache
        self.memo: dict = {}
        self.mask = None
        self.rng = None  # T.rng_*: the lanes' generator states (interp/rng_philox.py), made on first use
        for v, slot in prog.var_slots.items():
            if v in scalars:
                self.vars[slot] = scalars[v]
        self.vars[prog.var_slots[kernel.thread_var]] = self.tid
        lin = self.block + first
        gx, gy = grid[0], grid[1]
        coords = (lin % gx, (lin // gx) % gy, lin // (gx * gy))
        for d, bv in enumerate(kernel.block_vars):
            if bv in prog.var_slots:
                self.vars[prog.var_slots[bv]] = coords[d].astype(dt.to_numpy(bv.dtype))
        self.glob = [globals_[p] for p in prog.global_params] + [None] * len(prog.address_decls)
        self.addresses = globals_.get(ADDRESS_BOOK)  # T.make_tensor on an address (host_addresses.py)
        if self.S:
            self.smem = np.full(nb * self.S, 0xFF, np.uint8) if smem is None else smem
            self.sviews = {d: self.smem.view(d) for d in prog.shared_dtypes}
            self.sbase = [self.block * (self.S // sz) + off // sz for off, sz in prog.shared_places]
        else:
            self.smem = None
        self.async_open: list = []
        self.async_groups: list = []
        self.mbar: dict = {}
        self.bulk: dict = {}  # block of the batch -> tma_store.BulkGroups of its issuing thread
        if coop is not None:
            self.races = coop.races_of(self.gwarp, rank) if check_races and self.S else None
            self.graces = None  # the warps of a block run one at a time: see coop_races.py
        else:
            self.races = _Races(self) if check_races and self.S else None
            self.graces = (graces or _GlobalRaces()) if check_races else None
            if self.graces is not None:
                self.graces.begin(self)

    def where(self, lane: int) -> str:
        b = self.first + int(self.block[lane])
        gx, gy = self.grid[0], self.grid[1]
        return f"block ({b % gx}, {(b // gx) % gy}, {b // (gx * gy)}) thread {int(self.tid[lane])}"


# --------------------------------------------------------------------------------------------
# small helpers
