"""Shared -> global ``T.copy`` as TMA stores (part of ``lower_to_threads``; planned by ``plan_tma_stores``).

A ``mode="tma_store"`` copy becomes one ``TmaStore`` per 128-byte column block of the shared tile
(the TMA layout stores those blocks one after the other, each one box), then one ``TmaStoreCommit``,
all by one thread: the first thread of the thread set being lowered (the block, or a partition),
which is also the thread whose ``TmaStoreWait`` later waits for them.  The tensor map of the
destination is encoded per launch like the load descriptors.  Boxes that reach past the tensor's
edge are clipped by the hardware, so ragged tiles need no mask.
"""

from __future__ import annotations

from ..errors import CompileError, InternalError
from ..ir import expr as E
from ..ir import thread as th
from ..ir import tile as t
from ..ir.layout import SharedLayout, tma_boxes
from .lower_exprs import Env, lower_expr
from .lowering_context import LoweringContext


def issuer_thread(ctx: LoweringContext) -> int:
    """The block thread index that issues (and waits for) the thread set's TMA stores."""
    return ctx.region.base if ctx.region is not None else 0


def lower_copy_tma_store(ctx: LoweringContext, s: t.Copy, env: Env) -> list:
    src, dst = s.src, s.dst
    lay = ctx.shared_layouts[src.buffer]
    if not getattr(lay, "tma", False):
        raise InternalError(f"TMA store source {src.buffer.name} is not in the TMA layout", "lower_to_threads", s.loc)
    too_big = [n for n in dst.buffer.shape if isinstance(E.const_value(n), int) and E.const_value(n) >= 2**31]
    if too_big:  # box coordinates are signed 32-bit operands of the instruction
        raise CompileError(f"T.copy to {dst.buffer.name}: a dimension of {too_big[0]} elements is past the "
                           "tensor memory accelerator's 32-bit coordinates", s.loc,
                           hint="split the dimension (a reshape to two dimensions), or pass "
                           "pass_configs={'tw.disable_tma': True}")
    starts = [lower_expr(ctx, x, env) for x in dst.starts]
    flat_src = ctx.shared_flat(src.buffer)
    rows, cols = (int(x) for x in src.buffer.shape[-2:])
    nboxes, box_cols = tma_boxes((rows, cols), src.buffer.dtype)
    box_layout = SharedLayout((rows, box_cols), src.buffer.dtype, tma=True)
    box = tuple(int(x) for x in dst.extents[:-1]) + (box_cols,)
    tmap = ctx.tensor_map(dst.buffer, box, box_layout.tma_swizzle)
    issuer = issuer_thread(ctx)
    out: list = [th.Comment(f"copy {src.buffer.name} -> {dst.buffer.name} (TMA store, {nboxes} box(es) of {box})")]
    for h in range(nboxes):
        src_index = lay.offset((0, h * box_cols))
        coords = tuple(starts[:-1]) + (starts[-1] + h * box_cols,)
        out.append(th.TmaStore(flat_src, E.as_expr(src_index), box_layout, tmap, coords, issuer, loc=s.loc))
    out.append(th.TmaStoreCommit(issuer, loc=s.loc))
    return out


def lower_tma_store_wait(ctx: LoweringContext, s: th.TmaStoreWait) -> list:
    return [th.TmaStoreWait(s.pending, issuer_thread(ctx) if s.issuer is None else s.issuer, loc=s.loc)]
