"""Which kernels the emulator runs cooperatively (warp by warp, ``coop.py``) instead of in lockstep.

Lockstep (every lane of a batch of blocks as one NumPy vector) is fast and right for kernels whose
synchronisation is reached by every thread of a block together.  A kernel needs cooperative
scheduling when a synchronisation statement sits under control flow that can differ between the
threads of a block (producer/consumer warp specialisation: ``if tid < 128: ... wait ...``), or when
it uses warp-level synchronisation that only makes sense per warp (mbarrier arrives, named
barriers, ``setmaxnreg``).  The test is conservative: a condition counts as thread-dependent
when it reads the thread index, a variable bound from one, shared memory or a register."""

from __future__ import annotations

from ...ir import expr as E
from ...ir import thread as th
from ...ir import tile as t
from ...ir.visitor import walk_expr
from .sync import COOPERATIVE_ONLY

# statements every thread of a block must reach together in lockstep mode
_BLOCK_SYNC = (th.Barrier, th.MbarrierInit, th.MbarrierWait, th.TmaLoad, th.AsyncCommit, th.AsyncWait, th.TmaStore,
               th.TmaStoreCommit, th.TmaStoreWait)


def needs_cooperation(kernel: th.ThreadKernel) -> bool:
    varying = {kernel.thread_var}

    def varies(e) -> bool:
        if e is None:
            return False
        hit = False

        def f(x):
            nonlocal hit
            if isinstance(x, E.Var) and x in varying or isinstance(x, E.Shuffle):
                hit = True
            elif isinstance(x, E.Load) and x.buffer.scope != "global":
                hit = True

        walk_expr(E.as_expr(e), f)
        return hit

    def visit(s, under: bool) -> bool:
        if s is None:
            return False
        if isinstance(s, t.SeqStmt):
            return any(visit(x, under) for x in s.stmts)
        if isinstance(s, t.LetStmt):
            if under or varies(s.value):
                varying.add(s.var)
            return False
        if isinstance(s, t.IfThenElse):
            u = under or varies(s.cond)
            return visit(s.then_body, u) or visit(s.else_body, u)
        if isinstance(s, t.For):
            u = under or varies(s.start) or varies(s.extent)
            if u:
                varying.add(s.var)
            return visit(s.body, u)
        if isinstance(s, COOPERATIVE_ONLY) or isinstance(s, th.TmaLoad) and s.multicast is not None:
            return True  # (a multicast lands in other blocks of the cluster: the cluster runs together)
        return under and isinstance(s, _BLOCK_SYNC)

    return visit(kernel.body, False)
