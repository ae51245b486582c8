"""Where a decode attention call's time goes: host time per call (back-to-back calls, one
synchronize) against GPU time per call (the same calls captured in a CUDA graph and replayed), for
tilewright.ops.attention and SDPA, at a few KV lengths, then a kernel call and the other ops at
small sizes.  Host-bound when host > GPU.

    python bench/decode_timeline.py          # on a GPU
"""

from __future__ import annotations

import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import graph_us, save, vector_add  # noqa: E402

import tilewright.ops as ops  # noqa: E402

F = torch.nn.functional


def host_us(fn, n=500) -> float:
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n * 1e6


def main() -> None:
    rows = ["| call | KV | host us/call | GPU us/call (graph) | bound |", "|---|---|---|---|---|"]
    for kv_len in (512, 4096, 16384):
        q = torch.randn(4, 32, 1, 128, device="cuda", dtype=torch.float16)
        kv = torch.randn(4, 8, kv_len, 128, device="cuda", dtype=torch.float16)
        ref = F.scaled_dot_product_attention(q.double(), kv.double().repeat_interleave(4, 1),
                                             kv.double().repeat_interleave(4, 1))
        out = ops.attention(q, kv, kv)
        err = float((out.double() - ref).abs().max() / ref.abs().max())
        for name, fn in (("ops.attention", lambda: ops.attention(q, kv, kv)),
                         ("SDPA", lambda: F.scaled_dot_product_attention(q, kv, kv, enable_gqa=True))):
            h = host_us(fn)
            try:
                g = graph_us(fn)
            except Exception as e:  # noqa: BLE001 - a call that cannot be captured is a row
                g = float("nan")
                print(f"  {name}: graph capture failed: {type(e).__name__}: {e}", flush=True)
            rows.append(f"| {name} | {kv_len} | {h:.1f} | {g:.1f} | {'host' if h > 1.2 * g else 'GPU'} |")
            print(rows[-1], f"(err {err:.1e})" if name == "ops.attention" else "", flush=True)
    rows += _other_ops()
    print("saved", save("decode-timeline", rows))


def _other_ops() -> list:
    """The same host/GPU split for a kernel call and the other ops at small sizes (host-bound there)."""
    import tilewright

    add = vector_add()
    a, b = torch.randn(1024, device="cuda"), torch.randn(1024, device="cuda")
    c = torch.empty_like(a)
    k = tilewright.compile(add, target="cuda")
    x = torch.randn(64, 1024, device="cuda", dtype=torch.float16)
    w, bias = (torch.randn(1024, device="cuda", dtype=torch.float16) for _ in range(2))
    g = torch.randn(256, 256, device="cuda", dtype=torch.float16)
    qp = torch.randn(1, 8, 128, 64, device="cuda", dtype=torch.float16)
    calls = [("kernel call (add, all args)", lambda: k(a, b, c)), ("torch.add", lambda: torch.add(a, b)),
             ("ops.softmax 64x1024", lambda: ops.softmax(x)), ("ops.rms_norm 64x1024", lambda: ops.rms_norm(x, w)),
             ("ops.layer_norm 64x1024", lambda: ops.layer_norm(x, w, bias)),
             ("ops.matmul 256^3", lambda: ops.matmul(g, g)),
             ("ops.attention prefill causal 8x128x64", lambda: ops.attention(qp, qp, qp, causal=True))]
    rows = []
    for name, fn in calls:
        h = host_us(fn)
        try:
            gpu = graph_us(fn)
        except Exception as e:  # noqa: BLE001 - a call that cannot be captured is a row
            gpu = float("nan")
            print(f"  {name}: graph capture failed: {type(e).__name__}: {e}", flush=True)
        rows.append(f"| {name} | - | {h:.1f} | {gpu:.1f} | {'host' if h > 1.2 * gpu else 'GPU'} |")
        print(rows[-1], flush=True)
    return rows


if __name__ == "__main__":
    main()
