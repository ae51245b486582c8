"""Data types.

A dtype is carried through the IR as its canonical name (a ``str`` such as ``"float16"``), so IR
nodes stay cheap to build, hash and print.  This module normalises the many spellings users write
(``"float"``, ``"half"``, ``T.float16``, ``torch.float16``, ``numpy.float32``) and knows each type's
width, kind and NumPy equivalent (``ml_dtypes`` for bfloat16, the fp8 types and the sub-byte types).

Sub-byte types (``int4``, ``uint4``, ``float4_e2m1fn``: 4 bits) are packed two per byte in global
memory, element ``2i`` in the low nibble of byte ``i`` (TileLang's and PyTorch's layout: a tensor of
logical shape ``(..., n)`` is passed as ``int8``/``uint8`` storage of shape ``(..., n // 2)``).
Everywhere else -- shared memory, registers, the CPU backends' arrays -- one element takes one byte.
``tfloat32`` is TileLang's name for float32 operands of tensor-core GEMMs: it is float32 here
(stored and computed as float32), so a tfloat32 GEMM is at least as exact as the tf32 one.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np


@dataclass(frozen=True)
class DTypeInfo:
    name: str
    bits: int
    kind: str  # "float", "int", "uint", "bool"

    @property
    def bytes(self) -> int:
        return max(self.bits // 8, 1)


_INFOS = {
    "bool": DTypeInfo("bool", 8, "bool"),
    "int8": DTypeInfo("int8", 8, "int"),
    "int16": DTypeInfo("int16", 16, "int"),
    "int32": DTypeInfo("int32", 32, "int"),
    "int64": DTypeInfo("int64", 64, "int"),
    "uint8": DTypeInfo("uint8", 8, "uint"),
    "uint16": DTypeInfo("uint16", 16, "uint"),
    "uint32": DTypeInfo("uint32", 32, "uint"),
    "uint64": DTypeInfo("uint64", 64, "uint"),
    "float16": DTypeInfo("float16", 16, "float"),
    "bfloat16": DTypeInfo("bfloat16", 16, "float"),
    "float32": DTypeInfo("float32", 32, "float"),
    "float64": DTypeInfo("float64", 64, "float"),
    "float8_e4m3fn": DTypeInfo("float8_e4m3fn", 8, "float"),
    "float8_e5m2": DTypeInfo("float8_e5m2", 8, "float"),
    "float8_e4m3fnuz": DTypeInfo("float8_e4m3fnuz", 8, "float"),
    "float8_e5m2fnuz": DTypeInfo("float8_e5m2fnuz", 8, "float"),
    "float8_e8m0fnu": DTypeInfo("float8_e8m0fnu", 8, "float"),
    "int4": DTypeInfo("int4", 4, "int"),
    "uint4": DTypeInfo("uint4", 4, "uint"),
    "float4_e2m1fn": DTypeInfo("float4_e2m1fn", 4, "float"),
}

# 4-bit types: two per byte in global memory (see the module docstring)
SUBBYTE = frozenset(n for n, i in _INFOS.items() if i.bits < 8)

_ALIASES = {
    "float": "float32",
    "half": "float16",
    "fp16": "float16",
    "f16": "float16",
    "bf16": "bfloat16",
    "fp32": "float32",
    "f32": "float32",
    "double": "float64",
    "fp64": "float64",
    "int": "int32",
    "long": "int64",
    "e4m3_float8": "float8_e4m3fn",
    "float8_e4m3": "float8_e4m3fn",
    "e5m2_float8": "float8_e5m2",
    "fp8_e4m3": "float8_e4m3fn",
    "fp8_e5m2": "float8_e5m2",
    "uint1": "bool",
    "tfloat32": "float32",
    "tf32": "float32",
    "float8_e8m0": "float8_e8m0fnu",
    "e8m0": "float8_e8m0fnu",
    "fp4_e2m1": "float4_e2m1fn",
    "float4_e2m1": "float4_e2m1fn",
}


class DTypeError(ValueError):
    pass


# TileLang dtypes without a representation here yet, and why (refused by name rather than "unknown")
_NOT_SUPPORTED = {
    "float4_e2m1fnx2": "float4_e2m1fnx2 (a packed pair of float4_e2m1fn) is not supported as an element type: "
                       "use float4_e2m1fn, which global memory stores two per byte",
    "float4_e2m1_unpacked": "float4_e2m1_unpacked (TileLang's one-fp4-per-byte layout for Blackwell tensor "
                            "memory) is not supported: use float4_e2m1fn",
    "bfloat16x2": "bfloat16x2 (a packed pair of bfloat16) is not supported as an element type: use two bfloat16 "
                  "values or a [2] buffer",
    "float16x2": "float16x2 (a packed pair of float16) is not supported as an element type: use two float16 "
                 "values or a [2] buffer",
    "float32x2": "float32x2 (a packed pair of float32) is not supported: use two float32 values or a [2] buffer",
}


def _unsupported_error_class():
    from ..errors import CompileError

    class UnsupportedDTypeError(CompileError, DTypeError):
        """A TileLang dtype tilewright cannot represent: a CompileError (and a DTypeError)."""

    return UnsupportedDTypeError


UnsupportedDTypeError = _unsupported_error_class()


@cache
def _canon_str(s: str) -> str:
    s0 = s.strip()
    s0 = s0.removeprefix("torch.")
    s0 = _ALIASES.get(s0, s0)
    if s0 in _NOT_SUPPORTED:
        raise UnsupportedDTypeError(f"dtype {s0!r}: {_NOT_SUPPORTED[s0]}",
                                    hint="choose a supported dtype: " + ", ".join(sorted(_INFOS)))
    if s0 not in _INFOS:
        raise DTypeError(f"unknown dtype {s!r}; supported: {', '.join(sorted(_INFOS))}")
    return s0


def canon(dtype) -> str:
    """Canonical dtype name for any accepted spelling."""
    if isinstance(dtype, str):
        return _canon_str(dtype)
    mod = type(dtype).__module__
    if mod.startswith("torch"):
        return _canon_str(str(dtype))
    if isinstance(dtype, type) and issubclass(dtype, np.generic):
        return _canon_str(np.dtype(dtype).name)
    if isinstance(dtype, np.dtype):
        return _canon_str(dtype.name)
    if dtype is float:
        return "float32"
    if dtype is int:
        return "int32"
    if dtype is bool:
        return "bool"
    raise DTypeError(f"cannot use {dtype!r} as a dtype; write a name such as 'float16' or T.float16")


def info(dtype: str) -> DTypeInfo:
    return _INFOS[canon(dtype)]


def bits(dtype: str) -> int:
    return _INFOS[dtype].bits


def nbytes(dtype: str) -> int:
    return _INFOS[dtype].bytes


def is_float(dtype: str) -> bool:
    return _INFOS[dtype].kind == "float"


def is_int(dtype: str) -> bool:
    return _INFOS[dtype].kind in ("int", "uint")


def is_signed_int(dtype: str) -> bool:
    return _INFOS[dtype].kind == "int"


def is_bool(dtype: str) -> bool:
    return dtype == "bool"


def is_subbyte(dtype: str) -> bool:
    """4-bit types: packed two per byte in global memory."""
    return dtype in SUBBYTE


def is_low_precision_float(dtype: str) -> bool:
    return is_float(dtype) and bits(dtype) < 32


@cache
def to_numpy(dtype: str) -> np.dtype:
    """NumPy dtype (ml_dtypes for bfloat16 / fp8)."""
    d = canon(dtype)
    if d in ("bfloat16", "int4", "uint4") or d.startswith(("float8", "float4")):
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, d))
    return np.dtype(d)


def int_limits(npdt: np.dtype):
    """``np.iinfo`` that also knows ml_dtypes' int4 / uint4 (NumPy kind "V")."""
    if npdt.name in ("int4", "uint4"):
        import ml_dtypes

        return ml_dtypes.iinfo(npdt)
    return np.iinfo(npdt)


def from_numpy(np_dtype) -> str:
    return canon(np.dtype(np_dtype).name)


def promote(a: str, b: str) -> str:
    """Result type of a binary arithmetic operation between two typed values."""
    if a == b:
        return a
    ia, ib = _INFOS[a], _INFOS[b]
    if ia.kind == "float" or ib.kind == "float":
        if ia.kind != "float":
            return b
        if ib.kind != "float":
            return a
        if ia.bits != ib.bits:
            return a if ia.bits > ib.bits else b
        return "float32"  # float16 with bfloat16 (or two fp8 kinds): compute in float32
    if ia.kind == "bool":
        return b
    if ib.kind == "bool":
        return a
    if ia.bits != ib.bits:
        return a if ia.bits > ib.bits else b
    return a if ia.kind == "uint" else b


def max_value(dtype: str):
    d = canon(dtype)
    if is_float(d):
        if d in ("float16", "float32", "float64"):
            return float(np.finfo(to_numpy(d)).max)
        return float(_ml_finfo(d).max)  # bfloat16, fp8, fp4: NumPy's finfo does not know ml_dtypes' types
    return int(int_limits(to_numpy(d)).max)


def min_value(dtype: str):
    d = canon(dtype)
    if d == "float8_e8m0fnu":  # unsigned: powers of two only
        return float(_ml_finfo(d).min)
    if is_float(d):
        return -max_value(d)
    return int(int_limits(to_numpy(d)).min)


def _ml_finfo(d: str):
    import ml_dtypes

    return ml_dtypes.finfo(getattr(ml_dtypes, d))


ALL_DTYPES = tuple(_INFOS)
