"""AMD matrix instructions (CDNA MFMA and RDNA WMMA) as ``MatrixInstr`` records.

Every record names the clang builtin the HIP printer emits (``mnemonic``) and, in ``extra``, the
facts the printer needs to call it:

* ``a_vec`` / ``b_vec`` / ``c_vec``: the operand vector types of the builtin, spelled as keys of
  ``AMD_VECTOR_CTYPES`` (element C type and lane count);
* ``ab_elems_per_scalar``: how many A/B matrix elements one element of ``a_vec`` packs (1 for
  16/32-bit inputs; 4 or 8 for 8-bit inputs, packed little-endian: matrix element ``e`` of the
  lane is byte ``e % n`` of vector element ``e // n``);
* ``arg_order``: the builtin's argument order, with the immediates named;
* the immediate values (``cbsz``/``abid``/``blgp`` for MFMA, ``a_signed``/``b_signed``/``clamp`` for
  the integer WMMA);
* ``replication``: how many lanes hold each A/B element (2 for gfx11 WMMA, 1 otherwise);
* ``min_llvm``: the oldest LLVM major version whose clang accepts the builtin on the oldest
  architecture that lists this record (see the notes at each factory on how sure that number is).

Lane layouts.  ``e`` counts a lane's elements in register order (low half / low byte first), which
is also the order of the builtin's vector operand.  The formulas below were checked against the
AMD Matrix Instruction Calculator (github.com/ROCm/amd_matrix_instruction_calculator,
``matrix_calculator.py --matrix-layout --csv``, snapshot of 2025-05-20) element by element for
every (lane, register, bit-range) of every instruction it covers: CDNA2 (gfx90a), CDNA3 (gfx942),
RDNA3 (gfx1100) and RDNA4 (gfx1201).  The calculator does not cover CDNA4 (gfx950); see the note
above ``_mfma_dense`` for what confirms those layouts.

One property makes the K order the least risky part of any layout: permuting K identically in A
and B does not change ``A @ B``.  A wrong *row*/*column*/C mapping, by contrast, gives a wrong
result, and those are the parts every source agrees on.
"""

from __future__ import annotations

from .matrix import MatrixInstr

# C spelling of each operand vector type named in ``extra`` (element type, number of elements).
# ``short`` vectors carry bf16 bit patterns: that is how the older bf16 builtins are declared
# (clang/include/clang/Basic/BuiltinsAMDGPU.def, "V4s"/"V16s"); the gfx950 ones take real __bf16 ("V8y").
AMD_VECTOR_CTYPES: dict[str, tuple[str, int]] = {
    "half4": ("_Float16", 4),
    "half8": ("_Float16", 8),
    "half16": ("_Float16", 16),
    "short4": ("short", 4),
    "short8": ("short", 8),
    "short16": ("short", 16),
    "bf16x8": ("__bf16", 8),
    "float": ("float", 1),
    "float4": ("float", 4),
    "float8": ("float", 8),
    "float16": ("float", 16),
    "int": ("int", 1),
    "int2": ("int", 2),
    "int4": ("int", 4),
    "int8": ("int", 8),
    "int16": ("int", 16),
    "long": ("long", 1),
}

_MFMA_ARGS = "a,b,c,cbsz,abid,blgp"


# ---------------------------------------------------------------------------------------------
# CDNA MFMA, wave64, single block (no CBSZ/ABID/BLGP broadcast: all three immediates are 0).
#
# Source: AMD Matrix Instruction Calculator, ``-d`` ("Register to matrix element mapping with no
# modifiers") and ``--matrix-layout`` for gfx90a and gfx942.  With N the non-K size (16 or 32) and
# KL the A/B elements per lane, every dense single-block MFMA we use has
#   A: row  = lane % N,  k = KL * (lane // N) + e
#   B: col  = lane % N,  k = KL * (lane // N) + e
#   C (N=16, 4 elems):   row = 4 * (lane // 16) + e,                        col = lane % 16
#   C (N=32, 16 elems):  row = 8 * (e // 4) + 4 * (lane // 32) + e % 4,     col = lane % 32
# e.g. calculator, gfx942 v_mfma_f32_16x16x16_f16: "A k: 4 * floor(lane / 16) + 2 * GPR_num +
# floor(GPR_bits / 16)", "C or D i: 4 * floor(lane / 16) + (GPR_num % 4)"; v_mfma_f32_32x32x8_f16:
# "C or D i: (8 * floor(GPR_num / 4) % 32) + 4 * floor(lane / 32) + (GPR_num % 4)".
#
# gfx950 (CDNA4) is not covered by the calculator and the CDNA4 ISA guide was not available to
# us.  Its 16x16x32 / 32x32x16 f16/bf16 layouts (KL = 8, same C layout) come from:
#   * ROCm/composable_kernel include/ck/tensor_operation/gpu/warp/xdlops_gemm.hpp:
#     mfma_type<mfma_f32_16x16x32f16> has num_threads_per_blk = 16, num_input_blks = 4,
#     k_per_blk = 8, is_k_reduction = true, num_regs_per_blk = 4 (same C fields as 16x16x16f16,
#     which has k_per_blk = 4); mfma_type<mfma_f32_32x32x16f16>: 32 threads, 2 input blocks,
#     k_per_blk = 8, 16 regs; the bf16 entries match;
#   * triton-lang/triton lib/Dialect/TritonGPU/IR/LinearLayoutConversions.cpp
#     (mfmaDotToLinearLayout: "Each lane holds kWidth elements along the K dimension", then
#     nonKDim lanes along M/N, then the remaining lanes along K) together with
#     test/TritonGPU/amd/mfma-double-rate.mlir, which feeds kWidth = 8 operands straight into
#     rocdl.mfma.f32.16x16x32.f16 as vector<8xf16>.
# That is the same pattern as the calculator-confirmed gfx942 fp8 16x16x32 (KL = 8).
# ---------------------------------------------------------------------------------------------


def _mfma_dense(nonk: int, k_per_lane: int):
    """Lane layout functions of a dense single-block MFMA with an N x N output (N = 16 or 32)."""

    def a_index(lane, e):
        return (lane % nonk, k_per_lane * (lane // nonk) + e)

    def b_index(lane, e):
        return (k_per_lane * (lane // nonk) + e, lane % nonk)

    if nonk == 16:

        def c_index(lane, e):
            return (4 * (lane // 16) + e, lane % 16)

    else:

        def c_index(lane, e):
            return (8 * (e // 4) + 4 * (lane // 32) + e % 4, lane % 32)

    return a_index, b_index, c_index


def _mfma(
    *,
    m: int,
    k: int,
    in_dtype: str,
    acc_dtype: str,
    builtin: str,
    a_vec: str,
    c_vec: str,
    elems_per_scalar: int,
    min_llvm: str,
    tag: str,
) -> MatrixInstr:
    group = 64
    k_per_lane = m * k // group  # A elements per lane
    c_elems = m * m // group
    a_fn, b_fn, c_fn = _mfma_dense(m, k_per_lane)
    acc = {"float32": "f32", "int32": "i32"}[acc_dtype]
    return MatrixInstr(
        name=f"mfma.{acc}.{m}x{m}x{k}.{tag}",
        vendor="amd",
        m=m,
        n=m,
        k=k,
        a_dtype=in_dtype,
        b_dtype=in_dtype,
        acc_dtype=acc_dtype,
        group_size=group,
        a_elems=k_per_lane,
        b_elems=k_per_lane,
        c_elems=c_elems,
        a_index=a_fn,
        b_index=b_fn,
        c_index=c_fn,
        mnemonic=builtin,
        extra=(
            ("a_vec", a_vec),
            ("b_vec", a_vec),
            ("c_vec", c_vec),
            ("ab_elems_per_scalar", elems_per_scalar),
            ("arg_order", _MFMA_ARGS),
            ("cbsz", 0),
            ("abid", 0),
            ("blgp", 0),
            ("replication", 1),
            ("min_llvm", min_llvm),
        ),
    )


# Operand types below: clang/include/clang/Basic/BuiltinsAMDGPU.def (llvm/llvm-project), e.g.
#   __builtin_amdgcn_mfma_f32_32x32x8f16        "V16fV4hV4hV16fIiIiIi"   (half4, half4, float16, 3 imm)
#   __builtin_amdgcn_mfma_f32_16x16x16bf16_1k   "V4fV4sV4sV4fIiIiIi"     (short4 carrying bf16)
#   __builtin_amdgcn_mfma_f32_16x16x4f32        "V4fffV4fIiIiIi"         (scalar float A/B)
#   __builtin_amdgcn_mfma_i32_16x16x16i8        "V4iiiV4iIiIiIi"         (int = 4 x i8)
#   __builtin_amdgcn_mfma_i32_16x16x32_i8       "V4iWiWiV4iIiIiIi"       (long = 8 x i8)
#   __builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8  "V4fWiWiV4fIiIiIi"       (long = 8 x fp8)
#   __builtin_amdgcn_mfma_f32_16x16x32_f16      "V4fV8hV8hV4fIiIiIi"     (gfx950-insts)
#   __builtin_amdgcn_mfma_f32_16x16x32_bf16     "V4fV8yV8yV4fIiIiIi"     (gfx950-insts, __bf16 x 8)
#
# min_llvm: "13" for records first listed on gfx90a (the gfx90a target and the *_1k builtins came
# with LLVM 13; the plain MAI builtins are older); "17" for records first listed on gfx942 (the
# gfx942 target; the builtins themselves date from gfx940, LLVM 15); "20" for gfx950.  The 13 and
# 17 are release-era facts we could not tie to a release tag here; they err on the high side.


# ----------------------------------------------------------------------------- CDNA2 (gfx90a)


def mfma_f32_32x32x8_f16() -> MatrixInstr:
    return _mfma(
        m=32,
        k=8,
        in_dtype="float16",
        acc_dtype="float32",
        builtin="__builtin_amdgcn_mfma_f32_32x32x8f16",
        a_vec="half4",
        c_vec="float16",
        elems_per_scalar=1,
        min_llvm="13",
        tag="f16",
    )


def mfma_f32_16x16x16_f16() -> MatrixInstr:
    return _mfma(
        m=16,
        k=16,
        in_dtype="float16",
        acc_dtype="float32",
        builtin="__builtin_amdgcn_mfma_f32_16x16x16f16",
        a_vec="half4",
        c_vec="float4",
        elems_per_scalar=1,
        min_llvm="13",
        tag="f16",
    )


def mfma_f32_32x32x8_bf16_1k() -> MatrixInstr:
    return _mfma(
        m=32,
        k=8,
        in_dtype="bfloat16",
        acc_dtype="float32",
        builtin="__builtin_amdgcn_mfma_f32_32x32x8bf16_1k",
        a_vec="short4",
        c_vec="float16",
        elems_per_scalar=1,
        min_llvm="13",
        tag="bf16",
    )


def mfma_f32_16x16x16_bf16_1k() -> MatrixInstr:
    return _mfma(
        m=16,
        k=16,
        in_dtype="bfloat16",
        acc_dtype="float32",
        builtin="__builtin_amdgcn_mfma_f32_16x16x16bf16_1k",
        a_vec="short4",
        c_vec="float4",
        elems_per_scalar=1,
        min_llvm="13",
        tag="bf16",
    )


def mfma_f32_16x16x4_f32() -> MatrixInstr:
    return _mfma(
        m=16,
        k=4,
        in_dtype="float32",
        acc_dtype="float32",
        builtin="__builtin_amdgcn_mfma_f32_16x16x4f32",
        a_vec="float",
        c_vec="float4",
        elems_per_scalar=1,
        min_llvm="13",
        tag="f32",
    )


def mfma_i32_16x16x16_i8() -> MatrixInstr:
    """gfx908/gfx90a only: gfx940+ replaced it with 16x16x32 (calculator lists it for CDNA2, not CDNA3)."""
    return _mfma(
        m=16,
        k=16,
        in_dtype="int8",
        acc_dtype="int32",
        builtin="__builtin_amdgcn_mfma_i32_16x16x16i8",
        a_vec="int",
        c_vec="int4",
        elems_per_scalar=4,
        min_llvm="13",
        tag="i8",
    )


def mfma_i32_32x32x8_i8() -> MatrixInstr:
    return _mfma(
        m=32,
        k=8,
        in_dtype="int8",
        acc_dtype="int32",
        builtin="__builtin_amdgcn_mfma_i32_32x32x8i8",
        a_vec="int",
        c_vec="int16",
        elems_per_scalar=4,
        min_llvm="13",
        tag="i8",
    )


# ----------------------------------------------------------------------------- CDNA3 (gfx942)


def mfma_i32_16x16x32_i8() -> MatrixInstr:
    return _mfma(
        m=16,
        k=32,
        in_dtype="int8",
        acc_dtype="int32",
        builtin="__builtin_amdgcn_mfma_i32_16x16x32_i8",
        a_vec="long",
        c_vec="int4",
        elems_per_scalar=8,
        min_llvm="17",
        tag="i8",
    )


def mfma_i32_32x32x16_i8() -> MatrixInstr:
    return _mfma(
        m=32,
        k=16,
        in_dtype="int8",
        acc_dtype="int32",
        builtin="__builtin_amdgcn_mfma_i32_32x32x16_i8",
        a_vec="long",
        c_vec="int16",
        elems_per_scalar=8,
        min_llvm="17",
        tag="i8",
    )


# FP8 dtype subtlety: the same builtin reads *different* 8-bit formats per architecture.  gfx942
# interprets fp8 as E4M3 "FNUZ" (bias 8, no infinities, a single NaN at 0x80, max 240) -- the
# calculator prints "FP8 (AMD 4-bit exponent, 3-bit mantissa floating point)" for gfx942 -- while
# gfx950 and gfx12 use OCP E4M3FN (bias 7, max 448; calculator for gfx1201: "FP8 (OCP ...)").
# triton-lang/triton PR #7186: "gfx942 has its own FP8 variants, not the OCP ones ... starting
# gfx950, we switch to OCP FP8 variants".  Hence two records with different ``a_dtype``.


def mfma_f32_16x16x32_fp8(fmt: str = "float8_e4m3fnuz") -> MatrixInstr:
    tag = {"float8_e4m3fnuz": "e4m3fnuz", "float8_e4m3fn": "e4m3fn"}[fmt]
    return _mfma(
        m=16,
        k=32,
        in_dtype=fmt,
        acc_dtype="float32",
        builtin="__builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8",
        a_vec="long",
        c_vec="float4",
        elems_per_scalar=8,
        min_llvm="17" if tag == "e4m3fnuz" else "20",
        tag=tag,
    )


def mfma_f32_32x32x16_fp8(fmt: str = "float8_e4m3fnuz") -> MatrixInstr:
    tag = {"float8_e4m3fnuz": "e4m3fnuz", "float8_e4m3fn": "e4m3fn"}[fmt]
    return _mfma(
        m=32,
        k=16,
        in_dtype=fmt,
        acc_dtype="float32",
        builtin="__builtin_amdgcn_mfma_f32_32x32x16_fp8_fp8",
        a_vec="long",
        c_vec="float16",
        elems_per_scalar=8,
        min_llvm="17" if tag == "e4m3fnuz" else "20",
        tag=tag,
    )


# ----------------------------------------------------------------------------- CDNA4 (gfx950)
# Double-rate 16-bit MFMAs: twice the K of the CDNA3 forms, 8 elements (128 bits) of A/B per lane.
# Layout source: see the note above ``_mfma_dense`` (composable_kernel + Triton; no calculator).


def mfma_f32_16x16x32_f16() -> MatrixInstr:
    return _mfma(
        m=16,
        k=32,
        in_dtype="float16",
        acc_dtype="float32",
        builtin="__builtin_amdgcn_mfma_f32_16x16x32_f16",
        a_vec="half8",
        c_vec="float4",
        elems_per_scalar=1,
        min_llvm="20",
        tag="f16",
    )


def mfma_f32_32x32x16_f16() -> MatrixInstr:
    return _mfma(
        m=32,
        k=16,
        in_dtype="float16",
        acc_dtype="float32",
        builtin="__builtin_amdgcn_mfma_f32_32x32x16_f16",
        a_vec="half8",
        c_vec="float16",
        elems_per_scalar=1,
        min_llvm="20",
        tag="f16",
    )


def mfma_f32_16x16x32_bf16() -> MatrixInstr:
    return _mfma(
        m=16,
        k=32,
        in_dtype="bfloat16",
        acc_dtype="float32",
        builtin="__builtin_amdgcn_mfma_f32_16x16x32_bf16",
        a_vec="bf16x8",
        c_vec="float4",
        elems_per_scalar=1,
        min_llvm="20",
        tag="bf16",
    )


def mfma_f32_32x32x16_bf16() -> MatrixInstr:
    return _mfma(
        m=32,
        k=16,
        in_dtype="bfloat16",
        acc_dtype="float32",
        builtin="__builtin_amdgcn_mfma_f32_32x32x16_bf16",
        a_vec="bf16x8",
        c_vec="float16",
        elems_per_scalar=1,
        min_llvm="20",
        tag="bf16",
    )


# ---------------------------------------------------------------------------------------------
# RDNA3 (gfx11) WMMA, wave32, 16x16x16.
# Source: AMD Matrix Instruction Calculator, gfx1100, v_wmma_f32_16x16x16_f16 / _bf16 / i32_iu8,
# "Wave32 register to matrix element mapping with no modifiers":
#   "A i: (lane % 16)", "A k: 2 * GPR_num + floor(GPR_bits / 16)" (iu8: 4 * GPR_num + bits / 8),
#   "A[i][k] Lane: i and i+16"  -> lanes l and l+16 hold the same row of A (and column of B);
#   "C or D i: 2 * GPR_num + floor(lane / 16)", "C or D j: (lane % 16)".
# So: A row = lane % 16, k = e (all 16 K values in one lane); C row = 2 * e + lane // 16.
# The replication is also stated in clang/include/clang/Basic/BuiltinsAMDGPU.def ("[gfx12 WMMA]
# don't require replication of the A,B matrices, so they use fewer vector elements") and in
# Triton LinearLayoutConversions.cpp (wmmaDotOperandToLinearLayout: "version 1 duplicates these
# values across k dim").  The f32 accumulator takes one VGPR per element, so OPSEL plays no part.
# ---------------------------------------------------------------------------------------------


def _wmma_gfx11_a(lane, e):
    return (lane % 16, e)


def _wmma_gfx11_b(lane, e):
    return (e, lane % 16)


def _wmma_gfx11_c(lane, e):
    return (2 * e + lane // 16, lane % 16)


def _wmma_call(acc_dtype: str) -> tuple:
    """The builtin's argument order and immediates, and the accumulator vector type, shared by gfx11 and
    gfx12: the integer form takes (bool a_signed, a, bool b_signed, b, int8 c, bool clamp) (gfx11
    "V8iIbV4iIbV4iV8iIb", gfx12 "V8iIbV2iIbV2iV8iIb"); the float forms take (a, b, c), no immediates."""
    if acc_dtype == "int32":
        return (("arg_order", "a_signed,a,b_signed,b,c,clamp"), ("a_signed", 1), ("b_signed", 1), ("clamp", 0)), "int8"
    return (("arg_order", "a,b,c"),), "float8"


def _wmma(gen: str, in_dtype: str, builtin: str, a_vec: str, tag: str, acc_dtype: str, ab_elems: int,
          index: tuple, elems_per_scalar: int, replication: int, min_llvm: str) -> MatrixInstr:
    """A wave32 16x16x16 WMMA of RDNA generation ``gen`` (``gfx11``/``gfx12``): ``index`` is the (A, B, C)
    lane/element -> matrix position maps of that generation."""
    call, c_vec = _wmma_call(acc_dtype)
    return MatrixInstr(
        name=f"wmma.{'i32' if acc_dtype == 'int32' else 'f32'}.16x16x16.{tag}.{gen}",
        vendor="amd",
        m=16,
        n=16,
        k=16,
        a_dtype=in_dtype,
        b_dtype=in_dtype,
        acc_dtype=acc_dtype,
        group_size=32,
        a_elems=ab_elems,
        b_elems=ab_elems,
        c_elems=8,
        a_index=index[0],
        b_index=index[1],
        c_index=index[2],
        mnemonic=builtin,
        extra=(("a_vec", a_vec), ("b_vec", a_vec), ("c_vec", c_vec), ("ab_elems_per_scalar", elems_per_scalar))
        + call
        + (("replication", replication), ("min_llvm", min_llvm)),
    )


def _wmma_gfx11(
    in_dtype: str, builtin: str, a_vec: str, tag: str, acc_dtype: str = "float32", elems_per_scalar: int = 1
) -> MatrixInstr:
    # min_llvm 16: first release we are confident has both gfx1100 and these builtins (they may
    # already be in 15; not confirmed against a release tag, so we err high).  16 A/B elements per
    # lane: lanes l and l+16 hold the same data (replication 2).
    return _wmma("gfx11", in_dtype, builtin, a_vec, tag, acc_dtype, 16, (_wmma_gfx11_a, _wmma_gfx11_b, _wmma_gfx11_c),
                 elems_per_scalar, 2, "16")


def wmma_f32_16x16x16_f16_gfx11() -> MatrixInstr:
    return _wmma_gfx11("float16", "__builtin_amdgcn_wmma_f32_16x16x16_f16_w32", "half16", "f16")


def wmma_f32_16x16x16_bf16_gfx11() -> MatrixInstr:
    # "V8fV16sV16sV8f": bf16 travels as short16
    return _wmma_gfx11("bfloat16", "__builtin_amdgcn_wmma_f32_16x16x16_bf16_w32", "short16", "bf16")


def wmma_i32_16x16x16_iu8_gfx11() -> MatrixInstr:
    # int4 operand = 16 bytes = the lane's 16 K values; a_signed/b_signed = 1 selects int8 (0: uint8)
    return _wmma_gfx11(
        "int8", "__builtin_amdgcn_wmma_i32_16x16x16_iu8_w32", "int4", "iu8", acc_dtype="int32", elems_per_scalar=4
    )


# ---------------------------------------------------------------------------------------------
# RDNA4 (gfx12) WMMA, wave32, 16x16x16, no replication: 8 A/B elements per lane.
# Source: AMD Matrix Instruction Calculator, gfx1201, "Wave32 register to matrix element mapping":
#   f16/bf16: "A k: 8 * floor(GPR_num / 2) + 4 * floor(lane / 16) + 2 * (GPR_num % 2) +
#             floor(GPR_bits / 16)"   -> k = 8 * (e // 4) + 4 * (lane // 16) + e % 4
#   iu8/fp8:  "A k: 8 * floor(lane / 16) + 4 * GPR_num + floor(GPR_bits / 8)" -> k = 8 * (lane // 16) + e
#   all:      "A i: (lane % 16)", "C or D i: 8 * floor(lane / 16) + GPR_num", "C or D j: (lane % 16)"
# Builtin operand types: BuiltinsAMDGPU.def, "_gfx12" WMMA section ("V8fV8hV8hV8f",
# "V8fV8sV8sV8f", "V8iIbV2iIbV2iV8iIb", "V8fV2iV2iV8f"); added by llvm/llvm-project PR #77795
# (January 2024).  min_llvm 18 assumes that PR made the release/18.x branch (2024-01-23); gfx1200 and
# gfx1201 themselves were defined in PR #73133 (November 2023).
# ---------------------------------------------------------------------------------------------


def _wmma_gfx12_a16(lane, e):
    return (lane % 16, 8 * (e // 4) + 4 * (lane // 16) + e % 4)


def _wmma_gfx12_b16(lane, e):
    return (8 * (e // 4) + 4 * (lane // 16) + e % 4, lane % 16)


def _wmma_gfx12_a8(lane, e):
    return (lane % 16, 8 * (lane // 16) + e)


def _wmma_gfx12_b8(lane, e):
    return (8 * (lane // 16) + e, lane % 16)


def _wmma_gfx12_c(lane, e):
    return (8 * (lane // 16) + e, lane % 16)


def _wmma_gfx12(in_dtype: str, builtin: str, a_vec: str, tag: str, acc_dtype: str = "float32") -> MatrixInstr:
    eight_bit = a_vec == "int2"
    index = (_wmma_gfx12_a8, _wmma_gfx12_b8, _wmma_gfx12_c) if eight_bit else \
        (_wmma_gfx12_a16, _wmma_gfx12_b16, _wmma_gfx12_c)
    return _wmma("gfx12", in_dtype, builtin, a_vec, tag, acc_dtype, 8, index, 4 if eight_bit else 1, 1, "18")


def wmma_f32_16x16x16_f16_gfx12() -> MatrixInstr:
    return _wmma_gfx12("float16", "__builtin_amdgcn_wmma_f32_16x16x16_f16_w32_gfx12", "half8", "f16")


def wmma_f32_16x16x16_bf16_gfx12() -> MatrixInstr:
    return _wmma_gfx12("bfloat16", "__builtin_amdgcn_wmma_f32_16x16x16_bf16_w32_gfx12", "short8", "bf16")


def wmma_i32_16x16x16_iu8_gfx12() -> MatrixInstr:
    return _wmma_gfx12("int8", "__builtin_amdgcn_wmma_i32_16x16x16_iu8_w32_gfx12", "int2", "iu8", acc_dtype="int32")


def wmma_f32_16x16x16_fp8_gfx12() -> MatrixInstr:
    # gfx12 fp8 is OCP E4M3FN (calculator: "FP8 (OCP 4-bit exponent, 3-bit mantissa ...)")
    return _wmma_gfx12("float8_e4m3fn", "__builtin_amdgcn_wmma_f32_16x16x16_fp8_fp8_w32_gfx12", "int2", "e4m3fn")


# ---------------------------------------------------------------------------------------------
# Per-architecture lists, preferred first.  Within a dtype the 32x32 MFMA comes first: it reads
# half as many A/B elements per FLOP as the 16x16 one (better register/LDS reuse); a pass whose
# tile is smaller than 32 falls through to the 16x16 form.  On gfx950 the double-rate forms come
# before the CDNA3 ones they supersede.
# ---------------------------------------------------------------------------------------------


def cdna2_matrix_instrs() -> tuple[MatrixInstr, ...]:
    return (
        mfma_f32_32x32x8_f16(),
        mfma_f32_16x16x16_f16(),
        mfma_f32_32x32x8_bf16_1k(),
        mfma_f32_16x16x16_bf16_1k(),
        mfma_i32_32x32x8_i8(),
        mfma_i32_16x16x16_i8(),
        mfma_f32_16x16x4_f32(),
    )


def cdna3_matrix_instrs() -> tuple[MatrixInstr, ...]:
    return (
        mfma_f32_32x32x8_f16(),
        mfma_f32_16x16x16_f16(),
        mfma_f32_32x32x8_bf16_1k(),
        mfma_f32_16x16x16_bf16_1k(),
        mfma_f32_32x32x16_fp8("float8_e4m3fnuz"),
        mfma_f32_16x16x32_fp8("float8_e4m3fnuz"),
        mfma_i32_32x32x16_i8(),
        mfma_i32_16x16x32_i8(),
        mfma_f32_16x16x4_f32(),
    )


def cdna4_matrix_instrs() -> tuple[MatrixInstr, ...]:
    return (
        mfma_f32_32x32x16_f16(),
        mfma_f32_16x16x32_f16(),
        mfma_f32_32x32x8_f16(),
        mfma_f32_16x16x16_f16(),
        mfma_f32_32x32x16_bf16(),
        mfma_f32_16x16x32_bf16(),
        mfma_f32_32x32x8_bf16_1k(),
        mfma_f32_16x16x16_bf16_1k(),
        mfma_f32_32x32x16_fp8("float8_e4m3fn"),
        mfma_f32_16x16x32_fp8("float8_e4m3fn"),
        mfma_i32_32x32x16_i8(),
        mfma_i32_16x16x32_i8(),
        mfma_f32_16x16x4_f32(),
    )


def rdna3_matrix_instrs() -> tuple[MatrixInstr, ...]:
    return (wmma_f32_16x16x16_f16_gfx11(), wmma_f32_16x16x16_bf16_gfx11(), wmma_i32_16x16x16_iu8_gfx11())


def rdna4_matrix_instrs() -> tuple[MatrixInstr, ...]:
    return (
        wmma_f32_16x16x16_f16_gfx12(),
        wmma_f32_16x16x16_bf16_gfx12(),
        wmma_f32_16x16x16_fp8_gfx12(),
        wmma_i32_16x16x16_iu8_gfx12(),
    )


def all_amd_matrix_instrs() -> tuple[MatrixInstr, ...]:
    """Every distinct AMD record (by name), for layout checks."""
    seen: dict[str, MatrixInstr] = {}
    for group in (
        cdna2_matrix_instrs(),
        cdna3_matrix_instrs(),
        cdna4_matrix_instrs(),
        rdna3_matrix_instrs(),
        rdna4_matrix_instrs(),
    ):
        for mi in group:
            seen.setdefault(mi.name, mi)
    return tuple(seen.values())
