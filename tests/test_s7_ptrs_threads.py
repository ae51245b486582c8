"""``T.get_thread_binding(d)`` with ``T.Kernel(threads=(x, y[, z]))`` (TileLang's examples/gemv): threadIdx.x, .y
and .z of the linear thread numbering (x fastest), so a 2-D thread block reads as in TileLang."""

from __future__ import annotations

import numpy as np
import pytest
from zoo import close, f64, poisoned

import tilewright as tw
import tilewright.language as T
from tilewright.errors import CompileError

BACKENDS = [("interpret", None), ("cuda -arch=sm_90a", "emulator"), ("hip -arch=gfx942", "emulator")]


def gemv_2d_threads(N, K, BLOCK_N, BLOCK_K):
    """examples/gemv's naive_splitk_gemv: tn = threadIdx.x picks the row, tk = threadIdx.y a slice of K."""

    @T.prim_func
    def main(A: T.Tensor((K,), "float16"), B: T.Tensor((N, K), "float16"), C: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, BLOCK_N), threads=(BLOCK_N, BLOCK_K)) as bn:
            tn = T.get_thread_binding(0)
            tk = T.get_thread_binding(1)
            acc = T.alloc_local((1,), "float32")
            C_shared = T.alloc_shared((BLOCK_N,), "float32")
            if tk == 0:
                C_shared[tn] = 0
            T.sync_threads()
            T.clear(acc)
            for bk in T.serial(T.ceildiv(K, BLOCK_K)):
                acc[0] += A[bk * BLOCK_K + tk].astype("float32") * B[bn * BLOCK_N + tn, bk * BLOCK_K + tk].astype(
                    "float32")
            T.atomic_add(C_shared[tn], acc[0])
            T.sync_threads()
            if tk == 0:
                C[bn * BLOCK_N + tn] = C_shared[tn]

    return main


def thread_coordinates(x, y, z):
    @T.prim_func
    def main(out: T.Tensor((3, z, y, x), "int32")):
        with T.Kernel(1, threads=(x, y, z)):
            tx = T.get_thread_binding(0)
            ty = T.get_thread_binding(1)
            tz = T.get_thread_binding(2)
            out[0, tz, ty, tx] = tx
            out[1, tz, ty, tx] = ty
            out[2, tz, ty, tx] = tz

    return main


@pytest.mark.parametrize("target,backend", BACKENDS)
def test_gemv_with_a_2d_thread_block(target, backend):
    N, K = 128, 256
    BN, BK = (64, 2) if target.startswith("hip") else (32, 4)  # gfx942: 128 threads, whole 64-lane waves
    rng = np.random.default_rng(1)
    a = rng.standard_normal(K).astype(np.float16)
    b = rng.standard_normal((N, K)).astype(np.float16)
    c = poisoned((N,))
    tw.compile(gemv_2d_threads(N, K, BN, BK), target=target, execution_backend=backend)(a, b, c)
    close(c, f64(b) @ f64(a), 1e-4, 1e-4)


@pytest.mark.parametrize("target,backend", BACKENDS[:2])
def test_thread_coordinates_of_a_3d_block(target, backend):
    x, y, z = 8, 2, 2
    out = np.full((3, z, y, x), -1, np.int32)
    tw.compile(thread_coordinates(x, y, z), target=target, execution_backend=backend)(out)
    zz, yy, xx = np.meshgrid(np.arange(z), np.arange(y), np.arange(x), indexing="ij")
    np.testing.assert_array_equal(out, np.stack([xx, yy, zz]))


def test_binding_beyond_the_declared_dimensions_is_zero_and_bad_dims_are_refused():
    @T.prim_func
    def main(out: T.Tensor((32,), "int32")):
        with T.Kernel(1, threads=32):
            out[T.get_thread_binding(0)] = T.get_thread_binding(1) + 7

    out = np.full(32, -1, np.int32)
    tw.compile(main, target="interpret")(out)
    np.testing.assert_array_equal(out, np.full(32, 7))
    with pytest.raises(CompileError, match=r"T.get_thread_binding\(dim\) takes 0, 1 or 2"):
        @T.prim_func
        def bad(out: T.Tensor((32,), "int32")):
            with T.Kernel(1, threads=32):
                out[0] = T.get_thread_binding(3)
