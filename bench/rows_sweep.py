"""The library's row kernels (``ops.softmax``, ``ops.rms_norm``, ``ops.layer_norm``: ops/kernels.py)
over (rows per block, threads) configurations, per dtype, in TB/s and as a fraction of a measured
copy — the data behind ``ops.dispatch._rows_config``.  ``python bench/rows_sweep.py`` on a GPU."""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import bench_ms, save  # noqa: E402

import tilewright  # noqa: E402
from tilewright.ops import kernels  # noqa: E402

M, N = 16384, 8192
CONFIGS = [(1, 256), (1, 512), (1, 1024), (2, 256), (2, 512), (4, 256), (4, 512)]
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def main() -> None:
    a = torch.randn(M * N, device="cuda", dtype=torch.float16)
    b = torch.empty_like(a)
    roof = 2 * a.numel() * 2 / 1e12 / (bench_ms(lambda: b.copy_(a)) * 1e-3)
    rows = [f"Copy roof (torch copy_ of {M * N} fp16): {roof:.2f} TB/s", "",
            "| kernel | dtype | rows/block | threads | TB/s | of copy | max rel err |", "|---|---|---|---|---|---|---|"]
    for name, tdt in DTYPES.items():
        x = torch.randn(M, N, device="cuda", dtype=tdt)
        w = torch.randn(N, device="cuda", dtype=tdt)
        bias = torch.randn(N, device="cuda", dtype=tdt)
        xd = x.double()
        refs = {"softmax": torch.softmax(xd, -1),
                "rms_norm": xd / torch.sqrt((xd * xd).mean(-1, keepdim=True) + 1e-6) * w.double(),
                "layer_norm": torch.nn.functional.layer_norm(xd, (N,), w.double(), bias.double(), 1e-5)}
        for op in ("softmax", "rms_norm", "layer_norm"):
            best = None
            for bm, thr in CONFIGS:
                try:
                    if op == "softmax":
                        k = tilewright.compile(kernels.softmax(N, name, bm, thr), target="cuda")
                        args = (x,)
                    elif op == "rms_norm":
                        k = tilewright.compile(kernels.rms_norm(N, name, 1e-6, bm, thr, False), target="cuda")
                        args = (x, x, w)
                    else:
                        k = tilewright.compile(kernels.layer_norm(N, name, 1e-5, bm, thr), target="cuda")
                        args = (x, w, bias)
                except Exception as e:  # noqa: BLE001 - a refused configuration is a row, not a stop
                    rows.append(f"| {op} | {name} | {bm} | {thr} | refused: {str(e).splitlines()[0][:80]} | | |")
                    continue
                out = torch.full_like(x, float("nan"))
                call = (lambda: k(*args, out, out)) if op == "rms_norm" else (lambda: k(*args, out))
                call()
                err = float(((out.double() - refs[op]).abs() / (1 + refs[op].abs())).max())
                tbs = 2 * x.numel() * x.element_size() / 1e12 / (bench_ms(call) * 1e-3)
                rows.append(f"| {op} | {name} | {bm} | {thr} | {tbs:.2f} | {tbs / roof:.0%} | {err:.1e} |")
                print(rows[-1], flush=True)
                if err < 3e-2 and (best is None or tbs > best[0]):
                    best = (tbs, bm, thr)
            if best:
                tbs, bm, thr = best
                rows.append(f"| **best {op}** | {name} | {bm} | {thr} | {tbs:.2f} | {tbs / roof:.0%} | |")
                print(rows[-1], flush=True)
    print("saved", save("rows-sweep", rows))


if __name__ == "__main__":
    main()
