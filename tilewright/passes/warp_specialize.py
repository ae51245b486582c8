"""Pass ``warp_specialize``: a ``T.Pipelined`` GEMM mainloop becomes a producer warpgroup filling an
mbarrier-guarded ring with TMA and consumer threads computing from it.

When: by default on sm_90a (targets with wgmma) at ``optimize_level`` >= 2; TileLang's pass configs
``tl.disable_warp_specialized`` and ``tl.disable_tma_lower`` (or ``tw.disable_tma``) turn it off;
``tw.warp_specialize`` is an explicit choice (true: also on other TMA targets, sm_90; false: off).

Needs: verified Tile IR, before ``pipeline_loops``; a target with TMA.
Applies to a kernel whose top-level statements contain one ``T.Pipelined`` loop (``num_stages``
>= 1) whose body is global -> shared tile copies that TMA can do (``tma_eligible``) followed by one
``T.gemm`` reading exactly those shared buffers, which nothing outside the loop touches, in a
kernel that never reads the thread index itself and whose thread count is whole warpgroups.
The K loop's bounds and the copies' coordinates must be what the producer can compute: the loop
variable, parameters, block indices, global tensors the kernel never writes and never-assigned
``T.alloc_var`` scalars initialised from those (a scalar the program assigns before the loop is
left to ``warp_specialize_loop``, whose producer recomputes such a prelude).
The *persistent form* is accepted too: no top-level pipelined loop, but one top-level serial
*tile loop* whose body holds that ``T.Pipelined`` K loop among its top-level statements (the
statements before it: index math, ``T.clear``; after it: the epilogue, the copy-out).  Then the
tile loop's bounds and the K loop's bounds must be tile-invariant (parameters, block indices, no
memory reads: the K trip count is the same for every tile) -- or, for a data-parallel + stream-K
GEMM (``kernels/gemm.matmul_streamk``), the trip count may be *two-phase*,
``T.if_then_else(r < P, E1, E2)`` with ``P``, ``E1``, ``E2`` tile-invariant (whole tiles first, then
K slices; ``_tile_steps``) -- and the TMA coordinates may also read
the tile loop's variable and scalars ``LetStmt``-bound before the K loop from such values without
memory reads (the producer recomputes them); anything else is declined.
Any other kernel is returned unchanged (this is an optimization, never a change of meaning).

Guarantees, for ``S`` stages and ``T`` original threads (the block grows to ``T + 128``):

    block:     ring buffers A[S], B[S]; mbarriers full[S] (one arrival per TMA box) and
               empty[S] (T arrivals; T / 32, one per warp, for wgmma consumers); thread 0
               initialises both; block barrier
    producer:  ThreadPartition(0, 128):  (setmaxnreg.dec;) its first warp, ThreadPartition(0, 32):
                                         for k: wait empty[k % S] for parity ((k // S) + 1) % 2
                                         (a fresh barrier passes the first round), then the TMA
                                         loads of iteration k into slot k % S arriving on full[k % S]
    consumers: ThreadPartition(128, T):  the statements before the loop; for k: wait full[k % S]
                                         for parity (k // S) % 2, the gemm on slot k % S, arrive on
                                         empty[k % S]; the statements after the loop

Persistent form: both roles run the tile loop ``for r``; the producer's body is the recomputed
scalars then its K loop, the consumers' is the statements before the K loop, their K loop, the
drain below, the statements after it.  Every ``k`` above is then the block's running K-step count
``(r - r0) * k_iters + (k - k0)`` (two-phase: the steps of every earlier tile of either phase
plus ``k - k0``), so the ring's slots and phases continue across tiles and the
producer fills slots with the next tile's K slices while the consumers run this tile's epilogue;
the release of the previous step's slot happens from a tile's second K step on, and the drain
(after each tile's K loop) releases the tile's last slot.

When ``plan_gemms`` will give the gemm to wgmma and S >= 2, the consumers overlap K steps: the
gemm of iteration k ends with ``wait_group(1)`` (``plans.wgmma_in_flight``), which leaves its own
group running and guarantees the group of iteration k - 1 has read its operands, so the loop then
arrives on empty[(k - 1) % S] (from the second iteration on; one elected lane per warp, after the
warp's wait); after the loop ``wait_group(0)``
completes the accumulator and the last slot is released.  (S = 1 keeps the synchronous release:
the producer would wait for the very slot the consumer is about to read.)

Ping-pong (pass config ``tw.gemm_pingpong``, ``warp_specialize_pingpong.py``, its own contract): in the
persistent form, a kernel written for one consumer warpgroup gets two that take the tiles in turn, each
with whole tiles, over the same ring (the block grows to ``128 + 2 * 128``).

Thread-block clusters (``cluster_multicast.py``): in a kernel launched in clusters of two blocks
along one grid axis whose blocks load the same operand tile (its coordinates do not read that axis's
block index), each block's producer loads half of that tile with ``.multicast::cluster`` into both
blocks; ``full[s]`` then expects the whole stage's bytes, ``empty[s]`` counts the consumers of both
blocks (each releasing warp arrives on ``empty[s]`` of every block of the cluster), a cluster
barrier follows the mbarrier initialisation, and the producer ends waiting for every slot's last
release (its *tail*: the block exits only after its peer's last arrivals on its barriers).

A slot is refilled only after every consumer thread has arrived on its ``empty`` barrier, i.e.
after its last reader is done with it: the asynchronous consumer frees the slot, not a block
barrier.  When the producer's shared memory (the mbarriers) would not fit, the kernel is returned
unchanged.  The emulator runs the result cooperatively (warps advance until they block) and checks
the protocol (parities, arrival counts, slot reuse).

A programmatic-launch wait (``T.pdl_sync``, a ``GridDependency``) or trigger among the top-level statements
before the loop is the whole block's: it goes ahead of the ring's set-up, before both roles, so that the
producer's TMA loads, like everything the consumers do, come after the wait (``passes/pdl_prologue`` may
then move the ring's set-up ahead of it).  (Left among the consumers' statements, the producer would read A
and B before the previous kernel finished writing them.)

The kernel's top-level declarations move to the top of the block (both roles see them); a
``T.alloc_var`` initial value that reads what earlier statements computed stays where it was
written, as a store in the consumers' part (``hoisted_alloc``; ``warp_specialize_loop`` shares it).
"""

from __future__ import annotations

from ..ir import expr as E
from ..ir import thread as th
from ..ir import tile as t
from ..ir.layout import tma_boxes
from ..ir.plans import PipelineRing
from ..ir.visitor import free_vars, loads_in, map_stmt, walk
from . import warp_specialize_pingpong as pp
from .cluster_multicast import multicast_plan, releases_to_cluster, share_of
from .pipeline_loops import _buffers_touched_outside, _buffers_touched_shallow, _flatten, _restage, tma_eligible

PRODUCER_THREADS = 128  # one warpgroup (setmaxnreg works on whole warpgroups) ...
ISSUER_THREADS = 32  # ... of which the first warp runs the producer loop; the other three idle
WGMMA_GROUPS_IN_FLIGHT = 1  # wgmma groups a consumer leaves running while it issues the next K step
PRODUCER_REGISTERS = 40  # per thread of the producer warpgroup after setmaxnreg.dec (sm_90a)


def warp_specialize(func: t.PrimFunc, ctx=None) -> t.PrimFunc:
    if ctx is None or not ws_enabled(ctx.target, ctx.options):
        return func
    kernels = []
    walk(func.body, lambda s: kernels.append(s) if isinstance(s, t.Kernel) else None)
    if len(kernels) != 1:
        return func
    kernel = kernels[0]
    plan = _match(kernel, func)
    if plan is None:
        return func
    rings: dict = {}  # the plans the new kernel needs, recorded only if it is kept
    in_flight: dict = {}
    new_kernel = _specialize(kernel, func, ctx, rings, in_flight, *plan)
    if _declared_shared(new_kernel) > ctx.target.max_shared_bytes:
        return func  # the mbarriers tipped the shared memory over: keep the plain pipelined loop
    func.plans.rings.update(rings)
    for g, n in in_flight.items():
        func.plans.wgmma_in_flight[g] = n
    func.body = map_stmt(func.body, lambda s: new_kernel if s is kernel else None)
    return func


def _declared_shared(kernel: t.Kernel) -> int:
    from ..ir import dtype as dt

    total = 0
    for s in _flatten(kernel.body):
        if isinstance(s, t.Alloc) and s.buffer.scope == "shared":
            n = 1
            for d in s.buffer.shape:
                n *= d if isinstance(d, int) else 0
            total = (total + 127) // 128 * 128 + n * dt.nbytes(s.buffer.dtype)
    return total


def ws_enabled(target, options) -> bool:
    """Whether the pass applies to eligible loops on ``target`` with pass configs ``options``."""
    options = options or {}
    if not target.has("tma") or options.get("tw.disable_tma") or options.get("tl.disable_tma_lower"):
        return False
    explicit = options.get("tw.warp_specialize")
    if explicit is not None:
        return bool(explicit)
    return (target.has("wgmma") and not options.get("tl.disable_warp_specialized")
            and options.get("optimize_level", 2) >= 2)


def _match(kernel: t.Kernel, func):
    """(loop, copies, gemm, top-level statements, tiles, lets) when the kernel has the mainloop shape,
    else None; ``tiles`` is (tile loop, its statements before / after the K loop) in the persistent
    form (else None) and ``lets`` the scalars the producer recomputes there."""
    threads = kernel.num_threads
    if threads % 128 or threads + PRODUCER_THREADS > 1024 or len(kernel.threads) != 1:
        return None
    tid = kernel.attrs.get("thread_var")
    if tid is not None and _uses_var(kernel.body, tid):
        return None  # the kernel reads its thread index: the renumbering would change its meaning
    if any(isinstance(s, t.Alloc) and s.buffer.attrs.get("address") for s in _flatten(kernel.body)):
        return None  # T.make_tensor on an address: its declaration must stay where the address is computed
    top = _flatten(kernel.body)
    tiles = None  # the persistent form: (outer serial tile loop, its statements before / after the K loop)
    level = top
    loops = [s for s in top if isinstance(s, t.For) and s.kind == "pipelined"]
    if not loops:
        outer = [s for s in top if isinstance(s, t.For) and s.kind == "serial"
                 and any(isinstance(x, t.For) and x.kind == "pipelined" for x in _flatten(s.body))]
        if len(outer) != 1:
            return None
        level = _flatten(outer[0].body)
        loops = [s for s in level if isinstance(s, t.For) and s.kind == "pipelined"]
        if len(loops) == 1:
            i = level.index(loops[0])
            tiles = (outer[0], level[:i], level[i + 1:])
    nested = []
    walk(kernel.body, lambda s: nested.append(s) if isinstance(s, (t.For, t.ThreadPartition)) and s not in level
         and (tiles is None or s is not tiles[0]) else 0)
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
    invariant = set(func.params) | set(func.dyn_vars) | set(kernel.block_vars)
    lets = []  # the scalars the producer recomputes (persistent form only)
    if tiles is None:
        # the producer runs only the K loop: its bounds and the copies' coordinates may read the
        # loop variable, parameters, block indices, read-only global tensors and variables whose
        # initial value moves up with them (hoisted_alloc) and that nothing assigns; not a variable
        # the program assigns before the loop (the producer would read it unassigned)
        computable = _producer_computable(kernel, func, top, invariant | {loop.var})
        if not all(computable(x) for x in (loop.start, loop.extent, *(st for c in copies for st in c.src.starts))):
            return None
    else:
        # the producer runs the tile loop too: everything its TMA coordinates and trip counts read
        # must be pure scalar arithmetic it can recompute (lets before the K loop, duplicated);
        # the K trip count must be the same for every tile (the ring counter is tile * k_iters + k),
        # or two-phase (_two_phase)
        outer_, before, _ = tiles
        for x in (outer_.start, outer_.extent):
            if loads_in(x) or free_vars(x) - invariant:
                return None
        if loads_in(loop.start) or free_vars(loop.start) - invariant:
            return None
        if (loads_in(loop.extent) or free_vars(loop.extent) - invariant) and \
                _two_phase(loop.extent, outer_.var, invariant) is None:
            return None
        known = invariant | {outer_.var}
        for s in before:
            if isinstance(s, t.LetStmt) and not loads_in(s.value) and not free_vars(s.value) - known:
                lets.append(s)
                known.add(s.var)
        for c in copies:
            for st in c.src.starts:
                if loads_in(st) or free_vars(st) - known - {loop.var}:
                    return None
    ring = {c.dst.buffer for c in copies}
    if len(ring) != len(copies) or {gemm.a.buffer, gemm.b.buffer} != ring or gemm.clear_accum:
        return None
    if ring & _buffers_touched_outside(func.body, loop):
        return None
    return loop, copies, gemm, top, tiles, lets


def _producer_computable(kernel: t.Kernel, func, top: list, known: set):
    """A test of whether an expression reads only what the producer knows: the variables ``known``,
    global tensors the kernel never writes, and ``T.alloc_var`` scalars never assigned whose initial
    value is itself of that kind (``hoisted_alloc`` moves those up, where every thread sees them)."""
    written: set = set()
    walk(kernel.body, lambda x: written.update(b for b, w in _buffers_touched_shallow(x) if w))
    readable: set = set()

    def computable(e) -> bool:
        e = E.as_expr(e)
        return not (free_vars(e) - known) and all(
            ld.buffer not in written and (ld.buffer.scope == "global" or ld.buffer in readable) for ld in loads_in(e))

    for s in top:  # (in program order: an initial value may read a scalar declared before it)
        if isinstance(s, t.Alloc) and s.buffer.scope == "var" and s.init is not None and s.buffer not in written \
                and computable(s.init):
            readable.add(s.buffer)
    return computable


def _two_phase(extent, var, invariant):
    """(P, E1, E2) when ``extent`` is ``select(var < P, E1, E2)`` with ``P``, ``E1``, ``E2`` free of
    memory reads and of everything but ``invariant`` values, else None."""
    from ..ir import expr as e

    if not (isinstance(extent, e.Select) and isinstance(extent.cond, e.BinOp) and extent.cond.op == "<"
            and extent.cond.a is var):
        return None
    parts = (extent.cond.b, extent.a, extent.b)
    if any(loads_in(x) or free_vars(x) - invariant for x in parts):
        return None
    return parts


def _tile_steps(outer: t.For, extent):
    """(K steps of the tiles before tile ``outer.var``, K steps of this one) of a persistent kernel:
    ``(r - r0) * extent`` for a tile-invariant trip count; for a two-phase one (``_two_phase``) the
    ``n1 = max(P - r0, 0)`` first tiles take ``E1`` steps and the rest ``E2``."""
    from ..ir import expr as e

    r, r0 = outer.var, outer.start
    phases = _two_phase(extent, r, set(free_vars(extent)) - {r})
    if phases is None:
        return (r - r0) * extent, extent
    p, e1, e2 = phases
    n1 = e.emax(p - r0, 0)
    done = e.select(r - r0 < n1, (r - r0) * e1, n1 * e1 + (r - r0 - n1) * e2)
    return done, extent


def _producer_tail(empty, stages: int, loop: t.For, tiles, done, loc) -> list:
    """The producer's last waits on ``empty``: for each slot, the release of its last K step (by the
    consumers of every block of the cluster), so that the block exits only after its peers' remote
    arrivals on its barriers (CUTLASS's producer tail does the same; a cluster barrier at the end
    cost a GPU-wide fence and a wait for the peer's epilogue).  ``total`` K steps ran in this block:
    slot ``s`` was last used in step ``s + S * ((total - 1 - s) // S)``, released in that phase."""
    from ..ir import expr as e
    from ..ir.visitor import substitute

    if tiles is None:
        total = e.as_expr(loop.extent)
    else:  # the steps of every tile: the running count after the last one
        outer = tiles[0]
        total = e.as_expr(substitute(e.as_expr(done), {outer.var: outer.start + outer.extent}))
    return [t.IfThenElse(total > s, th.MbarrierWait(empty, s, (total - 1 - s) // stages % 2, loc=loc), None, loc=loc)
            for s in range(stages)]


def _uses_var(root, var) -> bool:
    from ..ir.verifier import exprs_of

    found = []
    walk(root, lambda s: found.extend(e for e in exprs_of(s) if var in free_vars(e)))
    return bool(found)


def register_split(consumers: int, target, options=None):
    """(producer, consumer) per-thread register counts for ``setmaxnreg``, or None when moving
    registers gains the consumers nothing: when the launch already allows the 255 registers a
    thread can address (one consumer warpgroup) — with setmaxnreg the device compiler gives every
    thread the whole launch budget, which would cost such kernels their second resident block.
    The block's registers are what the launch gives it:
    ``launch`` per thread (the register file over the block's threads, or over the blocks per SM
    asked with ``tw.min_blocks_per_sm``, at most 255, a multiple of 8) for all ``consumers + 128``
    threads; the producer warpgroup (TMA issue and mbarrier waits only) keeps
    ``PRODUCER_REGISTERS`` and the consumers share the rest, so that
    ``128 * producer + consumers * consumer <= launch * (consumers + 128)``: the increase never
    waits for registers nobody frees."""
    min_blocks = int((options or {}).get("tw.min_blocks_per_sm") or 1)
    total = consumers + PRODUCER_THREADS
    launch = min(target.register_file_per_sm // (min_blocks * total), target.registers_per_thread) // 8 * 8
    producer = PRODUCER_REGISTERS
    if launch <= producer or launch >= target.registers_per_thread // 8 * 8:
        return None
    consumer = min((launch * total - PRODUCER_THREADS * producer) // consumers // 8 * 8, 256)
    return (producer, consumer) if consumer > launch else None


def _plans_wgmma(staged, consumers: int, ctx) -> bool:
    """Whether ``plan_gemms`` will give the consumers' gemm to wgmma (the same question it answers)."""
    from ..errors import CompileError
    from .plan_gemms import plan_gemm

    try:
        plan = plan_gemm(_flatten(staged)[0], consumers, ctx.target, ctx.options, first_thread=PRODUCER_THREADS)
    except CompileError:
        return False  # plan_gemms will say so
    return plan.family == "wgmma"


def hoisted_alloc(s: t.Alloc, buf, func, kernel: t.Kernel, kept: set) -> tuple:
    """(declaration, initialization or None) for a top-level ``Alloc`` that warp specialization
    moves to the top of the block, above the statements it followed (called in program order;
    ``kept`` collects the variables whose initial value moved up with them).  A ``T.alloc_var``
    whose initial value reads anything those statements may have computed (a variable assigned
    in the kernel, a let, memory the kernel writes) keeps its initialization where it stood, as
    a store for the consumers (who run those statements); an initial value made of parameters,
    block indices, global tensors the kernel never writes and never-assigned variables of that
    kind moves up with the declaration, so every thread (the producer too) sees it."""
    if s.init is None or buf.scope != "var":
        return t.Alloc(buf, s.init, loc=s.loc), None
    init = E.as_expr(s.init)
    invariant = set(func.params) | set(func.dyn_vars) | set(kernel.block_vars)
    written: set = set()
    walk(kernel.body, lambda x: written.update(b for b, w in _buffers_touched_shallow(x) if w))
    if not (free_vars(init) - invariant) and all(
            ld.buffer not in written and (ld.buffer.scope == "global" or ld.buffer in kept) for ld in loads_in(init)):
        kept.add(s.buffer)
        return t.Alloc(buf, s.init, loc=s.loc), None
    return t.Alloc(buf, None, loc=s.loc), t.BufferStore(buf, (E.as_expr(0),), s.init, loc=s.loc)


def _specialize(kernel: t.Kernel, func, ctx, rings: dict, in_flight: dict, loop: t.For, copies: list, gemm: t.Gemm,
                top: list, tiles, lets: list):
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
        rings[nb] = PipelineRing(stages, True, full)
        new_bufs[old] = nb
    boxes = sum(tma_boxes(c.dst.buffer.shape, c.dst.buffer.dtype)[0] for c in copies)
    # a cluster of 2 along a grid axis whose blocks load the same tiles: each loads its share of them and
    # multicasts it to both (cluster_multicast.py); the ring's slots are then released cluster-wide
    plan = multicast_plan(kernel, loop, copies, tiles, ctx.target, lets)
    sharers, shared = plan if plan is not None else (1, [])

    def released(arrive):
        return [arrive] if sharers == 1 else releases_to_cluster(arrive, sharers)

    k = loop.var
    rel = k - loop.start
    # the ring position: K steps run so far in this block (over every earlier tile of a persistent
    # kernel too, whose K trip count is the same for every tile), so phases continue across tiles
    # (two-phase trip counts: ``_tile_steps``)
    done = _tile_steps(tiles[0], loop.extent)[0] if tiles is not None else None
    it = rel if tiles is None else done + rel
    slot = it % stages
    round_ = it // stages

    def tma_copy(c: t.Copy) -> t.Copy:
        nb = new_bufs[c.dst.buffer]

        def ring_region(starts, extents):
            return t.Region(nb, (slot,) + tuple(starts), (1,) + tuple(extents),
                            (0,) + tuple(d + 1 for d in c.dst.squeezed))

        if any(c is x for x in shared):
            src, dst, mask = share_of(c, sharers, ring_region)
            return t.Copy(src, dst, c.loc, mode="tma", barrier=(full, slot), coalesced_width=c.coalesced_width,
                          multicast=mask)
        return t.Copy(c.src, ring_region(c.dst.starts, c.dst.extents), c.loc, mode="tma", barrier=(full, slot),
                      coalesced_width=c.coalesced_width)

    producer_loop = t.For(k, loop.start, loop.extent, t.SeqStmt([
        th.MbarrierWait(empty, slot, (round_ + 1) % 2, loc=loc),  # a fresh barrier passes round 0
        *[tma_copy(c) for c in copies]]), "serial", 0, loc, dict(loop.attrs))
    wgmma = _plans_wgmma(_restage(t.SeqStmt([gemm]), new_bufs, slot), consumers, ctx)

    def consumer_mainloop(named_phase=False):
        """(the consumers' K loop, its drain), built afresh (the ping-pong form builds one per warpgroup,
        whose ring waits name their phase: ``MbarrierWait.phase``)."""
        staged = _restage(t.SeqStmt([gemm]), new_bufs, slot)
        wait_full = th.MbarrierWait(full, slot, round_ % 2, loc=loc, phase=round_ if named_phase else None)
        if stages >= 2 and wgmma:
            # wgmma: the group of iteration k stays in flight while iteration k+1 issues its own; after
            # wait_group(1) in iteration k+1 the group of k has read its slot, which is released then
            # (S = 1 cannot do this: the producer would wait for the slot the consumer is about to read)
            # The wgmma hardware, not the threads, reads the slot, and each warp's wait_group says it
            # is done: one elected lane per consumer warp releases it (8 arrivals for 256 consumers
            # instead of 256 atomics on one mbarrier per K tile)
            in_flight[_flatten(staged)[0]] = WGMMA_GROUPS_IN_FLIGHT
            prev = (it - 1) % stages
            consumer_loop = t.For(k, loop.start, loop.extent, t.SeqStmt([
                wait_full,
                staged,
                t.IfThenElse(rel > 0, t.SeqStmt(released(th.MbarrierArrive(empty, prev, elected=True, loc=loc))),
                             None, loc=loc)]),
                "serial", 0, loc, dict(loop.attrs))
            last = loop.extent - 1 if tiles is None else done + loop.extent - 1
            drain = [th.WgmmaWait(0, (gemm.c.buffer,), loc=loc),
                     *released(th.MbarrierArrive(empty, last % stages, elected=True, loc=loc))]
            return consumer_loop, [t.IfThenElse(loop.extent > 0, t.SeqStmt(drain), None, loc=loc)]
        consumer_loop = t.For(k, loop.start, loop.extent, t.SeqStmt([
            wait_full,
            staged,
            *released(th.MbarrierArrive(empty, slot, loc=loc))]), "serial", 0, loc, dict(loop.attrs))
        return consumer_loop, []

    # wgmma releases: one elected lane per consumer warp; otherwise every thread read the slot itself
    releases = consumers // ctx.target.warp_size if stages >= 2 and wgmma else consumers

    mainloop = loop if tiles is None else tiles[0]
    allocs, before, after, seen_loop, kept = [], [], [], False, set()
    grid_deps = []  # T.pdl_sync / T.pdl_trigger before the loop: the whole block's (module docstring)
    for s in top:
        if s is mainloop:
            seen_loop = True
        elif isinstance(s, th.GridDependency) and not seen_loop:
            grid_deps.append(s)
        elif isinstance(s, t.Alloc):
            alloc, init = hoisted_alloc(s, new_bufs.get(s.buffer, s.buffer), func, kernel, kept)
            allocs.append(alloc)
            if init is not None:
                (after if seen_loop else before).append(init)
        elif isinstance(s, t.Annotate):
            allocs.append(s)  # block-index rasterization and layouts apply to the whole block
        else:
            (after if seen_loop else before).append(s)
    # ping-pong (warp_specialize_pingpong.py): two consumer warpgroups taking the tiles in turn
    pingpong = pp.wanted(ctx, tiles, consumers, wgmma, stages, before, after)
    warpgroups = 2 if pingpong else 1
    # (for wgmma consumers only: with mma.sync ones ptxas was seen to ignore setmaxnreg, warning
    # that it cannot determine the register count at entry)
    split = register_split(consumers * warpgroups, ctx.target, ctx.options) \
        if wgmma and ctx.target.has("setmaxnreg") else None
    give = [th.SetMaxNReg(split[0], False, loc=loc)] if split else []
    take = [th.SetMaxNReg(split[1], True, loc=loc)] if split else []
    if tiles is not None:
        # both roles run the tile loop: the producer with only the scalars its TMA coordinates
        # need, so it fills the ring with the next tile's K slices during this tile's epilogue;
        # the consumers with everything (the accumulator's clear before, the copy-out after)
        outer, tile_before, tile_after = tiles
        producer_loop = t.For(outer.var, outer.start, outer.extent, t.SeqStmt([*lets, producer_loop]), "serial", 0,
                              outer.loc, dict(outer.attrs))
    if pingpong:
        ring = set(new_bufs.values())
        shared = {x.buffer for x in allocs if isinstance(x, t.Alloc) and x.buffer.scope == "shared"} - ring
        consumer_parts, copies = pp.pingpong_consumers(outer, tile_before, tile_after, consumer_mainloop, shared,
                                                       take, loc)
        allocs += copies
    else:
        consumer_loop, drain = consumer_mainloop()
        consumer_part = [consumer_loop, *drain]
        if tiles is not None:
            consumer_part = [t.For(outer.var, outer.start, outer.extent,
                                   t.SeqStmt([*tile_before, consumer_loop, *drain, *tile_after]), "serial", 0,
                                   outer.loc, dict(outer.attrs))]
        consumer_parts = [t.ThreadPartition(PRODUCER_THREADS, consumers, "consumer",
                                            t.SeqStmt([*take, *before, *consumer_part, *after]), loc)]
    # multicast: the peers' barriers exist before anyone uses them (a cluster barrier, relaxed: the
    # mbarrier initialisation's own fence publishes the barriers to the cluster); no block exits before
    # its peer's last releases of its slots have arrived: the producer's tail waits for them
    after_init = [th.ClusterBarrier(loc=loc, relaxed=True)] if sharers > 1 else []
    tail = _producer_tail(empty, stages, loop, tiles, done, loc) if sharers > 1 else []
    body = [*allocs, *grid_deps, t.Alloc(full, loc=loc), t.Alloc(empty, loc=loc),
            th.MbarrierInit(full, boxes, loc=loc), th.MbarrierInit(empty, releases * sharers, loc=loc),
            th.Barrier(loc=loc), *after_init,
            t.ThreadPartition(0, PRODUCER_THREADS, "producer", t.SeqStmt([
                *give, t.ThreadPartition(0, ISSUER_THREADS, "TMA issuer", t.SeqStmt([producer_loop, *tail]), loc)]),
                              loc),
            *consumer_parts]
    consumers *= warpgroups
    attrs = dict(kernel.attrs, warp_specialized=(PRODUCER_THREADS, consumers, stages))
    if pingpong:
        attrs["gemm_pingpong"] = True
    return t.Kernel(kernel.grid, (consumers + PRODUCER_THREADS,), kernel.block_vars, t.SeqStmt(body), kernel.loc,
                    attrs)
