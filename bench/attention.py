"""Flash-attention forward benchmark: tilewright (mma.sync path) against torch SDPA (flash and cuDNN
backends) on the anchor shapes.  Run on a GPU: ``python bench/attention.py``."""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import bench_ms, save

import tilewright
from tilewright.kernels import flash_attention

SHAPES = [(16, 16, 1024, 128, False), (16, 16, 1024, 128, True), (4, 16, 4096, 128, False),
          (4, 16, 4096, 128, True), (4, 16, 4096, 64, False), (4, 16, 4096, 64, True)]
CONFIGS = [(128, 64, 2, 256), (64, 64, 2, 128), (128, 128, 2, 256)]


def sdpa(q, k, v, causal, backend):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    be = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[backend]
    with sdpa_kernel(be):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)


def main():
    rows = ["| B,H,S,D,causal | SDPA flash TFLOP/s | SDPA cuDNN TFLOP/s | tilewright TFLOP/s | vs cuDNN | config |",
            "|---|---|---|---|---|---|"]
    for (b, h, s, d, causal) in SHAPES:
        flops = 4 * b * h * s * s * d / (2 if causal else 1)
        q, k, v = [torch.randn(b, s, h, d, device="cuda", dtype=torch.float16) for _ in range(3)]
        qt, kt, vt = [x.transpose(1, 2).contiguous() for x in (q, k, v)]
        res = {}
        for be in ("flash", "cudnn"):
            try:
                res[be] = flops / bench_ms(lambda: sdpa(qt, kt, vt, causal, be)) / 1e9
            except Exception:  # noqa: BLE001 - a backend may be unavailable
                res[be] = float("nan")
        ref = sdpa(qt, kt, vt, causal, "flash").transpose(1, 2)
        best = None
        for (bm, bn, st, thr) in CONFIGS:
            try:
                kern = tilewright.compile(flash_attention(b, h, s, d, causal, bm, bn, st, thr), target="cuda")
            except tilewright.TilewrightError as e:
                print(f"config {(bm, bn, st, thr)} failed: {str(e).splitlines()[0]}", flush=True)
                continue
            o = torch.full_like(q, float("nan"))  # poisoned: every element must be written
            kern(q, k, v, o)
            err = (o.float() - ref.float()).abs().max().item()
            if not err < 2e-2:
                print(f"WRONG RESULT {(b, h, s, d, causal)} config {(bm, bn, st, thr)} err {err}", flush=True)
                continue
            ms = bench_ms(lambda: kern(q, k, v, o))
            if best is None or ms < best[0]:
                best = (ms, (bm, bn, st, thr))
        tw = flops / best[0] / 1e9 if best else float("nan")
        rows.append(f"| {b},{h},{s},{d},{'yes' if causal else 'no'} | {res['flash']:.0f} | {res['cudnn']:.0f} | "
                    f"{tw:.0f} | {tw / res['cudnn']:.2f} | {best[1] if best else '-'} |")
        print(rows[-1], flush=True)
    print("\n".join(rows))
    print("saved", save("attention", rows))


if __name__ == "__main__":
    main()
