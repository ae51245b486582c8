"""Global -> shared ``T.copy`` into a ``KPackedLayout`` tile (part of ``lower_to_threads``).

The tile (``R`` rows of K, ``C`` columns) is cut into register blocks of ``group`` rows x ``V``
columns (``V`` as wide as the global vector loads allow, narrowed while the blocks would leave
threads idle).  Block ``b`` goes to thread ``b % threads``: it loads its ``group`` rows with one
vector load each (zero when out of bounds), regroups them in registers column by column and
writes one vector per 16-byte unit of packs (``16 / pack_bytes`` columns of ``group`` K values),
so consecutive threads write consecutive units (see ``KPackedLayout`` for the swizzle that keeps
those stores conflict-free).  Pipelined copies on targets without async copies keep the loads
where they stand and the stores at the end of the loop body, as ``lower_copy`` does.

The copy may fill a band of whole rows (a multiple of ``group`` rows, starting at a constant
multiple of it).  Other copies (column ranges, reshaped regions) return None: the caller then
copies element by element, which is right for any layout."""

from __future__ import annotations

from ..ir import dtype as dt
from ..ir import expr as E
from ..ir import thread as th
from ..ir import tile as t
from ..ir.visitor import substitute
from .expand_tile_ops import in_bounds, iteration_shape, region_indices
from .lower_exprs import Env, lower_expr
from .lowering_context import LoweringContext


def lower_copy_packed(ctx: LoweringContext, s: t.Copy, env: Env, chunk_width) -> list | None:
    src, dst = s.src, s.dst
    lay = ctx.shared_layouts[dst.buffer]
    shape = iteration_shape(src, dst)
    G = lay.group
    C = int(dst.buffer.shape[-1])
    if len(shape) != 2 or not isinstance(shape[0], int) or shape[0] % G or shape[1] != C:
        return None  # whole rows of the tile, a multiple of the pack height
    R = int(shape[0])
    dst_starts = tuple(lower_expr(ctx, x, env) for x in dst.starts)
    row0 = E.const_value(dst_starts[-2])
    if row0 is None or row0 % G or E.const_value(dst_starts[-1]) != 0:
        return None
    src_starts = tuple(lower_expr(ctx, x, env) for x in src.starts)
    src_l = t.Region(src.buffer, src_starts, src.extents, src.squeezed)
    dst_l = t.Region(dst.buffer, dst_starts, dst.extents, dst.squeezed)
    ppu = lay.packs_per_unit
    V = chunk_width(ctx, src, src_starts, shape)
    if s.coalesced_width is not None:
        V = min(V, s.coalesced_width)
    V = max(1, min(V, C))
    while V > ppu and (R // G) * (C // V) < ctx.nthreads:
        V //= 2
    spp = min(V, ppu)  # packs per store
    esize = dt.nbytes(src.buffer.dtype)
    total = (R // G) * (C // V)
    rounds = -(-total // ctx.nthreads)
    flat_dst = ctx.shared_flat(dst.buffer)
    out: list = [th.Comment(f"copy {src.buffer.name} -> {dst.buffer.name} (K-packed by {G}, blocks of {G} x {V})")]
    defer_all = ctx.defers_stores(s, dst.buffer, G * V * esize * rounds)  # register prefetch, as in lower_copy
    svars = [E.Var(f"__p{d}", "int32") for d in range(2)]
    sidx_v = region_indices(src_l, svars, shape)
    didx_v = region_indices(dst_l, svars, shape)
    for rnd in range(rounds):
        b = ctx.tid + rnd * ctx.nthreads
        row0 = (b // (C // V)) * G
        col0 = (b % (C // V)) * V
        loads: list = []
        stores: list = []
        tmps = []
        for i in range(G):
            bind = dict(zip(svars, (row0 + i, col0)))
            sidx = tuple(substitute(x, bind) for x in sidx_v)
            tmp = ctx.local_buffer(ctx.fresh("ld"), V, src.buffer.dtype)
            (ctx.loop_prelude if defer_all else out).append(th.LocalDecl(tmp))
            loads.append(th.VecCopy(tmp, E.as_expr(0), src.buffer, ctx.global_offset(src.buffer, sidx), V,
                                    in_bounds(src.buffer, sidx), loc=s.loc))
            tmps.append(tmp)
        for j in range(V // spp):
            unit = ctx.local_buffer(ctx.fresh("pk"), spp * G, dst.buffer.dtype)
            stores.append(th.LocalDecl(unit))
            for p in range(spp):
                for i in range(G):
                    v = E.Load(tmps[i], (E.as_expr(j * spp + p),))
                    if src.buffer.dtype != dst.buffer.dtype:
                        v = E.cast(dst.buffer.dtype, v)
                    stores.append(t.BufferStore(unit, (E.as_expr(p * G + i),), v))
            bind = dict(zip(svars, (row0, col0 + j * spp)))
            didx = tuple(substitute(x, bind) for x in didx_v)
            stores.append(th.VecCopy(flat_dst, ctx.shared_offset(dst.buffer, didx), unit, E.as_expr(0), spp * G,
                                     loc=s.loc))
        guarded = total % ctx.nthreads and rnd == rounds - 1
        if not defer_all:
            loads.extend(stores)
            stores = []
        for part, sink in ((loads, out), (stores, ctx.deferred)):
            if not part:
                continue
            if guarded:
                sink.append(t.IfThenElse(b < total, t.SeqStmt(part), None))
            else:
                sink.extend(part)
    return out

