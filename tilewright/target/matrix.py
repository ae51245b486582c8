"""Matrix (tensor-core / MFMA / WMMA) instruction descriptions.

A ``MatrixInstr`` says what one matrix instruction computes and, above all, which lane of the
executing group (a warp or a wave) holds which element of each operand.  The lane layouts are
plain Python functions that use only ``+ - * // %`` on their arguments, so the same function is
evaluated

* on NumPy integer arrays by the emulator and by layout checks (all lanes at once), and
* on IR expressions by the lowering passes (``lane`` is then ``threadIdx % group_size``).

Element ``e`` always counts the operand's elements within one lane in the order the instruction
takes them in its registers (for 16-bit types, two elements per 32-bit register, low half first).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

IndexFn = Callable[[Any, int], tuple]


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

    def extra_dict(self) -> dict:
        return dict(self.extra)

    def __hash__(self) -> int:
        return hash(self.name)


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
