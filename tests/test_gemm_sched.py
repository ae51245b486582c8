"""GEMM scheduling kernels of the library (kernels/gemm.py): split-K (deterministic two-pass and
fp32-atomic) and the persistent tile loop, run on the emulator for sm_90a and gfx942 against float64
with NaN-poisoned outputs on ragged shapes; ``ops.matmul`` with each configuration kind in the tile
interpreter; the shape heuristic, the candidate lists and the tuning cache that overrides them;
NVRTC builds of the configurations the H200 benchmark runs, without spills."""

from __future__ import annotations

import functools
import re

import numpy as np
import pytest
from toolchains import needs_nvrtc

import tilewright
from tilewright.kernels import matmul_persistent, matmul_splitk, splitk_reduce
from tilewright.kernels.gemm import k_tiles_per_split
from tilewright.ops import gemm_configs
from tilewright.ops.gemm_configs import GemmConfig

SM90 = "cuda -arch=sm_90a"
GFX942 = "hip -arch=gfx942"


def _operands(M, N, K, trans_A, trans_B, dtype="float16", seed=0):
    rng = np.random.default_rng(seed)
    nd = tilewright.ir.dtype.to_numpy(dtype)
    a = rng.uniform(-1, 1, (M, K)).astype(nd)
    b = rng.uniform(-1, 1, (K, N)).astype(nd)
    bias = rng.uniform(-1, 1, (N,)).astype(nd)
    args_a = np.ascontiguousarray(a.T) if trans_A else a
    args_b = np.ascontiguousarray(b.T) if trans_B else b
    return a, b, bias, args_a, args_b


def _want(a, b, bias=None, activation="none"):
    r = a.astype(np.float64) @ b.astype(np.float64)
    if bias is not None:
        r = r + bias.astype(np.float64)
    if activation == "relu":
        r = np.maximum(r, 0)
    elif activation == "silu":
        r = r / (1 + np.exp(-r))
    elif activation == "gelu_tanh":
        r = 0.5 * r * (1 + np.tanh(0.7978845608028654 * (r + 0.044715 * r ** 3)))
    return r


def _check(got, want, tol=2e-2):
    got = np.asarray(got, dtype=np.float64)
    assert np.isfinite(got).all(), f"{int((~np.isfinite(got)).sum())} outputs were never written"
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


# ---------------------------------------------------------------- split-K on the emulator
@pytest.mark.parametrize("target", [SM90, GFX942])
@pytest.mark.parametrize("splits", [1, 2, 3, 4])
@pytest.mark.parametrize("atomic", [False, True])
def test_splitk_on_the_emulator(target, splits, atomic):
    M, N, K = 37, 72, 232  # ragged in every dimension; K not a multiple of block_K * splits
    a, b, bias, _, _ = _operands(M, N, K, False, False, seed=splits)
    part = tilewright.compile(matmul_splitk(M, N, K, 16, 64, 32, splits, atomic=atomic, num_stages=2),
                              target=target, execution_backend="emulator")
    slices = 1 if atomic else splits
    red = tilewright.compile(splitk_reduce(M, N, slices, "float16", "float16", "gelu_tanh", block_M=16, block_N=64),
                             target=target, execution_backend="emulator")
    ws = np.zeros((M, 1, N), np.float32) if atomic else np.full((M, splits, N), np.nan, np.float32)
    c = np.full((M, N), np.nan, np.float16)
    part(a, b, ws)
    if not atomic:
        _check(ws.sum(axis=1), _want(a, b), 1e-3)  # the slices add up to the product (fp32 partials)
    red(ws, bias, c)
    _check(c, _want(a, b, bias, "gelu_tanh"))


@pytest.mark.parametrize("trans_A, trans_B", [(True, False), (False, True)])
def test_splitk_transposed_operands_bf16(trans_A, trans_B):
    M, N, K = 48, 40, 160
    a, b, _, aa, bb = _operands(M, N, K, trans_A, trans_B, "bfloat16", seed=7)
    part = tilewright.compile(matmul_splitk(M, N, K, 16, 32, 32, 3, "bfloat16", trans_A, trans_B, num_stages=2),
                              target=SM90, execution_backend="emulator")
    red = tilewright.compile(splitk_reduce(M, N, 3, "float32", block_M=16, block_N=32), target=SM90,
                             execution_backend="emulator")
    ws = np.full((M, 3, N), np.nan, np.float32)
    c = np.full((M, N), np.nan, np.float32)
    part(aa, bb, ws)
    red(ws, np.zeros(1, np.float32), c)
    _check(c, _want(a, b), 1e-2)


def test_k_slices_cover_k_and_empty_slices_add_zero():
    for K, bk, s in [(232, 32, 3), (8192, 128, 4), (100, 64, 4), (64, 64, 1)]:
        assert k_tiles_per_split(K, bk, s) * s * bk >= K
    M, N, K = 24, 40, 40  # two K steps over four slices: slices 2 and 3 read only out-of-range tiles
    a, b, _, _, _ = _operands(M, N, K, False, False, seed=9)
    part = tilewright.compile(matmul_splitk(M, N, K, 16, 32, 32, 4, num_stages=2), target=GFX942,
                              execution_backend="emulator")
    ws = np.full((M, 4, N), np.nan, np.float32)
    part(a, b, ws)
    _check(ws[:, 2:], np.zeros((M, 2, N)), 0)
    _check(ws.sum(axis=1), _want(a, b), 1e-3)


# ---------------------------------------------------------------- persistent on the emulator
@pytest.mark.parametrize("num_blocks, group_M", [(3, 2), (5, 8), (64, 1)])
def test_persistent_on_the_emulator(num_blocks, group_M):
    """More tiles than blocks (each block loops), fewer (blocks without a tile), groups that do not
    divide the tile rows."""
    M, N, K = 100, 136, 72
    a, b, bias, _, _ = _operands(M, N, K, False, False, seed=num_blocks)
    f = matmul_persistent(M, N, K, 32, 32, 32, num_stages=2, threads=128, num_blocks=num_blocks, group_M=group_M,
                          bias_dtype="float16", activation="relu")
    k = tilewright.compile(f, target=SM90, execution_backend="emulator")
    assert "cp.async.bulk.tensor" in k.get_kernel_source()  # the TMA pipeline inside the tile loop
    c = np.full((M, N), np.nan, np.float16)
    k(a, b, bias, c)
    _check(c, _want(a, b, bias, "relu"))


@pytest.mark.parametrize("stages", [1, 2, 3, 4])
@pytest.mark.parametrize("target, pass_configs", [("cuda -arch=sm_80", None), (GFX942, None), ("hip -arch=gfx1100", None),
                                                  (SM90, {"tw.disable_tma": True})],
                         ids=["sm_80", "gfx942", "gfx1100", "sm_90a_cp_async"])
def test_persistent_without_tma(target, pass_configs, stages):
    """Was a known bug (issue 8 report): a cp.async or register-staged T.Pipelined loop nested in the
    tile loop computed wrong tiles (the prologue's stores landed after the epilogue; no barrier
    between the previous tile's gemm and the next tile's prologue copies).  Ragged shapes; no
    explicit barrier in the kernel (tests/test_pipeline_nested.py has more)."""
    M, N, K = 70, 96, 88
    a, b, _, _, _ = _operands(M, N, K, False, False, seed=stages)
    f = matmul_persistent(M, N, K, 32, 32, 32, num_stages=stages, threads=128, num_blocks=4, group_M=2)
    k = tilewright.compile(f, target=target, execution_backend="emulator", pass_configs=pass_configs)
    c = np.full((M, N), np.nan, np.float16)
    k(a, b, np.zeros(1, np.float32), c)
    _check(c, _want(a, b))


def test_persistent_with_wgmma_and_a_dynamic_row_count():
    import tilewright.language as T

    M, N, K = 150, 128, 128
    a, b, _, _, bt = _operands(M, N, K, False, True, seed=11)
    f = matmul_persistent(T.dynamic("m"), N, K, 64, 64, 64, num_stages=2, threads=128, num_blocks=4, group_M=2,
                          trans_B=True)
    k = tilewright.compile(f, target=SM90, execution_backend="emulator", pass_configs={"tw.enable_wgmma": True})
    assert "wgmma.mma_async" in k.get_kernel_source()
    c = np.full((M, N), np.nan, np.float16)
    k(a, bt, np.zeros(1, np.float32), c)
    _check(c, _want(a, b))


@pytest.mark.parametrize("M, N, K, cfg, dtype, trans_B", [
    (16, 256, 1024, GemmConfig("splitk", 16, 128, 128, 4, 128, splits=2), "bfloat16", True),  # decode
    (128, 256, 512, GemmConfig("splitk", 128, 256, 64, 4, 256, splits=2, wgmma=True, ws=True), "bfloat16", True),
    (200, 300, 256, GemmConfig("splitk", 64, 128, 64, 4, 128, splits=2, wgmma=True), "float16", False),
    (256, 512, 128, GemmConfig("persistent", 128, 256, 64, 4, 256, wgmma=True), "float16", False),
], ids=["decode", "m128_ws", "ragged_wgmma", "persistent_wgmma"])
def test_h200_configurations_on_the_emulator(M, N, K, cfg, dtype, trans_B):
    """The tile shapes, stages, threads and pass configs ops.matmul runs on the H200, at full tile
    size: warp-specialized wgmma split-K, the decode split-K, the persistent wgmma loop (3 blocks
    for 4 tiles)."""
    from tilewright.ops import kernels

    a, b, _, _, bb = _operands(M, N, K, False, trans_B, dtype, seed=M)
    tiles = (cfg.block_M, cfg.block_N, cfg.block_K, cfg.stages, cfg.threads)
    pc = cfg.pass_configs("sm_90")
    if cfg.kind == "splitk":
        k = tilewright.compile(kernels.linear_splitk(N, K, dtype, False, trans_B, *tiles, cfg.splits, False),
                               target=SM90, execution_backend="emulator", pass_configs=pc)
        ws = np.full((M, cfg.splits, N), np.nan, np.float32)
        k(a, bb, ws)
        got = ws.sum(axis=1)
    else:
        f = kernels.linear_persistent(N, K, dtype, "float32", False, trans_B, False, "none", *tiles, 3, cfg.group_M)
        k = tilewright.compile(f, target=SM90, execution_backend="emulator", pass_configs=pc)
        got = np.full((M, N), np.nan, np.float32)
        k(a, bb, np.zeros(1, np.float32), got)
    src = k.get_kernel_source()
    assert ("wgmma.mma_async" in src) == cfg.wgmma and (k.num_threads > cfg.threads) == cfg.ws
    _check(got, _want(a, b), 1e-4)


# ---------------------------------------------------------------- ops.matmul in the interpreter
torch = pytest.importorskip("torch")


def _torch_inputs(M, N, K, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(M, K, generator=g).to(dtype)
    w = torch.randn(N, K, generator=g).to(dtype)
    bias = torch.randn(N, generator=g).to(dtype)
    return a, w, bias


def _ref(a, b, bias, activation):
    r = a.double() @ b.double() + (bias.double() if bias is not None else 0)
    return {"none": r, "relu": r.clamp_min(0), "silu": r * torch.sigmoid(r),
            "gelu_tanh": torch.nn.functional.gelu(r, approximate="tanh")}[activation]


def _close(got, want, tol):
    assert torch.isfinite(got).all()
    err = (got.double() - want).abs().max().item()
    assert err <= tol * max(1.0, want.abs().max().item()), err


CONFIGS = [GemmConfig("splitk", 16, 64, 32, 2, 128, splits=s) for s in (1, 2, 3, 4)] + [
    GemmConfig("splitk", 16, 64, 32, 2, 128, splits=3, atomic=True),
    GemmConfig("persistent", 16, 32, 32, 2, 128, group_M=2),
    GemmConfig("direct", 16, 64, 32, 2, 128)]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.short().replace(" ", "_"))
def test_ops_matmul_configs_in_the_interpreter(cfg):
    from tilewright.ops import dispatch

    a, w, bias = _torch_inputs(37, 72, 300, torch.float16, seed=cfg.splits)
    out = dispatch.matmul_impl(a, w.t(), bias, "silu", None, config=cfg)
    _close(out, _ref(a, w.t(), bias, "silu"), 4e-3)
    out32 = dispatch.matmul_impl(a.bfloat16(), w.bfloat16().t(), None, None, torch.float32, config=cfg)
    assert out32.dtype == torch.float32
    _close(out32, _ref(a.bfloat16(), w.bfloat16().t(), None, "none"), 1e-2)


def test_ops_matmul_decode_shape_takes_split_k():
    from tilewright import ops
    from tilewright.ops import dispatch

    a, w, bias = _torch_inputs(4, 256, 2048, torch.bfloat16, seed=3)
    cfg = dispatch.matmul_config(4, 256, 2048, a, False, True, True, "relu")
    assert cfg.kind == "splitk" and cfg.splits > 1
    _close(ops.matmul(a, w.t(), bias, activation="relu"), _ref(a, w.t(), bias, "relu"), 1e-2)
    _close(ops.matmul(a, w.t()), _ref(a, w.t(), None, "none"), 1e-2)  # activation=None is "none"


# ---------------------------------------------------------------- heuristic, candidates, tuning cache
@pytest.mark.parametrize("M, N, K", [(16, 8192, 8192), (128, 8192, 8192), (8192, 8192, 1024), (2000, 3000, 1000),
                                     (4096, 4096, 4096), (1, 40, 24)])
def test_heuristic_fills_the_gpu_without_tiny_k_slices(M, N, K):
    for arch in ("sm_90", "sm_80", "gfx942", "interpret"):
        cfg = gemm_configs.heuristic(M, N, K, "float16", arch, 132)
        tiles = -(-M // cfg.block_M) * -(-N // cfg.block_N)
        if cfg.kind == "splitk":
            assert tiles * cfg.splits <= 132 and -(-K // cfg.block_K) >= 4 * cfg.splits
        if tiles * 2 > 132:
            assert cfg.kind in ("direct", "persistent")
        assert (cfg.wgmma or cfg.ws) <= (arch == "sm_90") and not cfg.pass_configs("gfx942")
    # measured on the H200 (bench/results/2026-12-01-0835-gemm-*, -0954-gemm-*, -1526-gemm-weak-*):
    # decode over 8192 columns takes thin deep blocks without a split, 128 rows over 8192 columns
    # 128x64 tiles 8 stages deep without a split, over 2048 columns two K halves of 128x128 tiles,
    # short K over many tiles the persistent kernel with TMA stores (128x192 tiles where 128x256
    # would leave the second wave part empty)
    h = functools.partial(gemm_configs.heuristic, dtype="float16", arch="sm_90", num_sms=132)
    assert (h(16, 8192, 8192).kind, h(16, 8192, 8192).block_N) == ("direct", 64)
    c128 = h(128, 8192, 8192)
    assert (c128.kind, c128.block_N, c128.stages, c128.ws) == ("direct", 64, 8, True)
    assert (h(128, 2048, 8192).kind, h(128, 2048, 8192).block_N) == ("splitk", 128)
    assert h(8192, 8192, 1024).kind == "persistent" and h(8192, 8192, 1024).tma_store
    assert (h(2000, 3000, 1000).kind, h(2000, 3000, 1000).block_N) == ("persistent", 192)
    assert h(16, 1024, 1024).kind == "splitk"  # too few columns to fill the GPU: split
    cands = gemm_configs.candidates(M, N, K, "float16", "sm_90", 132)
    assert cands[0] == gemm_configs.heuristic(M, N, K, "float16", "sm_90", 132) and len(set(cands)) == len(cands)
    assert all(c.kind != "persistent" for c in gemm_configs.candidates(M, N, K, "float16", "gfx942", 304))


def test_config_json_round_trip_and_bad_entries():
    c = GemmConfig("splitk", 64, 128, 64, 4, 128, splits=3, wgmma=True)
    assert GemmConfig.from_json(c.to_json()) == c
    assert GemmConfig.from_json({"kind": "direct", "nonsense": 1}) is None
    assert GemmConfig.from_json({"kind": "warpspeed"}) is None


def test_tuned_entry_overrides_the_heuristic(tmp_path, monkeypatch):
    from tilewright.ops import dispatch

    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(dispatch, "_gemm_choice", {})
    a, w, bias = _torch_inputs(20, 64, 128, torch.float16, seed=5)
    b = w.t()
    before = dispatch.matmul_config(20, 64, 128, a, False, True, True, "relu")
    slow = GemmConfig("splitk", 16, 32, 32, 2, 128, splits=2)
    rows = dispatch.tune_matmul(a, b, bias, "relu", configs=[slow, GemmConfig("direct", 256, 64, 32, 2, 128)],
                                rep=1)
    assert len(rows) == 2 and rows[0][1] is not None
    best = min((r for r in rows if r[1] is not None), key=lambda r: r[1])[0]
    monkeypatch.setattr(dispatch, "_gemm_choice", {})  # a fresh process: the entry comes from disk
    chosen = dispatch.matmul_config(30, 64, 128, a, False, True, True, "relu")  # same row bucket (32)
    assert chosen == best and (chosen != before or best == before)
    assert list((tmp_path / "tuning").glob("*.json"))
    assert dispatch.matmul_config(200, 64, 128, a, False, True, True, "relu") == \
        gemm_configs.heuristic(200, 64, 128, "float16", "interpret", 132)  # another bucket: the heuristic
    for f in (tmp_path / "tuning").glob("*.json"):
        f.write_text("{not json")
    monkeypatch.setattr(dispatch, "_gemm_choice", {})
    assert dispatch.matmul_config(30, 64, 128, a, False, True, True, "relu") == before  # unreadable: a miss


# ---------------------------------------------------------------- NVRTC builds for the H200
@needs_nvrtc
@pytest.mark.parametrize("M, N, K, cfg", [
    (16, 8192, 8192, gemm_configs.heuristic(16, 8192, 8192, "float16", "sm_90", 132)),
    (128, 8192, 8192, gemm_configs.heuristic(128, 8192, 8192, "float16", "sm_90", 132)),
    (2000, 3000, 1000, GemmConfig("persistent", 128, 128, 64, 4, 256, wgmma=True)),
], ids=["decode", "m128", "persistent"])
def test_h200_configs_compile_without_spills(M, N, K, cfg):
    from tilewright.ops import kernels
    from tilewright.toolchain import nvrtc

    tiles = (cfg.block_M, cfg.block_N, cfg.block_K, cfg.stages, cfg.threads)
    if cfg.kind == "splitk":
        f = kernels.linear_splitk(N, K, "bfloat16", False, True, *tiles, cfg.splits, cfg.atomic)
    else:
        f = kernels.linear_persistent(N, K, "bfloat16", "bfloat16", False, False, True, "silu", *tiles, 132, 8)
    k = tilewright.compile(f, target=SM90, execution_backend="emulator", pass_configs=cfg.pass_configs("sm_90"))
    src = k.get_kernel_source()
    assert "cp.async.bulk.tensor" in src
    names = re.findall(r'extern "C" __global__ void (?:__launch_bounds__\([^)]*\) )?(\w+)\(', src)
    res = nvrtc.compile_cuda(src, "sm_90a", names).resources[names[0]]
    assert res["spills"] == 0 and res["local_bytes"] == 0, res


def test_ops_matmul_empty_k_is_the_activated_bias_and_out_is_written():
    from tilewright.ops import dispatch

    a = torch.zeros(3, 0).half()
    b = torch.zeros(0, 5).half()
    bias = torch.tensor([-1.0, 0.5, 2.0, -3.0, 1.0]).half()
    out = torch.full((3, 5), float("nan")).half()
    dispatch.matmul_impl(a, b, bias, "relu", None, out=out)
    _close(out, bias.double().clamp_min(0).expand(3, 5), 0)
    with pytest.raises(tilewright.ArgumentError, match="out must be"):
        dispatch.matmul_impl(a, b, bias, "relu", None, out=torch.empty(5, 3).half())


@pytest.mark.parametrize("target, num_sms", [("hip -arch=gfx942", 304), ("hip -arch=gfx1100", 48),
                                             ("cuda -arch=sm_86", 84)])
@pytest.mark.parametrize("M", [16, 64, 128])
def test_heuristic_fits_the_shared_memory_of_smaller_targets(target, num_sms, M):
    """64 KiB of LDS on AMD, 99 KiB on consumer NVIDIA: the thin decode tiles' rings shrink to fit
    and the kernels compile (they needed 96-144 KiB before)."""
    from tilewright.ops import kernels
    from tilewright.target import Target

    limit = Target.parse(target).max_shared_bytes
    arch = target.split("=")[1]
    N, K = 4096, 4096
    cfg = gemm_configs.heuristic(M, N, K, "float16", arch, num_sms, limit)
    assert cfg.stages * (cfg.block_M + cfg.block_N) * cfg.block_K * 2 <= limit
    tiles = (cfg.block_M, cfg.block_N, cfg.block_K, cfg.stages, cfg.threads)
    f = (kernels.linear_splitk(N, K, "float16", False, True, *tiles, cfg.splits, False) if cfg.kind == "splitk"
         else kernels.linear(N, K, "float16", "float16", False, True, True, "silu", *tiles))
    tilewright.compile(f, target=target, execution_backend="emulator")
    for c in gemm_configs.candidates(M, N, K, "float16", arch, num_sms, limit):
        assert c.stages * (c.block_M + c.block_N) * c.block_K * 2 <= limit and c.kind != "persistent"
