"""The *persistent form* of pass ``warp_specialize_loop`` (the attention-shaped loop): a kernel whose
blocks loop over work items (``ops/attention_kernels.attention_fwd(persistent=n)``), each item
loading its own tile before the key loop (Q) and running the loop's loads and computation (K, S =
Q K^T, softmax, V, O += P V) and then its epilogue.  Called by ``warp_specialize_loop`` when its
plain form does not match; ``warp_specialize`` (the GEMM pass) has its own persistent form.

Needs: what ``warp_specialize_loop`` needs.
Applies to a kernel whose top level holds only allocations (and annotations) and one serial *tile
loop* ``for r`` with tile-invariant bounds (parameters, block indices, no memory reads), whose body
holds exactly one ``T.Pipelined`` loop among its top-level statements and otherwise what the plain
form accepts at a kernel's top level (``warp_specialize_loop._match`` on the tile loop's body, with
``r`` readable by the prelude): the prelude scalars (assigned once per item from parameters, block
indices, ``r``, earlier prelude scalars and read-only global tensors), at least one prologue copy
(Q: without one the loop has the GEMM shape, left to ``warp_specialize``), the ring copies of the
loop (K, V).  Allocations inside the tile loop are moved to the top level
(declined when one has an initial value: it would be a per-item assignment).  The key loop's
bounds may differ from item to item (causal, ragged, variable-length): the ring position is a
running count.  Any other kernel is returned unchanged.

Guarantees (beyond the plain form's, whose notation this follows), for ``S`` stages and ``Sq``
prologue slots (2 when the shared memory holds a second Q tile, else 1):

    block:     rings X[S] with X_full[S], X_empty[S] as in the plain form; each prologue buffer P
               gets Sq slots, P_full[Sq] (one arrival per TMA box) and P_empty[Sq] (T arrivals)
    both roles keep ``steps``, the K steps of the items they ran before this one (0 at the start,
               ``+= max(n, 0)`` after each item's key loop of ``n`` steps); the ring position of
               step ``k`` is ``it = steps + (k - start)``: slot ``it % S``, phase ``(it // S) % 2``
    producer:  for r: the prelude; per prologue copy: wait P_empty[r' % Sq] for parity
               ((r' // Sq) + 1) % 2 (``r' = r - r0``), its TMA load into slot r' % Sq on
               P_full[r' % Sq]; the ring loads of the key loop as in the plain form
    consumers: for r: the tile body's statements before the key loop, a prologue copy replaced by
               a wait on P_full[r' % Sq] for parity (r' // Sq) % 2 and every use of P reading slot
               r' % Sq; the key loop as in the plain form; ``steps`` advanced; the statements after
               the loop; an arrival on P_empty[r' % Sq] (every wgmma reading P has retired by then).
               Ping-pong's alternation is opened before the tile loop and closed after it (both
               warpgroups take the same turns in every item: the order continues across items)

With ``uniform`` (pass config ``tw.uniform_ring``, NVIDIA, off by default): the consumers' ring position
is ``warp_uniform(steps + (k - start))`` (ir.thread.WARP_UNIFORM; the emulator checks that every lane holds
the same value), which CUDA prints as one broadcast from lane 0 a key step (codegen/cuda.py: equal
broadcasts of a loop body, and of ``x`` and ``x - 1`` after ``attention_overlap``'s shift, share one).
The value is the same in every consumer thread anyway, but ptxas cannot see that through the persistent
tile loop, so without it the ring slot and the wgmma descriptors computed from it sit in vector
registers and move into uniform ones (R2UR) at every gemm: 32 moves a key block at head dim 64.  A
broadcast once per item is not enough (ptxas keeps the key loop's counter in a vector register).

So the producer runs ahead into the next item (its Q into the other slot, its first K and V
slices) while the consumers finish this item's softmax and epilogue; ``attention_overlap`` then
pipelines the key loop inside the tile loop as it does a top-level one.
"""

from __future__ import annotations

from ..ir import expr as E
from ..ir import thread as th
from ..ir import tile as t
from ..ir.layout import tma_boxes
from ..ir.plans import PipelineRing
from ..ir.visitor import free_vars, loads_in
from .pipeline_loops import _flatten, _restage

PRODUCER_THREADS = 128


def match_persistent(kernel: t.Kernel, func, match_level):
    """``match_level(kernel, func, top, tile_var)`` (``warp_specialize_loop._match``) on the kernel's
    allocations, those of the tile loop (hoisted) and the tile loop's other statements, the result
    carrying ``outer`` (the tile loop); or None."""
    top = _flatten(kernel.body)
    outer = [s for s in top if isinstance(s, t.For) and s.kind == "serial"
             and any(isinstance(x, t.For) and x.kind == "pipelined" for x in _flatten(s.body))]
    if len(outer) != 1:
        return None
    outer = outer[0]
    if any(not isinstance(s, (t.Alloc, t.Annotate)) for s in top if s is not outer):
        return None  # statements outside the tile loop: neither role would know where to run them
    invariant = set(func.params) | set(func.dyn_vars) | set(kernel.block_vars)
    for x in (outer.start, outer.extent):
        if loads_in(E.as_expr(x)) or free_vars(E.as_expr(x)) - invariant:
            return None
    body = _flatten(outer.body)
    hoisted = [s for s in body if isinstance(s, t.Alloc)]
    if any(s.init is not None or s.buffer.attrs.get("address") for s in hoisted):
        return None
    level = [s for s in top if s is not outer] + hoisted + [s for s in body if not isinstance(s, t.Alloc)]
    m = match_level(kernel, func, level, outer.var)
    if m is None or not m.prologue_copies:
        # without a per-item tile loaded before the key loop this is the GEMM shape, which
        # ``warp_specialize``'s own persistent form takes (or declines: e.g. trip counts that vary
        # per tile, coordinates read from memory)
        return None
    m.outer = outer
    return m


def prologue_slots(kernel: t.Kernel, m, max_shared: int) -> int:
    """2 when a second slot of every prologue buffer (and the mbarriers) fits beside the kernel's
    shared memory, else 1."""
    from ..ir import dtype as dt

    def nbytes(b):
        n = 1
        for d in b.shape:
            n *= d if isinstance(d, int) else 0
        return n * dt.nbytes(b.dtype)

    shared = [s.buffer for s in m.top if isinstance(s, t.Alloc) and s.buffer.scope == "shared"]
    rings = {c.dst.buffer for c in m.ring_copies}
    prologue = {c.dst.buffer for c in m.prologue_copies}
    total = sum((nbytes(b) + 127) // 128 * 128 * (m.loop.num_stages if b in rings else 2 if b in prologue else 1)
                for b in shared)
    return 2 if total + 1024 <= max_shared else 1


def specialize_persistent(kernel: t.Kernel, func, m, regs, pingpong: bool, q_slots: int, take_turns,
                          uniform: bool = False):
    """The warp-specialized persistent kernel (module docstring); ``take_turns`` is
    ``warp_specialize_loop._take_turns``; ``uniform``: ``tw.uniform_ring``."""
    loop, outer = m.loop, m.outer
    stages = loop.num_stages
    consumers = kernel.num_threads
    loc = loop.loc
    k = loop.var
    steps = t.Buffer(f"{k.name}_steps", (1,), "int32", "var", loc=loc)
    it = E.Load(steps, (E.as_expr(0),)) + (k - loop.start)
    slot, round_ = it % stages, it // stages
    item = outer.var - outer.start
    qslot, qround = item % q_slots, item // q_slots
    new_bufs, full, empty, inits = {}, {}, {}, []

    def ring(old, nslots):
        nb = t.Buffer(old.name, (nslots,) + tuple(old.shape), old.dtype, "shared", loc=old.loc)
        nb.attrs.update(old.attrs)
        full[old] = t.Buffer(f"{old.name}_full", (nslots,), "uint64", "shared", loc=loc)
        empty[old] = t.Buffer(f"{old.name}_empty", (nslots,), "uint64", "shared", loc=loc)
        func.plans.rings[nb] = PipelineRing(nslots, True, full[old])
        new_bufs[old] = nb
        inits.append(th.MbarrierInit(full[old], tma_boxes(old.shape, old.dtype)[0], loc=loc))
        inits.append(th.MbarrierInit(empty[old], consumers, loc=loc))

    for c in m.ring_copies:
        ring(c.dst.buffer, stages)
    for c in m.prologue_copies:
        ring(c.dst.buffer, q_slots)
    ringed = {c.dst.buffer: new_bufs[c.dst.buffer] for c in m.ring_copies}
    once = {c.dst.buffer: new_bufs[c.dst.buffer] for c in m.prologue_copies}

    def tma_copy(c: t.Copy, index) -> t.Copy:
        nb = new_bufs[c.dst.buffer]
        dst = t.Region(nb, (index,) + tuple(c.dst.starts), (1,) + tuple(c.dst.extents),
                       (0,) + tuple(d + 1 for d in c.dst.squeezed))
        return t.Copy(c.src, dst, c.loc, mode="tma", barrier=(full[c.dst.buffer], index),
                      coalesced_width=c.coalesced_width)

    def restage(s, index):
        return _restage(_restage(t.SeqStmt([s]), once, qslot), ringed, index)

    advance = t.BufferStore(steps, (E.as_expr(0),), E.Load(steps, (E.as_expr(0),)) + E.emax(loop.extent, 0), loc=loc)
    start = t.BufferStore(steps, (E.as_expr(0),), E.as_expr(0), loc=loc)

    # producer: per item the prelude, the prologue loads into their slot once it is free, the ring loads
    producer_loop = t.For(k, loop.start, loop.extent, t.SeqStmt([x for c in m.ring_copies for x in (
        th.MbarrierWait(empty[c.dst.buffer], slot, (round_ + 1) % 2, loc=c.loc),  # a fresh barrier passes round 0
        tma_copy(c, slot))]), "serial", 0, loc, dict(loop.attrs))
    prologue = [x for c in m.prologue_copies for x in (
        th.MbarrierWait(empty[c.dst.buffer], qslot, (qround + 1) % 2, loc=c.loc), tma_copy(c, qslot))]
    producer = [start, t.For(outer.var, outer.start, outer.extent,
                             t.SeqStmt([*m.prelude, *prologue, producer_loop, advance]), "serial", 0, outer.loc,
                             dict(outer.attrs))]

    # consumers: the loop body with waits where the loads were and arrivals after each ring's last use
    if uniform:
        slot, round_ = _uniform_ring(k, loop, steps, stages)
    cbody = consumer_steps(_flatten(loop.body), m.ring_copies, ringed, full, empty, slot, round_, restage)
    turns_before, turns_after = [], []
    if pingpong:
        cbody, turns_before, turns_after = take_turns(kernel, cbody, loc)
    consumer_loop = t.For(k, loop.start, loop.extent, t.SeqStmt(cbody), "serial", 0, loc, dict(loop.attrs))

    allocs, before, after, seen_loop = [], [], [], False
    for s in m.top:
        if s is loop:
            seen_loop = True
        elif isinstance(s, t.Alloc):
            allocs.append(t.Alloc(new_bufs.get(s.buffer, s.buffer), s.init, loc=s.loc))
        elif isinstance(s, t.Annotate):
            allocs.append(s)
        elif s in m.prologue_copies:
            before.append(th.MbarrierWait(full[s.dst.buffer], qslot, qround % 2, loc=s.loc))
        elif seen_loop:
            after.append(restage(s, 0))
        else:
            before.append(restage(s, 0))
    release = [th.MbarrierArrive(empty[c.dst.buffer], qslot, loc=loc) for c in m.prologue_copies]
    # ping-pong's alternation is opened once before the tile loop and closed once after it: both
    # warpgroups take the same turns in every item, so the order continues across items (closing
    # it per item would let warpgroup 1 open the next item's before warpgroup 0 closed this one's)
    consumer = [start, *turns_before,
                t.For(outer.var, outer.start, outer.extent,
                      t.SeqStmt([*before, consumer_loop, advance, *after, *release]), "serial", 0, outer.loc,
                      dict(outer.attrs)),
                *turns_after]
    set_regs_p = [th.SetMaxNReg(regs[0], False, loc=loc)] if regs else []
    set_regs_c = [th.SetMaxNReg(regs[1], True, loc=loc)] if regs else []
    barriers = [t.Alloc(b, loc=loc) for b in (*full.values(), *empty.values())]
    new_body = [*allocs, t.Alloc(steps, loc=loc), *barriers, *inits, th.Barrier(loc=loc),
                t.ThreadPartition(0, PRODUCER_THREADS, "producer", t.SeqStmt([*set_regs_p, *producer]), loc),
                t.ThreadPartition(PRODUCER_THREADS, consumers, "consumer", t.SeqStmt([*set_regs_c, *consumer]), loc)]
    attrs = dict(kernel.attrs, warp_specialized=(PRODUCER_THREADS, consumers, stages),
                 persistent_prologue_slots=q_slots)
    if uniform:
        attrs["warp_uniform"] = True  # codegen/cuda.py: one broadcast per distinct value a loop or branch body
    if regs:
        attrs["min_blocks_per_sm"] = 1  # the split assumes the whole register file: one block per SM
    return t.Kernel(kernel.grid, (consumers + PRODUCER_THREADS,), kernel.block_vars, t.SeqStmt(new_body),
                    kernel.loc, attrs)


def _uniform_ring(k, loop, steps, stages: int):
    """``tw.uniform_ring`` (module docstring): the consumers' ring slot and round, from the ring position
    passed through ``warp_uniform`` at each key step."""
    it = E.Load(steps, (E.as_expr(0),)) + (k - loop.start)
    it = E.Call(th.WARP_UNIFORM, (it,), it.dtype)
    return it % stages, it // stages


def consumer_steps(body: list, ring_copies, released, full: dict, empty: dict, slot, round_, restage) -> list:
    """The consumers' key-loop body (shared with ``warp_specialize_loop``'s plain form): each ring
    copy becomes a wait on its slot's ``full`` barrier, every other statement is restaged onto the
    slot, and after the last statement touching a ring buffer of ``released`` (or its copy, where
    nothing reads it) comes the arrival on that ring's ``empty`` barrier."""
    from .attention_overlap import _touches

    last_use = {}
    for i, s in enumerate(body):
        for buf in _touches(s) & set(released):
            last_use[buf] = i
    out = []
    for i, s in enumerate(body):
        if s in ring_copies:
            out.append(th.MbarrierWait(full[s.dst.buffer], slot, round_ % 2, loc=s.loc))
        else:
            out.append(restage(s, slot))
        for buf in released:
            if last_use.get(buf, -1) == i or (buf not in last_use and s in ring_copies and s.dst.buffer is buf):
                out.append(th.MbarrierArrive(empty[buf], slot, loc=s.loc))
    return out
