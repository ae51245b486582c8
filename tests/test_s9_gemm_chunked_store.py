"""Session 9 GEMM candidates: the TMA-store epilogue in column chunks (``store_cols``: the C tile leaves
``block_M x store_cols`` at a time through one small shared buffer, so that four 48 KB stages fit beside
it), and 64x128 tiles for 128 x N x K with long K (cuBLAS's tiles in row-major terms).  On the sm_90a
emulator against float64 with NaN-poisoned outputs (ragged M, N and K, fp16 / bf16, bias and
activation), the lowering's structure (stmatrix from the window's registers, one TMA store and one
wait per chunk), configuration round trips, and NVRTC builds without spills."""

import functools
import re

import numpy as np
import pytest
from toolchains import needs_nvrtc

import tilewright
from tilewright import language as T
from tilewright.ops import gemm_configs, kernels
from tilewright.ops.gemm_configs import GemmConfig

SM90 = "cuda -arch=sm_90a"
BF16 = tilewright.ir.dtype.to_numpy("bfloat16")


def _compile(f, cfg, backend="emulator"):
    return tilewright.compile(f, target=SM90, execution_backend=backend, pass_configs=cfg.pass_configs("sm_90"))


def _kernel_of(cfg, N, K, dtype, trans_b, has_bias, activation, blocks=3):
    tiles = (cfg.block_M, cfg.block_N, cfg.block_K, cfg.stages, cfg.threads)
    staged = cfg.staged_epilogue(dtype)
    if cfg.kind == "persistent":
        return kernels.linear_persistent(N, K, dtype, dtype, False, trans_b, has_bias, activation, *tiles, blocks,
                                         cfg.group_M, staged)
    return kernels.linear(N, K, dtype, dtype, False, trans_b, has_bias, activation, *tiles, staged, cfg.cluster)


def _want(a, b, bias, activation):
    r = a.astype(np.float64) @ b.astype(np.float64) + (bias.astype(np.float64) if bias is not None else 0)
    return {"none": r, "relu": np.maximum(r, 0), "silu": r / (1 + np.exp(-r))}[activation]


CHUNKED = [
    # (config, M, N, K, dtype, trans_b, activation): ragged edges in every dimension
    (GemmConfig("direct", 128, 256, 64, 4, 256, wgmma=True, ws=True, tma_store=True, store_cols=128),
     200, 552, 320, "bfloat16", False, "silu"),
    (GemmConfig("direct", 128, 256, 64, 4, 256, wgmma=True, ws=True, tma_store=True, store_cols=64),
     130, 296, 200, "float16", True, "relu"),  # (row strides multiples of 16 bytes: TMA)
    (GemmConfig("direct", 256, 128, 64, 4, 256, wgmma=True, ws=True, tma_store=True, store_cols=64),
     300, 200, 264, "float16", False, "none"),
    (GemmConfig("persistent", 128, 256, 64, 4, 256, group_M=8, wgmma=True, ws=True, tma_store=True, store_cols=128),
     250, 520, 192, "bfloat16", True, "silu"),
    (GemmConfig("persistent", 256, 128, 64, 4, 256, group_M=8, wgmma=True, ws=True, tma_store=True, store_cols=64),
     300, 264, 136, "float16", False, "relu"),
    (GemmConfig("direct", 128, 256, 64, 4, 256, wgmma=True, ws=True, tma_store=True, store_cols=128, cluster=(1, 2)),
     250, 264, 256, "float16", False, "none"),
]

# the whole C tile in the operand ring's memory (c_in_ring): four stages, no chunks
IN_RING = [
    (GemmConfig("direct", 128, 256, 64, 4, 256, wgmma=True, ws=True, tma_store=True, c_in_ring=True),
     200, 552, 320, "bfloat16", True, "silu"),
    (GemmConfig("direct", 256, 128, 64, 4, 256, wgmma=True, ws=True, tma_store=True, c_in_ring=True),
     300, 200, 264, "float16", False, "relu"),
]


@pytest.mark.parametrize("cfg, M, N, K, dtype, trans_b, activation", CHUNKED,
                         ids=lambda x: x.short().replace(" ", "_") if isinstance(x, GemmConfig) else None)
def test_chunked_tma_store_epilogue_on_the_emulator(cfg, M, N, K, dtype, trans_b, activation):
    has_bias = activation != "none"
    k = _compile(_kernel_of(cfg, N, K, dtype, trans_b, has_bias, activation), cfg)
    src = k.get_kernel_source()
    chunks = cfg.block_N // cfg.store_cols
    # one TMA store (a box per 64 columns of fp16 / bf16) and one commit per chunk; the chunk before the
    # next waits until its store has read the buffer
    assert src.count("cp.async.bulk.commit_group") == chunks
    assert src.count("cp.async.bulk.tensor.2d.global.shared::cta") == cfg.block_N // 64
    assert src.count("cp.async.bulk.wait_group.read 0") >= chunks
    assert "stmatrix.sync.aligned.m8n8.x4" in src
    rng = np.random.default_rng(M + N)
    np_dt = BF16 if dtype == "bfloat16" else np.float16
    a = rng.uniform(-1, 1, (M, K)).astype(np_dt)
    b = rng.uniform(-1, 1, (N, K) if trans_b else (K, N)).astype(np_dt)
    bias = rng.uniform(-1, 1, (N,)).astype(np_dt)
    c = np.full((M, N), np.nan, np_dt)
    k(a, b, bias if has_bias else np.zeros(1, np_dt), c)
    want = _want(a, b.T if trans_b else b, bias if has_bias else None, activation)
    got = c.astype(np.float64)
    assert np.isfinite(got).all(), "outputs left unwritten (NaN poison)"
    ulp = 2.0 ** -8 if dtype == "bfloat16" else 2.0 ** -11  # half an ulp of the output, relative
    np.testing.assert_allclose(got, want, rtol=ulp * 1.01, atol=1e-3)


@pytest.mark.parametrize("cfg, M, N, K, dtype, trans_b, activation", IN_RING,
                         ids=lambda x: x.short().replace(" ", "_") if isinstance(x, GemmConfig) else None)
def test_c_tile_in_the_ring_on_the_emulator(cfg, M, N, K, dtype, trans_b, activation):
    """Four 48 KB stages and the whole 64 KB C tile in 227 KB: ``share_shared_memory`` places the TMA
    store's source in the ring's memory (its lifetime starts after the mainloop), behind a consumer
    barrier that follows every warpgroup's last wgmma wait."""
    k = _compile(_kernel_of(cfg, N, K, dtype, trans_b, True, activation), cfg)
    src = k.get_kernel_source()
    ring = cfg.stages * (cfg.block_M + cfg.block_N) * cfg.block_K * 2
    assert ring <= k.shared_bytes < ring + 4096, k.shared_bytes  # the C tile takes no memory of its own
    drain = src.index("wgmma.wait_group.sync.aligned 0")
    barrier = src.index('bar.sync %0, %1;" :: "r"(1), "r"(256)', drain)
    assert drain < barrier < src.index("stmatrix.sync.aligned", drain)
    rng = np.random.default_rng(M)
    np_dt = BF16 if dtype == "bfloat16" else np.float16
    a = rng.uniform(-1, 1, (M, K)).astype(np_dt)
    b = rng.uniform(-1, 1, (N, K) if trans_b else (K, N)).astype(np_dt)
    bias = rng.uniform(-1, 1, (N,)).astype(np_dt)
    c = np.full((M, N), np.nan, np_dt)
    k(a, b, bias, c)
    got = c.astype(np.float64)
    assert np.isfinite(got).all(), "outputs left unwritten (NaN poison)"
    ulp = 2.0 ** -8 if dtype == "bfloat16" else 2.0 ** -11
    np.testing.assert_allclose(got, _want(a, b.T if trans_b else b, bias, activation), rtol=ulp * 1.01, atol=1e-3)


@pytest.mark.parametrize("cfg", [
    GemmConfig("direct", 64, 128, 64, 8, 256, wgmma=True, ws=True, tma_store=True),
    GemmConfig("direct", 64, 128, 64, 8, 128, wgmma=True, ws=True, tma_store=True),
    GemmConfig("direct", 64, 128, 64, 8, 256, wgmma=True, ws=True, tma_store=True, cluster=(2, 1)),
    GemmConfig("direct", 64, 128, 64, 8, 256, wgmma=True, ws=True, tma_store=True, cluster=(1, 2)),
], ids=lambda c: c.short().replace(" ", "_"))
def test_rows128_64x128_tiles_on_the_emulator(cfg):
    """The 128 x N x K candidates after cuBLAS's tiles: 64-row tiles of 128 columns, eight stages, with
    clusters of two along N (A multicast) or M (B multicast)."""
    M, N, K = 120, 296, 10 * 64 + 24  # two ragged tile rows, three tile columns, 11 K steps through 8 stages
    k = _compile(_kernel_of(cfg, N, K, "float16", False, True, "relu"), cfg)
    src = k.get_kernel_source()
    assert k.num_threads == cfg.threads + 128 and "wgmma.mma_async" in src
    assert (".multicast::cluster" in src) == (cfg.cluster != (1, 1))
    rng = np.random.default_rng(cfg.threads + sum(cfg.cluster))
    a = rng.uniform(-1, 1, (M, K)).astype(np.float16)
    b = rng.uniform(-1, 1, (K, N)).astype(np.float16)
    bias = rng.uniform(-1, 1, (N,)).astype(np.float16)
    c = np.full((M, N), np.nan, np.float16)
    k(a, b, bias, c)
    got = c.astype(np.float64)
    assert np.isfinite(got).all(), "outputs left unwritten (NaN poison)"
    np.testing.assert_allclose(got, _want(a, b, bias, "relu"), rtol=2.0 ** -11 * 1.01, atol=1e-3)


def test_a_window_off_the_8_column_grid_falls_back_to_element_stores():
    """``C_s[i, j] = acc[i, j + 4]``: not stmatrix blocks (the window starts inside an 8x8 block), so the
    loop is lowered element by element -- and is still right."""
    M, N, K = 64, 64, 32

    @T.prim_func
    def shifted(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, 32), "float16")):
        with T.Kernel(1, threads=128) as _:
            A_s = T.alloc_shared((M, K), "float16")
            B_s = T.alloc_shared((K, N), "float16")
            acc = T.alloc_fragment((M, N), "float32")
            C_s = T.alloc_shared((M, 32), "float16")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.clear(acc)
            T.gemm(A_s, B_s, acc)
            for i, j in T.Parallel(M, 32):
                C_s[i, j] = acc[i, j + 4]
            T.copy(C_s, C)

    k = tilewright.compile(shifted, target=SM90, execution_backend="emulator", pass_configs={"tw.enable_wgmma": True})
    assert "stmatrix" not in k.get_kernel_source()
    rng = np.random.default_rng(5)
    a = rng.uniform(-1, 1, (M, K)).astype(np.float16)
    b = rng.uniform(-1, 1, (K, N)).astype(np.float16)
    c = np.full((M, 32), np.nan, np.float16)
    k(a, b, c)
    want = (a.astype(np.float64) @ b.astype(np.float64))[:, 4:36]
    np.testing.assert_allclose(c.astype(np.float64), want, rtol=2.0 ** -11 * 1.01, atol=1e-3)


def test_store_cols_config_round_trip_and_shared_memory():
    c = GemmConfig("direct", 128, 256, 64, 4, 256, wgmma=True, ws=True, tma_store=True, store_cols=128)
    assert c.short() == "direct 128x256x64 s4 t256 wgmma ws tma-store/128"
    assert GemmConfig.parse(c.short()) == c
    assert GemmConfig.from_json(c.to_json()) == c
    ring = GemmConfig("direct", 128, 256, 64, 4, 256, wgmma=True, ws=True, tma_store=True, c_in_ring=True)
    assert ring.short().endswith("tma-store/ring") and GemmConfig.parse(ring.short()) == ring
    assert gemm_configs.fit_shared(ring, gemm_configs.H200_SHARED_BYTES) == ring and ring.staged_epilogue("float16")
    assert GemmConfig.from_json({**ring.to_json(), "kind": "persistent"}) is None  # direct kernels only
    # four 48 KB stages + a 32 KB chunk buffer fit an H200 (the whole 64 KB tile did not)
    assert gemm_configs.fit_shared(c, gemm_configs.H200_SHARED_BYTES) == c
    whole = GemmConfig("direct", 128, 256, 64, 4, 256, wgmma=True, ws=True, tma_store=True)
    assert gemm_configs.fit_shared(whole, gemm_configs.H200_SHARED_BYTES).stages == 3
    assert c.staged_epilogue("bfloat16") == 128 and whole.staged_epilogue("float16") is True
    assert c.staged_epilogue("float32") is False  # fp32 outputs keep the plain stores
    # store_cols without a TMA store, or not dividing block_N: not a configuration
    for bad in ({**c.to_json(), "tma_store": False}, {**c.to_json(), "store_cols": 96}):
        assert GemmConfig.from_json(bad) is None
    with pytest.raises(ValueError):
        kernels.epilogue_chunks(256, 100)


def test_new_candidates_are_listed_and_the_heuristic_takes_the_measured_winners():
    big = gemm_configs.candidates(4096, 4096, 4096, "float16", "sm_90", 132)
    assert GemmConfig("direct", 128, 256, 64, 4, 256, wgmma=True, ws=True, tma_store=True, store_cols=128) in big
    rows = gemm_configs.candidates(128, 8192, 8192, "float16", "sm_90", 132)
    assert GemmConfig("direct", 64, 128, 64, 8, 256, wgmma=True, ws=True, tma_store=True, cluster=(2, 1)) in rows
    # the mid-session H200 run (2026-12-01 22:32 UTC): 0.97x cuBLAS at 4096^3, 0.89x at 128x8192x8192
    h = functools.partial(gemm_configs.heuristic, dtype="float16", arch="sm_90", num_sms=132)
    assert h(4096, 4096, 4096).short() == "persistent 128x256x64 s4 t256 g8 wgmma ws tma-store/128"
    # (one consumer warpgroup since the mid-session H200 run of 2026-12-02 02:07 UTC: tests/test_s10_gemm_candidates)
    assert h(128, 8192, 8192).short() == "direct 128x64x64 s8 t128 wgmma ws tma-store pdllate"  # (s13: pdllate)
    # the final H200 run (2026-12-01 23:15 UTC): at 8192^3 the same kernel, 1.02x / 1.01x cuBLAS fp16 / bf16
    assert h(8192, 8192, 8192).short() == "persistent 128x256x64 s4 t256 g8 wgmma ws tma-store/128"
    # ... and the shapes measured before keep their choices
    # (ping-pong since the mid-session H200 run of 2026-12-02 07:48 UTC: tests/test_s12_gemm_pingpong)
    assert h(8192, 8192, 1024).short() == "persistent 128x192x64 s4 t128 g8 wgmma ws tma-store/64 pingpong"
    # (ping-pong in clusters since the final H200 run of 2026-12-02 08:42 UTC: tests/test_s12_gemm_pingpong)
    assert h(2000, 3000, 1000).short() == \
        "persistent 128x192x64 s4 t128 g8 wgmma ws tma-store/64 pingpong c2x1 pdlearly"  # (s13: pdlearly)
    assert h(16, 8192, 8192).short() == "direct 16x64x256 s4 t128"
    assert not any(c.store_cols or c.c_in_ring
                   for c in gemm_configs.candidates(4096, 4096, 4096, "float16", "sm_80", 108))


@needs_nvrtc
@pytest.mark.parametrize("cfg", [c for c, *_ in CHUNKED + IN_RING] + [
    GemmConfig("direct", 64, 128, 64, 8, 256, wgmma=True, ws=True, tma_store=True, cluster=(2, 1))],
    ids=lambda c: c.short().replace(" ", "_"))
def test_candidates_build_without_spills(cfg, tmp_path):
    """NVRTC at the benchmark's shapes: no spills, at most 168 registers a thread (three warpgroups
    share the 64K registers), and HGMMA in the SASS (when nvdisasm is here)."""
    from test_wgmma import sass_of

    from tilewright.toolchain import nvrtc

    N, K = (8192, 8192) if cfg.block_M == 64 else (4096, 4096)
    k = _compile(_kernel_of(cfg, N, K, "float16", False, False, "none", blocks=132), cfg, backend="emulator")
    src = k.get_kernel_source()
    names = re.findall(r'__global__ void (?:__\w+__\([^)]*\) )*(\w+)\(', src)
    binary = nvrtc.compile_cuda(src, "sm_90a", names)
    res = binary.resources[names[0]]
    assert res["spills"] == 0 and res["local_bytes"] == 0 and res["registers"] <= 168, res
    sass = sass_of(binary, tmp_path)
    assert "HGMMA" in sass and "LDL" not in sass and "STL" not in sass
    if cfg.store_cols:
        assert sass.count("UTMASTG") == cfg.block_N // 64 and "STSM" in sass


def test_chunked_config_through_ops_matmul_in_the_interpreter():
    """On the CPU, ``ops.matmul`` with a chunked configuration runs the same kernel source in the tile
    interpreter (plain shared-memory copies there)."""
    torch = pytest.importorskip("torch")
    from tilewright.ops import dispatch

    g = torch.Generator().manual_seed(3)
    a = torch.randn(37, 200, generator=g).to(torch.float16)
    w = torch.randn(72, 200, generator=g).to(torch.float16)
    bias = torch.randn(72, generator=g).to(torch.float16)
    for cfg in (GemmConfig("direct", 32, 64, 32, 2, 128, tma_store=True, store_cols=32),
                GemmConfig("persistent", 32, 64, 32, 2, 128, group_M=2, tma_store=True, store_cols=16)):
        out = torch.full((37, 72), float("nan"), dtype=torch.float16)
        dispatch.matmul_impl(a, w.t(), bias, "relu", None, config=cfg, out=out)
        want = (a.double() @ w.double().t() + bias.double()).clamp_min(0)
        assert torch.isfinite(out).all()
        assert (out.double() - want).abs().max().item() <= 2.0 ** -11 * 1.01 * want.abs().max().item() + 1e-3


@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
def test_every_listed_candidate_is_one_the_kernels_build(arch):
    """The tuner and the GPU tests call every candidate: none may be a name ``refusal`` turns down (the
    split-K variants of the chunked-store tiles were, found by tests/test_gpu_gemm_sched on the H200)."""
    shapes = [(1000, 1500, 1000), (2000, 3000, 1000), (4096, 4096, 4096), (128, 8192, 8192), (16, 8192, 8192),
              (8192, 8192, 1024), (300, 200, 5000), (64, 4096, 4096)]
    for M, N, K in shapes:
        for dtype in ("float16", "bfloat16"):
            for cfg in gemm_configs.candidates(M, N, K, dtype, arch, 132):
                assert gemm_configs.refusal(cfg) is None, (M, N, K, dtype, cfg.short(), gemm_configs.refusal(cfg))
