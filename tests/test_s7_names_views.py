"""``T.Tensor(shape, dtype, buf.data)`` (TileLang's tensor over another tensor's data, its conv
example's flattened weights and output), ``T.im2col`` (that example's gather of image patches) and ``T.copy`` from/to a start element of a view
(``T.copy(view[i, j], tile)``): the copied rectangle is the view's, also where the view merges
dimensions of the buffer (it used to be taken as a rectangle of the buffer: a wrong result), with
the parts outside the view not read (zeros) and not written.

Kernels run in the tile interpreter and, lowered for ``sm_90a`` and ``gfx942``, on the thread-level
emulator (race detector on) against float64 NumPy references with NaN-poisoned outputs.
"""

from __future__ import annotations

import numpy as np
import pytest
from zoo import close, f64, poisoned, rand

import tilewright as tw
import tilewright.language as T
from tilewright.errors import CompileError
from tilewright.interp.emulator import run_thread_kernel

TARGETS = ("cuda -arch=sm_90a", "hip -arch=gfx942")


@pytest.fixture
def rng():
    return np.random.default_rng(9_041)


def run_everywhere(func, make_args, check):
    args = make_args()
    tw.compile(func, target="interpret")(*args)
    check(args, "interpret")
    for target in TARGETS:
        args = make_args()
        kern = tw.compile(func, target=target, execution_backend="emulator")
        run_thread_kernel(kern.thread_kernel, args, check_races=True)
        check(args, target)


def flat_gemm(bm=16, bn=32, bk=16):
    """C (2, 16, 64) = A (4, 8, 32) @ W (2, 16, 64), each seen flat as a matrix through .data."""

    @T.prim_func
    def main(A: T.Tensor((4, 8, 32), "float16"), W: T.Tensor((2, 16, 64), "float16"),
             C: T.Tensor((2, 16, 64), "float32")):
        with T.Kernel(64 // bn, 32 // bm, threads=128) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "float16")
            W_s = T.alloc_shared((bk, bn), "float16")
            C_f = T.alloc_fragment((bm, bn), "float32")
            A_flat = T.Tensor((32, 32), "float16", A.data)
            W_flat = T.Tensor((32, 64), "float16", W.data)
            C_flat = T.Tensor((32, 64), "float32", C.data)
            T.clear(C_f)
            for k in T.Pipelined(32 // bk, num_stages=2):
                T.copy(A_flat[by * bm, k * bk], A_s)
                T.copy(W_flat[k * bk, bx * bn], W_s)
                T.gemm(A_s, W_s, C_f)
            T.copy(C_f, C_flat[by * bm, bx * bn])

    return main


def test_tensor_over_data_is_the_flattened_tensor(rng):
    def args():
        return [rand(rng, (4, 8, 32), "float16"), rand(rng, (2, 16, 64), "float16"), poisoned((2, 16, 64))]

    def check(a, where):
        want = f64(a[0]).reshape(32, 32) @ f64(a[1]).reshape(32, 64)
        close(a[2].reshape(32, 64), want, rtol=1e-2, atol=1e-2)

    run_everywhere(flat_gemm(), args, check)


def ragged_view_copy():
    """A (5, 6, 8) seen as (30, 8); 16-row tiles: the second tile's rows 30..31 are outside the view."""

    @T.prim_func
    def main(A: T.Tensor((5, 6, 8), "float32"), B: T.Tensor((5, 6, 8), "float32")):
        with T.Kernel(2, threads=64) as bx:
            S = T.alloc_shared((16, 8), "float32")
            a = T.Tensor((30, 8), "float32", A.data)
            b = T.reshape(B, (30, 8))
            T.copy(a[bx * 16, 0], S)
            for i, j in T.Parallel(16, 8):
                S[i, j] = S[i, j] * 2.0 + T.if_then_else(bx * 16 + i < 30, 0.0, 1000.0)
            T.copy(S, b[bx * 16, 0])

    return main


def test_view_tiles_outside_the_view_are_not_read_or_written(rng):
    def args():
        return [rand(rng, (5, 6, 8)), poisoned((5, 6, 8))]

    def check(a, where):
        close(a[1], 2 * f64(a[0]))  # a write of rows 30..31 would have landed past B (or been caught)

    run_everywhere(ragged_view_copy(), args, check)


def merged_dims_copy():
    """A (3, 3, 8, 16) seen as (72, 16): the tile of rows 20..35, columns 8..15 crosses rows of the
    buffer's third dimension -- not a rectangle of A."""

    @T.prim_func
    def main(A: T.Tensor((3, 3, 8, 16), "float32"), O: T.Tensor((2, 3, 4, 16), "float32")):
        with T.Kernel(1, threads=64):
            S = T.alloc_shared((16, 8), "float32")
            T.copy(T.reshape(A, (72, 16))[20, 8], S)
            T.copy(S, T.reshape(O, (24, 16))[5, 4])

    return main


def test_copy_from_a_start_element_of_a_view_takes_the_views_rectangle(rng):
    def args():
        return [rand(rng, (3, 3, 8, 16)), poisoned((2, 3, 4, 16))]

    def check(a, where):
        got = a[1].reshape(24, 16)
        want = np.full((24, 16), np.nan)
        want[5:21, 4:12] = f64(a[0]).reshape(72, 16)[20:36, 8:16]
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=where)
        close(got[5:21, 4:12], want[5:21, 4:12])

    run_everywhere(merged_dims_copy(), args, check)


def test_a_column_tile_is_a_column_of_the_view(rng):
    @T.prim_func
    def main(A: T.Tensor((4, 4, 8), "float32"), B: T.Tensor((16, 1), "float32")):
        with T.Kernel(1, threads=64):
            S = T.alloc_shared((16, 1), "float32")
            T.copy(T.Tensor((16, 8), "float32", A.data)[0, 3], S)
            T.copy(S, B)

    def args():
        return [rand(rng, (4, 4, 8)), poisoned((16, 1))]

    def check(a, where):
        close(a[1][:, 0], f64(a[0]).reshape(16, 8)[:, 3])

    run_everywhere(main, args, check)


def test_element_copy_between_views_is_one_element(rng):
    @T.prim_func
    def main(A: T.Tensor((4, 8), "float32"), B: T.Tensor((4, 8), "float32")):
        with T.Kernel(1, threads=64):
            T.copy(T.reshape(A, (32,))[9], T.reshape(B, (2, 16))[1, 3])

    a, b = rand(rng, (4, 8)), poisoned((4, 8))
    tw.compile(main, target="interpret")(a, b)
    assert b.reshape(-1)[19] == a.reshape(-1)[9] and np.isnan(np.delete(b.reshape(-1), 19)).all()


def test_tensor_over_data_is_checked():
    with pytest.raises(CompileError, match=r"data must be a buffer's .data") as e:
        @T.prim_func
        def not_data(A: T.Tensor((4, 8), "float32"), B: T.Tensor((4, 8), "float32")):
            with T.Kernel(1, threads=64):
                v = T.Tensor((32,), "float32", A)
                B[0, 0] = v[3]

    assert "v = T.Tensor((32,), " in str(e.value)  # the kernel line
    with pytest.raises(CompileError, match=r"strides=...\) is not supported"):
        @T.prim_func
        def strided(A: T.Tensor((4, 8), "float32"), B: T.Tensor((4, 8), "float32")):
            with T.Kernel(1, threads=64):
                v = T.Tensor((32,), "float32", A.data, strides=(1,))
                B[0, 0] = v[3]


def conv_im2col(N, C, H, W, F, K, S, D, P, bm, bn, bk, dtype="float32"):
    """TileLang's test_nvrtc_im2col_tma_desc convolution (NHWC image, (K, K, C, F) weights)."""
    OH = (H + 2 * P - D * (K - 1) - 1) // S + 1
    OW = (W + 2 * P - D * (K - 1) - 1) // S + 1

    @T.prim_func
    def main(data: T.Tensor((N, H, W, C), dtype), kernel: T.Tensor((K, K, C, F), dtype),
             out: T.Tensor((N, OH, OW, F), dtype)):
        with T.Kernel(T.ceildiv(F, bn), T.ceildiv(N * OH * OW, bm), threads=128) as (bx, by):
            data_shared = T.alloc_shared((bm, bk), dtype)
            kernel_shared = T.alloc_shared((bk, bn), dtype)
            out_local = T.alloc_fragment((bm, bn), "float32")
            out_shared = T.alloc_shared((bm, bn), dtype)
            kernel_flat = T.Tensor((K * K * C, F), dtype, kernel.data)
            out_flat = T.Tensor((N * OH * OW, F), dtype, out.data)
            T.clear(out_local)
            for k_iter in T.Pipelined(T.ceildiv(K * K * C, bk), num_stages=2):
                T.im2col(data, data_shared, by, k_iter, K, S, D, P)
                T.copy(kernel_flat[k_iter * bk, bx * bn], kernel_shared)
                T.gemm(data_shared, kernel_shared, out_local)
            T.copy(out_local, out_shared)
            T.copy(out_shared, out_flat[by * bm, bx * bn])

    return main


def conv_reference(x, w, S, D, P):
    """float64 NHWC convolution, (K, K, C, F) weights."""
    N, H, W, C = x.shape
    K, F = w.shape[0], w.shape[3]
    OH = (H + 2 * P - D * (K - 1) - 1) // S + 1
    OW = (W + 2 * P - D * (K - 1) - 1) // S + 1
    xp = np.zeros((N, H + 2 * P, W + 2 * P, C))
    xp[:, P:P + H, P:P + W] = x
    out = np.zeros((N, OH, OW, F))
    for kh in range(K):
        for kw in range(K):
            patch = xp[:, kh * D:kh * D + S * (OH - 1) + 1:S, kw * D:kw * D + S * (OW - 1) + 1:S]
            out += patch @ f64(w[kh, kw])
    return out


@pytest.mark.parametrize("shape", [
    (1, 8, 6, 6, 32, 3, 1, 1, 1),   # N, C, H, W, F, K, S, D, P
    (2, 6, 7, 5, 16, 3, 2, 2, 2),   # strided, dilated, 6 channels (columns cross kernel positions), ragged tiles
])
def test_im2col_convolution(rng, shape):
    N, C, H, W, F, K, S, D, P = shape
    OH = (H + 2 * P - D * (K - 1) - 1) // S + 1
    OW = (W + 2 * P - D * (K - 1) - 1) // S + 1

    def args():
        return [rand(rng, (N, H, W, C)), rand(rng, (K, K, C, F)), poisoned((N, OH, OW, F))]

    def check(a, where):
        close(a[2], conv_reference(f64(a[0]), a[1], S, D, P), rtol=1e-4, atol=1e-4)

    run_everywhere(conv_im2col(N, C, H, W, F, K, S, D, P, 32, 16, 16), args, check)
