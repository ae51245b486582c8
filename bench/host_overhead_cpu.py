"""Host time of a whole kernel call, piece by piece, on a machine without a GPU.

A stub ``libcuda.so.1`` (``bench/stubs/cudastub.c``: every driver call returns success and does
nothing) stands in for the driver, and CPU torch tensors pass for CUDA tensors (a subclass whose
``is_cuda`` is True and whose ``device`` is ``cuda:0``), so the whole Python path runs:
``JITKernel.__call__`` -> ``runtime/launcher.py`` -> ``cuda_driver`` -> ``cuLaunchKernel``.  The
``ops.*`` rows time the dispatch (checks, configuration choice, output allocation on the CPU) with
the kernel launch itself replaced by the stub path above, so they show the host cost that the GPU
adds to the launch.  What the GPU adds (torch's allocator and stream lookup on CUDA) is not here:
run ``bench/launch_overhead.py`` on the GPU for that.

``python bench/host_overhead_cpu.py`` (needs a C compiler for the stub and NVRTC to compile).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STUBS = os.path.join(ROOT, "bench", "stubs")

_BODY = r"""
import sys, time
sys.path.insert(0, ROOT)
import torch
import tilewright
import tilewright.language as T
from tilewright.runtime import cuda_driver as cd

class FakeCuda(torch.Tensor):
    # a CPU tensor the launcher takes for a CUDA one (the stub driver never touches the memory)
    __torch_function__ = torch._C._disabled_torch_function_impl
    is_cuda = True
    device = torch.device("cuda", 0)

    def get_device(self):
        return 0

def fake(t):
    return t.as_subclass(FakeCuda)

@T.prim_func
def add(A: T.Tensor((1024,), "float32"), B: T.Tensor((1024,), "float32"), C: T.Tensor((1024,), "float32")):
    with T.Kernel(1, threads=128):
        for i in T.Parallel(1024):
            C[i] = A[i] + B[i]

M = T.symbolic("M")
@T.prim_func
def scale_rows(X: T.Tensor((M, 256), "float16"), Y: T.Tensor((M, 256), "float16"), s: T.float32):
    with T.Kernel(T.ceildiv(M, 4), threads=128) as bx:
        for i, j in T.Parallel(4, 256):
            Y[bx * 4 + i, j] = X[bx * 4 + i, j] * s

k = tilewright.compile(add, target="cuda -arch=sm_90")
k2 = tilewright.compile(add, out_idx=[-1], target="cuda -arch=sm_90")
kd = tilewright.compile(scale_rows, target="cuda -arch=sm_90")
if COMPILE_ONLY:
    sys.exit(0)
a, b, c = (fake(torch.randn(1024)) for _ in range(3))
x, y = fake(torch.randn(64, 256).half()), fake(torch.empty(64, 256).half())
la = k.launcher
fn = la.function(0)
values = (a.data_ptr(), b.data_ptr(), c.data_ptr())

def t_ns(call, n=N):
    for _ in range(n // 10):
        call()
    best = float("inf")
    for _ in range(REPEATS):
        t0 = time.perf_counter_ns()
        for _ in range(n):
            call()
        best = min(best, (time.perf_counter_ns() - t0) / n)
    return best / 1000

rows = [
    ("torch.add(out=) on the CPU, 1024 floats (reference point, not a GPU figure)",
     lambda: torch.add(ra, rb, out=rc)),
    ("cuda_driver CudaFunction.launch (packed args -> stub cuLaunchKernel)",
     lambda: fn.launch((1, 1, 1), (128, 1, 1), 0, 0, k.spec.arg_types, values)),
    ("current stream lookup (cuda_driver.current_stream)", lambda: cd.current_stream(0)),
    ("Launcher.launch (3 tensors, static shapes)", lambda: la.launch([a, b, c])),
    ("JITKernel.__call__ add (all args)", lambda: k(a, b, c)),
    ("JITKernel.__call__ add (out_idx: output allocated)", lambda: k2(a, b)),
    ("JITKernel.__call__ dynamic rows + float scalar", lambda: kd(x, y, 0.5)),
]
ra, rb, rc = torch.randn(1024), torch.randn(1024), torch.empty(1024)

# ops.* dispatch: the kernel launch replaced by the stub launch of the add kernel above (same cost
# as any launch through the launcher), so the figure is dispatch + one launch
import tilewright.ops as ops
from tilewright.jit.kernel import JITKernel
xs = torch.randn(64, 1024).half()
w = torch.randn(1024).half()
ga, gb = torch.randn(256, 256).half(), torch.randn(256, 256).half()
q = torch.randn(4, 32, 1, 128).half()
kv = torch.randn(4, 8, 512, 128).half()
ops.softmax(xs); ops.rms_norm(xs, w); ops.matmul(ga, gb); ops.attention(q, kv, kv)  # compile (interpreter)
real_call = JITKernel.__call__
def stub_call(self, *args, stream=None):
    la.launch([a, b, c])
    if len(args) < len(self.params) and self.out_idx:
        return None
JITKernel.__call__ = stub_call
rows += [
    ("ops.softmax 64x1024 (dispatch + stub launch)", lambda: ops.softmax(xs)),
    ("ops.rms_norm 64x1024 (dispatch + stub launch)", lambda: ops.rms_norm(xs, w)),
    ("ops.matmul 256^3 (dispatch + stub launch)", lambda: ops.matmul(ga, gb)),
    ("ops.attention decode GQA 32/8 kv 512 (dispatch + stub launches)", lambda: ops.attention(q, kv, kv)),
]
for name, call in rows:
    print(f"| {name} | {t_ns(call):.2f} |", flush=True)
JITKernel.__call__ = real_call
"""


def build_stub(tmp: str) -> str:
    cc = shutil.which("clang") or shutil.which("clang-19") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        sys.exit("needs a C compiler (clang or gcc) to build the stub driver")
    subprocess.check_call([cc, "-O2", "-shared", "-fPIC", "-o", os.path.join(tmp, "libcuda.so.1"),
                           os.path.join(STUBS, "cudastub.c"), "-ldl"])
    os.symlink("libcuda.so.1", os.path.join(tmp, "libcuda.so"))
    return tmp


def main() -> None:
    n = int(os.environ.get("HOST_BENCH_N", "20000"))
    repeats = int(os.environ.get("HOST_BENCH_REPEATS", "5"))
    with tempfile.TemporaryDirectory() as tmp:
        build_stub(tmp)
        env = dict(os.environ, LD_LIBRARY_PATH=tmp + os.pathsep + os.environ.get("LD_LIBRARY_PATH", ""),
                   PYTHONPATH=ROOT)
        print(f"| piece (CPU, stub libcuda, fake CUDA tensors) | host us per call (best of {repeats} x {n}) |")
        print("|---|---|", flush=True)
        script = os.path.join(tmp, "host_overhead_body.py")  # a file: kernels need readable source
        for compile_only in (True, False):
            with open(script, "w") as f:
                f.write(f"ROOT = {ROOT!r}\nN = {n}\nREPEATS = {repeats}\nCOMPILE_ONLY = {compile_only}\n" + _BODY)
            if compile_only:  # NVRTC does not run beside the stub driver: fill the disk cache first
                subprocess.run([sys.executable, script], env=dict(os.environ, PYTHONPATH=ROOT), check=True)
        subprocess.run([sys.executable, "-X", "faulthandler", script], env=env, check=True)


if __name__ == "__main__":
    main()
