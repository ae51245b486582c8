"""4-bit tensors (int4, uint4, float4_e2m1fn): byte storage, two elements per byte.

A kernel parameter ``A: T.Tensor((M, N), T.int4)`` takes a tensor of *storage* shape ``(M, N // 2)``
(torch ``int8``/``uint8``/``float4_e2m1fn_x2``, or a NumPy ``int8``/``uint8`` array); element
``A[i, 2j]`` is the low nibble of byte ``(i, j)`` and ``A[i, 2j + 1]`` the high one, as in TileLang
and PyTorch.  The last dimension must be contiguous; the other strides count bytes, which are two
elements each.  The CPU backends also take NumPy arrays of the unpacked ml_dtypes type (one element
per byte, the logical shape).

``logical_arg`` turns a storage argument into the logical one the binder checks (shape and strides
in elements); ``unpack`` / ``pack`` convert between storage bytes and the CPU backends' arrays.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import ArgumentError
from ..ir import dtype as dt
from .tensor_args import PACKED_STORAGE, TensorArg


def is_packed_storage(p_dtype: str, ta: TensorArg) -> bool:
    return dt.is_subbyte(p_dtype) and ta.dtype in PACKED_STORAGE


def storage_note(p) -> str:
    """What an error about a byte-storage argument of 4-bit parameter ``p`` adds."""
    return (f"(argument {p.name} is byte storage of {p.dtype} values, two per byte: its shape and strides are "
            "counted in elements, the last dimension twice its bytes)")


def logical_arg(p, ta: TensorArg, kname: str) -> TensorArg:
    """The argument ``ta`` (byte storage of 4-bit parameter ``p``) in elements of ``p.dtype``."""
    if not ta.shape:
        raise ArgumentError(f"{kname}: argument {p.name} is a 0-d tensor; a {p.dtype} tensor is stored two elements "
                            "per byte, so it needs at least one dimension")
    if ta.shape[-1] > 1 and ta.strides[-1] != 1:
        raise ArgumentError(f"{kname}: argument {p.name} ({p.dtype}, two elements per byte) must be contiguous in its "
                            f"last dimension, got strides {tuple(ta.strides)} (in bytes)")
    shape = (*ta.shape[:-1], ta.shape[-1] * 2)
    strides = (*(s * 2 for s in ta.strides[:-1]), 1)
    return dataclasses.replace(ta, shape=shape, strides=strides, dtype=p.dtype)


def unpack(storage: np.ndarray, dtype: str) -> np.ndarray:
    """One element per byte (the ml_dtypes type of ``dtype``) from packed bytes; last dimension doubles."""
    b = np.ascontiguousarray(storage).view(np.uint8)
    nibbles = np.empty((*b.shape[:-1], b.shape[-1] * 2), dtype=np.uint8)
    nibbles[..., 0::2] = b & 0xF
    nibbles[..., 1::2] = b >> 4
    if dtype == "int4":  # the ml_dtypes int4 byte holds the sign-extended value
        nibbles = ((nibbles ^ 8).astype(np.int8) - 8).view(np.uint8)
    return nibbles.view(dt.to_numpy(dtype))


def unpack_view(storage: np.ndarray, dtype: str) -> tuple:
    """(logical array, unpacked memory, storage memory) of byte storage ``storage`` for the CPU backends:
    the logical array (one element per byte) keeps the storage's layout -- row strides doubled, a strided
    tensor stays strided -- by viewing the unpacked copy of the whole byte span the storage covers;
    ``pack(unpacked memory, storage memory)`` writes it back."""
    b = storage.view(np.uint8)
    if b.size == 0 or b.ndim == 0 or b.flags.c_contiguous or any(st < 0 for st in b.strides):
        logical = unpack(b, dtype)
        return logical, logical, b
    span = 1 + sum((n - 1) * st for n, st in zip(b.shape, b.strides))  # bytes from the first element to the last
    memory = np.lib.stride_tricks.as_strided(b, shape=(span,), strides=(1,))
    unpacked = unpack(memory, dtype)
    shape = (*b.shape[:-1], b.shape[-1] * 2)
    logical = np.lib.stride_tricks.as_strided(unpacked, shape=shape, strides=(*(st * 2 for st in b.strides[:-1]), 1))
    return logical, unpacked, memory


def pack(logical: np.ndarray, storage: np.ndarray) -> None:
    """Write the one-element-per-byte array ``logical`` into the packed bytes ``storage`` (in place)."""
    n = logical.view(np.uint8) & 0xF
    storage.view(np.uint8)[...] = n[..., 0::2] | (n[..., 1::2] << 4)
