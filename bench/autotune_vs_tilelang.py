"""Autotuner wall time, tilewright against TileLang, on the same TileLang GEMM program and the same
32 configurations (issue 10's figure: tilewright <= 1/3 of TileLang's time).  Each tuner runs in a
fresh process with an empty HOME and empty kernel caches; the program text is the same, only the
imports differ (``tilelang`` or ``tilewright as tilelang``, and their ``language as T``).

    python bench/autotune_vs_tilelang.py [--size 4096] [--tilelang-path DIR]

TileLang is imported from ``--tilelang-path`` (a folder of installed wheels: TileLang is not a
dependency of tilewright); without it, only tilewright's row is measured.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

PROGRAM = r'''
import itertools, json, sys, time
t_start = time.time()
import torch
IMPORT_LINES

SIZE = int(sys.argv[1])


def get_configs():
    return [dict(block_M=bm, block_N=bn, block_K=bk, num_stages=s, threads=th)
            for bm, bn, bk, s, th in itertools.product((64, 128), (128, 256), (32, 64), (2, 3), (128, 256))]


@tilelang.autotune(configs=get_configs(), warmup=3, rep=20)
@tilelang.jit(out_idx=[-1])
def matmul(M, N, K, block_M=128, block_N=128, block_K=32, num_stages=2, threads=128, dtype="float16",
           accum_dtype="float"):
    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_K, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_shared)
                T.copy(B[k * block_K, bx * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            T.copy(C_local, C[by * block_M, bx * block_N])

    return main


t_import = time.time() - t_start
t0 = time.time()
kernel = matmul(SIZE, SIZE, SIZE)
wall = time.time() - t0
a = torch.randn(SIZE, SIZE, device="cuda", dtype=torch.float16)
b = torch.randn(SIZE, SIZE, device="cuda", dtype=torch.float16)
c = kernel(a, b)
err = float((c.double() - a.double() @ b.double()).abs().max() / (a.double() @ b.double()).abs().max())
cfg = getattr(kernel, "config", None)
lat = getattr(kernel, "latency", None)
print("RESULT " + json.dumps({"import_s": t_import, "tune_s": wall, "config": str(cfg), "latency_ms": lat,
                              "rel_err": err}))
'''


def run(label: str, import_line: str, size: int, extra_path: str | None) -> dict:
    with tempfile.TemporaryDirectory() as home:
        env = dict(os.environ, HOME=home, TILEWRIGHT_CACHE_DIR=os.path.join(home, "tw-cache"),
                   TILELANG_CACHE_DIR=os.path.join(home, "tl-cache"), TILELANG_TMP_DIR=os.path.join(home, "tl-tmp"))
        paths = [ROOT] + ([extra_path] if extra_path else []) + [env.get("PYTHONPATH", "")]
        env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        src = os.path.join(home, "prog.py")
        with open(src, "w") as f:
            f.write(PROGRAM.replace("IMPORT_LINES", import_line))
        proc = subprocess.run([sys.executable, src, str(size)], env=env, capture_output=True, text=True, timeout=900)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            out = json.loads(line[7:])
            out["label"] = label
            return out
    tail = (proc.stdout + proc.stderr)[-3000:]
    print(f"{label} failed (rc {proc.returncode}):\n{tail}", flush=True)
    return {"label": label, "tune_s": float("nan"), "error": tail.splitlines()[-1] if tail else "?"}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--size", type=int, default=4096)
    p.add_argument("--tilelang-path", default=None)
    a = p.parse_args()
    results = [run("tilewright", "import tilewright as tilelang\nimport tilewright.language as T", a.size, None)]
    if a.tilelang_path:
        results.append(run("TileLang", "import tilelang\nimport tilelang.language as T", a.size, a.tilelang_path))
    rows = [f"Autotuning 32 GEMM configurations of one TileLang program ({a.size}^3 fp16), fresh process and "
            "empty caches each (bench/autotune_vs_tilelang.py)", "",
            "| tuner | tuning wall s | import s | best config | best ms | rel err |", "|---|---|---|---|---|---|"]
    for r in results:
        nan = float("nan")
        rows.append(f"| {r['label']} | {r.get('tune_s', nan):.1f} | {r.get('import_s', nan):.2f} | "
                    f"{r.get('config', r.get('error', ''))} | {r.get('latency_ms')} | {r.get('rel_err', nan):.1e} |")
    if len(results) == 2 and results[1].get("tune_s", 0) > 0:
        rows += ["", f"tilewright / TileLang wall time: {results[0]['tune_s'] / results[1]['tune_s']:.2f} "
                 "(issue 10: <= 0.33)"]
    print("\n".join(rows))
    try:
        import torch

        if torch.cuda.is_available():
            from common import save

            print("saved", save("autotune-vs-tilelang", rows))
    except ImportError:
        pass


if __name__ == "__main__":
    main()
