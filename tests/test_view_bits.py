"""``T.view(buf, shape, dtype=...)`` and ``T.reinterpret``: the same bits read as another type (same
width, narrower: parts of an element, wider: consecutive elements joined, little-endian), on the
interpreter, the emulator of the CUDA and HIP lowerings, the compilers and an NVIDIA GPU when there is
one.  References are NumPy views of the same bytes; outputs are poisoned first."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch
from toolchains import needs_hip_compiler, needs_nvrtc

import tilewright
import tilewright.language as T
from tilewright.errors import CompileError

BACKENDS = {
    "interpret": {"target": "interpret"},
    "emulator-cuda": {"target": "cuda -arch=sm_90a", "execution_backend": "emulator"},
    "emulator-hip": {"target": "hip -arch=gfx942", "execution_backend": "emulator"},
}
CASES = [  # (shape, dtype, view shape, view dtype)
    ((16, 32), "float32", (16, 64), "bfloat16"),  # narrowing
    ((16, 64), "bfloat16", (16, 32), "float32"),  # widening
    ((16, 32), "float32", (16, 32), "int32"),  # same width
    ((16, 16), "float16", (16, 32), "uint8"),
    ((16, 32), "uint8", (16, 8), "float32"),
    ((8, 8), "float64", (8, 16), "uint32"),
]


def _np(dtype):
    return np.dtype(getattr(ml_dtypes, dtype)) if dtype == "bfloat16" else np.dtype(dtype)


def _random_bits(rng, shape, dtype):
    """Random finite values (as bytes: any bit pattern of the view must survive)."""
    if dtype == "uint8":
        return rng.integers(0, 256, shape).astype(np.uint8)
    return rng.standard_normal(shape).astype(_np(dtype))


def view_copy_kernel(shape, dtype, new_shape, new_dtype):
    @T.prim_func
    def view_copy(A: T.Tensor(shape, dtype), B: T.Tensor(new_shape, new_dtype)):
        with T.Kernel(1, threads=128):
            A_shared = T.alloc_shared(shape, dtype)
            A_view = T.view(A_shared, new_shape, dtype=new_dtype)
            T.copy(A, A_shared)
            T.copy(A_view, B)

    return view_copy


def _poison(shape, dtype):
    """Every byte 0xA5."""
    return np.full(int(np.prod(shape)) * _np(dtype).itemsize, 0xA5, np.uint8).view(_np(dtype)).reshape(shape)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("case", CASES, ids=[f"{c[1]}-as-{c[3]}" for c in CASES])
def test_copy_through_a_dtype_view_keeps_the_bits(case, backend):
    shape, dtype, new_shape, new_dtype = case
    rng = np.random.default_rng(hash(case) % 2**32)
    kernel = tilewright.compile(view_copy_kernel(*case), **BACKENDS[backend])
    a = _random_bits(rng, shape, dtype)
    b = _poison(new_shape, new_dtype)
    kernel(a, b)
    np.testing.assert_array_equal(b.view(np.uint8), a.view(np.uint8).reshape(b.view(np.uint8).shape))


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_element_reads_and_wide_writes_through_views(backend):
    """Read the two bfloat16 halves of each float32 (arithmetic on them), and write float32 values
    through a float32 view of a bfloat16 tile."""

    @T.prim_func
    def halves(A: T.Tensor((16, 32), "float32"), S: T.Tensor((16, 32), "float32"),
               W: T.Tensor((16, 64), "bfloat16")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((16, 32), "float32")
            W_s = T.alloc_shared((16, 64), "bfloat16")
            T.copy(A, A_s)
            h = T.view(A_s, (16, 64), dtype="bfloat16")
            w = T.view(W_s, (16, 32), dtype="float32")
            for i, j in T.Parallel(16, 32):
                S[i, j] = T.cast(h[i, 2 * j], "float32") + T.cast(h[i, 2 * j + 1], "float32")
                w[i, j] = A_s[i, j] * 2.0
            T.copy(W_s, W)

    rng = np.random.default_rng(11)
    a = rng.standard_normal((16, 64)).astype(_np("bfloat16")).view(np.float32)  # finite halves
    s = np.full((16, 32), np.nan, np.float32)
    w = np.full((16, 64), np.nan, _np("bfloat16"))
    tilewright.compile(halves, **BACKENDS[backend])(a, s, w)
    parts = a.view(_np("bfloat16")).astype(np.float64)
    np.testing.assert_array_equal(s, (parts[:, 0::2] + parts[:, 1::2]).astype(np.float32))
    np.testing.assert_array_equal(w.view(np.float32), a * 2)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_reinterpret_scalars(backend):
    @T.prim_func
    def bits(A: T.Tensor((128,), "float32"), U: T.Tensor((128,), "uint32"), F: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            for i in T.Parallel(128):
                u = T.reinterpret(A[i], T.uint32)
                U[i] = u ^ T.uint32(0x80000000)  # flip the sign bit
                F[i] = T.reinterpret(T.float32, u & T.uint32(0x7FFFFFFF))  # TVM's argument order: |A|

    rng = np.random.default_rng(12)
    a = rng.standard_normal(128).astype(np.float32)
    u = np.zeros(128, np.uint32)
    f = np.full(128, np.nan, np.float32)
    tilewright.compile(bits, **BACKENDS[backend])(a, u, f)
    np.testing.assert_array_equal(u, a.view(np.uint32) ^ np.uint32(0x80000000))
    np.testing.assert_array_equal(f, np.abs(a))


def test_narrow_write_is_refused():
    with pytest.raises(CompileError, match="part of a float32 element"):

        @T.prim_func
        def k(A: T.Tensor((16, 32), "float32")):
            with T.Kernel(1, threads=128):
                A_s = T.alloc_shared((16, 32), "float32")
                h = T.view(A_s, (16, 64), dtype="bfloat16")
                for i, j in T.Parallel(16, 64):
                    h[i, j] = T.bfloat16(1.0)


def test_parameter_view_is_refused():
    with pytest.raises(CompileError, match="kernel parameter"):

        @T.prim_func
        def k(A: T.Tensor((16, 32), "float32")):
            with T.Kernel(1, threads=128):
                T.view(A, (16, 64), dtype="bfloat16")


def test_view_of_other_size_is_refused():
    with pytest.raises(CompileError, match="bits"):

        @T.prim_func
        def k(A: T.Tensor((16, 32), "float32")):
            with T.Kernel(1, threads=128):
                A_s = T.alloc_shared((16, 32), "float32")
                T.view(A_s, (16, 32), dtype="bfloat16")


def test_reinterpret_of_other_width_is_refused():
    with pytest.raises(CompileError, match="differ in width"):

        @T.prim_func
        def k(A: T.Tensor((16, 32), "float32")):
            with T.Kernel(1, threads=128):
                A[0, 0] = T.cast(T.reinterpret(A[0, 1], "float16"), "float32")


@needs_nvrtc
def test_nvrtc_compiles():
    for case in CASES:
        tilewright.compile(view_copy_kernel(*case), target="cuda -arch=sm_80")


@needs_hip_compiler
def test_clang_compiles_for_amd():
    for case in CASES[:2]:
        tilewright.compile(view_copy_kernel(*case), target="hip -arch=gfx942")


@pytest.mark.skipif(not (torch.cuda.is_available() and not getattr(torch.version, "hip", None)),
                    reason="needs an NVIDIA GPU with a CUDA build of PyTorch")
@pytest.mark.parametrize("case", CASES[:3], ids=[f"{c[1]}-as-{c[3]}" for c in CASES[:3]])
def test_gpu_view_copy(case):
    shape, dtype, new_shape, new_dtype = case
    kernel = tilewright.compile(view_copy_kernel(*case), target="cuda")
    a = torch.from_numpy(_random_bits(np.random.default_rng(13), shape, dtype).view(np.uint8)).cuda()
    a = a.view(getattr(torch, dtype)).reshape(shape)
    b = torch.empty(new_shape, dtype=getattr(torch, new_dtype), device="cuda")
    b.view(torch.uint8).fill_(0xA5)
    kernel(a, b)
    assert torch.equal(b.view(torch.uint8).reshape(-1).cpu(), a.view(torch.uint8).reshape(-1).cpu())
