"""Pass ``pdl_prologue``: a programmatic-launch kernel's set-up that reads nothing of the previous kernel goes
ahead of its ``griddepcontrol.wait`` (pass config ``tw.pdl_prologue``; off by default).

Needs: Tile IR after ``pipeline_loops`` (the TMA rings' mbarrier set-up is in place).
Guarantees, with ``tw.pdl_prologue`` true, for each ``T.Kernel`` whose body holds a ``GridDependency`` wait
(``T.pdl_sync``) at its top level:

* every TMA ring set-up at that top level after the wait moves, in order, to just before the wait: a run of
  ``Alloc``s of mbarriers, their ``MbarrierInit``s and the block ``Barrier`` that follows (plus the cluster
  barrier after it, if any) -- ``pipeline_loops``' prologue (one ring), or the full / empty barriers of a
  warp-specialized kernel (``warp_specialize`` and ``warp_specialize_loop`` put the wait ahead of them);
* the wait is marked ``prefetch_tensor_maps``: on CUDA one thread of the block prefetches the kernel's TMA
  descriptors (``prefetch.tensormap``) before waiting.

Why: a kernel launched with programmatic stream serialization may start its blocks while the previous kernel
finishes; whatever it does before the wait overlaps that tail.  The mbarriers live in this block's shared
memory and the descriptors are kernel parameters: neither depends on the previous kernel, so moving them is
legal whatever that kernel writes (everything that touches global memory stays after the wait).  Nothing
else moves; without a top-level wait, or with the option off, the function is unchanged.  On targets without
griddepcontrol (before sm_90, AMD, the emulator) the moved statements mean the same in either order.
"""

from __future__ import annotations

from ..ir import thread as th
from ..ir import tile as t
from ..ir.visitor import map_stmt, rebuild

OPTION = "tw.pdl_prologue"


def pdl_prologue(func: t.PrimFunc, ctx=None) -> t.PrimFunc:
    if ctx is None or not ctx.options.get(OPTION):
        return func

    def rewrite(s):
        if isinstance(s, t.Kernel):
            body = _hoisted(_flat(s.body))
            return rebuild(s, body=t.SeqStmt(body)) if body is not None else None
        return None

    func.body = map_stmt(func.body, rewrite)
    return func


def _flat(s) -> list:
    """The top-level statements of a kernel body (nested SeqStmts spliced: they open no scope)."""
    if isinstance(s, t.SeqStmt):
        return [x for y in s.stmts for x in _flat(y)]
    return [s]


def _hoisted(stmts: list):
    """``stmts`` with the ring set-ups after the first wait moved ahead of it, the wait marked; None: no wait."""
    at = next((i for i, s in enumerate(stmts) if isinstance(s, th.GridDependency) and s.action == "wait"), None)
    if at is None:
        return None
    moved, rest, i = [], [], at + 1
    while i < len(stmts):
        n = _set_up_run(stmts, i)
        if n:
            moved += stmts[i:i + n]
            i += n
        else:
            rest.append(stmts[i])
            i += 1
    wait = rebuild(stmts[at], prefetch_tensor_maps=True)
    return [*stmts[:at], *moved, wait, *rest]


def _set_up_run(stmts: list, i: int) -> int:
    """The length of the mbarrier set-up starting at ``stmts[i]``, 0 if none starts there: ``Alloc``s, then
    ``MbarrierInit``s of exactly those buffers (each allocated one initialised once, in any order), then a block
    ``Barrier`` and optionally a ``ClusterBarrier``.  Nothing in it touches global memory."""
    j, allocated = i, []
    while j < len(stmts) and isinstance(stmts[j], t.Alloc):
        allocated.append(stmts[j].buffer)
        j += 1
    inited = []
    while j < len(stmts) and isinstance(stmts[j], th.MbarrierInit):
        inited.append(stmts[j].bar)
        j += 1
    if not allocated or len(inited) != len(allocated) or {id(b) for b in inited} != {id(b) for b in allocated} \
            or j >= len(stmts) or not isinstance(stmts[j], th.Barrier):
        return 0
    j += 1
    if j < len(stmts) and isinstance(stmts[j], th.ClusterBarrier):
        j += 1
    return j - i
