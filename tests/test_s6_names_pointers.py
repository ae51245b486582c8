"""``T.make_tensor(a_ptr, shape, dtype)`` / ``T.match_buffer(a_ptr, shape, dtype)`` on a ``T.ptr`` /
``T.handle`` parameter: the parameter becomes a tensor parameter (the call passes the tensor; its shape,
dtype and the scalar sizes are checked), in a prim_func and in an eager ``@jit`` function."""

import numpy as np
import pytest
from zoo import close, f64, poisoned, rand

import tilewright
import tilewright.language as T
from tilewright.errors import ArgumentError, CompileError


@pytest.fixture
def rng():
    return np.random.default_rng(66)


def ptr_gemm(M, N, K, bm=32, bn=32, bk=32):
    @T.prim_func
    def main(a_ptr: T.ptr, b_ptr: T.ptr, c_ptr: T.ptr, m: T.int32, n: T.int32, k: T.int32):
        A = T.make_tensor(a_ptr, (m, k), T.float16)
        B = T.make_tensor(b_ptr, (n, k), T.float16)
        C = T.make_tensor(c_ptr, (m, n), T.float32)
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            A_s = T.alloc_shared((bm, bk), T.float16)
            B_s = T.alloc_shared((bn, bk), T.float16)
            C_f = T.alloc_fragment((bm, bn), T.float32)
            T.clear(C_f)
            for ko in T.Pipelined(T.ceildiv(k, bk), num_stages=2):
                T.copy(A[by * bm, ko * bk], A_s)
                T.copy(B[bx * bn, ko * bk], B_s)
                T.gemm(A_s, B_s, C_f, transpose_B=True)
            T.copy(C_f, C[by * bm, bx * bn])

    return main


@pytest.mark.parametrize("target,backend", [("interpret", None), ("cuda -arch=sm_90a", "emulator"),
                                            ("hip -arch=gfx942", "emulator")])
def test_make_tensor_on_pointer_parameters(rng, target, backend):
    M, N, K = 64, 96, 64
    func = ptr_gemm(M, N, K)
    assert [p.name for p in func.buffer_map] == ["a_ptr", "b_ptr", "c_ptr"]
    a, b, c = rand(rng, (M, K), "float16"), rand(rng, (N, K), "float16"), poisoned((M, N))
    tilewright.compile(func, target=target, execution_backend=backend)(a, b, c, M, N, K)
    close(c, f64(a) @ f64(b).T, rtol=1e-3, atol=1e-3)


def test_scalar_sizes_must_match_the_tensor(rng):
    M, N, K = 64, 96, 64
    kernel = tilewright.compile(ptr_gemm(M, N, K), target="interpret")
    a, b, c = rand(rng, (M, K), "float16"), rand(rng, (N, K), "float16"), poisoned((M, N))
    with pytest.raises(RuntimeError, match=r"a_ptr_k == k does not hold .*a_ptr_k=64, k=32"):
        kernel(a, b, c, M, N, 32)
    with pytest.raises(ArgumentError, match="a_ptr has dtype float32, expected float16"):
        kernel(f64(a).astype(np.float32), b, c, M, N, K)


def test_match_buffer_on_a_handle(rng):
    @T.prim_func
    def main(A_ptr: T.handle, B: T.Tensor((16,), T.float32)):
        A = T.match_buffer(A_ptr, (16,), T.float32)
        with T.Kernel(1, threads=32):
            for i in T.Parallel(16):
                B[i] = A[15 - i] * 2.0

    (a_buf, _) = main.buffer_map.values()
    assert a_buf.shape == (16,) and a_buf.dtype == "float32" and a_buf.loc is not None
    a, b = rand(rng, (16,)), poisoned((16,))
    tilewright.compile(main, target="interpret")(a, b)
    close(b, f64(a)[::-1] * 2.0)


def test_eager_jit_pointer_parameters(rng):
    @tilewright.jit(target="interpret")
    def gemm_ptr(A: T.ptr, B: T.ptr, C: T.ptr, M: int, N: int, K: int, block: int = 32):
        A = T.make_tensor(A, (M, K), T.float16)
        B = T.make_tensor(B, (K, N), T.float16)
        C = T.make_tensor(C, (M, N), T.float32)
        with T.Kernel(T.ceildiv(M, block), T.ceildiv(N, block), threads=128) as (bx, by):
            A_s = T.alloc_shared((block, block), T.float16)
            B_s = T.alloc_shared((block, block), T.float16)
            C_f = T.alloc_fragment((block, block), T.float32)
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, block), num_stages=2):
                T.copy(A[bx * block, k * block], A_s)
                T.copy(B[k * block, by * block], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[bx * block, by * block])

    a, b, c = rand(rng, (64, 32), "float16"), rand(rng, (32, 96), "float16"), poisoned((64, 96))
    gemm_ptr(a, b, c, 64, 96, 32)
    close(c, f64(a) @ f64(b), rtol=1e-3, atol=1e-3)


def test_make_tensor_refusals():
    with pytest.raises(CompileError, match="takes a T.ptr parameter of the function"):
        @T.prim_func
        def not_a_param(n: T.int32):
            A = T.make_tensor(n * 2, (16,), T.float32)
            with T.Kernel(1, threads=32):
                A[0] = 1.0
    with pytest.raises(CompileError, match="already bound to a tensor"):
        @T.prim_func
        def twice(a_ptr: T.ptr):
            A = T.make_tensor(a_ptr, (16,), T.float32)
            A2 = T.make_tensor(a_ptr, (16,), T.float32)
            with T.Kernel(1, threads=32):
                A[0] = A2[1]
    with pytest.raises(CompileError, match="shape entry"):
        @T.prim_func
        def derived_size(a_ptr: T.ptr, n: T.int32):
            A = T.make_tensor(a_ptr, (n * 2,), T.float32)
            with T.Kernel(1, threads=32):
                A[0] = 1.0


def test_a_raw_address_is_sized_by_the_scalars_on_the_gpu_path():
    from tilewright.binding.args import bind_arguments

    M, N, K = 64, 96, 48
    func = ptr_gemm(M, N, K)
    bound = bind_arguments(list(func.params), list(func.dyn_vars), [0x10000, 0x20000, 0x30000, M, N, K],
                           kernel_name="main", device_type="gpu")
    a, b, c = bound.values[:3]
    assert (a.ptr, a.shape, a.strides, a.dtype) == (0x10000, (M, K), (K, 1), "float16")
    assert (b.shape, c.shape, c.dtype) == ((N, K), (M, N), "float32")
    with pytest.raises(ArgumentError, match="not 16-byte aligned"):
        bind_arguments(list(func.params), list(func.dyn_vars), [0x10004, 0x20000, 0x30000, M, N, K],
                       kernel_name="main", device_type="gpu")


@pytest.mark.parametrize("target,backend", [("interpret", None), ("cuda -arch=sm_90a", "emulator")])
def test_a_raw_address_is_refused_on_the_cpu(rng, target, backend):
    kernel = tilewright.compile(ptr_gemm(64, 96, 64), target=target, execution_backend=backend)
    a, b, c = rand(rng, (64, 64), "float16"), rand(rng, (96, 64), "float16"), poisoned((64, 96))
    with pytest.raises(ArgumentError, match="argument a_ptr is an address .* pass the tensor itself"):
        kernel(a.ctypes.data, b, c, 64, 96, 64)
