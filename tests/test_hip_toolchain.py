"""HIP compilation to AMDGPU code objects: the prelude, MFMA/WMMA kernels, resources, errors, and the file formats.

The format tests (MessagePack, ELF notes, offload bundles) need nothing installed.  The compile tests
need a HIP-capable compiler (hiprtc or an AMDGPU clang >= 17 with lld, e.g. Debian's clang-19 + lld-19)
and are skipped, with the reason, when there is none.  No GPU is needed.
"""

from __future__ import annotations

import ctypes
import os
import re
import shlex
import shutil
import struct
import subprocess
import sys
import zlib

import pytest

from tilewright.codegen.hip_prelude import HIP_INDEX_FUNCS, HIP_MATH_FUNCS, HIP_PRELUDE, HIP_VECTOR_TYPES
from tilewright.errors import ToolchainError
from tilewright.toolchain import hip
from tilewright.toolchain.amdgpu_elf import (
    EM_AMDGPU,
    AmdgpuElfError,
    extract_code_object,
    is_code_object,
    kernel_resources,
    msgpack_loads,
    read_metadata,
    target_id,
)

# ---------------------------------------------------------------------------------------------
# Kernels.  Lane layouts as in tilewright/target/matrix_amd.py.
# ---------------------------------------------------------------------------------------------

# v_mfma_f32_16x16x16{f16,bf16}, one wave64: lane holds A[lane % 16][4 * (lane / 16) + e],
# B[4 * (lane / 16) + e][lane % 16] and C[4 * (lane / 16) + e][lane % 16], e = 0..3.
MATRIX_GFX9 = r"""
extern "C" __global__ __launch_bounds__(64) void mfma_f16(const tw_half* __restrict__ A,
                                                         const tw_half* __restrict__ B, float* __restrict__ C) {
  const int lane = tw_thread_idx_x(), rc = lane % 16, k0 = 4 * (lane / 16);
  tw_half4 a, b;
  for (int e = 0; e < 4; ++e) {
    a[e] = A[rc * 16 + k0 + e];
    b[e] = B[(k0 + e) * 16 + rc];
  }
  tw_float4 acc = {0.0f, 0.0f, 0.0f, 0.0f};
  acc = __builtin_amdgcn_mfma_f32_16x16x16f16(a, b, acc, 0, 0, 0);
  for (int e = 0; e < 4; ++e) C[(k0 + e) * 16 + rc] = acc[e];
}

extern "C" __global__ __launch_bounds__(64) void mfma_bf16(const tw_bf16* __restrict__ A,
                                                          const tw_bf16* __restrict__ B, float* __restrict__ C) {
  const int lane = tw_thread_idx_x(), rc = lane % 16, k0 = 4 * (lane / 16);
  tw_bf16x4 a, b;
  for (int e = 0; e < 4; ++e) {
    a[e] = A[rc * 16 + k0 + e];
    b[e] = B[(k0 + e) * 16 + rc];
  }
  tw_float4 acc = {0.0f, 0.0f, 0.0f, 0.0f};
  // clang-19 declares the bf16 operands as short4: pass the bits.
  acc = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(tw_bits(tw_short4, a), tw_bits(tw_short4, b), acc, 0, 0, 0);
  for (int e = 0; e < 4; ++e) C[(k0 + e) * 16 + rc] = acc[e];
}
"""

# gfx950 (LLVM >= 20): v_mfma_f32_16x16x32_f16, 8 A/B elements per lane, same C layout.
MATRIX_GFX950 = r"""
extern "C" __global__ __launch_bounds__(64) void mfma_f16_k32(const tw_half* __restrict__ A,
                                                             const tw_half* __restrict__ B, float* __restrict__ C) {
  const int lane = tw_thread_idx_x(), rc = lane % 16, k0 = 8 * (lane / 16);
  tw_half8 a, b;
  for (int e = 0; e < 8; ++e) {
    a[e] = A[rc * 32 + k0 + e];
    b[e] = B[(k0 + e) * 16 + rc];
  }
  tw_float4 acc = {0.0f, 0.0f, 0.0f, 0.0f};
  acc = __builtin_amdgcn_mfma_f32_16x16x32_f16(a, b, acc, 0, 0, 0);
  for (int e = 0; e < 4; ++e) C[(4 * (lane / 16) + e) * 16 + rc] = acc[e];
}
"""

# gfx11 WMMA, wave32: lane holds row/column lane % 16 of A/B with all 16 k (lanes 16..31 repeat
# 0..15) and C[2 * e + lane / 16][lane % 16], e = 0..7.
MATRIX_GFX11 = r"""
extern "C" __global__ __launch_bounds__(32) void wmma_f16(const tw_half* __restrict__ A,
                                                         const tw_half* __restrict__ B, float* __restrict__ C) {
  const int lane = tw_thread_idx_x(), rc = lane % 16;
  tw_half16 a, b;
  for (int e = 0; e < 16; ++e) {
    a[e] = A[rc * 16 + e];
    b[e] = B[e * 16 + rc];
  }
  tw_float8 acc = {};
  acc = __builtin_amdgcn_wmma_f32_16x16x16_f16_w32(a, b, acc);
  for (int e = 0; e < 8; ++e) C[(2 * e + lane / 16) * 16 + rc] = acc[e];
}

extern "C" __global__ __launch_bounds__(32) void wmma_bf16(const tw_bf16* __restrict__ A,
                                                          const tw_bf16* __restrict__ B, float* __restrict__ C) {
  const int lane = tw_thread_idx_x(), rc = lane % 16;
  tw_bf16x16 a, b;
  for (int e = 0; e < 16; ++e) {
    a[e] = A[rc * 16 + e];
    b[e] = B[e * 16 + rc];
  }
  tw_float8 acc = {};
  acc = __builtin_amdgcn_wmma_f32_16x16x16_bf16_w32(tw_bits(tw_short16, a), tw_bits(tw_short16, b), acc);
  for (int e = 0; e < 8; ++e) C[(2 * e + lane / 16) * 16 + rc] = acc[e];
}
"""

# gfx12 WMMA, wave32: lane holds A[lane % 16][8 * (e / 4) + 4 * (lane / 16) + e % 4] (B transposed
# alike) and C[8 * (lane / 16) + e][lane % 16], e = 0..7.
MATRIX_GFX12 = r"""
extern "C" __global__ __launch_bounds__(32) void wmma_f16(const tw_half* __restrict__ A,
                                                         const tw_half* __restrict__ B, float* __restrict__ C) {
  const int lane = tw_thread_idx_x(), rc = lane % 16;
  tw_half8 a, b;
  for (int e = 0; e < 8; ++e) {
    const int k = 8 * (e / 4) + 4 * (lane / 16) + e % 4;
    a[e] = A[rc * 16 + k];
    b[e] = B[k * 16 + rc];
  }
  tw_float8 acc = {};
  acc = __builtin_amdgcn_wmma_f32_16x16x16_f16_w32_gfx12(a, b, acc);
  for (int e = 0; e < 8; ++e) C[(8 * (lane / 16) + e) * 16 + rc] = acc[e];
}

extern "C" __global__ __launch_bounds__(32) void wmma_bf16(const tw_bf16* __restrict__ A,
                                                          const tw_bf16* __restrict__ B, float* __restrict__ C) {
  const int lane = tw_thread_idx_x(), rc = lane % 16;
  tw_bf16x8 a, b;
  for (int e = 0; e < 8; ++e) {
    const int k = 8 * (e / 4) + 4 * (lane / 16) + e % 4;
    a[e] = A[rc * 16 + k];
    b[e] = B[k * 16 + rc];
  }
  tw_float8 acc = {};
  acc = __builtin_amdgcn_wmma_f32_16x16x16_bf16_w32_gfx12(tw_bits(tw_short8, a), tw_bits(tw_short8, b), acc);
  for (int e = 0; e < 8; ++e) C[(8 * (lane / 16) + e) * 16 + rc] = acc[e];
}
"""

# Every tw_* math function, both conversions, every shuffle, LDS, the barrier and both atomics.
ELEMENTWISE = r"""
extern "C" __global__ __launch_bounds__(256, 2) void elementwise(float* __restrict__ out, const float* __restrict__ x,
                                                                tw_half* __restrict__ h, tw_bf16* __restrict__ b,
                                                                float* __restrict__ acc, int n) {
  __shared__ float tile[256];
  const int i = tw_block_idx_x() * tw_block_dim_x() + tw_thread_idx_x();
  const float v = i < n ? x[i] : 1.0f;
  float y = tw_expf(v) + tw_exp2f(v) + tw_logf(v) + tw_log2f(v) + tw_sqrtf(v) + tw_rsqrtf(v) + tw_rcpf(v);
  y += tw_tanhf(v) + tw_sigmoidf(v) + tw_fabsf(v) + tw_fminf(v, 1.0f) + tw_fmaxf(v, 2.0f) + tw_fmaf(v, v, 1.0f);
  y += tw_floorf(v) + tw_ceilf(v) + tw_truncf(v) + tw_rintf(v) + tw_powf(v, 1.5f) + tw_sinf(v) + tw_cosf(v);
  if (i < n) {
    y += tw_half2float(h[i]) + tw_bf162float(b[i]) + (float)h[i];
    h[i] = tw_float2half(y);
    b[i] = tw_float2bf16(y);
  }
  y += tw_shfl_xor_f32(y, 1) + (float)tw_shfl_xor_f64((double)y, 2) + (float)tw_shfl_xor_i64((tw_i64)y, 4);
  y += (float)tw_shfl_i32((int)y, 0) + (float)tw_shfl_xor_i32((int)y, 8) + (float)tw_readfirstlane((int)y);
  tile[tw_thread_idx_x()] = y;
  tw_syncthreads();
  y += tile[(tw_thread_idx_x() + 1) % 256] + (float)(tw_lane_id() + TW_WAVE_SIZE + tw_grid_dim_x());
  tw_atomic_add_f32(acc, y);
  tw_atomic_max_f32(acc + 1, y);
  if (i < n) out[i] = y;
}
"""

# The CUDA-style names of the prelude, for hand-written kernels.
CUDA_STYLE = r"""
TW_DYNAMIC_SHARED(float, dyn);
extern "C" __global__ void cuda_style(float* p) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  dyn[threadIdx.x] = p[i] + gridDim.x + warpSize;
  __syncthreads();
  p[i] = dyn[(threadIdx.x + 1) % blockDim.x];
}
"""

ARCHS = {
    # arch: (matrix source, matrix kernels, expected matrix mnemonic prefix, default wave size)
    "gfx90a": (MATRIX_GFX9, ["mfma_f16", "mfma_bf16"], "v_mfma", 64),
    "gfx942": (MATRIX_GFX9, ["mfma_f16", "mfma_bf16"], "v_mfma", 64),
    "gfx1100": (MATRIX_GFX11, ["wmma_f16", "wmma_bf16"], "v_wmma", 32),
    "gfx1201": (MATRIX_GFX12, ["wmma_f16", "wmma_bf16"], "v_wmma", 32),
    "gfx950": (MATRIX_GFX9 + MATRIX_GFX950, ["mfma_f16", "mfma_bf16", "mfma_f16_k32"], "v_mfma", 64),
}

# What each math function must lower to (no library calls exist under -nogpulib).
EXPECTED_INSTRUCTIONS = ("v_exp_f32", "v_log_f32", "v_sqrt_f32", "v_rsq_f32", "v_rcp_f32", "v_floor_f32",
                         "v_ceil_f32", "v_trunc_f32", "v_rndne_f32", "v_sin_f32", "v_cos_f32", "v_cvt_f32_f16",
                         "v_cvt_f16_f32", "ds_bpermute_b32", "global_atomic")  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Helpers: a MessagePack encoder and a minimal code object, to test the readers without a compiler.
# ---------------------------------------------------------------------------------------------
def mp_encode(v) -> bytes:
    if v is None:
        return b"\xc0"
    if v is True or v is False:
        return b"\xc3" if v else b"\xc2"
    if isinstance(v, int):
        if 0 <= v < 128:
            return bytes([v])
        if -32 <= v < 0:
            return struct.pack("b", v)
        if 0 <= v < 1 << 16:
            return b"\xcd" + struct.pack(">H", v)
        if 0 <= v < 1 << 32:
            return b"\xce" + struct.pack(">I", v)
        if v >= 0:
            return b"\xcf" + struct.pack(">Q", v)
        return b"\xd3" + struct.pack(">q", v)
    if isinstance(v, float):
        return b"\xcb" + struct.pack(">d", v)
    if isinstance(v, str):
        raw = v.encode()
        if len(raw) < 32:
            return bytes([0xA0 | len(raw)]) + raw
        if len(raw) < 256:
            return b"\xd9" + bytes([len(raw)]) + raw
        return b"\xda" + struct.pack(">H", len(raw)) + raw
    if isinstance(v, bytes):
        return b"\xc4" + bytes([len(v)]) + v
    if isinstance(v, list):
        head = bytes([0x90 | len(v)]) if len(v) < 16 else b"\xdc" + struct.pack(">H", len(v))
        return head + b"".join(mp_encode(x) for x in v)
    if isinstance(v, dict):
        head = bytes([0x80 | len(v)]) if len(v) < 16 else b"\xde" + struct.pack(">H", len(v))
        return head + b"".join(mp_encode(k) + mp_encode(x) for k, x in v.items())
    raise TypeError(type(v))


def make_code_object(metadata: dict) -> bytes:
    """A minimal ET_DYN AMDGPU ELF64 holding only the NT_AMDGPU_METADATA note."""
    desc = mp_encode(metadata)
    name = b"AMDGPU\0"
    note = struct.pack("<III", len(name), len(desc), 32) + name + b"\0" * (-len(name) % 4)
    note += desc + b"\0" * (-len(desc) % 4)
    shoff = 64 + len(note)
    ident = b"\x7fELF" + bytes([2, 1, 1, 64, 3]) + b"\0" * 7
    header = ident + struct.pack("<HHIQQQIHHHHHH", 3, EM_AMDGPU, 1, 0, 0, shoff, 0, 64, 56, 0, 64, 2, 0)
    null_section = b"\0" * 64
    note_section = struct.pack("<IIQQQQIIQQ", 0, 7, 2, 0, 64, len(note), 0, 0, 4, 0)
    return header + note + null_section + note_section


SAMPLE_METADATA = {
    "amdhsa.version": [1, 2],
    "amdhsa.target": "amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-",
    "amdhsa.kernels": [
        {
            ".name": "k",
            ".symbol": "k.kd",
            ".vgpr_count": 40,
            ".agpr_count": 8,
            ".sgpr_count": 20,
            ".group_segment_fixed_size": 4096,
            ".private_segment_fixed_size": 16,
            ".vgpr_spill_count": 2,
            ".sgpr_spill_count": 1,
            ".wavefront_size": 64,
            ".max_flat_workgroup_size": 256,
            ".kernarg_segment_size": 24,
        }
    ],
}


def make_bundle(entries: list[tuple[str, bytes]]) -> bytes:
    """An uncompressed clang offload bundle."""
    head = b"__CLANG_OFFLOAD_BUNDLE__" + struct.pack("<Q", len(entries))
    table_size = sum(24 + len(tid) for tid, _ in entries)
    offset = len(head) + table_size
    table, blobs = b"", b""
    for tid, blob in entries:
        table += struct.pack("<QQQ", offset + len(blobs), len(blob), len(tid)) + tid.encode()
        blobs += blob
    return head + table + blobs


# ---------------------------------------------------------------------------------------------
# File formats (no compiler needed)
# ---------------------------------------------------------------------------------------------
def test_msgpack_decoder_round_trips_every_kind():
    value = {
        "small": 5,
        "neg": -7,
        "u16": 40000,
        "u32": 3_000_000_000,
        "u64": 1 << 40,
        "i64": -(1 << 40),
        "f": 1.5,
        "t": True,
        "f0": False,
        "nil": None,
        "s": "x" * 40,
        "s16": "y" * 300,
        "bin": b"\x00\x01",
        "arr": list(range(20)),
        "map": {str(i): i for i in range(17)},
    }
    assert msgpack_loads(mp_encode(value)) == value
    # Zero padding after the value (notes are 4-byte aligned) is fine, other trailing bytes are not.
    assert msgpack_loads(mp_encode([1]) + b"\0\0") == [1]
    with pytest.raises(AmdgpuElfError):
        msgpack_loads(mp_encode([1]) + b"\x01")
    with pytest.raises(AmdgpuElfError):
        msgpack_loads(b"\x92\x01")  # truncated array
    with pytest.raises(AmdgpuElfError):
        msgpack_loads(b"\xc1")  # the one tag MessagePack never uses
    with pytest.raises(AmdgpuElfError):
        msgpack_loads(b"")
    assert msgpack_loads(b"\xd4\x05\x07") == (5, b"\x07")  # ext values: (type, bytes)
    assert msgpack_loads(b"\xa2\xff\x41") == "\ufffdA"  # invalid UTF-8 is replaced, not fatal
    # Big-endian fixed-size forms written by other encoders (LLVM's msgpack writer uses the smallest).
    assert msgpack_loads(b"\xd0\x80") == -128
    assert msgpack_loads(b"\xca" + struct.pack(">f", 0.25)) == 0.25


def test_metadata_reader_maps_resources():
    co = make_code_object(SAMPLE_METADATA)
    assert is_code_object(co)
    assert target_id(co) == "amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-"
    assert read_metadata(co)["amdhsa.version"] == [1, 2]
    res = kernel_resources(co)["k"]
    assert res == {
        "vgpr": 40,
        "agpr": 8,
        "sgpr": 20,
        "lds_bytes": 4096,
        "scratch_bytes": 16,
        "spills": 3,
        "vgpr_spills": 2,
        "sgpr_spills": 1,
        "wavefront_size": 64,
        "max_flat_workgroup_size": 256,
        "kernarg_bytes": 24,
        "dynamic_stack": False,
    }


def test_not_a_code_object():
    with pytest.raises(AmdgpuElfError, match="not an AMDGPU code object"):
        kernel_resources(b"\x7fELF" + b"\0" * 100)
    with pytest.raises(AmdgpuElfError, match="neither"):
        extract_code_object(b"garbage" * 10)


def test_offload_bundle_extraction_picks_the_arch():
    co942 = make_code_object(SAMPLE_METADATA)
    meta90a = dict(SAMPLE_METADATA, **{"amdhsa.target": "amdgcn-amd-amdhsa--gfx90a"})
    co90a = make_code_object(meta90a)
    bundle = make_bundle(
        [
            ("host-x86_64-unknown-linux-gnu-", b""),
            ("hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-", co90a),
            ("hipv4-amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-", co942),
        ]
    )
    assert extract_code_object(bundle, "gfx942") == co942
    assert extract_code_object(bundle, "gfx90a:xnack-") == co90a
    assert extract_code_object(co942, "gfx942") == co942  # a raw code object passes through
    with pytest.raises(AmdgpuElfError, match="no code object for gfx1100"):
        extract_code_object(bundle, "gfx1100")
    with pytest.raises(AmdgpuElfError, match="no AMDGPU code object"):
        extract_code_object(make_bundle([("host-x86_64-unknown-linux-gnu-", b"")]))


@pytest.mark.parametrize("version", [1, 2, 3])
def test_compressed_offload_bundle_zlib(version):
    co = make_code_object(SAMPLE_METADATA)
    inner = make_bundle([("hipv4-amdgcn-amd-amdhsa--gfx942", co)])
    payload = zlib.compress(inner)
    if version == 1:
        head = b"CCOB" + struct.pack("<HHI", 1, 0, len(inner))
    elif version == 2:
        head = b"CCOB" + struct.pack("<HHII", 2, 0, 24 + len(payload), len(inner))
    else:
        head = b"CCOB" + struct.pack("<HHQQ", 3, 0, 32 + len(payload), len(inner))
    blob = head + struct.pack("<Q", 0x1234) + payload
    assert extract_code_object(blob, "gfx942") == co


def test_prelude_tables_name_real_definitions():
    for call in list(HIP_INDEX_FUNCS.values()) + list(HIP_MATH_FUNCS.values()):
        name = call.split("(")[0]
        assert re.search(rf"\b{re.escape(name)}\b", HIP_PRELUDE), name
    for name in HIP_VECTOR_TYPES:
        assert f" {name} __attribute__((ext_vector_type(" in HIP_PRELUDE
    # The keys of target/matrix_amd.py's operand vector types all exist with the tw_ prefix.
    from tilewright.target.matrix_amd import AMD_VECTOR_CTYPES

    for key, (_elem, lanes) in AMD_VECTOR_CTYPES.items():
        if lanes > 1:
            assert f"tw_{key}" in HIP_VECTOR_TYPES, key


def test_bad_arch_is_a_toolchain_error():
    with pytest.raises(ToolchainError, match="gfx942"):
        hip.compile_hip("", "sm_90a", [])


# ---------------------------------------------------------------------------------------------
# Compiling (needs hiprtc or an AMDGPU clang)
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def compiler() -> hip.HipCompiler:
    try:
        return hip.find_hip_compiler()
    except ToolchainError as exc:
        pytest.skip(f"no HIP-capable compiler: {exc}")


def _supports(compiler: hip.HipCompiler, arch: str) -> str | None:
    """Why ``compiler`` cannot build ``arch`` (None if it can)."""
    if arch == "gfx950":
        if compiler.kind == "clang" and not compiler.rocm and compiler.major < 20:
            return f"gfx950 needs LLVM >= 20 ({compiler.description})"
        if compiler.kind == "hiprtc" and compiler.major < 7:
            return f"gfx950 needs ROCm >= 7 ({compiler.description})"
    return None


def _disassembly(code_object: bytes) -> str | None:
    return hip.disassemble(code_object) if hip.find_llvm_tool("llvm-objdump") else None


@pytest.mark.parametrize("arch", list(ARCHS))
def test_matrix_and_elementwise_kernels(compiler, arch, tmp_path):
    reason = _supports(compiler, arch)
    if reason:
        pytest.skip(reason)
    matrix, matrix_kernels, mnemonic, wave = ARCHS[arch]
    kernels = [*matrix_kernels, "elementwise"]
    binary = hip.compile_hip(HIP_PRELUDE + matrix + ELEMENTWISE, arch, kernels, options=("-Wall", "-Wextra"))

    co = binary.code_object
    assert co[:4] == b"\x7fELF"
    assert struct.unpack_from("<H", co, 16)[0] == 3  # ET_DYN: a loadable code object, not a relocatable one
    assert struct.unpack_from("<H", co, 18)[0] == EM_AMDGPU == 224
    assert arch in target_id(co)
    assert binary.arch == arch and binary.toolchain == compiler.description
    assert binary.compile_seconds > 0
    assert "warning" not in binary.log, binary.log  # the prelude is -Wall -Wextra clean

    for name in kernels:
        res = binary.resources[name]
        assert res["spills"] == 0 and res["vgpr_spills"] == 0 and res["sgpr_spills"] == 0, (name, res)
        assert res["scratch_bytes"] == 0, (name, res)
        assert res["wavefront_size"] == wave, (name, res)
        assert 0 < res["vgpr"] <= 512 and res["sgpr"] > 0, (name, res)
    assert binary.resources["elementwise"]["lds_bytes"] == 256 * 4
    assert binary.resources["elementwise"]["max_flat_workgroup_size"] == 256
    assert binary.resources[matrix_kernels[0]]["max_flat_workgroup_size"] == wave
    if mnemonic == "v_mfma":
        assert binary.resources["mfma_f16"]["agpr"] >= 0  # reported (the unified VGPR count includes it)

    readelf = hip.find_llvm_tool("llvm-readelf")
    if readelf:
        # A loadable code object has one kernel descriptor symbol <name>.kd per kernel.
        path = tmp_path / "k.hsaco"
        path.write_bytes(co)
        symbols = subprocess.run([readelf, "-s", str(path)], capture_output=True, text=True, check=True).stdout
        for name in kernels:
            assert f" {name}.kd" in symbols, name

    asm = _disassembly(co)
    if asm is None:
        return
    for name in kernels:
        assert f"<{name}>:" in asm
    found = set(re.findall(r"\b(v_(?:mfma|wmma)\w*)", asm))
    assert any(m.startswith(mnemonic) for m in found), found
    assert "s_swappc" not in asm and "s_setpc" not in asm  # nothing calls out to a library
    for instr in EXPECTED_INSTRUCTIONS:
        assert instr in asm, instr
    assert "s_barrier" in asm


def test_cuda_style_names_and_dynamic_lds(compiler):
    binary = hip.compile_hip(HIP_PRELUDE + CUDA_STYLE, "gfx942", ["cuda_style"])
    res = binary.resources["cuda_style"]
    assert res["lds_bytes"] == 0  # dynamic LDS is a launch parameter, not static
    assert res["max_flat_workgroup_size"] == 1024  # clang's HIP default without launch bounds


def test_wave64_on_gfx11(compiler):
    binary = hip.compile_hip(HIP_PRELUDE + ELEMENTWISE, "gfx1100", ["elementwise"], options=("-mwavefrontsize64",))
    assert binary.resources["elementwise"]["wavefront_size"] == 64


def test_compile_error_reports_log_source_and_repro(compiler, tmp_path):
    source = HIP_PRELUDE + 'extern "C" __global__ void broken(float* p) { p[0] = undeclared_thing; }\n'
    with pytest.raises(ToolchainError) as info:
        hip.compile_hip(source, "gfx942", ["broken"], filename="broken.hip")
    err = info.value
    assert "undeclared_thing" in err.log and "error" in err.log
    assert err.source_path.endswith("broken.hip") and os.path.exists(err.source_path)
    with open(err.source_path, encoding="utf-8") as f:
        assert f.read() == source
    assert "gfx942" in err.repro
    assert err.source_path in str(err) and err.repro in str(err)
    if compiler.kind == "clang":
        # The repro is the exact clang command: running it fails the same way.
        proc = subprocess.run(shlex.split(err.repro), capture_output=True, text=True, check=False)
        assert proc.returncode != 0 and "undeclared_thing" in proc.stderr
    shutil.rmtree(os.path.dirname(err.source_path))  # kept for the user; not needed by the test


def test_builtin_of_another_arch_is_explained(compiler, tmp_path):
    # clang 19 accepts the gfx11 WMMA builtin on gfx12 and only the backend rejects it.
    source = HIP_PRELUDE + MATRIX_GFX11
    with pytest.raises(ToolchainError, match=r"gfx1201 has no instruction for llvm\.amdgcn\.wmma"):
        hip.compile_hip(source, "gfx1201", ["wmma_f16"], dump_dir=str(tmp_path))


def test_missing_kernel_is_reported(compiler, tmp_path):
    with pytest.raises(ToolchainError, match=r"not_there.*extern \"C\""):
        hip.compile_hip(HIP_PRELUDE + ELEMENTWISE, "gfx942", ["elementwise", "not_there"], dump_dir=str(tmp_path))


def test_dump_dir_keeps_source_code_object_and_log(compiler, tmp_path):
    binary = hip.compile_hip(
        HIP_PRELUDE + ELEMENTWISE, "gfx90a", ["elementwise"], dump_dir=str(tmp_path), filename="ew.hip"
    )
    assert (tmp_path / "ew.hip").read_text() == HIP_PRELUDE + ELEMENTWISE
    assert (tmp_path / "ew.gfx90a.hsaco").read_bytes() == binary.code_object
    assert (tmp_path / "ew.log").exists()


def test_prelude_defers_to_hiprtc_headers(compiler, tmp_path):
    """Under hiprtc (``__HIPCC_RTC__``, HIP's macros and declarations already present) the prelude must
    define none of the CUDA-style names itself: here they are poisoned, so redefining one fails."""
    if compiler.kind != "clang":
        pytest.skip("simulates hiprtc's header with clang")
    header = tmp_path / "fake_hiprtc_runtime.h"
    header.write_text(
        "#define __global__ __attribute__((global))\n"
        "#define __device__ __attribute__((device))\n"
        "#define __shared__ __attribute__((shared))\n"
        "#define __forceinline__ inline __attribute__((always_inline))\n"
        "#define __launch_bounds__(...) __attribute__((amdgpu_flat_work_group_size(1, 256)))\n"
        "#define HIP_INCLUDE_HIP_HIP_RUNTIME_H\n"
        "struct hip_builtin_index { unsigned x, y, z; };\n"
        "extern const __device__ hip_builtin_index threadIdx, blockIdx, blockDim, gridDim;\n"
        "static constexpr int warpSize = 64;\n"
        "__device__ void __syncthreads();\n"
        "struct float4 { float x, y, z, w; };\n"  # HIP's float4 is a struct: ours must not collide
        "#pragma GCC poison tw_uint3_\n"
    )
    options = ("-D__HIPCC_RTC__", "-include", str(header), "-Wall")
    binary = hip.compile_hip(HIP_PRELUDE + ELEMENTWISE, "gfx942", ["elementwise"], options=options)
    assert binary.resources["elementwise"]["spills"] == 0


def test_forced_compiler_that_does_not_exist(monkeypatch):
    monkeypatch.setenv(hip.ENV_COMPILER, "/nonexistent/clang-99")
    with pytest.raises(ToolchainError) as info:
        hip.find_hip_compiler(refresh=True)
    text = str(info.value)
    assert "apt install clang-19 lld-19" in text and "rocm[libraries]" in text and hip.ENV_COMPILER in text


def test_forced_compiler_kind(compiler, monkeypatch):
    monkeypatch.setenv(hip.ENV_COMPILER, compiler.kind)
    assert hip.find_hip_compiler(refresh=True).kind == compiler.kind
    monkeypatch.setenv(hip.ENV_COMPILER, compiler.path)
    assert hip.find_hip_compiler(refresh=True).path == compiler.path


def test_command_line(compiler, tmp_path):
    src = tmp_path / "k.hip"
    src.write_text(HIP_PRELUDE + ELEMENTWISE)
    out = tmp_path / "k.hsaco"
    cmd = [sys.executable, "-m", "tilewright.toolchain.hip", str(src), "--arch", "gfx942", "--kernel", "elementwise"]
    proc = subprocess.run([*cmd, "-o", str(out)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert '"wavefront_size": 64' in proc.stdout
    assert is_code_object(out.read_bytes())


# ---------------------------------------------------------------------------------------------
# The hiprtc code path, against a fake library (no ROCm here)
# ---------------------------------------------------------------------------------------------
class FakeHiprtc:
    """The hiprtc entry points compile_hip calls (C API names); "compiles" to a fixed blob."""

    def __init__(self, code: bytes, fail: bool = False):
        self.code, self.fail, self.options, self.destroyed = code, fail, [], False

    def hiprtcCreateProgram(self, prog, src, name, n, headers, names):
        self.source, self.name = src, name
        return 0

    def hiprtcCompileProgram(self, prog, n, argv):
        self.options = [argv[i].decode() for i in range(n)]
        return 6 if self.fail else 0  # HIPRTC_ERROR_COMPILATION

    def hiprtcGetProgramLogSize(self, prog, size):
        size[0] = len(self._log) + 1
        return 0

    def hiprtcGetProgramLog(self, prog, buf):
        ctypes.memmove(buf, self._log, len(self._log))
        return 0

    def hiprtcGetCodeSize(self, prog, size):
        size[0] = len(self.code)
        return 0

    def hiprtcGetCode(self, prog, buf):
        ctypes.memmove(buf, self.code, len(self.code))
        return 0

    def hiprtcDestroyProgram(self, prog):
        self.destroyed = True
        return 0

    def hiprtcGetErrorString(self, rc):
        return b"HIPRTC_ERROR_COMPILATION"

    @property
    def _log(self) -> bytes:
        return b"kernel.hip:1:2: error: nope" if self.fail else b""


def test_hiprtc_path_unwraps_a_bundle():
    co = make_code_object(SAMPLE_METADATA)
    fake = FakeHiprtc(make_bundle([("hipv4-amdgcn-amd-amdhsa--gfx942", co)]))
    ok, log, raw = hip._hiprtc_compile(fake, "src", "kernel.hip", "gfx942", ("-DX=1",))
    assert ok and log == "" and fake.destroyed
    assert fake.options == ["--offload-arch=gfx942", "-O3", "-std=c++17", "-DX=1"]
    assert fake.source == b"src" and fake.name == b"kernel.hip"
    assert extract_code_object(raw, "gfx942") == co


def test_hiprtc_path_failure_returns_the_log():
    fake = FakeHiprtc(b"", fail=True)
    ok, log, raw = hip._hiprtc_compile(fake, "src", "kernel.hip", "gfx942", ())
    assert not ok and raw == b"" and fake.destroyed
    assert "error: nope" in log and "HIPRTC_ERROR_COMPILATION" in log
