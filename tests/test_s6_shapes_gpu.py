"""The s6 shape work on an NVIDIA GPU (torch CUDA tensors, target "cuda"): expression dimensions, 4-bit
byte storage, zero-size dimensions and torch dtypes in T.Tensor[...].  The kernels are those of
test_s6_shapes_exprs.py, test_s6_shapes_packed.py, test_s6_shapes_zero.py and test_s6_shapes_dtypes.py
(interpreter and emulators); here they run on the device against the same float64 references,
outputs poisoned first."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or getattr(torch.version, "hip", None):
    pytest.skip("needs an NVIDIA GPU with a CUDA build of PyTorch", allow_module_level=True)

from test_s6_shapes_dtypes import store_index  # noqa: E402
from test_s6_shapes_exprs import fill_affine, tiled_copy_expr, two_tensors  # noqa: E402
from test_s6_shapes_packed import (  # noqa: E402
    decode_fp4,
    eager_const_kernel,
    expression_kernel,
    random_bytes,
    scatter_kernel,
    strided_rows_kernel,
    widen_kernel,
)
from test_s6_shapes_zero import matmul  # noqa: E402

import tilewright as tw  # noqa: E402
import tilewright.language as T  # noqa: E402
from tilewright.errors import ArgumentError  # noqa: E402


def _rand(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, generator=g, device="cuda").to(dtype)


def _nan(*shape):
    return torch.full(shape, float("nan"), device="cuda")


@pytest.mark.parametrize("a_coeff,b_coeff,size", [(4, 0, 16), (1, 1, 16), (3, 1, 16), (5, 2, 37)])
def test_affine_dimension(a_coeff, b_coeff, size):
    kern = tw.compile(fill_affine(a_coeff, b_coeff), target="cuda")
    a = torch.randint(-1000, 1000, (size,), dtype=torch.int32, device="cuda")
    kern(a)
    assert torch.equal(a.cpu(), torch.arange(size, dtype=torch.int32) * 3 - 7)
    bad = 0 if a_coeff == 1 else a_coeff * 3 + b_coeff + 1  # n would be negative / not an integer
    with pytest.raises(ArgumentError, match="dimension 0"):
        kern(torch.zeros(bad, dtype=torch.int32, device="cuda"))


def test_expression_dimensions_two_tensors():
    kern = tw.compile(two_tensors(), target="cuda", out_idx=[-1])
    m, n = 5, 24
    x, y = _rand(m, n * 2, seed=1), _rand(m * 2, n, seed=2)
    out = kern(x, y)
    j = torch.arange(n * 2, device="cuda")
    want = x.double() * 2 + y.double()[torch.arange(m, device="cuda")[:, None] * 2 + j % 2, j // 2]
    torch.testing.assert_close(out.double(), want, rtol=1e-6, atol=1e-6)


def test_tile_copies_bounded_by_expression_dimensions():
    kern = tw.compile(tiled_copy_expr(64, 64), target="cuda")
    for m, n in ((50, 45), (3, 1)):
        a = _rand(m * 2 + 1, n * 3, dtype=torch.float16, seed=m)
        b = _nan(m * 2 + 1, n * 3)
        kern(a, b)
        torch.testing.assert_close(b.double(), a.double() + 1, rtol=1e-6, atol=1e-6)


def test_eager_outputs_of_expression_shapes():
    @tw.jit(target="cuda")
    def kernel(A):
        m = T.dynamic("m")
        A: T.Tensor[[m], T.float32]
        B = T.empty([m * 2 + 1], T.float32)
        with T.Kernel(1, threads=32):
            for i in T.serial(m * 2 + 1):
                B[i] = A[i % m] + 1.0
        return B

    a = _rand(37, seed=3)
    b = kernel(a)
    assert b.shape == (75,) and b.device.type == "cuda"
    torch.testing.assert_close(b, a.repeat(3)[:75] + 1.0)

    @tw.jit(target="cuda")
    def from_scalar(m: T.int32):
        B = T.empty([m + 1], T.float32)
        with T.Kernel(1, threads=32):
            for i in T.serial(m + 1):
                B[i] = T.cast(i, T.float32)
        return B

    b = from_scalar(23)
    assert b.device.type == "cuda"
    torch.testing.assert_close(b, torch.arange(24, dtype=torch.float32, device="cuda"))


@pytest.mark.parametrize("storage", [torch.uint8, torch.int8])
def test_packed_fp4_rows(storage):
    kern = widen_kernel("cuda", None)
    x = random_bytes((32, 8), storage, seed=4).cuda()
    out = _nan(32, 16)
    kern(x, out)
    np.testing.assert_array_equal(out.double().cpu().numpy(), decode_fp4(x.cpu()))
    if hasattr(torch, "float4_e2m1fn_x2"):
        out = _nan(32, 16)
        kern(x.view(torch.float4_e2m1fn_x2), out)
        np.testing.assert_array_equal(out.double().cpu().numpy(), decode_fp4(x.cpu()))


@pytest.mark.parametrize("step", [1, 2, 4])
def test_packed_fp4_strided_rows(step):
    kern = strided_rows_kernel("cuda", None)
    back = random_bytes((4 * step, 8), seed=step).cuda()
    x = back[::step]
    out, stride = _nan(4, 16), torch.full((1,), -1, dtype=torch.int32, device="cuda")
    kern(x, out, stride)
    assert stride.item() == 16 * step
    np.testing.assert_array_equal(out.double().cpu().numpy(), decode_fp4(x.cpu()))


def test_packed_fp4_expression_dimensions():
    kern = expression_kernel("cuda", None)
    m, n = 4, 16
    x, y = random_bytes((m, n), seed=5).cuda(), random_bytes((m * 2, n // 2), seed=6).cuda()
    out = _nan(m, n * 2)
    kern(x, y, out)
    want = decode_fp4(x.cpu()) + decode_fp4(y.cpu()).reshape(m, n * 2) * 0.25
    np.testing.assert_allclose(out.double().cpu().numpy(), want, rtol=0, atol=1e-6)


@pytest.mark.parametrize("dynamic_strides", [False, True])
def test_packed_fp4_scatter_writes_nibbles(dynamic_strides):
    num_blocks, block_size, n, row = 5, 8, 16, 68
    strides = (T.dynamic("ds0"), T.dynamic("ds1"), 1) if dynamic_strides else (2 * block_size * row, 128, 1)
    kern = scatter_kernel("cuda", None, block_size, strides)
    back = random_bytes((num_blocks, block_size * row), seed=11).cuda()
    before = back.cpu().numpy().copy()
    dst = back[:, : block_size * 64].view(num_blocks, block_size, 64).view(torch.int8)
    src = random_bytes((n, 64), torch.int8, seed=12).cuda()
    slots = torch.randperm(num_blocks * block_size, generator=torch.Generator().manual_seed(13))[:n].int().cuda()
    kern(src, dst, slots)
    for i, slot in enumerate(slots.tolist()):
        col = slot % block_size * 64
        before[slot // block_size, col:col + 64] = src.view(torch.uint8)[i].cpu().numpy()
    np.testing.assert_array_equal(back.cpu().numpy(), before)


def test_eager_packed_fp4_const_sizes():
    widen = eager_const_kernel("cuda", None)
    for storage in (torch.int8, torch.uint8):
        a = random_bytes((6, 16), storage, seed=7).cuda()
        out = widen(a)
        assert tuple(out.shape) == (6, 32)
        np.testing.assert_array_equal(out.double().cpu().numpy(), decode_fp4(a.cpu()))


def test_gemm_with_zero_reduction_dimension():
    kern = tw.compile(matmul(512, 1024, 0, 128, 256, 32), out_idx=-1, target="cuda")
    a = torch.randn(512, 0, dtype=torch.float16, device="cuda")
    b = torch.randn(0, 1024, dtype=torch.float16, device="cuda")
    c = torch.full((512, 1024), float("nan"), dtype=torch.float16, device="cuda")
    kern(a, b, c)
    assert torch.equal(c, torch.zeros_like(c))


@pytest.mark.parametrize("dtype", [torch.uint8, torch.uint64, torch.int8, torch.int64, torch.float8_e4m3fn,
                                   torch.float8_e5m2])
@pytest.mark.parametrize("vec_num", [1, 2, 4, 8])
def test_vectorized_stores_of_torch_dtypes(dtype, vec_num):
    kern = tw.compile(store_index(dtype, vec_num), target="cuda")
    x = torch.full((64,), 96, dtype=torch.float32, device="cuda").to(dtype)
    kern(x)
    got = x.double().cpu().numpy()
    np.testing.assert_array_equal(got[:vec_num], np.arange(1, vec_num + 1))
    np.testing.assert_array_equal(got[vec_num:], 96.0)
