"""Host time of a whole kernel call, piece by piece, on a machine without a GPU.

A stub ``libcuda.so.1`` (``bench/stubs/cudastub.c``: every driver call returns success and does
nothing) stands in for the driver, and CPU torch tensors pass for CUDA tensors (a subclass whose
``is_cuda`` is True and whose ``device`` is ``cuda:0``), so the whole Python path runs:
``JITKernel.__call__`` -> ``runtime/launcher.py`` -> ``cuda_driver`` -> ``cuLaunchKernel``.  The
``ops.*`` rows time the dispatch (checks, configuration choice, output allocation on the CPU) with
the kernel launch itself replaced by the stub path above, so they show the host cost that the GPU
adds to the launch.  What the GPU adds (torch's allocator and stream lookup on CUDA) is not here:
run ``bench/launch_overhead.py`` on the GPU for that.

``python bench/host_overhead_cpu.py`` (needs a C compiler for the stub and NVRTC to compile);
``HOST_BENCH_PROFILE=softmax python bench/host_overhead_cpu.py``: a cProfile of the rows whose name
holds that text, instead of the timing; ``HOST_BENCH_ONLY=matmul``: time only the rows whose name
holds one of these comma-separated texts (an A/B comparison of one row on a busy machine;
``TILEWRIGHT_COMPILED_LAUNCH=1`` / ``0`` for the compiled launcher's, its pieces timed either way
where it builds); ``HOST_BENCH_STEPS=1``: instead of
the whole calls, the steps of the slow ones one by one (``bench/host_steps.py``: key and lookup, checks,
allocations, stream lookup, the launch objects, the driver call).

Timing: thread CPU time (``time.thread_time_ns``), ``HOST_BENCH_REPEATS`` (30) rounds of
``HOST_BENCH_N`` (2000) calls, the rows taking turns round by round, each row's block right after a
block of the reference (torch.add with its output allocated, as in ``bench/launch_overhead.py``): per
row the best and the median time, the median of its per-round ratios to the reference and their
spread (on this machine's shared cores wall-clock figures moved 2-4x from run to run).  The ratio
here is to a CPU torch.add, not the GPU bar: what it is for is comparing a change before/after.
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
import os, sys, time
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
# ops.* dispatch: the ops run on CPU tensors (so they compile their kernels for the interpreter);
# each such kernel also gets a CUDA twin, the same kernel compiled for sm_90a (in the compile-only
# pass: the disk cache then serves it beside the stub driver).  For the timing each kernel is
# swapped for its twin seen through a launcher that takes the CPU tensors for CUDA ones when it
# checks them (the first call of a plan), so the figure is the dispatch (checks, plan lookup,
# output allocation on the CPU) plus the real launch path of the ops' own kernels (their argument
# lists, symbolic grids, TMA descriptors) into the stub.  A kernel without a twin (one sm_90a
# refuses) falls back to a stand-in whose launches are stub launches of the add kernel above.
import tilewright.ops as ops
import tilewright.ops.dispatch as ops_dispatch
import tilewright.ops.rows as ops_rows
import tilewright.ops.attention_dispatch as ops_attention
from tilewright.runtime.launcher import Launcher

_real_kernel = ops_dispatch._kernel
twins = {}  # id(interpreter kernel) -> its sm_90a twin, or None


def _kernel_with_twin(key, build, target, pass_configs=None):
    kern = _real_kernel(key, build, target, pass_configs)
    if id(kern) not in twins:
        try:
            twins[id(kern)] = tilewright.compile(build(), target="cuda -arch=sm_90a", pass_configs=pass_configs or None)
        except Exception as e:  # noqa: BLE001
            print(f"(no sm_90a twin of {key[0]}: {type(e).__name__}: {str(e)[:200]})", file=sys.stderr)
            twins[id(kern)] = None
    return kern


for _mod in (ops_dispatch, ops_rows, ops_attention):
    _mod._kernel = _kernel_with_twin
# matmul chooses its configuration as on an H200 (sm_90: 256^3 is one direct launch; the CPU's own
# choice, as any other architecture's, would be split-K: two launches)
ops_dispatch._archs[torch.device("cpu")] = ("sm_90", 132, "the CPU as an H200")


class FakeBindLauncher(Launcher):
    # the twin's launcher, checking CPU tensors as if on cuda:0 (the stub never reads them)

    def bind(self, args):
        return super().bind([fake(v) if isinstance(v, torch.Tensor) else v for v in args])


class TwinKernel:
    backend = "device"

    def __init__(self, twin):
        self.params = twin.params
        self.launcher = FakeBindLauncher(twin.spec, twin.launcher.runtime)

    def __call__(self, *args, stream=None):  # JITKernel.__call__ (the checked path)
        self.launcher.launch([fake(v) if isinstance(v, torch.Tensor) else v for v in args], stream)

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
def knobs(on):
    # session 14's host-path knobs (their defaults: on)
    ops_attention.FAST_ENTRY = ops_rows.FAST_ENTRY = on
    ops_attention.DIRECT_LAUNCH = ops_rows.DIRECT_LAUNCH = ops_attention.decode_kernels.DIRECT_LAUNCH = on


def with_knobs(on, call):
    # the knobs set for the call and back on after it (the other rows run with the defaults)
    knobs(on)
    call()
    knobs(True)


ops_calls = [
    ("ops.softmax 64x1024", lambda: ops.softmax(xs)),
    ("ops.rms_norm 64x1024", lambda: ops.rms_norm(xs, w)),
    ("ops.rms_norm 64x1024 + residual", lambda: ops.rms_norm(xs, w, residual=xs)),
    ("ops.layer_norm 64x1024", lambda: ops.layer_norm(xs, w, bias)),
    ("ops.matmul 256^3", lambda: ops.matmul(ga, gb)),
    ("ops.attention prefill causal 8 heads 128x64", lambda: ops.attention(qp, kp, kp, causal=True)),
    ("ops.attention decode GQA 32/8 kv 512", lambda: ops.attention(q, kv, kv)),
    ("ops.attention decode num_splits=1", lambda: ops.attention(q, kv, kv, num_splits=1)),
    ("ops.attention decode return_lse=True", lambda: ops.attention(q, kv, kv, return_lse=True)),
    ("ops.attention prefill return_lse=True", lambda: ops.attention(qp, kp, kp, causal=True, return_lse=True)),
    # session 14's host-path knobs set per call, on and off (the path before), in the same rounds: the
    # setting costs both rows alike
    ("s14 knobs on: decode", lambda: with_knobs(True, lambda: ops.attention(q, kv, kv))),
    ("s14 knobs off: decode", lambda: with_knobs(False, lambda: ops.attention(q, kv, kv))),
    ("s14 knobs on: prefill", lambda: with_knobs(True, lambda: ops.attention(qp, kp, kp, causal=True))),
    ("s14 knobs off: prefill", lambda: with_knobs(False, lambda: ops.attention(qp, kp, kp, causal=True))),
    ("s14 knobs on: ops.rms_norm + residual", lambda: with_knobs(True, lambda: ops.rms_norm(xs, w, residual=xs))),
    ("s14 knobs off: ops.rms_norm + residual", lambda: with_knobs(False, lambda: ops.rms_norm(xs, w, residual=xs))),
]
for _, call in ops_calls:
    call()  # compile (interpreter, and the sm_90a twins) and run once for real
for _mod in (ops_dispatch, ops_rows, ops_attention):
    _mod._kernel = _real_kernel
if COMPILE_ONLY:
    sys.exit(0)
a, b, c = (fake(torch.randn(1024)) for _ in range(3))


class CudaOnCpu(torch.Tensor):
    # says is_cuda (the launcher's check) while its device stays the CPU (where out_idx allocates)
    __torch_function__ = torch._C._disabled_torch_function_impl
    is_cuda = True

    def get_device(self):
        return 0


a2, b2 = (torch.randn(1024).as_subclass(CudaOnCpu) for _ in range(2))
x, y = fake(torch.randn(64, 256).half()), fake(torch.empty(64, 256).half())
la = k.launcher
fn = la.function(0)
values = (a.data_ptr(), b.data_ptr(), c.data_ptr())
fixed, handle = fn.fixed_launch((1, 1, 1), (128, 1, 1), 0, k.spec.arg_types, values, 3), int(fn.handle)
from tilewright.ops.bound_kernel import BoundKernel
bound = BoundKernel(k)
bound(a, b, c)  # binds (every check once); launch_pointers then writes only the pointers
ptr_list = list(values)
try:
    from cuda.bindings._v2.driver import launch_kernel as typed
except ImportError:
    typed = None
from tilewright.runtime import compiled_launch
compiled = compiled_launch.load()  # (TILEWRIGHT_COMPILED_LAUNCH picks the launches' path; this the pieces')
print("compiled launcher:", compiled_launch.status(), "; launch path:", cd.launch_path(), flush=True)
compiled_go = compiled and compiled.Launch(handle, (1, 1, 1), (128, 1, 1), 0, fixed.args.data_address,
                                           fixed.args.address, 3, False, fixed.args).go

def round_us(rows, n=N):
    # per row, REPEATS rounds of n calls in this thread's CPU time (a core taken by another process
    # does not count), the rows taking turns round by round (a busy spell falls on all alike), each
    # row's block right after a block of the reference (torch.add with its output allocated, the
    # ops' 1.5x bar): per row its times and its ratios to the adjacent reference, one per round
    for _, call in rows:
        for _ in range(max(n // 10, 1)):
            call()
    times, ratios = [[] for _ in rows], [[] for _ in rows]
    clock = time.thread_time_ns

    def block(call):
        t0 = clock()
        for _ in range(n):
            call()
        return (clock() - t0) / n / 1000

    for r in range(REPEATS):
        for i in [(j + r) % len(rows) for j in range(len(rows))]:
            ref = block(reference)
            times[i].append(block(rows[i][1]))
            ratios[i].append(times[i][-1] / ref)
    return times, ratios

rows = [
    ("torch.add(out=) on the CPU, 1024 floats (reference point, not a GPU figure)",
     lambda: torch.add(ra, rb, out=rc)),
    ("torch.add on the CPU, 1024 floats, output allocated (the ops' reference point)", lambda: torch.add(ra, rb)),
    ("cuda_driver CudaFunction.launch (packed args -> stub cuLaunchKernel)",
     lambda: fn.launch((1, 1, 1), (128, 1, 1), 0, 0, k.spec.arg_types, values)),
    ("BoundKernel.launch_pointers (the ops' launch path: FixedLaunch, stream lookup, FixedCudaLaunch)",
     lambda: bound.launch_pointers(ptr_list, ())),
    ("cuda_driver FixedCudaLaunch (the ops' packed launch: pointers written, driver call)",
     lambda: fixed(values, 0)),
    ("driver.cuLaunchKernel alone (packed buffer; cuda-bindings)",
     lambda: fn._launch_fn(fn.handle, 1, 1, 1, 128, 1, 1, 0, 0, fixed.args.address, 0)),
    *([("_v2 launch_kernel alone (packed buffer; TILEWRIGHT_TYPED_LAUNCH's call)",
        lambda: typed(handle, 1, 1, 1, 128, 1, 1, 0, 0, fixed.args.address, 0))] if typed else []),
    *([("compiled launch_kernel alone (packed buffer; runtime/fast_launch.c)",
        lambda: compiled.launch_kernel(handle, 1, 1, 1, 128, 1, 1, 0, 0, fixed.args.address, 0)),
       ("compiled Launch.go (three pointers written and launched in one C call)",
        lambda: compiled_go(0, ptr_list))] if compiled else []),
    ("current stream lookup (cuda_driver.current_stream)", lambda: cd.current_stream(0)),
    ("Launcher.launch (3 tensors, static shapes)", lambda: la.launch([a, b, c])),
    ("JITKernel.__call__ add (all args)", lambda: k(a, b, c)),
    # (an out_idx kernel allocates its output on its inputs' device: inputs that say is_cuda but
    # whose device is the CPU, so that a CPU build of torch can allocate it)
    ("JITKernel.__call__ add (out_idx: output allocated on the CPU)", lambda: k2(a2, b2)),
    ("JITKernel.__call__ dynamic rows + float scalar", lambda: kd(x, y, 0.5)),
]
ra, rb, rc = torch.randn(1024), torch.randn(1024), torch.empty(1024)
reference = rows[1][1]  # torch.add with its output allocated

for key, kern in list(ops_dispatch._kernels.items()):
    twin = twins.get(id(kern))
    ops_dispatch._kernels[key] = TwinKernel(twin) if twin is not None else StubDeviceKernel(kern)
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
print(f"(sm_90a twins: {sum(v is not None for v in twins.values())} of {len(twins)} kernels)", file=sys.stderr)
import gc
gc.collect()
gc.freeze()  # the compiled kernels' objects out of the collector's way (a collection during a timing is not ours)
if PROFILE:  # HOST_BENCH_PROFILE=<words of a row name>: cProfile of those rows instead of the timing
    import cProfile, io, pstats
    for name, call in rows:
        if PROFILE.lower() not in name.lower():
            continue
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(N):
            call()
        prof.disable()
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(25)
        print(f"===== {name} ({N} calls; tottime in s: per call us = s * 1e6 / {N})")
        print("\n".join(line[:170] for line in text.getvalue().splitlines()[:45]), flush=True)
    sys.exit(0)
rows = [(name, call) for name, call in rows if any(w in name.lower() for w in ONLY.lower().split(","))]
if STEPS:  # HOST_BENCH_STEPS=1: the pieces of the slow calls, one by one (bench/host_steps.py)
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    from host_steps import steps

    rows = steps(ops_calls, dict(xs=xs, w=w, ga=ga, gb=gb, q=q, kv=kv, qp=qp, kp=kp))
import statistics
times, ratios = round_us(rows)
for (name, _), ts, rs in zip(rows, times, ratios):
    print(f"| {name} | {min(ts):.2f} | {statistics.median(ts):.2f} | {statistics.median(rs):.2f}x | "
          f"{min(rs):.2f}-{max(rs):.2f}x |", flush=True)
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
    n = int(os.environ.get("HOST_BENCH_N", "2000"))
    repeats = int(os.environ.get("HOST_BENCH_REPEATS", "30"))
    with tempfile.TemporaryDirectory() as tmp:
        build_stub(tmp)
        env = dict(os.environ, LD_LIBRARY_PATH=tmp + os.pathsep + os.environ.get("LD_LIBRARY_PATH", ""),
                   PYTHONPATH=ROOT)
        print(f"Thread CPU time per call, {repeats} rounds of {n} calls, each block right after a block of "
              "torch.add (output allocated, on the CPU); ratio: per round to that adjacent block\n")
        print("| piece (CPU, stub libcuda, fake CUDA tensors) | host us (best) | host us (median) | "
              "/ torch.add (median of rounds) | spread (min-max) |")
        print("|---|---|---|---|---|", flush=True)
        script = os.path.join(tmp, "host_overhead_body.py")  # a file: kernels need readable source
        for compile_only in (True, False):
            with open(script, "w") as f:
                f.write(f"ROOT = {ROOT!r}\nN = {n}\nREPEATS = {repeats}\nCOMPILE_ONLY = {compile_only}\n"
                        f"PROFILE = {os.environ.get('HOST_BENCH_PROFILE', '')!r}\n"
                        f"ONLY = {os.environ.get('HOST_BENCH_ONLY', '')!r}\n"
                        f"STEPS = {bool(os.environ.get('HOST_BENCH_STEPS'))!r}\n" + _BODY)
            if compile_only:  # NVRTC does not run beside the stub driver: fill the disk cache first
                subprocess.run([sys.executable, script], env=dict(os.environ, PYTHONPATH=ROOT), check=True)
        subprocess.run([sys.executable, "-X", "faulthandler", script], env=env, check=True)


if __name__ == "__main__":
    main()
