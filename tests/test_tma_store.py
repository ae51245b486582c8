"""TMA stores (sm_90): a shared -> global tile copy becomes cp.async.bulk.tensor stores issued by one
thread after a proxy fence and a barrier, waited for (wait_group.read) before the staging buffer is
written again and before the block exits.  Generated-code structure, the fallbacks, the emulator
against float64 references (outputs NaN-poisoned, aligned and ragged shapes, fp16 and bf16, direct
and persistent kernels), the emulator's protocol checks, and NVRTC's SASS (UTMASTG, no spills)."""

from __future__ import annotations

import numpy as np
import pytest
from test_wgmma import sass_of
from toolchains import needs_nvrtc

import tilewright.language as T
from tilewright.codegen.cuda import print_cuda
from tilewright.interp.emulator import EmulatorError, RaceError, run_thread_kernel
from tilewright.ir import thread as th
from tilewright.ir import tile as t
from tilewright.ir.visitor import map_stmt, walk
from tilewright.kernels.gemm import matmul, matmul_persistent
from tilewright.passes.pipeline import PassContext, run_pipeline
from tilewright.target import Target

SM90A, SM80 = "cuda -arch=sm_90a", "cuda -arch=sm_80"


def _lower(f, target=SM90A, **opts):
    return run_pipeline(f, PassContext(Target.parse(target), opts))


def _nodes(k, cls):
    out = []
    walk(k.body if isinstance(k, th.ThreadKernel) else k, lambda s: out.append(s) if isinstance(s, cls) else None)
    return out


def user_gemm(M, N, K, bm=64, bn=64, bk=32, dtype="float16", out_dtype=None, stages=2, threads=128):
    """A GEMM as a TileLang user writes the shared-memory epilogue."""
    out_dtype = out_dtype or dtype

    @T.prim_func
    def staged(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), out_dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            A_s = T.alloc_shared((bm, bk), dtype)
            B_s = T.alloc_shared((bk, bn), dtype)
            C_s = T.alloc_shared((bm, bn), out_dtype)
            C_l = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(B[k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_l)
            T.copy(C_l, C_s)
            T.copy(C_s, C[by * bm, bx * bn])

    return staged


def _inputs(M, N, K, dtype, seed):
    import ml_dtypes  # noqa: F401  (bfloat16 for NumPy)

    rng = np.random.default_rng(seed)
    nd = np.dtype(dtype)
    a = rng.standard_normal((M, K)).astype(nd)
    b = rng.standard_normal((K, N)).astype(nd)
    return a, b, a.astype(np.float64) @ b.astype(np.float64)


def _check(c, ref):
    assert not np.isnan(c.astype(np.float32)).any()
    err = np.abs(c.astype(np.float64) - ref).max() / np.abs(ref).max()
    assert err < 1e-2, err  # one rounding of the output to 16 bits


# ---------------------------------------------------------------- generated code


def test_sm90a_staged_epilogue_is_a_fenced_tma_store_waited_before_exit():
    k = _lower(user_gemm(256, 256, 128, 128, 128, 32, threads=128, stages=3))
    stores = _nodes(k, th.TmaStore)
    assert len(stores) == 2  # 128 fp16 columns = two 128-byte column blocks, one box each
    assert [(tm.param.name, tm.box, tm.swizzle) for tm in k.tensor_maps][-1] == ("C", (128, 64), 128)
    assert len(_nodes(k, th.TmaStoreCommit)) == 1 and len(_nodes(k, th.TmaStoreWait)) == 1
    src = print_cuda(k)
    fence = src.rindex("fence.proxy.async.shared::cta")
    store = src.index("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group")
    commit = src.index("cp.async.bulk.commit_group;")
    wait = src.index("cp.async.bulk.wait_group.read 0;")
    assert fence < store < commit < wait
    between = src[fence:store]
    assert "bar.sync" in between or "__syncthreads" in between
    # the consumers issue it: the first consumer thread (warp-specialized: the producer is threads 0..127)
    assert "if (threadIdx.x == 128) {" in src[store - 200:store]


@pytest.mark.parametrize("opts", [{"tw.disable_tma": True}, {"tl.disable_tma_lower": True}, {"optimize_level": 1}])
def test_switches_keep_the_vectorized_stores(opts):
    k = _lower(user_gemm(256, 256, 128), **opts)
    assert not _nodes(k, th.TmaStore) and "cp.async.bulk.tensor.2d.global" not in print_cuda(k)


def test_not_eligible_or_not_sm90_keeps_the_vectorized_stores():
    assert not _nodes(_lower(user_gemm(256, 256, 128), SM80), th.TmaStore)
    # C rows of 100 halves (200 bytes): not a multiple of 16 bytes, which TMA strides must be
    assert not _nodes(_lower(user_gemm(256, 100, 128)), th.TmaStore)


def test_persistent_kernel_waits_for_the_store_only_before_the_next_rewrite():
    k = _lower(matmul_persistent(256, 256, 128, 64, 64, 32, num_stages=2, threads=128, num_blocks=2,
                                 staged_epilogue=True))
    waits = _nodes(k, th.TmaStoreWait)
    assert len(waits) == 2  # before the next tile's rewrite of C_shared, and once after the tile loop
    # the wait inside the tile loop comes after that tile's mainloop (the K loop), not before it
    tile_loops = [s for s in _nodes(k, t.For) if any(w in _nodes(s, th.TmaStoreWait) for w in waits[:1])]
    inner = tile_loops[-1]
    body = inner.body.stmts if isinstance(inner.body, t.SeqStmt) else [inner.body]
    pos_wait = next(i for i, s in enumerate(body) if _nodes(s, th.TmaStoreWait) or isinstance(s, th.TmaStoreWait))
    pos_k = next(i for i, s in enumerate(body) if isinstance(s, t.For))
    assert pos_k < pos_wait


# ---------------------------------------------------------------- the emulator


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("M, N, K", [(128, 128, 64), (200, 136, 96)])
@pytest.mark.parametrize("ws", [True, False])
def test_direct_kernel_on_the_emulator(M, N, K, dtype, ws):
    opts = {} if ws else {"tl.disable_warp_specialized": True}
    k = _lower(user_gemm(M, N, K, dtype=dtype), **opts)
    assert _nodes(k, th.TmaStore) and (k.num_threads == 256) == ws
    a, b, ref = _inputs(M, N, K, dtype, seed=M + K)
    c = np.full((M, N), np.nan, a.dtype)
    run_thread_kernel(k, [a, b, c])
    _check(c, ref)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("M, N, K, blocks", [(128, 128, 64, 2), (200, 136, 96, 3)])
def test_persistent_kernel_on_the_emulator(M, N, K, blocks, dtype):
    f = matmul_persistent(M, N, K, 64, 64, 32, dtype, num_stages=2, threads=128, num_blocks=blocks,
                          staged_epilogue=True)
    k = _lower(f)
    assert _nodes(k, th.TmaStore)
    a, b, ref = _inputs(M, N, K, dtype, seed=N)
    c = np.full((M, N), np.nan, a.dtype)
    run_thread_kernel(k, [a, b, np.zeros(1, np.float32), c])
    _check(c, ref)


def test_library_matmul_staged_epilogue_fp32_output_on_the_emulator():
    M, N, K = 136, 200, 64
    k = _lower(matmul(M, N, K, 64, 64, 32, out_dtype="float32", num_stages=2, staged_epilogue=True))
    assert _nodes(k, th.TmaStore)
    a, b, ref = _inputs(M, N, K, "float16", seed=3)
    c = np.full((M, N), np.nan, np.float32)
    run_thread_kernel(k, [a, b, c])
    assert np.abs(c - ref).max() / np.abs(ref).max() < 1e-5


def test_interpreter_is_unaffected():
    import tilewright

    M, N, K = 96, 80, 64
    kern = tilewright.compile(user_gemm(M, N, K, 64, 64, 32), target="interpret")
    a, b, ref = _inputs(M, N, K, "float16", seed=5)
    c = np.full((M, N), np.nan, np.float16)
    kern(a, b, c)
    _check(c, ref)


def _persistent(**opts):
    return _lower(matmul_persistent(128, 128, 64, 64, 64, 32, num_stages=2, threads=128, num_blocks=1,
                                    staged_epilogue=True), **opts)


def _run_persistent(k):
    a, b, ref = _inputs(128, 128, 64, "float16", seed=9)
    c = np.full((128, 128), np.nan, np.float16)
    run_thread_kernel(k, [a, b, np.zeros(1, np.float32), c])
    return c, ref


def _drop(k, pred):
    def f(s):
        if isinstance(s, t.SeqStmt):
            return t.SeqStmt([x for x in s.stmts if not pred(x)])
        return None

    k.body = map_stmt(k.body, f)
    return k


def test_rewriting_the_staging_buffer_before_the_wait_is_a_race():
    k = _persistent()
    first_wait = _nodes(k, th.TmaStoreWait)[0]
    _drop(k, lambda s: s is first_wait)
    with pytest.raises(RaceError, match="while a TMA store still reads it"):
        _run_persistent(k)


def test_a_store_without_the_proxy_fence_is_a_race():
    k = _drop(_persistent(), lambda s: isinstance(s, th.FenceProxyAsync))
    with pytest.raises(RaceError, match="fence.proxy.async"):
        _run_persistent(k)


def test_exiting_before_the_final_wait_is_an_error():
    k = _persistent()
    last_wait = _nodes(k, th.TmaStoreWait)[-1]
    _drop(k, lambda s: s is last_wait)
    with pytest.raises(EmulatorError, match="may still read its shared source"):
        _run_persistent(k)


def test_lockstep_mode_checks_the_same_protocol():
    k = _lower(user_gemm(128, 128, 64), **{"tl.disable_warp_specialized": True})
    _drop(k, lambda s: isinstance(s, th.TmaStoreWait))
    a, b, _ = _inputs(128, 128, 64, "float16", seed=1)
    with pytest.raises(EmulatorError, match="may still read its shared source"):
        run_thread_kernel(k, [a, b, np.full((128, 128), np.nan, np.float16)])


# ---------------------------------------------------------------- the device compiler


@needs_nvrtc
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("persistent", [False, True])
def test_sass_has_utmastg_and_no_spills(dtype, persistent, tmp_path):
    from tilewright.toolchain import nvrtc

    if persistent:
        f = matmul_persistent(4096, 4096, 4096, 128, 256, 64, dtype, num_stages=3, threads=256,
                              staged_epilogue=True)
        plain = matmul_persistent(4096, 4096, 4096, 128, 256, 64, dtype, num_stages=3, threads=256)
    else:
        f = matmul(4096, 4096, 4096, 128, 256, 64, dtype, num_stages=3, threads=256, staged_epilogue=True)
        plain = matmul(4096, 4096, 4096, 128, 256, 64, dtype, num_stages=3, threads=256)
    k, kp = _lower(f), _lower(plain)
    binary = nvrtc.compile_cuda(print_cuda(k), "sm_90a", [k.name])
    base = nvrtc.compile_cuda(print_cuda(kp), "sm_90a", [kp.name])
    res, res0 = binary.resources[k.name], base.resources[kp.name]
    assert res["spills"] == 0 and res["local_bytes"] == 0, res
    assert res["registers"] <= res0["registers"], (res, res0)
    sass = sass_of(binary, tmp_path)
    assert "UTMASTG" in sass and "LDL" not in sass and "STL" not in sass


# ---------------------------------------------------------------- the library GEMM (tilewright.ops)


@pytest.mark.parametrize("persistent", [False, True])
def test_ops_kernels_with_tma_store_bias_and_activation_on_the_emulator(persistent):
    """What ops.matmul runs with a ``tma_store`` configuration: dynamic row count, bias + silu epilogue,
    bf16 output through the shared tile, ragged M and N."""
    import tilewright
    from tilewright.ops import gemm_configs, kernels

    cfg = gemm_configs.GemmConfig("persistent" if persistent else "direct", 64, 64, 32, 2, 128, wgmma=True, ws=True,
                                  tma_store=True)
    M, N, K = 150, 136, 96
    if persistent:
        f = kernels.linear_persistent(N, K, "bfloat16", "bfloat16", False, True, True, "silu", 64, 64, 32, 2, 128,
                                      3, 8, staged_epilogue=True)
    else:
        f = kernels.linear(N, K, "bfloat16", "bfloat16", False, True, True, "silu", 64, 64, 32, 2, 128,
                           staged_epilogue=True)
    k = tilewright.compile(f, target=SM90A, execution_backend="emulator", pass_configs=cfg.pass_configs("sm_90"))
    assert "cp.async.bulk.tensor.2d.global.shared::cta" in k.get_kernel_source()
    rng = np.random.default_rng(7)
    bf = tilewright.ir.dtype.to_numpy("bfloat16")
    a = rng.uniform(-1, 1, (M, K)).astype(bf)
    w = rng.uniform(-1, 1, (N, K)).astype(bf)
    bias = rng.uniform(-1, 1, (N,)).astype(bf)
    c = np.full((M, N), np.nan, bf)
    k(a, w, bias, c)
    r = a.astype(np.float64) @ w.astype(np.float64).T + bias.astype(np.float64)
    want = r / (1 + np.exp(-r))
    got = c.astype(np.float64)
    assert np.isfinite(got).all(), "some outputs were never written"
    np.testing.assert_allclose(got, want, rtol=8e-3, atol=2e-3)


def test_gemm_configs_count_the_c_tile_and_hopper_picks_tma_store():
    from tilewright.ops import gemm_configs as g

    for shape in [(4096, 4096, 4096), (8192, 8192, 1024), (2000, 3000, 1000)]:
        cfg = g.heuristic(*shape, "float16", "sm_90", 132)
        # short K over many tiles: persistent 128x192 blocks (over more than four waves of them the ping-pong
        # kernel, C in 64-column chunks: session 12); 4096^3 persistent 128x256 blocks, four stages, C by TMA
        # store in 128-column chunks (session 9)
        # (2000x3000x1000: ping-pong in clusters of two since the final H200 run of session 12)
        tile = {(4096, 4096, 4096): (128, 256, 4, 128), (8192, 8192, 1024): (128, 192, 4, 64)}.get(shape, (128, 192, 4, 64))
        assert cfg.tma_store and cfg.kind == "persistent"
        assert (cfg.block_M, cfg.block_N, cfg.stages, cfg.store_cols) == tile
        cands = g.candidates(*shape, "float16", "sm_90", 132)
        assert any(c.kind == "persistent" and c.tma_store for c in cands)
        assert any(c.kind == "direct" and not c.tma_store for c in cands)  # measured against the plain epilogue
        for c in cands:
            ring = c.stages * (c.block_M + c.block_N) * c.block_K * 2
            staged = c.block_M * (c.store_cols or c.block_N) * 2 if c.tma_store else 0
            assert (max(ring, staged) if c.c_in_ring else ring + staged) <= g.H200_SHARED_BYTES, c
    # elsewhere nothing changes: no TMA, no C tile
    assert not any(c.tma_store for c in g.candidates(4096, 4096, 4096, "float16", "sm_80", 108))
    assert not g.heuristic(16, 8192, 8192, "float16", "sm_90", 132).tma_store
    # the stored form of an older cache entry (no tma_store field) still reads
    assert g.GemmConfig.from_json({"kind": "direct", "block_M": 128}) == g.GemmConfig("direct", 128)


@needs_nvrtc
@pytest.mark.parametrize("persistent", [False, True])
def test_ops_tma_store_candidates_fit_and_build_without_spills(persistent):
    from tilewright.ops import gemm_configs, kernels
    from tilewright.toolchain import nvrtc

    cands = [c for c in gemm_configs.candidates(2000, 3000, 1000, "bfloat16", "sm_90", 132)
             if c.tma_store and (c.kind == "persistent") == persistent]
    assert cands
    for c in cands:
        tiles = (c.block_M, c.block_N, c.block_K, c.stages, c.threads)
        if persistent:
            f = kernels.linear_persistent(3000, 1000, "bfloat16", "bfloat16", False, False, False, "none", *tiles,
                                          132, c.group_M, staged_epilogue=c.staged_epilogue("bfloat16"))
        else:
            f = kernels.linear(3000, 1000, "bfloat16", "bfloat16", False, False, False, "none", *tiles,
                               staged_epilogue=c.staged_epilogue("bfloat16"))
        k = _lower(f, **c.pass_configs("sm_90"))
        # the producer warpgroup, and with ping-pong a second consumer warpgroup
        assert _nodes(k, th.TmaStore) and k.num_threads == c.threads * (2 if c.pingpong else 1) + 128
        res = nvrtc.compile_cuda(print_cuda(k), "sm_90a", [k.name]).resources[k.name]
        assert res["spills"] == 0 and res["local_bytes"] == 0, (c.short(), res)


# ---------------------------------------------------------------- bench/gemm.py


def test_bench_gemm_quick_runs_the_staged_user_configs(capsys):
    """bench/gemm.py --quick on the CPU (tile interpreter): the user kernel's staged-epilogue configs run
    and pass the float64 check (a wrong output prints WRONG RESULT)."""
    pytest.importorskip("torch")
    import importlib.util
    import os

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location("bench_gemm", os.path.join(root, "bench", "gemm.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert any(c[-1] for c in mod.user_configs(64)) and any(c[-1] for c in mod.user_configs(4096))
    mod.main(["--quick", "--dtypes", "float16", "--shapes", "64x96x128"])
    out = capsys.readouterr().out
    assert "WRONG" not in out and "failed" not in out
    assert "64x128x64 s4 t128 staged" in out and "128x256x64 s3 t256 staged" in out


# ---------------------------------------------------------------- the register -> shared epilogue (stmatrix)


def test_accumulator_to_shared_copy_is_stmatrix_x4_on_sm90():
    k = _lower(user_gemm(256, 256, 128, 128, 128, 32, threads=128, stages=3))
    stm = _nodes(k, th.StoreMatrix)
    # one consumer warpgroup, a 128x128 fp32 accumulator: 128 registers per thread = 16 x4 stores
    assert len(stm) == 16 and all(s.num == 4 for s in stm)
    src = print_cuda(k)
    assert src.count("stmatrix.sync.aligned.m8n8.x4.shared.b16") == 16
    # no element-wise (4-byte) stores into the staging tile are left
    assert "reinterpret_cast<unsigned int*>(&C_s[" not in src
    for opts, target in (({"tw.disable_stmatrix": True}, SM90A), ({"optimize_level": 1}, SM90A), ({}, SM80)):
        assert not _nodes(_lower(user_gemm(256, 256, 128, 128, 128, 32, threads=128), target, **opts), th.StoreMatrix)


@pytest.mark.parametrize("target, opts, bm, bn, threads", [
    (SM90A, {}, 128, 256, 256),  # two consumer warpgroups on wgmma m64n256
    ("cuda -arch=sm_90", {}, 64, 64, 128),  # mma.sync accumulators (2x2 warps), TMA without wgmma
    (SM90A, {"tl.disable_warp_specialized": True}, 64, 128, 128),  # the block-wide (lockstep) pipeline
])
def test_stmatrix_epilogue_on_the_emulator_without_bank_conflicts(target, opts, bm, bn, threads):
    from tilewright.interp.emulator import count_bank_conflicts

    M, N, K = bm + 8, bn + 24, 64
    k = _lower(user_gemm(M, N, K, bm, bn, 32, "bfloat16", threads=threads), target, **opts)
    assert _nodes(k, th.StoreMatrix) and _nodes(k, th.TmaStore)
    a, b, ref = _inputs(M, N, K, "bfloat16", seed=bm + bn)
    c = np.full((M, N), np.nan, a.dtype)
    run_thread_kernel(k, [a, b, c])
    _check(c, ref)
    report = count_bank_conflicts(k, [a, b, np.full((M, N), np.nan, a.dtype)])
    extra, accesses = report.per_buffer()["C_s"]
    assert accesses and extra == 0, str(report)  # 16-byte rows in the 128-byte TMA swizzle: conflict-free
