"""The ops.matmul configurations the heuristic took up in session 7, on the sm_90a emulator against
float64 with NaN-poisoned outputs: 128x64 tiles eight stages deep with two consumer warpgroups (128
rows over many columns), with and without C through a TMA store, with a ragged row count, bias and
activation."""

import numpy as np
import pytest

import tilewright
from tilewright.ops import gemm_configs, kernels

SM90 = "cuda -arch=sm_90a"


@pytest.mark.parametrize("stages, staged, trans_b", [(8, False, False), (8, True, True)])
def test_rows128_direct_128x64_tiles_on_the_emulator(stages, staged, trans_b):
    cfg = gemm_configs.GemmConfig("direct", 128, 64, 64, stages, 256, wgmma=True, ws=True, tma_store=staged)
    M, N, K = 100, 192, 640  # 100 of the tile's 128 rows; 10 K steps through an 8-deep ring
    f = kernels.linear(N, K, "bfloat16", "bfloat16", False, trans_b, True, "silu", 128, 64, 64, stages, 256, staged)
    k = tilewright.compile(f, target=SM90, execution_backend="emulator", pass_configs=cfg.pass_configs("sm_90"))
    assert k.num_threads == 384  # two consumer warpgroups and the producer's
    rng = np.random.default_rng(stages + staged)
    bf = tilewright.ir.dtype.to_numpy("bfloat16")
    a = rng.uniform(-1, 1, (M, K)).astype(bf)
    b = rng.uniform(-1, 1, (N, K) if trans_b else (K, N)).astype(bf)
    bias = rng.uniform(-1, 1, (N,)).astype(bf)
    c = np.full((M, N), np.nan, bf)
    k(a, b, bias, c)
    bm = b.astype(np.float64).T if trans_b else b.astype(np.float64)
    r = a.astype(np.float64) @ bm + bias.astype(np.float64)
    want = r / (1 + np.exp(-r))
    got = c.astype(np.float64)
    assert np.isfinite(got).all(), "some outputs were never written"
    np.testing.assert_allclose(got, want, rtol=8e-3, atol=2e-3)  # bf16 output: half an ulp is 3.9e-3


def test_heuristic_takes_the_measured_tiles():
    h = gemm_configs.heuristic
    assert h(128, 8192, 8192, "bfloat16", "sm_90", 132) == gemm_configs.GemmConfig(
        "direct", 128, 64, 64, 8, 128, wgmma=True, ws=True, tma_store=True, pdl="late")  # (TMA store since session
    # 9, one consumer warpgroup since session 10, launched with PDL since session 13)
    # sm_80 and AMD keep their tables: the new tiles are sm_90 measurements
    assert not h(128, 8192, 8192, "float16", "sm_80", 108).ws
