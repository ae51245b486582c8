"""Typed pass results ("plans"), keyed by stable node ids.

Passes used to hand results to later passes in ``func.attrs`` dicts keyed by ``id(node)``, so a pass
that rebuilt a node (``dataclasses.replace``, a fresh constructor call) silently lost its plan, and
``id()`` of a freed node could even be reused by an unrelated one.  Here:

* every statement node gets a ``uid`` when it is constructed (``new_uid``, called from
  ``Stmt.__post_init__``); ``ir.visitor.rebuild`` and ``map_stmt`` carry it over to the rebuilt
  node, so a rewrite keeps the node's identity for planning purposes;
* a ``Plans`` record holds one typed map per kind of result.  Node-keyed maps (``PlanMap``) take the
  node itself and key by its uid; maps whose key is a ``Buffer`` (stable objects, never rebuilt)
  are dicts keyed by the buffer (``BufferPlans``).  Either way a missing entry is an
  ``InternalError`` naming the pass that should have produced it.

The plan record types of more than one pass live here too (``GemmPlan``, ``GemmMainloop``), so that
``ir`` owns the vocabulary and passes only produce and consume it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from ..errors import InternalError

_uids = itertools.count(1)


def new_uid() -> int:
    return next(_uids)


class PlanMap:
    """A map from IR nodes (by ``uid``) to one kind of plan, produced by the pass ``producer``."""

    def __init__(self, what: str, producer: str):
        self.what, self.producer = what, producer
        self._items: dict[int, Any] = {}

    def __setitem__(self, node, value) -> None:
        self._items[node.uid] = value

    def __getitem__(self, node):
        try:
            return self._items[node.uid]
        except KeyError:
            raise InternalError(
                f"no {self.what} for {type(node).__name__} #{node.uid} (it should have been recorded by "
                f"'{self.producer}'; was the node built anew without ir.visitor.rebuild?)", self.producer,
                getattr(node, "loc", None)) from None

    def get(self, node, default=None):
        return self._items.get(node.uid, default)

    def __contains__(self, node) -> bool:
        return node.uid in self._items

    def __len__(self) -> int:
        return len(self._items)

    def values(self):
        return self._items.values()

    def items(self):
        """(uid, plan) pairs."""
        return self._items.items()


class BufferPlans(dict):
    """A dict from ``Buffer`` to one kind of plan, produced by the pass ``producer``; ``[]`` of a
    missing buffer is an ``InternalError`` (``get`` and ``in`` work as for any dict)."""

    def __init__(self, what: str, producer: str):
        super().__init__()
        self.what, self.producer = what, producer

    def __missing__(self, buf):
        raise InternalError(f"no {self.what} for buffer {getattr(buf, 'name', buf)} (it should have been recorded "
                            f"by '{self.producer}')", self.producer, getattr(buf, "loc", None))


@dataclass
class GemmPlan:
    """How one ``T.gemm`` is computed (made by ``plan_gemms``).

    ``family`` is the instruction family the lowering uses: ``"mma.sync"``, ``"wgmma"``, ``"mfma"``,
    ``"wmma"`` or ``"simt"``.  ``instr`` is the instruction (None for SIMT); ``warps_m x warps_n``
    the grid of executing groups (warps, or warpgroups for wgmma) over C, chosen by ``policy``;
    ``tm x tn`` the thread grid of the SIMT path.  ``a_source`` / ``b_source`` say where the
    instruction reads each operand: ``"registers"`` (loaded into fragments first) or ``"smem_desc"``
    (a shared-memory matrix descriptor, wgmma only).  ``wgmma`` records the warpgroup plan where
    wgmma is possible even when another family is used, and ``reason`` says why the family was
    chosen (e.g. that the wgmma lowering is not enabled).
    """

    family: str
    instr: Any = None
    warps_m: int = 1
    warps_n: int = 1
    tm: int = 1
    tn: int = 1
    policy: str = "square"
    a_source: str = "registers"
    b_source: str = "registers"
    wgmma: WgmmaPlan | None = None
    reason: str = ""

    @property
    def kind(self) -> str:
        """``"simt"`` or ``"mma"`` (any matrix instruction)."""
        return "simt" if self.family == "simt" else "mma"


@dataclass(frozen=True)
class WgmmaPlan:
    """A wgmma partition of one gemm: ``warpgroups_m x warpgroups_n`` warpgroups, each issuing
    ``instr`` (m64nNk*) ``atoms_m`` times down M per K step; A read from ``a_source``."""

    instr: Any
    warpgroups_m: int
    warpgroups_n: int
    atoms_m: int
    a_source: str


@dataclass(frozen=True)
class GemmMainloop:
    """A ``T.gemm`` that is the body of a software-pipelined mainloop (made by ``pipeline_loops``).

    The loop reads ring slot ``slot`` (an expression of the loop variable) in each iteration; the
    statements after the gemm in the loop body wait for slot ``next_slot``'s copies and synchronize
    the block, and slot ``first_slot`` is ready before the loop.  The gemm lowering decides how to
    schedule operand loads around that (for mma.sync: double-buffered operand fragments, the next
    iteration's first K step loaded before the barrier's wait completes)."""

    stages: int
    slot: Any
    next_slot: Any
    first_slot: Any
    tma: bool = False


@dataclass(frozen=True)
class PipelineRing:
    """A shared buffer that ``pipeline_loops`` turned into a ring of ``stages`` slots (a new leading
    dimension) filled ``stages - 1`` iterations ahead; ``tma``: filled by the tensor memory
    accelerator, arriving on mbarrier ``barrier`` (one per slot), else by cp.async groups."""

    stages: int
    tma: bool = False
    barrier: Any = None


@dataclass
class Plans:
    """Everything passes decide about one function, for later passes and the lowering."""

    gemms: PlanMap = field(default_factory=lambda: PlanMap("gemm plan", "plan_gemms"))
    mainloops: PlanMap = field(default_factory=lambda: PlanMap("pipelined mainloop", "pipeline_loops"))
    # wgmma commit groups a gemm leaves in flight when its statement ends (warp_specialize's
    # consumers release a ring slot one K step late; absent: 0, the gemm waits for its wgmmas)
    wgmma_in_flight: PlanMap = field(default_factory=lambda: PlanMap("wgmma groups in flight", "warp_specialize"))
    parallel_layouts: PlanMap = field(default_factory=lambda: PlanMap("T.Parallel layout", "infer_layouts"))
    rings: BufferPlans = field(default_factory=lambda: BufferPlans("pipeline ring", "pipeline_loops"))
    fragment_layouts: BufferPlans = field(default_factory=lambda: BufferPlans("fragment layout", "infer_layouts"))
    shared_layouts: BufferPlans = field(default_factory=lambda: BufferPlans("shared layout", "infer_layouts"))

    def summary(self) -> str:
        """A readable listing (written to ``plans.txt`` by ``TILEWRIGHT_DUMP_DIR``)."""
        lines = []
        for uid, p in self.gemms.items():
            unit = "warpgroups" if p.family == "wgmma" else "waves" if p.family in ("mfma", "wmma") else "warps"
            grid = f"{p.tm}x{p.tn} threads" if p.family == "simt" else f"{p.warps_m}x{p.warps_n} {unit}"
            name = p.instr.name if p.instr is not None else "scalar FMA"
            lines.append(f"gemm #{uid}: {p.family} {name}, {grid} ({p.policy}), A {p.a_source}, B {p.b_source}"
                         + (f"; {p.reason}" if p.reason else ""))
        for uid, ml in self.mainloops.items():
            lines.append(f"mainloop of gemm #{uid}: {ml.stages} stages{' (TMA)' if ml.tma else ''}, slot {ml.slot}")
        for buf, ring in self.rings.items():
            lines.append(f"ring {buf.name}: {ring.stages} stages, filled by {'TMA' if ring.tma else 'cp.async'}")
        for buf, lay in self.fragment_layouts.items():
            lines.append(f"fragment {buf.name}: {lay}")
        for buf, lay in self.shared_layouts.items():
            lines.append(f"shared {buf.name}: {lay}")
        return "\n".join(lines) + "\n"
