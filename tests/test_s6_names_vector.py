"""TileLang names of scalar and vector element access: ``T.Ramp`` subscripts (negative lanes count from
the end, TileLang issue 2554), ``T.let`` after ``x = T.int32()``, ``A[i].astype(dtype)``,
``T.wait_wgmma`` and the ``T.float16x2`` dtype name."""

import numpy as np
import pytest
from toolchains import needs_nvrtc
from zoo import close, f64, poisoned, rand

import tilewright
import tilewright.language as T
from tilewright.errors import CompileError

TARGETS = [("interpret", None), ("cuda -arch=sm_90a", "emulator"), ("cuda -arch=sm_80", "emulator")]


@pytest.fixture
def rng():
    return np.random.default_rng(6)


def ramp_load(n):
    @T.prim_func
    def main(A: T.Tensor((n,), T.float32), B: T.Tensor((4, 4), T.float32)):
        with T.Kernel(1, threads=1) as _:
            for t in T.serial(4):
                B[t, T.Ramp(0, 1, 4)] = A[T.Ramp(t - 2, 1, 4)]

    return main


def ramp_store(n):
    @T.prim_func
    def main(B: T.Tensor((4, 4), T.float32), A: T.Tensor((n,), T.float32)):
        with T.Kernel(1, threads=1) as _:
            for t in T.serial(4):
                A[T.Ramp(t - 2, 1, 4)] = B[t, T.Ramp(0, 1, 4)] * 2.0

    return main


@pytest.mark.parametrize("target,backend", TARGETS)
def test_ramp_load_with_negative_lanes_counts_from_the_end(rng, target, backend):
    n = 64
    a = rand(rng, (n,))
    b = poisoned((4, 4))
    tilewright.compile(ramp_load(n), target=target, execution_backend=backend)(a, b)
    want = np.array([[f64(a)[(t - 2 + k) % n] for k in range(4)] for t in range(4)])
    close(b, want, rtol=0, atol=0)


@pytest.mark.parametrize("target,backend", TARGETS)
def test_ramp_store_with_negative_lanes_counts_from_the_end(rng, target, backend):
    n = 64
    b = rand(rng, (4, 4))
    a = rand(rng, (n,))
    want = f64(a).copy()
    for t in range(4):
        for k in range(4):
            want[(t - 2 + k) % n] = 2.0 * f64(b)[t, k]
    tilewright.compile(ramp_store(n), target=target, execution_backend=backend)(b, a)
    close(a, want, rtol=0, atol=0)


def test_ramp_operands_of_a_packed_atomic(rng):
    @T.prim_func
    def main(Dst: T.Tensor((4,), T.float32), Val: T.Tensor((4,), T.float32), Prev: T.Tensor((2,), T.float32)):
        with T.Kernel(1, threads=1):
            Prev[0:2] = T.atomic_addx2(Dst[T.Ramp(1, 1, 2)], Val[T.Ramp(2, 1, 2)], return_prev=True)

    d, v, p = rand(rng, (4,)), rand(rng, (4,)), poisoned((2,))
    want_d = f64(d).copy()
    want_d[1:3] += f64(v)[2:4]
    want_p = f64(d)[1:3]
    tilewright.compile(main, target="interpret")(d, v, p)
    close(p, want_p, rtol=0, atol=0)
    close(d, want_d)


def test_ramp_refusals():
    with pytest.raises(CompileError, match="lanes must be a positive int"):
        @T.prim_func
        def bad_lanes(A: T.Tensor((8,), T.float32)):
            with T.Kernel(1, threads=1):
                A[T.Ramp(0, 1, 0)] = 1.0

    with pytest.raises(CompileError, match="a store of 4 lanes gets a value of 2 lanes"):
        @T.prim_func
        def lanes_differ(A: T.Tensor((8,), T.float32)):
            with T.Kernel(1, threads=1):
                A[T.Ramp(0, 1, 4)] = A[T.Ramp(4, 1, 2)]

    with pytest.raises(CompileError, match="needs stride 1"):
        @T.prim_func
        def strided_operand(Dst: T.Tensor((8,), T.float32), Val: T.Tensor((8,), T.float32)):
            with T.Kernel(1, threads=1):
                T.atomic_addx2(Dst[T.Ramp(0, 2, 2)], Val[0:2])


def let_gemm(M, N, K, bm, bn, bk):
    @T.prim_func
    def main(A: T.Tensor((M, K), T.float16), B: T.Tensor((N, K), T.float16), C: T.Tensor((M, N), T.float32)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            A_s = T.alloc_shared((bm, bk), T.float16)
            B_s = T.alloc_shared((bn, bk), T.float16)
            C_f = T.alloc_fragment((bm, bn), T.float32)
            T.clear(C_f)
            for ko in T.Pipelined(T.ceildiv(K, bk), num_stages=0):
                offset = T.int32()
                T.let(offset, ko * bk)
                T.copy(A[by * bm, offset], A_s)
                T.copy(B[bx * bn, offset], B_s)
                T.gemm(A_s, B_s, C_f, transpose_B=True)
                T.wait_wgmma(0)
            T.copy(C_f, C[by * bm, bx * bn])

    return main


@pytest.mark.parametrize("target,backend", [("interpret", None), ("cuda -arch=sm_90a", "emulator")])
def test_let_binds_a_declared_name(rng, target, backend):
    a, b = rand(rng, (64, 64), "float16"), rand(rng, (64, 64), "float16")
    c = poisoned((64, 64))
    tilewright.compile(let_gemm(64, 64, 64, 32, 32, 32), target=target, execution_backend=backend)(a, b, c)
    close(c, f64(a) @ f64(b).T, rtol=1e-3, atol=1e-3)


def test_let_slot_used_before_let_is_refused():
    with pytest.raises(CompileError, match="not yet bound by T.let") as e:
        @T.prim_func
        def main(A: T.Tensor((4,), T.float32)):
            with T.Kernel(1, threads=1):
                x = T.int32()
                A[0] = x

    assert "A[0] = x" in str(e.value)
    with pytest.raises(CompileError, match=r"T.let\(x, value\) binds a name made by x = T.int32\(\)"):
        @T.prim_func
        def not_a_slot(A: T.Tensor((4,), T.float32)):
            with T.Kernel(1, threads=1):
                T.let(A[0], 1)


def test_scalar_dtype_without_value_outside_a_kernel_is_a_symbol():
    a = T.int32()
    assert str((a & 0x7FFFFFFF).dtype) == "int32"
    assert T.uint64().dtype == "uint64"


@pytest.mark.parametrize("target,backend", TARGETS)
def test_element_astype(rng, target, backend):
    @T.prim_func
    def main(A: T.Tensor((32,), T.float16), B: T.Tensor((32,), T.float16), C: T.Tensor((1,), T.float32)):
        with T.Kernel(1, threads=1):
            acc = T.alloc_local((1,), T.float32)
            acc[0] = 0.0
            for k in T.serial(32):
                acc[0] += A[k].astype(T.float32) * B[k].astype("float32")
            C[0] = acc[0]

    a, b, c = rand(rng, (32,), "float16"), rand(rng, (32,), "float16"), poisoned((1,))
    tilewright.compile(main, target=target, execution_backend=backend)(a, b, c)
    close(c, [np.dot(f64(a), f64(b))], rtol=1e-5, atol=1e-5)


def test_wait_wgmma_refuses_a_negative_count():
    with pytest.raises(CompileError, match="T.wait_wgmma"):
        @T.prim_func
        def main(A: T.Tensor((4,), T.float32)):
            with T.Kernel(1, threads=128):
                T.wait_wgmma(-1)


def test_float16x2_is_a_name_refused_as_an_element_type():
    assert T.float16x2.bits == 32 and T.float16x2.lanes == 2
    with pytest.raises(CompileError, match="float16x2"):
        @T.prim_func
        def main(A: T.Tensor((4,), T.float16x2)):
            with T.Kernel(1, threads=1):
                A[0] = A[1]


@needs_nvrtc
def test_ramp_kernel_compiles_with_nvrtc():
    k = tilewright.compile(ramp_load(1024), target="cuda -arch=sm_90a")
    assert "< 0) ?" in k.get_kernel_source()
