"""The 4-bit types (int4, uint4, float4_e2m1fn, two per byte in global memory) and the MX scale type
float8_e8m0fnu, on every backend: the tile interpreter, the emulator of the CUDA and the HIP lowering,
NVRTC and clang-19 compiles, and an NVIDIA GPU when there is one.  References are NumPy/ml_dtypes
(float64 for the arithmetic); outputs are poisoned before each run.

A 4-bit tensor of logical shape (..., n) is passed as int8/uint8 storage of shape (..., n // 2),
element 2i in the low nibble of byte i (TileLang's layout)."""

from __future__ import annotations

import shutil
import subprocess

import ml_dtypes
import numpy as np
import pytest
import torch
from toolchains import needs_hip_compiler, needs_nvrtc

import tilewright
import tilewright.language as T
from tilewright.binding.args import bind_arguments
from tilewright.binding.packed import pack, unpack
from tilewright.codegen import subbyte
from tilewright.errors import ArgumentError, CompileError

M, N = 8, 32
FOUR_BIT = ("int4", "uint4", "float4_e2m1fn")
BACKENDS = {
    "interpret": {"target": "interpret"},
    "emulator-cuda": {"target": "cuda -arch=sm_90a", "execution_backend": "emulator"},
    "emulator-hip": {"target": "hip -arch=gfx942", "execution_backend": "emulator"},
}


def _ml(dtype):
    return np.dtype(getattr(ml_dtypes, dtype))


def roundtrip_kernel(dtype):
    """Global -> shared -> fragment, x + x in the dtype, back to global; and a float32 view of the input."""

    @T.prim_func
    def roundtrip(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype), C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=64):
            S = T.alloc_shared((M, N), dtype)
            F = T.alloc_fragment((M, N), dtype)
            T.copy(A, S)
            T.copy(S, F)
            for i, j in T.Parallel(M, N):
                F[i, j] = F[i, j] + F[i, j]
            T.copy(F, B)
            for i, j in T.Parallel(M, N):
                C[i, j] = T.cast(A[i, j], "float32") * 3.0

    return roundtrip


def _storage(rng, shape=(M, N // 2)):
    return torch.from_numpy(rng.integers(-128, 128, shape, dtype=np.int8))


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("dtype", FOUR_BIT)
def test_four_bit_roundtrip_and_arithmetic(dtype, backend):
    rng = np.random.default_rng(1)
    kernel = tilewright.compile(roundtrip_kernel(dtype), **BACKENDS[backend])
    a = _storage(rng)
    b = _storage(rng)  # poison: random bytes
    c = torch.full((M, N), float("nan"))
    a_before = a.clone()
    kernel(a, b, c)
    logical = unpack(a.numpy(), dtype)
    want_b = np.empty_like(a.numpy())
    pack(logical + logical, want_b)  # the dtype's own arithmetic (ml_dtypes: wrap for ints, RNE/saturate for fp4)
    assert torch.equal(a, a_before)
    np.testing.assert_array_equal(b.numpy(), want_b)
    np.testing.assert_array_equal(c.numpy(), logical.astype(np.float64) * 3.0)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_e8m0_roundtrip_and_conversion(backend):
    rng = np.random.default_rng(2)
    kernel = tilewright.compile(roundtrip_kernel("float8_e8m0fnu"), **BACKENDS[backend])
    a = rng.integers(100, 150, (M, N), dtype=np.uint8).view(_ml("float8_e8m0fnu"))
    b = np.full((M, N), 255, np.uint8).view(_ml("float8_e8m0fnu"))  # poison: NaN
    c = np.full((M, N), np.nan, np.float32)
    kernel(a, b, c)
    np.testing.assert_array_equal(b.view(np.uint8), a.view(np.uint8) + 1)  # x + x = 2x: exponent + 1
    np.testing.assert_array_equal(c, a.astype(np.float64) * 3.0)


@pytest.mark.parametrize("dtype", FOUR_BIT)
def test_cast_from_float_rounds_like_ml_dtypes(dtype):
    @T.prim_func
    def narrow(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(1, threads=64):
            for i, j in T.Parallel(M, N):
                Y[i, j] = T.cast(X[i, j], dtype)

    rng = np.random.default_rng(3)
    if dtype == "float4_e2m1fn":  # ties, saturation, signed zero
        x = rng.choice(np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0, 1e9, -0.1, -2.6, 0.3], np.float32),
                       (M, N)) * rng.choice([-1, 1], (M, N)).astype(np.float32)
    else:  # in range for the integer types (the conversion of out-of-range floats is C's, undefined)
        lo, hi = (-8, 7) if dtype == "int4" else (0, 15)
        x = rng.integers(lo, hi + 1, (M, N)).astype(np.float32)
    want = np.empty((M, N // 2), np.int8)
    pack(x.astype(_ml(dtype)), want)
    for backend in sorted(BACKENDS):
        kernel = tilewright.compile(narrow, **BACKENDS[backend])
        y = _storage(rng)
        kernel(torch.from_numpy(x), y)
        np.testing.assert_array_equal(y.numpy(), want, err_msg=backend)


def test_scatter_by_row_writes_nibbles_not_bytes():
    """TileLang's issue: scalar stores of fp4 elements through an index must not overwrite the
    neighbouring element of the same byte."""

    @T.prim_func
    def scatter(src: T.Tensor((16, 64), "float4_e2m1fn"), dst: T.Tensor((16, 64), "float4_e2m1fn"),
                perm: T.Tensor((16,), "int32")):
        with T.Kernel(16, threads=64) as i:
            for k in T.serial(64):
                dst[perm[i], k] = src[i, k]

    rng = np.random.default_rng(4)
    src = _storage(rng, (16, 32))
    perm = torch.from_numpy(rng.permutation(16).astype(np.int32))
    for backend in sorted(BACKENDS):
        dst = _storage(rng, (16, 32))
        tilewright.compile(scatter, **BACKENDS[backend])(src, dst, perm)
        inv = torch.argsort(perm)
        assert torch.equal(dst, src[inv]), backend


def gemm_kernel(dtype, acc, M=32, N=32, K=96, block_K=32):
    @T.prim_func
    def gemm4(A: T.Tensor((M, K), dtype), B: T.Tensor((N, K), dtype), C: T.Tensor((M, N), acc)):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((M, block_K), dtype)
            B_s = T.alloc_shared((N, block_K), dtype)
            C_f = T.alloc_fragment((M, N), acc)
            T.clear(C_f)
            for k in T.Pipelined(K // block_K, num_stages=2):  # not staged by TMA / cp.async: element copies
                T.copy(A[0, k * block_K], A_s)
                T.copy(B[0, k * block_K], B_s)
                T.gemm(A_s, B_s, C_f, transpose_B=True)
            T.copy(C_f, C)

    return gemm4


@pytest.mark.parametrize("backend", [*sorted(BACKENDS), "emulator-sm80"])
@pytest.mark.parametrize("dtype,acc", [("int4", "int32"), ("uint4", "int32"), ("float4_e2m1fn", "float32")])
def test_gemm_of_four_bit_operands(dtype, acc, backend):
    """TileLang's int4 GEMM example's shape of kernel (no 4-bit tensor-core path here: exact either way)."""
    rng = np.random.default_rng(8)
    where = {"target": "cuda -arch=sm_80", "execution_backend": "emulator"} if backend == "emulator-sm80" else \
        BACKENDS[backend]
    kernel = tilewright.compile(gemm_kernel(dtype, acc), **where)
    a, b = _storage(rng, (32, 48)), _storage(rng, (32, 48))
    c = torch.full((32, 32), -12345, dtype=getattr(torch, acc))
    kernel(a, b, c)
    want = unpack(a.numpy(), dtype).astype(np.float64) @ unpack(b.numpy(), dtype).astype(np.float64).T
    np.testing.assert_array_equal(c.numpy(), want)  # small integers / fp4 products: exact in the accumulator


def test_binding_takes_packed_storage_with_logical_sizes():
    n = T.dynamic("n")

    @T.prim_func
    def touch(A: T.Tensor((4, n), "int4"), out: T.Tensor((1,), "int32")):
        with T.Kernel(1, threads=64):
            out[0] = n

    kernel = tilewright.compile(touch, target="interpret")
    out = np.full(1, -1, np.int32)
    kernel(torch.zeros(4, 12, dtype=torch.int8), torch.from_numpy(out))
    assert out[0] == 24  # 12 bytes of two elements each
    with pytest.raises(ArgumentError, match="dtype"):
        kernel(torch.zeros(4, 12, dtype=torch.int16), torch.from_numpy(out))
    # the GPU binder: the bytes of a row must be contiguous (the CPU backends unpack any strides)
    bound = bind_arguments(touch.params, touch.dyn_vars, [torch.zeros(4, 12, dtype=torch.uint8), out],
                           kernel_name="touch", device_type=None, require_alignment=1)
    assert bound.tensors[0].shape == (4, 24) and bound.tensors[0].strides == (24, 1)
    with pytest.raises(ArgumentError, match="last dimension"):
        bind_arguments(touch.params, touch.dyn_vars, [torch.zeros(12, 4, dtype=torch.int8).t(), out],
                       kernel_name="touch", device_type=None, require_alignment=1)


def test_four_bit_output_is_allocated_packed():
    @T.prim_func
    def fill(X: T.Tensor((M, N), "int32"), Y: T.Tensor((M, N), "uint4")):
        with T.Kernel(1, threads=64):
            for i, j in T.Parallel(M, N):
                Y[i, j] = T.cast(X[i, j] % 16, "uint4")

    x = np.random.default_rng(7).integers(0, 1000, (M, N)).astype(np.int32)
    kernel = tilewright.compile(fill, out_idx=[1], target="interpret")
    y = kernel(torch.from_numpy(x))  # torch in: a torch output, packed two per byte
    assert y.dtype == torch.uint8 and y.shape == (M, N // 2)
    np.testing.assert_array_equal(unpack(y.numpy(), "uint4").astype(np.int64), x % 16)
    y = kernel(x)  # NumPy in: a NumPy output of the unpacked type, one element per byte
    assert y.dtype == _ml("uint4") and y.shape == (M, N)
    np.testing.assert_array_equal(y.astype(np.int64), x % 16)


def test_unsupported_packed_names_are_refused_clearly():
    for name in ("float4_e2m1fnx2", "bfloat16x2", "float4_e2m1_unpacked"):
        with pytest.raises(CompileError, match="not supported"):

            @T.prim_func
            def k(A: T.Tensor((4,), name)):
                with T.Kernel(1, threads=64):
                    A[0] = A[0]


def test_dtype_names_and_torch_storage():
    assert T.int4.bits == 4 and T.float4_e2m1fn.bits == 4 and T.float4_e2m1fnx2.bits == 8
    assert T.float4_e2m1fn.is_float4() and not T.float16.is_float4()
    assert T.int4.as_torch() is torch.int8
    assert T.float4_e2m1fn.as_torch() is getattr(torch, "float4_e2m1fn_x2", torch.int8)
    assert T.float8_e8m0fnu.as_torch() is torch.float8_e8m0fnu
    assert T.float4_e2m1_unpacked.bits == 8 and T.float4_e2m1_unpacked != T.float4_e2m1fn

    from tilewright.language.dtypes import is_float4, resolve_torch_storage_dtype

    assert resolve_torch_storage_dtype(T.int4) == T.int8 and resolve_torch_storage_dtype(T.float16) == T.float16
    assert is_float4(T.float4_e2m1fn) and is_float4("custom[float4_e2m1_unpacked]8") and not is_float4(T.float16)


# ---------------------------------------------------------------- the device conversions, run on the host
@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to run the conversions on the host")
@pytest.mark.parametrize("dtype", ["float4_e2m1fn", "float8_e8m0fnu"])
def test_device_conversions_match_ml_dtypes(dtype, tmp_path):
    ml = _ml(dtype)
    codes = 16 if dtype == "float4_e2m1fn" else 256
    every = np.arange(codes, dtype=np.uint8).view(ml).astype(np.float32)
    fin = np.sort(np.unique(np.abs(every[np.isfinite(every)])))
    rng = np.random.default_rng(5)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-45, 1e-40, 2.0**-127, 1.5 * 2.0**-127,
                         1.4 * 2.0**-127, 2.0**127 * 1.5, 2.0**127 * 1.49, 3e38, 1e9], np.float32)
    with np.errstate(over="ignore"):  # samples beyond float32 become infinities, which are wanted too
        pts = np.concatenate([every, -every, fin[:-1] + np.diff(fin) / 2, (fin[:-1] + np.diff(fin) / 2) * 1.0001,
                              rng.standard_normal(4000).astype(np.float32) * float(fin.max()) / 4,
                              np.exp2(rng.uniform(-130, 130, 4000)).astype(np.float32), specials]).astype(np.float32)
    name = subbyte.CTYPES[dtype].removeprefix("tw_")
    body = subbyte.conversions(dtype, "hip").replace("__device__ __forceinline__", "static inline")
    vals = ", ".join(f"{x:#x}u" for x in pts.view(np.uint32))
    prog = f"""#include <cstdio>
#include <cstring>
{body}
static const unsigned inputs[] = {{{vals}}};
int main() {{
  for (unsigned b = 0; b < {codes}u; ++b) {{ float f = tw_{name}_to_f32(b); unsigned u; std::memcpy(&u, &f, 4);
    std::printf("%u\\n", u); }}
  for (unsigned i = 0; i < sizeof(inputs) / sizeof(inputs[0]); ++i) {{ float f; std::memcpy(&f, &inputs[i], 4);
    std::printf("%u\\n", (unsigned)tw_f32_to_{name}(f)); }}
}}
"""
    (tmp_path / "t.cpp").write_text(prog)
    subprocess.run(["g++", "-std=c++20", "-O1", "-o", str(tmp_path / "t"), str(tmp_path / "t.cpp")], check=True)
    out = [int(x) for x in subprocess.check_output([str(tmp_path / "t")], text=True).split()]
    decoded = np.array(out[:codes], np.uint32).view(np.float32)
    np.testing.assert_array_equal(decoded, every)  # NaN == NaN for assert_array_equal
    np.testing.assert_array_equal(np.array(out[codes:], np.uint8), pts.astype(ml).view(np.uint8))


# ---------------------------------------------------------------- toolchains
@needs_nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("dtype", [*FOUR_BIT, "float8_e8m0fnu"])
def test_nvrtc_compiles(dtype, arch):
    source = tilewright.compile(roundtrip_kernel(dtype), target=f"cuda -arch={arch}").get_kernel_source()
    assert ("tw_st_" + dtype in source) == (dtype in FOUR_BIT)
    if dtype in FOUR_BIT:
        tilewright.compile(gemm_kernel(dtype, "float32" if dtype.startswith("float") else "int32"),
                           target=f"cuda -arch={arch}")


@needs_hip_compiler
@pytest.mark.parametrize("dtype", [*FOUR_BIT, "float8_e8m0fnu"])
def test_clang_compiles_for_amd(dtype):
    tilewright.compile(roundtrip_kernel(dtype), target="hip -arch=gfx942")
    if dtype in FOUR_BIT:
        tilewright.compile(gemm_kernel(dtype, "float32" if dtype.startswith("float") else "int32"),
                           target="hip -arch=gfx90a")


# ---------------------------------------------------------------- the GPU
def _cuda() -> bool:
    return torch.cuda.is_available() and not getattr(torch.version, "hip", None)


@pytest.mark.skipif(not _cuda(), reason="needs an NVIDIA GPU with a CUDA build of PyTorch")
@pytest.mark.parametrize("dtype", FOUR_BIT)
def test_gpu_four_bit_roundtrip(dtype):
    rng = np.random.default_rng(6)
    kernel = tilewright.compile(roundtrip_kernel(dtype), target="cuda")
    a, b = _storage(rng).cuda(), _storage(rng).cuda()
    c = torch.full((M, N), float("nan"), device="cuda")
    kernel(a, b, c)
    logical = unpack(a.cpu().numpy(), dtype)
    want_b = np.empty((M, N // 2), np.int8)
    pack(logical + logical, want_b)
    np.testing.assert_array_equal(b.cpu().numpy(), want_b)
    np.testing.assert_array_equal(c.cpu().numpy(), logical.astype(np.float64) * 3.0)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_e8m0_torch_tensors_and_rounding(backend):
    """TileLang's vectorize test with torch.float8_e8m0fnu: integers rounded to powers of two (ties up)."""

    @T.prim_func
    def ramp(A: T.Tensor((64,), torch.float8_e8m0fnu)):
        with T.Kernel(1, threads=64):
            for i in T.vectorized(8):
                A[i] = T.cast(i + 1, T.float8_e8m0fnu)

    x = torch.full((64,), 255, dtype=torch.uint8).view(torch.float8_e8m0fnu)  # NaN
    tilewright.compile(ramp, **BACKENDS[backend])(x)
    want = np.arange(1, 9, dtype=np.float32).astype(_ml("float8_e8m0fnu")).view(np.uint8)
    np.testing.assert_array_equal(x.view(torch.uint8)[:8].numpy(), want)
    assert (x.view(torch.uint8)[8:] == 255).all()


def reduce_kernel(dtype):
    @T.prim_func
    def rowmax(A: T.Tensor((16, 64), dtype), B: T.Tensor((16,), dtype)):
        with T.Kernel(1, threads=128):
            F = T.alloc_fragment((16, 64), dtype)
            R = T.alloc_fragment((16,), dtype)
            T.copy(A, F)
            T.reduce_max(F, R, dim=1)  # across the threads of a row: warp shuffles of the one-byte values
            T.copy(R, B)

    return rowmax


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("dtype", [*FOUR_BIT, "float8_e8m0fnu"])
def test_row_max_shuffles_the_values(dtype, backend):
    rng = np.random.default_rng(9)
    kernel = tilewright.compile(reduce_kernel(dtype), **BACKENDS[backend])
    if dtype in FOUR_BIT:
        a, b = _storage(rng, (16, 32)), _storage(rng, (8,))
        kernel(a, b)
        want = np.empty(8, np.int8)
        pack(unpack(a.numpy(), dtype).astype(np.float32).max(axis=1).astype(_ml(dtype)), want)
        np.testing.assert_array_equal(b.numpy(), want)
    else:
        a = rng.integers(0, 255, (16, 64)).astype(np.uint8).view(_ml(dtype))
        b = np.full(16, 255, np.uint8).view(_ml(dtype))
        kernel(a, b)
        np.testing.assert_array_equal(b.view(np.uint8), a.view(np.uint8).max(axis=1))


def test_atomics_of_one_byte_types_are_refused():
    with pytest.raises(CompileError, match="atomic_add on int4 values is not supported"):

        @T.prim_func
        def acc(A: T.Tensor((64,), "int4")):
            with T.Kernel(1, threads=64):
                for i in T.Parallel(64):
                    T.atomic_add(A[i], 1)


@needs_nvrtc
@pytest.mark.parametrize("dtype", [*FOUR_BIT, "float8_e8m0fnu"])
def test_nvrtc_compiles_reductions(dtype):
    tilewright.compile(reduce_kernel(dtype), target="cuda -arch=sm_90a")


@needs_hip_compiler
@pytest.mark.parametrize("dtype", ["int4", "float4_e2m1fn"])
def test_clang_compiles_reductions(dtype):
    tilewright.compile(reduce_kernel(dtype), target="hip -arch=gfx942")


def test_gpu_launch_binds_four_bit_tensors_on_the_checked_path():
    """The launcher's fast path compares torch shapes with the parameter's: a 4-bit parameter's
    storage shape differs, so its tensors must take the checked path (which halves the last dim)."""
    from tilewright.runtime.launcher import _OTHER, _fast_spec

    spec = _fast_spec(roundtrip_kernel("int4").params)
    assert spec[0][0] is _OTHER and spec[1][0] is _OTHER and spec[2][0] is not _OTHER


def test_profiler_supplies_four_bit_inputs():
    from tilewright.profiler.supply import make_input

    class Rng:
        numpy = np.random.default_rng(10)

    x = make_input("int4", (4, 8), None, Rng, on_device=False)
    assert x.dtype == _ml("int4") and x.shape == (4, 8) and len(np.unique(x.astype(np.int8))) > 4
    one = make_input("float4_e2m1fn", (4, 8), "One", Rng, on_device=False)
    np.testing.assert_array_equal(one.astype(np.float32), np.ones((4, 8), np.float32))
