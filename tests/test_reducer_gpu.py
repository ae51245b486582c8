"""The kernels of test_reducer.py and test_reduce_nan.py on an NVIDIA GPU (issue 12): reducers,
NaN in max/min reductions and per-thread reductions, compiled for the GPU's own target, with the
same float64 references and poisoned outputs.  Skipped without a CUDA GPU."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or getattr(torch.version, "hip", None):
    pytest.skip("needs an NVIDIA GPU with a CUDA build of PyTorch", allow_module_level=True)

import test_reduce_nan as nan_cpu  # noqa: E402
import test_reducer as cpu  # noqa: E402
from zoo import poisoned, rand  # noqa: E402

import tilewright as tw  # noqa: E402


@pytest.fixture
def rng():
    return np.random.default_rng()


def run_on_gpu(func, args):
    """Arguments go over as tensors; results come back into the same arrays."""
    dev = [torch.from_numpy(a).cuda() for a in args]
    tw.compile(func, target="cuda")(*dev)
    torch.cuda.synchronize()
    for a, d in zip(args, dev):
        a[...] = d.cpu().numpy()


@pytest.mark.parametrize("name", sorted(cpu.CASES))
def test_reducer_on_gpu(name, rng):
    kernel, make, check = cpu.CASES[name]()
    args = make(rng)
    run_on_gpu(kernel, args)
    check(args)


@pytest.mark.parametrize(("op", "dtype", "nan_propagate", "clear"), nan_cpu.CASES)
def test_nan_in_max_min_reductions_on_gpu(op, dtype, nan_propagate, clear, rng):
    a = rand(rng, (8, 64), dtype)
    a[1, 7] = np.nan
    a[5, :] = np.nan
    b = poisoned((8,), dtype)
    run_on_gpu(nan_cpu.nan_reduce(op, 8, 64, dtype, 128, nan_propagate, clear), [a, b])
    want = nan_cpu.nan_reference(op, a, nan_propagate, clear)
    np.testing.assert_allclose(np.asarray(b, np.float64), want, rtol=1e-3, atol=1e-3)
    assert np.isnan(b[1]) == nan_propagate and np.isnan(b[5]) == (nan_propagate or clear)


def test_elementwise_max_min_drop_nan_on_gpu(rng):
    a, b = rand(rng, (128,)), rand(rng, (128,))
    a[::7] = np.nan
    b[::5] = np.nan
    c = poisoned((128,))
    run_on_gpu(nan_cpu.elementwise_max(128, "float32"), [a, b, c])
    x, y = a.astype(np.float64), b.astype(np.float64)
    np.testing.assert_allclose(c, np.fmax(x, y) - np.fmin(x, y), rtol=1e-6)


@pytest.mark.parametrize(("op", "dtype"), [("sum", "float16"), ("max", "float32"), ("min", "float16"),
                                           ("abssum", "float32")])
def test_per_thread_local_reduction_on_gpu(op, dtype, rng):
    a = rand(rng, (64, 32), dtype)
    b = poisoned((64, 4), dtype)
    run_on_gpu(nan_cpu.local_reduce(op, dtype, (8, 4), 0), [a, b])
    x = a.astype(np.float64).reshape(64, 8, 4)
    want = {"sum": x.sum(1), "max": x.max(1), "min": x.min(1), "abssum": np.abs(x).sum(1)}[op]
    tol = 2e-2 if dtype == "float16" else 1e-5
    np.testing.assert_allclose(b.astype(np.float64), want, rtol=tol, atol=tol)
