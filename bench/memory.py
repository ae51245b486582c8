"""Memory-bound kernels: copy, row softmax (fp32) and RMSNorm (fp16) in tilewright against PyTorch,
in TB/s (bytes read + written).  Run on a GPU: ``python bench/memory.py``."""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import bench_ms, save  # noqa: E402

import tilewright  # noqa: E402
import tilewright.language as T  # noqa: E402
from tilewright.kernels import rms_norm, softmax  # noqa: E402

CONFIGS = [(1, 256), (1, 512), (1, 1024), (2, 256), (2, 512)]


def copy_kernel(n, block=4096, threads=256, dtype="float16"):
    @T.prim_func
    def copy(A: T.Tensor((n,), dtype), B: T.Tensor((n,), dtype)):
        with T.Kernel(T.ceildiv(n, block), threads=threads) as bx:
            for i in T.Parallel(block):
                B[bx * block + i] = A[bx * block + i]

    return copy


def main():
    rows = ["| kernel | shape | torch TB/s | tilewright TB/s | ratio | config (rows per block, threads) |",
            "|---|---|---|---|---|---|"]
    n = 1 << 30
    a = torch.randn(n, device="cuda", dtype=torch.float16)
    b = torch.empty_like(a)
    k = tilewright.compile(copy_kernel(n), target="cuda")
    k(a, b)
    assert torch.equal(a, b)
    tb = 2 * a.numel() * 2 / 1e9
    t_ref = tb / bench_ms(lambda: b.copy_(a))
    t_tw = tb / bench_ms(lambda: k(a, b))
    rows.append(f"| copy | {n} fp16 | {t_ref:.2f} | {t_tw:.2f} | {t_tw / t_ref:.2f} | (4096 elems, 256) |")
    print(rows[-1], flush=True)
    M, N = 16384, 8192
    x = torch.randn(M, N, device="cuda")
    tb = 2 * x.numel() * 4 / 1e9
    t_ref = tb / bench_ms(lambda: torch.softmax(x, -1))
    best = (0.0, None)
    for bm, thr in CONFIGS:
        sk = tilewright.compile(softmax(M, N, block_M=bm, threads=thr), out_idx=[-1], target="cuda")
        y = sk(x)
        torch.testing.assert_close(y, torch.softmax(x, -1), rtol=1e-4, atol=1e-6)
        best = max(best, (tb / bench_ms(lambda: sk(x)), (bm, thr)), key=lambda b: b[0])
    t_tw = best[0]
    rows.append(f"| softmax | {M}x{N} fp32 | {t_ref:.2f} | {t_tw:.2f} | {t_tw / t_ref:.2f} | {best[1]} |")
    print(rows[-1], flush=True)
    xh = torch.randn(M, N, device="cuda", dtype=torch.float16)
    tb = 2 * xh.numel() * 2 / 1e9
    x64 = xh.double()
    ref = x64 / torch.sqrt((x64 * x64).mean(-1, keepdim=True) + 1e-6)
    best = (0.0, None)
    for bm, thr in CONFIGS:
        rk = tilewright.compile(rms_norm(M, N, block_M=bm, threads=thr), out_idx=[-1], target="cuda")
        torch.testing.assert_close(rk(xh).double(), ref, rtol=1e-2, atol=1e-2)
        best = max(best, (tb / bench_ms(lambda: rk(xh)), (bm, thr)), key=lambda b: b[0])

    def torch_rms():
        xf = xh.float()
        return (xf * torch.rsqrt((xf * xf).mean(-1, keepdim=True) + 1e-6)).half()

    t_ref = tb / bench_ms(torch_rms)
    t_tw = best[0]
    rows.append(f"| rmsnorm | {M}x{N} fp16 | {t_ref:.2f} | {t_tw:.2f} | {t_tw / t_ref:.2f} | {best[1]} |")
    print(rows[-1], flush=True)
    print("\n".join(rows))
    print("saved", save("memory", rows))


if __name__ == "__main__":
    main()
