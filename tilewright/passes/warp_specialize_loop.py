"""Pass ``warp_specialize_loop``: a ``T.Pipelined`` loop whose tile loads feed arbitrary computation
(the flash-attention loop: load K, S = Q K^T, online softmax, load V, O += P V) becomes a TMA
producer warpgroup filling mbarrier-guarded rings and consumer warpgroups computing from them
(after the GEMM-mainloop pass ``warp_specialize``, which handles the narrower copies-plus-one-gemm
loop).  When: as ``warp_specialize`` (by default on sm_90a, off with ``tl.disable_warp_specialized``,
``tw.warp_specialize`` explicit either way), but by default only for kernels of two or more
consumer warpgroups, the shape measured faster than the plain wgmma loop.

Needs: verified Tile IR, before ``pipeline_loops``; a target with TMA.
Applies to a kernel with one thread dimension of whole warpgroups (at most 896 threads), that never
reads the thread index itself, with exactly one top-level ``T.Pipelined`` loop (``num_stages`` >= 1)
and no other pipelined loop or thread partition, where:

* the loop's *ring copies* are top-level statements of its body copying a global tile into a whole
  shared buffer allocated at the kernel's top level, that TMA can do (``tma_eligible``), whose
  global offsets depend only on the loop variable, kernel parameters, block indices and *prelude
  scalars*; each such shared buffer is written by that one copy only and touched nowhere outside
  the loop (so the consumers are its only readers);
* *prelude scalars* are ``T.alloc_var`` scalars assigned once, by a top-level statement before
  the loop, from parameters, block indices, earlier prelude scalars and global tensors the kernel
  only reads (sequence offsets), and let bindings there; the loop bounds may use them too.  The
  producer recomputes them (scalar arithmetic, cheap); the consumers run every statement before
  the loop as written.
* *prologue copies*: top-level copies before the loop of the same kind (a Q tile), reading no
  scalar assigned after them, are issued by the producer too (after the prelude), into a one-slot
  ring the consumers wait on once.  A kernel given setmaxnreg is printed with
  ``__launch_bounds__(T + 128, 1)`` (ptxas needs the register count at entry).

The *persistent form* (``warp_specialize_persistent_loop.py``, its own contract): the same loop
inside a serial tile loop over work items, each item loading its prologue tile (Q) before it;
both roles then run the tile loop and the producer loads ahead into the next item.

Any other kernel is returned unchanged (an optimization, never a change of meaning).

``T.pdl_sync`` (a top-level ``GridDependency`` wait, programmatic dependent launch): the match and the rewrite
see the kernel without its top-level waits; a specialized kernel runs them after the rings' mbarrier set-up
and its block barrier, ahead of both roles (every thread waits: the producer's TMA loads may read what the
previous kernel writes), an unchanged kernel keeps them where they were.  A wait earlier than written only
delays.

Guarantees, for ``S`` stages, ``T`` original threads and ring buffers ``X`` (the block grows to
``T + 128``):

    block:     every ring buffer X gets S slots (a new leading dimension) and two mbarrier arrays:
               X_full[S] (one arrival per TMA box of X's copy) and X_empty[S] (T arrivals); a
               prologue buffer P one slot and P_full[1]; thread 0 initialises them; block barrier
    producer:  ThreadPartition(0, 128): setmaxnreg.dec (with 2+ consumer warpgroups on sm_90a);
               the prelude scalars; the prologue copies on P_full[0]; for k: per ring copy in body
               order, wait X_empty[k % S] for parity ((k // S) + 1) % 2 (a fresh barrier passes the
               first round), then X's TMA loads into slot k % S arriving on X_full[k % S]
    consumers: ThreadPartition(128, T): setmaxnreg.inc (likewise); the statements before the loop,
               a prologue copy replaced by a wait on P_full[0] (parity 0); the loop body with each
               ring copy replaced by a wait on X_full[k % S] for parity (k // S) % 2 at the copy's
               place, every use of X reading slot k % S, and an arrival on X_empty[k % S] right
               after the last statement of the body that touches X; the statements after the loop

A ``T.pdl_trigger`` (``GridDependency``) among the top-level statements before the loop is the whole block's:
it goes ahead of the barriers' set-up, before both roles (``warp_specialize`` does the same).  The waits never get
here: the entry took them out and puts them back after the set-up (above).

A slot of X is refilled only after every consumer thread is past its last use of X in that
iteration (gemms end with their ``wgmma`` retired), so K's slot is refilled while the consumers are
still working on the softmax and P V of the same iteration.  The emulator runs the result
cooperatively (warps advance until they block) and checks the protocol (parities, arrival counts,
slot reuse).

Ping-pong (pass config ``tw.pingpong``, two consumer warpgroups, NVIDIA): the consumer warpgroups
take turns at the tensor cores, so that one's softmax runs while the other's gemms do.  Warpgroup
``w`` waits on named barrier ``PINGPONG_BARRIERS[w]`` (``bar.sync``, 256 threads) before each
top-level gemm statement of the loop body and, after it, arrives (``bar.arrive``) on the other's;
before the loop warpgroup 1 arrives on warpgroup 0's (warpgroup 0 goes first), after it warpgroup
0 waits once more (consuming warpgroup 1's last arrival), so every phase completes.  The turns
order the gemms of the two warpgroups as QK0, QK1, PV0, PV1, QK0, ... .

Intra-warpgroup pipelining (pass config ``tw.attention_overlap``): ``attention_overlap`` then
rotates the consumer loop so that P V of one key block runs while the softmax of the next does.

Defaults: with neither ``tw.pingpong`` nor ``tw.attention_overlap`` given, a loop of two consumer
warpgroups gets both when the overlap applies (it declines loops whose tiles would not stay in
registers) and neither otherwise: on the H200 both together beat the plain loop on every measured
shape, ping-pong alone lost (bench/results/2026-12-01-0954-attention-variants-*).

The register split (``setmaxnreg``): 65536 registers per SM for one block of ``T + 128`` threads;
the producer keeps ``PRODUCER_REGS`` (``PRODUCER_REGS_MANY`` with three or more consumer warpgroups), the
consumers share the rest (a multiple of 8, at most 240)."""

from __future__ import annotations

import copy

from ..ir import expr as E
from ..ir import thread as th
from ..ir import tile as t
from ..ir.layout import tma_boxes
from ..ir.plans import PipelineRing
from ..ir.verifier import exprs_of
from ..ir.visitor import free_vars, loads_in, map_stmt, walk
from .attention_overlap import _touches, _writes, attention_overlap
from .pipeline_loops import _buffers_touched_outside, _flatten, _restage, tma_eligible
from .warp_specialize import hoisted_alloc, ws_enabled
from .warp_specialize_persistent_loop import consumer_steps, match_persistent, prologue_slots, specialize_persistent

OPTION = "tw.warp_specialize"
PINGPONG = "tw.pingpong"
OVERLAP = "tw.attention_overlap"
UNIFORM_RING = "tw.uniform_ring"  # the persistent form's ring position through warp_uniform (its docstring)
PINGPONG_BARRIERS = (15, 14)  # named barriers of the turns (partitions' barriers are numbered from 1 up)
PRODUCER_THREADS = 128  # one warpgroup: TMA is issued by its first warp
PRODUCER_REGS = 40
# with three or more consumer warpgroups the producer keeps fewer, so that each consumer gets 160 (not 152:
# a 192 x 128 block at head dim 64 spilled at 152)
PRODUCER_REGS_MANY = 32
REGISTER_FILE = 65536


def warp_specialize_loop(func: t.PrimFunc, ctx=None) -> t.PrimFunc:
    if ctx is None or not ws_enabled(ctx.target, ctx.options):
        return func
    explicit = ctx.options.get(OPTION)
    kernels = _kernels(func)
    if len(kernels) != 1 or kernels[0].attrs.get("warp_specialized"):
        return func  # several kernels, or the GEMM-mainloop pass already specialized this one
    original = kernels[0]
    kernel, waits = _without_grid_waits(original)
    if not waits:
        return _specialize_kernel(func, kernel, explicit, ctx)
    # T.pdl_sync: the match and the rewrite see the kernel without its waits, which the specialized kernel
    # gets back ahead of its roles (an unchanged one as it was)
    func.body = map_stmt(func.body, lambda s: kernel if s is original else None)
    func = _specialize_kernel(func, kernel, explicit, ctx)
    new = _kernels(func)[0]
    func.body = map_stmt(func.body, lambda s: (_with_grid_waits(new, waits) if new.attrs.get("warp_specialized")
                                               else original) if s is new else None)
    return func


def _specialize_kernel(func: t.PrimFunc, kernel: t.Kernel, explicit, ctx) -> t.PrimFunc:
    """``warp_specialize_loop`` of the function's one kernel ``kernel`` (its top-level waits taken out)."""
    if explicit is None and kernel.num_threads < 256:
        # by default only with two or more consumer warpgroups, the configurations measured faster
        # than the plain wgmma loop on the H200 (bench/results/2026-12-01-0805-attention-variants-*)
        return func
    match = _match_any(kernel, func)
    if match is None:
        return func
    regs = _register_split(kernel.num_threads) if ctx.target.has("setmaxnreg") else None
    can_pingpong = kernel.num_threads == 256 and ctx.target.vendor == "nvidia"
    if can_pingpong and ctx.options.get(PINGPONG) is None and ctx.options.get(OVERLAP) is None:
        # Neither chosen: ping-pong with the intra-warpgroup overlap, measured faster than the plain
        # loop on all 8 shapes of bench/results/2026-12-01-0954-attention-variants-* (+4..16%),
        # where ping-pong alone was slower — so on a copy, kept only if the overlap applies.
        trial = copy.deepcopy(func)  # buffers, plans and body copied together: one consistent function
        trial_kernel = _kernels(trial)[0]
        trial_match = _match_any(trial_kernel, trial)
        if trial_match is not None:
            trial.body = map_stmt(trial.body, lambda s: _specialize_any(s, trial, trial_match, regs, True, ctx)
                                  if s is trial_kernel else None)
            trial = attention_overlap(trial, ctx, enabled=True)
            if trial.attrs.get("attention_overlap"):
                return trial
        pingpong = False
    else:
        pingpong = bool(ctx.options.get(PINGPONG)) and can_pingpong
    func.body = map_stmt(func.body, lambda s: _specialize_any(s, func, match, regs, pingpong, ctx)
                         if s is kernel else None)
    return attention_overlap(func, ctx)  # tw.attention_overlap: its own pass file says what it does


def _without_grid_waits(kernel: t.Kernel):
    """(the kernel without its top-level ``T.pdl_sync`` waits, those waits); (kernel, []) when it has none.
    Both roles must wait (``griddepcontrol.wait`` holds back the thread that runs it: the producer's TMA loads
    read what the previous kernel may still write), so ``_with_grid_waits`` puts them back ahead of the
    thread partitions, where every thread runs them; a wait earlier than written only delays."""
    top = _flatten(kernel.body)
    waits = [s for s in top if isinstance(s, th.GridDependency) and s.action == "wait"]
    if not waits:
        return kernel, []
    rest = t.SeqStmt([s for s in top if s not in waits])
    return t.Kernel(kernel.grid, kernel.threads, kernel.block_vars, rest, kernel.loc, dict(kernel.attrs)), waits


def _with_grid_waits(kernel: t.Kernel, waits: list) -> t.Kernel:
    """The specialized ``kernel`` with ``waits`` first among its top-level statements that are not
    allocations, barrier set-up or annotations (so that the rings' mbarrier set-up runs before the wait, while
    the previous kernel may still run: it touches only this block's shared memory)."""
    if not waits:
        return kernel
    top = _flatten(kernel.body)
    setup = (t.Alloc, t.Annotate, th.MbarrierInit, th.Barrier)
    at = next((i for i, s in enumerate(top) if not isinstance(s, setup)), len(top))
    return t.Kernel(kernel.grid, kernel.threads, kernel.block_vars, t.SeqStmt([*top[:at], *waits, *top[at:]]),
                    kernel.loc, dict(kernel.attrs))


def _match_any(kernel: t.Kernel, func):
    """The plain form's ``_Match``, else the persistent form's (warp_specialize_persistent_loop.py)."""
    m = _match(kernel, func)
    return m if m is not None else match_persistent(kernel, func, _match)


def _specialize_any(kernel: t.Kernel, func, m, regs, pingpong: bool, ctx):
    if getattr(m, "outer", None) is None:
        return _specialize(kernel, func, m, regs, pingpong)
    slots = prologue_slots(kernel, m, ctx.target.max_shared_bytes)
    return specialize_persistent(kernel, func, m, regs, pingpong, slots, _take_turns,
                                 bool(ctx.options.get(UNIFORM_RING)) and ctx.target.vendor == "nvidia")


def _kernels(func) -> list:
    out: list = []
    walk(func.body, lambda s: out.append(s) if isinstance(s, t.Kernel) else None)
    return out


def _register_split(consumers: int):
    """(producer, consumer) registers per thread after setmaxnreg, or None with one consumer
    warpgroup (which can already use 255 registers: nothing to move)."""
    if consumers < 256:
        return None
    producer = PRODUCER_REGS if consumers <= 256 else PRODUCER_REGS_MANY
    per = (REGISTER_FILE - PRODUCER_THREADS * producer) // consumers // 8 * 8
    return producer, min(per, 240)


class _Match:
    def __init__(self, loop, top, ring_copies, prologue_copies, prelude):
        self.loop, self.top = loop, top
        self.ring_copies, self.prologue_copies, self.prelude = ring_copies, prologue_copies, prelude
        self.outer = None  # the persistent form's tile loop (warp_specialize_persistent_loop.py)


def _match(kernel: t.Kernel, func, top=None, tile_var=None):
    """A ``_Match`` of the kernel's statements ``top`` (default: its top level; the persistent form
    passes a tile loop's body, whose variable ``tile_var`` the prelude may read too), or None."""
    threads = kernel.num_threads
    if threads % 128 or threads + PRODUCER_THREADS > 1024 or len(kernel.threads) != 1:
        return None
    tid = kernel.attrs.get("thread_var")
    if tid is not None and _uses_var(kernel.body, tid):
        return None  # the kernel reads its thread index: the renumbering would change its meaning
    if any(isinstance(s, t.Alloc) and s.buffer.attrs.get("address") for s in _flatten(kernel.body)):
        return None  # T.make_tensor on an address: its declaration must stay where the address is computed
    top = _flatten(kernel.body) if top is None else top
    loops = [s for s in top if isinstance(s, t.For) and s.kind == "pipelined"]
    others = []
    walk(kernel.body, lambda s: others.append(s) if isinstance(s, t.ThreadPartition) or (
        isinstance(s, t.For) and s.kind == "pipelined" and s not in loops) else 0)
    if len(loops) != 1 or others or loops[0].num_stages < 1:
        return None
    loop = loops[0]
    before = top[:top.index(loop)]
    allocs = {s.buffer for s in top if isinstance(s, t.Alloc)}
    # the prelude: T.alloc_var scalars assigned once at the top level before the loop, and let
    # bindings there, that the producer can compute too
    stores = [s for s in before if isinstance(s, t.BufferStore) and s.buffer.scope == "var"]
    if len({s.buffer for s in stores}) != len(stores):
        return None  # a scalar assigned twice: the producer would not see the value a copy saw
    in_prelude = set(stores)
    if any(_writes(s) & {x.buffer for x in stores} for s in top if s not in in_prelude):
        return None
    written = _writes(kernel.body)
    allowed_vars = {loop.var} | set(func.params) | set(func.dyn_vars) | set(kernel.block_vars)
    if tile_var is not None:
        allowed_vars.add(tile_var)
    readable = {b for b in _touches(kernel.body) if b.scope == "global" and b not in written}

    def computable(e) -> bool:
        """``e`` is computable by the producer: loop variable, parameters, block indices, prelude
        scalars and lets, and global tensors that the kernel only reads."""
        e = E.as_expr(e)
        return not (free_vars(e) - allowed_vars) and all(ld.buffer in readable for ld in loads_in(e))

    for s in top:  # scalars never assigned keep their initial value, in every thread
        if isinstance(s, t.Alloc) and s.buffer.scope == "var" and s.buffer not in written and (
                s.init is None or computable(s.init)):
            readable.add(s.buffer)
    prelude = []
    for s in before:
        if isinstance(s, t.LetStmt) and computable(s.value):
            prelude.append(s)
            allowed_vars.add(s.var)
        elif s in in_prelude and all(computable(e) for e in exprs_of(s)):
            prelude.append(s)
            readable.add(s.buffer)
    if not (computable(loop.start) and computable(loop.extent)):
        return None

    def tma_tile_copy(c) -> bool:
        return (isinstance(c, t.Copy) and c.src.buffer.scope == "global" and c.dst.buffer.scope == "shared"
                and c.dst.is_full() and c.dst.buffer in allocs and tma_eligible(c) and not c.disable_tma
                and c.mode == "sync" and all(computable(x) for x in c.src.starts))

    body = _flatten(loop.body)
    ring_copies = [c for c in body if tma_tile_copy(c)]
    if not ring_copies or len(ring_copies) == len(body):
        return None
    rings = [c.dst.buffer for c in ring_copies]
    if len(set(rings)) != len(rings):
        return None
    for s in body:
        if s not in ring_copies and _writes(s) & set(rings):
            return None
    if set(rings) & _buffers_touched_outside(func.body, loop):
        return None
    # prologue copies: a shared tile loaded once before the loop and only read afterwards
    prologue = []
    for i, s in enumerate(before):
        # the producer runs the whole prelude before its prologue copies: a copy must not read a
        # scalar or let that the program assigns only after it
        later = {x.buffer for x in before[i:] if x in in_prelude} | {
            x.var for x in before[i:] if isinstance(x, t.LetStmt)}
        reads = {ld.buffer for e in s.src.starts for ld in loads_in(E.as_expr(e))} | {
            v for e in s.src.starts for v in free_vars(E.as_expr(e))} if isinstance(s, t.Copy) else set()
        if tma_tile_copy(s) and s.dst.buffer not in rings and not (reads & later) and not any(
                s.dst.buffer in _writes(x) for x in top if x is not s) and not any(
                s.dst.buffer in _touches(x) for x in before[:i]):
            prologue.append(s)
    return _Match(loop, top, ring_copies, prologue, prelude)


def _uses_var(root, var) -> bool:
    found = []
    walk(root, lambda s: found.extend(e for e in exprs_of(s) if var in free_vars(e)))
    return bool(found)


def _specialize(kernel: t.Kernel, func, m: _Match, regs, pingpong: bool = False):
    loop = m.loop
    stages = loop.num_stages
    consumers = kernel.num_threads
    loc = loop.loc
    k = loop.var
    rel = k - loop.start
    slot, round_ = rel % stages, rel // stages
    new_bufs, full, empty, inits = {}, {}, {}, []

    def ring(old, nslots, with_empty):
        nb = t.Buffer(old.name, (nslots,) + tuple(old.shape), old.dtype, "shared", loc=old.loc)
        nb.attrs.update(old.attrs)
        full[old] = t.Buffer(f"{old.name}_full", (nslots,), "uint64", "shared", loc=loc)
        func.plans.rings[nb] = PipelineRing(nslots, True, full[old])
        new_bufs[old] = nb
        inits.append(th.MbarrierInit(full[old], tma_boxes(old.shape, old.dtype)[0], loc=loc))
        if with_empty:
            empty[old] = t.Buffer(f"{old.name}_empty", (nslots,), "uint64", "shared", loc=loc)
            inits.append(th.MbarrierInit(empty[old], consumers, loc=loc))

    for c in m.ring_copies:
        ring(c.dst.buffer, stages, True)
    for c in m.prologue_copies:
        ring(c.dst.buffer, 1, False)

    def tma_copy(c: t.Copy, index) -> t.Copy:
        nb = new_bufs[c.dst.buffer]
        dst = t.Region(nb, (index,) + tuple(c.dst.starts), (1,) + tuple(c.dst.extents),
                       (0,) + tuple(d + 1 for d in c.dst.squeezed))
        return t.Copy(c.src, dst, c.loc, mode="tma", barrier=(full[c.dst.buffer], index),
                      coalesced_width=c.coalesced_width)

    # producer: the scalars its offsets need, the prologue loads, then the ring loads
    producer_loop = t.For(k, loop.start, loop.extent, t.SeqStmt([x for c in m.ring_copies for x in (
        th.MbarrierWait(empty[c.dst.buffer], slot, (round_ + 1) % 2, loc=c.loc),  # a fresh barrier passes round 0
        tma_copy(c, slot))]), "serial", 0, loc, dict(loop.attrs))
    producer = [*m.prelude, *[tma_copy(c, 0) for c in m.prologue_copies], producer_loop]

    once = {b: n for b, n in new_bufs.items() if b not in empty}  # prologue buffers: slot 0
    ringed = {b: n for b, n in new_bufs.items() if b in empty}

    def restage(s, index):
        return _restage(_restage(t.SeqStmt([s]), once, 0), ringed, index)

    # consumers: the body with waits where the loads were and arrivals after each ring's last use
    cbody = consumer_steps(_flatten(loop.body), m.ring_copies, list(empty), full, empty, slot, round_, restage)
    turns_before, turns_after = [], []
    if pingpong:
        cbody, turns_before, turns_after = _take_turns(kernel, cbody, loc)
    consumer_loop = t.For(k, loop.start, loop.extent, t.SeqStmt(cbody), "serial", 0, loc, dict(loop.attrs))

    allocs, before, after, seen_loop, kept = [], [], [], False, set()
    grid_deps = []  # T.pdl_trigger before the loop: the whole block's (the waits were taken out at the entry)
    for s in m.top:
        if s is loop:
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
        elif s in m.prologue_copies:
            before.append(th.MbarrierWait(full[s.dst.buffer], 0, 0, loc=s.loc))
        elif seen_loop:
            after.append(restage(s, 0))
        else:
            before.append(restage(s, 0))
    set_regs_p = [th.SetMaxNReg(regs[0], False, loc=loc)] if regs else []
    set_regs_c = [th.SetMaxNReg(regs[1], True, loc=loc)] if regs else []
    barriers = [t.Alloc(b, loc=loc) for b in (*full.values(), *empty.values())]
    body = [*allocs, *grid_deps, *barriers, *inits, th.Barrier(loc=loc),
            t.ThreadPartition(0, PRODUCER_THREADS, "producer", t.SeqStmt([*set_regs_p, *producer]), loc),
            t.ThreadPartition(PRODUCER_THREADS, consumers, "consumer",
                              t.SeqStmt([*set_regs_c, *before, *turns_before, consumer_loop, *turns_after,
                                         *after]), loc)]
    attrs = dict(kernel.attrs, warp_specialized=(PRODUCER_THREADS, consumers, stages))
    if regs:
        attrs["min_blocks_per_sm"] = 1  # the split assumes the whole register file: one block per SM
    return t.Kernel(kernel.grid, (consumers + PRODUCER_THREADS,), kernel.block_vars, t.SeqStmt(body), kernel.loc,
                    attrs)


def _take_turns(kernel: t.Kernel, body: list, loc):
    """The consumer loop body with each top-level gemm statement inside its warpgroup's turn, and
    the statements before and after the loop that start and close the alternation (see the module
    docstring)."""
    tid = kernel.attrs["thread_var"]
    wg = (tid - PRODUCER_THREADS) // 128  # 0 or 1: the consumer warpgroup
    mine = PINGPONG_BARRIERS[0] - wg  # 15 for warpgroup 0, 14 for warpgroup 1
    other = PINGPONG_BARRIERS[1] + wg
    out = []
    for s in body:
        gemms = []
        walk(s, lambda x: gemms.append(x) if isinstance(x, t.Gemm) else None)
        if gemms:
            out += [th.NamedBarrier(mine, 256, loc=loc), s, th.NamedBarrier(other, 256, arrive_only=True, loc=loc)]
        else:
            out.append(s)
    first = [t.IfThenElse(wg == 1, t.SeqStmt([th.NamedBarrier(PINGPONG_BARRIERS[0], 256, arrive_only=True,
                                                                  loc=loc)]), None, loc=loc)]
    last = [t.IfThenElse(wg == 0, t.SeqStmt([th.NamedBarrier(PINGPONG_BARRIERS[0], 256, loc=loc)]), None, loc=loc)]
    return out, first, last
