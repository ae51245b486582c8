"""GEMM 4096^3 fp16: the best 4-warp configuration against occupancy variants (three 128-thread
blocks per SM, registers capped).  ``python bench/gemm_occupancy.py`` on a GPU."""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import bench_ms  # noqa: E402

import tilewright  # noqa: E402
from tilewright.kernels import matmul  # noqa: E402

m = n = k = 4096
a = torch.randn(m, k, device="cuda", dtype=torch.float16)
b = torch.randn(k, n, device="cuda", dtype=torch.float16)
ref = a.float() @ b.float()
print(f"cuBLAS: {2 * m * n * k / bench_ms(lambda: torch.matmul(a, b)) / 1e9:.0f} TFLOP/s")
VARIANTS = [((128, 128, 32, 4, 128), {}), ((128, 128, 32, 4, 128), {"tw.mma_order": "serpentine"}),
            ((128, 128, 32, 4, 128), {"tw.mma_order": "n_outer"}), ((128, 128, 32, 4, 128), {"swizzle": 0}),
            ((128, 128, 32, 4, 128), {"swizzle": 4}), ((128, 128, 32, 4, 128), {"swizzle": 16})]
if "--occupancy" in sys.argv:
    VARIANTS += [((128, 128, 32, 3, 128), {"tw.min_blocks_per_sm": 3}),
                 ((128, 128, 32, 3, 128), {"tw.min_blocks_per_sm": 3, "tw.disable_gemm_prefetch": True})]
for (bm, bn, bk, st, thr), pc in VARIANTS:
    pc = dict(pc)
    panel = pc.pop("swizzle", 8)
    kern = tilewright.compile(matmul(m, n, k, bm, bn, bk, num_stages=st, threads=thr, swizzle_panel=panel),
                              out_idx=[-1], target="cuda", pass_configs=pc)
    err = (kern(a, b).float() - ref).abs().max().item() / ref.abs().max().item()
    ms = bench_ms(lambda: kern(a, b))
    print(f"{(bm, bn, bk, st, thr)} {pc} panel={panel}: {2 * m * n * k / ms / 1e9:.0f} TFLOP/s, rel err {err:.2g}, "
          f"{kern.resource_usage}")
