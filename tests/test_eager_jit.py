"""The eager-JIT style (TileLang >= 0.1.8): ``@tilewright.jit`` on a function that is the kernel.

Sizes come from ``T.const("M, N, K")`` and are bound from the arguments' shapes, tensors are declared
in the body, outputs are made with ``T.empty`` and returned.  Each program runs in the tile
interpreter and on the emulator of the lowered thread code for a CUDA and an AMD target, against a
float64 NumPy reference on fresh random inputs; outputs passed in are poisoned with NaN first.
"""

import numpy as np
import pytest

import tilewright
import tilewright.language as T
from tilewright.errors import ArgumentError, CompileError

CONFIGS = [
    pytest.param(dict(target="interpret"), id="interpret"),
    pytest.param(dict(target="cuda -arch=sm_90a", execution_backend="emulator"), id="emu-sm90a"),
    pytest.param(dict(target="hip -arch=gfx942", execution_backend="emulator"), id="emu-gfx942"),
]


def _rng(seed):
    return np.random.default_rng(seed)


def make_gemm(**jit_kw):
    @tilewright.jit(**jit_kw)
    def gemm(A, B, block_M: int = 32, block_N: int = 32, block_K: int = 16, dtype=T.float16):
        M, N, K = T.const("M, N, K")
        A: T.Tensor((M, K), dtype)
        B: T.Tensor((K, N), dtype)
        C = T.empty((M, N), T.float32)
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((block_K, block_N), dtype)
            C_l = T.alloc_fragment((block_M, block_N), T.float32)
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[k * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, C_l)
            T.copy(C_l, C[by * block_M, bx * block_N])
        return C

    return gemm


def make_gemm_in_place(**jit_kw):
    """The output is a parameter (nothing returned); sizes written `M N K` with spaces."""
    @tilewright.jit(**jit_kw)
    def gemm(A, B, C, block: int = 32):
        M, N, K = T.const("M N K")
        A: T.Tensor[[M, K], T.float32]
        B: T.Tensor[[K, N], T.float32]
        C: T.Tensor[[M, N], T.float32]
        with T.Kernel(T.ceildiv(N, block), T.ceildiv(M, block), threads=128) as (bx, by):
            A_s = T.alloc_shared((block, block), T.float32)
            B_s = T.alloc_shared((block, block), T.float32)
            C_l = T.alloc_fragment((block, block), T.float32)
            T.clear(C_l)
            for k in T.serial(T.ceildiv(K, block)):
                T.copy(A[by * block, k * block], A_s)
                T.copy(B[k * block, bx * block], B_s)
                T.gemm(A_s, B_s, C_l)
            T.copy(C_l, C[by * block, bx * block])

    return gemm


@pytest.mark.parametrize("kw", CONFIGS)
def test_gemm_returns_its_output(kw):
    gemm = make_gemm(**kw)
    a = _rng(1).standard_normal((64, 32)).astype(np.float16)
    b = _rng(2).standard_normal((32, 96)).astype(np.float16)
    c = gemm(a, b)
    assert c.shape == (64, 96) and c.dtype == np.float32
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c, ref, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("kw", CONFIGS)
def test_gemm_in_place_with_poisoned_output(kw):
    gemm = make_gemm_in_place(**kw)
    a = _rng(3).standard_normal((64, 64)).astype(np.float32)
    b = _rng(4).standard_normal((64, 32)).astype(np.float32)
    c = np.full((64, 32), np.nan, np.float32)
    assert gemm(a, b, c) is None
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def make_add_sub(**jit_kw):
    @tilewright.jit(**jit_kw)
    def add_sub(X, Y, block: int = 64):
        M, N = T.const("M, N")
        X: T.Tensor((M, N), T.float32)
        Y: T.Tensor((M, N), T.float32)
        S = T.empty((M, N), T.float32)
        D = T.empty(M, N, dtype=T.float32)
        with T.Kernel(T.ceildiv(N, block), M, threads=64) as (bx, by):
            for j in T.Parallel(block):
                S[by, bx * block + j] = X[by, bx * block + j] + Y[by, bx * block + j]
                D[by, bx * block + j] = X[by, bx * block + j] - 2.0 * Y[by, bx * block + j]
        return S, D

    return add_sub


@pytest.mark.parametrize("kw", CONFIGS)
def test_two_outputs(kw):
    f = make_add_sub(**kw)
    x = _rng(5).standard_normal((3, 128)).astype(np.float32)
    y = _rng(6).standard_normal((3, 128)).astype(np.float32)
    out = f(x, y)
    assert isinstance(out, list) and len(out) == 2  # TileLang returns several outputs as a list
    s, d = out
    np.testing.assert_allclose(s, x.astype(np.float64) + y, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(d, x.astype(np.float64) - 2.0 * y, rtol=1e-6, atol=1e-6)


def make_axpy(**jit_kw):
    @tilewright.jit(**jit_kw)
    def axpy(alpha: T.float32, X, Y, block: int = 128):
        N = T.const("N")
        X: T.Tensor((N,), T.float32)
        Y: T.Tensor((N,), T.float32)
        Z = T.empty((N,), T.float32)
        with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
            for i in T.Parallel(block):
                Z[bx * block + i] = alpha * X[bx * block + i] + Y[bx * block + i]
        return Z

    return axpy


@pytest.mark.parametrize("kw", CONFIGS)
def test_scalar_parameter_is_passed_at_run_time(kw):
    f = make_axpy(**kw)
    x = _rng(7).standard_normal(256).astype(np.float32)
    y = _rng(8).standard_normal(256).astype(np.float32)
    for alpha in (1.5, -0.25, np.float32(0.75)):
        np.testing.assert_allclose(f(alpha, x, y), alpha * x.astype(np.float64) + y, rtol=1e-6, atol=1e-6)
    assert f.compile(1.5, x, y) is f.compile(-0.25, x, y)  # one kernel: alpha is a kernel parameter


def make_row_scale(**jit_kw):
    @tilewright.jit(**jit_kw)
    def row_scale(X, W):
        R = T.dynamic("R")
        C = T.const("C")
        X: T.Tensor((R, C), T.float32)
        W: T.Tensor((C,), T.float32)
        Y = T.empty((R, C), T.float32)
        with T.Kernel(R, threads=64) as bx:
            for j in T.Parallel(C):
                Y[bx, j] = X[bx, j] * W[j]
        return Y

    return row_scale


@pytest.mark.parametrize("kw", CONFIGS)
def test_dynamic_size_shares_one_kernel(kw):
    f = make_row_scale(**kw)
    w = _rng(9).standard_normal(32).astype(np.float32)
    xs = [_rng(10 + r).standard_normal((r, 32)).astype(np.float32) for r in (3, 5)]
    for x in xs:
        np.testing.assert_allclose(f(x, w), x.astype(np.float64) * w, rtol=1e-6, atol=1e-6)
    assert f.compile(xs[0], w) is f.compile(xs[1], w)
    w16 = _rng(11).standard_normal(16).astype(np.float32)
    assert f.compile(xs[0][:, :16].copy(), w16) is not f.compile(xs[0], w)  # C is a compile-time size


def test_compile_with_sizes_and_kernel_source():
    gemm = make_gemm(target="cuda -arch=sm_90a", execution_backend="emulator")
    k = gemm.compile(M=64, N=32, K=32, block_N=32)
    a = _rng(12).standard_normal((64, 32)).astype(np.float16)
    b = _rng(13).standard_normal((32, 32)).astype(np.float16)
    np.testing.assert_allclose(k(a, b), a.astype(np.float64) @ b.astype(np.float64), rtol=1e-3, atol=1e-3)
    src = gemm.get_kernel_source(M=64, N=32, K=32, block_N=32)
    assert "__global__" in src and src == k.get_kernel_source()
    assert gemm.compile(a, b, block_N=32) is k  # the same kernel from the tensors' shapes
    assert gemm.compile(M=64, N=64, K=32) is not k
    func = gemm.get_tir(T.Tensor((64, 32), T.float16), T.Tensor((32, 32), T.float16))
    assert [p.shape for p in func.params] == [(64, 32), (32, 32), (64, 32)]


def test_compile_time_values_and_memo():
    gemm = make_gemm(target="interpret")
    a = _rng(14).standard_normal((64, 32)).astype(np.float16)
    b = _rng(15).standard_normal((32, 64)).astype(np.float16)
    assert gemm.compile(a, b) is gemm.compile(a.copy(), b.copy())
    k16 = gemm.compile(a, b, block_M=16)
    assert k16 is not gemm.compile(a, b)
    assert "16" in k16.get_kernel_source()
    np.testing.assert_allclose(gemm(a, b, block_M=16), a.astype(np.float64) @ b.astype(np.float64),
                               rtol=1e-3, atol=1e-3)


@T.macro
def _copy_rows(A):
    M, N = A.shape
    B = T.empty((M, N), A.dtype)
    with T.Kernel(M, threads=64) as bx:
        for j in T.Parallel(N):
            B[bx, j] = A[bx, j] + 1.0
    return B


def make_signature_annotated(**jit_kw):
    @tilewright.jit(**jit_kw)
    def plus_one(A: T.Tensor((4, 32), T.float32)):
        return _copy_rows(A)

    return plus_one


@pytest.mark.parametrize("kw", CONFIGS[:2])
def test_signature_annotation_and_macro_output(kw):
    f = make_signature_annotated(**kw)
    a = _rng(16).standard_normal((4, 32)).astype(np.float32)
    np.testing.assert_allclose(f(a), a.astype(np.float64) + 1.0, rtol=1e-6, atol=1e-6)
    with pytest.raises(ArgumentError, match="A"):
        f(np.zeros((4, 16), np.float32))


def test_torch_tensors_on_the_interpreter():
    torch = pytest.importorskip("torch")
    f = make_add_sub(target="interpret")
    x = torch.randn(2, 64, generator=torch.Generator().manual_seed(0))
    y = torch.randn(2, 64, generator=torch.Generator().manual_seed(1))
    s, d = f(x, y)
    assert isinstance(s, torch.Tensor)
    np.testing.assert_allclose(s.numpy(), x.double().numpy() + y.double().numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(d.numpy(), x.double().numpy() - 2 * y.double().numpy(), rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------------------ errors


def test_unbound_size_is_an_error_at_its_line():
    @tilewright.jit(target="interpret")
    def f(X):
        M, N = T.const("M, N")
        X: T.Tensor((M,), T.float32)
        Y = T.empty((N,), T.float32)
        with T.Kernel(1, threads=64):
            for i in T.Parallel(64):
                Y[i] = X[i]
        return Y

    with pytest.raises(CompileError, match="'N' is not bound") as e:
        f(np.zeros(64, np.float32))
    assert 'T.const("M, N")' in str(e.value)


def test_conflicting_bindings_are_an_error_at_the_declaration():
    gemm = make_gemm(target="interpret")
    a = np.zeros((32, 16), np.float16)
    b = np.zeros((32, 32), np.float16)
    with pytest.raises(CompileError, match="size K is bound twice") as e:
        gemm(a, b)
    assert "B: T.Tensor((K, N), dtype)" in str(e.value)


def test_argument_dtype_mismatch_names_the_parameter():
    gemm = make_gemm(target="interpret")
    with pytest.raises(ArgumentError, match="argument B has dtype float32"):
        gemm(np.zeros((32, 16), np.float16), np.zeros((16, 32), np.float32))


def test_unsupported_construct_is_an_error_at_its_line():
    @tilewright.jit(target="interpret")
    def f(X):
        N = T.const("N")
        X: T.Tensor((N,), T.float32)
        with T.Kernel(1, threads=64):
            while True:
                X[0] = 1.0

    with pytest.raises(CompileError, match="`while` loops are not supported") as e:
        f(np.zeros(64, np.float32))
    assert "while True:" in str(e.value)


def test_returning_an_input_is_refused():
    @tilewright.jit(target="interpret")
    def f(X):
        N = T.const("N")
        X: T.Tensor((N,), T.float32)
        with T.Kernel(1, threads=64):
            for i in T.Parallel(64):
                X[i] = X[i] * 2.0
        return X

    with pytest.raises(CompileError, match="returns the tensors it made with T.empty") as e:
        f(np.zeros(64, np.float32))
    assert "return X" in str(e.value)


def test_builder_style_jit_is_unchanged():
    @tilewright.jit(target="interpret", out_idx=[-1])
    def builder(n, block):
        @T.prim_func
        def k(X: T.Tensor((n,), T.float32), Y: T.Tensor((n,), T.float32)):
            with T.Kernel(T.ceildiv(n, block), threads=block) as bx:
                for i in T.Parallel(block):
                    Y[bx * block + i] = X[bx * block + i] * 3.0

        return k

    x = _rng(17).standard_normal(64).astype(np.float32)
    np.testing.assert_allclose(builder(64, 32)(x), x.astype(np.float64) * 3.0, rtol=1e-6)


def make_scaled_copy(**jit_kw):
    """Sizes checked by an `assert` before every size is bound; the output is a parameter named by
    out_idx (the function returns nothing)."""
    @tilewright.jit(out_idx=[-1], **jit_kw)
    def scaled_copy(X, Y, block: int = 64):
        M, N = T.const("M, N")
        assert N % block == 0, "N must be a multiple of the block"
        X: T.Tensor((M, N), T.float32)
        Y: T.Tensor((M, N), T.float32)
        with T.Kernel(N // block, M, threads=64) as (bx, by):
            for j in T.Parallel(block):
                Y[by, bx * block + j] = X[by, bx * block + j] * 0.5

    return scaled_copy


@pytest.mark.parametrize("kw", CONFIGS)
def test_out_idx_output_parameter_and_assert_on_sizes(kw):
    f = make_scaled_copy(**kw)
    x = _rng(18).standard_normal((2, 128)).astype(np.float32)
    np.testing.assert_allclose(f(x), x.astype(np.float64) * 0.5, rtol=1e-6)
    y = np.full((2, 128), np.nan, np.float32)
    f(x, y)
    np.testing.assert_allclose(y, x.astype(np.float64) * 0.5, rtol=1e-6)
    with pytest.raises(CompileError, match="N must be a multiple of the block") as e:
        f(np.zeros((2, 96), np.float32))
    assert "assert N % block == 0" in str(e.value)


def test_passing_a_number_for_a_declared_tensor_names_the_parameter():
    f = make_add_sub(target="interpret")
    with pytest.raises(ArgumentError, match="argument Y is declared as a tensor"):
        f(np.zeros((2, 64), np.float32), 3)


@T.macro
def _shift_rows(A, B):
    M, N = A.shape
    M_, N_ = B.shape
    assert M == M_ and N == N_, "shapes differ"
    with T.Kernel(M, threads=64) as bx:
        for j in T.Parallel(N):
            B[bx, j] = A[bx, j] - 1.0


def make_dynamic_macro(**jit_kw):
    @tilewright.jit(**jit_kw)
    def shift(A, B):
        R = T.dynamic("R")
        C = T.const("C")
        A: T.Tensor[[R, C], T.float32]
        B: T.Tensor[[R, C], T.float32]
        _shift_rows(A, B)

    return shift


@pytest.mark.parametrize("kw", CONFIGS)
def test_macro_asserting_equal_dynamic_sizes(kw):
    f = make_dynamic_macro(**kw)
    for rows in (2, 3):
        a = _rng(19 + rows).standard_normal((rows, 64)).astype(np.float32)
        b = np.full((rows, 64), np.nan, np.float32)
        f(a, b)
        np.testing.assert_allclose(b, a.astype(np.float64) - 1.0, rtol=1e-6)


def test_const_outside_an_eager_function():
    assert T.const(2).value == 2 and T.const(1.5, "float32").dtype == "float32"  # a constant, as before
    n = T.const("n")  # a symbolic size, as T.dynamic

    @T.prim_func
    def double(X: T.Tensor((n,), T.float32), Y: T.Tensor((n,), T.float32)):
        with T.Kernel(T.ceildiv(n, 64), threads=64) as bx:
            for i in T.Parallel(64):
                if bx * 64 + i < n:
                    Y[bx * 64 + i] = X[bx * 64 + i] * 2.0

    k = tilewright.compile(double, target="interpret")
    x = _rng(30).standard_normal(100).astype(np.float32)
    y = np.full(100, np.nan, np.float32)
    k(x, y)
    np.testing.assert_allclose(y, x.astype(np.float64) * 2.0, rtol=1e-6)
    with pytest.raises(CompileError, match="T.empty creates an output"):
        @T.prim_func
        def bad(X: T.Tensor((64,), T.float32)):
            Y = T.empty((64,), T.float32)  # noqa: F841
            with T.Kernel(1, threads=64):
                for i in T.Parallel(64):
                    X[i] = 0.0


def make_offset(**jit_kw):
    @tilewright.jit(**jit_kw)
    def offset(X, n):
        N = T.const("N")
        X: T.Tensor((N,), T.int32)
        n: T.int32
        Y = T.empty((N,), T.int32)
        with T.Kernel(T.ceildiv(N, 64), threads=64) as bx:
            for i in T.Parallel(64):
                Y[bx * 64 + i] = X[bx * 64 + i] + n * 3
        return Y

    return offset


@pytest.mark.parametrize("kw", CONFIGS)
def test_scalar_declared_in_the_body(kw):
    f = make_offset(**kw)
    x = _rng(31).integers(-1000, 1000, 128).astype(np.int32)
    for n in (5, -7):
        np.testing.assert_array_equal(f(x, n), x.astype(np.int64) + 3 * n)
    assert f.compile(x, 5) is f.compile(x, -7)


def make_iota(**jit_kw):
    @tilewright.jit(**jit_kw)
    def iota(start: T.int32):
        Y = T.empty((256,), T.int32)
        with T.Kernel(4, threads=64) as bx:
            for i in T.Parallel(64):
                Y[bx * 64 + i] = bx * 64 + i + start
        return Y

    return iota


@pytest.mark.parametrize("kw", CONFIGS)
def test_output_without_tensor_inputs(kw):
    np.testing.assert_array_equal(make_iota(**kw)(7), np.arange(256) + 7)


def test_keyword_only_compile_time_values_and_varargs_refused():
    @tilewright.jit(target="interpret")
    def scale(X, *, factor: float = 2.0):
        N = T.const("N")
        X: T.Tensor((N,), T.float32)
        Y = T.empty((N,), T.float32)
        with T.Kernel(T.ceildiv(N, 64), threads=64) as bx:
            for i in T.Parallel(64):
                Y[bx * 64 + i] = X[bx * 64 + i] * factor
        return Y

    x = _rng(32).standard_normal(128).astype(np.float32)
    np.testing.assert_allclose(scale(x, factor=-3.0), x.astype(np.float64) * -3.0, rtol=1e-6)

    @tilewright.jit(target="interpret")
    def bad(*tensors):
        N = T.const("N")
        Y = T.empty((N,), T.float32)
        with T.Kernel(1, threads=64):
            for i in T.Parallel(64):
                Y[i] = 0.0
        return Y

    with pytest.raises(CompileError, match=r"\*args and \*\*kwargs are not supported"):
        bad(x)


def test_int_entries_take_sizes_from_the_argument():
    @tilewright.jit(target="interpret")
    def negate(A: T.Tensor[[int, 64], T.float32]):
        M, N = A.shape
        B = T.empty((M, N), A.dtype)
        with T.Kernel(M, threads=64) as bx:
            for j in T.Parallel(N):
                B[bx, j] = -A[bx, j]
        return B

    for rows in (2, 5):
        a = _rng(33 + rows).standard_normal((rows, 64)).astype(np.float32)
        np.testing.assert_array_equal(negate(a), -a)
    with pytest.raises(ArgumentError, match="dimension 1 to be 64"):
        negate(np.zeros((2, 32), np.float32))


def test_numpy_scalar_compile_time_values_are_keyed_by_value():
    f = make_scaled_copy_by(target="interpret")
    x = _rng(40).standard_normal(64).astype(np.float32)
    for factor in (np.float32(2.0), np.float32(3.0)):
        np.testing.assert_allclose(f(x, factor), x.astype(np.float64) * float(factor), rtol=1e-6)


def make_scaled_copy_by(**jit_kw):
    @tilewright.jit(**jit_kw)
    def scaled(X, factor):
        N = T.const("N")
        X: T.Tensor((N,), T.float32)
        Y = T.empty((N,), T.float32)
        with T.Kernel(T.ceildiv(N, 64), threads=64) as bx:
            for i in T.Parallel(64):
                Y[bx * 64 + i] = X[bx * 64 + i] * factor
        return Y

    return scaled
