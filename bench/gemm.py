"""GEMM benchmark: tilewright (mma.sync path) against torch.matmul (cuBLAS) on the anchor shapes,
fp16 and bf16, plus cold-compile and cache-hit times.  Run on a GPU: ``python bench/gemm.py``."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import bench_ms, save

import tilewright
from tilewright.kernels import matmul

SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (16, 8192, 8192), (128, 8192, 8192), (8192, 8192, 1024),
          (2000, 3000, 1000)]
# (block_M, block_N, block_K, stages, threads, pass configs); on sm_90 the pipelined copies go through
# TMA unless "tw.disable_tma" says otherwise
CONFIGS = [(128, 128, 32, 4, 128, {}), (128, 128, 32, 5, 128, {}), (128, 128, 32, 6, 128, {}),
           (128, 128, 32, 3, 128, {"tw.min_blocks_per_sm": 3}), (128, 128, 64, 3, 128, {}),
           (128, 256, 32, 3, 256, {}), (256, 128, 32, 3, 256, {}), (128, 128, 32, 4, 128, {"tw.disable_tma": True}),
           (128, 128, 64, 4, 128, {"tw.warp_specialize": True}), (128, 256, 64, 3, 256, {"tw.warp_specialize": True}),
           (128, 128, 64, 4, 128, {"tw.enable_wgmma": True}), (128, 256, 64, 3, 256, {"tw.enable_wgmma": True}),
           (128, 256, 64, 4, 256, {"tw.enable_wgmma": True, "tw.warp_specialize": True})]
SMALL_M_CONFIGS = [(16, 128, 128, 4, 128, {}), (64, 128, 64, 4, 128, {}), (128, 128, 64, 3, 256, {}),
                   (128, 128, 32, 4, 128, {}), (64, 128, 64, 4, 128, {"tw.enable_wgmma": True})]


def tflops(m, n, k, ms):
    return 2 * m * n * k / ms / 1e9


def main():
    quick = "--quick" in sys.argv
    shapes = SHAPES[:1] if quick else SHAPES
    rows = ["| M×N×K | dtype | cuBLAS TFLOP/s | tilewright TFLOP/s | ratio | config (bm,bn,bk,stages,threads) |",
            "|---|---|---|---|---|---|"]
    for dtype in ("float16", "bfloat16"):
        td = getattr(torch, dtype)
        for (m, n, k) in shapes:
            a = torch.randn(m, k, device="cuda", dtype=td)
            b = torch.randn(k, n, device="cuda", dtype=td)
            ms_ref = bench_ms(lambda: torch.matmul(a, b))
            ref = a.float() @ b.float()
            best = None
            cfgs = SMALL_M_CONFIGS if m <= 128 else CONFIGS
            for cfg in cfgs:
                bm, bn, bk, st, thr, pc = cfg
                try:
                    kern = tilewright.compile(matmul(m, n, k, bm, bn, bk, dtype=dtype, num_stages=st, threads=thr),
                                              target="cuda", pass_configs=pc)
                except tilewright.TilewrightError as e:
                    print(f"config {cfg} failed for {m}x{n}x{k}: {str(e).splitlines()[0]}", flush=True)
                    continue
                c = torch.full((m, n), float("nan"), device="cuda", dtype=td)  # poisoned: every element must be written
                kern(a, b, c)
                err = (c.float() - ref).abs().max().item() / (ref.abs().max().item() + 1e-6)
                if not err < 2e-2:
                    print(f"WRONG RESULT config {cfg} {m}x{n}x{k} {dtype}: rel err {err}", flush=True)
                    continue
                ms = bench_ms(lambda: kern(a, b, c))
                print(f"  {m}x{n}x{k} {dtype} {cfg}: {tflops(m, n, k, ms):.0f} TFLOP/s", flush=True)
                if best is None or ms < best[0]:
                    best = (ms, cfg[:5] + ((pc,) if pc else ()))
            if best is None:
                rows.append(f"| {m}×{n}×{k} | {dtype} | {tflops(m, n, k, ms_ref):.0f} | failed | - | - |")
                continue
            t_ref, t_tw = tflops(m, n, k, ms_ref), tflops(m, n, k, best[0])
            rows.append(f"| {m}×{n}×{k} | {dtype} | {t_ref:.0f} | {t_tw:.0f} | {t_tw / t_ref:.2f} | {best[1]} |")
            print(rows[-1], flush=True)
    rows += ["", compile_times()]
    print("\n".join(rows))
    print("saved", save("gemm", rows))


def compile_times() -> str:
    """Cold compile (fresh cache folder, fresh process) and repeated compile in one process."""
    code = r"""
import os, sys, time
sys.path.insert(0, {root!r})
t0 = time.perf_counter()
import tilewright
from tilewright.kernels import matmul
t1 = time.perf_counter()
k = tilewright.compile(matmul(4096, 4096, 4096, 128, 256, 32, threads=256), target="cuda")
t2 = time.perf_counter()
reps = []
for _ in range(20):
    s = time.perf_counter()
    tilewright.compile(matmul(4096, 4096, 4096, 128, 256, 32, threads=256), target="cuda")
    reps.append(time.perf_counter() - s)
reps.sort()
print(f"{{t1 - t0:.3f}} {{t2 - t1:.3f}} {{reps[len(reps) // 2] * 1e3:.3f}}")
"""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, TILEWRIGHT_CACHE_DIR=d)
        out_cold = subprocess.check_output([sys.executable, "-c", code.format(root=root)], env=env, text=True).split()
        out_warm = subprocess.check_output([sys.executable, "-c", code.format(root=root)], env=env, text=True).split()
    return (f"Compile (GEMM 128x256x32, 256 threads): import {out_cold[0]} s; cold compile {out_cold[1]} s; "
            f"disk-cache hit in a fresh process {out_warm[1]} s; repeated compile in one process "
            f"{out_cold[2]} ms (median of 20)")


if __name__ == "__main__":
    main()
