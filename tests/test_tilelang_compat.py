"""A TileLang program runs unchanged but for its imports: on the interpreter, and lowered for
NVIDIA and AMD targets on the emulator."""

from __future__ import annotations

import numpy as np

import tilewright
from tilewright.interp.emulator import run_thread_kernel


def test_quickstart_runs_in_the_interpreter():
    from tilelang_quickstart import matmul

    kernel = matmul(128, 128, 64, 64, 64, 32)
    profiler = kernel.get_profiler(tensor_supply_type=tilewright.TensorSupplyType.Normal)
    profiler.assert_allclose(lambda a, b: a.astype(np.float64) @ b.astype(np.float64), rtol=1e-2, atol=1e-2)


def test_quickstart_lowered_for_gpus_on_the_emulator():
    from tilelang_quickstart import matmul

    func = matmul.get_tir(128, 128, 64, 64, 64, 32)
    rng = np.random.default_rng(7)
    a = rng.standard_normal((128, 64)).astype(np.float16)
    b = rng.standard_normal((64, 128)).astype(np.float16)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    for target in ("cuda -arch=sm_80", "hip -arch=gfx942", "hip -arch=gfx1100"):
        c = np.full((128, 128), np.nan, np.float16)
        run_thread_kernel(tilewright.lower(func, target=target), [a, b, c], check_races=True)
        np.testing.assert_allclose(c.astype(np.float64), ref, atol=0.06, err_msg=target)


def test_pass_config_keys_are_accepted():
    from tilelang_quickstart import matmul

    func = matmul.get_tir(64, 64, 64, 64, 64, 32)
    k = tilewright.compile(func, out_idx=[-1], target="interpret",
                           pass_configs={tilewright.PassConfigKey.TL_DISABLE_TMA_LOWER: True})
    assert k is not None
