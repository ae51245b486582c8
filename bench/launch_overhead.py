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
# the library ops on small inputs (host time dominates), beside their torch counterparts
import tilewright.ops as ops  # noqa: E402

x = torch.randn(64, 1024, device="cuda", dtype=torch.float16)
w = torch.randn(1024, device="cuda", dtype=torch.float16)
q = torch.randn(4, 32, 1, 128, device="cuda", dtype=torch.float16)
kv = torch.randn(4, 8, 512, 128, device="cuda", dtype=torch.float16)
F = torch.nn.functional
rows = ["| call | host time per call (us) | vs torch.add(out=) |", "|---|---|---|"]
cases = [("torch.add(out=)", lambda: torch.add(a, b, out=c)),
         ("tilewright add (all args)", lambda: k(a, b, c)),
         ("tilewright add (out_idx alloc)", lambda: k2(a, b)),
         (f"tilewright 256^3 GEMM ({'TMA' if kg._tma else 'cp.async'})", lambda: kg(ga, gb, gc)),
         ("torch.matmul(out=) 256^3", lambda: torch.matmul(ga, gb, out=gc)),
         ("ops.matmul 256^3", lambda: ops.matmul(ga, gb)),
         ("torch.matmul 256^3", lambda: torch.matmul(ga, gb)),
         ("ops.softmax 64x1024", lambda: ops.softmax(x)),
         ("torch.softmax 64x1024", lambda: torch.softmax(x, -1)),
         ("ops.rms_norm 64x1024", lambda: ops.rms_norm(x, w)),
         ("F.rms_norm 64x1024", lambda: F.rms_norm(x, (1024,), w)),
         ("ops.attention decode (GQA 32/8, kv 512)", lambda: ops.attention(q, kv, kv)),
         ("SDPA decode (GQA 32/8, kv 512)", lambda: F.scaled_dot_product_attention(q, kv, kv, enable_gqa=True))]
base = None
for name, fn in cases:
    for _ in range(100):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(2000):
        fn()
    torch.cuda.synchronize()
    us = (time.perf_counter() - t0) / 2000 * 1e6
    base = base or us
    rows.append(f"| {name} | {us:.1f} | {us / base:.2f}x |")
    print(rows[-1], flush=True)
print("saved", save("launch-overhead", ["Back-to-back calls, one synchronize at the end (bench/launch_overhead.py)", ""]
                    + rows))
