"""Data types.

A dtype is carried through the IR as its canonical name (a ``str`` such as ``"float16"``), so IR
nodes stay cheap to build, hash and print.  This module normalises the many spellings users write
(``"float"``, ``"half"``, ``T.float16``, ``torch.float16``, ``numpy.float32``) and knows each type's
width, kind and NumPy equivalent (``ml_dtypes`` for bfloat16 and the fp8 types).
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
}

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
}


class DTypeError(ValueError):
    pass


# TileLang dtypes without a representation here yet, and why (refused by name rather than "unknown")
_NOT_SUPPORTED = {
    "tfloat32": "tfloat32 (float32 rounded to a 10-bit mantissa for tensor cores) is not supported: keep the "
                "operands float32 (T.gemm of float32 operands is exact float32 arithmetic here)",
    "float8_e8m0fnu": "float8_e8m0fnu (the power-of-two scale format of MX block scaling) is not supported",
    "float4_e2m1fn": "float4_e2m1fn (4-bit floats, two per byte) is not supported",
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


def is_low_precision_float(dtype: str) -> bool:
    return is_float(dtype) and bits(dtype) < 32


@cache
def to_numpy(dtype: str) -> np.dtype:
    """NumPy dtype (ml_dtypes for bfloat16 / fp8)."""
    d = canon(dtype)
    if d in ("bfloat16",) or d.startswith("float8"):
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, d))
    return np.dtype(d)


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
        return float(np.finfo(to_numpy(d)).max) if not d.startswith("float8") else float(_fp8_max(d))
    return int(np.iinfo(to_numpy(d)).max)


def min_value(dtype: str):
    d = canon(dtype)
    if is_float(d):
        return -max_value(d)
    return int(np.iinfo(to_numpy(d)).min)


def _fp8_max(d: str) -> float:
    import ml_dtypes

    return ml_dtypes.finfo(getattr(ml_dtypes, d)).max


ALL_DTYPES = tuple(_INFOS)
