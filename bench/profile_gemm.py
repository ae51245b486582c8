"""Run one GEMM launch (4096^3, or TW_SHAPE="M,N,K") for Nsight Compute:
``ncu --clock-control none --section WarpStateStats
--section ComputeWorkloadAnalysis -k regex:gemm -c 1 python bench/profile_gemm.py`` (diagnosis aid)."""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tilewright  # noqa: E402
from tilewright.kernels import matmul  # noqa: E402

bm, bn, bk, st, thr = (int(x) for x in (sys.argv[1:6] if len(sys.argv) > 5 else (128, 128, 32, 4, 128)))
M, N, K = (int(x) for x in os.environ.get("TW_SHAPE", "4096,4096,4096").split(","))
a = torch.randn(M, K, device="cuda", dtype=torch.float16)
b = torch.randn(K, N, device="cuda", dtype=torch.float16)
k = tilewright.compile(matmul(M, N, K, bm, bn, bk, num_stages=st, threads=thr), out_idx=[-1], target="cuda")
c = k(a, b)
torch.cuda.synchronize()
print("ok", k.resource_usage)
