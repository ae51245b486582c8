"""One ``ops.matmul`` call and one ``torch.matmul`` (cuBLAS) call on the same operands, bracketed by the
CUDA profiler start/stop so Nsight Compute sees only them (warm-up and compilation excluded):

    TW_SHAPE=128,8192,8192 ncu --profile-from-start off --clock-control none --section SpeedOfLight \
        --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
        python bench/profile_ops_matmul.py

A diagnosis aid for the shapes where ops.matmul trails cuBLAS (bench/gemm.py --weak): DRAM and L2
throughput, stall reasons and occupancy of every kernel each side launches.
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tilewright import ops  # noqa: E402

M, N, K = (int(x) for x in os.environ.get("TW_SHAPE", "128,8192,8192").split(","))
dtype = getattr(torch, os.environ.get("TW_DTYPE", "float16"))
a = torch.randn(M, K, device="cuda", dtype=dtype)
b = torch.randn(K, N, device="cuda", dtype=dtype)
for _ in range(3):  # compile, plan and warm both sides
    ops.matmul(a, b)
    torch.matmul(a, b)
torch.cuda.synchronize()
torch.cuda.profiler.start()
ops.matmul(a, b)
torch.cuda.synchronize()
torch.matmul(a, b)
torch.cuda.synchronize()
torch.cuda.profiler.stop()
err = ((ops.matmul(a, b).double() - a.double() @ b.double()).abs().max() / (a.double() @ b.double()).abs().max())
print(f"ok {M}x{N}x{K} {dtype} max relative error {err.item():.2e}")
