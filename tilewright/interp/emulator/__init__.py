"""CPU emulator of lowered thread IR: ``run_thread_kernel(kernel, args)`` executes a ``ThreadKernel``
with NumPy exactly as the GPU would, so every target's lowering (NVIDIA mma.sync, AMD MFMA and WMMA)
can be checked against a reference without the hardware.

Execution model.  Every thread of every block is a *lane*; values are NumPy arrays of shape ``[L]``
(``L = blocks in the batch x threads per block``; lane ``b * num_threads + t`` is thread ``t`` of the
batch's block ``b``) or NumPy scalars when every lane has the same value.  Blocks run in batches of at
most ``MAX_LANES`` lanes; the grid is linearised x fastest.  All lanes run in lockstep: control flow
that differs between lanes is executed under an active-lane mask.  The IR tree is compiled once per
kernel into nested Python closures (cached), then run per batch.

Cooperative mode.  A kernel that synchronises under control flow that differs between the threads
of a block (warp-specialised producer/consumer kernels), or that uses warp-level synchronisation
(mbarrier arrives, named barriers, ``setmaxnreg``), runs block by block and warp by warp instead:
each warp advances until it blocks on a barrier or an mbarrier wait (``coop.py``; the choice is in
``mode.py``).  Deadlocks, wrong-parity waits, ring slots reused before their consumer released them
and barrier counts that never complete are reported with the statement's source line.

Modules: ``errors`` (what is raised), ``program`` (the compiled closures and their cache) with its
compilers ``exprs``, ``stmts``, ``memory``, ``async_ops`` (cp.async, TMA, mbarriers), ``matrix``
(ldmatrix, mma), ``sync`` (warp-level synchronisation); ``state`` (argument binding and the per-
batch or per-warp state), ``races`` (the lockstep race detector), ``mathfns``, ``support`` (value and
check helpers), ``coop`` (the warp scheduler, barriers, mbarriers), ``coop_races`` (ordering between
warps) and ``mode``.

Guarantees:

* Arithmetic follows the node dtypes: each result is rounded to its dtype (float16 / bfloat16 / fp8
  through NumPy and ``ml_dtypes``); math calls on 16-bit floats compute in float32 and round, as the
  printers' ``half(expf((float)x))`` does.  Integer ``//`` and ``%`` floor; float ``%`` is ``fmod``.
  Float -> int casts truncate and saturate (NaN -> 0), as ``cvt.rzi.sat`` does.  Float ``min``/``max``
  propagate NaN (stricter than ``fminf``: uninitialised registers stay visible).  An integer division
  by zero, or a negative operand of a ``//`` / ``%`` that the printers emit as C's truncating operator
  (because analysis claims both sides non-negative), raises ``EmulatorError`` (checked where the
  operands vary within a batch: loop-dependent index math).
* Registers (``LocalDecl``) start as NaN (floats), the dtype's minimum (ints) or True (bool); shared
  memory starts as 0xFF bytes (NaN in every float view).  Reading what was never written shows.
* Memory safety: an *active* lane (under the statement's mask, and under the taken side of a
  ``Select`` / ``and`` / ``or``) that reads or writes outside its buffer raises
  ``EmulatorOutOfBoundsError`` naming the buffer, the block, the thread and the statement.  Shared
  buffers are bounded by their own declared size, so overlapping buffers are caught too.  Vector
  accesses (``VecCopy``, ``AsyncCopy``, ``LoadMatrix`` rows) must be aligned to their width
  (``MisalignedAccessError``); global arrays are assumed 256-byte aligned.
* Collective operations: ``Barrier``, ``LoadMatrix``, ``MatrixMultiply`` and ``Shuffle`` may not run
  under control flow that splits a block (barrier) or a warp / wave (the others), and a shuffle may not
  read a lane that is not executing it (``DivergenceError``): a shuffle in one side of a ``Select`` (or
  the right side of ``and`` / ``or``) runs only in the lanes that need that side, as C's ``?:`` does.
* ``MatrixMultiply`` gathers each warp's / wave's A, B and C from the lanes' registers through the
  instruction's ``a_index`` / ``b_index`` / ``c_index`` (checked to cover the matrices), computes
  ``D = A @ B + C`` in float32 (int64 then int32 for integer instructions) and scatters D.  Replicated
  operands (gfx11 WMMA) must hold identical values in every replica.
* ``AsyncCopy`` is deferred: copies are buffered per commit group and land in shared memory at the
  ``AsyncWait`` that retires their group, so a missing or too-weak wait reads stale data.
* ``TmaLoad`` (block-level) reads its box when issued, zero-filling what lies outside the tensor,
  and arrives on its mbarrier; the bytes land at the first ``MbarrierWait`` that sees the phase
  complete.  A wait on a phase that too few loads arrive on (the GPU would hang), more arrivals
  than the barrier's count, a TMA destination that is not 128-byte aligned, and a TMA load over
  bytes accessed since the last barrier are errors.
* ``TmaStore`` (by its issuing thread) reads its shared box when issued and writes the part inside the
  tensor to global memory; the box counts as read until the issuer's ``TmaStoreWait`` retires its
  group: a write to it before that, a store over shared writes not fenced by ``FenceProxyAsync``,
  and a block that ends with stores not waited for are errors (``tma_store.py``).
* With ``check_races=True`` (the default, and what ``execution_backend="emulator"`` runs): per
  block, a shared-memory access raises ``RaceError`` when another thread changed the same byte since
  the last barrier (read-after-write, write-after-write), when a thread changes a byte another
  thread read since the last barrier (write-after-read), when one statement's lanes store different
  values to one byte, or when a byte is accessed while an async copy to it is still pending.  Writes
  that leave a byte's value unchanged are benign and ignored.  Global memory is tracked the same way
  per element between the threads of one block (``races._GlobalRaces``; blocks are not compared),
  and one statement's lanes storing different values to one element is a race.  Threads of one warp
  are not taken as ordered either (independent thread scheduling: only a barrier orders them here).
  The error names the kernel line.
"""

from __future__ import annotations

import numpy as np

from ...ir import thread as th
from ...ir import tile as t
from ...ir.visitor import free_vars, walk
from .bank_conflicts import BankConflictReport, count_bank_conflicts
from .coop import CoopBlock
from .errors import (
    DeadlockError,
    DivergenceError,
    EmulatorError,
    EmulatorOutOfBoundsError,
    MisalignedAccessError,
    RaceError,
)
from .mode import needs_cooperation
from .program import _program
from .races import _GlobalRaces
from .state import _bind_args, _State
from .tma_store import check_stores_waited

__all__ = [
    "BankConflictReport",
    "DeadlockError",
    "DivergenceError",
    "EmulatorError",
    "EmulatorOutOfBoundsError",
    "MisalignedAccessError",
    "RaceError",
    "count_bank_conflicts",
    "run_thread_kernel",
]

MAX_LANES = 1 << 16  # lanes per batch: bounds the memory of per-lane values
_MAX_SMEM_BATCH = 64 << 20  # bytes of shared memory per batch (and 8 MiB when tracking races)



def run_thread_kernel(kernel: th.ThreadKernel, args: list, *, dyn: dict | None = None,
                      check_races: bool = True, bank_counter=None) -> None:
    """Execute ``kernel`` on ``args`` (NumPy arrays for buffer parameters, C-contiguous, written in
    place; Python scalars for scalar parameters).  ``dyn`` maps ``kernel.dyn_vars`` (or their names)
    to ints; missing ones are read from the argument shapes.  ``check_races`` (default on) runs the
    shared and global memory race detectors (off: faster, and a race shows only as a wrong
    answer); kernels run cooperatively (see ``mode.py``) always track the
    ordering of shared memory between warps.  ``bank_counter`` (a ``bank_conflicts.BankCounter``)
    collects the shared-memory bank conflicts of every access (see ``bank_conflicts.py``)."""
    prog = _program(kernel)
    globals_, scalars = _bind_args(kernel, list(args), dyn)
    if kernel.attrs.get("shared_at_launch") is not None:  # a shared buffer sized by the arguments: must fit
        from ...ir.analysis import shared_bytes_at_launch

        shared_bytes_at_launch(kernel.attrs["shared_at_launch"], {v: int(x) for v, x in scalars.items()},
                               kernel.shared_bytes, kernel.attrs.get("source_func") or kernel.name)
    if prog.body is None:  # a kernel whose body does nothing (an empty loop): nothing to run
        return
    with np.errstate(all="ignore"):  # inactive lanes may divide by zero or overflow; ignored
        grid = prog.eval_grid(scalars)
        nblocks = grid[0] * grid[1] * grid[2]
        if kernel.attrs.get("cluster_dims"):
            cluster_blocks(kernel, grid)  # whole clusters, or the error the launch would give
        T = kernel.num_threads
        S = kernel.shared_bytes
        per_batch = max(1, MAX_LANES // T)
        if S:
            per_batch = max(1, min(per_batch, (_MAX_SMEM_BATCH >> (3 if check_races else 0)) // S))
        if _block_dependent_loops(kernel):
            # loop bounds that differ between blocks (causal attention's trip count), or an async-copy
            # wait under a condition that does, would make the lanes of a multi-block batch diverge
            # around barriers and async-copy waits: one block per batch keeps them uniform
            per_batch = 1
        coop = prog.cooperative
        if coop is None:
            coop = prog.cooperative = needs_cooperation(kernel)
        if coop:
            # synchronisation under divergent control flow: every block warp by warp; the blocks of
            # a thread-block cluster together
            W = kernel.target.warp_size if kernel.target is not None else 32
            for blocks in cluster_blocks(kernel, grid):
                CoopBlock(prog, kernel, grid, blocks, globals_, scalars, W, banks=bank_counter).run(prog.body)
            return
        graces = _GlobalRaces() if check_races else None  # one for every batch: made once
        for first in range(0, nblocks, per_batch):
            nb = min(per_batch, nblocks - first)
            st = _State(prog, kernel, grid, first, nb, globals_, scalars, check_races, graces=graces,
                        banks=bank_counter)
            prog.body(st)
            check_stores_waited(st, lambda j, st=st: f"block {st.first + j}")


def cluster_blocks(kernel, grid) -> list:
    """The linear indices of the blocks to run together, per cluster in rank order (one block each
    without ``cluster_dims``).  A grid that is not whole clusters is an error, as the launch is."""
    from ...ir.visitor import walk as _walk
    from .errors import EmulatorError

    dims = kernel.attrs.get("cluster_dims")
    gx, gy, gz = (int(g) for g in grid)
    if not dims:
        uses = []
        _walk(kernel.body, lambda s: uses.append(s) if isinstance(s, th.ClusterBarrier) or
              isinstance(s, th.MbarrierArrive) and s.cta is not None or
              isinstance(s, th.TmaLoad) and s.multicast is not None else None)
        if uses:
            raise EmulatorError(f"{type(uses[0]).__name__} (a thread-block cluster feature) in a kernel without "
                                "cluster_dims: not supported")
        return [[b] for b in range(gx * gy * gz)]
    cx, cy, cz = (int(d) for d in dims)
    if gx % cx or gy % cy or gz % cz:
        raise EmulatorError(f"grid {(gx, gy, gz)} is not whole clusters of {(cx, cy, cz)}: the launch would fail")
    out = []
    for z0 in range(0, gz, cz):
        for y0 in range(0, gy, cy):
            for x0 in range(0, gx, cx):
                out.append([(x0 + a) + gx * ((y0 + b) + gy * (z0 + c))
                            for c in range(cz) for b in range(cy) for a in range(cx)])
    return out


def _differs_between_blocks(e) -> bool:
    from ...ir.visitor import loads_in

    return bool(loads_in(e)) or any(v.kind not in ("dyn", "param") for v in free_vars(e))


# the statements lockstep mode needs every lane of a batch to reach together (an async-copy wait; the
# mbarrier-guarded TMA pipeline: a persistent tile loop whose last round some blocks of a batch skip)
_BATCH_UNIFORM = (th.AsyncWait, th.MbarrierInit, th.MbarrierWait, th.TmaLoad, th.TmaStore, th.TmaStoreCommit,
                  th.TmaStoreWait)


def _waits_async(s) -> bool:
    found = []
    walk(s, lambda x: found.append(x) if isinstance(x, _BATCH_UNIFORM) else None)
    return bool(found)


def _block_dependent_loops(kernel) -> bool:
    found = [False]

    def f(st):
        if isinstance(st, t.For):
            for v in free_vars(st.start) | free_vars(st.extent):
                if v.kind not in ("dyn", "param"):
                    found[0] = True
        elif isinstance(st, t.IfThenElse) and _differs_between_blocks(st.cond) and _waits_async(st):
            found[0] = True  # (block-sparse GEMM: a masked copy waited for in a pipelined loop)

        elif isinstance(st, th.GlobalDecl):
            found[0] = True  # T.make_tensor on an address: one address per block, one block per batch

    walk(kernel.body, f)
    return found[0]


