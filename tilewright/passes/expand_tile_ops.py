"""Pass ``expand_tile_ops``: rewrite elementwise tile operations as ``T.Parallel`` loops.

Needs: a verified Tile IR function (after ``pipeline_loops``).
Guarantees: every ``Copy`` except global -> shared ones, every ``Fill`` and every tile-form
``Atomic`` is replaced by a ``ParallelFor`` over the tile whose body reads and writes single
elements (the ``"expand"`` hooks of ``ir.tile_ops``: a tile op registered there is expanded too).
Global accesses are masked: out-of-bounds elements of a global source read as zero,
out-of-bounds elements of a global destination are not written.  Global -> shared copies stay
``Copy`` nodes so that lowering can issue them as asynchronous copies; their masks are applied
there the same way.
"""

from __future__ import annotations

from ..ir import dtype as dt
from ..ir import expr as E
from ..ir import tile as t
from ..ir.analysis import bounds_condition
from ..ir.tile_ops import hook, register
from ..ir.visitor import map_stmt, rebuild


def expand_tile_ops(func: t.PrimFunc) -> t.PrimFunc:
    def rewrite(s):
        expand = hook(type(s), "expand")  # each tile op's expansion, registered below (ir.tile_ops)
        return expand(s) if expand is not None else None

    func.body = map_stmt(func.body, rewrite)
    return func


def _expand_copy(s: t.Copy):
    if s.mode == "tma_store":
        return None  # TMA stores: plan_tma_stores
    if s.src.buffer.scope == "global" and s.dst.buffer.scope == "shared" and not dt.is_subbyte(s.src.buffer.dtype):
        return None  # lowered as an asynchronous copy (4-bit elements, two per byte, go one by one)
    return copy_as_parallel(s)


def _expand_reduce(s: t.Reduce):
    """A reduction reading or writing a shared tile goes through fragments (TileLang accepts shared
    operands): the shared source is copied into a fragment first, a shared destination is reduced
    into a fragment (holding its old values when ``clear=False``) and copied back."""
    if s.src.scope != "shared" and s.dst.scope != "shared":
        return None
    out: list = []
    src, dst = s.src, s.dst
    if src.scope == "shared":
        src = t.Buffer(f"{s.src.name}_frag", s.src.shape, s.src.dtype, "fragment", loc=s.loc)
        out += [t.Alloc(src, loc=s.loc), copy_as_parallel(t.Copy(t.Region.full(s.src), t.Region.full(src), s.loc))]
    if dst.scope == "shared":
        dst = t.Buffer(f"{s.dst.name}_frag", s.dst.shape, s.dst.dtype, "fragment", loc=s.loc)
        out.append(t.Alloc(dst, loc=s.loc))
        if not s.clear:
            out.append(copy_as_parallel(t.Copy(t.Region.full(s.dst), t.Region.full(dst), s.loc)))
    out.append(rebuild(s, src=src, dst=dst))
    if dst is not s.dst:
        out.append(copy_as_parallel(t.Copy(t.Region.full(dst), t.Region.full(s.dst), s.loc)))
    return out


def _expand_atomic(s: t.Atomic):
    return atomic_as_parallel(s) if isinstance(s.value, t.Region) else None


def iteration_shape(src: t.Region, dst: t.Region) -> tuple:
    """The loop extents of a copy: the common tile shape, 1-sized dims dropped when the two sides
    disagree about them."""
    if t.same_dims(tuple(src.shape), tuple(dst.shape)):
        return tuple(src.shape)
    return tuple(x for x in src.shape if not (isinstance(x, int) and x == 1))


def region_indices(r: t.Region, loop_vars: list, shape: tuple) -> tuple:
    """Element index of region ``r`` at the loop point ``loop_vars`` (loop over ``shape``)."""
    tile_dims = [d for d in range(r.buffer.ndim) if d not in r.squeezed]
    if len(shape) != len(tile_dims):
        tile_dims = [d for d in tile_dims if r.extents[d] != 1]
    if len(shape) != len(tile_dims):
        raise ValueError("region/loop rank mismatch")
    idx = list(r.starts)
    for v, d in zip(loop_vars, tile_dims):
        idx[d] = r.starts[d] + v
    return tuple(idx)


def in_bounds(buf: t.Buffer, idx) -> E.Expr | None:
    """Bounds predicate for a global buffer access (None when nothing needs checking)."""
    return bounds_condition(buf.shape, idx) if buf.scope == "global" else None


def _loop_vars(n: int, prefix: str = "i") -> list:
    return [E.Var(f"{prefix}{k}", "int32", kind="loop") for k in range(n)]


def copy_as_parallel(s: t.Copy) -> t.ParallelFor:
    shape = iteration_shape(s.src, s.dst)
    vs = _loop_vars(len(shape), "c")
    sidx = region_indices(s.src, vs, shape)
    didx = region_indices(s.dst, vs, shape)
    value = E.Load(s.src.buffer, sidx)
    sp = in_bounds(s.src.buffer, sidx)
    if sp is not None:
        value = E.select(sp, value, E.Const(0, s.src.buffer.dtype))
    value = E.cast(s.dst.buffer.dtype, value)
    store = t.BufferStore(s.dst.buffer, didx, value, loc=s.loc)
    dp = in_bounds(s.dst.buffer, didx)
    body = store if dp is None else t.IfThenElse(dp, store, None, loc=s.loc)
    return t.ParallelFor(tuple(vs), shape, body, loc=s.loc, coalesced_width=s.coalesced_width)


def fill_as_parallel(s: t.Fill) -> t.ParallelFor:
    shape = tuple(s.dst.shape)
    vs = _loop_vars(len(shape), "f")
    idx = region_indices(s.dst, vs, shape)
    store = t.BufferStore(s.dst.buffer, idx, E.cast(s.dst.buffer.dtype, s.value), loc=s.loc)
    dp = in_bounds(s.dst.buffer, idx)
    body = store if dp is None else t.IfThenElse(dp, store, None, loc=s.loc)
    return t.ParallelFor(tuple(vs), shape, body, loc=s.loc)


def atomic_as_parallel(s: t.Atomic) -> t.ParallelFor:
    shape = iteration_shape(s.value, s.dst)
    vs = _loop_vars(len(shape), "a")
    sidx = region_indices(s.value, vs, shape)
    didx = region_indices(s.dst, vs, shape)
    value = E.Load(s.value.buffer, sidx)
    sp = in_bounds(s.value.buffer, sidx)
    if sp is not None:
        value = E.select(sp, value, E.Const(0, s.value.buffer.dtype))
    dst_elem = t.Region(s.dst.buffer, didx, tuple(1 for _ in didx), tuple(range(len(didx))))
    op = t.Atomic(s.op, dst_elem, E.cast(s.dst.buffer.dtype, value), loc=s.loc, order=s.order)
    dp = in_bounds(s.dst.buffer, didx)
    body = op if dp is None else t.IfThenElse(dp, op, None, loc=s.loc)
    return t.ParallelFor(tuple(vs), shape, body, loc=s.loc)


register(t.Copy, "expand", _expand_copy)
register(t.Fill, "expand", fill_as_parallel)
register(t.Atomic, "expand", _expand_atomic)
register(t.Reduce, "expand", _expand_reduce)
