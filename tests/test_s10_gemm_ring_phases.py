"""A TMA ring nested in another loop (the persistent GEMM's tile loop without warp specialization:
``passes/pipeline_loops``) initialises its mbarriers once, at the kernel's top: PTX leaves
``mbarrier.init`` on a location holding a valid mbarrier undefined (PTX ISA, mbarrier.init: "invalidate
the mbarrier object using mbarrier.inval first"), which the per-round prologue used to do.  The phases
continue across rounds through a per-thread bit mask; with K steps that are not a multiple of the stage
count the slots complete odd numbers of phases per tile, so a wrong parity would hang or read stale
slots.  On the sm_90a emulator against float64 with NaN-poisoned outputs, fp16 / bf16, ragged M/N/K."""

import re

import numpy as np
import pytest

import tilewright
from tilewright.kernels.gemm import matmul_persistent

SM90 = "cuda -arch=sm_90a"
NO_WS = {"tw.enable_wgmma": True, "tw.warp_specialize": False}


def _persistent(M, N, K, bk, stages, dtype, blocks, staged=False, bias=False):
    f = matmul_persistent(M, N, K, 64, 64, bk, dtype=dtype, num_stages=stages, threads=128, num_blocks=blocks,
                          group_M=2, bias_dtype=dtype if bias else None, activation="relu" if bias else "none",
                          staged_epilogue=staged)
    return tilewright.compile(f, target=SM90, execution_backend="emulator", pass_configs=NO_WS)


@pytest.mark.parametrize("M, N, K, bk, stages, dtype, blocks, staged, bias", [
    (200, 264, 160, 32, 3, "float16", 3, False, False),   # 5 K steps, 3 slots: slot 2 has odd phase counts
    (136, 200, 232, 32, 4, "bfloat16", 2, True, True),    # 8 K steps (ragged K): even; TMA store; bias + ReLU
    (130, 192, 96, 32, 2, "float16", 4, False, True),     # 3 K steps, 2 slots: slot 0 odd
])
def test_nested_tma_ring_initialises_once_and_tracks_phases(M, N, K, bk, stages, dtype, blocks, staged, bias):
    k = _persistent(M, N, K, bk, stages, dtype, blocks, staged, bias)
    src = k.get_kernel_source()
    assert "cp.async.bulk.tensor" in src and "wgmma" in src
    inits = [m.start() for m in re.finditer(r"mbarrier\.init", src)]
    tile_loop = src.index("for (int r")
    assert len(inits) == stages and max(inits) < tile_loop, "the ring's mbarriers are set up once, before the tiles"
    assert "k_phases" in src
    nd = tilewright.ir.dtype.to_numpy(dtype)
    rng = np.random.default_rng(M + N + K)
    a = rng.uniform(-1, 1, (M, K)).astype(nd)
    b = rng.uniform(-1, 1, (K, N)).astype(nd)
    bv = rng.uniform(-1, 1, N).astype(nd) if bias else np.zeros(1, np.float32)
    c = np.full((M, N), np.nan, nd)
    k(a, b, bv, c)
    want = a.astype(np.float64) @ b.astype(np.float64)
    if bias:
        want = np.maximum(want + bv.astype(np.float64), 0)
    out = c.astype(np.float64)
    assert np.isfinite(out).all(), "some outputs were never written"
    tol = 2.0 ** (-8 if dtype == "bfloat16" else -11) * 1.01 * np.abs(want).max() + 1e-3
    assert np.abs(out - want).max() <= tol


def test_a_ring_outside_any_loop_keeps_its_prologue_set_up():
    """A plain (one block per tile) GEMM: the set-up stays where it was, before the K loop, and no phase mask."""
    from tilewright.kernels import matmul

    f = matmul(128, 128, 256, 64, 64, 32, num_stages=3)
    src = tilewright.compile(f, target=SM90, execution_backend="emulator", pass_configs=NO_WS).get_kernel_source()
    assert src.count("mbarrier.init") == 3 and "_phases" not in src
