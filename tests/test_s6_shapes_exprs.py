"""Tensor dimensions declared as expressions of symbolic sizes (TileLang's ``T.Tensor((n * 4,), ...)``,
``T.Tensor[(m, n * 2), ...]``, ``T.empty((m * 2 + 1,), ...)``): sizes solved from such a dimension when no
plain dimension gives them, the others checked at the call with an ArgumentError naming the argument,
the dimension and the expected value, outputs allocated from the bound sizes.

Every kernel runs in the tile interpreter and, lowered for sm_90a and gfx942, in the thread-level
emulator, on fresh random inputs with NaN-poisoned outputs against float64 NumPy references.  The GPU
runs are in test_s6_shapes_gpu.py."""

from __future__ import annotations

import numpy as np
import pytest
from zoo import close, f64, poisoned, rand

import tilewright as tw
import tilewright.language as T
from tilewright.errors import ArgumentError, CompileError

TARGETS = ("cuda -arch=sm_90a", "hip -arch=gfx942")
BACKENDS = (("interpret", None),) + tuple((target, "emulator") for target in TARGETS)


@pytest.fixture
def rng():
    return np.random.default_rng(6_412)


def compiled(func, target, backend, **kw):
    return tw.compile(func, target=target, execution_backend=backend, **kw)


def fill_affine(a_coeff, b_coeff):
    """TileLang's test_tensor_annot_* kernel, storing a value that depends on the index."""
    n = T.symbolic("n")

    @T.prim_func
    def kernel(A: T.Tensor((n * a_coeff + b_coeff,), T.int32)):
        with T.Kernel(1) as _:
            for i in range(n * a_coeff + b_coeff):
                A[i] = i * 3 - 7

    return kernel


@pytest.mark.parametrize("target,backend", BACKENDS)
@pytest.mark.parametrize("a_coeff,b_coeff,size", [(4, 0, 16), (1, 1, 16), (3, 1, 16), (3, 1, 1), (5, 2, 37)])
def test_affine_dimension_binds_its_size(target, backend, a_coeff, b_coeff, size, rng):
    kern = compiled(fill_affine(a_coeff, b_coeff), target, backend)
    a = rng.integers(-1000, 1000, size=size, dtype=np.int32)
    kern(a)
    np.testing.assert_array_equal(a, np.arange(size) * 3 - 7)


@pytest.mark.parametrize("a_coeff,b_coeff,size,why", [
    (4, 0, 18, "18 - 0 is not a multiple of 4"),
    (3, 1, 17, "17 - 1 is not a multiple of 3"),
    (1, 5, 3, "is -2; sizes cannot be negative"),
])
def test_affine_dimension_refuses_sizes_it_cannot_have(a_coeff, b_coeff, size, why):
    for target, backend in BACKENDS:
        kern = compiled(fill_affine(a_coeff, b_coeff), target, backend)
        a = np.zeros(size, np.int32)
        with pytest.raises(ArgumentError, match="dimension 0") as e:
            kern(a)
        assert why in str(e.value) and "A" in str(e.value)
        assert not a.any()  # nothing ran


def two_tensors():
    """x: (m, n * 2) and y: (m * 2, n) -- n is given by y only; x's second dimension is checked."""
    m, n = T.dynamic("m"), T.dynamic("n")

    @T.prim_func
    def kernel(x: T.Tensor[(m, n * 2), T.float32], y: T.Tensor[(m * 2, n), T.float32],
               out: T.Tensor[(m, n * 2), T.float32]):
        with T.Kernel(m, threads=64) as i:
            for j in T.Parallel(n * 2):
                out[i, j] = x[i, j] * 2.0 + y[i * 2 + j % 2, j // 2]

    return kernel


def two_tensors_ref(x, y):
    m, n2 = x.shape
    j = np.arange(n2)
    return f64(x) * 2 + f64(y)[np.arange(m)[:, None] * 2 + j % 2, j // 2]


@pytest.mark.parametrize("target,backend", BACKENDS)
@pytest.mark.parametrize("m,n", [(3, 5), (4, 16)])
def test_size_from_a_later_argument_checks_an_earlier_expression(target, backend, m, n, rng):
    kern = compiled(two_tensors(), target, backend, out_idx=[-1])
    x, y = rand(rng, (m, n * 2)), rand(rng, (m * 2, n))
    out = poisoned((m, n * 2))
    kern(x, y, out)
    close(out, two_tensors_ref(x, y))
    got = kern(x, y)  # allocated from the bound sizes
    assert got.shape == (m, n * 2)
    close(got, two_tensors_ref(x, y))


def test_expression_dimension_mismatch_names_argument_dimension_and_value(rng):
    kern = compiled(two_tensors(), "interpret", None, out_idx=[-1])
    x, y = rand(rng, (3, 9)), rand(rng, (6, 5))
    with pytest.raises(ArgumentError, match=r"argument x has shape \(3, 9\); dimension 1 is 9, expected n \* 2 = 10 "
                                            r"\(with n=5\)"):
        kern(x, y)
    x, y = rand(rng, (3, 10)), rand(rng, (7, 5))
    with pytest.raises(ArgumentError, match=r"argument y .*dimension 0 is 7, expected m \* 2 = 6"):
        kern(x, y)


def tiled_copy_expr(block_M, block_N):
    """Tile copies through shared memory of a (m * 2 + 1, n * 3) tensor: ragged tiles at the edges, so
    the bounds of the global accesses are the declared expressions."""
    m, n = T.dynamic("m"), T.dynamic("n")

    @T.prim_func
    def kernel(A: T.Tensor((m * 2 + 1, n * 3), T.float16), B: T.Tensor((m * 2 + 1, n * 3), T.float32)):
        with T.Kernel(T.ceildiv(n * 3, block_N), T.ceildiv(m * 2 + 1, block_M), threads=128) as (bx, by):
            s = T.alloc_shared((block_M, block_N), T.float16)
            f = T.alloc_fragment((block_M, block_N), T.float32)
            T.copy(A[by * block_M, bx * block_N], s)
            T.copy(s, f)
            for i, j in T.Parallel(block_M, block_N):
                f[i, j] = f[i, j] + 1.0
            T.copy(f, B[by * block_M, bx * block_N])

    return kernel


@pytest.mark.parametrize("target,backend", BACKENDS)
def test_tile_copies_bounded_by_expression_dimensions(target, backend, rng):
    kern = compiled(tiled_copy_expr(32, 32), target, backend)
    for m, n in ((20, 15), (3, 1)):
        a = rand(rng, (m * 2 + 1, n * 3), "float16")
        b = poisoned((m * 2 + 1, n * 3))
        kern(a, b)
        close(b, f64(a) + 1)


def test_generated_code_indexes_with_the_expressions_and_compiles():
    """The expressions are index arithmetic in the CUDA and HIP source, which NVRTC / clang-19 compile."""
    import shutil

    for target in TARGETS:
        for func in (tiled_copy_expr(32, 32), two_tensors()):
            kern = compiled(func, target, "emulator")
            src = kern.get_kernel_source().replace("(", "").replace(")", "")
            assert "m * 2" in src or "n * 2" in src
            if target.startswith("hip") and shutil.which("clang-19") is None:
                continue  # the AMD toolchain is optional
            assert kern.get_code_object()


def test_eager_empty_from_a_dynamic_size(rng):
    for target, backend in BACKENDS:
        @tw.jit(target=target, execution_backend=backend)
        def kernel(A):
            m = T.dynamic("m")
            A: T.Tensor[[m], T.float32]
            B = T.empty([m * 2 + 1], T.float32)
            with T.Kernel(1, threads=64):
                for i in T.serial(m * 2 + 1):
                    B[i] = A[i % m] + 1.0
            return B

        for m in (37, 5):
            a = rand(rng, (m,))
            b = kernel(a)
            assert b.shape == (2 * m + 1,)
            close(b, f64(np.tile(a, 3))[:2 * m + 1] + 1)


def test_eager_empty_from_a_scalar_parameter():
    for target, backend in BACKENDS:
        @tw.jit(target=target, execution_backend=backend)
        def kernel(m: T.int32):
            B = T.empty([m + 1], T.float32)
            with T.Kernel(1, threads=64):
                for i in T.serial(m + 1):
                    B[i] = T.cast(i, T.float32) * 0.5
            return B

        for m in (23, 0):
            b = kernel(m)
            assert b.shape == (m + 1,)
            close(b, np.arange(m + 1) * 0.5)


def test_eager_several_outputs_of_expression_shapes(rng):
    @tw.jit(target="interpret")
    def kernel(A):
        m = T.dynamic("m")
        A: T.Tensor[[m], T.float32]
        B = T.empty([m], T.float32)
        C = T.empty([m + 1], T.float32)
        with T.Kernel(1, threads=64):
            for i in T.serial(m):
                B[i] = A[i] + 1.0
            for i in T.serial(m + 1):
                C[i] = T.cast(i, T.float32)
        return B, C

    a = rand(rng, (29,))
    outputs = kernel(a)
    assert isinstance(outputs, list)  # several outputs come back as a list, as TileLang returns them
    b, c = outputs
    assert (b.shape, c.shape) == ((29,), (30,))
    close(b, f64(a) + 1)
    close(c, np.arange(30))


def test_eager_declaration_with_expression_dimension(rng):
    @tw.jit(target="interpret")
    def kernel(x, y):
        m = T.dynamic("m")
        x: T.Tensor[(m, 8), T.float32]
        y: T.Tensor[(m * 4, 8), T.float32]
        with T.Kernel(m, threads=64) as i:
            for j in T.Parallel(8):
                x[i, j] = y[i * 4 + 3, j]

    x, y = poisoned((3, 8)), rand(rng, (12, 8))
    kernel(x, y)
    close(x, f64(y)[3::4])
    with pytest.raises(ArgumentError, match=r"argument y .*dimension 0 is 13, expected m \* 4 = 12"):
        kernel(poisoned((3, 8)), rand(rng, (13, 8)))


def test_unsolvable_expression_is_reported_at_the_call(rng):
    m, n = T.dynamic("m"), T.dynamic("n")

    @T.prim_func
    def kernel(A: T.Tensor((m * n,), T.float32)):
        with T.Kernel(1, threads=64):
            A[0] = 1.0

    kern = tw.compile(kernel, target="interpret")
    with pytest.raises(ArgumentError, match=r"could not infer dynamic dimension\(s\) \['m', 'n'\]"):
        kern(rand(rng, (6,)))


def test_float_shape_expression_is_a_compile_error():
    n = T.dynamic("n")
    with pytest.raises(CompileError, match="shape entry .* of 'A' must be an integer expression"):
        @T.prim_func
        def kernel(A: T.Tensor((n * 1.5,), T.float32)):
            with T.Kernel(1, threads=64):
                A[0] = 1.0

        tw.compile(kernel, target="interpret")


def test_dimension_of_a_scalar_parameter_is_checked_against_its_value(rng):
    @T.prim_func
    def kernel(m: T.int32, A: T.Tensor((m + 1,), T.float32), B: T.Tensor((m + 1,), T.float32)):  # noqa: F821
        with T.Kernel(1, threads=64):
            for i in T.serial(m + 1):
                B[i] = A[i] * 3.0

    for target, backend in BACKENDS:
        kern = compiled(kernel, target, backend)
        a, b = rand(rng, (9,)), poisoned((9,))
        kern(8, a, b)
        close(b, f64(a) * 3)
        with pytest.raises(ArgumentError, match=r"argument A .*dimension 0 is 9, expected m \+ 1 = 8"):
            kern(7, a, b)


def test_expression_dimension_beyond_int32_needs_int64_sizes():
    """The kernel computes a declared expression in the sizes' width: a dimension of 2**31 or more is
    refused for int32 sizes (checked on a described argument; no such tensor is allocated)."""
    from tilewright.binding.args import bind_arguments
    from tilewright.binding.tensor_args import TensorArg
    from tilewright.ir import tile as t

    for dtype, ok in (("int32", False), ("int64", True)):
        n = T.dynamic("n", dtype)
        buf = t.Buffer("A", (n * 4,), "int8", "global")
        arg = TensorArg(0, (2**31 + 4,), (1,), "int8", "cpu", 0)
        if ok:
            bound = bind_arguments([buf], [n], [arg], kernel_name="k", device_type=None)
            assert bound.dyn[n] == (2**31 + 4) // 4
        else:
            with pytest.raises(ArgumentError, match=r"argument A dimension 0 \(n \* 4\) is 2147483652, which does not "
                                                    "fit in int32"):
                bind_arguments([buf], [n], [arg], kernel_name="k", device_type=None)


def test_gpu_fast_binder_leaves_expression_dimensions_to_the_checked_path():
    """The GPU launcher's fast argument path reads sizes straight off tensor shapes; a dimension
    declared as an expression (n * 4) would have bound the expression itself as a size (on the H200:
    KeyError n at launch), so such a parameter goes through the checked binder, which solves n."""
    from tilewright.runtime.launcher import _OTHER, _fast_spec

    for a_coeff, b_coeff in ((4, 0), (1, 1)):
        (kind, _dtype, _shape), = _fast_spec(fill_affine(a_coeff, b_coeff).params)
        assert kind is _OTHER
    m = T.dynamic("m")

    @T.prim_func
    def plain(A: T.Tensor((m, 8), "float32")):
        with T.Kernel(1) as _:
            A[0, 0] = 1.0

    (kind, _dtype, shape), = _fast_spec(plain.params)
    assert kind != _OTHER and shape[1] == 8  # a plain size still takes the fast path
