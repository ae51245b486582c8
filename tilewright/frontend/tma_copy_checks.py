"""Checks on the mbarriers of ``T.tma_copy`` that can be decided from the program text.

Needs: the Tile IR straight from the parser (``checks.check_prim_func`` calls it).
Guarantees: every mbarrier a ``T.tma_copy`` completes its bytes on is arrived on somewhere in the
kernel (``T.mbarrier_arrive`` / ``T.barrier_arrive`` / ``T.mbarrier_arrive_expect_tx``), else a
``CompileError`` at the copy's line.

Why: as in TileLang, ``T.tma_copy`` only raises the expected bytes of the barrier's current phase
and issues the loads; it does not arrive.  A phase completes when its arrive count is reached
*and* the bytes have landed, so a barrier nobody arrives on never completes and every wait on it
hangs the GPU.  Programs written for the earlier contract (the copy arrived by itself, barriers
counting one arrival per copy) read exactly like that, so they are refused with what to add.
Whether the arrivals match the count is a run-time property the emulator checks (over-arrival,
phases that never complete, an expect that no arrival of its phase follows).
"""

from __future__ import annotations

from ..errors import CompileError
from ..ir import thread as th
from ..ir import tile as t
from ..ir.visitor import walk


def check_tma_copy_barriers(func: t.PrimFunc) -> None:
    copies: list = []
    arrived: set = set()

    def f(s):
        if isinstance(s, t.Copy) and s.user_sync and s.barrier is not None:
            copies.append(s)
        elif isinstance(s, th.MbarrierArrive):
            arrived.add(s.bar)

    walk(func.body, f)
    for c in copies:
        bar = c.barrier[0]
        if bar not in arrived:
            raise CompileError(
                f"T.tma_copy into {c.dst.buffer.name} completes on mbarrier {bar.name}, which nothing in the kernel "
                "arrives on: T.tma_copy only adds the copy's bytes to the barrier's phase (it does not arrive), so "
                "the phase would never complete and a wait on it would hang", c.loc,
                hint=f"after the copies of a phase, arrive with T.barrier_arrive({bar.name}[...]) from the threads "
                "that run them, and give T.alloc_barrier that many arrivals (e.g. 128 for a warpgroup)")
