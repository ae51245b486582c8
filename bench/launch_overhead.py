"""Host overhead of a kernel call: a tiny kernel called back to back, synchronized once, against an
equally tiny torch op.  ``python bench/launch_overhead.py`` on a GPU."""

from __future__ import annotations

import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import graph_us, save, vector_add  # noqa: E402

import tilewright  # noqa: E402
from tilewright.kernels import matmul  # noqa: E402

add = vector_add()
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
bias = torch.randn(1024, device="cuda", dtype=torch.float16)
q = torch.randn(4, 32, 1, 128, device="cuda", dtype=torch.float16)
kv = torch.randn(4, 8, 512, 128, device="cuda", dtype=torch.float16)
qp = torch.randn(1, 8, 128, 64, device="cuda", dtype=torch.float16)
kp = torch.randn(1, 8, 128, 64, device="cuda", dtype=torch.float16)
F = torch.nn.functional
x2_template = torch.empty(1, 1, 1, device="cuda", dtype=torch.float16).expand(2, 64, 1024)  # (alloc_template.py)
rows = ["| call | host time per call (us) | vs torch.add(out=) | vs torch.add |", "|---|---|---|---|"]
cases = [("torch.add(out=)", lambda: torch.add(a, b, out=c)),
         ("torch.add (output allocated: the issue's 1.5x reference for ops.*)", lambda: torch.add(a, b)),
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
         ("ops.rms_norm 64x1024 + residual", lambda: ops.rms_norm(x, w, residual=x)),
         ("ops.layer_norm 64x1024", lambda: ops.layer_norm(x, w, bias)),
         ("F.layer_norm 64x1024", lambda: F.layer_norm(x, (1024,), w, bias)),
         ("ops.attention prefill (causal, 8 heads, 128x64)", lambda: ops.attention(qp, kp, kp, causal=True)),
         ("SDPA prefill (causal, 8 heads, 128x64)", lambda: F.scaled_dot_product_attention(qp, kp, kp, is_causal=True)),
         ("ops.attention decode (GQA 32/8, kv 512)", lambda: ops.attention(q, kv, kv)),
         ("SDPA decode (GQA 32/8, kv 512)", lambda: F.scaled_dot_product_attention(q, kv, kv, enable_gqa=True)),
         # what the rows above are made of, for choosing what to cut next: one launch instead of
         # split-KV's two (the GPU time of the unsplit kernel counts too), the LSE returned (one
         # allocation more: without return_lse a repeat call writes it to a scratch buffer), and
         # the allocations themselves
         ("ops.attention decode, num_splits=1 (one launch)", lambda: ops.attention(q, kv, kv, num_splits=1)),
         ("ops.attention decode, return_lse=True", lambda: ops.attention(q, kv, kv, return_lse=True)),
         ("ops.attention prefill, return_lse=True", lambda: ops.attention(qp, kp, kp, causal=True, return_lse=True)),
         ("torch.empty_like 64x1024 fp16", lambda: torch.empty_like(x)),
         # rms_norm + residual's two outputs: two allocations, or one of both as views (unbind)?
         ("torch.empty_like 64x1024 fp16, twice", lambda: (torch.empty_like(x), torch.empty_like(x))),
         ("torch.empty_like 2x64x1024 fp16 template, .unbind(0)", lambda: torch.empty_like(x2_template).unbind(0)),
         ("torch.empty(64, 1024, dtype=, device=)", lambda: torch.empty(64, 1024, dtype=x.dtype, device=x.device)),
         ("torch.empty((64, 1024), dtype=, device=)", lambda: torch.empty((64, 1024), dtype=x.dtype, device=x.device))]


def host_us(fn, n=2000, rounds=3) -> float:
    """Back-to-back calls, one synchronize; the best of 3 rounds (the host is shared with nothing
    else here, but a round can still catch a page fault or a context switch)."""
    for _ in range(100):
        fn()
    best = float("inf")
    for _ in range(rounds):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
    return best


def gpu_us(fn) -> float:
    """GPU time per call alone (``common.graph_us``).  Where it comes near the host time above, the
    back-to-back loop waited for the GPU and its figure is GPU time, not host time.  NaN where the
    call cannot be captured in a CUDA graph."""
    try:
        return graph_us(fn)
    except Exception:  # noqa: BLE001 - a call that cannot be captured gets no GPU figure
        torch.cuda.synchronize()
        return float("nan")


rows[0] = rows[0].replace("| vs torch.add |", "| vs torch.add | GPU time per call, CUDA graph (us) |")
rows[1] += "---|"
times = []
for name, fn in cases:
    times.append(host_us(fn))
    base, alloc_base = times[0], times[1] if len(times) > 1 else times[0]  # torch.add(out=), torch.add
    rows.append(f"| {name} | {times[-1]:.1f} | {times[-1] / base:.2f}x | {times[-1] / alloc_base:.2f}x | "
                f"{gpu_us(fn):.1f} |")
    print(rows[-1], flush=True)
print("saved", save("launch-overhead", ["Back-to-back calls, one synchronize at the end (bench/launch_overhead.py)", ""]
                    + rows))
