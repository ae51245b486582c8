"""TMA multicast in the warp-specialized GEMM ring (passes/cluster_multicast.py): with a thread-block
cluster of two blocks along a grid axis, each block loads half of the operand tile the pair shares
(A along x, B along y) and multicasts it to both; ``full[s]`` expects the whole stage, ``empty[s]``
counts the consumers of both blocks.  The emulator runs the cluster's blocks together and checks the
protocol (slot reuse across blocks, exits before peers' arrivals); against float64 on NaN-poisoned
outputs, ragged M/N/K, fp16 and bf16.  NVRTC builds of ops.matmul's cluster candidates: no spills,
``UTMALDG ... MULTICAST`` in the SASS.  The GemmConfig cluster field and its candidates."""

from __future__ import annotations

import numpy as np
import pytest
from toolchains import needs_nvrtc

import tilewright
from tilewright.interp.emulator import EmulatorError, RaceError
from tilewright.ir import thread as th
from tilewright.ir.visitor import map_stmt
from tilewright.kernels.gemm import matmul, matmul_persistent
from tilewright.ops import gemm_configs, kernels

SM90 = "cuda -arch=sm_90a"


def _check(k, M, N, K, dtype, trans_B=False, out_dtype="float32", seed=0):
    rng = np.random.default_rng(seed)
    nd = tilewright.ir.dtype.to_numpy(dtype)
    a = rng.uniform(-1, 1, (M, K)).astype(nd)
    b = rng.uniform(-1, 1, (N, K) if trans_B else (K, N)).astype(nd)
    c = np.full((M, N), np.nan, tilewright.ir.dtype.to_numpy(out_dtype))
    k(a, b, c)
    bb = b.astype(np.float64).T if trans_B else b.astype(np.float64)
    assert np.isfinite(c.astype(np.float64)).all(), "some outputs were never written"
    tol = 2e-3 if out_dtype == "float32" else 2e-2
    np.testing.assert_allclose(c.astype(np.float64), a.astype(np.float64) @ bb, rtol=tol, atol=tol)


@pytest.mark.parametrize("M, N, K, bm, bn, stages, threads, cluster, dtype, trans_B, staged", [
    (200, 296, 104, 64, 64, 3, 128, (2, 1), "float16", False, False),   # ragged M, N, K; A shared
    (200, 296, 104, 64, 64, 3, 128, (1, 2), "bfloat16", False, False),  # B shared (its K rows split)
    (136, 200, 72, 64, 64, 2, 128, (2, 1), "float16", True, True),      # B transposed, TMA-store epilogue
    (136, 200, 72, 64, 64, 1, 128, (1, 2), "bfloat16", True, False),    # one stage: synchronous release
    (256, 192, 96, 128, 64, 3, 256, (1, 2), "float16", False, False),   # two consumer warpgroups
    (72, 448, 64, 64, 64, 4, 128, (2, 1), "bfloat16", False, False),    # a padded grid: 7 tiles -> 8 blocks
])
def test_multicast_gemm_on_the_emulator(M, N, K, bm, bn, stages, threads, cluster, dtype, trans_B, staged):
    out = dtype if staged else "float32"
    f = matmul(M, N, K, bm, bn, 32, dtype=dtype, out_dtype=out, trans_B=trans_B, num_stages=stages,
               threads=threads, cluster=cluster, staged_epilogue=staged)
    k = tilewright.compile(f, target=SM90, execution_backend="emulator")
    src = k.get_kernel_source()
    assert f"__cluster_dims__({cluster[0]}, {cluster[1]}, 1)" in src
    assert src.count(".multicast::cluster") == 1  # the shared operand's share, one box (64 columns or fewer)
    assert "mbarrier.arrive.shared::cluster.b64" in src and "barrier.cluster.wait" in src
    _check(k, M, N, K, dtype, trans_B, out)


@pytest.mark.parametrize("cluster", [(2, 1), (1, 2)])
def test_ops_kernel_with_clusters_dynamic_rows_bias_and_activation(cluster):
    """ops.matmul's direct kernel (symbolic row count, rounded up to whole clusters; bias + SiLU; C by TMA store)."""
    N, K = 192, 128
    f = kernels.linear(N, K, "float16", "float16", False, False, True, "silu", 64, 64, 64, 2, 128, True, cluster)
    k = tilewright.compile(f, target=SM90, execution_backend="emulator")
    assert ".multicast::cluster" in k.get_kernel_source()
    rng = np.random.default_rng(3)
    for M in (72, 128):
        a = rng.uniform(-1, 1, (M, K)).astype(np.float16)
        b = rng.uniform(-1, 1, (K, N)).astype(np.float16)
        bias = rng.uniform(-1, 1, N).astype(np.float16)
        c = np.full((M, N), np.nan, np.float16)
        k(a, b, bias, c)
        x = a.astype(np.float64) @ b.astype(np.float64) + bias.astype(np.float64)
        np.testing.assert_allclose(c.astype(np.float64), x / (1 + np.exp(-x)), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("M, N, K, stages, blocks, dtype, staged, bias", [
    (200, 320, 96, 3, 4, "float16", False, False),  # 5 N tiles: the last pair's second tile lies outside C
    (136, 192, 64, 2, 6, "bfloat16", True, True),   # TMA-store epilogue, bias seeded; partial last round
])
def test_persistent_multicast_gemm_walks_tile_pairs(M, N, K, stages, blocks, dtype, staged, bias):
    """matmul_persistent(cluster=2): the two blocks of a cluster take neighbouring N tiles in lockstep,
    the ring continuing across tiles in both, A multicast."""
    out = dtype if staged else "float32"
    f = matmul_persistent(M, N, K, 64, 64, 32, dtype=dtype, out_dtype=out, num_stages=stages, threads=128,
                          num_blocks=blocks, cluster=2, staged_epilogue=staged, bias_dtype="float32" if bias else None)
    k = tilewright.compile(f, target=SM90, execution_backend="emulator")
    src = k.get_kernel_source()
    assert k.num_threads == 256 and src.count(".multicast::cluster") == 1 and "__cluster_dims__(2, 1, 1)" in src
    rng = np.random.default_rng(5)
    nd = tilewright.ir.dtype.to_numpy(dtype)
    a, b = rng.uniform(-1, 1, (M, K)).astype(nd), rng.uniform(-1, 1, (K, N)).astype(nd)
    bv = rng.uniform(-1, 1, N).astype(np.float32) if bias else np.zeros(1, np.float32)
    c = np.full((M, N), np.nan, tilewright.ir.dtype.to_numpy(out))
    k(a, b, bv, c)
    want = a.astype(np.float64) @ b.astype(np.float64) + (bv.astype(np.float64) if bias else 0)
    tol = 2e-3 if out == "float32" else 4e-2
    np.testing.assert_allclose(c.astype(np.float64), want, rtol=tol, atol=tol)


def test_multicast_is_declined_where_the_blocks_do_not_share_a_tile():
    """A cluster along y with rasterization whose fast axis is x (the launched pair gets tiles of
    different rows and columns), and a cluster of 2x2: clusters without multicast, same results."""
    import tilewright.language as T

    M, N, K = 128, 128, 64

    def gemm(cluster, order):
        @T.prim_func
        def g(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
            with T.Kernel(N // 64, M // 64, threads=128, cluster_dims=cluster) as (bx, by):
                A_s = T.alloc_shared((64, 32), "float16")
                B_s = T.alloc_shared((32, 64), "float16")
                C_f = T.alloc_fragment((64, 64), "float32")
                T.use_swizzle(panel_size=2, order=order)
                T.clear(C_f)
                for k in T.Pipelined(K // 32, num_stages=2):
                    T.copy(A[by * 64, k * 32], A_s)
                    T.copy(B[k * 32, bx * 64], B_s)
                    T.gemm(A_s, B_s, C_f)
                T.copy(C_f, C[by * 64, bx * 64])

        return g

    for cluster, order, multicast in [((1, 2, 1), "row", False), ((2, 2, 1), "row", False), ((1, 2, 1), "col", True)]:
        k = tilewright.compile(gemm(cluster, order), target=SM90, execution_backend="emulator")
        src = k.get_kernel_source()
        assert ("multicast::cluster" in src) == multicast, (cluster, order)
        _check(k, M, N, K, "float16")


# ---------------------------------------------------------------- seeded faults
def _inject(monkeypatch, fault):
    """A pass after warp_specialize that breaks the cluster protocol (uncached)."""
    import tilewright.passes.pipeline as pl
    from tilewright.ir import tile as t

    monkeypatch.setenv("TILEWRIGHT_DISABLE_CACHE", "1")

    def inject(func, ctx):
        def f(s):
            if fault == "local_release_only" and isinstance(s, th.MbarrierArrive) and s.cta is not None:
                # each block's consumers release only their own slots, and the empty barriers count them only
                return th.MbarrierArrive(s.bar, s.index, s.count, s.expect_tx, s.elected, loc=s.loc) \
                    if s.cta.value == 0 else t.SeqStmt([])
            if fault == "local_release_only" and isinstance(s, th.MbarrierInit) and s.bar.name.endswith("empty"):
                return th.MbarrierInit(s.bar, s.count // 2, loc=s.loc)
            if fault == "no_producer_tail" and isinstance(s, t.SeqStmt) and len(s.stmts) > 1 and \
                    isinstance(s.stmts[0], t.For) and all(isinstance(x, t.IfThenElse) and
                                                          isinstance(x.then_body, th.MbarrierWait) for x in s.stmts[1:]):
                return t.SeqStmt(s.stmts[:1])
            if fault == "no_initial_cluster_barrier" and isinstance(s, t.SeqStmt) and \
                    sum(isinstance(x, th.ClusterBarrier) for x in s.stmts) == 1:
                first = next(i for i, x in enumerate(s.stmts) if isinstance(x, th.ClusterBarrier))
                return t.SeqStmt(s.stmts[:first] + s.stmts[first + 1:])
            return None

        func.body = map_stmt(func.body, f)
        return func

    passes = list(pl.TILE_PASSES["cuda"])
    passes.insert(passes.index(pl.warp_specialize) + 1, inject)
    monkeypatch.setitem(pl.TILE_PASSES, "cuda", passes)


@pytest.mark.parametrize("fault, error, message", [
    ("local_release_only", RaceError, r"nothing ordering the two|may still read it"),
    ("no_producer_tail", EmulatorError, r"may exit before this access"),
    ("no_initial_cluster_barrier", EmulatorError, r"before its MbarrierInit|nothing orders that after the barrier's "
                                                   r"MbarrierInit"),
])
def test_seeded_cluster_protocol_faults_are_caught(monkeypatch, fault, error, message):
    _inject(monkeypatch, fault)
    f = matmul(128, 256, 192, 64, 64, 32, out_dtype="float32", num_stages=2, threads=128, cluster=(2, 1))
    k = tilewright.compile(f, target=SM90, execution_backend="emulator")
    with pytest.raises(error, match=message):
        _check(k, 128, 256, 192, "float16")


# ---------------------------------------------------------------- ops.matmul's candidates
def _cluster_candidates():
    seen, out = set(), []
    for shape in [(4096, 4096, 4096), (128, 8192, 8192), (2000, 3000, 1000)]:
        for c in gemm_configs.candidates(*shape, "float16", "sm_90", 132):
            if c.cluster != (1, 1) and c not in seen:
                seen.add(c)
                out.append(c)
    return out


def test_cluster_candidates_are_listed_and_parse_back():
    cands = _cluster_candidates()
    names = {c.short() for c in cands}
    assert {"direct 128x256x64 s3 t256 wgmma ws tma-store c2x1", "direct 128x256x64 s3 t256 wgmma ws tma-store c1x2",
            "direct 256x128x64 s4 t256 wgmma ws c2x1", "direct 128x64x64 s8 t256 wgmma ws c2x1",
            "persistent 128x192x64 s4 t256 g8 wgmma ws tma-store c2x1"} <= names
    for shape in [(4096, 4096, 4096), (128, 8192, 8192), (2000, 3000, 1000), (16, 8192, 8192)]:
        # measured (bench/results/2026-12-01-1926-gemm-weak-*): only the short-K shape of few tiles per
        # block takes clusters
        want = (2, 1) if shape == (2000, 3000, 1000) else (1, 1)
        assert gemm_configs.heuristic(*shape, "float16", "sm_90", 132).cluster == want
        for c in gemm_configs.candidates(*shape, "float16", "sm_90", 132):
            assert gemm_configs.GemmConfig.parse(c.short()) == c
            assert gemm_configs.GemmConfig.from_json(c.to_json()) == c
    assert not [c for c in gemm_configs.candidates(4096, 4096, 4096, "float16", "sm_80", 108) if c.cluster != (1, 1)]
    # a stored entry of a cluster the kernels do not have, or on a kind without clusters, is a miss
    assert gemm_configs.GemmConfig.from_json({"kind": "direct", "cluster": [2, 2]}) is None
    assert gemm_configs.GemmConfig.from_json({"kind": "persistent", "cluster": [1, 2]}) is None
    assert gemm_configs.GemmConfig.from_json({"kind": "splitk", "cluster": [2, 1]}) is None
    with pytest.raises(ValueError):
        gemm_configs.GemmConfig.parse("direct 128x256 s3")


@needs_nvrtc
@pytest.mark.parametrize("cfg", _cluster_candidates(), ids=lambda c: c.short().replace(" ", "-"))
def test_cluster_candidates_build_with_multicast_and_without_spills(cfg, tmp_path):
    from test_wgmma import sass_of

    from tilewright.codegen.cuda import print_cuda
    from tilewright.passes.pipeline import PassContext, run_pipeline
    from tilewright.target import Target
    from tilewright.toolchain import nvrtc

    dtype = "bfloat16" if cfg.block_M == 256 or cfg.kind == "persistent" else "float16"
    tiles = (cfg.block_M, cfg.block_N, cfg.block_K, cfg.stages, cfg.threads)
    if cfg.kind == "persistent":
        f = kernels.linear_persistent(4096, 4096, dtype, dtype, False, False, True, "none", *tiles, 132, cfg.group_M,
                                      cfg.staged_epilogue(dtype), cfg.cluster[0])
    else:
        f = kernels.linear(4096, 4096, dtype, dtype, False, False, False, "none", *tiles, cfg.staged_epilogue(dtype), cfg.cluster)
    k = run_pipeline(f, PassContext(Target.parse(SM90), {"optimize_level": 2, **cfg.pass_configs("sm_90")}))
    # the producer warpgroup, and with ping-pong a second consumer warpgroup (passes/warp_specialize_pingpong.py)
    assert k.num_threads == cfg.threads * (2 if cfg.pingpong else 1) + 128
    src = print_cuda(k)
    assert ".multicast::cluster" in src
    binary = nvrtc.compile_cuda(src, "sm_90a", [k.name])
    res = binary.resources[k.name]
    assert res["spills"] == 0 and res["local_bytes"] == 0, res
    sass = sass_of(binary, tmp_path)
    assert "UTMALDG.2D.MULTICAST" in sass and "UCGABAR_WAIT" in sass and "HGMMA" in sass
    assert "LDL" not in sass and "STL" not in sass
    # no GPU-wide fence: the slots' remote releases in the K loop must not carry one each
    # (`.release.cluster` did: 2-4.5x slower on the H200)
    assert "MEMBAR.ALL.GPU" not in sass  # (the cluster barrier after the init is relaxed; the exit waits are
    # the producer's)
