"""Pass ``check_clusters``: thread-block clusters (``T.Kernel(..., cluster_dims=(cx, cy, cz))``).

Needs: verified Tile IR and a target; runs first (the interpreter's compile calls ``check_clusters``
too).  The frontend records a cluster of more than one block as the kernel's ``cluster_dims`` attribute.

Guarantees:

* The *cluster features* -- ``T.block_rank_in_cluster()`` (the ``cluster_ctarank`` call),
  ``T.cluster_sync / arrive / wait`` (``ClusterBarrier``) and ``T.mbarrier_arrive(bar, cta_id=...)``
  (a remote arrival) -- appear only in a kernel with ``cluster_dims`` on a target with clusters
  (``target.has("cluster")``: sm_90 and newer); otherwise a ``CompileError`` at the statement names
  the target (or says to give the kernel ``cluster_dims``).
* On a target with clusters, a grid known at compile time is divisible by the cluster along every
  axis (the launch would fail), else a ``CompileError`` at the ``T.Kernel`` line; a grid of
  arguments is checked at each launch (``runtime.launcher``: ``ArgumentError``).  The cluster's
  dimensions past the grid's rank must be 1.
* On a target without clusters, a kernel with ``cluster_dims`` and no cluster feature keeps
  today's meaning -- the blocks launch independently (a cluster only groups blocks for scheduling,
  which changes no result) -- with a ``TilewrightWarning`` at the kernel line.

The function is not changed: ``lower_to_threads`` records ``cluster_dims`` on the thread kernel only
for a target with clusters (``cluster_dims_for``).
"""

from __future__ import annotations

import warnings

from ..errors import CompileError, TilewrightError, TilewrightWarning
from ..ir import expr as E
from ..ir import thread as th
from ..ir import tile as t
from ..ir.verifier import exprs_of
from ..ir.visitor import walk, walk_expr

CLUSTER_RANK = th.CLUSTER_RANK  # the E.Call of T.block_rank_in_cluster() (language/compat_names.py)


def check_clusters(func: t.PrimFunc, ctx=None) -> t.PrimFunc:
    target = ctx.target
    kernels = []
    walk(func.body, lambda s: kernels.append(s) if isinstance(s, t.Kernel) else None)
    for kernel in kernels:
        _check_kernel(kernel, target)
    return func


def cluster_dims_for(kernel: t.Kernel, target) -> tuple | None:
    """The kernel's cluster shape (three ints) when ``target`` launches it as a cluster, else None."""
    dims = kernel.attrs.get("cluster_dims")
    if not dims or not target.has("cluster"):
        return None
    return tuple(dims)


def cluster_feature(root):
    """The first statement under ``root`` that uses a cluster feature, with what it is, or None."""
    found: list = []

    def f(s):
        if found:
            return
        if isinstance(s, th.ClusterBarrier):
            found.append((s, "the cluster barrier (T.cluster_sync / arrive / wait)"))
        elif isinstance(s, th.MbarrierArrive) and s.cta is not None:
            found.append((s, "an arrival on another block's mbarrier (T.mbarrier_arrive(..., cta_id=...))"))
        elif isinstance(s, th.TmaLoad) and s.multicast is not None:
            found.append((s, "a multicast TMA load"))
        else:
            for x in _exprs(s):
                walk_expr(E.as_expr(x), lambda e: found.append((s, "T.block_rank_in_cluster()"))
                          if isinstance(e, E.Call) and e.name == CLUSTER_RANK and not found else None)

    walk(root, f)
    return found[0] if found else None


def _exprs(s) -> list:
    try:
        return [x for x in exprs_of(s) if x is not None]
    except TilewrightError:
        return []


def _check_kernel(kernel: t.Kernel, target) -> None:
    dims = kernel.attrs.get("cluster_dims")
    use = cluster_feature(kernel.body)
    if not dims:
        if use is not None:
            raise CompileError(f"{use[1]} needs a thread-block cluster, and this kernel is launched without one",
                               use[0].loc or kernel.loc, hint="launch the kernel with "
                               "T.Kernel(..., cluster_dims=(2, 1, 1)) (sm_90 or newer)")
        return
    if not target.has("cluster"):
        if use is not None:
            raise CompileError(f"{use[1]} needs thread-block clusters, which {target} does not have (NVIDIA sm_90 "
                               "or newer)", use[0].loc or kernel.loc,
                               hint="compile for 'cuda -arch=sm_90a', or share data through global memory")
        message = (f"T.Kernel(cluster_dims={tuple(dims)}) has no effect on {target}: it has no thread-block "
                   "clusters, the blocks launch independently (the results are the same); remove cluster_dims "
                   "or compile for sm_90 or newer")
        if kernel.loc is not None:
            warnings.warn_explicit(message, TilewrightWarning, kernel.loc.filename, kernel.loc.lineno)
        else:
            warnings.warn(message, TilewrightWarning, stacklevel=2)
        return
    rank = len(kernel.grid)
    for axis, c in enumerate(dims):
        if axis >= rank:
            if c != 1:
                raise CompileError(f"cluster_dims={tuple(dims)} spans grid axis {'xyz'[axis]}, which this "
                                   f"{rank}-dimensional grid does not have", kernel.loc,
                                   hint="give the cluster 1 along the axes the grid does not have")
            continue
        g = E.const_value(kernel.grid[axis])
        if isinstance(g, int) and g % c:
            raise CompileError(f"the grid's {'xyz'[axis]} size {g} is not a multiple of the cluster's {c} "
                               f"(cluster_dims={tuple(dims)}): a cluster launch needs whole clusters", kernel.loc,
                               hint=f"round the grid up to a multiple of {c} (blocks past the data do nothing) or "
                               "change cluster_dims")
