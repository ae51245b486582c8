"""Which values and conditions are the same in every thread: the one per-thread/uniformity analysis.

The frontend (forming thread partitions), the verifier (refusing tile operations where no thread
set performs them), barrier insertion and lowering all ask the same questions, answered here:

* ``Uniformity(func).reason(e, region)`` is None when every thread of ``region`` (a
  ``ThreadPartition``, or None for the whole block) computes the same value of ``e``; otherwise it
  says why not ("the thread index", "alloc_var v, which holds per-thread values", ...).  The
  per-thread sources are the thread index, fragments, and ``local``/``var`` buffers or let-bound
  names that received a per-thread value (found by a fixpoint over the whole kernel: a store inside
  ``T.Parallel``, under a per-thread condition, of a per-thread value, or inside another partition
  makes the buffer per-thread for everyone else).
* ``thread_range(cond, tid, base, count)`` evaluates a condition that depends on the thread index
  only (and constants) over threads ``base .. base+count-1`` and returns the contiguous range
  ``(first, n)`` it selects, ``(0, 0)`` for none, or None when the selection is not contiguous or
  the condition depends on anything else.
* ``Uniformity.level(e, region)``: "block", "warpgroup" (the same in each aligned group of 128
  threads: ``tx // 128``), "warp" (each aligned 32: ``tx // 32``) or "thread".
* ``warp_aligned(first, n, warp)``: a range named barriers can synchronize.
"""

from __future__ import annotations

import numpy as np

from . import expr as E
from . import tile as t
from . import tile_ops
from .visitor import child_stmts, walk_expr


def collective_kind(s) -> str | None:
    """A short name when ``s`` must be executed by a whole thread set together (tile operations,
    block/named barriers, register rebalancing), else None."""
    from . import thread as th

    if isinstance(s, t.ParallelFor):
        return "T.Parallel"
    name = tile_ops.collective_name(s)  # tile ops: their declarations say
    if name is not None:
        return name
    if isinstance(s, th.Barrier):
        return "a barrier"
    if isinstance(s, th.NamedBarrier):
        return "a named barrier"
    if isinstance(s, th.SetMaxNReg):
        return "T.set_max_nreg"
    if isinstance(s, th.ClusterBarrier):
        return "a cluster barrier (T.cluster_sync)"
    if isinstance(s, th.MbarrierInit):
        return "T.alloc_barrier"
    return None


def first_collective(s):
    """The first statement in tree ``s`` that needs a whole thread set (see ``collective_kind``)."""
    stack = [s]
    while stack:
        x = stack.pop()
        if x is None:
            continue
        if collective_kind(x) is not None:
            return x
        if isinstance(x, t.ThreadPartition):
            continue  # a nested partition names its own thread set
        stack.extend(reversed(child_stmts(x)))
    return None


class Uniformity:
    """Per-thread sources of one kernel (see the module docstring)."""

    def __init__(self, func_or_body):
        body = func_or_body.body if isinstance(func_or_body, t.PrimFunc) else func_or_body
        kernels = [s for s in (body.stmts if isinstance(body, t.SeqStmt) else [body]) if isinstance(s, t.Kernel)]
        self.tid = kernels[0].attrs.get("thread_var") if kernels else None
        self.nthreads = kernels[0].num_threads if kernels else 0
        self.per_thread: dict = {}  # buffer or let Var -> reason
        self.written_in: dict = {}  # var/local buffer -> set of ThreadPartition nodes (None: block level)
        changed = True
        while changed:
            self._changed = False
            self._visit(body, None, None)
            changed = self._changed

    # ---------------------------------------------------------------- queries
    def reason(self, e, region=None) -> str | None:
        """None when ``e`` is the same in every thread of ``region``; else what makes it differ."""
        found: list = []

        def f(x):
            if found:
                return
            if isinstance(x, E.Call) and x.name.startswith("rng_"):
                found.append("a random number (T.rng_*), drawn from each thread's own generator")
            elif isinstance(x, E.Call) and x.name.startswith("warp_shfl_"):
                # not per-thread in value, but every lane must execute it: never one thread for all
                found.append("a warp shuffle (T.shfl_*), which every lane of the warp executes")
            elif isinstance(x, E.Var):
                if x.kind == "thread":
                    found.append("the thread index")
                elif x in self.per_thread:
                    found.append(f"{x.name}, which holds {self.per_thread[x]}")
            elif isinstance(x, E.Load):
                b = x.buffer
                if b.scope == "fragment":
                    found.append(f"fragment {b.name} (each thread holds its own elements)")
                elif b in self.per_thread:
                    found.append(f"{_what(b)} {b.name}, which holds {self.per_thread[b]}")
                elif b.scope in ("local", "var"):
                    other = [r for r in self.written_in.get(b, ()) if self._splits(r, region)]
                    if other:
                        found.append(f"{_what(b)} {b.name}, which is written by threads "
                                     f"{_range_text(other[0])} only")

        walk_expr(e, f)
        return found[0] if found else None

    def _splits(self, writer, region) -> bool:
        """Does a write by partition ``writer`` (None: the block) reach only some threads of
        ``region``?  Each thread holds its own copy of a local/var buffer, so a write by threads
        outside ``region`` (a sibling partition: the producer when asking about the consumers)
        leaves the region's copies as they were, and one by a superset reaches all of them."""
        if writer is None or writer is region:
            return False
        lo, n = (0, self.nthreads) if region is None else (region.base, region.count)
        if not (isinstance(writer.base, int) and isinstance(writer.count, int) and isinstance(lo, int)
                and isinstance(n, int)):
            return True  # ranges not known here: assume the worst
        w_lo, w_hi, hi = writer.base, writer.base + writer.count, lo + n
        if w_hi <= lo or hi <= w_lo:
            return False  # disjoint: the region's threads never run this write
        return not (w_lo <= lo and hi <= w_hi)

    def is_uniform(self, e, region=None) -> bool:
        return self.reason(e, region) is None

    def level(self, e, region=None) -> str:
        """The widest aligned thread group within which ``e`` is the same: "block", "warpgroup",
        "warp" or "thread" (warp/warpgroup levels are found for expressions of the thread index alone)."""
        if self.is_uniform(e, region):
            return "block"
        if self.tid is None:
            return "thread"
        ids = np.arange(self.nthreads, dtype=np.int64)
        try:
            vals = np.broadcast_to(np.asarray(_eval(e, self.tid, ids)), ids.shape)
        except _NotStatic:
            return "thread"
        for name, size in (("warpgroup", 128), ("warp", 32)):
            if self.nthreads % size == 0 and (vals.reshape(-1, size) == vals.reshape(-1, size)[:, :1]).all():
                return name
        return "thread"

    # ---------------------------------------------------------------- fixpoint
    def _mark(self, key, why: str) -> None:
        if key not in self.per_thread:
            self.per_thread[key] = why
            self._changed = True

    def _visit(self, s, region, divergent: str | None) -> None:
        if s is None:
            return
        if isinstance(s, t.SeqStmt):
            for x in s.stmts:
                self._visit(x, region, divergent)
            return
        if isinstance(s, t.ThreadPartition):
            self._visit(s.body, s, divergent)
            return
        if isinstance(s, t.ParallelFor):
            self._visit(s.body, region, divergent or _IN_PARALLEL)
            return
        if isinstance(s, t.IfThenElse):
            why = self.reason(s.cond, region)
            inner = divergent or (f"a value stored under a condition on {why}" if why else None)
            self._visit(s.then_body, region, inner)
            self._visit(s.else_body, region, inner)
            return
        if isinstance(s, t.For):
            why = self.reason(s.start, region) or self.reason(s.extent, region)
            if why:
                self._mark(s.var, f"a loop index with per-thread bounds ({why})")
            self._visit(s.body, region, divergent or (f"a value stored in a loop bounded by {why}" if why else None))
            return
        if isinstance(s, t.LetStmt):
            why = divergent or self.reason(s.value, region)
            if why:
                self._mark(s.var, why if divergent else f"a per-thread value ({why})")
            return
        if isinstance(s, (t.BufferStore, t.Alloc)):
            b = s.buffer
            if b.scope not in ("local", "var"):
                return
            self.written_in.setdefault(b, set()).add(region)
            vals = list(s.indices) + [s.value] if isinstance(s, t.BufferStore) else (
                [s.init] if s.init is not None else [])
            why = divergent
            if why == _IN_PARALLEL and b.attrs.get("uniform_table"):
                # a block-wide table (frontend/uniform_fragments.py): every thread runs all the
                # iterations of the loops filling it (infer_layouts' WholeLayout), so it is per-thread
                # only if a stored value is
                why = None
            for v in vals:
                why = why or (lambda r: f"a per-thread value ({r})" if r else None)(self.reason(v, region))
            if why:
                self._mark(b, why)
            return
        for c in child_stmts(s):
            self._visit(c, region, divergent)


_IN_PARALLEL = "a value stored inside T.Parallel (each thread runs its own iterations)"


def _what(b) -> str:
    return {"var": "alloc_var", "local": "local buffer"}.get(b.scope, b.scope)


def _range_text(p) -> str:
    return f"{p.base}..{p.base + p.count - 1}"


# --------------------------------------------------------------------------------------------
# thread ranges


def thread_range(cond, tid, base: int, count: int):
    """The contiguous range ``(first, n)`` of threads among ``base .. base+count-1`` for which
    ``cond`` holds, ``(0, 0)`` when none does, or None when ``cond`` depends on more than the thread
    index or selects a non-contiguous set."""
    ids = np.arange(base, base + count, dtype=np.int64)
    try:
        val = _eval(cond, tid, ids)
    except _NotStatic:
        return None
    sel = np.broadcast_to(np.asarray(val, dtype=bool), ids.shape)
    idx = np.flatnonzero(sel)
    if idx.size == 0:
        return (0, 0)
    first, last = int(idx[0]), int(idx[-1])
    if last - first + 1 != idx.size:
        return None
    return (base + first, idx.size)


def warp_aligned(first: int, n: int, warp: int = 32) -> bool:
    return n > 0 and first % warp == 0 and n % warp == 0


class _NotStatic(Exception):
    pass


_BIN = {
    "+": np.add, "-": np.subtract, "*": np.multiply, "<": np.less, "<=": np.less_equal, ">": np.greater,
    ">=": np.greater_equal, "==": np.equal, "!=": np.not_equal, "&": np.bitwise_and, "|": np.bitwise_or,
    "^": np.bitwise_xor, "and": np.logical_and, "&&": np.logical_and, "or": np.logical_or,
    "||": np.logical_or, "<<": np.left_shift, ">>": np.right_shift,
}


def _eval(e, tid, ids):
    if isinstance(e, E.Const):
        return e.value
    if isinstance(e, E.Var):
        if e is tid:
            return ids
        raise _NotStatic
    if isinstance(e, E.Cast):
        v = _eval(e.a, tid, ids)
        return np.asarray(v).astype(bool) if e.dtype == "bool" else v
    if isinstance(e, E.UnOp):
        v = _eval(e.a, tid, ids)
        if e.op in ("!", "not"):
            return np.logical_not(v)
        if e.op == "neg":
            return np.negative(v)
        raise _NotStatic
    if isinstance(e, E.BinOp):
        a, b = _eval(e.a, tid, ids), _eval(e.b, tid, ids)
        if e.op in ("//", "/") and not E.is_const(e.b):
            raise _NotStatic
        if e.op in ("//", "/"):
            return np.floor_divide(a, b)
        if e.op == "%":
            return np.mod(a, b)
        if e.op == "min":
            return np.minimum(a, b)
        if e.op == "max":
            return np.maximum(a, b)
        fn = _BIN.get(e.op)
        if fn is None:
            raise _NotStatic
        return fn(a, b)
    if isinstance(e, E.Select):
        return np.where(_eval(e.cond, tid, ids), _eval(e.a, tid, ids), _eval(e.b, tid, ids))
    raise _NotStatic


def thread_sets(root, nthreads: int) -> dict:
    """Statement -> ``(base, count)`` of the threads that execute it (the block, or the innermost
    enclosing ``ThreadPartition``; a partition node itself belongs to its parent's set)."""
    out: dict = {}
    stack = [(root, (0, nthreads))]
    while stack:
        s, ts = stack.pop()
        if s is None:
            continue
        out[s] = ts
        inner = (s.base, s.count) if isinstance(s, t.ThreadPartition) else ts
        stack.extend((c, inner) for c in child_stmts(s))
    return out
