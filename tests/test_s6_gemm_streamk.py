"""The data-parallel + stream-K GEMM (``kernels.gemm.matmul_streamk`` + ``streamk_fixup``): its slice
plan, its results against float64 on the sm_90a emulator (warp-specialized, with the two-phase K trip
count) and through ``ops.matmul``, its resources on sm_90a (NVRTC: no spills), and on an H200."""

from __future__ import annotations

import numpy as np
import pytest
from test_ws_persistent import _sm90_gpu
from toolchains import needs_nvrtc

import tilewright
from tilewright.kernels.gemm import matmul_streamk, streamk_fixup, streamk_plan, streamk_steps
from tilewright.ops import gemm_configs
from tilewright.ops.gemm_configs import GemmConfig

SM90 = "cuda -arch=sm_90a"
WS = {"tw.enable_wgmma": True, "tw.warp_specialize": True}


# ---------------------------------------------------------------- the plan
def test_streamk_plan_evens_out_the_last_wave():
    # 2000x3000 in 128x256 tiles: 192 tiles of 16 K steps on 132 SMs; halves of the 60 left over
    assert streamk_plan(192, 16, 132) == 2
    assert streamk_steps(192, 16, 132, 1) == 32 and streamk_steps(192, 16, 132, 2) == 24
    # whole waves: nothing to even out
    assert streamk_plan(264, 16, 132) == 1
    # 128x8192x8192 in 128x128 tiles: less than one wave, two halves fill it
    assert streamk_plan(64, 128, 132) == 2


def test_streamk_candidates_on_the_weak_shapes_only():
    sk = [c for c in gemm_configs.candidates(2000, 3000, 1000, "float16", "sm_90", 132) if c.kind == "streamk"]
    assert [(c.block_M, c.block_N, c.splits) for c in sk] == [(128, 256, 2)]
    sk = [c for c in gemm_configs.candidates(128, 8192, 8192, "bfloat16", "sm_90", 132) if c.kind == "streamk"]
    assert {(c.block_N, c.splits) for c in sk} == {(128, 2), (256, 4)}
    for shape in [(4096, 4096, 4096), (8192, 8192, 8192), (8192, 8192, 1024)]:
        assert not [c for c in gemm_configs.candidates(*shape, "float16", "sm_90", 132) if c.kind == "streamk"]
    assert not [c for c in gemm_configs.candidates(2000, 3000, 1000, "float16", "gfx942", 304)
                if c.kind == "streamk"]
    assert GemmConfig.from_json(sk[0].to_json()) == sk[0]


# ---------------------------------------------------------------- on the emulator
def _reference(a, b, bias, activation, trans_A, trans_B):
    A = a.astype(np.float64).T if trans_A else a.astype(np.float64)
    B = b.astype(np.float64).T if trans_B else b.astype(np.float64)
    r = A @ B + (bias.astype(np.float64) if bias is not None else 0)
    return {"none": r, "relu": np.maximum(r, 0), "silu": r / (1 + np.exp(-r))}[activation]


@pytest.mark.parametrize("M, N, K, bn, blocks, splits, trans_A, trans_B, bias, activation, ws", [
    # 10 tiles on 4 blocks: two data-parallel waves, then 2 tiles in 4 slices (the last one short)
    (256, 640, 320, 128, 4, 2, False, True, True, "silu", True),
    # ragged M and N, 3 slices, transposed A
    (200, 392, 448, 128, 3, 3, True, False, False, "relu", True),
    # 128x256 tiles (two consumer warpgroups), fewer tiles than blocks: all stream-K
    (128, 512, 256, 256, 3, 2, False, False, True, "none", True),
    # a transposed A whose rows are not 16-byte multiples: no TMA, the plain pipelined loop
    (300, 256, 192, 128, 2, 2, True, True, False, "none", False),
])
def test_streamk_on_the_emulator(M, N, K, bn, blocks, splits, trans_A, trans_B, bias, activation, ws):
    dt = "float16"
    f = matmul_streamk(M, N, K, 128, bn, 64, splits, dt, "float32", trans_A, trans_B, 3, 256 if bn > 128 else 128,
                       blocks, 0, dt if bias else None, activation)
    k1 = tilewright.compile(f, target=SM90, execution_backend="emulator", pass_configs=WS)
    consumers = 256 if bn > 128 else 128
    assert k1.num_threads == (consumers + 128 if ws else consumers)  # the producer warpgroup when specialized
    k2 = tilewright.compile(streamk_fixup(M, N, 128, bn, splits, blocks, 0, "float32", dt if bias else None,
                                          activation), target=SM90, execution_backend="emulator")
    rng = np.random.default_rng(M + N + K)
    a = rng.uniform(-1, 1, (K, M) if trans_A else (M, K)).astype(np.float16)
    b = rng.uniform(-1, 1, (N, K) if trans_B else (K, N)).astype(np.float16)
    bv = rng.uniform(-1, 1, (N,)).astype(np.float16) if bias else np.zeros(1, np.float32)
    c = np.full((M, N), np.nan, np.float32)
    w = np.full((blocks, splits, 128, bn), np.nan, np.float32)  # poisoned: every slot read is written first
    k1(a, b, bv, c, w)
    k2(w, bv, c)
    want = _reference(a, b, bv if bias else None, activation, trans_A, trans_B)
    assert np.isfinite(c).all(), "some outputs were never written"
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-4)


def test_ops_matmul_streamk_config_in_the_interpreter():
    torch = pytest.importorskip("torch")
    from tilewright.ops import dispatch

    g = torch.Generator().manual_seed(7)
    a = torch.randn(37, 300, generator=g).half()
    w = torch.randn(72, 300, generator=g).half()
    bias = torch.randn(72, generator=g).half()
    cfg = GemmConfig("streamk", 16, 64, 32, 2, 128, splits=3, group_M=0)
    out = dispatch.matmul_impl(a, w.t(), bias, "silu", torch.float32, config=cfg)
    r = a.double() @ w.double().t() + bias.double()
    want = r * torch.sigmoid(r)
    assert torch.isfinite(out).all()
    assert (out.double() - want).abs().max().item() <= 1e-4 * max(1.0, want.abs().max().item())


def test_ops_matmul_streamk_repeat_calls(monkeypatch):
    """A stream-K configuration chosen for a shape (tuned, or one day by the heuristic) serves repeat
    calls through the per-signature plan: workspace and fixup kernel included, every call's output
    poisoned first."""
    torch = pytest.importorskip("torch")
    from tilewright.ops import dispatch

    cfg = GemmConfig("streamk", 16, 64, 32, 2, 128, splits=3, group_M=0)
    from test_s6_host_plans import PoisonTorch

    monkeypatch.setattr(dispatch, "matmul_config", lambda *a, **k: cfg)
    dispatch.forget_plans()
    monkeypatch.setattr(dispatch, "_torch", lambda: PoisonTorch())
    g = torch.Generator().manual_seed(8)
    w = torch.randn(72, 300, generator=g).half()
    bias = torch.randn(72, generator=g).half()
    try:
        for _ in range(3):
            a = torch.randn(37, 300, generator=g).half()
            out = dispatch.matmul_impl(a, w.t(), bias, "relu", torch.float32)
            want = torch.relu(a.double() @ w.double().t() + bias.double())
            assert torch.isfinite(out).all()
            assert (out.double() - want).abs().max().item() <= 1e-4 * max(1.0, want.abs().max().item())
        assert len(dispatch._matmul_plans) == 1
    finally:
        dispatch.forget_plans()


# ---------------------------------------------------------------- resources on sm_90a
@needs_nvrtc
@pytest.mark.parametrize("bn, splits, dtype, has_bias, activation", [
    (256, 2, "bfloat16", True, "silu"), (128, 2, "float16", True, "silu"), (256, 4, "float16", False, "none")])
def test_streamk_kernels_build_without_spills(bn, splits, dtype, has_bias, activation):
    from tilewright.codegen.cuda import print_cuda
    from tilewright.ops import kernels
    from tilewright.passes.pipeline import PassContext, run_pipeline
    from tilewright.target import Target
    from tilewright.toolchain import nvrtc

    threads = 256 if bn > 128 else 128
    first = kernels.linear_streamk(3000, 1000, dtype, dtype, False, False, has_bias, activation, 128, bn, 64,
                                   3 if bn > 128 else 4, threads, 132, splits)
    fix = kernels.streamk_epilogue(3000, 128, bn, splits, 132, dtype, dtype if has_bias else None, activation)
    for f, pc, want_threads in [(first, WS, threads + 128), (fix, {}, 128)]:
        k = run_pipeline(f, PassContext(Target.parse(SM90), {"optimize_level": 2, **pc}))
        assert k.num_threads == want_threads
        src = print_cuda(k)
        if f is first:
            assert "wgmma.mma_async" in src and "cp.async.bulk.tensor" in src
            # registers move to the consumers only when they are two warpgroups (one already has 255)
            assert ("setmaxnreg" in src) == (threads == 256)
        res = nvrtc.compile_cuda(src, "sm_90a", [k.name]).resources[k.name]
        assert res["spills"] == 0 and res["local_bytes"] == 0, (k.name, res)


# ---------------------------------------------------------------- on the GPU (skipped without an sm_90 one)
@pytest.mark.skipif(not _sm90_gpu(), reason="needs an sm_90 NVIDIA GPU with a CUDA build of PyTorch")
@pytest.mark.parametrize("M, N, K, dtype, bias, activation", [
    (2000, 3000, 1000, "float16", False, "none"), (2000, 3000, 1000, "bfloat16", True, "silu"),
    (128, 8192, 8192, "float16", False, "none"), (128, 8192, 8192, "bfloat16", True, "relu")])
def test_ops_matmul_streamk_candidates_on_gpu(M, N, K, dtype, bias, activation):
    import torch

    from tilewright.ops import dispatch

    tdt = getattr(torch, dtype)
    g = torch.Generator(device="cuda").manual_seed(M + N + K)
    a = torch.randn(M, K, device="cuda", generator=g).to(tdt)
    b = torch.randn(K, N, device="cuda", generator=g).to(tdt)
    bv = torch.randn(N, device="cuda", generator=g).to(tdt) if bias else None
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    cfgs = [c for c in gemm_configs.candidates(M, N, K, dtype, "sm_90", sms) if c.kind == "streamk"]
    assert cfgs
    r = a.double() @ b.double() + (bv.double() if bias else 0)
    want = {"none": r, "relu": r.clamp_min(0), "silu": r * torch.sigmoid(r)}[activation]
    for cfg in cfgs:
        out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float32)
        dispatch.matmul_impl(a, b, bv, activation, torch.float32, config=cfg, out=out)
        torch.cuda.synchronize()
        assert torch.isfinite(out).all(), cfg.short()
        err = ((out.double() - want).abs().max() / want.abs().max()).item()
        assert err < 2e-3, (cfg.short(), err)
