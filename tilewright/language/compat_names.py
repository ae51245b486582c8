"""TileLang names of launch forms, loop forms and function annotations, each with its TileLang meaning:

* ``T.ClusterKernel(grid..., threads=..., cluster_dims=...)``: a ``T.Kernel`` launched with a thread-block
  cluster (``T.Kernel(cluster_dims=...)``: on sm_90+ a real cluster, elsewhere a warning and independent
  blocks, see passes/check_clusters.py).
* ``for i, j in T.Persistent([M, N], wave_size, index):``: a persistent-kernel tile loop.  Block ``index``
  visits tiles ``index, index + wave_size, ...`` of the row-major tile domain; every tile is visited
  exactly once by the blocks ``0 .. wave_size - 1`` (the frontend's ``persistent_loop``).
* ``T.func_attr({...})``: function attributes.  ``"tir.noalias": True`` (parameters do not overlap) is what
  tilewright assumes of every kernel (its parameters are ``__restrict__``) and ``"global_symbol"`` names
  the function; other keys, and ``tir.noalias`` false, are refused.
* ``T.device_assert(cond, msg)``: an assertion.  On a condition known while the kernel is read it is
  checked then (a false one is a CompileError); a run-time condition is checked by every thread that
  executes it: a ``device_assert:<msg>`` call bound to an unused let (as ``T.print``), printed as
  ``tw_device_assert_with_msg`` (CUDA: printf of the message, block and thread, then ``__trap()``; HIP:
  ``__builtin_trap()``, no device printf there), a ``DeviceAssertError`` naming the message, block and thread
  in the interpreter and the emulator (interp/device_assert.py).
* ``T.wgmma_gemm`` / ``T.wgmma_mma``: ``T.gemm`` (the gemm planner picks wgmma on sm_90a where it applies;
  the product is the same with any instruction).
* ``T.wait_wgmma(n)``: waits until at most ``n`` wgmma groups are in flight.  ``T.gemm`` is synchronous here
  (its product is complete when it returns, whatever instruction computes it), so there is never a group
  to wait for: nothing is emitted.
* ``T.Ramp(base, stride, lanes)``: a vector subscript (frontend/lanes.py).
* the cluster intrinsics: ``T.block_rank_in_cluster()`` (``%cluster_ctarank``), ``T.cluster_arrive()``,
  ``T.cluster_wait()`` and ``T.cluster_sync()`` (both: ``barrier.cluster``), with
  ``T.mbarrier_arrive(bar, cta_id=r)`` (an arrival on block ``r``'s barrier) -- sm_90+ kernels with
  ``cluster_dims`` only (check_clusters refuses them elsewhere); ``T.alloc_cluster_barrier`` is
  ``T.alloc_barrier``; ``T.clc_*`` (cluster launch control, sm_100) are refused by name.
"""

from __future__ import annotations

import builtins as _builtins

from ..frontend import builder as _b
from ..frontend.lanes import Ramp
from ..ir import expr as _e
from ..ir import tile as _t
from . import Kernel, gemm

__all__ = ["Ramp", "wait_wgmma", "ClusterKernel", "Persistent", "func_attr", "device_assert", "wgmma_gemm",
           "wgmma_mma",
           "cluster_sync", "cluster_arrive", "cluster_wait", "block_rank_in_cluster", "alloc_cluster_barrier",
           "clc_try_cancel", "clc_is_canceled", "clc_get_first_ctaid_x", "clc_get_first_ctaid_y",
           "clc_get_first_ctaid_z"]


def ClusterKernel(*grid, threads=128, cluster_dims=None, prelude=None, is_cpu=False):  # noqa: N802 - TileLang name
    """``with T.ClusterKernel(gx, gy, threads=128, cluster_dims=(2, 1, 1)) as (bx, by):`` (see the module)."""
    return Kernel(*grid, threads=threads, cluster_dims=cluster_dims, prelude=prelude, is_cpu=is_cpu)


class Persistent:
    """``for i, j in T.Persistent(domain, wave_size, index, group_size=8):`` (see the module docstring).
    ``group_size`` orders the tiles for L2 reuse in TileLang; the visiting order is free here and
    every tile is visited once either way."""

    def __init__(self, domain, wave_size, index, group_size=8):
        domain = (domain,) if isinstance(domain, (_builtins.int, _e.Expr)) else tuple(domain)
        if not domain:
            raise _b.error("T.Persistent needs a tile domain, e.g. T.Persistent([M_tiles, N_tiles], wave, block_id)")
        for d in domain:
            if isinstance(d, _builtins.bool) or not isinstance(d, (_builtins.int, _e.Expr)) or \
                    isinstance(d, _builtins.int) and d <= 0:
                raise _b.error(f"T.Persistent domain sizes must be positive ints or integer kernel values, got {d!r}")
        if isinstance(wave_size, _builtins.bool) or not isinstance(wave_size, (_builtins.int, _e.Expr)) or \
                isinstance(wave_size, _builtins.int) and wave_size <= 0:
            raise _b.error(f"T.Persistent(wave_size=...) must be a positive int or an integer kernel value, "
                           f"got {wave_size!r}", hint="the number of blocks that share the tiles (the grid size)")
        self.domain = domain
        self.wave_size = wave_size
        self.index = index
        self.group_size = group_size

    def __iter__(self):
        raise _b.error("T.Persistent can only be used as `for i, j in T.Persistent(...)` inside a @T.prim_func body")


_FUNC_ATTRS = ("tir.noalias", "global_symbol")


def func_attr(attrs: dict) -> None:
    """``T.func_attr({"tir.noalias": True})`` (see the module docstring)."""
    if not isinstance(attrs, dict):
        raise _b.error(f"T.func_attr takes a dict of attributes, got {attrs!r}")
    for key, value in attrs.items():
        if key == "tir.noalias":
            if not value:
                raise _b.error("T.func_attr({'tir.noalias': False}) is not supported: tilewright assumes kernel "
                               "parameters do not overlap", hint="pass tensors that do not share memory")
        elif key == "global_symbol":
            if not isinstance(value, str):
                raise _b.error(f"T.func_attr: global_symbol must be a string, got {value!r}")
        else:
            raise _b.error(f"T.func_attr key {key!r} is not supported here; the keys taken are "
                           f"{', '.join(map(repr, _FUNC_ATTRS))}", hint="remove it")


def device_assert(cond, msg: str = "") -> None:
    """``T.device_assert(cond, msg)`` (see the module docstring)."""
    _b.current()
    value = cond.value if isinstance(cond, _e.Const) else cond
    if isinstance(value, _e.Expr):
        b = _b.current()
        cond = _e.as_expr(value)
        if cond.dtype != "bool":
            cond = _e.binary("!=", cond, _e.cast(cond.dtype, 0))  # a number: true when nonzero
        call = _e.Call(f"device_assert:{msg}", (cond,), "int32")
        b.emit(_t.LetStmt(_e.Var(b.fresh("asserted"), "int32", kind="let"), call, loc=b.loc))
        return
    if not value:
        raise _b.error(f"T.device_assert failed: {msg or 'assertion failed'}")


def wgmma_gemm(A, B, C, transpose_A=False, transpose_B=False, policy="square", clear_accum=False, k_pack=1,
               wg_wait=0):
    """``T.gemm`` by its Hopper name (see the module docstring)."""
    return gemm(A, B, C, transpose_A=transpose_A, transpose_B=transpose_B, policy=policy, clear_accum=clear_accum,
                k_pack=k_pack, wg_wait=wg_wait)


wgmma_mma = wgmma_gemm


def wait_wgmma(n=0) -> None:
    """``T.wait_wgmma(n)`` (see the module docstring)."""
    _b.current()
    if isinstance(n, _e.Const):
        n = n.value
    if isinstance(n, _builtins.bool) or not isinstance(n, _builtins.int) or n < 0:
        raise _b.error(f"T.wait_wgmma(n) takes a non-negative int known when the kernel is read, got {n!r}")


def _cluster_refused(name: str):
    def refused(*args, **kwargs):
        raise _b.error(f"T.{name} is not implemented in tilewright (the cluster features it has are "
                       "T.block_rank_in_cluster, T.cluster_sync / arrive / wait and T.mbarrier_arrive(cta_id=...))",
                       hint="use T.alloc_barrier and T.mbarrier_arrive(bar, cta_id=r) for barriers peers arrive on")

    refused.__name__ = name
    refused.__doc__ = f"TileLang's ``T.{name}``: refused (not implemented here)."
    return refused


def _cluster_barrier(arrive: bool, wait: bool) -> None:
    from ..ir import thread as _th

    b = _b.current()
    if b.kernel is None:
        raise _b.error("the cluster barrier (T.cluster_sync / arrive / wait) must be inside `with T.Kernel(...)`")
    b.emit(_th.ClusterBarrier(arrive, wait))


def cluster_arrive() -> None:
    """``barrier.cluster.arrive``: the executing threads arrive on the cluster's barrier (release)."""
    _cluster_barrier(True, False)


def cluster_wait() -> None:
    """``barrier.cluster.wait``: wait until every thread of the cluster arrived in this phase (acquire)."""
    _cluster_barrier(False, True)


def cluster_sync() -> None:
    """``T.cluster_arrive()`` then ``T.cluster_wait()``: a barrier over every thread of the cluster."""
    _cluster_barrier(True, True)


def alloc_cluster_barrier(arrive_count):
    """TileLang's barriers for a cluster: ``T.alloc_barrier`` (its initialisation is released to the
    cluster); peers may arrive on them (``T.mbarrier_arrive(bar, cta_id=r)``) after a ``T.cluster_sync()``."""
    from . import alloc_barrier

    return alloc_barrier(arrive_count)


def block_rank_in_cluster():
    """The rank of this block in its thread-block cluster (``%cluster_ctarank``: ``x + cx * (y + cy * z)``
    of the block's position in the cluster)."""
    from ..ir import thread as _th

    _b.current()
    return _e.Call(_th.CLUSTER_RANK, (), "int32")
clc_try_cancel = _cluster_refused("clc_try_cancel")
clc_is_canceled = _cluster_refused("clc_is_canceled")
clc_get_first_ctaid_x = _cluster_refused("clc_get_first_ctaid_x")
clc_get_first_ctaid_y = _cluster_refused("clc_get_first_ctaid_y")
clc_get_first_ctaid_z = _cluster_refused("clc_get_first_ctaid_z")
