"""Host overhead of a kernel call: a tiny kernel called back to back, synchronized once, against an
equally tiny torch op.  ``python bench/launch_overhead.py`` on a GPU."""

from __future__ import annotations

import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tilewright  # noqa: E402
import tilewright.language as T  # noqa: E402


@T.prim_func
def add(A: T.Tensor((1024,), "float32"), B: T.Tensor((1024,), "float32"), C: T.Tensor((1024,), "float32")):
    with T.Kernel(1, threads=128):
        for i in T.Parallel(1024):
            C[i] = A[i] + B[i]


a, b = torch.randn(1024, device="cuda"), torch.randn(1024, device="cuda")
c = torch.empty_like(a)
k = tilewright.compile(add, target="cuda")
k2 = tilewright.compile(add, out_idx=[-1], target="cuda")
for name, fn in [("tilewright (all args)", lambda: k(a, b, c)), ("tilewright (out_idx alloc)", lambda: k2(a, b)),
                 ("torch.add(out=)", lambda: torch.add(a, b, out=c))]:
    for _ in range(100):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(2000):
        fn()
    torch.cuda.synchronize()
    print(f"{name}: {(time.perf_counter() - t0) / 2000 * 1e6:.1f} us per call")
