"""Host overhead of a kernel call: a tiny kernel called back to back, synchronized once, against an
equally tiny torch op.  ``python bench/launch_overhead.py`` on a GPU."""

from __future__ import annotations

import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import save  # noqa: E402

import tilewright  # noqa: E402
import tilewright.language as T  # noqa: E402
from tilewright.kernels import matmul  # noqa: E402


@T.prim_func
def add(A: T.Tensor((1024,), "float32"), B: T.Tensor((1024,), "float32"), C: T.Tensor((1024,), "float32")):
    with T.Kernel(1, threads=128):
        for i in T.Parallel(1024):
            C[i] = A[i] + B[i]


a, b = torch.randn(1024, device="cuda"), torch.randn(1024, device="cuda")
c = torch.empty_like(a)
k = tilewright.compile(add, target="cuda")
k2 = tilewright.compile(add, out_idx=[-1], target="cuda")
# a small GEMM whose copies go through TMA on sm_90: its descriptors come from the per-launch cache
ga, gb = torch.randn(256, 256, device="cuda", dtype=torch.float16), torch.randn(256, 256, device="cuda",
                                                                               dtype=torch.float16)
gc = torch.empty(256, 256, device="cuda", dtype=torch.float16)
kg = tilewright.compile(matmul(256, 256, 256, 128, 128, 32, num_stages=3), target="cuda")
rows = ["| call | host time per call (us) |", "|---|---|"]
for name, fn in [("tilewright add (all args)", lambda: k(a, b, c)),
                 ("tilewright add (out_idx alloc)", lambda: k2(a, b)),
                 (f"tilewright 256^3 GEMM ({'TMA' if kg._tma else 'cp.async'})", lambda: kg(ga, gb, gc)),
                 ("torch.add(out=)", lambda: torch.add(a, b, out=c)),
                 ("torch.matmul(out=) 256^3", lambda: torch.matmul(ga, gb, out=gc))]:
    for _ in range(100):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(2000):
        fn()
    torch.cuda.synchronize()
    rows.append(f"| {name} | {(time.perf_counter() - t0) / 2000 * 1e6:.1f} |")
    print(rows[-1], flush=True)
print("saved", save("launch-overhead", ["Back-to-back calls, one synchronize at the end (bench/launch_overhead.py)", ""]
                    + rows))
