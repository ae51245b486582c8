"""``python -m tilewright.demo``: compile and run a GEMM and a softmax written in the T language.

On a machine with an NVIDIA GPU (and PyTorch) the kernels run there and are checked against
PyTorch; without one they run in the CPU tile interpreter and, for the lowered GPU code, in the
thread-level emulator.  Either way the demo shows the CUDA and the HIP (AMD) code it generated and
what the vendor compilers made of it.
"""

from __future__ import annotations

import sys
import time

import numpy as np

import tilewright
from tilewright.kernels import matmul, softmax
from tilewright.target.base import Target


def _section(title: str) -> None:
    print(f"\n=== {title} " + "=" * max(0, 70 - len(title)))


def _excerpt(src: str, marker: str, n: int = 28) -> str:
    lines = src.splitlines()
    start = next((i for i, line in enumerate(lines) if marker in line), 0)
    body = lines[start:start + n]
    more = len(lines) - start - n
    return "\n".join(body) + (f"\n   ... ({more} more lines)" if more > 0 else "")


def _has_cuda_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available() and not getattr(torch.version, "hip", None)


def run_on_gpu() -> None:
    import torch

    _section("running on the GPU")
    M = N = K = 2048
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    t0 = time.perf_counter()
    k = tilewright.compile(matmul(M, N, K), out_idx=[-1], target="auto")
    print(f"compiled GEMM {M}x{N}x{K} for {k.target} in {time.perf_counter() - t0:.3f}s; resources {k.resource_usage}")
    c = k(a, b)
    err = (c.double() - a.double() @ b.double()).abs().max().item()
    print(f"GEMM max abs error vs float64: {err:.4f}")
    ms = k.get_profiler().do_bench(input_tensors=[a, b])
    print(f"GEMM: {ms:.3f} ms, {2 * M * N * K / ms / 1e9:.0f} TFLOP/s")
    sk = tilewright.compile(softmax(4096, 4096), out_idx=[-1], target="auto")
    x = torch.randn(4096, 4096, device="cuda")
    y = sk(x)
    print(f"softmax max abs error: {(y.double() - torch.softmax(x.double(), -1)).abs().max().item():.2e}")


def run_on_cpu() -> None:
    _section("no NVIDIA GPU here: running on the CPU")
    rng = np.random.default_rng(0)
    M, N, K = 256, 192, 128
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    k = tilewright.compile(matmul(M, N, K, 64, 64, 32), out_idx=[-1], target="interpret")
    c = k(a, b)
    err = np.abs(c.astype(np.float64) - a.astype(np.float64) @ b.astype(np.float64)).max()
    print(f"tile interpreter: GEMM {M}x{N}x{K} max abs error vs float64 {err:.4f}")
    x = rng.standard_normal((64, 1024)).astype(np.float32)
    y = tilewright.compile(softmax(64, 1024), out_idx=[-1], target="interpret")(x)
    x64 = x.astype(np.float64)
    ref = np.exp(x64 - x64.max(-1, keepdims=True))
    ref /= ref.sum(-1, keepdims=True)
    print(f"tile interpreter: softmax max abs error vs float64 {np.abs(y - ref).max():.2e}")
    for tgt in ("cuda -arch=sm_90a", "hip -arch=gfx942"):
        try:
            ek = tilewright.compile(matmul(128, 128, 64, 64, 64, 32), out_idx=[-1], target=tgt,
                                    execution_backend="emulator")
            a2, b2 = a[:128, :64].copy(), b[:64, :128].copy()
            t0 = time.perf_counter()
            c2 = ek(a2, b2)
            err = np.abs(c2.astype(np.float64) - a2.astype(np.float64) @ b2.astype(np.float64)).max()
            print(f"emulator ({tgt}): lowered GEMM 128x128x64 max abs error {err:.4f} "
                  f"({time.perf_counter() - t0:.2f}s)")
        except Exception as e:  # noqa: BLE001 - the demo reports and goes on
            print(f"emulator ({tgt}): not available ({type(e).__name__}: {str(e).splitlines()[0]})")


def show_code() -> None:
    f = matmul(1024, 1024, 1024, 128, 128, 32)
    _section("CUDA code for sm_90a (excerpt)")
    try:
        k = tilewright.compile(f, target="cuda -arch=sm_90a")
        print(_excerpt(k.get_kernel_source(), "extern \"C\" __global__"))
        print(f"-> cubin of {len(k.get_code_object())} bytes; resources {k.resource_usage}")
    except tilewright.TilewrightError as e:
        print(f"(CUDA compile not available: {str(e).splitlines()[0]})")
    _section("HIP code for gfx942 / MI300 (excerpt)")
    try:
        k = tilewright.compile(f, target="hip -arch=gfx942", execution_backend="emulator")
        src = k.get_kernel_source()
        print(_excerpt(src, "extern \"C\""))
        try:
            co = k.get_code_object()
            from tilewright.toolchain.hip import disassemble

            dis = disassemble(co)
            mfma = sum(1 for line in dis.splitlines() if "v_mfma" in line)
            print(f"-> code object of {len(co)} bytes, {mfma} MFMA instructions; resources {k.resource_usage}")
        except tilewright.TilewrightError as e:
            print(f"(no HIP compiler here: {str(e).splitlines()[0]})")
    except Exception as e:  # noqa: BLE001
        print(f"(HIP code generation failed: {type(e).__name__}: {str(e).splitlines()[0]})")


def main(argv=None) -> int:
    print(f"tilewright {tilewright.__version__}; detected target: {Target.current()}")
    if _has_cuda_gpu():
        run_on_gpu()
    else:
        run_on_cpu()
    show_code()
    return 0


if __name__ == "__main__":
    sys.exit(main())
