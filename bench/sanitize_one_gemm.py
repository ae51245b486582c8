"""One GEMM configuration, run once and checked, for compute-sanitizer (issue 8: "one config checked
clean under memcheck and racecheck"): the library GEMM at the H200 benchmark's best configuration
(128x256x64 tiles, 4 stages, 256 threads: wgmma consumers and a TMA producer warpgroup on sm_90a),
on a 1000x1504x712 problem: M and N end in partial tiles and K in a partial K step, while every
row stride stays a multiple of 16 bytes (TMA's rule), so the warp-specialized TMA path runs.

    compute-sanitizer --tool memcheck  python bench/sanitize_one_gemm.py
    compute-sanitizer --tool racecheck python bench/sanitize_one_gemm.py
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import output_rounding  # noqa: E402

import tilewright  # noqa: E402
from tilewright.kernels import matmul  # noqa: E402

CONFIG = dict(block_M=128, block_N=256, block_K=64, num_stages=4, threads=256)


def main() -> int:
    M, N, K = 1000, 1504, 712
    for dtype in (torch.float16, torch.bfloat16):
        name = str(dtype).replace("torch.", "")
        kernel = tilewright.compile(matmul(M, N, K, dtype=name, **CONFIG))
        g = torch.Generator(device="cuda").manual_seed(7)
        a = torch.randn(M, K, device="cuda", generator=g).to(dtype)
        b = torch.randn(K, N, device="cuda", generator=g).to(dtype)
        c = torch.full((M, N), float("nan"), device="cuda", dtype=dtype)  # poisoned: an unwritten element fails
        kernel(a, b, c)
        torch.cuda.synchronize()
        ref = a.double() @ b.double()
        err = ((c.double() - ref).abs().max() / ref.abs().max()).item()
        plan = "wgmma" if "wgmma.mma_async" in kernel.get_kernel_source() else "mma.sync"
        ws = "warp-specialized" if kernel.num_threads > CONFIG["threads"] else "not warp-specialized"
        print(f"{name} {M}x{N}x{K} {CONFIG}: {plan}, {ws}, max relative error {err:.2e}")
        if not err < 2e-3 + output_rounding(dtype):
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
