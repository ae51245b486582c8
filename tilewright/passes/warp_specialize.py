"""Pass ``warp_specialize``: a ``T.Pipelined`` GEMM mainloop becomes a producer warpgroup filling an
mbarrier-guarded ring with TMA and consumer threads computing from it (sm_90, behind the pass
config ``tw.warp_specialize``; the Hopper GEMM work makes it the default).

Needs: verified Tile IR, before ``pipeline_loops``; a target with TMA.
Applies to a kernel whose top-level statements contain one ``T.Pipelined`` loop (``num_stages``
>= 1) whose body is global -> shared tile copies that TMA can do (``tma_eligible``) followed by one
``T.gemm`` reading exactly those shared buffers, which nothing outside the loop touches, in a
kernel that never reads the thread index itself and whose thread count is whole warpgroups.
Any other kernel is returned unchanged (this is an optimization, never a change of meaning).

Guarantees, for ``S`` stages and ``T`` original threads (the block grows to ``T + 128``):

    block:     ring buffers A[S], B[S]; mbarriers full[S] (one arrival per TMA box) and
               empty[S] (T arrivals); thread 0 initialises both; block barrier
    producer:  ThreadPartition(0, 128):  for k: wait empty[k % S] for parity ((k // S) + 1) % 2
                                         (a fresh barrier passes the first round), then the TMA
                                         loads of iteration k into slot k % S arriving on full[k % S]
    consumers: ThreadPartition(128, T):  the statements before the loop; for k: wait full[k % S]
                                         for parity (k // S) % 2, the gemm on slot k % S, arrive on
                                         empty[k % S]; the statements after the loop

A slot is refilled only after every consumer thread has arrived on its ``empty`` barrier, i.e.
after its last reader is done with it: the asynchronous consumer frees the slot, not a block
barrier.  The emulator runs the result cooperatively (warps advance until they block) and checks
the protocol (parities, arrival counts, slot reuse).
"""

from __future__ import annotations

from ..ir import thread as th
from ..ir import tile as t
from ..ir.layout import tma_boxes
from ..ir.plans import PipelineRing
from ..ir.visitor import free_vars, map_stmt, walk
from .pipeline_loops import _buffers_touched_outside, _flatten, _restage, tma_eligible

PRODUCER_THREADS = 128  # one warpgroup: TMA is issued by its first warp


def warp_specialize(func: t.PrimFunc, ctx=None) -> t.PrimFunc:
    if ctx is None or not ctx.options.get("tw.warp_specialize") or not ctx.target.has("tma"):
        return func
    kernels = []
    walk(func.body, lambda s: kernels.append(s) if isinstance(s, t.Kernel) else None)
    if len(kernels) != 1:
        return func
    kernel = kernels[0]
    plan = _match(kernel, func)
    if plan is None:
        return func
    func.body = map_stmt(func.body, lambda s: _specialize(s, func, *plan) if s is kernel else None)
    return func


def _match(kernel: t.Kernel, func):
    """(loop, copies, gemm, top-level statements) when the kernel has the mainloop shape, else None."""
    threads = kernel.num_threads
    if threads % 128 or threads + PRODUCER_THREADS > 1024 or len(kernel.threads) != 1:
        return None
    tid = kernel.attrs.get("thread_var")
    if tid is not None and _uses_var(kernel.body, tid):
        return None  # the kernel reads its thread index: the renumbering would change its meaning
    top = _flatten(kernel.body)
    loops = [s for s in top if isinstance(s, t.For) and s.kind == "pipelined"]
    nested = []
    walk(kernel.body, lambda s: nested.append(s) if isinstance(s, (t.For, t.ThreadPartition)) and s not in top else 0)
    if len(loops) != 1 or any(isinstance(s, t.ThreadPartition) or s.kind == "pipelined" for s in nested):
        return None
    loop = loops[0]
    if loop.num_stages < 1:
        return None
    body = _flatten(loop.body)
    copies, rest = body[:-1], body[-1:]
    if not copies or not isinstance(rest[0], t.Gemm):
        return None
    gemm = rest[0]
    allocs = {s.buffer for s in top if isinstance(s, t.Alloc)}
    for c in copies:
        if not (isinstance(c, t.Copy) and c.src.buffer.scope == "global" and c.dst.buffer.scope == "shared"
                and c.dst.is_full() and c.dst.buffer in allocs and tma_eligible(c) and not c.disable_tma):
            return None
        for st in c.src.starts:
            if free_vars(st) - {loop.var} - set(func.params) - set(func.dyn_vars) - set(kernel.block_vars):
                return None
    ring = {c.dst.buffer for c in copies}
    if len(ring) != len(copies) or {gemm.a.buffer, gemm.b.buffer} != ring or gemm.clear_accum:
        return None
    if ring & _buffers_touched_outside(func.body, loop):
        return None
    return loop, copies, gemm, top


def _uses_var(root, var) -> bool:
    from ..ir.verifier import exprs_of

    found = []
    walk(root, lambda s: found.extend(e for e in exprs_of(s) if var in free_vars(e)))
    return bool(found)


def _specialize(kernel: t.Kernel, func, loop: t.For, copies: list, gemm: t.Gemm, top: list):
    stages = loop.num_stages
    consumers = kernel.num_threads
    loc = loop.loc
    name = loop.var.name
    full = t.Buffer(f"{name}_full", (stages,), "uint64", "shared", loc=loc)
    empty = t.Buffer(f"{name}_empty", (stages,), "uint64", "shared", loc=loc)
    new_bufs = {}
    for c in copies:
        old = c.dst.buffer
        nb = t.Buffer(old.name, (stages,) + tuple(old.shape), old.dtype, "shared", loc=old.loc)
        nb.attrs.update(old.attrs)
        func.plans.rings[nb] = PipelineRing(stages, True, full)
        new_bufs[old] = nb
    boxes = sum(tma_boxes(c.dst.buffer.shape, c.dst.buffer.dtype)[0] for c in copies)

    k = loop.var
    rel = k - loop.start
    slot = rel % stages
    round_ = rel // stages

    def tma_copy(c: t.Copy) -> t.Copy:
        nb = new_bufs[c.dst.buffer]
        dst = t.Region(nb, (slot,) + tuple(c.dst.starts), (1,) + tuple(c.dst.extents),
                       (0,) + tuple(d + 1 for d in c.dst.squeezed))
        return t.Copy(c.src, dst, c.loc, mode="tma", barrier=(full, slot), coalesced_width=c.coalesced_width)

    producer_loop = t.For(k, loop.start, loop.extent, t.SeqStmt([
        th.MbarrierWait(empty, slot, (round_ + 1) % 2, loc=loc),  # a fresh barrier passes round 0
        *[tma_copy(c) for c in copies]]), "serial", 0, loc, dict(loop.attrs))
    consumer_loop = t.For(k, loop.start, loop.extent, t.SeqStmt([
        th.MbarrierWait(full, slot, round_ % 2, loc=loc),
        _restage(t.SeqStmt([gemm]), new_bufs, slot),
        th.MbarrierArrive(empty, slot, loc=loc)]), "serial", 0, loc, dict(loop.attrs))

    allocs, before, after, seen_loop = [], [], [], False
    for s in top:
        if s is loop:
            seen_loop = True
        elif isinstance(s, t.Alloc):
            allocs.append(t.Alloc(new_bufs.get(s.buffer, s.buffer), s.init, loc=s.loc))
        elif isinstance(s, t.Annotate):
            allocs.append(s)  # block-index rasterization and layouts apply to the whole block
        else:
            (after if seen_loop else before).append(s)
    body = [*allocs, t.Alloc(full, loc=loc), t.Alloc(empty, loc=loc),
            th.MbarrierInit(full, boxes, loc=loc), th.MbarrierInit(empty, consumers, loc=loc), th.Barrier(loc=loc),
            t.ThreadPartition(0, PRODUCER_THREADS, "producer", t.SeqStmt([producer_loop]), loc),
            t.ThreadPartition(PRODUCER_THREADS, consumers, "consumer",
                              t.SeqStmt([*before, consumer_loop, *after]), loc)]
    attrs = dict(kernel.attrs, warp_specialized=(PRODUCER_THREADS, consumers, stages))
    return t.Kernel(kernel.grid, (consumers + PRODUCER_THREADS,), kernel.block_vars, t.SeqStmt(body), kernel.loc,
                    attrs)
