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
    ("torch.add on the CPU, 1024 floats, output allocated (the ops' reference point)", lambda: torch.add(ra, rb)),
    ("cuda_driver CudaFunction.launch (packed args -> stub cuLaunchKernel)",
     lambda: fn.launch((1, 1, 1), (128, 1, 1), 0, 0, k.spec.arg_types, values)),
    ("current stream lookup (cuda_driver.current_stream)", lambda: cd.current_stream(0)),
    ("Launcher.launch (3 tensors, static shapes)", lambda: la.launch([a, b, c])),
    ("JITKernel.__call__ add (all args)", lambda: k(a, b, c)),
    # (an out_idx kernel allocates its output on cuda:0, which a CPU build of torch cannot: not here)
    ("JITKernel.__call__ dynamic rows + float scalar", lambda: kd(x, y, 0.5)),
]
ra, rb, rc = torch.randn(1024), torch.randn(1024), torch.empty(1024)

# ops.* dispatch: each kernel the ops compiled (for the interpreter, the tensors being CPU ones) is
# swapped for a stand-in that looks like a GPU kernel (backend "device") whose launches are stub
# launches of the add kernel above (3 pointers: the real kernels pass more), so the figure is the
# dispatch (checks, plan lookup, output allocation on the CPU) plus one stub launch per kernel
import tilewright.ops as ops
import tilewright.ops.dispatch as ops_dispatch
from tilewright.ir import tile as tir
from tilewright.ir.expr import Var


class StubDeviceKernel:
    backend = "device"

    def __init__(self, real):
        self.params = real.params
        self.launcher = self

    def __call__(self, *args, stream=None):  # JITKernel.__call__: checks (here the add's) and a launch
        la.launch([a, b, c])

    def bind(self, args):  # Launcher.bind: the add's checks; the symbolic sizes of the real arguments
        la.bind([a, b, c])
        dyn = {}
        for p, v in zip(self.params, args):
            if isinstance(p, tir.Buffer):
                for want, got in zip(p.shape, v.shape):
                    if isinstance(want, Var):
                        dyn[want] = got
        return [v.data_ptr() if hasattr(v, "data_ptr") else v for v in args], dyn, 0

    def launch_bound(self, values, dyn, dev, stream=None, sync=False):
        la.launch_bound((list(values) * 3)[:3], {}, 0, stream, sync)  # the add takes 3 pointers


xs = torch.randn(64, 1024).half()
w, bias = torch.randn(1024).half(), torch.randn(1024).half()
ga, gb = torch.randn(256, 256).half(), torch.randn(256, 256).half()
q = torch.randn(4, 32, 1, 128).half()
kv = torch.randn(4, 8, 512, 128).half()
qp, kp = torch.randn(1, 8, 128, 64).half(), torch.randn(1, 8, 128, 64).half()
ops_calls = [
    ("ops.softmax 64x1024", lambda: ops.softmax(xs)),
    ("ops.rms_norm 64x1024", lambda: ops.rms_norm(xs, w)),
    ("ops.rms_norm 64x1024 + residual", lambda: ops.rms_norm(xs, w, residual=xs)),
    ("ops.layer_norm 64x1024", lambda: ops.layer_norm(xs, w, bias)),
    ("ops.matmul 256^3", lambda: ops.matmul(ga, gb)),
    ("ops.attention prefill causal 8 heads 128x64", lambda: ops.attention(qp, kp, kp, causal=True)),
    ("ops.attention decode GQA 32/8 kv 512", lambda: ops.attention(q, kv, kv)),
]
for _, call in ops_calls:
    call()  # compile (interpreter) and run once for real
for key, kern in list(ops_dispatch._kernels.items()):
    ops_dispatch._kernels[key] = StubDeviceKernel(kern)
# plans made with the real kernels: made again
if hasattr(ops, "forget_plans"):
    ops.forget_plans()
else:  # (the code before ops.forget_plans, for a before/after comparison)
    import tilewright.ops.attention_dispatch as ops_attention
    for cache in ("_row_plans", "_matmul_plans", "_gemm_choice"):
        getattr(ops_dispatch, cache).clear()
    ops_attention._plans.clear()
    ops_attention._checked.clear()
ops_dispatch._plans.clear()
for _, call in ops_calls:
    call()
rows += [(name + " (dispatch + stub launches)", call) for name, call in ops_calls]
for name, call in rows:
    print(f"| {name} | {t_ns(call):.2f} |", flush=True)
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
