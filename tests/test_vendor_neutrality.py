"""Nothing on the AMD path imports or loads a CUDA library, and the CUDA path loads nothing of HIP."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

AMD_SCRIPT = r"""
import sys
import numpy as np
import tilewright
from tilewright.kernels import matmul
k = tilewright.compile(matmul(64, 64, 64, 64, 64, 32), out_idx=[-1], target="hip -arch=gfx942",
                       execution_backend="emulator")
k(np.ones((64, 64), np.float16), np.ones((64, 64), np.float16))
k.get_kernel_source()
try:
    k.get_code_object()  # the HIP toolchain (clang / hiprtc), when one is installed
except tilewright.ToolchainError:
    pass
bad = sorted(m for m in sys.modules if m.split(".")[0] in ("cuda", "nvidia", "cupy") or "nvrtc" in m
             or "cuda_driver" in m)
libs = open("/proc/self/maps").read()
print("MODULES", bad)
print("LIBS", any(name in libs for name in ("libcuda.so", "libnvrtc", "libcudart")))
"""

CUDA_SCRIPT = r"""
import sys
import tilewright
from tilewright.kernels import matmul
k = tilewright.lower(matmul(64, 64, 64, 64, 64, 32), target="cuda -arch=sm_90a")
from tilewright.codegen.cuda import print_cuda
print_cuda(k)
bad = sorted(m for m in sys.modules if "hip" in m.split(".")[-1] or m.startswith("rocm"))
libs = open("/proc/self/maps").read()
print("MODULES", bad)
print("LIBS", any(name in libs for name in ("libamdhip64", "libhiprtc")))
"""


def _run(script: str) -> str:
    env = dict(os.environ, PYTHONPATH=ROOT, TILEWRIGHT_TARGET="interpret", TILEWRIGHT_DISABLE_CACHE="1")
    return subprocess.check_output([sys.executable, "-c", script], env=env, text=True, timeout=300)


def test_amd_path_loads_nothing_from_cuda():
    out = _run(AMD_SCRIPT)
    assert "MODULES []" in out, out
    assert "LIBS False" in out, out


def test_cuda_lowering_loads_nothing_from_hip():
    out = _run(CUDA_SCRIPT)
    assert "MODULES []" in out, out
    assert "LIBS False" in out, out
