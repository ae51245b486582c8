"""describe_arg: NumPy arrays, __cuda_array_interface__ objects, DLPack capsules, torch tensors, errors."""

from __future__ import annotations

import ctypes

import ml_dtypes
import numpy as np
import pytest

from tilewright.binding.tensor_args import (
    DTYPE_ITEMSIZE,
    TensorArg,
    describe_arg,
    to_numpy_dtype,
    to_torch_dtype,
    torch_dtype_name,
)
from tilewright.errors import ArgumentError


# ---------------------------------------------------------------- NumPy
def test_numpy_contiguous():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    t = describe_arg(a)
    assert t.ptr == a.ctypes.data
    assert t.shape == (2, 3, 4) and t.strides == (12, 4, 1)
    assert t.dtype == "float32" and t.device_type == "cpu" and t.device_index == 0
    assert t.obj is a and t.is_contiguous() and t.numel == 24 and t.nbytes == 96 and t.ndim == 3
    assert not t.readonly


def test_numpy_views_have_element_strides_and_offset_pointers():
    base = np.zeros((8, 10), dtype=np.float16)
    view = base[2:, ::3].T
    t = describe_arg(view)
    assert t.shape == (4, 6)
    assert t.strides == (3, 10)
    assert t.ptr == base.ctypes.data + 2 * 10 * 2
    assert not t.is_contiguous()


@pytest.mark.parametrize(
    ("dtype", "name"),
    [
        (np.float16, "float16"),
        (np.float32, "float32"),
        (np.float64, "float64"),
        (np.int8, "int8"),
        (np.uint8, "uint8"),
        (np.int16, "int16"),
        (np.int32, "int32"),
        (np.int64, "int64"),
        (np.bool_, "bool"),
        (ml_dtypes.bfloat16, "bfloat16"),
        (ml_dtypes.float8_e4m3fn, "float8_e4m3fn"),
        (ml_dtypes.float8_e5m2, "float8_e5m2"),
    ],
)
def test_numpy_dtypes(dtype, name):
    t = describe_arg(np.zeros(3, dtype=dtype))
    assert t.dtype == name and t.itemsize == DTYPE_ITEMSIZE[name] == np.dtype(dtype).itemsize
    assert to_numpy_dtype(name) == np.dtype(dtype)


def test_numpy_readonly_and_empty():
    a = np.zeros((0, 5), dtype=np.int32)
    a.flags.writeable = False
    t = describe_arg(a)
    assert t.readonly and t.shape == (0, 5) and t.numel == 0


@pytest.mark.parametrize(
    ("arr", "match"),
    [
        (np.zeros(2, np.complex64), "complex64"),
        (np.zeros(2, "datetime64[s]"), "datetime64"),  # (uint16/32/64 are kernel dtypes since TileLang has them)
        (np.zeros(2, ">f4"), "big-endian"),
        (np.zeros(4, np.uint8).view(np.dtype([("a", np.uint8), ("b", np.uint8)])), "not supported"),
    ],
)
def test_numpy_unsupported(arr, match):
    with pytest.raises(ArgumentError, match=match):
        describe_arg(arr)


def test_numpy_stride_not_a_multiple_of_itemsize():
    raw = np.zeros(40, dtype=np.uint8)
    odd = np.lib.stride_tricks.as_strided(raw.view(np.int32)[:1], shape=(3,), strides=(6,))
    with pytest.raises(ArgumentError, match="not a multiple"):
        describe_arg(odd)


# ---------------------------------------------------------------- __cuda_array_interface__
class FakeCudaArray:
    def __init__(self, **cai):
        self.__cuda_array_interface__ = cai


def test_cai_v2_contiguous():
    obj = FakeCudaArray(shape=(4, 8), typestr="<f2", data=(0x7F0000001000, False), version=2, strides=None)
    t = describe_arg(obj)
    assert t.ptr == 0x7F0000001000 and t.shape == (4, 8) and t.strides == (8, 1)
    assert t.dtype == "float16" and t.device_type == "cuda" and t.device_index == 0
    assert t.obj is obj and t.producer_stream is None and not t.readonly


def test_cai_v3_strides_stream_readonly():
    obj = FakeCudaArray(
        shape=(3, 5), typestr="<i4", data=(0x7F0000002000, True), version=3, strides=(4, 12), stream=7
    )
    t = describe_arg(obj)
    assert t.strides == (1, 3) and t.dtype == "int32" and t.readonly and t.producer_stream == 7


def test_cai_as_a_property():
    class Prop:
        @property
        def __cuda_array_interface__(self):
            return {"shape": (2,), "typestr": "|b1", "data": (0x7F0000003000, False), "version": 3}

    assert describe_arg(Prop()).dtype == "bool"


@pytest.mark.parametrize(
    ("cai", "match"),
    [
        ({"shape": (2,), "typestr": "<c8", "data": (1, False), "version": 3}, "not a supported dtype"),
        ({"shape": (2,), "typestr": "<V2", "data": (1, False), "version": 3}, "DLPack"),
        ({"shape": (2,), "typestr": ">f4", "data": (1, False), "version": 3}, "big-endian"),
        ({"shape": (2,), "typestr": "float", "data": (1, False), "version": 3}, "typestr"),
        ({"shape": (2,), "data": (1, False), "version": 3}, "lacks"),
        ({"shape": (2,), "typestr": "<f4", "data": (1, False), "version": 3, "mask": object()}, "mask"),
        ({"shape": (2,), "typestr": "<f4", "data": (1, False), "version": 3, "strides": (6,)}, "multiple"),
        ({"shape": (2, 2), "typestr": "<f4", "data": (1, False), "version": 3, "strides": (4,)}, "strides"),
    ],
)
def test_cai_errors(cai, match):
    with pytest.raises(ArgumentError, match=match):
        describe_arg(FakeCudaArray(**cai))


# ---------------------------------------------------------------- DLPack (hand-made capsules)
class DLDevice(ctypes.Structure):
    _fields_ = (("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32))


class DLDataType(ctypes.Structure):
    _fields_ = (("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16))


class DLTensor(ctypes.Structure):
    _fields_ = (
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    )


class DLManagedTensor(ctypes.Structure):
    _fields_ = (("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p))


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = (
        ("major", ctypes.c_uint32),
        ("minor", ctypes.c_uint32),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    )


_PyCapsule_New = ctypes.pythonapi.PyCapsule_New
_PyCapsule_New.restype = ctypes.py_object
_PyCapsule_New.argtypes = (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)
_NAMES = {False: b"dltensor", True: b"dltensor_versioned"}  # must outlive the capsules


class FakeDLPack:
    """A DLPack producer with no framework behind it; the memory it points to is never touched."""

    def __init__(self, *, shape=(4, 6), strides=(6, 1), dtype=(2, 32, 1), device=(2, 1), data=0x7F0000000000,
                 byte_offset=64, versioned=False, flags=0):  # fmt: skip
        self.device = device
        self._shape = (ctypes.c_int64 * len(shape))(*shape)
        self._strides = (ctypes.c_int64 * len(shape))(*strides) if strides is not None else None
        self.versioned = versioned
        self.managed = DLManagedTensorVersioned() if versioned else DLManagedTensor()
        if versioned:
            self.managed.major, self.managed.minor, self.managed.flags = 1, 1, flags
        t = self.managed.dl_tensor
        t.data = data
        t.device = DLDevice(*device)
        t.ndim = len(shape)
        t.dtype = DLDataType(*dtype)
        t.shape = self._shape
        t.strides = self._strides  # NULL when None
        t.byte_offset = byte_offset

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, **kwargs):
        return _PyCapsule_New(ctypes.addressof(self.managed), _NAMES[self.versioned], None)


def test_dlpack_cuda_capsule():
    obj = FakeDLPack()
    t = describe_arg(obj)
    assert t.ptr == 0x7F0000000000 + 64
    assert t.shape == (4, 6) and t.strides == (6, 1) and t.dtype == "float32"
    assert t.device_type == "cuda" and t.device_index == 1 and t.obj is obj and not t.readonly


def test_dlpack_versioned_readonly_and_null_strides():
    t = describe_arg(FakeDLPack(versioned=True, flags=1, strides=None, shape=(2, 3, 5), dtype=(4, 16, 1)))
    assert t.readonly and t.strides == (15, 5, 1) and t.dtype == "bfloat16"


@pytest.mark.parametrize(
    ("code_bits", "name"),
    [((6, 8), "bool"), ((10, 8), "float8_e4m3fn"), ((12, 8), "float8_e5m2"), ((1, 8), "uint8"), ((0, 64), "int64")],
)
def test_dlpack_dtypes(code_bits, name):
    assert describe_arg(FakeDLPack(dtype=(*code_bits, 1))).dtype == name


def test_dlpack_rocm_and_managed():
    assert describe_arg(FakeDLPack(device=(10, 2))).device_type == "hip"
    t = describe_arg(FakeDLPack(device=(13, 0)))
    assert t.device_type == "cuda" and t.device_index == 0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"dtype": (5, 64, 1)}, "code=5"),  # complex
        ({"dtype": (2, 32, 4)}, "lanes=4"),  # vector type
        ({"device": (8, 0)}, "Metal"),
    ],
)
def test_dlpack_errors(kwargs, match):
    with pytest.raises(ArgumentError, match=match):
        describe_arg(FakeDLPack(**kwargs))


def test_dlpack_from_numpy_through_a_wrapper():
    class Wrapper:  # hides the ndarray so that the DLPack path is taken
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, **kw):
            return self.a.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    a = np.arange(30, dtype=np.int16).reshape(5, 6)[1:, ::2]
    t = describe_arg(Wrapper(a))
    assert t.ptr == a.ctypes.data and t.shape == (4, 3) and t.strides == (6, 2)
    assert t.dtype == "int16" and t.device_type == "cpu"


def test_bad_dlpack_producer():
    class Broken:
        def __dlpack__(self, **kw):
            raise RuntimeError("nope")

        def __dlpack_device__(self):
            return (2, 0)

    with pytest.raises(ArgumentError, match="nope"):
        describe_arg(Broken())


# ---------------------------------------------------------------- misc objects
@pytest.mark.parametrize(
    ("obj", "match"),
    [
        (3, "scalar"),
        (2.5, "scalar"),
        ([1, 2], "list"),
        (np.float32(1), "NumPy scalar"),
        (object(), "type object"),
        ("abc", "type str"),
    ],
)
def test_not_tensors(obj, match):
    with pytest.raises(ArgumentError, match=match):
        describe_arg(obj)


def test_tensor_arg_passes_through():
    t = TensorArg(ptr=16, shape=(2,), strides=(1,), dtype="int8", device_type="cuda", device_index=0)
    assert describe_arg(t) is t


def test_dtype_helpers_reject_unknown_names():
    with pytest.raises(ArgumentError):
        to_numpy_dtype("float128")


# ---------------------------------------------------------------- torch (CPU build is enough)
def test_torch_cpu_tensors():
    torch = pytest.importorskip("torch")
    x = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    view = x[1:, ::2]
    t = describe_arg(view)
    assert t.ptr == view.data_ptr() == x.data_ptr() + 6 * 4
    assert t.shape == (3, 3) and t.strides == (6, 2) and t.dtype == "float32"
    assert t.device_type == "cpu" and t.device_index == 0 and t.obj is view
    p = torch.nn.Parameter(torch.zeros(2, 2, dtype=torch.bfloat16))
    assert describe_arg(p).dtype == "bfloat16"


def test_torch_dtypes_round_trip():
    torch = pytest.importorskip("torch")
    for name in DTYPE_ITEMSIZE:
        dt = getattr(torch, name, None)
        if dt is None:
            continue
        assert torch_dtype_name(dt) == name
        assert to_torch_dtype(name) is dt
        assert describe_arg(torch.zeros(2, dtype=dt)).dtype == name
    with pytest.raises(ArgumentError, match="complex64"):
        describe_arg(torch.zeros(2, dtype=torch.complex64))
    with pytest.raises(ArgumentError):
        torch_dtype_name(torch.complex128)  # (uint32 is a kernel dtype since TileLang has it)


def test_torch_unsupported_layouts_and_devices():
    torch = pytest.importorskip("torch")
    with pytest.raises(ArgumentError, match="strided"):
        describe_arg(torch.zeros(3, 3).to_sparse())
    with pytest.raises(ArgumentError, match="meta"):
        describe_arg(torch.zeros(3, device="meta"))


# ---------------------------------------------------------------- real GPU objects (skipped without a GPU)
class _DLPackOnly:
    """Hides every other protocol of the wrapped object so that the DLPack path is taken."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, **kw):
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


def _torch_cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device here")
    return torch


def test_torch_cuda_tensors_directly_and_through_dlpack():
    torch = _torch_cuda()
    x = torch.zeros(6, 8, device="cuda", dtype=torch.bfloat16)[1:, ::2]
    for arg in (describe_arg(x), describe_arg(_DLPackOnly(x))):
        assert arg.ptr == x.data_ptr()
        assert arg.shape == (5, 4) and arg.strides == (8, 2) and arg.dtype == "bfloat16"
        assert arg.device_type == ("hip" if torch.version.hip else "cuda")
        assert arg.device_index == x.device.index


def test_cupy_through_cuda_array_interface_and_dlpack():
    cupy = pytest.importorskip("cupy")
    try:
        a = cupy.arange(12, dtype=cupy.float32).reshape(3, 4)[:, 1:]
    except Exception as exc:  # noqa: BLE001 - CuPy without a usable GPU
        pytest.skip(f"CuPy cannot allocate here: {exc}")
    for arg in (describe_arg(a), describe_arg(_DLPackOnly(a))):
        assert arg.ptr == a.data.ptr
        assert arg.shape == (3, 3) and arg.strides == (4, 1) and arg.dtype == "float32"
        assert arg.device_type == "cuda" and arg.device_index == a.device.id
