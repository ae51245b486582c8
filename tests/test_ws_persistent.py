"""Warp specialization of persistent GEMMs (a ``T.Pipelined`` K loop inside a serial tile loop) on
the cooperative emulator for sm_90a, which checks the mbarrier protocol (parities, arrival counts,
slot reuse, wgmma reads): the producer warpgroup runs the tile loop too, filling the ring with the
next tile's K slices while the consumers run this tile's epilogue, the ring phases continuing
across tiles.  Against float64 with NaN-poisoned outputs; blocks with different tile counts (a
partial last round); seeded protocol faults; an NVRTC build without spills."""

from __future__ import annotations

import numpy as np
import pytest
from toolchains import needs_nvrtc

import tilewright
import tilewright.language as T
from tilewright.interp.emulator import EmulatorError
from tilewright.ir import thread as th
from tilewright.ir import tile as t
from tilewright.ir.visitor import map_stmt, substitute, walk
from tilewright.kernels.gemm import matmul_persistent

WS = {"tw.warp_specialize": True}
SM90 = "cuda -arch=sm_90a"


def _inputs(M, N, K, dtype, seed=0, trans_B=False):
    rng = np.random.default_rng(seed)
    nd = tilewright.ir.dtype.to_numpy(dtype)
    a = rng.uniform(-1, 1, (M, K)).astype(nd)
    b = rng.uniform(-1, 1, (N, K) if trans_B else (K, N)).astype(nd)
    return a, b


def _run(k, M, N, K, dtype, trans_B=False, seed=0):
    a, b = _inputs(M, N, K, dtype, seed, trans_B)
    c = np.full((M, N), np.nan, np.float32)
    k(a, b, np.zeros(1, np.float32), c)
    want = a.astype(np.float64) @ (b.astype(np.float64).T if trans_B else b.astype(np.float64))
    assert np.isfinite(c).all(), "some outputs were never written"
    np.testing.assert_allclose(c.astype(np.float64), want, rtol=2e-3, atol=2e-3)


def _tiles_per_block(M, N, bm, bn, blocks):
    tiles = -(-M // bm) * -(-N // bn)
    return sorted({len(range(b, tiles, blocks)) for b in range(blocks)})


@pytest.mark.parametrize("M, N, K, bm, bn, bk, stages, threads, blocks, dtype, trans_B", [
    (200, 136, 104, 64, 64, 32, 3, 128, 5, "float16", False),   # ragged M, N, K; 3 or 2 tiles per block
    (128, 192, 96, 64, 64, 32, 2, 128, 4, "bfloat16", False),   # 2 or 1 tiles per block
    (136, 128, 72, 128, 64, 32, 4, 256, 3, "float16", False),   # two consumer warpgroups; 2 or 1 tiles
    (128, 128, 64, 64, 64, 32, 2, 128, 4, "bfloat16", True),    # one tile per block, B transposed
    (96, 128, 80, 64, 64, 32, 1, 128, 2, "float16", False),     # one stage: synchronous slot release
])
def test_persistent_gemm_is_warp_specialized(M, N, K, bm, bn, bk, stages, threads, blocks, dtype, trans_B):
    f = matmul_persistent(M, N, K, bm, bn, bk, dtype=dtype, out_dtype="float32", trans_B=trans_B,
                          num_stages=stages, threads=threads, num_blocks=blocks)
    k = tilewright.compile(f, target=SM90, execution_backend="emulator", pass_configs=WS)
    assert k.num_threads == threads + 128  # a producer warpgroup was added
    src = k.get_kernel_source()
    assert "cp.async.bulk.tensor" in src and "mbarrier.try_wait" in src
    if stages >= 2:
        assert "wgmma.mma_async" in src
    _run(k, M, N, K, dtype, trans_B)


def test_the_cases_cover_partial_last_rounds():
    assert _tiles_per_block(200, 136, 64, 64, 5) == [2, 3]
    assert _tiles_per_block(136, 128, 128, 64, 3) == [1, 2]
    assert _tiles_per_block(128, 128, 64, 64, 4) == [1]


def test_default_sm90a_compile_warp_specializes_the_library_kernel():
    """No pass config: warp specialization is the sm_90a default (the kernel's ``T.sync_threads()``
    at the end of a round stays with the consumers, a named barrier among them)."""
    f = matmul_persistent(128, 128, 96, 64, 64, 32, out_dtype="float32", num_stages=2, threads=128, num_blocks=3)
    k = tilewright.compile(f, target=SM90, execution_backend="emulator")
    assert k.num_threads == 256
    _run(k, 128, 128, 96, "float16", seed=1)


def _per_tile_k(M, N, K, bm=64, bn=64, bk=32):
    """A tile loop whose K trip count changes from tile to tile: the pass must leave it alone."""
    @T.prim_func
    def g(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), Bias: T.Tensor((1,), "float32"),
          C: T.Tensor((M, N), "float32")):
        with T.Kernel(2, threads=128) as bid:
            As = T.alloc_shared((bm, bk), "float16")
            Bs = T.alloc_shared((bk, bn), "float16")
            Cf = T.alloc_fragment((bm, bn), "float32")
            for r in T.serial(2):
                tile = r * 2 + bid
                T.clear(Cf)
                for k in T.Pipelined(K // bk - tile % 2, num_stages=2):
                    T.copy(A[tile // 2 * bm, k * bk], As)
                    T.copy(B[k * bk, tile % 2 * bn], Bs)
                    T.gemm(As, Bs, Cf)
                T.copy(Cf, C[tile // 2 * bm, tile % 2 * bn])

    return g


def test_a_k_trip_count_that_varies_per_tile_is_left_alone():
    k = tilewright.compile(_per_tile_k(128, 128, 96), target=SM90, execution_backend="emulator", pass_configs=WS)
    assert k.num_threads == 128


def _tile_from_table(M, N, K, bm=64, bn=64, bk=32):
    """TMA coordinates from a tile table in global memory: the producer would need a load the
    consumers' statements make; the pass must leave it alone (not duplicate memory reads)."""
    @T.prim_func
    def g(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), Order: T.Tensor((4,), "int32"),
          C: T.Tensor((M, N), "float32")):
        with T.Kernel(2, threads=128) as bid:
            As = T.alloc_shared((bm, bk), "float16")
            Bs = T.alloc_shared((bk, bn), "float16")
            Cf = T.alloc_fragment((bm, bn), "float32")
            for r in T.serial(2):
                tile = Order[r * 2 + bid]
                T.clear(Cf)
                for k in T.Pipelined(K // bk, num_stages=2):
                    T.copy(A[tile // 2 * bm, k * bk], As)
                    T.copy(B[k * bk, tile % 2 * bn], Bs)
                    T.gemm(As, Bs, Cf)
                T.copy(Cf, C[tile // 2 * bm, tile % 2 * bn])

    return g


def test_tma_coordinates_from_memory_are_left_alone():
    k = tilewright.compile(_tile_from_table(128, 128, 64), target=SM90, execution_backend="emulator",
                           pass_configs=WS)
    assert k.num_threads == 128
    a, b = _inputs(128, 128, 64, "float16", seed=5)
    order = np.array([3, 0, 2, 1], np.int32)
    c = np.full((128, 128), np.nan, np.float32)
    k(a, b, order, c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=2e-3, atol=2e-3)


# ---------------------------------------------------------------- seeded faults
def _inject(monkeypatch, fault):
    """A pass after warp_specialize that breaks the protocol as ``fault`` says (uncached: the faulty
    kernels must neither come from nor go into the compile caches)."""
    import tilewright.passes.pipeline as pl

    monkeypatch.setenv("TILEWRIGHT_DISABLE_CACHE", "1")

    def inject(func, ctx):
        outer = []
        walk(func.body, lambda s: outer.append(s) if isinstance(s, t.For) and s.kind == "serial"
             and s.var.name == "r" else None)
        r = outer[0].var

        def f(s):
            if fault == "phase_restarts_per_tile" and isinstance(s, th.MbarrierWait) and s.bar.name.endswith("full"):
                # the consumers' ring position forgets the earlier tiles' K steps
                return th.MbarrierWait(s.bar, substitute(s.index, {r: 0}), substitute(s.parity, {r: 0}), s.loc)
            if fault == "no_release_after_tile" and isinstance(s, t.SeqStmt):
                kept = [x for x in s.stmts if not (isinstance(x, th.MbarrierArrive) and x.elected
                                                   and any(isinstance(y, th.WgmmaWait) for y in s.stmts))]
                if len(kept) != len(s.stmts):
                    return t.SeqStmt(kept)
            return None

        func.body = map_stmt(func.body, f)
        return func

    passes = list(pl.TILE_PASSES["cuda"])
    passes.insert(passes.index(pl.warp_specialize) + 1, inject)
    monkeypatch.setitem(pl.TILE_PASSES, "cuda", passes)


@pytest.mark.parametrize("fault, message", [("phase_restarts_per_tile", "(?i)nothing ordering|parity"),
                                            ("no_release_after_tile", "(?i)deadlock")])
def test_seeded_protocol_faults_are_caught(monkeypatch, fault, message):
    _inject(monkeypatch, fault)
    f = matmul_persistent(128, 192, 96, 64, 64, 32, out_dtype="float32", num_stages=2, threads=128, num_blocks=2)
    k = tilewright.compile(f, target=SM90, execution_backend="emulator", pass_configs=WS)
    with pytest.raises(EmulatorError, match=message):
        _run(k, 128, 192, 96, "float16")


# ---------------------------------------------------------------- NVRTC
@needs_nvrtc
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_persistent_128x256_ws_builds_without_spills(dtype, tmp_path):
    """The H200 candidate: 128x256x64 tiles, 4 stages, 256 consumer threads + the producer warpgroup,
    register rebalancing (setmaxnreg), HGMMA in the SASS where nvdisasm is installed."""

    from test_wgmma import sass_of

    from tilewright.codegen.cuda import print_cuda
    from tilewright.passes.pipeline import PassContext, run_pipeline
    from tilewright.target import Target
    from tilewright.toolchain import nvrtc

    f = matmul_persistent(4096, 4096, 4096, 128, 256, 64, dtype=dtype, num_stages=4, threads=256, num_blocks=132)
    k = run_pipeline(f, PassContext(Target.parse(SM90), {"optimize_level": 2}))
    assert k.num_threads == 384
    src = print_cuda(k)
    assert "setmaxnreg" in src and "wgmma.mma_async" in src and "cp.async.bulk.tensor" in src
    binary = nvrtc.compile_cuda(src, "sm_90a", [k.name])
    res = binary.resources[k.name]
    # with setmaxnreg the device compiler gives every thread the launch budget: 65536 / 384 -> 168
    assert res["spills"] == 0 and res["local_bytes"] == 0 and res["registers"] == 168, res
    sass = sass_of(binary, tmp_path)
    assert "HGMMA.64x256x16.F32" in sass and "LDL" not in sass and "STL" not in sass


# ---------------------------------------------------------------- ops.matmul's persistent candidates
def test_ops_persistent_candidates_are_warp_specialized():
    from tilewright.ops import gemm_configs

    for shape in [(4096, 4096, 4096), (8192, 8192, 1024), (2000, 3000, 1000)]:
        pers = [c for c in gemm_configs.candidates(*shape, "float16", "sm_90", 132) if c.kind == "persistent"]
        assert pers and all(c.ws and c.wgmma for c in pers)
        assert {(c.block_M, c.block_N) for c in pers} == {(128, 128), (128, 256), (128, 192), (192, 128), (256, 128)}


@pytest.mark.parametrize("bm, bn, threads, blocks, staged", [
    (128, 128, 256, 3, False), (128, 256, 256, 2, False),
    (128, 192, 256, 2, True), (192, 128, 256, 2, True), (192, 128, 384, 3, True)])
def test_ops_persistent_kernel_with_bias_and_activation_on_the_emulator(bm, bn, threads, blocks, staged):
    """The kernel ops.matmul runs (dynamic row count, bias + silu epilogue per tile, bf16 out) at the
    candidates' full tile sizes, with fewer blocks than tiles and a partial last round; C through
    the shared tile and a TMA store where ``staged``."""
    from tilewright.ops import gemm_configs, kernels

    cfg = gemm_configs.GemmConfig("persistent", bm, bn, 64, 4, threads, wgmma=True, ws=True)
    M, N, K = 300, 2 * bn, 200
    f = kernels.linear_persistent(N, K, "bfloat16", "bfloat16", False, True, True, "silu", bm, bn, 64, 4, threads,
                                  blocks, 8, staged)
    k = tilewright.compile(f, target=SM90, execution_backend="emulator", pass_configs=cfg.pass_configs("sm_90"))
    assert k.num_threads == threads + 128
    rng = np.random.default_rng(bn)
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
    np.testing.assert_allclose(got, want, rtol=8e-3, atol=2e-3)  # bf16 output: half an ulp is 3.9e-3


@needs_nvrtc
@pytest.mark.parametrize("bn, has_bias, activation", [
    (128, False, "none"), (256, False, "none"), (128, True, "silu"), (256, False, "silu"), (256, True, "silu"),
])
def test_ops_persistent_candidates_build_without_spills(bn, has_bias, activation):
    from tilewright.codegen.cuda import print_cuda
    from tilewright.ops import kernels
    from tilewright.passes.pipeline import PassContext, run_pipeline
    from tilewright.target import Target
    from tilewright.toolchain import nvrtc

    f = kernels.linear_persistent(3000, 1000, "bfloat16", "bfloat16", False, False, has_bias, activation, 128, bn,
                                  64, 4, 256, 132, 8)
    k = run_pipeline(f, PassContext(Target.parse(SM90), {"optimize_level": 2, "tw.enable_wgmma": True,
                                                         "tw.warp_specialize": True}))
    assert k.num_threads == 384
    res = nvrtc.compile_cuda(print_cuda(k), "sm_90a", [k.name]).resources[k.name]
    assert res["spills"] == 0 and res["local_bytes"] == 0, res


# ---------------------------------------------------------------- on the GPU (skipped without an sm_90 one)
def _sm90_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return (torch.cuda.is_available() and not getattr(torch.version, "hip", None)
            and torch.cuda.get_device_capability() >= (9, 0))


@pytest.mark.skipif(not _sm90_gpu(), reason="needs an sm_90 NVIDIA GPU with a CUDA build of PyTorch")
@pytest.mark.parametrize("M, N, K, bn, dtype", [
    (2000, 3000, 1000, 256, "float16"), (2000, 3000, 1000, 128, "bfloat16"), (4096, 4096, 1024, 256, "bfloat16"),
    (1000, 520, 4104, 256, "float16")])
def test_persistent_ws_gemm_on_gpu(M, N, K, bn, dtype):
    import torch

    f = matmul_persistent(M, N, K, 128, bn, 64, dtype=dtype, out_dtype="float32", num_stages=4, threads=256,
                          num_blocks=torch.cuda.get_device_properties(0).multi_processor_count)
    k = tilewright.compile(f, target="cuda")
    assert k.num_threads == 384
    tdt = getattr(torch, dtype)
    g = torch.Generator(device="cuda").manual_seed(M + N + K)
    a = torch.randn(M, K, device="cuda", generator=g).to(tdt)
    b = torch.randn(K, N, device="cuda", generator=g).to(tdt)
    c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float32)
    k(a, b, torch.zeros(1, device="cuda"), c)
    torch.cuda.synchronize()
    want = a.double() @ b.double()
    assert torch.isfinite(c).all(), "some outputs were never written"
    assert ((c.double() - want).abs().max() / want.abs().max()).item() < 2e-3
