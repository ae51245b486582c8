"""Matrix (tensor-core / MFMA / WMMA) instruction descriptions.

A ``MatrixInstr`` says what one matrix instruction computes and, above all, which lane of the
executing group (a warp or a wave) holds which element of each operand.  The lane layouts are
plain Python functions that use only ``+ - * // %`` on their arguments, so the same function is
evaluated

* on NumPy integer arrays by the emulator and by layout checks (all lanes at once), and
* on IR expressions by the lowering passes (``lane`` is then ``threadIdx % group_size``).

Element ``e`` always counts the operand's elements within one lane in the order the instruction
takes them in its registers (for 16-bit types, two elements per 32-bit register, low half first).

Instructions differ in where they read their operands (``a_sources`` / ``b_sources``): from
registers (mma.sync, MFMA, WMMA: every lane loads its elements first), or through a shared-memory
matrix descriptor (Hopper's wgmma reads B, and optionally A, straight from shared memory).  An
operand read through a descriptor has no lane layout.  wgmma comes in an N-family per operand type
(m64nNk16 for N = 8, 16, ..., 256 with 16-bit inputs): ``n_family`` lists the N of the family an
instruction belongs to, and ``wgmma_instr(dtype, n)`` builds one member.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

IndexFn = Callable[[Any, int], tuple]

REGISTERS = "registers"  # the lanes hold the operand in registers (loaded by per-lane code)
SMEM_DESC = "smem_desc"  # the instruction reads the operand through a shared-memory matrix descriptor
FAMILIES = ("mma.sync", "wgmma", "mfma", "wmma")


@dataclass(frozen=True)
class MatrixInstr:
    """One matrix instruction: D[m, n] = A[m, k] @ B[k, n] + C[m, n], executed by ``group_size`` lanes.

    ``a_index(lane, e) -> (row, kk)``, ``b_index(lane, e) -> (kk, col)`` and
    ``c_index(lane, e) -> (row, col)`` give the logical position of element ``e`` held by ``lane``.
    Several lanes may hold the same A/B element (WMMA on gfx11 replicates A and B across the two
    half-waves); every C/D element is held by exactly one lane.
    """

    name: str  # a readable id, e.g. "mma.m16n8k16.f16" or "mfma.f32.16x16x16.f16"
    vendor: str  # "nvidia" or "amd"
    m: int
    n: int
    k: int
    a_dtype: str
    b_dtype: str
    acc_dtype: str
    group_size: int  # lanes executing it together
    a_elems: int  # elements of A per lane
    b_elems: int
    c_elems: int
    a_index: IndexFn = field(compare=False, repr=False)
    b_index: IndexFn = field(compare=False, repr=False)
    c_index: IndexFn = field(compare=False, repr=False)
    # what the printers emit: a PTX mnemonic for NVIDIA, a clang builtin for AMD
    mnemonic: str = ""
    # extra, printer-specific facts (operand vector types, builtin modifiers)
    extra: tuple = ()
    # "mma.sync", "wgmma", "mfma" or "wmma"; read from the name when not given
    family: str = ""
    a_sources: tuple = (REGISTERS,)  # where the instruction can read A from, preferred first
    b_sources: tuple = (REGISTERS,)
    n_family: tuple = ()  # the N values of this instruction's family (wgmma); () for a single shape
    transposable: bool = True  # may read operands stored M/N-major from shared (else K-major only)

    def __post_init__(self):
        if not self.family:
            object.__setattr__(self, "family", _family_of(self.name))

    def extra_dict(self) -> dict:
        return dict(self.extra)

    def __hash__(self) -> int:
        return hash(self.name)


def _family_of(name: str) -> str:
    for fam in ("mma", "wgmma", "mfma", "wmma"):
        if name.startswith(fam + "."):
            return "mma.sync" if fam == "mma" else fam
    raise ValueError(f"cannot tell the instruction family of {name!r}; pass family=")


# ---------------------------------------------------------------------------------------------
# NVIDIA mma.sync m16n8k16 (sm_80+), fp16/bf16 inputs, fp32 accumulators.
# Layout facts from the PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type":
#   groupID = lane >> 2, threadID_in_group = lane % 4
#   A (16x16, 8 elems): row = groupID + 8 * ((e // 2) % 2), col = tig * 2 + (e % 2) + 8 * (e // 4)
#   B (16x8, 4 elems):  row(k) = tig * 2 + (e % 2) + 8 * (e // 2), col = groupID
#   C (16x8, 4 elems):  row = groupID + 8 * (e // 2), col = tig * 2 + (e % 2)
# ---------------------------------------------------------------------------------------------


def _mma16816_a(lane, e):
    return (lane // 4 + 8 * ((e // 2) % 2), (lane % 4) * 2 + (e % 2) + 8 * (e // 4))


def _mma16816_b(lane, e):
    return ((lane % 4) * 2 + (e % 2) + 8 * (e // 2), lane // 4)


def _mma16816_c(lane, e):
    return (lane // 4 + 8 * (e // 2), (lane % 4) * 2 + (e % 2))


def mma_sync_m16n8k16(in_dtype: str) -> MatrixInstr:
    ptx_type = {"float16": "f16", "bfloat16": "bf16"}[in_dtype]
    return MatrixInstr(
        name=f"mma.m16n8k16.{ptx_type}",
        vendor="nvidia",
        m=16,
        n=8,
        k=16,
        a_dtype=in_dtype,
        b_dtype=in_dtype,
        acc_dtype="float32",
        group_size=32,
        a_elems=8,
        b_elems=4,
        c_elems=4,
        a_index=_mma16816_a,
        b_index=_mma16816_b,
        c_index=_mma16816_c,
        mnemonic=f"mma.sync.aligned.m16n8k16.row.col.f32.{ptx_type}.{ptx_type}.f32",
    )


# ---------------------------------------------------------------------------------------------
# NVIDIA wgmma.mma_async m64nNk* (sm_90a only), executed by a warpgroup (4 consecutive warps, 128
# lanes).  B is always read through a shared-memory descriptor; A through a descriptor or from
# registers.  Facts from the PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate":
#   16-bit inputs (f16, bf16): K = 16, N = 8, 16, ..., 256; both operands may be stored M/N-major
#   8-bit floats (e4m3, e5m2): K = 32, same N; operands K-major only
#   8-bit integers (s8, u8):   K = 32, N = 8, 16, 24, 32, 48, ..., 256 (multiples of 16 past 32)
# Accumulator D (64 x N, N/2 elements per lane): warp w = lane // 32 of the warpgroup holds rows
# 16w .. 16w+15, laid out per 8-column chunk j as mma.m16n8's C:
#   row = 16 * (lane // 32) + (lane % 32) // 4 + 8 * ((e // 2) % 2), col = 8 * (e // 4) + (lane % 4) * 2 + e % 2
# A from registers (64 x K, 16-bit: 8 elements per lane): warp w holds rows 16w .. 16w+15 as mma.m16n8k16's A.
# ---------------------------------------------------------------------------------------------

_WGMMA_TYPES = {  # input dtype -> (ptx type, accumulator dtype, K, transposable)
    "float16": ("f16", "float32", 16, True),
    "bfloat16": ("bf16", "float32", 16, True),
    "float8_e4m3fn": ("e4m3", "float32", 32, False),
    "float8_e5m2": ("e5m2", "float32", 32, False),
    "int8": ("s8", "int32", 32, False),
}
_N_DENSE = tuple(range(8, 257, 8))
_N_INT = (8, 16, 24) + tuple(range(32, 257, 16))


def wgmma_n_family(in_dtype: str) -> tuple:
    """The N of wgmma m64nNk* with ``in_dtype`` inputs (() when wgmma does not take the type)."""
    if in_dtype not in _WGMMA_TYPES:
        return ()
    return _N_INT if in_dtype == "int8" else _N_DENSE


def _wgmma_a(lane, e):
    return (16 * (lane // 32) + (lane % 32) // 4 + 8 * ((e // 2) % 2), (lane % 4) * 2 + (e % 2) + 8 * (e // 4))


def _wgmma_c(lane, e):
    return (16 * (lane // 32) + (lane % 32) // 4 + 8 * ((e // 2) % 2), 8 * (e // 4) + (lane % 4) * 2 + (e % 2))


def _no_lane_layout(lane, e):
    raise ValueError("wgmma reads B through a shared-memory descriptor: no lane holds B")


def wgmma_instr(in_dtype: str, n: int) -> MatrixInstr:
    """``wgmma.mma_async.m64n{n}k*`` for ``in_dtype`` inputs; ``n`` must be in the type's N-family."""
    ptx, acc, k, transposable = _WGMMA_TYPES[in_dtype]
    family = wgmma_n_family(in_dtype)
    if n not in family:
        raise ValueError(f"wgmma with {in_dtype} inputs has no N = {n}; N is one of {family}")
    acc_ptx = "s32" if acc == "int32" else "f32"
    bits = 16 if k == 16 else 8
    return MatrixInstr(
        name=f"wgmma.m64n{n}k{k}.{acc_ptx}.{ptx}",
        vendor="nvidia",
        m=64,
        n=n,
        k=k,
        a_dtype=in_dtype,
        b_dtype=in_dtype,
        acc_dtype=acc,
        group_size=128,
        a_elems=64 * k // 128,  # when A comes from registers
        b_elems=0,
        c_elems=64 * n // 128,
        a_index=_wgmma_a if bits == 16 else _no_lane_layout,
        b_index=_no_lane_layout,
        c_index=_wgmma_c,
        mnemonic=f"wgmma.mma_async.sync.aligned.m64n{n}k{k}.{acc_ptx}.{ptx}.{ptx}",
        family="wgmma",
        # 8-bit A from registers has its own fragment layout; only the 16-bit one is described here
        a_sources=(SMEM_DESC, REGISTERS) if bits == 16 else (SMEM_DESC,),
        b_sources=(SMEM_DESC,),
        n_family=family,
        transposable=transposable,
    )


def wgmma_instrs(in_dtype: str) -> tuple:
    """The whole N-family of wgmma for ``in_dtype``, largest N first."""
    return tuple(wgmma_instr(in_dtype, n) for n in reversed(wgmma_n_family(in_dtype)))


# ---------------------------------------------------------------------------------------------
# wgmma shared-memory matrix descriptors (PTX ISA, "Matrix Descriptor Format" of the asynchronous
# warpgroup matrix instructions).  A 64-bit value:
#   bits  0-13: start address >> 4 (shared window byte address)
#   bits 16-29: leading-dimension byte offset >> 4 (LBO)
#   bits 32-45: stride-dimension byte offset >> 4 (SBO)
#   bits 49-51: base offset (0 here: every operand tile starts on its swizzle period)
#   bits 62-63: layout type: 0 no swizzle (interleaved), 1 128-byte, 2 64-byte, 3 32-byte swizzle
# Canonical layouts read through a descriptor with a W-byte swizzle (W = 32, 64, 128), T = 16 bytes:
#   K-major  (rows = M or N, K contiguous): rows r at (r // 8) * SBO + (r % 8) * W, K bytes contiguous
#            within the W-byte row (the instruction's K fits inside one row; LBO is not used);
#   MN-major (K rows, M/N contiguous): element mn at (mn // (W / e)) * LBO + (mn % (W / e)) * e, k at
#            (k // 8) * SBO + (k % 8) * W.
# The swizzle applies to the final shared address: bits [4, 4 + b) ^= bits [7, 7 + b), b = log2(W / 16)
# (the pattern repeats every 8 W bytes, so tiles must start on such a boundary).
# ---------------------------------------------------------------------------------------------

WGMMA_LAYOUT_TYPE = {0: 0, 128: 1, 64: 2, 32: 3}  # swizzle bytes -> descriptor layout type
_SWIZZLE_OF_TYPE = {v: k for k, v in WGMMA_LAYOUT_TYPE.items()}
K_MAJOR, MN_MAJOR = "k", "mn"


def wgmma_descriptor(addr: int, lbo: int, sbo: int, swizzle: int) -> int:
    """The 64-bit descriptor of an operand at shared byte address ``addr`` (16-byte aligned)."""
    if addr % 16 or lbo % 16 or sbo % 16:
        raise ValueError(f"wgmma descriptor fields must be 16-byte multiples (address {addr}, LBO {lbo}, SBO {sbo})")
    return ((addr & 0x3FFFF) >> 4) | ((lbo >> 4) & 0x3FFF) << 16 | ((sbo >> 4) & 0x3FFF) << 32 \
        | WGMMA_LAYOUT_TYPE[swizzle] << 62


def decode_wgmma_descriptor(desc: int) -> tuple[int, int, int, int]:
    """(start address, LBO, SBO, swizzle bytes) of a descriptor."""
    desc = int(desc)
    return ((desc & 0x3FFF) << 4, ((desc >> 16) & 0x3FFF) << 4, ((desc >> 32) & 0x3FFF) << 4,
            _SWIZZLE_OF_TYPE[(desc >> 62) & 3])


def swizzle_address(addr, swizzle: int):
    """The shared address the hardware accesses for the canonical address ``addr`` (ints or arrays)."""
    if swizzle == 0:
        return addr
    bits = {32: 1, 64: 2, 128: 3}[swizzle]
    mask = (1 << bits) - 1
    return addr ^ (((addr >> 7) & mask) << 4)


def wgmma_operand_addresses(desc: int, major: str, rows: int, k: int, elem_bytes: int):
    """Shared byte addresses [rows, k] of an instruction operand (A: rows = 64, B: rows = N, both
    indexed (row, kk)) read through ``desc`` in the ``major`` canonical layout."""
    import numpy as np

    start, lbo, sbo, swizzle = decode_wgmma_descriptor(desc)
    if swizzle == 0:
        raise ValueError("the no-swizzle (interleaved) wgmma layout is not produced by tilewright")
    r = np.arange(rows)[:, None]
    kk = np.arange(k)[None, :]
    if major == K_MAJOR:
        if k * elem_bytes > swizzle:
            raise ValueError(f"a K-major operand's K step ({k * elem_bytes} bytes) must fit in one {swizzle}-byte row")
        canon = (r // 8) * sbo + (r % 8) * swizzle + kk * elem_bytes
    else:
        per = swizzle // elem_bytes
        canon = (r // per) * lbo + (r % per) * elem_bytes + (kk // 8) * sbo + (kk % 8) * swizzle
    return swizzle_address(start + canon, swizzle)
