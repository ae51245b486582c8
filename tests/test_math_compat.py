"""TileLang's ``T.isfinite``, ``T.any_of`` / ``T.all_of``, ``tilelang.math`` and ``T.dp4a``'s
argument errors: kernels on the tile interpreter and the emulator for sm_90a and gfx942 against
NumPy references with outputs poisoned first; generated CUDA through NVRTC and HIP through clang.
"""

from __future__ import annotations

import numpy as np
import pytest
from toolchains import needs_hip_compiler, needs_nvrtc

import tilewright
import tilewright.language as T
from tilewright.errors import CompileError

CUDA, GFX942 = "cuda -arch=sm_90a", "hip -arch=gfx942"
BACKENDS = [("interpret", None), (CUDA, "emulator"), (GFX942, "emulator")]
BACKEND_IDS = ["interpret", "emulator-sm_90a", "emulator-gfx942"]


@pytest.fixture
def rng():
    return np.random.default_rng(3)


def isfinite_kernel(N, dtype):
    @T.prim_func
    def main(X: T.Tensor((N,), dtype), Y: T.Tensor((N,), "int32")):
        with T.Kernel(1, threads=128):
            for i in T.Parallel(N):
                Y[i] = T.if_then_else(T.isfinite(X[i]), 1, 0)

    return main


@pytest.mark.parametrize("target,backend", BACKENDS, ids=BACKEND_IDS)
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_isfinite(rng, dtype, target, backend):
    x = rng.standard_normal(128)
    x[:6] = [np.inf, -np.inf, np.nan, 1e300, -1e300, 0.0]  # 1e300: finite in float64 only
    with np.errstate(over="ignore"):
        x = x.astype(dtype)
    y = np.full(128, 7, np.int32)
    tilewright.compile(isfinite_kernel(128, dtype), target=target, execution_backend=backend)(x, y)
    assert np.array_equal(y, np.isfinite(x).astype(np.int32))


@needs_nvrtc
def test_isfinite_uses_the_cuda_intrinsic_and_keeps_doubles(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path))
    k = tilewright.compile(isfinite_kernel(128, "float64"), target=CUDA)
    assert k.get_code_object()[:4] == b"\x7fELF"
    src = k.get_kernel_source()
    assert "isfinite(" in src and "isfinite((float)" not in src
    assert "isfinite(" in tilewright.lower(isfinite_kernel(128, "float32"), target=CUDA).kernel_source


# ============================================================================================
# T.any_of / T.all_of


def masked_sum_kernel(kind, where):
    fn = T.any_of if kind == "any" else T.all_of

    @T.prim_func
    def main(Mask: T.Tensor((4, 8, 3), "bool"), A: T.Tensor((4, 8, 128), "float32"), B: T.Tensor((4, 128), "float32")):
        with T.Kernel(4, threads=128) as bx:
            acc = T.alloc_fragment((128,), "float32")
            m_s = T.alloc_shared((3,), "bool")
            m_l = T.alloc_local((3,), "bool")
            T.clear(acc)
            for k in T.serial(8):
                for i in T.serial(3):
                    m_s[i] = Mask[bx, k, i]
                    m_l[i] = Mask[bx, k, i]
                if fn(Mask[bx, k, :]) if where == "global" else fn(m_s) if where == "shared" else fn(m_l[0:3]):
                    for j in T.Parallel(128):
                        acc[j] += A[bx, k, j]
            T.copy(acc, B[bx, 0])

    return main


@pytest.mark.parametrize("target,backend", BACKENDS, ids=BACKEND_IDS)
@pytest.mark.parametrize("where", ["global", "shared", "local"])
@pytest.mark.parametrize("kind", ["any", "all"])
def test_any_of_all_of(rng, kind, where, target, backend):
    mask = rng.random((4, 8, 3)) < 0.45
    mask[0, 0] = True  # all true somewhere, all false somewhere
    mask[0, 1] = False
    a = rng.standard_normal((4, 8, 128)).astype(np.float32)
    b = np.full((4, 128), np.nan, np.float32)
    tilewright.compile(masked_sum_kernel(kind, where), target=target, execution_backend=backend)(mask, a, b)
    sel = mask.any(-1) if kind == "any" else mask.all(-1)
    np.testing.assert_allclose(b, (a.astype(np.float64) * sel[..., None]).sum(1), rtol=1e-5, atol=1e-5)


def test_any_of_needs_a_constant_region():
    with pytest.raises(CompileError, match=r"T.any_of needs a region of compile-time size; Mask has extents"):
        @T.prim_func
        def main(Mask: T.Tensor((4, 64), "bool"), n: T.int32, B: T.Tensor((4,), "int32")):
            with T.Kernel(4, threads=32) as bx:
                if T.any_of(Mask[bx, 0:n]):
                    B[bx] = 1

    with pytest.raises(CompileError, match=r"T.all_of over 8192 elements of M: at most 4096"):
        @T.prim_func
        def big(M: T.Tensor((8192,), "bool"), B: T.Tensor((4,), "int32")):
            with T.Kernel(4, threads=32) as bx:
                if T.all_of(M):
                    B[bx] = 1


@needs_nvrtc
def test_any_of_compiles_with_nvrtc(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path))
    for kind in ("any", "all"):
        assert tilewright.compile(masked_sum_kernel(kind, "shared"), target=CUDA).get_code_object()[:4] == b"\x7fELF"


@needs_hip_compiler
def test_any_of_compiles_for_gfx942(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path))
    assert tilewright.compile(masked_sum_kernel("all", "global"), target=GFX942).get_code_object()[:4] == b"\x7fELF"


# ============================================================================================
# tilelang.math and T.dp4a's errors


def test_tilelang_math_module():
    assert [tilewright.math.next_power_of_2(x) for x in (1, 2, 3, 5, 64, 65, 1000)] == [1, 2, 4, 8, 64, 128, 1024]
    assert tilewright.math.cdiv(10, 4) == 3


@pytest.mark.parametrize("a,b,c,what", [("float16", "float16", "int32", "int8 inputs"),
                                        ("int8", "int8", "float32", "int32 accumulator"),
                                        ("uint8", "uint8", "int32", "int8 inputs"),
                                        ("int8", "float16", "int32", "int8 inputs")])
def test_dp4a_argument_errors(a, b, c, what):
    with pytest.raises(ValueError, match=f"dp4a requires (an )?{what}"):
        @T.prim_func
        def main(A: T.Tensor((4,), a), B: T.Tensor((4,), b), C: T.Tensor((1,), c)):
            with T.Kernel(1, threads=32):
                T.dp4a(A, B, C)
