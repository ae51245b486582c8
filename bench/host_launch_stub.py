"""Host cost of one kernel launch through each launch layer, measured on the CPU against stub
drivers (``bench/stubs/*.c``: a libcuda.so.1 and a libamdhip64.so whose calls do nothing), so the
figure is the Python/binding work alone: argument packing plus the call into the driver.

Compared (same kernel signature: three pointers and an int32, as an elementwise kernel has):

* CUDA: tilewright's ``CudaFunction.launch`` (the compiled launcher, ``runtime/compiled_launch``,
  where it builds, else ``cuda.bindings`` ``cuLaunchKernel``, with our packed argument buffer), its
  packed ``FixedCudaLaunch`` and the compiled one-call launch, against ``cuda.core.launch`` (with a
  prepared stream and ``LaunchConfig``, and as the launcher would have to use it: a ``Stream``
  wrapping torch's raw stream handle and a ``LaunchConfig`` made per call, since the grid depends on
  the arguments).
* HIP: tilewright's ctypes ``HipFunction.launch`` against hip-python's ``hipModuleLaunchKernel``
  (given our packed ``void**``, and in its own style: a tuple of ctypes values in ``extra``).

Needs clang (any version) to build the stubs; ``cuda-core`` and ``hip-python`` are imported when
installed and skipped otherwise.  ``python bench/host_launch_stub.py`` (no GPU needed).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STUBS = os.path.join(ROOT, "bench", "stubs")
N = 100_000
REPEATS = 7

_CUDA = r"""
import sys, time
import numpy as np
sys.path.insert(0, ROOT)
from tilewright.runtime import cuda_driver as cd
kfn = cd.load_function(b"\x7fELF" + bytes(100), "k", 0)
types, values = ("ptr", "ptr", "ptr", "i32"), (1 << 32, 2 << 32, 3 << 32, 1024)
def ours():
    kfn.launch((8, 1, 1), (128, 1, 1), 0, 0, types, values)
kfn_pdl = cd.load_function(b"\x7fELF" + bytes(100), "k", 0)
kfn_pdl.launch_programmatic()
def ours_pdl():
    kfn_pdl.launch((8, 1, 1), (128, 1, 1), 0, 0, types, values)
path = cd.launch_path()  # (compiled where runtime/compiled_launch builds, else typed or bindings)
cases = [(f"tilewright CudaFunction.launch ({path})", ours),
         (f"tilewright CudaFunction.launch, programmatic (cuLaunchKernelEx; {path})", ours_pdl)]
fixed = kfn.fixed_launch((8, 1, 1), (128, 1, 1), 0, types, values, 3)
ptrs = list(values[:3])
cases.append((f"tilewright FixedCudaLaunch, three pointers written ({path})", lambda: fixed(ptrs, 0)))
one_call = kfn.fixed_launch((8, 1, 1), (128, 1, 1), 0, types, values, 3)  # (its own: the row above keeps its path)
if one_call.use_compiled_launch(True):  # (loaded whatever TILEWRIGHT_COMPILED_LAUNCH says, for this row)
    one_call.set_stream_lookup(lambda dev: 0, 0, __import__("threading").get_ident())
    cases.append(("tilewright compiled go_current (stream lookup, pointers, cuLaunchKernel in one C call)",
                  lambda: one_call.current(ptrs)))
try:
    from cuda.core import Device, LaunchConfig, ObjectCode, Stream, launch
except ImportError:
    print("cuda.core not installed: skipped", file=sys.stderr)
else:
    dev = Device(0)
    dev.set_current()
    stream = dev.create_stream()
    kernel = ObjectCode.from_cubin(b"\x7fELF" + bytes(100)).get_kernel("k")
    cfg = LaunchConfig(grid=(8, 1, 1), block=(128, 1, 1), shmem_size=0)
    i32 = np.int32(1024)
    def core_prepared():
        launch(stream, cfg, kernel, 1 << 32, 2 << 32, 3 << 32, i32)
    handle = int(stream.handle)
    def core_per_call():
        s = Stream.from_handle(handle)
        launch(s, LaunchConfig(grid=(8, 1, 1), block=(128, 1, 1), shmem_size=0), kernel,
               1 << 32, 2 << 32, 3 << 32, np.int32(1024))
    streams, configs, convert = {}, {}, (int, int, int, np.int32)
    def core_cached(grid=(8, 1, 1), block=(128, 1, 1), shared=0, raw=handle, values=values):
        # what runtime.launcher would do: torch hands over a raw stream handle and the grid can
        # change per call, so both are looked up in caches; scalars become numpy scalars of their type
        s = streams.get(raw)
        if s is None:
            s = streams[raw] = Stream.from_handle(raw)
        c = configs.get((grid, block, shared))
        if c is None:
            c = configs[(grid, block, shared)] = LaunchConfig(grid=grid, block=block, shmem_size=shared)
        launch(s, c, kernel, *[f(v) for f, v in zip(convert, values)])
    cases += [("cuda.core launch (stream and LaunchConfig prepared)", core_prepared),
              ("cuda.core launch (cached Stream per handle, cached LaunchConfig, scalars converted)", core_cached),
              ("cuda.core launch (Stream.from_handle + LaunchConfig per call)", core_per_call)]
"""

_HIP = r"""
import ctypes, sys, time
sys.path.insert(0, ROOT)
from tilewright.runtime import hip_runtime as hr
from tilewright.runtime.launch_args import ArgPacker
kfn = hr.load_function(b"\x7fELF" + bytes(100), "k", 0)
types, values = ("ptr", "ptr", "ptr", "i32"), (1 << 32, 2 << 32, 3 << 32, 1024)
def ours():
    kfn.launch((8, 1, 1), (128, 1, 1), 0, 0, types, values)
cases = [("tilewright HipFunction.launch (ctypes)", ours)]
try:
    from hip import hip
except ImportError:
    print("hip-python not installed: skipped", file=sys.stderr)
else:
    hip.hipInit(0)
    _, mod = hip.hipModuleLoadData(b"\x7fELF" + bytes(100))
    _, f = hip.hipModuleGetFunction(mod, b"k")
    packer = ArgPacker(types)
    ok = hip.hipError_t.hipSuccess
    def hp_packed():
        (err,) = hip.hipModuleLaunchKernel(f, 8, 1, 1, 128, 1, 1, 0, None, packer.pack_address(values), None)
        if err != ok:
            raise RuntimeError(err)
    def hp_extra():
        (err,) = hip.hipModuleLaunchKernel(f, 8, 1, 1, 128, 1, 1, 0, None, None,
                                           (ctypes.c_void_p(1 << 32), ctypes.c_void_p(2 << 32),
                                            ctypes.c_void_p(3 << 32), ctypes.c_int(1024)))
        if err != ok:
            raise RuntimeError(err)
    cases += [("hip-python hipModuleLaunchKernel (our packed void**)", hp_packed),
              ("hip-python hipModuleLaunchKernel (ctypes values in extra)", hp_extra)]
"""

_TIME = r"""
for name, call in cases:
    for _ in range(2000):
        call()
    best = float("inf")
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        for _ in range(N):
            call()
        best = min(best, (time.perf_counter() - t0) / N)
    print(f"| {name} | {best * 1e6:.2f} |", flush=True)
"""


def _build(tmp: str) -> None:
    cc = shutil.which("clang") or shutil.which("clang-19") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        sys.exit("needs a C compiler (clang or gcc) to build the stub drivers")
    subprocess.check_call([cc, "-O2", "-shared", "-fPIC", "-o", os.path.join(tmp, "libcuda.so.1"),
                           os.path.join(STUBS, "cudastub.c"), "-ldl"])
    os.symlink("libcuda.so.1", os.path.join(tmp, "libcuda.so"))
    subprocess.check_call([cc, "-O2", "-shared", "-fPIC", "-o", os.path.join(tmp, "libamdhip64.so"),
                           os.path.join(STUBS, "hipstub.c")])


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        _build(tmp)
        env = dict(os.environ, LD_LIBRARY_PATH=tmp + os.pathsep + os.environ.get("LD_LIBRARY_PATH", ""),
                   TILEWRIGHT_HIP_RUNTIME_LIB=os.path.join(tmp, "libamdhip64.so"))
        print(f"| launch layer (stub driver, 3 pointers + int32) | host us per launch (best of {REPEATS} x {N}) |")
        print("|---|---|", flush=True)
        for body in (_CUDA, _HIP):
            code = f"ROOT = {ROOT!r}\nN = {N}\nREPEATS = {REPEATS}\n" + body + _TIME
            subprocess.run([sys.executable, "-c", code], env=env, check=True)


if __name__ == "__main__":
    main()
