"""Thread-block clusters (``T.Kernel(..., cluster_dims=...)``) on sm_90a: ``__cluster_dims__`` in the
CUDA source, the block's rank (``T.block_rank_in_cluster``), the cluster barrier (``T.cluster_sync``)
and arrivals on a peer block's mbarrier (``T.mbarrier_arrive(bar, cta_id=r)``), run by the emulator
with the blocks of a cluster together (against float64 on poisoned outputs), its protocol checks,
an NVRTC build, and the refusals: cluster features on targets without clusters or in a kernel
without a cluster, grids that are not whole clusters."""

from __future__ import annotations

import numpy as np
import pytest
from toolchains import needs_nvrtc

import tilewright
import tilewright.language as T
from tilewright.errors import ArgumentError, CompileError
from tilewright.interp.emulator import EmulatorError

SM90 = "cuda -arch=sm_90a"


def ring_kernel(grid, cluster, N=128, final_sync=True, first_sync=True, arrivals=None, wait=True):
    """Each block arrives (every thread) on the barrier of the next block of its cluster, waits for its
    own to complete (the previous block's arrivals), then writes ``A + 10 * rank + 100 * by``."""
    gx, gy = grid
    size = cluster[0] * cluster[1]
    count = N if arrivals is None else arrivals

    @T.prim_func
    def ring(A: T.Tensor((gy, gx, N), "float32"), B: T.Tensor((gy, gx, N), "float32")):
        with T.Kernel(gx, gy, threads=N, cluster_dims=cluster) as (bx, by):
            bars = T.alloc_barrier([count])
            r = T.block_rank_in_cluster()
            if first_sync:
                T.cluster_sync()  # the peers' barriers are initialised before anyone arrives on them
            T.mbarrier_arrive(bars[0], cta_id=(r + 1) % size)
            if wait:
                T.mbarrier_wait_parity(bars[0], 0)
            for i in T.Parallel(N):
                B[by, bx, i] = A[by, bx, i] + T.cast(r * 10 + by * 100, "float32")
            if final_sync:
                T.cluster_sync()  # no block exits while a peer may still arrive on its barrier

    return ring


def _want(a, cluster):
    gy, gx, _ = a.shape
    cx, cy = cluster
    y, x = np.meshgrid(np.arange(gy), np.arange(gx), indexing="ij")
    rank = (x % cx) + cx * (y % cy)
    return a.astype(np.float64) + (10 * rank + 100 * y)[:, :, None]


@pytest.mark.parametrize("grid, cluster", [((4, 1), (2, 1)), ((2, 4), (1, 2)), ((4, 2), (2, 2))])
def test_cluster_rank_barrier_and_remote_arrive_on_the_emulator(grid, cluster):
    rng = np.random.default_rng(1)
    k = tilewright.compile(ring_kernel(grid, cluster), target=SM90, execution_backend="emulator")
    src = k.get_kernel_source()
    if cluster != (1, 1):
        assert f"__cluster_dims__({cluster[0]}, {cluster[1]}, 1)" in src
    assert "barrier.cluster.arrive" in src and "barrier.cluster.wait" in src
    assert "mapa.shared::cluster" in src and "mbarrier.arrive.shared::cluster.b64" in src
    assert "%%cluster_ctarank" in src
    a = rng.standard_normal((grid[1], grid[0], 128)).astype(np.float32)
    b = np.full_like(a, np.nan)
    k(a, b)
    np.testing.assert_allclose(b, _want(a, cluster), rtol=1e-6)


def test_arrival_before_the_peer_initialised_its_barrier_is_reported():
    k = tilewright.compile(ring_kernel((2, 1), (2, 1), first_sync=False), target=SM90, execution_backend="emulator")
    a = np.ones((1, 2, 128), np.float32)
    with pytest.raises(EmulatorError, match=r"used before its MbarrierInit|nothing orders that after the barrier's "
                                            r"MbarrierInit"):
        k(a, np.full_like(a, np.nan))


def test_exit_that_nothing_orders_after_a_peers_arrival_is_reported():
    # waiting on the barrier orders the peer's arrival before the exit; without the wait only a
    # final cluster barrier would
    ok = tilewright.compile(ring_kernel((2, 1), (2, 1), final_sync=False), target=SM90, execution_backend="emulator")
    a = np.ones((1, 2, 128), np.float32)
    ok(a, np.full_like(a, np.nan))
    bad = tilewright.compile(ring_kernel((2, 1), (2, 1), final_sync=False, wait=False), target=SM90,
                             execution_backend="emulator")
    with pytest.raises(EmulatorError, match=r"may exit before this access .* cluster barrier at the end"):
        bad(a, np.full_like(a, np.nan))
    fine = tilewright.compile(ring_kernel((2, 1), (2, 1), wait=False), target=SM90, execution_backend="emulator")
    b = np.full_like(a, np.nan)
    fine(a, b)
    np.testing.assert_allclose(b, _want(a, (2, 1)))


def test_arrivals_that_never_complete_the_phase_deadlock():
    k = tilewright.compile(ring_kernel((2, 1), (2, 1), arrivals=256), target=SM90, execution_backend="emulator")
    a = np.ones((1, 2, 128), np.float32)
    with pytest.raises(EmulatorError, match=r"deadlock.*cluster"):
        k(a, np.full_like(a, np.nan))


@needs_nvrtc
def test_cluster_kernel_builds_with_nvrtc():
    from tilewright.codegen.cuda import print_cuda
    from tilewright.passes.pipeline import PassContext, run_pipeline
    from tilewright.target import Target
    from tilewright.toolchain import nvrtc

    k = run_pipeline(ring_kernel((4, 2), (2, 2)), PassContext(Target.parse(SM90), {"optimize_level": 2}))
    binary = nvrtc.compile_cuda(print_cuda(k), "sm_90a", [k.name])
    assert binary.resources[k.name]["spills"] == 0


# ---------------------------------------------------------------- refusals
@pytest.mark.parametrize("target", ["cuda -arch=sm_80", "hip -arch=gfx942", "interpret"])
def test_cluster_features_are_refused_where_there_are_no_clusters(target):
    with pytest.raises(CompileError, match=r"needs thread-block clusters, which .* does not have") as e:
        tilewright.compile(ring_kernel((2, 1), (2, 1)), target=target,
                           execution_backend=None if target == "interpret" else "emulator")
    assert "^" in str(e.value)  # the kernel line, with a caret


def test_cluster_features_need_a_cluster():
    with pytest.raises(CompileError, match=r"needs a thread-block cluster.*without one"):
        tilewright.compile(ring_kernel((2, 1), (1, 1)), target=SM90, execution_backend="emulator")


def test_grid_of_partial_clusters_is_refused():
    with pytest.raises(CompileError, match=r"grid's x size 3 is not a multiple of the cluster's 2"):
        tilewright.compile(ring_kernel((3, 1), (2, 1)), target=SM90, execution_backend="emulator")
    with pytest.raises(CompileError, match=r"axis z"):
        tilewright.compile(ring_kernel((2, 1), (2, 1, 2)), target=SM90, execution_backend="emulator")


def test_symbolic_grid_of_partial_clusters_is_refused_at_launch():
    n = T.dynamic("n")

    @T.prim_func
    def copy(A: T.Tensor((n, 64), "float32"), B: T.Tensor((n, 64), "float32")):
        with T.Kernel(n, threads=64, cluster_dims=(2, 1, 1)) as bx:
            for i in T.Parallel(64):
                B[bx, i] = A[bx, i]

    k = tilewright.compile(copy, target=SM90, execution_backend="emulator")
    a = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    b = np.full_like(a, np.nan)
    k(a, b)
    np.testing.assert_array_equal(b, a)
    with pytest.raises(EmulatorError, match=r"not whole clusters"):
        k(a[:3], b[:3])
    from tilewright.runtime.launcher import _check_whole_clusters

    with pytest.raises(ArgumentError, match=r"grid's x size 3 .* not a multiple of the kernel's thread-block cluster"):
        _check_whole_clusters((3, 1, 1), (2, 1, 1), "copy")
    _check_whole_clusters((4, 1, 1), (2, 1, 1), "copy")


def test_cluster_dims_are_part_of_the_kernel_identity():
    from tilewright.ir.printer import print_func

    assert "cluster_dims=(2, 1, 1)" in print_func(ring_kernel((2, 1), (2, 1)))
