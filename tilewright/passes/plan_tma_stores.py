"""Pass ``plan_tma_stores``: shared -> global tile copies become TMA stores on targets with a tensor
memory accelerator (sm_90).

Needs: Tile IR after ``warp_specialize`` and ``pipeline_loops`` (so that the thread set running each
statement is final), before ``expand_tile_ops`` (which would turn the copy into per-thread stores).
Applies to a ``T.copy(S, G[...])`` whose source is a whole 2-D shared buffer ``S`` and whose
destination tile TMA can describe: the rules of the TMA loads (``pipeline_loops.tma_eligible`` on the
mirrored copy: same dtype, contiguous last global dimension, other strides multiples of 16 bytes,
static box extents of at most 256, a tile the TMA layout can hold), with every access of ``S`` made
by the thread set that runs the copy (the block, or one ``ThreadPartition``) and not under a
per-thread condition.  Anything else keeps the per-thread vectorized stores.  Off with
``tw.disable_tma`` / ``tl.disable_tma_lower``, ``optimize_level`` < 2 or ``T.copy(disable_tma=True)``.

Guarantees, for each eligible copy (``mode="tma_store"``):

    fence.proxy.async (every thread of the set: its writes of S become visible to the TMA); barrier
    the copy: one thread issues one bulk tensor store per 128-byte column block of S, then commits
              (one group per copy)
    ... before any later statement that writes S while a store may still read it:
    wait_group.read n (the issuing thread); barrier -- n is the number of groups committed after the
              last store of S when that is known (the stores since then are a straight run of
              statements: no loop back edge or branch merge in between), else 0
    ... at the end of the thread set's body (the kernel, or the partition): wait_group.read 0

So a store overlaps whatever follows it up to the next write of ``S`` (in a persistent kernel, the
next tile's mainloop), and the block never exits while the TMA still reads its shared memory.  Two
staging buffers written in turn (``kernels.gemm.store_staged`` with a pair) wait with n = 1: the
store of one overlaps the writing of the other.  The
source buffer takes the TMA layout (``infer_layouts``); ragged edges need no mask (the TMA clips).
"""

from __future__ import annotations

from ..ir import thread as th
from ..ir import tile as t
from ..ir.tile_ops import buffer_accesses
from ..ir.uniformity import Uniformity, thread_sets
from ..ir.visitor import child_stmts, map_stmt, walk


def plan_tma_stores(func: t.PrimFunc, ctx=None) -> t.PrimFunc:
    if not tma_stores_enabled(ctx):
        return func
    kernels = []
    walk(func.body, lambda s: kernels.append(s) if isinstance(s, t.Kernel) else None)
    if len(kernels) != 1:
        return func
    kernel = kernels[0]
    sets = thread_sets(kernel, kernel.num_threads)
    uniform = Uniformity(func)
    stores = [c for c in _copies_out(kernel, uniform) if _eligible(c, func)]
    staged: dict = {}  # shared buffer -> thread set of its stores
    for c in stores:
        buf = c.src.buffer
        if staged.get(buf, sets[c]) != sets[c]:
            staged[buf] = None  # stores of one buffer from different thread sets: keep them plain
        else:
            staged.setdefault(buf, sets[c])
    for buf, ts in list(staged.items()):
        if ts is None or any(sets[s] != ts for s in _accessors(kernel, buf)):
            del staged[buf]  # a thread set other than the issuer's touches it: no wait would order it
    if not staged:
        return func
    chosen = {id(c) for c in stores if c.src.buffer in staged}
    new_kernel = _rewrite(kernel, chosen, set(staged), uniform)
    func.body = map_stmt(func.body, lambda s: new_kernel if s is kernel else None)
    return func


def tma_stores_enabled(ctx) -> bool:
    if ctx is None or not ctx.target.has("tma") or ctx.options.get("optimize_level", 2) < 2:
        return False
    return not (ctx.options.get("tw.disable_tma") or ctx.options.get("tl.disable_tma_lower"))


def tma_store_eligible(c: t.Copy) -> bool:
    """Whether TMA boxes can do shared -> global copy ``c`` (the load rules on the mirrored copy)."""
    from .pipeline_loops import tma_eligible

    if c.src.buffer.scope != "shared" or c.dst.buffer.scope != "global" or c.mode != "sync" or c.disable_tma:
        return False
    if c.src.buffer.ndim != 2 or not c.src.is_full() or c.src.buffer.static_shape() is None:
        return False
    return tma_eligible(t.Copy(c.dst, c.src, c.loc))


def _eligible(c: t.Copy, func) -> bool:
    return tma_store_eligible(c) and c.src.buffer not in func.plans.rings


def _copies_out(kernel: t.Kernel, uniform: Uniformity) -> list:
    """Shared -> global copies that every thread of their thread set reaches together (no per-thread
    ``if`` above them)."""
    out: list = []

    def visit(s, region):
        if s is None:
            return
        if isinstance(s, t.Copy) and s.src.buffer.scope == "shared" and s.dst.buffer.scope == "global":
            out.append(s)
            return
        if isinstance(s, t.IfThenElse) and not uniform.is_uniform(s.cond, region):
            return
        if isinstance(s, t.ParallelFor) or isinstance(s, t.For) and not _splittable(s, uniform, region):
            return
        inner = s if isinstance(s, t.ThreadPartition) else region
        for c in child_stmts(s):
            visit(c, inner)

    visit(kernel.body, None)
    return out


def _accessors(kernel: t.Kernel, buf) -> list:
    """The outermost statements below the kernel's containers that read or write ``buf``."""
    out: list = []

    def visit(s):
        if s is None:
            return
        if isinstance(s, (t.SeqStmt, t.Kernel, t.ThreadPartition, t.For)) or isinstance(s, t.IfThenElse):
            for c in child_stmts(s):
                visit(c)
            return
        if _touches(s, buf):
            out.append(s)

    visit(kernel.body)
    return out


def _touches(s, buf, writes_only: bool = False) -> bool:
    from ..ir.verifier import exprs_of
    from ..ir.visitor import loads_in

    found = []

    def f(x):
        for b, w in buffer_accesses(x):
            if b is buf and (w or not writes_only):
                found.append(x)
        if isinstance(x, t.BufferStore) and x.buffer is buf:
            found.append(x)
        if not writes_only and any(ld.buffer is buf for e in exprs_of(x) for ld in loads_in(e)):
            found.append(x)

    walk(s, f)
    return bool(found)


def _contains(s, ids: set) -> bool:
    found = []
    walk(s, lambda x: found.append(x) if id(x) in ids else None)
    return bool(found)


# the pending-store state of ``_rewrite``: a tuple of the staged buffers whose store groups may still read
# their source, oldest first (exact: a straight run of statements since each), or UNKNOWN (some may, which
# and how many is not known: the next write of any staged buffer waits for all)
UNKNOWN = "unknown"


def _merge(a, b):
    """The state after either of two paths (a branch's arms, a loop run zero or more times)."""
    return a if a == b else UNKNOWN


def _groups_newer(state, written: list):
    """The ``wait_group.read`` count that lets a write of the buffers ``written`` go ahead (None: no store
    reads them): the groups committed after the last store of any of them."""
    if not written:
        return None
    if state == UNKNOWN:
        return 0
    last = [i for i, b in enumerate(state) if b in written]
    return len(state) - 1 - max(last) if last else None


def _rewrite(kernel: t.Kernel, chosen: set, bufs: set, uniform: Uniformity) -> t.Kernel:
    """The eligible copies become TMA stores; waits go before rewrites of their sources and at the end
    of each thread set's body that issues stores."""

    def fix(s, state, region):
        """(new statement(s) as a list, the pending-store state after them)."""
        if s is None:
            return [], state
        if isinstance(s, t.SeqStmt):
            out = []
            for x in s.stmts:
                nx, state = fix(x, state, region)
                out.extend(nx)
            return [t.SeqStmt(out, s.loc)], state
        if isinstance(s, t.Copy) and id(s) in chosen:
            # (no wait: an earlier store still reading the same buffer is harmless)
            store = t.Copy(s.src, s.dst, s.loc, mode="tma_store", coalesced_width=s.coalesced_width)
            after = UNKNOWN if state == UNKNOWN else state + (s.src.buffer,)
            return [th.FenceProxyAsync(loc=s.loc), th.Barrier(loc=s.loc), store], after
        if isinstance(s, t.For) and (_contains(s.body, chosen) or state) and _splittable(s, uniform, region):
            # the body's first iteration may follow an earlier one: it starts from UNKNOWN
            entry = UNKNOWN if state or _contains(s.body, chosen) else ()
            body, end = fix(s.body, entry, region)
            return [t.For(s.var, s.start, s.extent, _seq(body), s.kind, s.num_stages, s.loc, dict(s.attrs))], \
                _merge(state, end)
        if isinstance(s, t.IfThenElse) and uniform.is_uniform(s.cond, region) and (_contains(s, chosen) or state):
            a, pa = fix(s.then_body, state, region)
            b, pb = fix(s.else_body, state, region) if s.else_body is not None else ([], state)
            return [t.IfThenElse(s.cond, _seq(a), _seq(b) if s.else_body is not None else None, s.loc)], _merge(pa, pb)
        if isinstance(s, t.ThreadPartition) and _contains(s, chosen):
            body, after = fix(s.body, (), s)
            if after:
                body = body + [th.TmaStoreWait(0, loc=s.loc)]
            return [t.ThreadPartition(s.base, s.count, s.role, _seq(body), s.loc)], state
        if state:
            newer = _groups_newer(state, [b for b in bufs if _touches(s, b, writes_only=True)])
            if newer is not None:
                return _wait(getattr(s, "loc", None), newer) + [s], state[len(state) - newer:] if newer else ()
        return [s], state

    body, after = fix(kernel.body, (), None)
    if after:
        body = body + [th.TmaStoreWait(0, loc=kernel.loc)]
    return t.Kernel(kernel.grid, kernel.threads, kernel.block_vars, _seq(body), kernel.loc, dict(kernel.attrs))


def _splittable(loop: t.For, uniform: Uniformity, region) -> bool:
    """A loop whose bounds are the same for every thread of the set: barriers may go inside."""
    return uniform.is_uniform(loop.start, region) and uniform.is_uniform(loop.extent, region)


def _wait(loc, newer: int = 0) -> list:
    # the issuing thread waits until all but its ``newer`` latest store groups have read their buffers;
    # the barrier tells the others
    return [th.TmaStoreWait(newer, loc=loc), th.Barrier(loc=loc)]


def _seq(stmts: list):
    return stmts[0] if len(stmts) == 1 else t.SeqStmt(stmts)
