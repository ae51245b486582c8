"""One ``ops.attention`` call and one cuDNN SDPA call on the same tensors, bracketed by the CUDA profiler
start/stop so Nsight Compute sees only them (warm-up and compilation excluded):

    TW_SHAPE=16,16,1024,128 TW_CAUSAL=0 ncu --profile-from-start off --clock-control none \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
        python bench/profile_ops_attention.py

A diagnosis aid for the shapes where ops.attention trails cuDNN (bench/attention.py): throughput, stall
reasons, registers and occupancy of the kernels each side launches.  ``TW_DISPATCH="NAME=value;..."`` sets
``attention_dispatch`` knobs first (values as Python literals), e.g. ``TW_DISPATCH="HOPPER_D64_STAGE_OUT=False"``.
"""

from __future__ import annotations

import ast
import os
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tilewright import ops  # noqa: E402
from tilewright.ops import attention_dispatch  # noqa: E402

for setting in filter(None, os.environ.get("TW_DISPATCH", "").split(";")):
    knob, value = setting.split("=", 1)
    if not hasattr(attention_dispatch, knob.strip()):
        raise SystemExit(f"TW_DISPATCH: attention_dispatch has no knob {knob.strip()!r}")
    setattr(attention_dispatch, knob.strip(), ast.literal_eval(value.strip()))

B, H, S, D = (int(x) for x in os.environ.get("TW_SHAPE", "16,16,1024,128").split(","))
causal = os.environ.get("TW_CAUSAL", "0") == "1"
dtype = getattr(torch, os.environ.get("TW_DTYPE", "float16"))
q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=dtype) for _ in range(3))


def cudnn():
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)


for _ in range(3):  # compile, plan and warm both sides
    ops.attention(q, k, v, causal=causal)
    cudnn()
torch.cuda.synchronize()
torch.cuda.profiler.start()
ops.attention(q, k, v, causal=causal)
torch.cuda.synchronize()
cudnn()
torch.cuda.synchronize()
torch.cuda.profiler.stop()
err = ((ops.attention(q, k, v, causal=causal).double() - cudnn().double()).abs().max()).item()
print(f"ok {B}x{H}x{S}x{D} causal={causal} {dtype} max abs difference to cuDNN {err:.2e}")
