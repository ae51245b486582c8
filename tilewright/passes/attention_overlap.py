"""Pass ``attention_overlap``: intra-warpgroup pipelining of the warp-specialized attention loop
(FlashAttention-3's "2-stage wgmma-softmax pipelining"): the consumers' P V gemm of key block
``j - 1`` is issued right after the Q K^T gemm of block ``j``, both asynchronously, so that the
softmax of block ``j`` runs on the CUDA cores while the tensor cores still compute P V of block
``j - 1``.  Opt-in with the pass config ``tw.attention_overlap`` (True/False); run by
``warp_specialize_loop`` on the kernel it has just specialized.

Needs: the output of ``warp_specialize_loop`` (a ``"consumer"`` thread partition), before
``plan_gemms``; both gemms planned on wgmma (``plan_gemm`` is asked the same question).
Applies to the consumer partition's top-level serial loop ``for k`` (or, in the persistent form of
``warp_specialize_loop``, the one at the top level of the partition's tile loop) whose body is, in
order,

    pre    statements before the first gemm (the wait for K's slot, an initialisation of S)
    G1     T.gemm(..., S)             (S: a fragment; A and B in shared memory)
    rel1   mbarrier arrivals right after G1 (K's slot released)
    mid    statements (the softmax: row max, the rescale of O, exp2, the cast P = S, the wait for V)
    G2     T.gemm(P, ..., O)          (P, O: fragments other than S; B in shared memory)
    rel2   mbarrier arrivals right after G2 (V's slot released)
    post   statements (row sums, the running denominator)

with no other gemm, arrival or binding (let) in the body, and S, P and O small enough to stay in
registers together through the softmax (``OTHER_REGISTERS``, or the pass config ``tw.attention_overlap_registers``
for the registers besides them; d = 256 at block 128 x 64 is not).
``mid`` splits into ``D`` (statements touching O, and mbarrier waits: deferred with G2 to the next
iteration), ``Pw`` (statements writing P: the cast, moved after the wait that retires the previous
G2) and ``R`` (the rest).  The loop is declined (returned unchanged) unless every statement
instance the new order moves commutes with the ones it moves across (no buffer one writes and the
other touches), ``pre``/``post``/``R`` touch neither O nor P, and ``D`` touches neither S nor P nor
writes G1's operands.

Guarantees (``k`` running from ``s`` over ``n`` iterations; ``X(k')``: X with the loop variable
replaced by ``k'``; a gemm marked ``~1`` ends with ``wait_group(1)`` (``plans.wgmma_in_flight``),
``~2`` with ``wait_group(2)``, unmarked ones with ``wait_group(0)``)::

    if n > 0:
        pre(s); G1(s); rel1(s); R(s); post(s); Pw(s)                              # prologue
        for k in s + 1 .. s + n - 1:
            pre(k); G1(k)~1                       # S_k issued, in flight
            D(k-1); G2(k-1)~2                     # O += P_{k-1} V_{k-1} issued, in flight too
            wait_group(1) fencing S; rel1(k)      # retires G1(k): S_k complete, K's slot free
            R(k); post(k)                         # softmax of S_k while G2(k-1) runs
            wait_group(0) fencing O and P; rel2(k-1)
            Pw(k)                                 # P_k: registers the retired G2(k-1) no longer reads
        D(s+n-1); G2(s+n-1); rel2(s+n-1)                                          # epilogue

``tw.attention_overlap_retire`` = ``"top"`` (default ``"end"``): the same statements in the same
order, the loop rotated so that the retiring of ``G2(k-1)`` and the cast of ``P_k`` open iteration
``k + 1`` instead of closing iteration ``k``::

    if n > 0:
        pre(s); G1(s); rel1(s); R(s); post(s)                                     # prologue
        for k in s + 1 .. s + n - 1:
            wait_group(0) fencing O and P; rel2(k-2) if k >= s + 2; Pw(k-1)
            pre(k); G1(k)~1; D(k-1); G2(k-1)~2; wait_group(1) fencing S; rel1(k); R(k); post(k)
        wait_group(0) fencing O and P; rel2(s+n-2) if n >= 2; Pw(s+n-1)
        D(s+n-1); G2(s+n-1); rel2(s+n-1)                                          # epilogue

Why: ptxas schedules within a basic block, and with the wait at the end of the body it places
``WARPGROUP.DEPBAR.LE gsb0, 0x0`` before the softmax (seen in the sm_90a SASS of both ops.attention
and the user program: the P V in flight is waited for before the row max), so the softmax never
ran under the P V; at the top of the body the wait cannot move above the loop's back edge, and the
softmax of block ``j`` (the end of the body) runs while G2(j-1) does.  Measured on the H200
(bf16, ops.attention, 2026-12-01 22:34 UTC): 15-25% slower than the shipped loop (445 vs 558 TFLOP/s
at 4x16x4096x128 with ping-pong, 478 vs 567 at 16k): the SASS overlap does not pay, so "end" stays.

With ping-pong (``tw.pingpong``: each gemm inside its warpgroup's turn, ``bar.sync`` on the
warpgroup's named barrier before it and ``bar.arrive`` on the other's after it), the turns are
taken again around the new issue points: ``G1(k)`` through ``G2(k-1)`` in the loop (one turn per
iteration, as FlashAttention-3 does), ``G1(s)`` in the prologue and ``D; G2`` in the epilogue — so
each warpgroup still takes the same number of turns (n + 1), and the statements before and after
the loop that start and close the alternation stay as they are.

No register of an unretired wgmma (S between G1's issue and the wait after G2; O and P between
G2's issue and ``wait_group(0)``) is read or written by other code, which the emulator checks
(accumulators read as poison until retired; a write to an accumulator or register-A operand of an
unretired wgmma is an ``EmulatorError``).  Registers: S (fp32), P (16-bit, read by the P V in
flight) and O now live together through the softmax (without the pass P is dead there), so tiles
for which ptxas would spill are declined (``OTHER_REGISTERS``).
"""

from __future__ import annotations

import dataclasses

from ..ir import expr as E
from ..ir import thread as th
from ..ir import tile as t
from ..ir.tile_ops import op_binds
from ..ir.visitor import map_stmt, substitute, walk
from .pipeline_loops import _buffers_touched_shallow, _flatten

OPTION = "tw.attention_overlap"
RETIRE = "tw.attention_overlap_retire"  # where the P V in flight is retired: "end" of the body or "top"
PRODUCER_THREADS = 128  # warp_specialize_loop's producer warpgroup: the consumers start at thread 128
# registers besides the S, P and O tiles in the pipelined loop (row statistics, addresses, loop
# state), from ptxas on sm_90a (NVRTC): S + P + O = 160 (d 128, block 128 x 128) used 224 of 232
# without spilling; 176 (d 256, block 128 x 64) spilled.  Loops above the budget are declined.
OTHER_REGISTERS = 64
# pass config: that estimate for this kernel (an int; default OTHER_REGISTERS).  A lower one lets a loop whose
# other state is known to be small take the overlap: 192 x 128 blocks at head dim 64 (three consumer warpgroups of
# 160 registers: S + P + O = 128) built without spills at 32 for non-causal lengths that divide the blocks (no mask,
# no row checks) and spilled 28-72 bytes with them (NVRTC, sm_90a).
OTHER_REGISTERS_OPTION = "tw.attention_overlap_registers"


def attention_overlap(func: t.PrimFunc, ctx, enabled=None) -> t.PrimFunc:
    """The loop pipelined when ``enabled`` (default: the pass config ``tw.attention_overlap``) and
    the loop qualifies; ``func.attrs["attention_overlap"]`` then says it was."""
    if ctx is None or not (ctx.options.get(OPTION) if enabled is None else enabled):
        return func
    kernels = []
    walk(func.body, lambda s: kernels.append(s) if isinstance(s, t.Kernel) else None)
    if len(kernels) != 1 or not kernels[0].attrs.get("warp_specialized"):
        return func
    parts = []
    walk(kernels[0].body, lambda s: parts.append(s) if isinstance(s, t.ThreadPartition) and s.role == "consumer"
         else None)
    if len(parts) != 1:
        return func
    part = parts[0]
    loops = [s for s in _candidate_loops(part) if isinstance(s, t.For) and s.kind == "serial"
             and sum(isinstance(x, t.Gemm) for x in _flatten(s.body)) == 2]
    if len(loops) != 1:
        return func
    loop = loops[0]
    sched = _match(loop, part.count, ctx)
    if sched is None:
        return func
    retire = ctx.options.get(RETIRE, "end")
    if retire not in ("end", "top"):
        from ..errors import CompileError

        raise CompileError(f"pass_configs {RETIRE!r} is {retire!r}", hint='use "end" (the default) or "top"')
    new, in_flight = _pipeline(loop, sched, retire == "top")
    for g, groups in in_flight.items():
        func.plans.wgmma_in_flight[g] = groups
    func.body = map_stmt(func.body, lambda s: new if s is loop else None)
    func.attrs["attention_overlap"] = True
    return func


def _candidate_loops(part: t.ThreadPartition) -> list:
    """The partition's top-level statements and, for the persistent form (a tile loop around the key
    loop: warp_specialize_persistent_loop.py), those of its top-level serial loops' bodies."""
    top = _flatten(part.body)
    return top + [x for s in top if isinstance(s, t.For) and s.kind == "serial" for x in _flatten(s.body)]


# ------------------------------------------------------------------------------ dependences


def _touches(s) -> set:
    """Buffers a statement (and everything nested in it) reads or writes."""
    out: set = set()
    walk(s, lambda x: out.update(b for b, _ in _buffers_touched_shallow(x)))
    return out


def _writes(s) -> set:
    out: set = set()
    walk(s, lambda x: out.update(b for b, w in _buffers_touched_shallow(x) if w))
    return out


def _commute(a, b) -> bool:
    """No buffer that one of ``a``, ``b`` writes is touched by the other (mbarrier waits and
    arrivals touch no buffer here: their order is the protocol's, kept by construction)."""
    return not (_writes(a) & _touches(b)) and not (_writes(b) & _touches(a))


@dataclasses.dataclass
class _Schedule:
    pre: list
    g1: t.Gemm
    rel1: list
    mid: list  # (statement, "D" | "P" | "R") in body order
    g2: t.Gemm
    rel2: list
    post: list
    turn: tuple = ()  # ping-pong: (bar.sync of this warpgroup's turn, bar.arrive handing it over), or ()


def _turns(body: list):
    """``body`` without ping-pong's turns around its gemms, and the turn's (enter, leave)
    statements (() without ping-pong); None when named barriers appear otherwise."""
    named = [i for i, s in enumerate(body) if isinstance(s, th.NamedBarrier)]
    if not named:
        return body, ()
    enter, leave, plain = [], [], []
    for i, s in enumerate(body):
        if isinstance(s, th.NamedBarrier):
            continue
        if isinstance(s, t.Gemm):
            if not (0 < i < len(body) - 1 and isinstance(body[i - 1], th.NamedBarrier)
                    and isinstance(body[i + 1], th.NamedBarrier)):
                return None
            enter.append(body[i - 1])
            leave.append(body[i + 1])
        plain.append(s)
    if len(named) != 2 * len(enter) or any(x.arrive_only for x in enter) or not all(x.arrive_only for x in leave):
        return None
    return plain, (enter[0], leave[0])


def _match(loop: t.For, consumers: int, ctx):
    taken = _turns(_flatten(loop.body))
    if taken is None:
        return None
    body, turn = taken
    gemms = []
    walk(loop.body, lambda s: gemms.append(s) if isinstance(s, t.Gemm) else None)
    top = [i for i, s in enumerate(body) if isinstance(s, t.Gemm)]
    if len(gemms) != 2 or len(top) != 2:
        return None
    i1, i2 = top
    g1, g2 = body[i1], body[i2]
    S, P, Out = g1.c.buffer, g2.a.buffer, g2.c.buffer  # scores, probabilities (P V's A), output
    if not all(b.scope == "fragment" for b in (S, P, Out)) or len({S, P, Out}) != 3:
        return None
    if not all(r.buffer.scope == "shared" for r in (g1.a, g1.b, g2.b)):
        return None
    if not all(_on_wgmma(g, consumers, ctx) for g in (g1, g2)):
        return None  # mma.sync gemms are synchronous: nothing to overlap (and no wait_group to place)
    other = ctx.options.get(OTHER_REGISTERS_OPTION)
    other = OTHER_REGISTERS if other is None else int(other)
    if _tile_registers((S, P, Out), consumers) + other > _consumer_budget(consumers):
        return None  # P stays live through the softmax: it would spill

    def arrivals(i):
        out = []
        while i < len(body) and isinstance(body[i], th.MbarrierArrive):
            out.append(body[i])
            i += 1
        return out

    rel1, rel2 = arrivals(i1 + 1), arrivals(i2 + 1)
    pre, mid, post = body[:i1], body[i1 + 1 + len(rel1):i2], body[i2 + 1 + len(rel2):]
    for s in (*pre, *mid, *post):
        found = []
        walk(s, lambda x: found.append(x) if isinstance(x, (th.MbarrierArrive, t.LetStmt, th.WgmmaWait,
                                                              th.NamedBarrier, th.Barrier, t.ThreadPartition))
             or op_binds(x) else None)
        if found:
            return None  # arrivals elsewhere, bindings the moved statements could lose, synchronization
    if any(isinstance(x, th.MbarrierWait) for s in post for x in _all(s)):
        return None
    kinds = []
    for s in mid:
        touches, writes = _touches(s), _writes(s)
        if isinstance(s, th.MbarrierWait) or Out in touches:
            if touches & {S, P} or writes & {g1.a.buffer, g1.b.buffer}:
                return None  # runs while G1 writes S: must leave S (and G1's operands) alone
            kinds.append("D")
        elif P in writes:
            kinds.append("P")
        elif P in touches:
            return None
        else:
            kinds.append("R")
    for s in (*pre, *post):
        if _touches(s) & {Out, P}:
            return None
    # the statement instances the new order moves must commute with the ones they move across
    # (D and G2 of block j move past the rest of block j and the start of block j + 1; Pw past
    # the R statements after it and post)
    for a, (s, kind) in enumerate(zip(mid, kinds)):
        if kind == "D":
            across = [x for x, k in zip(mid[a + 1:], kinds[a + 1:]) if k != "D"] + [*post, *pre, g1]
        elif kind == "P":
            across = [x for x, k in zip(mid[a + 1:], kinds[a + 1:]) if k == "R"] + post
        else:
            continue
        if not all(_commute(s, x) for x in across):
            return None
    # G2 of block j - 1 runs while R and post of block j do
    if not all(_commute(g2, x) for x in (*post, *pre, g1, *(x for x, k in zip(mid, kinds) if k == "R"))):
        return None
    return _Schedule(pre, g1, rel1, list(zip(mid, kinds)), g2, rel2, post, turn)


def _all(s) -> list:
    out = []
    walk(s, out.append)
    return out


def _tile_registers(bufs, threads: int) -> int:
    """32-bit registers per thread that the fragments ``bufs`` take, spread over ``threads``."""
    from ..ir import dtype as dt

    total = 0
    for b in bufs:
        n = 1
        for d in b.shape:
            n *= int(d)
        total += -(-n * dt.bits(b.dtype) // (32 * threads))
    return total


def _consumer_budget(consumers: int) -> int:
    """Registers per consumer thread: warp_specialize_loop's setmaxnreg split, else 255."""
    from .warp_specialize_loop import _register_split

    split = _register_split(consumers)
    return split[1] if split else 255


def _on_wgmma(g: t.Gemm, consumers: int, ctx) -> bool:
    """Whether ``plan_gemms`` will give the consumers' gemm ``g`` to wgmma."""
    from ..errors import CompileError
    from .plan_gemms import plan_gemm

    try:
        plan = plan_gemm(g, consumers, ctx.target, ctx.options, first_thread=PRODUCER_THREADS)
    except CompileError:
        return False
    return plan.family == "wgmma"


# ------------------------------------------------------------------------------ the new loop


def _at(s, var, value):
    """A copy of statement ``s`` (and everything in it) with ``var`` replaced by ``value``, every
    node new (its own uid: the plans of the copies, e.g. a gemm's groups in flight, are their own)."""
    mapping = {var: E.as_expr(value)}

    def sub(x):
        if isinstance(x, E.Expr):
            return substitute(x, mapping)
        if isinstance(x, t.Region):
            return t.Region(x.buffer, tuple(sub(y) for y in x.starts), x.extents, x.squeezed)
        if isinstance(x, t.Stmt):
            changes = {f.name: sub(getattr(x, f.name)) for f in dataclasses.fields(x)}
            return dataclasses.replace(x, **changes)  # __post_init__: a fresh uid
        if isinstance(x, list):
            return [sub(y) for y in x]
        if isinstance(x, tuple):
            return tuple(sub(y) for y in x)
        return x

    return sub(s)


def _pipeline(loop: t.For, sc: _Schedule, retire_at_top: bool = False):
    """The statement replacing ``loop`` and the gemms that leave one wgmma group in flight;
    ``retire_at_top``: the rotated form (``RETIRE`` "top")."""
    k, loc = loop.var, loop.loc
    start, n = loop.start, loop.extent
    S, P, Out = sc.g1.c.buffer, sc.g2.a.buffer, sc.g2.c.buffer
    D = [s for s, kind in sc.mid if kind == "D"]
    Pw = [s for s, kind in sc.mid if kind == "P"]
    R = [s for s, kind in sc.mid if kind == "R"]

    def at(stmts, value):
        return [_at(s, k, value) for s in stmts]

    enter, leave = ([sc.turn[0]], [sc.turn[1]]) if sc.turn else ([], [])
    prologue = at([*sc.pre, *enter, sc.g1, *leave, *sc.rel1, *R, *sc.post, *Pw], start)
    prev = k - 1
    g1 = sc.g1
    g2 = _at(sc.g2, k, prev)
    body = [*sc.pre, *at(enter, k), g1, *at(D, prev), g2, *at(leave, k), th.WgmmaWait(1, (S,), loc=loc), *sc.rel1,
            *R, *sc.post, th.WgmmaWait(0, (Out, P), loc=loc), *at(sc.rel2, prev), *Pw]
    last = start + n - 1
    epilogue = at([*enter, *D, sc.g2, *leave, *sc.rel2], last)
    if retire_at_top:
        def retire(k_now, release):
            """wait_group(0); G2(k_now - 2)'s arrivals where ``release``; the cast of P(k_now - 1)."""
            rel = at(sc.rel2, k_now - 2)
            done = [t.IfThenElse(release, t.SeqStmt(rel), None, loc=loc)] if rel else []
            return [th.WgmmaWait(0, (Out, P), loc=loc), *done, *at(Pw, k_now - 1)]

        prologue = prologue[:len(prologue) - len(Pw)]  # P(s) is cast at the top of the first iteration
        opened = len(body) - len(sc.rel2) - len(Pw) - 1  # the body without its closing wait, arrivals and cast
        body = retire(k, E.as_expr(k) >= start + 2) + body[:opened]
        epilogue = retire(start + n, E.as_expr(n) >= 2) + epilogue
    steady = t.For(k, start + 1, n - 1, t.SeqStmt(body), "serial", 0, loc, dict(loop.attrs))
    # G1's own wait_group(1) and G2's wait_group(2) retire nothing (they only fence the registers
    # for the device compiler); the explicit waits after the turn's hand-over do the retiring
    in_flight = {g1: 1, g2: 2}
    return t.IfThenElse(E.as_expr(n) > 0, t.SeqStmt([*prologue, steady, *epilogue]), None, loc=loc), in_flight
