"""``T.StridedTensor``: TileLang's spelling of a tensor parameter with explicit strides; ``T.ptr`` and
``T.make_tensor``.

``A: T.StridedTensor((M, N), (NN, 1), dtype)`` (or subscripted, ``T.StridedTensor[(M, N), (NN, 1), dtype]``)
is ``T.Tensor((M, N), dtype, strides=(NN, 1))``: the kernel addresses element ``A[i, j]`` at
``i * NN + j * 1``, and an argument must have exactly those strides (in elements; a ``T.dynamic`` stride
is read from the argument).  Vector accesses are used only where the declared strides prove the
elements contiguous (the copy lowering reads the buffer's strides), so any stride gives correct loads.

``T.ptr`` (and ``T.handle``) is TileLang's pointer type: a tensor of pointers (``T.Tensor([G], T.ptr)``, a
pointer table) is a tensor of 64-bit integers, as in TileLang, and a ``T.ptr`` scalar parameter takes a
64-bit integer.

``A = T.make_tensor(a_ptr, shape, dtype)`` (or ``T.match_buffer(a_ptr, shape, dtype)``) at the top of the
function, on a ``T.ptr`` / ``T.handle`` *parameter*, makes that parameter a tensor parameter of this
shape and dtype (TVM's buffer binding of a handle): the call passes the tensor itself, whose shape,
dtype, strides and device are checked as for any ``T.Tensor`` parameter.  A shape entry that is a scalar
parameter (``(m, k)`` with ``m: T.int32``) becomes a symbolic size read from the tensor, and every call
checks that it equals the scalar argument (a RuntimeError names both, as TileLang's host check does).

``T.make_tensor`` on an address computed in the kernel (``T.make_tensor(ptrs[bx], ...)``, a pointer table)
makes a tensor at that address, unchecked as in TileLang (frontend/address_tensors.py; on the CPU backends
the address must point into a known array, interp/host_addresses.py).
"""

from __future__ import annotations

from ..frontend import builder as _b
from . import DType, Tensor


class _StridedTensorSpelling:
    """Both spellings: ``T.StridedTensor(shape, strides, dtype)`` and ``T.StridedTensor[shape, strides, dtype]``."""

    def __call__(self, shape, strides, dtype="float32"):
        return Tensor(shape, dtype, strides=strides)

    def __getitem__(self, item):
        if not isinstance(item, tuple) or len(item) != 3:
            raise _b.error(f"T.StridedTensor[...] takes [shape, strides, dtype], got {item!r}",
                           hint="write T.StridedTensor[(M, N), (stride_M, 1), dtype]")
        shape, strides, dtype = item
        return Tensor(shape, dtype, strides=strides)

    def __repr__(self) -> str:
        return "T.StridedTensor"


StridedTensor = _StridedTensorSpelling()

class PointerType(DType):
    """``T.ptr`` / ``T.handle``: a 64-bit address (``int64`` wherever a dtype is needed)."""

    is_pointer = True


ptr = PointerType("int64")  # TileLang's T.ptr: an address (pointer tables are int64 tensors)
handle = ptr


def make_tensor(ptr, shape, dtype="float32", strides=None):
    """``T.make_tensor(ptr, shape, dtype)`` (see the module docstring)."""
    b = _b.current()
    from ..frontend.pointer_params import bind_pointer_param

    return bind_pointer_param(b, ptr, shape, dtype, strides, "T.make_tensor")


def match_buffer(param, shape, dtype="float32", strides=None, **kwargs):
    """``T.match_buffer(handle, shape, dtype)`` (see the module docstring)."""
    b = _b.current()
    from ..frontend.pointer_params import bind_pointer_param

    return bind_pointer_param(b, param, shape, dtype, strides, "T.match_buffer")


__all__ = ["StridedTensor", "ptr", "handle", "make_tensor", "match_buffer"]
