"""Turn the tensor-like objects users pass to a kernel into one plain record (:class:`TensorArg`).

Accepted, in the order they are tried:

* ``torch.Tensor`` (and subclasses such as ``nn.Parameter``), recognised by the module of its
  type, so that torch is never imported on our behalf;
* NumPy arrays (host memory; ml_dtypes supplies ``bfloat16`` and the float8 types);
* objects with ``__cuda_array_interface__`` (versions 2 and 3: CuPy, Numba, JAX, ...);
* objects with ``__dlpack__`` / ``__dlpack_device__``: we take a capsule and read the C structs
  ``DLManagedTensor`` / ``DLManagedTensorVersioned`` through ctypes, so no framework is needed.

Strides are always reported in elements, as the code generator indexes in elements.
"""

from __future__ import annotations

import ctypes
import math
import re
import sys
from dataclasses import dataclass, field
from typing import Any

from ..errors import ArgumentError

__all__ = [
    "DTYPE_ITEMSIZE",
    "TensorArg",
    "describe_arg",
    "to_numpy_dtype",
    "to_torch_dtype",
    "torch_dtype_name",
]

# Our dtype names and their sizes in bytes.
DTYPE_ITEMSIZE: dict[str, int] = {
    "float16": 2,
    "bfloat16": 2,
    "float32": 4,
    "float64": 8,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "bool": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "float8_e4m3fnuz": 1,
    "float8_e5m2fnuz": 1,
    "uint16": 2,
    "uint32": 4,
    "uint64": 8,
    "float8_e8m0fnu": 1,
    "float4_e2m1fn_x2": 1,  # torch's packed pair of fp4 values (the storage of a float4_e2m1fn tensor)
}
# NumPy (ml_dtypes) arrays of the 4-bit types: one element per byte (the CPU backends take them)
_NUMPY_FOUR_BIT = {"int4": 1, "uint4": 1, "float4_e2m1fn": 1}

# 4-bit dtypes: their tensors are byte storage, two elements per byte (ir/dtype.py); the torch dtype of
# that storage, when torch has a dedicated one (float4_e2m1fn_x2), else int8
_TORCH_STORAGE = {"int4": "int8", "uint4": "uint8", "float4_e2m1fn": "float4_e2m1fn_x2",
                  "float4_e2m1fnx2": "float4_e2m1fn_x2"}
# byte-storage dtypes a 4-bit parameter takes (torch's and NumPy's), besides its own unpacked NumPy dtype
PACKED_STORAGE = ("int8", "uint8", "float4_e2m1fn_x2")


def torch_storage_name(name: str) -> str:
    """The torch dtype name a tensor of dtype ``name`` is stored as (itself but for the 4-bit types)."""
    storage = _TORCH_STORAGE.get(name)
    if storage is None:
        return name
    if storage == "float4_e2m1fn_x2":
        import torch

        if not hasattr(torch, storage):
            return "int8"
    return storage


@dataclass(eq=False, slots=True)
class TensorArg:
    """A tensor argument, reduced to what a launch needs.  ``obj`` keeps the memory alive."""

    ptr: int
    shape: tuple
    strides: tuple  # in elements
    dtype: str
    device_type: str  # "cpu", "cuda" or "hip"
    device_index: int
    obj: Any = field(default=None, repr=False)
    readonly: bool = False
    # __cuda_array_interface__ v3 may name the stream the producer's pending work is on (None: none given).
    producer_stream: int | None = None

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def itemsize(self) -> int:
        return DTYPE_ITEMSIZE.get(self.dtype) or _NUMPY_FOUR_BIT[self.dtype]

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize

    def is_contiguous(self) -> bool:
        """Row-major contiguous (strides of size-1 dimensions do not matter)."""
        expected = 1
        for size, stride in zip(reversed(self.shape), reversed(self.strides), strict=False):
            if size != 1 and stride != expected:
                return False
            expected *= size
        return True


def _contiguous_strides(shape: tuple) -> tuple:
    strides = []
    step = 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(int(size), 1)
    return tuple(reversed(strides))


def _byte_strides_to_elements(byte_strides, itemsize: int, what: str) -> tuple:
    out = []
    for s in byte_strides:
        if s % itemsize:
            raise ArgumentError(
                f"{what} has a stride of {s} bytes, which is not a multiple of its element size ({itemsize} bytes); "
                "make a copy first (e.g. .copy() / .contiguous())"
            )
        out.append(int(s) // itemsize)
    return tuple(out)


# ---------------------------------------------------------------- torch
_TORCH_NAMES = (
    "float16", "bfloat16", "float32", "float64", "int8", "uint8", "int16", "int32", "int64", "bool",
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "uint16", "uint32", "uint64",
    "float8_e8m0fnu", "float4_e2m1fn_x2",
)  # fmt: skip
_torch_to_name: dict = {}


def _torch_map(torch) -> dict:
    if not _torch_to_name:
        for name in _TORCH_NAMES:
            dt = getattr(torch, name, None)  # float8 types exist only in newer torch
            if dt is not None:
                _torch_to_name[dt] = name
    return _torch_to_name


def torch_dtype_name(torch_dtype) -> str:
    """``torch.float16`` -> ``"float16"``; ArgumentError for dtypes kernels cannot take."""
    torch = sys.modules.get("torch")
    if torch is None:
        import torch
    name = _torch_map(torch).get(torch_dtype)
    if name is None:
        raise ArgumentError(
            f"tensors of dtype {torch_dtype} are not supported; use one of {', '.join(DTYPE_ITEMSIZE)}"
        )
    return name


def to_torch_dtype(name: str):
    """``"bfloat16"`` -> ``torch.bfloat16`` (imports torch)."""
    import torch

    if name not in DTYPE_ITEMSIZE and name not in _NUMPY_FOUR_BIT:
        raise ArgumentError(f"unknown dtype {name!r}; use one of {', '.join(DTYPE_ITEMSIZE)}")
    name = torch_storage_name(name)
    dt = getattr(torch, name, None)
    if dt is None:
        raise ArgumentError(f"this torch ({torch.__version__}) has no dtype {name!r}")
    return dt


def _from_torch(t, torch) -> TensorArg:
    # Attribute choices here are the cheap ones (t.device.type alone costs ~0.7 us).
    name = _torch_to_name.get(t.dtype) or _torch_map(torch).get(t.dtype)
    if name is None:
        raise ArgumentError(
            f"tensors of dtype {t.dtype} are not supported; use one of {', '.join(DTYPE_ITEMSIZE)}"
        )
    if t.layout is not torch.strided:
        raise ArgumentError(f"only dense (strided) tensors can be passed to a kernel, got layout {t.layout}")
    if t.is_neg():
        raise ArgumentError("this tensor is a lazy negated view; call .resolve_neg() first")
    if t.is_cuda:
        # ROCm builds of torch call their devices "cuda" too.
        device_type = "hip" if getattr(torch.version, "hip", None) else "cuda"
        index = t.get_device()
    elif t.is_cpu:
        device_type, index = "cpu", 0
    else:
        raise ArgumentError(f"tensors on device {t.device} are not supported; move it to a CUDA/ROCm GPU or the CPU")
    return TensorArg(t.data_ptr(), tuple(t.shape), tuple(t.stride()), name, device_type, index, t)


# ---------------------------------------------------------------- NumPy
def to_numpy_dtype(name: str):
    """``"bfloat16"`` -> the NumPy dtype (ml_dtypes for bfloat16 and the float8 types)."""
    import numpy as np

    if name not in DTYPE_ITEMSIZE and name not in _NUMPY_FOUR_BIT or name == "float4_e2m1fn_x2":
        raise ArgumentError(f"unknown dtype {name!r}; use one of {', '.join(DTYPE_ITEMSIZE)}")
    if name in ("bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu", "int4", "uint4", "float4_e2m1fn"):
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)


_numpy_names: dict = {}  # dtype -> our name; dtype.name costs ~5 us per call


def _numpy_dtype_name(dt) -> str:
    name = _numpy_names.get(dt)
    if name is None:
        name = dt.name
        if name not in DTYPE_ITEMSIZE and name not in _NUMPY_FOUR_BIT:
            raise ArgumentError(
                f"NumPy arrays of dtype {dt} are not supported; use one of {', '.join(DTYPE_ITEMSIZE)}"
            )
        if dt.byteorder == ">" or (dt.byteorder == "=" and sys.byteorder == "big"):
            raise ArgumentError(
                "big-endian arrays are not supported; convert with .astype(arr.dtype.newbyteorder('<'))"
            )
        _numpy_names[dt] = name
    return name


def _from_numpy(arr) -> TensorArg:
    dt = arr.dtype
    name = _numpy_dtype_name(dt)
    itemsize = dt.itemsize
    strides = _byte_strides_to_elements(arr.strides, itemsize, "this NumPy array")
    return TensorArg(
        arr.__array_interface__["data"][0], arr.shape, strides, name, "cpu", 0, arr, not arr.flags.writeable
    )


# ---------------------------------------------------------------- __cuda_array_interface__
_TYPESTR_RE = re.compile(r"^([<>|=])([a-zA-Z])(\d+)$")
_TYPESTR_TO_NAME = {
    ("f", 2): "float16",
    ("f", 4): "float32",
    ("f", 8): "float64",
    ("i", 1): "int8",
    ("i", 2): "int16",
    ("i", 4): "int32",
    ("i", 8): "int64",
    ("u", 1): "uint8",
    ("u", 2): "uint16",
    ("u", 4): "uint32",
    ("u", 8): "uint64",
    ("b", 1): "bool",
}


def _typestr_dtype(typestr: str) -> str:
    m = _TYPESTR_RE.match(str(typestr))
    if not m:
        raise ArgumentError(f"__cuda_array_interface__ has an unreadable typestr {typestr!r}")
    order, kind, size = m.group(1), m.group(2), int(m.group(3))
    if order == ">" and size > 1:
        raise ArgumentError(f"big-endian data (typestr {typestr!r}) is not supported")
    name = _TYPESTR_TO_NAME.get((kind, size))
    if name is None:
        hint = ""
        if kind == "V" and size in (1, 2):
            hint = " (bfloat16 and float8 have no typestr of their own; pass the array through DLPack instead)"
        raise ArgumentError(
            f"__cuda_array_interface__ typestr {typestr!r} is not a supported dtype{hint}; "
            f"supported: {', '.join(DTYPE_ITEMSIZE)}"
        )
    return name


def _from_cai(obj, cai) -> TensorArg:
    if not isinstance(cai, dict):
        raise ArgumentError(f"{type(obj).__name__}.__cuda_array_interface__ is not a dict")
    version = cai.get("version", 0)
    try:
        shape = tuple(int(s) for s in cai["shape"])
        typestr = cai["typestr"]
        data = cai["data"]
    except (KeyError, TypeError, ValueError) as exc:
        raise ArgumentError(
            f"{type(obj).__name__}.__cuda_array_interface__ (version {version}) lacks 'shape', 'typestr' or 'data': "
            f"{exc}"
        ) from None
    if cai.get("mask") is not None:
        raise ArgumentError("masked arrays (__cuda_array_interface__ 'mask') are not supported")
    dtype = _typestr_dtype(typestr)
    ptr, readonly = int(data[0] or 0), bool(data[1]) if len(data) > 1 else False
    byte_strides = cai.get("strides")
    if byte_strides is None:
        strides = _contiguous_strides(shape)
    else:
        strides = _byte_strides_to_elements(byte_strides, DTYPE_ITEMSIZE[dtype], f"this {type(obj).__name__}")
    if len(strides) != len(shape):
        raise ArgumentError(f"__cuda_array_interface__ has {len(shape)} dimensions but {len(strides)} strides")
    stream = cai.get("stream")
    return TensorArg(
        ptr=ptr,
        shape=shape,
        strides=strides,
        dtype=dtype,
        device_type="cuda",
        device_index=_cuda_pointer_device(ptr),
        obj=obj,
        readonly=readonly,
        producer_stream=int(stream) if stream is not None else None,
    )


# The GPU runtime that can tell which device a raw pointer lives on registers itself here
# (runtime.cuda_driver does, on import), so describing an argument never loads a vendor library.
pointer_device_resolvers: list = []


def _cuda_pointer_device(ptr: int) -> int:
    """The interface does not say which GPU the data is on; ask the driver (0 if it cannot tell)."""
    if not ptr:
        return 0
    for resolve in pointer_device_resolvers:
        index = resolve(ptr)
        if index is not None:
            return index
    return 0


# ---------------------------------------------------------------- DLPack
class _DLDevice(ctypes.Structure):
    _fields_ = (("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32))


class _DLDataType(ctypes.Structure):
    _fields_ = (("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16))


class _DLTensor(ctypes.Structure):
    _fields_ = (
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    )


class _DLManagedTensor(ctypes.Structure):
    _fields_ = (("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p))


class _DLPackVersion(ctypes.Structure):
    _fields_ = (("major", ctypes.c_uint32), ("minor", ctypes.c_uint32))


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = (
        ("version", _DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", _DLTensor),
    )


_DLPACK_FLAG_READ_ONLY = 1

# DLDeviceType -> our device type
_DL_DEVICES = {1: "cpu", 2: "cuda", 3: "cpu", 10: "hip", 11: "cpu", 13: "cuda"}
_DL_DEVICE_NAMES = {4: "OpenCL", 7: "Vulkan", 8: "Metal", 9: "VPI", 12: "ExtDev", 14: "oneAPI", 15: "WebGPU"}

# (DLDataTypeCode, bits) -> our dtype name
_DL_DTYPES = {
    (0, 8): "int8",
    (0, 16): "int16",
    (0, 32): "int32",
    (0, 64): "int64",
    (1, 8): "uint8",
    (1, 16): "uint16",
    (1, 32): "uint32",
    (1, 64): "uint64",
    (2, 16): "float16",
    (2, 32): "float32",
    (2, 64): "float64",
    (4, 16): "bfloat16",
    (6, 8): "bool",
    (10, 8): "float8_e4m3fn",
    (12, 8): "float8_e5m2",
}

_capsule_api = None


def _capsule_functions():
    global _capsule_api
    if _capsule_api is None:
        api = ctypes.pythonapi
        get_pointer = api.PyCapsule_GetPointer
        get_pointer.restype = ctypes.c_void_p
        get_pointer.argtypes = (ctypes.py_object, ctypes.c_char_p)
        get_name = api.PyCapsule_GetName
        get_name.restype = ctypes.c_char_p
        get_name.argtypes = (ctypes.py_object,)
        _capsule_api = (get_pointer, get_name)
    return _capsule_api


def _from_dlpack(obj) -> TensorArg:
    kind = type(obj).__name__
    try:
        dev_type, _dev_id = obj.__dlpack_device__()
    except Exception as exc:
        raise ArgumentError(f"{kind}.__dlpack_device__() failed: {exc}") from exc
    dev_type = int(dev_type)
    device_type = _DL_DEVICES.get(dev_type)
    if device_type is None:
        where = _DL_DEVICE_NAMES.get(dev_type, f"DLPack device type {dev_type}")
        raise ArgumentError(f"{kind} lives on {where}; only CPU, CUDA and ROCm memory can be passed to a kernel")
    try:
        # No stream argument: the producer makes its pending work visible to the legacy default stream.
        capsule = obj.__dlpack__()
    except Exception as exc:
        raise ArgumentError(f"{kind}.__dlpack__() failed: {exc}") from exc
    get_pointer, get_name = _capsule_functions()
    try:
        name = get_name(capsule)
    except (TypeError, ValueError, ctypes.ArgumentError):
        name = None
    if name == b"dltensor":
        managed = _DLManagedTensor.from_address(get_pointer(capsule, name))
        readonly = False
    elif name == b"dltensor_versioned":
        managed = _DLManagedTensorVersioned.from_address(get_pointer(capsule, name))
        readonly = bool(managed.flags & _DLPACK_FLAG_READ_ONLY)
    else:
        raise ArgumentError(f"{kind}.__dlpack__() did not return a DLPack capsule (capsule name {name!r})")
    # Read everything while the capsule is alive.  We do not consume (rename) it, so its destructor
    # calls the producer's deleter; the memory itself stays alive through ``obj``.
    t = managed.dl_tensor
    ndim = int(t.ndim)
    code, bits, lanes = int(t.dtype.code), int(t.dtype.bits), int(t.dtype.lanes)
    dtype = _DL_DTYPES.get((code, bits))
    if dtype is None or lanes != 1:
        raise ArgumentError(
            f"{kind} has DLPack dtype (code={code}, bits={bits}, lanes={lanes}), which is not supported; "
            f"supported: {', '.join(DTYPE_ITEMSIZE)}"
        )
    shape = tuple(int(t.shape[i]) for i in range(ndim))
    strides = tuple(int(t.strides[i]) for i in range(ndim)) if t.strides else _contiguous_strides(shape)
    ptr = int(t.data or 0) + int(t.byte_offset)
    index = int(t.device.device_id) if device_type != "cpu" else 0
    del capsule
    return TensorArg(
        ptr=ptr,
        shape=shape,
        strides=strides,
        dtype=dtype,
        device_type=device_type,
        device_index=index,
        obj=obj,
        readonly=readonly,
    )


# ---------------------------------------------------------------- entry point
def describe_arg(obj) -> TensorArg:
    """Describe a tensor-like argument; raises ArgumentError for anything that is not one."""
    tp = type(obj)
    mod = tp.__module__ or ""
    if mod[:5] == "torch":  # "torch", "torch.nn.parameter", "torch._subclasses..."
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(obj, torch.Tensor):
            return _from_torch(obj, torch)
    if tp is TensorArg:
        return obj
    np = sys.modules.get("numpy")
    if np is not None and isinstance(obj, np.ndarray):
        return _from_numpy(obj)
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        return _from_cai(obj, cai)
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        return _from_dlpack(obj)
    if isinstance(obj, (bool, int, float)):
        raise ArgumentError(f"expected a tensor but got the scalar {obj!r}")
    if np is not None and isinstance(obj, np.generic):
        raise ArgumentError(f"expected a tensor but got the NumPy scalar {obj!r}; wrap it with np.asarray(...)")
    if isinstance(obj, (list, tuple)):
        raise ArgumentError(f"expected a tensor but got a {tp.__name__}; convert it with np.asarray(...) first")
    raise ArgumentError(
        f"cannot pass an object of type {mod + '.' if mod and mod != 'builtins' else ''}{tp.__qualname__} as a "
        "tensor: expected a "
        "torch.Tensor, a NumPy array, or an object with __cuda_array_interface__ or __dlpack__/__dlpack_device__"
    )
