"""Part of pass ``warp_specialize``: TMA multicast of the operand tiles that the blocks of a thread-block
cluster share, so that the cluster fetches each shared tile from L2 once.

When (``multicast_plan``; otherwise None and the ring stays per block): the kernel has ``cluster_dims``
of ``n = 2`` blocks along one grid axis and 1 along the others, on a target with clusters (sm_90+),
and a K loop whose bounds do not read that axis's block index (the blocks of a cluster run the same
K steps).  In the persistent form the tile loop's bounds must not read it either (the blocks of a
cluster walk their tile sequences in lockstep: ``kernels.gemm.matmul_persistent(cluster=2)`` gives
them neighbouring tiles), and the scalars the producer recomputes (``lets``) are read through: a
coordinate that reads a let reads what the let's value reads.  With
block-index rasterization (``T.use_swizzle``) the cluster's axis must be the panel's fast axis (x for
``order="row"``) and the panel even: the two launched neighbours of a cluster then get neighbouring
tiles along that axis (the panel width, ``min(grid - first, panel)``, stays even on a grid of whole
clusters), in the same row (column) of the panel.  A
mainloop copy is *shared* when its global coordinates do not read that axis's block index either:
the blocks of one cluster differ only there, so they load the same tile (two blocks in one tile row
share A; in one tile column, B).  It must be a plain 2-D tile (no squeezed dimensions) whose rows
split into ``n`` shares of a multiple of 8 rows (each share then starts on the TMA swizzle period,
so it lands exactly where the whole box would have put those rows).  No shared copy: declined.

Guarantees (applied by ``warp_specialize``), for a shared copy of ``R`` rows:

* block rank ``r``'s producer loads rows ``[r R/n, (r+1) R/n)`` of the tile with ``.multicast::cluster``
  (ctaMask of all ``n`` blocks) into the same rows of ring slot ``s`` in every block, its bytes
  completing on ``full[s]`` of each; its own arrival on ``full[s]`` expects the bytes of all ``n``
  shares (each block's share lands on every block's barrier at the same offset);
* ``empty[s]`` counts the releases of the consumers of all ``n`` blocks: every releasing consumer warp
  (or thread) arrives on ``empty[s]`` of every block of the cluster (``cta`` = 0 .. n-1), so a slot
  is refilled -- in every block, by any block's multicast -- only after all its readers are done;
* the mbarrier initialisation is followed by a cluster barrier (no block multicasts into, or arrives
  on, a barrier its peer has not initialised), and the producer ends with a wait on every slot's
  last release (no block exits while a peer may still arrive on its barriers).
"""

from __future__ import annotations

from ..ir import expr as E
from ..ir import thread as th
from ..ir import tile as t
from ..ir.visitor import free_vars, loads_in, substitute, walk
from .check_clusters import cluster_dims_for

SWIZZLE_ROWS = 8  # the TMA swizzle repeats every 8 rows: each share starts on that period


def multicast_plan(kernel: t.Kernel, loop: t.For, copies: list, tiles, target, lets=()):
    """(cluster size n, the shared copies) when the mainloop's tiles can be multicast, else None."""
    dims = cluster_dims_for(kernel, target)
    if dims is None or sorted(dims) != [1, 1, 2]:
        return None
    values: dict = {}  # let variable -> its value in terms of what the lets before it read
    for s in lets:
        values[s.var] = substitute(s.value, values)

    def reads(x) -> set:
        return free_vars(substitute(x, values)) if values else free_vars(x)
    axis = dims.index(2)
    if axis >= len(kernel.block_vars):
        return None
    swizzled = []
    walk(kernel.body, lambda s: swizzled.append(s) if isinstance(s, t.Annotate) and s.kind == "swizzle" else None)
    for s in swizzled:
        fast = 0 if s.attrs["order"] == "row" else 1
        if axis != fast or s.attrs["panel_size"] % 2 or len(kernel.grid) < 2:
            return None
    bv = kernel.block_vars[axis]
    bounds = [loop.start, loop.extent] + ([tiles[0].start, tiles[0].extent] if tiles is not None else [])
    for x in bounds:
        if loads_in(x) or bv in reads(x):
            return None
    n = 2
    shared = []
    for c in copies:
        src, dst = c.src, c.dst
        if any(bv in reads(x) for x in src.starts) or len(src.starts) != 2 or src.squeezed:
            continue
        if len(dst.buffer.shape) != 2:
            continue
        rows = E.const_value(src.extents[0])
        if not isinstance(rows, int) or rows % (n * SWIZZLE_ROWS):
            continue
        shared.append(c)
    return (n, shared) if shared else None


def share_of(c: t.Copy, n: int, region_of_dst) -> t.Copy:
    """Block rank ``r``'s share of shared copy ``c``: rows ``[r R/n, (r+1) R/n)`` of the tile, multicast to
    the ``n`` blocks; ``region_of_dst(starts, extents)`` makes the ring-slot destination region."""
    rank = E.Call(th.CLUSTER_RANK, (), "int32")
    rows = E.const_value(c.src.extents[0])
    part = rows // n
    src = t.Region(c.src.buffer, (c.src.starts[0] + rank * part, c.src.starts[1]),
                   (part, c.src.extents[1]), c.src.squeezed)
    dst_starts = (c.dst.starts[0] + rank * part,) + tuple(c.dst.starts[1:])
    dst_extents = (part,) + tuple(c.dst.extents[1:])
    return src, region_of_dst(dst_starts, dst_extents), (1 << n) - 1


def releases_to_cluster(arrive: th.MbarrierArrive, n: int) -> list:
    """``arrive`` on the barrier at its place in each of the ``n`` blocks of the cluster."""
    return [th.MbarrierArrive(arrive.bar, arrive.index, arrive.count, arrive.expect_tx, arrive.elected, loc=arrive.loc,
                              cta=E.as_expr(q)) for q in range(n)]
