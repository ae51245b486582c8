"""A paired check of one dispatch bound on the H200: ops.attention at 4x16x4096x128 causal (32 key blocks of
128), bf16 and fp16, on the grid kernel (``attention_dispatch.PERSISTENT_MAX_KEY_BLOCKS_CAUSAL`` 16) and on the
persistent one (32), cuDNN in the same run; three rounds, the two kernels alternated within each, so that the
GPU's clock drift over the run hits both alike.  Each output is checked against SDPA's float32 math backend
before it is timed.  ``python bench/attention_causal4k.py`` on the GPU; prints TFLOP/s per round."""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from attention import sdpa  # noqa: E402
from common import bench_ms  # noqa: E402

import tilewright.ops as ops  # noqa: E402
from tilewright.ops import attention_dispatch as ad  # noqa: E402

BOUNDS = (("grid(16)", 16), ("pers(32)", 32))


def main() -> int:
    rows = []
    for dt in (torch.bfloat16, torch.float16):
        g = torch.Generator(device="cuda").manual_seed(4)
        q, k, v = (torch.randn(4, 16, 4096, 128, device="cuda", generator=g, dtype=dt) for _ in range(3))
        ref = sdpa(q.float(), k.float(), v.float(), True, "math")
        flops = 4 * 4 * 16 * 4096 * 4096 * 128 / 2
        res = {"cudnn": []} | {name: [] for name, _ in BOUNDS}
        for _round in range(3):
            res["cudnn"].append(flops / bench_ms(lambda: sdpa(q, k, v, True, "cudnn")) / 1e9)
            for name, bound in BOUNDS:
                ad.PERSISTENT_MAX_KEY_BLOCKS_CAUSAL = bound
                ad.forget_plans()
                out = ops.attention(q, k, v, causal=True)
                err = ((out.float() - ref).abs().max() / ref.abs().max()).item()
                assert err < 2e-2, (name, err)
                res[name].append(flops / bench_ms(lambda: ops.attention(q, k, v, causal=True)) / 1e9)
        cells = [f"{n} " + "/".join(f"{x:.0f}" for x in xs) for n, xs in res.items()]
        rows.append(f"| {str(dt)[6:]} | " + " | ".join(cells) + " |")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
