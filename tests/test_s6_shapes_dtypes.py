"""``T.Tensor[shape, dtype]`` with a torch or NumPy dtype (TileLang's test_vectorize_all_dtypes passes
``torch.uint8``): read as the dtype, not as part of the shape.  Runs in the tile interpreter and, lowered
for sm_90a and gfx942, in the thread-level emulator; the output starts poisoned (a value the kernel
does not store) and is compared with the values stored."""

from __future__ import annotations

import numpy as np
import pytest

import tilewright as tw
import tilewright.language as T

torch = pytest.importorskip("torch")

BACKENDS = (("interpret", None), ("cuda -arch=sm_90a", "emulator"), ("hip -arch=gfx942", "emulator"))


def store_index(dtype, vec_num):
    @T.prim_func
    def main(A: T.Tensor[(64,), dtype]):
        with T.Kernel(1, threads=256):
            for i in T.vectorized(vec_num):
                A[i] = T.cast(i + 1, dtype)

    return main


@pytest.mark.parametrize("dtype", [torch.uint8, torch.uint64, torch.int8, torch.int64, torch.float8_e4m3fn,
                                   torch.float8_e5m2, np.int16, np.dtype("float32")])
@pytest.mark.parametrize("vec_num", [1, 4, 8])
def test_tensor_subscript_takes_torch_and_numpy_dtypes(dtype, vec_num):
    name = str(dtype).replace("torch.", "") if not isinstance(dtype, np.dtype) else dtype.name
    name = np.dtype(dtype).name if isinstance(dtype, type) else name
    func = store_index(dtype, vec_num)
    assert func.params[0].shape == (64,) and func.params[0].dtype == name
    for target, backend in BACKENDS:
        kern = tw.compile(func, target=target, execution_backend=backend)
        x = torch.full((64,), 96, dtype=torch.float32).to(getattr(torch, name))
        kern(x)
        got = x.double().numpy()
        np.testing.assert_array_equal(got[:vec_num], np.arange(1, vec_num + 1))
        np.testing.assert_array_equal(got[vec_num:], 96.0)  # not stored: still the poison


def test_shape_and_size_placeholders_are_not_dtypes():
    spec = T.Tensor[(4, 8)]
    assert spec.shape == (4, 8) and spec.dtype == "float32"
    spec = T.Tensor[(4, 8), "float16"]
    assert spec.shape == (4, 8) and spec.dtype == "float16"
