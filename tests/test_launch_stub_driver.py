"""The CUDA and HIP launch layers end to end on a machine without a GPU: ``runtime/cuda_driver.py``
(through cuda.bindings) and ``runtime/hip_runtime.py`` (through ctypes) launch into stub drivers
(``bench/stubs/*.c``, built here with any C compiler) that record what arrived: grid, block, shared
bytes, stream and every argument's bytes.  Skipped without a C compiler (and, for CUDA, without
cuda-bindings)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STUBS = os.path.join(ROOT, "bench", "stubs")
CC = shutil.which("clang") or shutil.which("clang-19") or shutil.which("cc") or shutil.which("gcc")

pytestmark = pytest.mark.skipif(CC is None, reason="needs a C compiler to build the stub drivers")

_CHECK = r"""
import ctypes, struct, sys
sys.path.insert(0, ROOT)
from tilewright.runtime import {module} as rt
stub = ctypes.CDLL(STUB)
fn = rt.load_function(b"\x7fELF" + bytes(100), "k", 0)
typed, calls = getattr(fn, "typed_launch", None), []
if typed is not None:  # (TILEWRIGHT_TYPED_LAUNCH: counted, so the check below knows it launched, not the fallback)
    fn.typed_launch = lambda *a: (calls.append(1), typed(*a))[1]
types = ("ptr", "i32", "f32", "ptr", "i64", "f64", "tmap")
values = (0x7F0000001000, -5, 1.5, 0x7F0000002000, -(1 << 40), 0.25, bytes(range(128)))
fn.launch((3, 2, 1), (128, 1, 1), 4096, 0x1234, types, values)
assert len(calls) == (typed is not None)
grid = list((ctypes.c_uint * 8).in_dll(stub, "last_launch"))[:7]
params = ctypes.c_void_p.in_dll(stub, "last_params").value
stream = ctypes.c_void_p.in_dll(stub, "last_stream").value
ptrs = (ctypes.c_void_p * len(types)).from_address(params)
sizes = {{"ptr": 8, "i32": 4, "f32": 4, "i64": 8, "f64": 8, "tmap": 128}}
got = [ctypes.string_at(p, sizes[t]) for p, t in zip(ptrs, types)]
want = [struct.pack("<Q", values[0]), struct.pack("<i", -5), struct.pack("<f", 1.5), struct.pack("<Q", values[3]),
        struct.pack("<q", values[4]), struct.pack("<d", 0.25), values[6]]
assert grid == [3, 2, 1, 128, 1, 1, 4096], grid
assert stream == 0x1234, stream
assert got == want, (got, want)
assert all(p % min(sizes[t], 8) == 0 for p, t in zip(ptrs, types))  # each argument naturally aligned
print("ok")
"""


@pytest.fixture(scope="module")
def stubs(tmp_path_factory):
    d = tmp_path_factory.mktemp("stubs")
    subprocess.check_call([CC, "-O1", "-shared", "-fPIC", "-o", str(d / "libcuda.so.1"),
                           os.path.join(STUBS, "cudastub.c"), "-ldl"])
    subprocess.check_call([CC, "-O1", "-shared", "-fPIC", "-o", str(d / "libamdhip64.so"),
                           os.path.join(STUBS, "hipstub.c")])
    return d


def _run(module: str, stub: str, env: dict) -> str:
    code = f"ROOT = {ROOT!r}\nSTUB = {stub!r}\n" + _CHECK.format(module=module)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.mark.parametrize("typed", ["0", "1"])  # TILEWRIGHT_TYPED_LAUNCH: cuda-bindings' typed launch_kernel
def test_cuda_launch_reaches_the_driver_with_every_argument(stubs, typed):
    pytest.importorskip("cuda.bindings")
    if typed:
        pytest.importorskip("cuda.bindings._v2.driver")
    env = dict(os.environ, LD_LIBRARY_PATH=f"{stubs}{os.pathsep}{os.environ.get('LD_LIBRARY_PATH', '')}",
               TILEWRIGHT_TYPED_LAUNCH=typed, TILEWRIGHT_COMPILED_LAUNCH="0")  # (compiled: test_s13_compiled_launch)
    assert _run("cuda_driver", str(stubs / "libcuda.so.1"), env).strip() == "ok"


def test_hip_launch_reaches_the_runtime_with_every_argument(stubs):
    env = dict(os.environ, TILEWRIGHT_HIP_RUNTIME_LIB=str(stubs / "libamdhip64.so"))
    assert _run("hip_runtime", str(stubs / "libamdhip64.so"), env).strip() == "ok"


_FIXED = r"""
import ctypes, struct, sys
sys.path.insert(0, ROOT)
from tilewright.runtime import cuda_driver as rt
stub = ctypes.CDLL(STUB)
fn = rt.load_function(b"\x7fELF" + bytes(100), "k", 0)
types = ("ptr", "ptr", "i32", "f32")
launch = fn.fixed_launch((5, 1, 2), (256, 1, 1), 1024, types, (0x7F0000001000, 0x7F0000002000, 9, 0.5), 2)
print(type(launch._typed).__name__)  # the driver call in use


def check(pairs):
    for a, b in pairs:
        ctypes.c_void_p.in_dll(stub, "last_params").value = None
        launch([a, b], 0x77)
        grid = list((ctypes.c_uint * 8).in_dll(stub, "last_launch"))[:7]
        ptrs = (ctypes.c_void_p * 4).from_address(ctypes.c_void_p.in_dll(stub, "last_params").value)
        got = [ctypes.string_at(p, n) for p, n in zip(ptrs, (8, 8, 4, 4))]
        assert grid == [5, 1, 2, 256, 1, 1, 1024], grid
        assert ctypes.c_void_p.in_dll(stub, "last_stream").value == 0x77
        assert got == [struct.pack("<Q", a), struct.pack("<Q", b), struct.pack("<i", 9), struct.pack("<f", 0.5)], got
        if launch._typed is not None:  # a typed call that raises (a driver error): the general path launches
            def refuse(*args):
                raise RuntimeError("refused")
            launch._set_call(refuse)


check(((0x7F0000003000, 0x7F0000004000), (0x7F0000005000, 0x7F0000006000)))
# switched at run time (bench/launch_overhead.py --paths both): each way delivers the same bytes
have_typed = rt.typed_launch_call() is not None
for on in (False, True, False):
    assert launch.use_typed_launch(on) == (on and have_typed)
    assert (launch._typed is not None) == (on and have_typed)
    check(((0x7F0000007000 + on * 0x100, 0x7F0000008000),))
    assert fn.use_typed_launch(on) == (on and have_typed)
    ctypes.c_void_p.in_dll(stub, "last_params").value = None
    fn.launch((5, 1, 2), (256, 1, 1), 1024, 0x77, types, (0x7F0000009000, 0x7F000000A000, 9, 0.5))
    ptrs = (ctypes.c_void_p * 4).from_address(ctypes.c_void_p.in_dll(stub, "last_params").value)
    assert ctypes.string_at(ptrs[0], 8) == struct.pack("<Q", 0x7F0000009000)
print("ok")
"""


@pytest.mark.parametrize("typed", ["", "0", "1"])
def test_fixed_launch_reaches_the_driver(stubs, typed):
    """``FixedCudaLaunch`` (the ops' packed launches) with cuda-bindings' cuLaunchKernel and, with
    TILEWRIGHT_TYPED_LAUNCH=1 (unset: cuda_driver.TYPED_LAUNCH_DEFAULT), its typed launch_kernel
    (where the module exists): the same grid, stream and argument bytes arrive, the new pointers of
    each launch among them."""
    from tilewright.runtime.cuda_driver import TYPED_LAUNCH_DEFAULT

    pytest.importorskip("cuda.bindings")
    env = dict(os.environ, LD_LIBRARY_PATH=f"{stubs}{os.pathsep}{os.environ.get('LD_LIBRARY_PATH', '')}",
               TILEWRIGHT_TYPED_LAUNCH=typed, TILEWRIGHT_COMPILED_LAUNCH="0")  # (compiled: test_s13_compiled_launch)
    code = f"ROOT = {ROOT!r}\nSTUB = {str(stubs / 'libcuda.so.1')!r}\n" + _FIXED
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    used, ok = proc.stdout.split()
    assert ok == "ok"
    if typed == "0" or (not typed and not TYPED_LAUNCH_DEFAULT):
        assert used == "NoneType"
    else:  # the typed call where cuda-bindings has it
        try:
            from cuda.bindings._v2.driver import launch_kernel  # noqa: F401
        except ImportError:
            assert used == "NoneType"
        else:
            assert used != "NoneType"


_WHOLE_PATH = r"""
import ctypes, pickle, struct, sys
sys.path.insert(0, ROOT)
import torch
from tilewright.runtime import cuda_driver
from tilewright.runtime.launcher import Launcher
stub = ctypes.CDLL(STUB)
spec = pickle.load(open(SPEC, "rb"))

class FakeCuda(torch.Tensor):  # CPU memory the launcher takes for cuda:0 (the stub never reads it)
    __torch_function__ = torch._C._disabled_torch_function_impl
    is_cuda = True
    def get_device(self):
        return 0

la = Launcher(spec, cuda_driver)
a, b = torch.randn(40, 64).as_subclass(FakeCuda), torch.empty(40, 64).as_subclass(FakeCuda)
for rows in (40, 17, 40):  # a repeat call, a new size, the first size again
    x, y = (t[:rows].as_subclass(FakeCuda) for t in (a, b))  # a slice is a plain tensor again
    la.launch([x, y, 2.5], stream=0x99)
    grid = list((ctypes.c_uint * 8).in_dll(stub, "last_launch"))[:7]
    params = ctypes.c_void_p.in_dll(stub, "last_params").value
    ptrs = (ctypes.c_void_p * 4).from_address(params)
    got = [ctypes.string_at(p, n) for p, n in zip(ptrs, (8, 8, 4, 4))]
    assert grid == [-(-rows // 16), 1, 1, 64, 1, 1, 0], grid
    assert ctypes.c_void_p.in_dll(stub, "last_stream").value == 0x99
    assert got == [struct.pack("<Q", x.data_ptr()), struct.pack("<Q", y.data_ptr()), struct.pack("<f", 2.5),
                   struct.pack("<i", rows)], got
print("ok")
"""


def test_whole_launcher_path_reaches_the_driver(stubs, tmp_path):
    """runtime/launcher.py's fast path (torch tensors of the expected dtype and shape) through
    cuda_driver into the stub: grid from the dynamic size, stream, and every argument's bytes."""
    pytest.importorskip("cuda.bindings")
    pytest.importorskip("torch")
    import pickle

    import tilewright
    import tilewright.language as T

    m = T.dynamic("m")

    @T.prim_func
    def scale(A: T.Tensor((m, 64), "float32"), B: T.Tensor((m, 64), "float32"), s: T.float32):
        with T.Kernel(T.ceildiv(m, 16), threads=64) as bx:
            for i, j in T.Parallel(16, 64):
                if bx * 16 + i < m:
                    B[bx * 16 + i, j] = A[bx * 16 + i, j] * s

    spec = tilewright.compile(scale, target="cuda -arch=sm_90a").spec  # NVRTC here, not beside the stub
    with open(tmp_path / "spec.pkl", "wb") as f:
        pickle.dump(spec, f)
    env = dict(os.environ, LD_LIBRARY_PATH=f"{stubs}{os.pathsep}{os.environ.get('LD_LIBRARY_PATH', '')}")
    code = f"ROOT = {ROOT!r}\nSTUB = {str(stubs / 'libcuda.so.1')!r}\nSPEC = {str(tmp_path / 'spec.pkl')!r}\n"
    proc = subprocess.run([sys.executable, "-c", code + _WHOLE_PATH], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr
