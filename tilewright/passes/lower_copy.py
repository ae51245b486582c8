"""Global -> shared ``T.copy`` lowering (part of ``lower_to_threads``).

The tile is cut into chunks of ``v`` consecutive elements along its last dimension (``v`` as large
as 16 bytes allows, given the last extent, the global strides, the alignment of the start and, when
the chunk must be masked, the global extent).  Chunk ``c`` goes to thread ``c % threads`` of the thread
set being lowered (the block, or a thread partition: ``ctx.tid`` / ``ctx.nthreads``).
On targets with cp.async each chunk is one asynchronous copy (zero-filled when out of bounds);
a synchronous copy then commits and waits for its group at once.  Elsewhere a chunk travels
through registers: a vector load (zero when out of bounds) and a vector store to shared memory.
A destination in a ``KPackedLayout`` (AMD matrix operands) is filled by ``lower_copy_packed``
(register blocks regrouped column by column), or element by element when it cannot be.
"""

from __future__ import annotations

import numpy as np

from ..ir import dtype as dt
from ..ir import expr as E
from ..ir import thread as th
from ..ir import tile as t
from .analysis import affine_coeffs
from .expand_tile_ops import in_bounds
from .lower_exprs import Env, lower_expr
from .lowering_context import LoweringContext


def _multiple_of(e, v: int) -> bool:
    """Whether integer expression ``e`` is a multiple of ``v`` for every value of its variables:
    affine with coefficients that are multiples, or a product with such a factor (``(tile % n) * bn``,
    a persistent kernel's column offset), sums of such, ``x % d`` with ``v`` dividing ``d``."""
    co = affine_coeffs(e)
    if co is not None:
        return all(isinstance(c, int) and c % v == 0 for c in co.values())
    if isinstance(e, E.BinOp):
        if e.op == "*":
            return _multiple_of(e.a, v) or _multiple_of(e.b, v)
        if e.op in ("+", "-", "min", "max"):
            return _multiple_of(e.a, v) and _multiple_of(e.b, v)
        if e.op == "%":
            d = E.const_value(e.b)
            return isinstance(d, int) and d % v == 0 and _multiple_of(e.a, v)
    if isinstance(e, E.Cast) and e.dtype in ("int32", "int64"):
        return _multiple_of(e.a, v)
    return False


def _chunk_width(ctx, src: t.Region, starts, tile_shape) -> int:
    buf = src.buffer
    esize = dt.nbytes(buf.dtype)
    inner = tile_shape[-1]
    gdim = buf.ndim - 1
    if not (isinstance(buf.strides[-1], int) and buf.strides[-1] == 1):
        return 1  # a run-time innermost stride (a column-major view of dynamic size): element by element
    v = max(16 // esize, 1)
    while v > 1:
        ok = inner % v == 0
        for d in range(buf.ndim - 1):
            s = buf.strides[d]
            ok = ok and isinstance(s, int) and s % v == 0
        ok = ok and _multiple_of(starts[gdim], v)
        size = buf.shape[gdim]
        ok = ok and isinstance(size, int) and size % v == 0
        if ok:
            return v
        v //= 2
    return 1


def lower_copy_g2s(ctx: LoweringContext, s: t.Copy, env: Env) -> list:
    src, dst = s.src, s.dst
    from .expand_tile_ops import iteration_shape, region_indices

    packed = getattr(ctx.shared_layouts.get(dst.buffer), "packed", False)
    if packed:  # a K-packed operand tile (AMD): register blocks regrouped by column
        from .lower_copy_packed import lower_copy_packed

        lowered = lower_copy_packed(ctx, s, env, _chunk_width)
        if lowered is not None:
            return lowered
    shape = iteration_shape(src, dst)
    src_starts = tuple(lower_expr(ctx, x, env) for x in src.starts)
    dst_starts = tuple(lower_expr(ctx, x, env) for x in dst.starts)
    src_l = t.Region(src.buffer, src_starts, src.extents, src.squeezed)
    dst_l = t.Region(dst.buffer, dst_starts, dst.extents, dst.squeezed)
    v = _chunk_width(ctx, src, src_starts, shape)
    if s.coalesced_width is not None:  # the author's bound on the vector width
        v = min(v, s.coalesced_width)
    if packed:  # consecutive columns are not adjacent in a K-packed tile: element by element
        v = 1
    esize = dt.nbytes(src.buffer.dtype)
    same_type = src.buffer.dtype == dst.buffer.dtype
    use_async = ctx.target.has("cp.async") and same_type and v * esize in (4, 8, 16)
    inner = shape[-1]
    chunks_per_row = inner // v
    total = int(np.prod(shape)) // v
    rounds = -(-total // ctx.nthreads)
    flat_dst = ctx.shared_flat(dst.buffer)
    out: list = [th.Comment(f"copy {src.buffer.name} -> {dst.buffer.name} ({'async' if use_async else 'sync'}, "
                            f"{v} x {src.buffer.dtype} per chunk)")]
    # register prefetch on targets without async copies (see LoweringContext.defers_stores)
    defer_all = not use_async and ctx.defers_stores(s, dst.buffer, v * esize * rounds)
    for rnd in range(rounds):
        c = ctx.tid + rnd * ctx.nthreads
        row = c // chunks_per_row
        col = (c % chunks_per_row) * v
        # position in the tile: unflatten the row over the leading dims
        pos = []
        rem = row
        for d in range(len(shape) - 1):
            inner_rows = int(np.prod(shape[d + 1:-1])) if d + 1 < len(shape) - 1 else 1
            pos.append(rem // inner_rows if inner_rows > 1 else rem)
            rem = rem % inner_rows if inner_rows > 1 else rem
        pos.append(col)
        svars = [E.Var(f"__p{d}", "int32") for d in range(len(shape))]
        sidx = region_indices(src_l, svars, shape)
        didx = region_indices(dst_l, svars, shape)
        bind = dict(zip(svars, pos))
        from ..ir.visitor import substitute

        sidx = tuple(substitute(x, bind) for x in sidx)
        didx = tuple(substitute(x, bind) for x in didx)
        pred = in_bounds(src.buffer, sidx)
        goff = ctx.global_offset(src.buffer, sidx)
        soff = ctx.shared_offset(dst.buffer, didx)
        stmts: list = []
        stores: list = []
        if use_async:
            stmts.append(th.AsyncCopy(flat_dst, soff, src.buffer, goff, v * esize, pred, loc=s.loc))
        else:
            tmp = ctx.local_buffer(ctx.fresh("ld"), v, src.buffer.dtype)
            # a deferred store must see the registers: declare them at the top of the loop body,
            # outside the pipeline's guard around this copy
            (ctx.loop_prelude if defer_all else out).append(th.LocalDecl(tmp))
            stmts.append(th.VecCopy(tmp, E.as_expr(0), src.buffer, goff, v, pred, loc=s.loc))
            if same_type:
                stores.append(th.VecCopy(flat_dst, soff, tmp, E.as_expr(0), v, loc=s.loc))
            else:
                for k in range(v):
                    stores.append(t.BufferStore(flat_dst, (soff + k,),
                                                E.cast(dst.buffer.dtype, E.Load(tmp, (E.as_expr(k),)))))
        guarded = total % ctx.nthreads and rnd == rounds - 1
        if not defer_all:
            stmts.extend(stores)
            stores = []
        for part, sink in ((stmts, out), (stores, ctx.deferred)):
            if not part:
                continue
            if guarded:
                sink.append(t.IfThenElse(c < total, t.SeqStmt(part), None))
            else:
                sink.extend(part)
    if use_async and s.mode != "async":
        out.append(th.AsyncCommit())
        out.append(th.AsyncWait(0))
    return out


def lower_copy_tma(ctx: LoweringContext, s: t.Copy, env: Env) -> list:
    """A ``mode="tma"`` copy (made by ``pipeline_loops``): one ``TmaLoad`` per 128-byte column block
    of the shared tile, arriving on the copy's ring-slot mbarrier.  Out-of-bounds parts of the box
    are zero-filled by the hardware, so ragged tiles need no mask."""
    from ..ir.layout import SharedLayout, tma_boxes

    src, dst = s.src, s.dst
    bar, bar_index = s.barrier
    if s.user_sync:
        _check_tma_copy(ctx, s)
    too_big = [n for n in src.buffer.shape if isinstance(E.const_value(n), int) and E.const_value(n) >= 2**31]
    if too_big:  # box coordinates are signed 32-bit operands of the instruction
        from ..errors import CompileError

        raise CompileError(f"T.copy from {src.buffer.name}: a dimension of {too_big[0]} elements is past the "
                           "tensor memory accelerator's 32-bit coordinates", s.loc,
                           hint="split the dimension (a reshape to two dimensions), or pipeline the loop on a "
                           "target without TMA")
    starts = [lower_expr(ctx, x, env) for x in src.starts]
    dst_starts = [lower_expr(ctx, x, env) for x in dst.starts]
    flat_dst = ctx.shared_flat(dst.buffer)
    lay = ctx.shared_layouts[dst.buffer]
    cols = int(dst.buffer.shape[-1])
    rows = int(dst.extents[-2])  # the tile's rows, or a multicast copy's share of them: the box's rows
    nboxes, box_cols = tma_boxes((int(dst.buffer.shape[-2]), cols), dst.buffer.dtype)
    box_layout = SharedLayout((rows, box_cols), dst.buffer.dtype, tma=True)
    box = tuple(int(x) for x in src.extents[:-1]) + (box_cols,)
    tmap = ctx.tensor_map(src.buffer, box, box_layout.tma_swizzle)
    bar_flat = ctx.shared_flat(bar)
    bar_idx = lower_expr(ctx, bar_index, env)
    out: list = [th.Comment(f"copy {src.buffer.name} -> {dst.buffer.name} (TMA, {nboxes} box(es) of {box})")]
    # T.tma_copy: the first warp of the threads that run it raises the barrier's expected bytes by
    # the whole copy's and issues the boxes; it does not arrive (TileLang's contract: the program
    # arrives with T.barrier_arrive, so several copies can share one barrier phase)
    issuer = ctx.region.base // ctx.target.warp_size if ctx.region is not None else 0
    total = nboxes * int(np.prod(box)) * dt.nbytes(dst.buffer.dtype)
    # multicast: this block's box lands in every block of the mask, and each of them loads its own share
    # of the tile the same way: the issuing block's barrier expects the bytes of all the shares
    sharers = 1 if s.multicast is None else bin(int(s.multicast)).count("1")
    for h in range(nboxes):
        # the box starts at the region's first row (row 0 of a whole tile), column h * box_cols of the
        # tile (the start of a column block)
        lead = dst_starts[:-2]
        dst_index = lay.offset(tuple(lead) + (dst_starts[-2], E.as_expr(h * box_cols)))
        coords = tuple(starts[:-1]) + (starts[-1] + h * box_cols,)
        expect = (total if h == 0 else 0) if s.user_sync else None
        if s.multicast is not None:
            expect = sharers * int(np.prod(box)) * dt.nbytes(dst.buffer.dtype)
        out.append(th.TmaLoad(flat_dst, E.as_expr(dst_index), box_layout, tmap, coords, bar_flat, bar_idx, loc=s.loc,
                              expect_bytes=expect, issuer_warp=issuer if s.user_sync else 0,
                              arrives=not s.user_sync, multicast=s.multicast))
    return out


def _check_tma_copy(ctx: LoweringContext, s: t.Copy) -> None:
    """``T.tma_copy`` is the tensor memory accelerator or nothing: refuse what it cannot do."""
    from ..errors import CompileError
    from .pipeline_loops import tma_eligible

    if not ctx.target.has("tma"):
        raise CompileError(f"T.tma_copy needs a tensor memory accelerator (sm_90 or newer); {ctx.target} has none",
                           s.loc, hint="use T.copy (pipelined in a T.Pipelined loop) on this target")
    if not tma_eligible(s):
        raise CompileError(f"T.tma_copy {s.src.buffer.name} -> {s.dst.buffer.name}: TMA cannot describe this tile "
                           "(it needs a 2-D shared tile of whole 16-byte rows, a contiguous last dimension with other "
                           "strides multiples of 16 bytes, and box extents of at most 256)", s.loc,
                           hint="use T.copy, or a tile shape TMA can move")
