"""Shared-memory (LDS) bank-conflict counting for the emulator.

``count_bank_conflicts(kernel, args)`` runs a compiled kernel in the emulator and returns a
``BankConflictReport``: for every shared-memory access statement of the lowered code, how many
warp/wavefront instructions ran it and how many extra cycles bank conflicts cost them, summed per
shared buffer.  ``str(report)`` prints one line per buffer, ``LDS bank conflicts: N extra cycles over
M accesses (buffer)``.  What is counted is the lowered thread IR: the device compiler may merge
neighbouring scalar accesses into wider ones (clang does, for adjacent LDS reads), so the count
describes the accesses tilewright asks for.

Model.  Banks are ``bank_bytes`` (4) wide; a byte address maps to bank ``address // 4 % banks``.  A
warp instruction is served in *phases*, each a fixed set of lanes (which lanes depends on the
access width and the hardware).  In one phase, lanes touching the same 4-byte word share it
(broadcast); a bank holding ``k`` distinct words touched costs ``k`` cycles, and the phase takes as
many cycles as its busiest bank.  Extra cycles = the sum over phases of (cycles - 1).

Facts per vendor (sources in each model's ``source``):

* NVIDIA: 32 banks x 4 bytes; accesses of up to 32 bits are served a warp at a time, 64-bit ones a
  half-warp at a time, 128-bit ones a quarter-warp at a time (CUDA C++ Programming Guide, "Shared
  Memory" for compute capability 5.x and later).  ``ldmatrix`` reads each 8x8 matrix (8 rows of 16
  bytes, one per supplying lane) in one phase.
* CDNA2/CDNA3 (gfx90a, gfx942): 32 banks x 4 bytes (ROCm blog "Avoiding LDS Bank Conflicts on AMD
  GPUs Using CK-Tile Framework", 2025; CK-Tile documentation "Understanding AMD GPU LDS and Bank
  Conflicts").  ``ds_write_b128`` is served in 8 phases of 8 consecutive lanes and ``ds_read_b128`` in
  8 phases of non-contiguous lane groups {0-3, 20-23}, {4-7, 16-19}, {8-11, 28-31}, {12-15, 24-27}
  and the same + 32 (CK-Tile documentation, also measured on MI300 by public bank-conflict probes);
  64-bit accesses in 4 phases of 16 consecutive lanes, narrower ones in half-waves of 32 lanes
  (AMD APP programming guide: "threads 0 through 31 are checked for conflicts as are 32 through 63";
  128 bytes per clock is 16 lanes of 8 bytes).
* CDNA4 (gfx950): 64 banks x 4 bytes (160 KiB LDS); phases are twice as wide: ``ds_read_b128`` in
  4 phases of 16 lanes {0-3, 12-15, 20-27}, {4-11, 16-19, 28-31} and the same + 32 (measured phase
  tables published with HipKittens), 128-bit writes in 16 consecutive lanes, 64-bit accesses in
  half-waves, narrower ones in whole waves.
* RDNA3/RDNA4 (gfx11, gfx12; wave32): the work-group processor's LDS has 64 banks x 4 bytes in WGP
  mode (the mode HIP compute kernels run in); we model a wave32 access of up to 64 bits as one
  phase (256 bytes per clock) and a 128-bit one as two phases of 16 consecutive lanes.  The phase
  grouping is our assumption (not published); the bank count is the RDNA3 ISA guide's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class BankModel:
    """How one GPU family serves shared-memory accesses: ``banks`` x ``bank_bytes``, and the lane
    groups (phases) of a warp instruction per access width and direction."""

    name: str
    banks: int
    warp_size: int
    # (width in bytes, "read"/"write") -> tuple of lane tuples; a width missing here uses
    # ``default_phase_lanes`` consecutive lanes per phase
    phase_table: tuple = ()
    bank_bytes: int = 4
    source: str = ""

    def phases(self, width: int, kind: str) -> np.ndarray:
        """Phase index of each lane of a warp for an access of ``width`` bytes per lane."""
        table = dict(self.phase_table)
        groups = table.get((width, kind)) or table.get((width, "any"))
        out = np.empty(self.warp_size, np.int64)
        if groups is None:
            per = max(1, min(self.warp_size, self.banks * self.bank_bytes // max(width, self.bank_bytes)))
            out[:] = np.arange(self.warp_size) // per
            return out
        for p, lanes in enumerate(groups):
            out[list(lanes)] = p
        return out


def _groups(*starts_and_lengths) -> tuple:
    return tuple(tuple(range(a, a + n)) for a, n in starts_and_lengths)


def _cdna3_read_b128() -> tuple:
    base = [(0, 4, 20, 4), (4, 4, 16, 4), (8, 4, 28, 4), (12, 4, 24, 4)]
    out = []
    for half in (0, 32):
        for a, n, b, m in base:
            out.append(tuple(range(half + a, half + a + n)) + tuple(range(half + b, half + b + m)))
    return tuple(out)


def _cdna4_read_b128() -> tuple:
    out = []
    for half in (0, 32):
        for parts in (((0, 4), (12, 4), (20, 8)), ((4, 8), (16, 4), (28, 4))):
            lanes: tuple = ()
            for a, n in parts:
                lanes += tuple(range(half + a, half + a + n))
            out.append(lanes)
    return tuple(out)


NVIDIA = BankModel("nvidia", 32, 32, source="CUDA C++ Programming Guide, shared memory (cc 5.x+)")
CDNA3 = BankModel(
    "cdna3", 32, 64,
    phase_table=(((16, "read"), _cdna3_read_b128()), ((16, "write"), _groups(*[(8 * i, 8) for i in range(8)]))),
    source="CK-Tile LDS bank-conflict documentation; ROCm blog on LDS bank conflicts (MI300)")
CDNA4 = BankModel(
    "cdna4", 64, 64,
    phase_table=(((16, "read"), _cdna4_read_b128()), ((16, "write"), _groups(*[(16 * i, 16) for i in range(4)]))),
    source="HipKittens measured LDS phase tables (MI355X)")
RDNA = BankModel("rdna", 64, 32, source="RDNA3 ISA guide (64 LDS banks in WGP mode); phases assumed")


def bank_model(target) -> BankModel:
    """The bank model of a ``Target``."""
    feats = set(getattr(target, "features", ()) or ())
    if getattr(target, "vendor", "nvidia") != "amd":
        return NVIDIA
    if "cdna4" in feats:
        return CDNA4
    if "cdna2" in feats or "cdna3" in feats:
        return CDNA3
    return RDNA


@dataclass
class _Site:
    buffer: str
    text: str
    kind: str
    width: int
    accesses: int = 0
    extra: int = 0


@dataclass
class BankConflictReport:
    """Per access statement (``sites``) and per buffer: warp instructions and extra cycles."""

    model: BankModel
    sites: dict = field(default_factory=dict)

    @property
    def accesses(self) -> int:
        return sum(s.accesses for s in self.sites.values())

    @property
    def extra_cycles(self) -> int:
        return sum(s.extra for s in self.sites.values())

    def per_buffer(self) -> dict:
        """buffer name -> (extra cycles, warp instructions)."""
        out: dict = {}
        for s in self.sites.values():
            e, a = out.get(s.buffer, (0, 0))
            out[s.buffer] = (e + s.extra, a + s.accesses)
        return out

    def conflicting_sites(self) -> list:
        return [s for s in self.sites.values() if s.extra]

    def lines(self) -> list:
        out = [f"LDS bank conflicts: {e} extra cycles over {a} accesses ({name})"
               for name, (e, a) in sorted(self.per_buffer().items())]
        out.append(f"LDS bank conflicts: {self.extra_cycles} extra cycles over {self.accesses} accesses (total, "
                   f"{self.model.name} model: {self.model.banks} banks x {self.model.bank_bytes} bytes)")
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())


class BankCounter:
    """Collects accesses while the emulator runs (``_State.banks``)."""

    def __init__(self, model: BankModel):
        self.model = model
        self.report = BankConflictReport(model)
        self._phase_cache: dict = {}

    def record(self, st, where, name: str, pos, itemsize: int, width: int, lanes, kind: str) -> None:
        """Lanes ``lanes`` (indices into the state's lanes) access ``width`` bytes each, starting at
        element positions ``pos`` (one per lane, in views of ``itemsize`` bytes of the batch's shared
        memory)."""
        lanes = np.asarray(lanes)
        if not len(lanes):
            return
        m = self.model
        pos = np.broadcast_to(np.asarray(pos, np.int64), lanes.shape)
        addr = pos * itemsize
        if st.S:
            addr = addr - st.block[lanes].astype(np.int64) * st.S  # block-relative byte address
        tid = st.tid[lanes].astype(np.int64)
        W = m.warp_size
        key = (width, kind)
        phase_of = self._phase_cache.get(key)
        if phase_of is None:
            phase_of = self._phase_cache[key] = m.phases(width, kind)
        nphase = int(phase_of.max()) + 1
        warp = st.block[lanes].astype(np.int64) * ((st.T + W - 1) // W) + tid // W
        group = warp * nphase + phase_of[tid % W]
        words = max(1, -(-width // m.bank_bytes))
        word = (addr // m.bank_bytes)[:, None] + np.arange(words)[None, :]
        group = np.repeat(group, words)
        word = word.reshape(-1)
        bank = word % m.banks
        # distinct (group, bank, word): each distinct word a bank serves in a phase is one cycle
        trip = np.unique(np.stack([group, bank, word]), axis=1)
        gb, counts = np.unique(trip[0] * m.banks + trip[1], return_counts=True)
        per_group = np.zeros(int(gb.max() // m.banks) + 1 if len(gb) else 0, np.int64)
        np.maximum.at(per_group, gb // m.banks, counts)
        used = per_group[per_group > 0]
        extra = int((used - 1).sum())
        site = self.report.sites.get(id(where))
        if site is None:
            site = self.report.sites[id(where)] = _Site(name, where.text(), kind, width)
        site.accesses += len(np.unique(warp))
        site.extra += extra


def count_bank_conflicts(kernel, args: list, *, dyn: dict | None = None, model: BankModel | None = None):
    """Run ``kernel`` (a ``JITKernel`` or a ``ThreadKernel``) in the emulator on ``args`` (NumPy
    arrays, written in place) and return its ``BankConflictReport``."""
    from . import run_thread_kernel

    tk = getattr(kernel, "thread_kernel", kernel)
    model = model or bank_model(tk.target)
    counter = BankCounter(model)
    run_thread_kernel(tk, list(args), dyn=dyn, check_races=False, bank_counter=counter)
    return counter.report
