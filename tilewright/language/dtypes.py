"""TileLang's ``tilelang.language.dtypes`` helpers for the 4-bit float names."""

from __future__ import annotations

_FLOAT4 = ("float4_e2m1fn", "float4_e2m1fnx2", "float4_e2m1_unpacked", "custom[float4_e2m1_unpacked]8")


def is_float4(dtype) -> bool:
    return str(dtype) in _FLOAT4


def is_float4_e2m1fn(dtype) -> bool:
    return str(dtype) == "float4_e2m1fn"


def is_float4_e2m1_unpacked(dtype) -> bool:
    return str(dtype) in ("float4_e2m1_unpacked", "custom[float4_e2m1_unpacked]8")


def resolve_torch_storage_dtype(dtype):
    """The dtype a tensor of ``dtype`` is stored as in torch: itself, but ``int8`` for int4/uint4 and
    ``float4_e2m1fnx2`` for fp4 (``int8`` where torch has no ``float4_e2m1fn_x2``)."""
    from ..binding.tensor_args import torch_storage_name
    from . import DType
    from . import dtype as _canon_dtype

    name = str(dtype)
    if name in ("float4_e2m1fn", "float4_e2m1fnx2"):
        return DType("float4_e2m1fnx2" if torch_storage_name(name) == "float4_e2m1fn_x2" else "int8")
    if name in ("int4", "uint4"):
        return DType("int8")
    return _canon_dtype(name)
