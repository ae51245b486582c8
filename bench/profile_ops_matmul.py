"""One ``ops.matmul`` call and one ``torch.matmul`` (cuBLAS) call on the same operands, bracketed by the
CUDA profiler start/stop so Nsight Compute sees only them (warm-up and compilation excluded):

    TW_SHAPE=128,8192,8192 ncu --profile-from-start off --clock-control none --section SpeedOfLight \
        --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
        python bench/profile_ops_matmul.py

A diagnosis aid for the shapes where ops.matmul trails cuBLAS (bench/gemm.py --weak): DRAM and L2
throughput, stall reasons and occupancy of every kernel each side launches.  ``TW_CONFIG`` profiles
one configuration instead of the one ops.matmul would choose, by the name bench/gemm.py prints for
it (``GemmConfig.short()``), e.g. ``TW_CONFIG="direct 128x64x64 s8 t256 wgmma ws c2x1"``.
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tilewright import ops  # noqa: E402
from tilewright.ops import dispatch  # noqa: E402
from tilewright.ops.gemm_configs import GemmConfig  # noqa: E402

M, N, K = (int(x) for x in os.environ.get("TW_SHAPE", "128,8192,8192").split(","))
dtype = getattr(torch, os.environ.get("TW_DTYPE", "float16"))
config = GemmConfig.parse(os.environ["TW_CONFIG"]) if os.environ.get("TW_CONFIG") else None
a = torch.randn(M, K, device="cuda", dtype=dtype)
b = torch.randn(K, N, device="cuda", dtype=dtype)


def ours():
    if config is None:
        return ops.matmul(a, b)
    return dispatch.matmul_impl(a, b, None, "none", None, config=config)


for _ in range(3):  # compile, plan and warm both sides
    ours()
    torch.matmul(a, b)
torch.cuda.synchronize()
torch.cuda.profiler.start()
ours()
torch.cuda.synchronize()
torch.matmul(a, b)
torch.cuda.synchronize()
torch.cuda.profiler.stop()
err = ((ours().double() - a.double() @ b.double()).abs().max() / (a.double() @ b.double()).abs().max())
name = config.short() if config is not None else dispatch.matmul_config(M, N, K, a).short()
print(f"ok {M}x{N}x{K} {dtype} [{name}] max relative error {err.item():.2e}")
