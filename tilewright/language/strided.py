"""``T.StridedTensor``: TileLang's spelling of a tensor parameter with explicit strides.

``A: T.StridedTensor((M, N), (NN, 1), dtype)`` (or subscripted, ``T.StridedTensor[(M, N), (NN, 1), dtype]``)
is ``T.Tensor((M, N), dtype, strides=(NN, 1))``: the kernel addresses element ``A[i, j]`` at
``i * NN + j * 1``, and an argument must have exactly those strides (in elements; a ``T.dynamic`` stride
is read from the argument).  Vector accesses are used only where the declared strides prove the
elements contiguous (the copy lowering reads the buffer's strides), so any stride gives correct loads.
"""

from __future__ import annotations

from ..frontend import builder as _b
from . import Tensor


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

__all__ = ["StridedTensor"]
