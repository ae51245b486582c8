"""Autotuning spread over GPUs: the same 16 GEMM configurations tuned with the timing on one GPU
(``TILEWRIGHT_AUTOTUNE_GPUS=1``) and on every visible GPU of the kind, each in a fresh process with
an empty tuning cache (kernels come from a shared, warmed disk cache, so both runs pay the same
compile cost, a lookup), wall time side by side.  Issue 13's figure: >= 1.5x on two GPUs.

    python bench/autotune_gpus.py            # on a machine with >= 2 GPUs
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

ONE_RUN = r"""
import itertools, json, sys, time
import torch
import tilewright as tilelang
from tilewright.kernels import matmul

M = N = K = 4096
configs = [dict(block_M=bm, block_N=bn, block_K=bk, num_stages=s)
           for bm, bn, bk, s in itertools.product((64, 128), (128, 256), (32, 64), (3, 4))]

@tilelang.autotune(configs=configs, warmup=25, rep=100, ref_prog=lambda a, b: (a.float() @ b.float()).half(),
                   rtol=2e-2, atol=2e-2)
@tilelang.jit(out_idx=[-1])
def gemm(M, N, K, block_M=128, block_N=128, block_K=32, num_stages=3):
    return matmul(M, N, K, block_M, block_N, block_K, num_stages=num_stages, threads=128)

t0 = time.perf_counter()
result = gemm.tune(M, N, K)
print(json.dumps({"seconds": time.perf_counter() - t0, "best": result.config, "ms": result.latency,
                  "gpus": sorted({r.get("gpu", 0) for r in result.rows if r["status"] == "timed"})}))
"""


def _run(gpus: int, cache_dir: str) -> dict:
    shutil.rmtree(os.path.join(cache_dir, "tuning"), ignore_errors=True)  # a tuning question never answered yet
    env = dict(os.environ, PYTHONPATH=ROOT, TILEWRIGHT_AUTOTUNE_GPUS=str(gpus), TILEWRIGHT_CACHE_DIR=cache_dir)
    out = subprocess.run([sys.executable, "-c", ONE_RUN], capture_output=True, text=True, env=env, timeout=900)
    if out.returncode:
        raise SystemExit(out.stdout + out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    import torch
    from common import save

    count = torch.cuda.device_count()
    if count < 2:
        print(f"needs two or more GPUs; this machine has {count}")
        return 2
    with tempfile.TemporaryDirectory() as cache:
        _run(1, cache)  # fills the kernel disk cache: the timed runs compare timing, not compiling
        runs = {gpus: _run(gpus, cache) for gpus in (1, 0)}
    one, many = runs[1], runs[0]
    rows = ["| GPUs timing | wall s | best config | best ms |", "|---|---|---|---|",
            f"| 1 | {one['seconds']:.1f} | {one['best']} | {one['ms']:.4f} |",
            f"| {len(many['gpus'])} ({many['gpus']}) | {many['seconds']:.1f} | {many['best']} | {many['ms']:.4f} |",
            "", f"speed-up of the tuning run: {one['seconds'] / many['seconds']:.2f}x (16 GEMM configs, 4096^3 fp16)"]
    print("\n".join(rows))
    print("saved", save("autotune-gpus", rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
