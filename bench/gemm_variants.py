"""GEMM code-generation variants side by side with cuBLAS, at one shape (4096^3 unless TW_SHAPE=M,N,K).

Each variant is a block configuration plus pass configs (``tw.min_blocks_per_sm``, ``tw.mma_order``,
``tw.disable_gemm_prefetch``, ``tw.disable_tma``) or a rasterization panel; the table gives TFLOP/s, the ratio to cuBLAS
measured in the same process, registers and spills.  ``python bench/gemm_variants.py [--save NAME]``
on a GPU; with ``--save`` the table goes to bench/results/.
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import bench_ms, save  # noqa: E402

import tilewright  # noqa: E402
from tilewright.kernels import matmul  # noqa: E402

# ((block_M, block_N, block_K, stages, threads), pass configs; "panel" is the rasterization panel)
VARIANTS = [
    ((128, 128, 32, 4, 128), {}),
    ((128, 128, 32, 4, 128), {"tw.disable_tma": True}),
    ((128, 128, 32, 3, 128), {"tw.min_blocks_per_sm": 3}),
    ((128, 128, 64, 3, 128), {}),
]


def main():
    m, n, k = (int(x) for x in os.environ.get("TW_SHAPE", "4096,4096,4096").split(","))
    rows = ["| dtype | config (bm,bn,bk,stages,threads) | options | TFLOP/s | ratio to cuBLAS | registers | spills |",
            "|---|---|---|---|---|---|---|"]
    for dtype in ("float16", "bfloat16"):
        td = getattr(torch, dtype)
        a = torch.randn(m, k, device="cuda", dtype=td)
        b = torch.randn(k, n, device="cuda", dtype=td)
        ref = a.float() @ b.float()
        ref_tflops = 2 * m * n * k / bench_ms(lambda: torch.matmul(a, b)) / 1e9
        rows.append(f"| {dtype} | cuBLAS (torch.matmul) | | {ref_tflops:.0f} | 1.00 | | |")
        for (bm, bn, bk, st, thr), opts in VARIANTS:
            pc = dict(opts)
            panel = pc.pop("panel", 8)
            kern = tilewright.compile(matmul(m, n, k, bm, bn, bk, dtype=dtype, num_stages=st, threads=thr,
                                             swizzle_panel=panel), target="cuda", pass_configs=pc)
            out = torch.full((m, n), float("nan"), device="cuda", dtype=td)  # poisoned
            kern(a, b, out)
            err = (out.float() - ref).abs().max().item() / ref.abs().max().item()
            if not err < 2e-2:
                rows.append(f"| {dtype} | {(bm, bn, bk, st, thr)} | {opts} | WRONG (rel err {err:.3g}) | | | |")
                continue
            tf = 2 * m * n * k / bench_ms(lambda: kern(a, b, out)) / 1e9
            res = kern.resource_usage
            rows.append(f"| {dtype} | {(bm, bn, bk, st, thr)} | {opts or ''} | {tf:.0f} | {tf / ref_tflops:.3f} | "
                        f"{res['registers']} | {res['spills']} |")
            print(rows[-1], flush=True)
    print("\n".join(rows))
    if "--save" in sys.argv:
        name = sys.argv[sys.argv.index("--save") + 1]
        print("saved", save(name, [f"GEMM {m}x{n}x{k}, variants (bench/gemm_variants.py)", ""] + rows))


if __name__ == "__main__":
    main()
