"""``TILEWRIGHT_LAUNCH=ctypes``: a ``FixedCudaLaunch`` calls libcuda's ``cuLaunchKernelEx`` through
ctypes with its arguments made once.  Against the stub driver (``bench/stubs/cudastub.c``, built
here) both ways must send, launch after launch, the same grid, block, shared bytes, function,
stream (written into the config only when it changes, so a change back must still arrive) and
argument bytes (the new leading pointers, the fixed scalars and descriptor); a refused launch and a
stream given as a ``CUstream`` object go through cuda-bindings.  Skipped without a C compiler or
cuda-bindings."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CC = shutil.which("clang") or shutil.which("clang-19") or shutil.which("cc") or shutil.which("gcc")

pytestmark = pytest.mark.skipif(CC is None, reason="needs a C compiler to build the stub driver")

_CHECK = r"""
import ctypes, struct, sys
sys.path.insert(0, ROOT)
from tilewright.runtime import cuda_driver as rt
stub = ctypes.CDLL(STUB)
fn = rt.load_function(b"\x7fELF" + bytes(100), "k", 0)
types = ("ptr", "ptr", "i32", "f32", "i64", "f64", "tmap")
rest = [-5, 1.5, -(1 << 40), 0.25, bytes(range(128))]
fl = fn.fixed_launch((3, 2, 1), (128, 1, 1), 4096, types, [0x7F0000001000, 0x7F0000002000] + rest, 2)
assert isinstance(fl.call, rt._CtypesLaunch) == (MODE == "ctypes"), fl.call
sizes = {"ptr": 8, "i32": 4, "f32": 4, "i64": 8, "f64": 8, "tmap": 128}
codes = {"ptr": "<Q", "i32": "<i", "f32": "<f", "i64": "<q", "f64": "<d"}


def sent():
    grid = list((ctypes.c_uint * 8).in_dll(stub, "last_launch"))[:7]
    params = ctypes.c_void_p.in_dll(stub, "last_params").value
    ptrs = (ctypes.c_void_p * len(types)).from_address(params)
    args = [ctypes.string_at(p, sizes[t]) for p, t in zip(ptrs, types)]
    return (grid, ctypes.c_void_p.in_dll(stub, "last_stream").value or 0,
            ctypes.c_void_p.in_dll(stub, "last_function").value, args)


def want(ptrs, stream):
    vals = list(ptrs) + rest
    args = [v if t == "tmap" else struct.pack(codes[t], v) for t, v in zip(types, vals)]
    return ([3, 2, 1, 128, 1, 1, 4096], stream, int(fn.handle), args)


ex = ctypes.c_ulonglong.in_dll(stub, "ex_launches")
calls = [((0x7F0000011000, 0x7F0000012000), 0x1234), ((0x7F0000021000, 0x7F0000022000), 0x1234),
         ((0x7F0000031000, 0x7F0000032000), 0), ((0x7F0000041000, 0x7F0000042000), 0x55),
         ((0x7F0000051000, 0x7F0000052000), 0x1234)]
for ptrs, stream in calls:
    before = ex.value
    fl(list(ptrs), stream)
    assert sent() == want(ptrs, stream), (sent(), want(ptrs, stream))
    assert ex.value - before == (MODE == "ctypes"), "launched through the other entry point"
# a refused launch: made again through CudaFunction.launch (cuLaunchKernel, which the stub accepts)
ctypes.c_int.in_dll(stub, "ex_refuse").value = 1
before = ex.value
fl([0x7F0000061000, 0x7F0000062000], 0x66)
assert sent() == want((0x7F0000061000, 0x7F0000062000), 0x66), sent()
assert ex.value == before
ctypes.c_int.in_dll(stub, "ex_refuse").value = 0
# a stream object of the caller's: cuda-bindings converts it; the next int stream still arrives
from cuda.bindings import driver
fl([0x7F0000071000, 0x7F0000072000], driver.CUstream(0x4321))
assert sent() == want((0x7F0000071000, 0x7F0000072000), 0x4321), sent()
fl([0x7F0000081000, 0x7F0000082000], 0x66)
assert sent() == want((0x7F0000081000, 0x7F0000082000), 0x66), sent()
print("ok")
"""


@pytest.fixture(scope="module")
def stub(tmp_path_factory):
    d = tmp_path_factory.mktemp("stub")
    subprocess.check_call([CC, "-O1", "-shared", "-fPIC", "-o", str(d / "libcuda.so.1"),
                           os.path.join(ROOT, "bench", "stubs", "cudastub.c"), "-ldl"])
    return d


@pytest.mark.parametrize("mode", ["bindings", "ctypes"])
def test_fixed_launch_sends_the_same_either_way(stub, mode):
    pytest.importorskip("cuda.bindings")
    env = dict(os.environ, LD_LIBRARY_PATH=f"{stub}{os.pathsep}{os.environ.get('LD_LIBRARY_PATH', '')}",
               TILEWRIGHT_LAUNCH=mode)
    env.pop("CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM", None)
    code = f"ROOT = {ROOT!r}\nSTUB = {str(stub / 'libcuda.so.1')!r}\nMODE = {mode!r}\n" + _CHECK
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr


def test_launch_mode_is_read_from_the_environment(monkeypatch):
    from tilewright.errors import ArgumentError
    from tilewright.runtime import cuda_driver

    monkeypatch.delenv("TILEWRIGHT_LAUNCH", raising=False)
    assert cuda_driver.launch_mode() == "bindings"
    monkeypatch.setenv("TILEWRIGHT_LAUNCH", " CTypes ")
    assert cuda_driver.launch_mode() == "ctypes"
    monkeypatch.setenv("TILEWRIGHT_LAUNCH", "cffi")
    with pytest.raises(ArgumentError, match="TILEWRIGHT_LAUNCH"):
        cuda_driver.launch_mode()
