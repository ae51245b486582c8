"""4-bit tensors passed as byte storage (TileLang's test_tilelang_language_subtype.py and issue 2292): an
int8 / uint8 / float4_e2m1fn_x2 tensor holds two float4_e2m1fn values per byte, so a declaration's last
dimension is twice the storage's byte count and its other strides twice the byte strides.  Sizes
(T.dynamic and T.const), strides (T.StridedTensor) and expression dimensions bind from that logical
shape, in prim_funcs and in eager @jit functions.

Kernels run in the tile interpreter and, lowered for sm_90a and gfx942, in the thread-level emulator,
on random bytes, against a float64 decode of the nibbles written here (not the project's unpacker),
with outputs poisoned first.  The GPU runs are in test_s6_shapes_gpu.py."""

from __future__ import annotations

import numpy as np
import pytest

import tilewright as tw
import tilewright.language as T
from tilewright.errors import ArgumentError, CompileError

torch = pytest.importorskip("torch")

BACKENDS = (("interpret", None), ("cuda -arch=sm_90a", "emulator"), ("hip -arch=gfx942", "emulator"))
# float4_e2m1fn: sign bit 3, then a 2-bit exponent and 1-bit mantissa
_E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def decode_fp4(storage) -> np.ndarray:
    """float64 values of byte storage: element 2j is the low nibble of byte j, 2j + 1 the high one."""
    b = storage.view(torch.uint8).numpy().astype(np.int64) if isinstance(storage, torch.Tensor) else storage
    nibbles = np.stack([b & 0xF, b >> 4], axis=-1).reshape(*b.shape[:-1], b.shape[-1] * 2)
    return np.where(nibbles & 8, -1.0, 1.0) * _E2M1[nibbles & 7]


def random_bytes(shape, dtype=torch.uint8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, shape, dtype=torch.uint8, generator=g).view(dtype)


def nan_out(*shape):
    return torch.full(shape, float("nan"), dtype=torch.float32)


def run_everywhere(make_kernel, call):
    for target, backend in BACKENDS:
        call(make_kernel(target, backend))


# ------------------------------------------------------------------------------------------ prim_func


def widen_kernel(target, backend):
    """out = float32(x) for x: (m, 16) float4_e2m1fn, m from the storage's rows."""
    m = T.dynamic("m")

    @T.prim_func
    def widen(x: T.Tensor[(m, 16), T.float4_e2m1fn], out: T.Tensor[(m, 16), T.float32]):
        with T.Kernel(m, threads=64) as i:
            for j in T.Parallel(16):
                out[i, j] = T.cast(x[i, j], T.float32)

    return tw.compile(widen, target=target, execution_backend=backend)


@pytest.mark.parametrize("storage", [torch.uint8, torch.int8])
@pytest.mark.parametrize("m", [1, 4, 32])
def test_dynamic_rows_bind_from_byte_storage(storage, m):
    def call(kern):
        x, out = random_bytes((m, 8), storage, seed=m), nan_out(m, 16)
        kern(x, out)
        np.testing.assert_array_equal(out.double().numpy(), decode_fp4(x))

    run_everywhere(widen_kernel, call)


def test_float4_e2m1fn_x2_storage_is_taken():
    if not hasattr(torch, "float4_e2m1fn_x2"):
        pytest.skip("this torch has no float4_e2m1fn_x2")

    def call(kern):
        x = random_bytes((3, 8), seed=5)
        out = nan_out(3, 16)
        kern(x.view(torch.float4_e2m1fn_x2), out)
        np.testing.assert_array_equal(out.double().numpy(), decode_fp4(x))

    run_everywhere(widen_kernel, call)


def last_dim_kernel(target, backend, strided):
    """out = float32(x) for x: (4, n) float4_e2m1fn, n twice the storage's bytes per row."""
    n, s = T.dynamic("n"), T.dynamic("s")
    spec = T.StridedTensor[[4, n], [s, 1], T.float4_e2m1fn] if strided else T.Tensor[(4, n), T.float4_e2m1fn]

    @T.prim_func
    def widen(x: spec, out: T.Tensor[(4, n), T.float32]):
        with T.Kernel(4, threads=64) as i:
            for j in T.serial(n):
                out[i, j] = T.cast(x[i, j], T.float32)

    return tw.compile(widen, target=target, execution_backend=backend)


@pytest.mark.parametrize("strided", [False, True])
@pytest.mark.parametrize("nbytes", [4, 16])
def test_symbolic_last_dimension_is_twice_the_bytes(strided, nbytes):
    def call(kern):
        back = random_bytes((8, nbytes), seed=nbytes)
        for x in (back[:4], back[::2]) if strided else (back[:4],):
            out = nan_out(4, nbytes * 2)
            kern(x, out)
            np.testing.assert_array_equal(out.double().numpy(), decode_fp4(x))

    run_everywhere(lambda target, backend: last_dim_kernel(target, backend, strided), call)


def strided_rows_kernel(target, backend):
    """x: T.StridedTensor[[m, 16], [s, 1]]: s counts elements, twice the byte stride of the storage."""
    m, s = T.dynamic("m"), T.dynamic("s")

    @T.prim_func
    def widen(x: T.StridedTensor[[m, 16], [s, 1], T.float4_e2m1fn], out: T.Tensor[(m, 16), T.float32],
              stride: T.Tensor[(1,), T.int32]):
        with T.Kernel(m, threads=64) as i:
            for j in T.Parallel(16):
                out[i, j] = T.cast(x[i, j], T.float32)
            stride[0] = s

    return tw.compile(widen, target=target, execution_backend=backend)


@pytest.mark.parametrize("step", [1, 2, 4])
def test_row_stride_binds_in_elements(step):
    def call(kern):
        back = random_bytes((4 * step, 8), seed=step)
        x = back[::step]
        out, stride = nan_out(4, 16), torch.full((1,), -1, dtype=torch.int32)
        kern(x, out, stride)
        assert stride.item() == 16 * step  # 8 * step bytes, two elements each
        np.testing.assert_array_equal(out.double().numpy(), decode_fp4(x))

    run_everywhere(strided_rows_kernel, call)


def expression_kernel(target, backend):
    """x: (m, n * 2) and y: (m * 2, n), both float4_e2m1fn: m from x's rows, n from y's bytes."""
    m, n = T.dynamic("m"), T.dynamic("n")

    @T.prim_func
    def add(x: T.Tensor[(m, n * 2), T.float4_e2m1fn], y: T.Tensor[(m * 2, n), T.float4_e2m1fn],
            out: T.Tensor[(m, n * 2), T.float32]):
        with T.Kernel(m, threads=64) as i:
            for j in T.serial(n * 2):
                out[i, j] = T.cast(x[i, j], T.float32) + T.cast(y[i * 2 + j // n, j % n], T.float32) * 0.25

    return tw.compile(add, target=target, execution_backend=backend)


@pytest.mark.parametrize("m,n", [(2, 8), (4, 16)])
def test_expression_dimensions_of_byte_storage(m, n):
    def call(kern):
        x, y = random_bytes((m, n), seed=m), random_bytes((m * 2, n // 2), seed=n)
        out = nan_out(m, n * 2)
        kern(x, y, out)
        yv = decode_fp4(y).reshape(m, n * 2)
        np.testing.assert_allclose(out.double().numpy(), decode_fp4(x) + yv * 0.25, rtol=0, atol=1e-6)

    run_everywhere(expression_kernel, call)


def scatter_kernel(target, backend, block_size, strides):
    """TileLang's fp4 scatter through a strided destination: consecutive elements share a byte, so a
    store must write its nibble only."""
    nv, nb = T.dynamic("n"), T.dynamic("num_blocks")

    @T.prim_func
    def scatter(src: T.Tensor[(nv, 128), T.float4_e2m1fn],
                dst: T.StridedTensor[(nb, block_size, 128), strides, T.float4_e2m1fn],
                slots: T.Tensor[(nv,), T.int32]):
        with T.Kernel(nv, threads=64) as i:
            for k in T.serial(128):
                dst[slots[i] // block_size, slots[i] % block_size, k] = src[i, k]

    return tw.compile(scatter, target=target, execution_backend=backend)


@pytest.mark.parametrize("dynamic_strides", [False, True])
def test_scatter_into_strided_storage_writes_nibbles(dynamic_strides):
    num_blocks, block_size, n, padding = 5, 8, 16, 4
    row = 64 + padding

    def make(target, backend):
        strides = (T.dynamic("ds0"), T.dynamic("ds1"), 1) if dynamic_strides else (2 * block_size * row, 128, 1)
        return scatter_kernel(target, backend, block_size, strides)

    def call(kern):
        back = random_bytes((num_blocks, block_size * row), seed=11)
        before = back.clone()
        dst = back[:, : block_size * 64].view(num_blocks, block_size, 64).view(torch.int8)
        src = random_bytes((n, 64), torch.int8, seed=12)
        slots = torch.randperm(num_blocks * block_size, generator=torch.Generator().manual_seed(13))[:n].int()
        kern(src, dst, slots)
        want = before.numpy().copy()  # rows of a block are 64 bytes apart; the padding ends the block
        for i, slot in enumerate(slots.tolist()):
            col = slot % block_size * 64
            want[slot // block_size, col:col + 64] = src.view(torch.uint8)[i].numpy()
        np.testing.assert_array_equal(back.numpy(), want)  # padding untouched

    run_everywhere(make, call)


def test_byte_count_mismatch_names_the_storage():
    kern = widen_kernel("interpret", None)
    with pytest.raises(ArgumentError, match=r"argument x has shape \(3, 14\).*dimension 1 is 14, expected 16") as e:
        kern(random_bytes((3, 7)), nan_out(3, 16))
    assert "byte storage of float4_e2m1fn values, two per byte" in str(e.value)


def test_odd_last_dimension_cannot_be_byte_storage():
    @T.prim_func
    def widen(x: T.Tensor[(4, 15), T.float4_e2m1fn], out: T.Tensor[(4, 15), T.float32]):
        with T.Kernel(1, threads=64):
            for i, j in T.Parallel(4, 15):
                out[i, j] = T.cast(x[i, j], T.float32)

    kern = tw.compile(widen, target="interpret")
    for nbytes in (7, 8):
        with pytest.raises(ArgumentError, match="dimension 1 is 1[46], expected 15"):
            kern(random_bytes((4, nbytes)), nan_out(4, 15))


# ------------------------------------------------------------------------------------------ eager @jit


def eager_const_kernel(target, backend):
    @tw.jit(target=target, execution_backend=backend)
    def widen(A):
        M, K = T.const("M K")
        A: T.Tensor((M, K), T.float4_e2m1fn)
        out = T.empty((M, K), T.float32)
        with T.Kernel(M, threads=64) as i:
            for j in T.Parallel(K):
                out[i, j] = T.cast(A[i, j], T.float32)
        return out

    return widen


@pytest.mark.parametrize("storage", [torch.int8, torch.uint8])
def test_eager_const_sizes_bind_the_logical_shape(storage):
    for target, backend in BACKENDS:
        widen = eager_const_kernel(target, backend)
        a = random_bytes((6, 16), storage, seed=3)
        out = widen(a)
        assert tuple(out.shape) == (6, 32)
        np.testing.assert_array_equal(out.double().numpy(), decode_fp4(a))


def test_eager_strided_const_sizes_bind_logical_strides():
    @tw.jit(target="interpret")
    def widen(A):
        M, K, S = T.const("M K S")
        A: T.StridedTensor((M, K), (S, 1), T.float4_e2m1fn)
        out = T.empty((M, K), T.float32)
        with T.Kernel(M, threads=64) as i:
            for j in T.Parallel(K):
                out[i, j] = T.cast(A[i, j], T.float32)
        return out

    packed = random_bytes((16, 8), torch.int8, seed=4)[::2, :]
    func = widen.get_tir(packed)
    assert func.params[0].shape == (8, 16) and func.params[0].strides == (32, 1)
    np.testing.assert_array_equal(widen(packed).double().numpy(), decode_fp4(packed))


def test_eager_dynamic_sizes_of_byte_storage():
    @tw.jit(target="interpret")
    def pair(x, y):
        m = T.dynamic("m")
        x: T.Tensor[(m, 16), T.float4_e2m1fn]
        y: T.Tensor[(m * 4, 16), T.float4_e2m1fn]
        out = T.empty((m, 16), T.float32)
        with T.Kernel(m, threads=64) as i:
            for j in T.Parallel(16):
                out[i, j] = T.cast(x[i, j], T.float32) - T.cast(y[i * 4 + 3, j], T.float32)
        return out

    x, y = random_bytes((3, 8), seed=6), random_bytes((12, 8), seed=7)
    np.testing.assert_array_equal(pair(x, y).double().numpy(), decode_fp4(x) - decode_fp4(y)[3::4])
    with pytest.raises(ArgumentError, match=r"argument y .*dimension 0 is 13, expected m \* 4 = 12"):
        pair(x, random_bytes((13, 8)))


def test_eager_byte_count_mismatch_is_explained():
    @tw.jit(target="interpret")
    def widen(A):
        A: T.Tensor((4, 16), T.float4_e2m1fn)
        with T.Kernel(1, threads=64):
            T.evaluate(A[0, 0])

    with pytest.raises(ArgumentError, match="byte storage of 4-bit values, two per byte"):
        widen(random_bytes((4, 7)))
    with pytest.raises(ArgumentError, match="has dtype int16; its declaration .* says float4_e2m1fn"):
        widen(torch.zeros((4, 8), dtype=torch.int16))


def test_eager_const_strides_bind_from_the_argument():
    """TileLang's test_jit2_return copy5 / copy6: T.const names in T.StridedTensor strides."""
    @T.macro
    def copy_impl(A):
        M, N = A.shape
        B = T.empty(M, N, dtype=A.dtype)
        with T.Kernel(T.ceildiv(M, 32), T.ceildiv(N, 32), threads=64) as (bx, by):
            T.copy(A[bx * 32: bx * 32 + 32, by * 32: by * 32 + 32], B[bx * 32: bx * 32 + 32, by * 32: by * 32 + 32])
        return B

    @tw.jit(target="interpret")
    def copy5(A):
        N, M, N_, M_ = T.const("N, M, N_, M_")
        A: T.StridedTensor[[N, M], [N_, M_], T.float32]
        return copy_impl(A)

    @tw.jit(target="interpret")
    def copy6(A):
        N = T.dynamic("N")
        M, N_, M_ = T.const("M, N_, M_")
        A: T.StridedTensor[[N, M], [N_, M_], T.float32]
        return copy_impl(A)

    for copy in (copy5, copy6):
        a = torch.randn(64, 2, 48, 2, generator=torch.Generator().manual_seed(9))
        b = copy(a[:, 0, :, 0])
        np.testing.assert_array_equal(b.numpy(), a[:, 0, :, 0].numpy())
    assert copy5.get_tir(a[:, 0, :, 0]).params[0].strides == (192, 2)


def test_eager_conflicting_const_stride_is_a_compile_error():
    @tw.jit(target="interpret")
    def two(A, B):
        M, N, S = T.const("M N S")
        A: T.StridedTensor[[M, N], [S, 1], T.float32]
        B: T.StridedTensor[[M, N], [S, 1], T.float32]
        with T.Kernel(1, threads=64):
            B[0, 0] = A[0, 0]

    a = torch.zeros(8, 16)
    with pytest.raises(CompileError, match="size S is bound twice with different values: 16 by A stride 0"):
        two(a, torch.zeros(8, 32)[:, :16])
