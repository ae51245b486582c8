"""Memory-bound kernels in TB/s (bytes read + written) and as a fraction of the copy bandwidth
measured in the same run: a tilewright copy; the user-level softmax and RMSNorm programs
(``tilewright.kernels``, best of a few block configurations); and the library operators
``ops.softmax``, ``ops.rms_norm``, fused residual-add + ``ops.rms_norm`` and ``ops.layer_norm``
against torch eager and ``torch.compile`` of the same computation.

    python bench/memory.py            # a GPU
    python bench/memory.py --quick    # the CPU: tiny shapes in the tile interpreter, end to end

Every tilewright output is checked against float64 before it is timed (``err``: the largest
|out - ref| / (1 + |ref|)); the tables are saved under bench/results/ (``--no-save`` to skip).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import bench_ms, save  # noqa: E402

import tilewright  # noqa: E402
import tilewright.language as T  # noqa: E402
from tilewright import ops  # noqa: E402
from tilewright.kernels import rms_norm, softmax  # noqa: E402

CONFIGS = [(1, 256), (1, 512), (1, 1024), (2, 256), (2, 512)]  # (rows per block, threads) of the user programs
SHAPE = (16384, 8192)
QUICK_SHAPE = (64, 256)
QUICK_CONFIGS = [(1, 128), (2, 128)]
TOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 3e-2}  # err above this: wrong, not timed


def copy_kernel(n, block=4096, threads=256, dtype="float16"):
    @T.prim_func
    def copy(A: T.Tensor((n,), dtype), B: T.Tensor((n,), dtype)):
        with T.Kernel(T.ceildiv(n, block), threads=threads) as bx:
            for i in T.Parallel(block):
                B[bx * block + i] = A[bx * block + i]

    return copy


def _err(x, ref) -> float:
    return float(((x.double() - ref).abs() / (1 + ref.abs())).max())


def _f(x: float) -> str:
    return f"{x:.2f}" if x != x or x >= 0.1 else f"{x:.3g}"


def _nan_on_failure(fn):
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - torch.compile may be unavailable (no C++ compiler on a CPU machine)
        print(f"  (unavailable: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})", flush=True)
        return float("nan")


# ---------------------------------------------------------------- float64 references and torch versions
def ref_rms(x, w, eps, r=None):
    s = x.double() + (r.double() if r is not None else 0)
    return s / torch.sqrt((s * s).mean(-1, keepdim=True) + eps) * w.double()


def ref_ln(x, w, b, eps):
    x = x.double()
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * w.double() + b.double()


def torch_rms(x, w, eps):
    xf = x.float()
    return (xf * torch.rsqrt((xf * xf).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def torch_add_rms(x, r, w, eps):
    s = x + r
    return torch_rms(s, w, eps), s


def torch_ln(x, w, b, eps):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, eps)


class Bench:
    def __init__(self, quick: bool, device: str, compile_torch: bool):
        self.quick, self.device, self.compile_torch = quick, device, compile_torch
        self.target = "interpret" if quick else "cuda"
        self.rows = ["| kernel | shape | torch eager TB/s | torch.compile TB/s | tilewright TB/s | vs eager | "
                     "vs compile | of copy | err | config |", "|---|---|---|---|---|---|---|---|---|---|"]
        self.roof = float("nan")

    def row(self, name, shape, eager, compiled, tw, err, cfg="-"):
        self.rows.append(f"| {name} | {shape} | {_f(eager)} | {_f(compiled)} | {_f(tw)} | {tw / eager:.2f} | "
                         f"{tw / compiled:.2f} | {tw / self.roof:.0%} | {err:.1e} | {cfg} |")
        print(self.rows[-1], flush=True)

    def tbs(self, nbytes, fn) -> float:
        """TB/s of fn moving nbytes."""
        return nbytes / 1e12 / (bench_ms(fn) * 1e-3)

    def compiled(self, nbytes, fn, *args) -> float:
        if not self.compile_torch:
            return float("nan")

        def run():
            cf = torch.compile(fn, dynamic=False)
            cf(*args)  # compile outside the timing
            return self.tbs(nbytes, lambda: cf(*args))

        return _nan_on_failure(run)

    # ------------------------------------------------------------ the measurements
    def copy(self):
        n = (1 << 16) if self.quick else (1 << 30)
        a = torch.randn(n, device=self.device, dtype=torch.float16)
        b = torch.full_like(a, float("nan"))
        k = tilewright.compile(copy_kernel(n), target=self.target)
        k(a, b)
        assert torch.equal(a, b), "the tilewright copy is wrong"
        nbytes = 2 * a.numel() * a.element_size()
        self.roof = self.tbs(nbytes, lambda: b.copy_(a))
        tw = self.tbs(nbytes, lambda: k(a, b))
        self.row("copy (torch copy_ = the roof)", f"{n} fp16", self.roof, float("nan"), tw, 0.0,
                 "(4096 elems, 256)")

    def user_programs(self, M, N, configs):
        x = torch.randn(M, N, device=self.device)
        nbytes = 2 * x.numel() * 4
        ref = torch.softmax(x.double(), -1)
        best, err = (float("nan"), None), float("nan")
        for bm, thr in configs:
            sk = tilewright.compile(softmax(M, N, block_M=bm, threads=thr), out_idx=[-1], target=self.target)
            e = _err(sk(x), ref)
            if not e < TOL[torch.float32]:
                print(f"  WRONG RESULT: softmax program {(bm, thr)}: {e:.3g}", flush=True)
                continue
            t = self.tbs(nbytes, lambda: sk(x))
            if not best[0] >= t:
                best, err = (t, (bm, thr)), e
        self.row("softmax (user program)", f"{M}x{N} fp32", self.tbs(nbytes, lambda: torch.softmax(x, -1)),
                 self.compiled(nbytes, lambda t: torch.softmax(t, -1), x), best[0], err, best[1])
        xh = torch.randn(M, N, device=self.device, dtype=torch.float16)
        nbytes = 2 * xh.numel() * 2
        ones = torch.ones(N, device=self.device, dtype=torch.float16)
        ref = ref_rms(xh, ones, 1e-6)
        best, err = (float("nan"), None), float("nan")
        for bm, thr in configs:
            rk = tilewright.compile(rms_norm(M, N, block_M=bm, threads=thr), out_idx=[-1], target=self.target)
            e = _err(rk(xh), ref)
            if not e < TOL[torch.float16]:
                print(f"  WRONG RESULT: rms_norm program {(bm, thr)}: {e:.3g}", flush=True)
                continue
            t = self.tbs(nbytes, lambda: rk(xh))
            if not best[0] >= t:
                best, err = (t, (bm, thr)), e

        def rms_noweight(t):
            tf = t.float()
            return (tf * torch.rsqrt((tf * tf).mean(-1, keepdim=True) + 1e-6)).half()

        self.row("rmsnorm (user program)", f"{M}x{N} fp16", self.tbs(nbytes, lambda: rms_noweight(xh)),
                 self.compiled(nbytes, rms_noweight, xh), best[0], err, best[1])

    def library(self, M, N, dtype):
        """ops.softmax, ops.rms_norm, residual + ops.rms_norm, ops.layer_norm in ``dtype``."""
        dn = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}[dtype]
        shape, es, tol = f"{M}x{N} {dn}", torch.tensor([], dtype=dtype).element_size(), TOL[dtype]
        g = torch.Generator(device=self.device).manual_seed(M + N)

        def rnd(*s):
            return torch.randn(*s, device=self.device, dtype=dtype, generator=g)

        x, r, w, b = rnd(M, N), rnd(M, N), 1 + 0.1 * rnd(N), rnd(N)
        cases = [
            # name, bytes moved, tilewright, float64 reference of its (first) output, torch fn, torch args
            ("ops.softmax", 2 * M * N * es, lambda: ops.softmax(x), torch.softmax(x.double(), -1),
             lambda t: torch.softmax(t, -1), (x,)),
            ("ops.rms_norm", 2 * M * N * es + N * es, lambda: ops.rms_norm(x, w, 1e-6), ref_rms(x, w, 1e-6),
             lambda t, ww: torch_rms(t, ww, 1e-6), (x, w)),
            ("residual + ops.rms_norm (fused)", 4 * M * N * es + N * es,
             lambda: ops.rms_norm(x, w, 1e-6, residual=r), ref_rms(x, w, 1e-6, r),
             lambda t, rr, ww: torch_add_rms(t, rr, ww, 1e-6), (x, r, w)),
            ("ops.layer_norm", 2 * M * N * es + 2 * N * es, lambda: ops.layer_norm(x, w, b, 1e-5),
             ref_ln(x, w, b, 1e-5), lambda t, ww, bb: torch_ln(t, ww, bb, 1e-5), (x, w, b)),
        ]
        for name, nbytes, tw_fn, ref, torch_fn, args in cases:
            out = tw_fn()
            if isinstance(out, tuple):  # the fused norm also returns x + residual
                err_sum = _err(out[1], x.double() + r.double())
                out = out[0]
            else:
                err_sum = 0.0
            err = max(_err(out, ref), err_sum)
            if err < tol:
                tw = self.tbs(nbytes, tw_fn)
            else:
                print(f"  WRONG RESULT: {name} {shape}: {err:.3g}", flush=True)
                tw = float("nan")
            self.row(name, shape, self.tbs(nbytes, lambda: torch_fn(*args)),
                     self.compiled(nbytes, torch_fn, *args), tw, err)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="the CPU: tiny shapes in the tile interpreter")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile column")
    p.add_argument("--dtypes", default="float32,float16,bfloat16", help="dtypes of the ops.* rows")
    p.add_argument("--no-save", action="store_true")
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    device = "cpu" if a.quick else "cuda"
    if not a.quick and not torch.cuda.is_available():
        raise SystemExit("no GPU: run with --quick (tiny shapes in the CPU interpreter)")
    M, N = QUICK_SHAPE if a.quick else SHAPE
    bench = Bench(a.quick, device, not a.no_compile)
    bench.copy()
    bench.user_programs(M, N, QUICK_CONFIGS if a.quick else CONFIGS)
    for d in a.dtypes.split(","):
        bench.library(M, N, getattr(torch, d.strip()))
    rows = bench.rows + ["", "TB/s of bytes read + written; 'of copy': tilewright against torch's device copy in "
                         f"this run ({_f(bench.roof)} TB/s)."]
    rows += ["", f"Run time {time.perf_counter() - t0:.0f} s."]
    if a.quick:
        rows = ["CPU (--quick): the tile interpreter on tiny shapes; the numbers are not performance", ""] + rows
    print("\n".join(rows))
    if not a.no_save:
        print("saved", save("memory-quick" if a.quick else "memory", rows))
    return rows


if __name__ == "__main__":
    main()
