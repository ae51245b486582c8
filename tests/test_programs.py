"""Assorted user programs on the interpreter and on the emulator (NVIDIA and AMD lowering)."""

from __future__ import annotations

import numpy as np
import programs
import pytest

import tilewright

TARGETS = ["interpret", "cuda -arch=sm_90a", "hip -arch=gfx942"]


def _run(f, args, target):
    args = [a.copy() if hasattr(a, "copy") else a for a in args]
    tilewright.compile(f, target=target, execution_backend=None if target == "interpret" else "emulator")(*args)
    return args


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.mark.parametrize("target", TARGETS)
def test_dynamic_k_gemm(rng, target):
    M, N, K = 100, 72, 70
    a, b = rng.standard_normal((M, K)).astype(np.float16), rng.standard_normal((K, N)).astype(np.float16)
    out = _run(programs.dyn_k_gemm(M, N), [a, b, np.full((M, N), np.nan, np.float32)], target)
    np.testing.assert_allclose(out[2], a.astype(np.float64) @ b.astype(np.float64), atol=1e-2)


@pytest.mark.parametrize("target", TARGETS)
def test_integer_floor_division(rng, target):
    x = rng.integers(-50, 50, 1000).astype(np.int32)
    out = _run(programs.int_ops(), [x, np.full(1000, -7, np.int32)], target)
    np.testing.assert_array_equal(out[1], x // 3 + x % 5 * 2)


@pytest.mark.parametrize("target", TARGETS)
def test_three_dimensional_parallel(rng, target):
    y = rng.standard_normal((4, 8, 32)).astype(np.float32)
    i, j, k = np.meshgrid(np.arange(4), np.arange(8), np.arange(32), indexing="ij")
    out = _run(programs.par3(), [y, np.full_like(y, np.nan)], target)
    np.testing.assert_allclose(out[1], y * (i + 1) + j - k, rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("target", TARGETS)
def test_per_thread_local_accumulation(rng, target):
    z = rng.standard_normal(1024).astype(np.float32)
    out = _run(programs.per_thread_local(), [z, np.full(128, np.nan, np.float32)], target)
    np.testing.assert_allclose(out[1], z.reshape(8, 128).astype(np.float64).sum(0), atol=1e-5)


@pytest.mark.parametrize("target", TARGETS)
def test_fragment_transpose(rng, target):
    w = rng.standard_normal((64, 32)).astype(np.float32)
    out = _run(programs.frag_transpose(), [w, np.full((32, 64), np.nan, np.float32)], target)
    np.testing.assert_array_equal(out[1], w.T)


@pytest.mark.parametrize("target", TARGETS)
def test_absmax_rows_and_atomic_max(rng, target):
    v = rng.standard_normal((16, 256)).astype(np.float32)
    out = _run(programs.absmax_rows(), [v, np.full(16, np.nan, np.float32), np.full(1, -1.0, np.float32)], target)
    np.testing.assert_allclose(out[1], np.abs(v).max(1))
    assert out[2][0] == np.abs(v).max()


@pytest.mark.parametrize("target", TARGETS)
def test_multiple_outputs_helper_and_augmented_var(rng, target):
    a = rng.standard_normal(256).astype(np.float32)
    kern = tilewright.compile(programs.multi_output(), out_idx=[1, 2], target=target,
                              execution_backend=None if target == "interpret" else "emulator")
    d = np.zeros(1, np.float32)
    b, c = kern(a, d)
    np.testing.assert_array_equal(b, np.maximum(a, 0))
    np.testing.assert_array_equal(c, a * 2)
    assert d[0] == 8.0  # 2 blocks x 4 increments, added once per block


@pytest.mark.parametrize("target", TARGETS)
def test_python_forms_on_kernel_values(rng, target):
    a = rng.standard_normal(300).astype(np.float32)
    i = np.arange(300) % 128
    ref = np.where(a > 0.1, a * 2, np.float32(0.1)) + np.where(i < 64, 1.0, -1.0)
    b = _run(programs.python_forms(), [a, np.full(300, -7.0, np.float32), 0.1], target)[1]
    np.testing.assert_allclose(np.delete(b, 5), np.delete(ref, 5), rtol=1e-6)
    assert b[5] == -7.0  # excluded by `not (g == 5)`: never written


@pytest.mark.parametrize("target", TARGETS + ["hip -arch=gfx1100"])
def test_gemm_on_shared_slices_and_clear_accum(rng, target):
    a = rng.standard_normal((64, 64)).astype(np.float16)
    b = rng.standard_normal((64, 64)).astype(np.float16)
    out = _run(programs.sliced_gemm(), [a, b, np.full((64, 64), np.nan, np.float32),
                                       np.full((64, 64), np.nan, np.float32)], target)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    np.testing.assert_allclose(out[2], a64 @ b64, atol=1e-4)
    np.testing.assert_allclose(out[3], a64[:, :16] @ b64[:16], atol=1e-4)


@pytest.mark.parametrize("target", TARGETS)
def test_swapped_loop_order_and_3d_fragment(rng, target):
    a = rng.standard_normal((32, 48)).astype(np.float32)
    out = _run(programs.swapped_loop_order(), [a, np.full((32, 48), np.nan, np.float16)], target)
    np.testing.assert_array_equal(out[1], (a * 3).astype(np.float16))
    x = rng.standard_normal((2, 16, 32)).astype(np.float32)
    out = _run(programs.fragment_3d(), [x, np.full((2, 16), np.nan, np.float32)], target)
    np.testing.assert_allclose(out[1], (x.astype(np.float64) ** 2).sum(2), rtol=1e-5)
