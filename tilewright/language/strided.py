"""``T.StridedTensor``: TileLang's spelling of a tensor parameter with explicit strides; ``T.ptr`` and
``T.make_tensor``.

``A: T.StridedTensor((M, N), (NN, 1), dtype)`` (or subscripted, ``T.StridedTensor[(M, N), (NN, 1), dtype]``)
is ``T.Tensor((M, N), dtype, strides=(NN, 1))``: the kernel addresses element ``A[i, j]`` at
``i * NN + j * 1``, and an argument must have exactly those strides (in elements; a ``T.dynamic`` stride
is read from the argument).  Vector accesses are used only where the declared strides prove the
elements contiguous (the copy lowering reads the buffer's strides), so any stride gives correct loads.

``T.ptr`` is TileLang's pointer type: a tensor of pointers (``T.Tensor([G], T.ptr)``, a pointer table)
is a tensor of 64-bit integers, as in TileLang, and a ``T.ptr`` scalar parameter takes a 64-bit
integer.  ``T.make_tensor(ptr, shape, dtype)`` (a tensor at an address known only at run time) is
refused: every global tensor here is a kernel parameter, whose shape, dtype and strides the call checks.
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

ptr = DType("int64")  # TileLang's T.ptr: an address (pointer tables are int64 tensors)


def make_tensor(ptr, shape, dtype="float32", strides=None):
    """``T.make_tensor(ptr, shape, dtype)``: refused (see the module docstring)."""
    raise _b.error("T.make_tensor (a tensor at an address known only at run time) is not supported: global "
                   "tensors are kernel parameters", hint="pass the tensor itself as a T.Tensor(shape, dtype) "
                   "parameter; for a group of tensors, pass one stacked or concatenated tensor and index it")


__all__ = ["StridedTensor", "ptr", "make_tensor"]
