"""Ping-pong consumers for the persistent form of pass ``warp_specialize`` (pass config
``tw.gemm_pingpong``): two consumer warpgroups, each computing whole output tiles, take the tiles of
the block's persistent schedule in turn, so that one warpgroup's epilogue (bias, activation, the C
store) runs while the other's mainloop keeps the tensor cores busy.

When: ``warp_specialize`` calls ``pingpong_consumers`` when the pass config is true and the kernel
is in the persistent form, written for one consumer warpgroup (128 threads: the warpgroup holds the
whole ``block_M x block_N`` accumulator), its gemm goes to wgmma with a ring of two or more stages,
and the kernel's top level holds nothing but declarations,
annotations and the tile loop (so every consumer statement belongs to a tile).  Otherwise the pass
builds its usual single consumer partition (the option is a request, never a change of meaning).

Guarantees (the notation of ``warp_specialize``; the block grows to ``128 + 2 * 128`` threads):

    producer:   unchanged: every tile of the block's schedule in order, one ring, the running K-step
                count ``it`` giving slot and phase
    consumer w: ThreadPartition(128 + 128 w, 128) for w = 0, 1: setmaxnreg.inc; warpgroup 1 first
                arrives (``bar.arrive``) on TURN[0]; then for every tile ``r`` of the tile loop with
                ``(r - r0) % 2 == w``: the statements before the K loop, ``bar.sync TURN[w]`` (its
                turn), the consumer K loop (ring waits, wgmma, slot releases), ``bar.arrive
                TURN[1 - w]`` (the other's turn), the drain, the statements after the K loop; after
                the tile loop the warpgroup that would take the next tile (``E % 2 == w`` for ``E``
                tiles) syncs once more on its TURN, consuming the last arrival (every phase of both
                barriers completes: ``n0 + [E even] = 1 + n1`` syncs / arrivals on TURN[0],
                ``n1 + [E odd] = n0`` on TURN[1])

The turns make the two mainloops follow each other in tile order, which the single ring needs: a
warpgroup waits on the ``full`` barrier of step ``it`` only after every earlier step's ``full`` wait
has passed (the other warpgroup's whole tile), so the barrier is at most one phase behind and its
parity names step ``it``, not step ``it - 2S``.  Each step is released by the warpgroup that ran it
(``empty`` counts the 4 warps of one warpgroup; with cluster multicast, those of the same warpgroup
in both blocks, whose tile loops walk the same pairs of tiles in lockstep, so that the warpgroups of
one parity in the two blocks consume the same ring steps).  The second warpgroup's statements are copies with
their own statement identities, and every shared buffer they use that is not a ring (the staged
epilogue's C tile) is its own copy: the two epilogues never share memory.  Fragments are per thread
and laid out over 128 threads in both partitions."""

from __future__ import annotations

import dataclasses

from ..ir import expr as E
from ..ir import thread as th
from ..ir import tile as t
from ..ir.plans import new_uid
from ..ir.tile_ops import decl_of, rebuild_op
from ..ir.visitor import map_stmt, rewrite_expr

OPTION = "tw.gemm_pingpong"
# named barriers of the turns (a partition's own barriers are numbered from 1 up by the lowering)
TURN = (15, 14)
WARPGROUP = 128


def wanted(ctx, tiles, consumers: int, wgmma: bool, stages: int, before: list, after: list) -> bool:
    """Whether the ping-pong form applies (module docstring, "When")."""
    return bool(ctx.options.get(OPTION)) and tiles is not None and consumers == WARPGROUP and wgmma \
        and stages >= 2 and not before and not after and ctx.target.vendor == "nvidia"


def pingpong_consumers(outer: t.For, tile_before: list, tile_after: list, mainloop, shared: set, take: list,
                       loc) -> tuple:
    """(the two consumer partitions, the declarations of the second warpgroup's shared buffers).
    ``mainloop(True)`` builds one warpgroup's (K loop, drain) afresh, its waits naming their phase;
    ``shared`` are the kernel's shared buffers outside the ring."""
    used = _buffers_in(tile_before + tile_after) & shared
    swap = {b: _copy_buffer(b) for b in sorted(used, key=lambda b: b.name)}
    parts = []
    for w in (0, 1):
        k_loop, drain = mainloop(True)
        before = tile_before if w == 0 else _clone(tile_before, swap)
        after = tile_after if w == 0 else _clone(tile_after, swap)
        mine, other = TURN[w], TURN[1 - w]
        tile = t.SeqStmt([*before, *_turn(mine, False, loc), k_loop, *_turn(other, True, loc), *drain, *after])
        body = t.For(outer.var, outer.start, outer.extent,
                     t.SeqStmt([t.IfThenElse(E.binary("==", (outer.var - outer.start) % 2, w), tile, None, loc=loc)]),
                     "serial", 0, outer.loc, dict(outer.attrs))
        opening = _turn(TURN[0], True, loc) if w == 1 else []
        closing = t.IfThenElse(E.binary("==", E.as_expr(outer.extent) % 2, w), t.SeqStmt(_turn(mine, False, loc)),
                               None, loc=loc)
        parts.append(t.ThreadPartition(WARPGROUP * (1 + w), WARPGROUP, f"consumer {w}",
                                       t.SeqStmt([*take, *opening, body, closing]), loc))
    return parts, [t.Alloc(b, loc=b.loc) for b in swap.values()]


def _turn(barrier: int, arrive_only: bool, loc) -> list:
    """Waiting for a turn (``bar.sync``) or handing it on (``bar.arrive``): both warpgroups, 256 threads."""
    return [th.NamedBarrier(barrier, 2 * WARPGROUP, arrive_only=arrive_only, loc=loc)]


def _copy_buffer(b: t.Buffer) -> t.Buffer:
    nb = t.Buffer(f"{b.name}_wg1", tuple(b.shape), b.dtype, b.scope, loc=b.loc)
    nb.attrs.update(b.attrs)
    return nb


def _buffers_in(stmts: list) -> set:
    from ..ir.verifier import exprs_of, regions_of
    from ..ir.visitor import loads_in, walk

    out: set = set()

    def visit(s):
        out.update(r.buffer for r in regions_of(s))
        out.update(ld.buffer for e in exprs_of(s) for ld in loads_in(e))
        if isinstance(s, t.BufferStore):
            out.add(s.buffer)

    for s in stmts:
        walk(s, visit)
    return out


def _clone(stmts: list, swap: dict) -> list:
    """Copies of ``stmts`` (every node a new statement identity, so that plans keyed by statement
    keep the two warpgroups apart) reading and writing ``swap[b]`` instead of each buffer ``b``."""
    def fix_expr(e):
        return rewrite_expr(e, lambda x: E.Load(swap[x.buffer], tuple(x.indices))
                            if isinstance(x, E.Load) and x.buffer in swap else None)

    def fix_region(r):
        return t.Region(swap.get(r.buffer, r.buffer), tuple(fix_expr(x) for x in r.starts), r.extents, r.squeezed)

    def fresh(s):
        if decl_of(s) is not None:
            n = rebuild_op(s, fix_region, fix_expr)
        elif isinstance(s, t.BufferStore):
            n = t.BufferStore(swap.get(s.buffer, s.buffer), tuple(fix_expr(i) for i in s.indices), fix_expr(s.value),
                              s.loc)
        elif isinstance(s, t.LetStmt):
            n = t.LetStmt(s.var, fix_expr(s.value), s.loc)
        elif isinstance(s, t.IfThenElse):
            n = t.IfThenElse(fix_expr(s.cond), s.then_body, s.else_body, s.loc)
        else:
            n = dataclasses.replace(s)
        n.uid = new_uid()
        return n

    return [map_stmt(s, fresh) for s in stmts]
