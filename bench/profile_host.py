"""Where the host time of a call goes: cProfile over 1000 back-to-back calls of a compiled kernel and of
the library ops (small inputs, so the host path dominates), the top functions by own time.

    python bench/profile_host.py            # on a GPU; prints one table per call
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tilewright  # noqa: E402
import tilewright.language as T  # noqa: E402
import tilewright.ops as ops  # noqa: E402


@T.prim_func
def add(A: T.Tensor((1024,), "float32"), B: T.Tensor((1024,), "float32"), C: T.Tensor((1024,), "float32")):
    with T.Kernel(1, threads=128):
        for i in T.Parallel(1024):
            C[i] = A[i] + B[i]


def main() -> None:
    a, b = torch.randn(1024, device="cuda"), torch.randn(1024, device="cuda")
    c = torch.empty_like(a)
    k = tilewright.compile(add, target="cuda")
    q = torch.randn(4, 32, 1, 128, device="cuda", dtype=torch.float16)
    kv = torch.randn(4, 8, 512, 128, device="cuda", dtype=torch.float16)
    x = torch.randn(64, 1024, device="cuda", dtype=torch.float16)
    w = torch.randn(1024, device="cuda", dtype=torch.float16)
    g = torch.randn(256, 256, device="cuda", dtype=torch.float16)
    calls = [("kernel call", lambda: k(a, b, c)), ("ops.attention decode", lambda: ops.attention(q, kv, kv)),
             ("ops.softmax", lambda: ops.softmax(x)), ("ops.rms_norm", lambda: ops.rms_norm(x, w)),
             ("ops.matmul 256^3", lambda: ops.matmul(g, g))]
    for name, fn in calls:
        for _ in range(100):
            fn()
        torch.cuda.synchronize()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(1000):
            fn()
        prof.disable()
        torch.cuda.synchronize()
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(18)
        print(f"===== {name} (1000 calls; times in s, so ms per call = s)")
        print("\n".join(line[:160] for line in text.getvalue().splitlines()[:40]), flush=True)


if __name__ == "__main__":
    main()
