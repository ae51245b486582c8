"""The profiler on the CPU backends (the CPU clock): statistics, quantiles, call counts and the
argument checks.  No figure is asserted beyond being a positive time."""

from __future__ import annotations

import numpy as np
import pytest

import tilewright
from tilewright.kernels import matmul
from tilewright.profiler.timing import Timing


def test_do_bench_on_the_interpreter():
    k = tilewright.compile(matmul(64, 64, 64, 32, 32, 32), target="interpret", out_idx=[-1])
    p = k.get_profiler()
    assert p.do_bench(warmup=1, rep=5) > 0
    q = p.do_bench(rep=5, quantiles=[0.2, 0.5, 0.8])
    assert len(q) == 3 and q[0] <= q[1] <= q[2]
    assert len(p.do_bench(rep=5, n_repeat=4, return_mode="all")) >= 3
    with pytest.raises(ValueError, match="return_mode"):
        p.do_bench(return_mode="average")
    with pytest.raises(ValueError, match="backend"):
        p.do_bench(backend="nsight")
    assert p.do_bench(rep=2, backend="cupti") > 0  # TileLang's kernel-time backend (a CUDA graph replay here)
    c = p.run_once()
    assert c.shape == (64, 64) and np.isfinite(c).all()


def test_timing_statistics():
    t = Timing([3.0, 1.0, 2.0, 4.0], "cpu", False)
    assert t.stat("min") == 1.0 and t.stat("max") == 4.0 and t.stat("median") == 2.5 and t.stat("mean") == 2.5
    assert t.quantiles([0.0, 1.0]) == [1.0, 4.0]


def test_module_level_do_bench_takes_tilelang_arguments():
    from tilewright.profiler import do_bench

    calls = []
    ms = do_bench(lambda: calls.append(1), warmup=1, rep=2, backend="cupti", return_mode="median")
    assert ms > 0 and calls
    assert len(do_bench(lambda: None, _n_warmup=1, _n_repeat=3, quantiles=[0.5, 0.9])) == 2
    with pytest.raises(ValueError, match="backend"):
        do_bench(lambda: None, backend="nsight")
