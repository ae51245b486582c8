"""``T.alloc_var`` in the generated CUDA and HIP source: a scalar local (``int off;``, read and written as
``off``), not a one-element array (``__align__(16) int off[1];`` with ``off[0]`` everywhere, as before);
the source compiles with NVRTC and clang where they are installed, and the kernel's answers (the
emulator for each target, outputs poisoned) match float64.  The other locals (fragments, staging
registers) stay arrays."""

from __future__ import annotations

import re

import numpy as np
import pytest
from toolchains import hip_compiler_available, nvrtc_available

import tilewright
import tilewright.language as T

N = 128
TARGETS = ["cuda -arch=sm_90a", "cuda -arch=sm_80", "hip -arch=gfx942", "hip -arch=gfx1100"]
VARS = {"off": "int", "scale": "float", "acc": "float", "h": None}  # h: half's name differs by vendor


def _kernel():
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), S: T.Tensor((2,), "int32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=128):
            off = T.alloc_var("int32", init=S[0])
            scale = T.alloc_var("float32")
            h = T.alloc_var("float16", init=1.5)
            acc = T.alloc_var("float32", init=0.0)
            scale = T.cast(S[1], "float32") * 0.5
            off = off + 1
            for k in T.serial(4):
                acc = acc + A[k]
            for i in T.Parallel(N):
                B[i] = A[(i + off) % N] * scale + T.cast(h, "float32") + acc

    return main


def _body(source):
    return source.split('extern "C" __global__')[1]


@pytest.mark.parametrize("target", TARGETS)
def test_alloc_var_is_a_scalar_local(target):
    k = tilewright.compile(_kernel(), target=target, execution_backend="emulator")
    body = _body(k.get_kernel_source())
    for name, ctype in VARS.items():
        decl = re.findall(rf"^\s*(?:__align__\(16\) )?([\w: ]+?) {name}(\[\d+\])?;$", body, re.M)
        assert len(decl) == 1 and decl[0][1] == "", (name, decl)
        assert ctype is None or decl[0][0] == ctype, (name, decl)
        assert not re.search(rf"\b{name}\[", body), name  # read and written by its name
    assert re.search(r"__align__\(16\) float \w+\[\d+\];", body)  # the staging registers: still arrays

    rng = np.random.default_rng(3)
    a = rng.standard_normal(N).astype(np.float32)
    s = np.array([rng.integers(0, N), rng.integers(1, 9)], np.int32)
    b = np.full(N, np.nan, np.float32)
    k(a, s, b)
    a64 = a.astype(np.float64)
    want = a64[(np.arange(N) + s[0] + 1) % N] * (s[1] * 0.5) + 1.5 + a64[:4].sum()
    np.testing.assert_allclose(b, want, rtol=1e-6, atol=1e-6)


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC wheel not installed")
def test_cuda_source_compiles(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path))
    for target in TARGETS[:2]:
        assert tilewright.compile(_kernel(), target=target).get_code_object()[:4] == b"\x7fELF"


@pytest.mark.skipif(not hip_compiler_available(), reason="no HIP device compiler (clang-19)")
def test_hip_source_compiles(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path))
    for target in TARGETS[2:]:
        assert tilewright.compile(_kernel(), target=target).get_code_object()[:4] == b"\x7fELF"
