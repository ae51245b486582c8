"""TileLang's lazy ``@T.prim_func`` style (parameters declared in the body, ``T.empty`` outputs
returned) and the function annotations ``T.annotate_pass_configs`` / ``T.annotate_compile_flags``."""

import numpy as np
import pytest
from zoo import close, f64, rand

import tilewright
import tilewright.language as T
from tilewright import PassConfigKey
from tilewright.errors import TilewrightWarning


@pytest.fixture
def rng():
    return np.random.default_rng(61)


def lazy_with_output():
    @T.prim_func
    def kernel(A):
        A: T.Tensor[[48, 40], T.float32]
        B = T.empty([48, 40], T.float32)
        with T.Kernel(1):
            for i in T.serial(48):
                for j in T.serial(40):
                    B[i, j] = A[i, j] * 3.0 + 1.0
        return B

    return kernel


@pytest.mark.parametrize("target,backend", [("interpret", None), ("cuda -arch=sm_90a", "emulator")])
def test_lazy_prim_func_returns_its_empty_output(rng, target, backend):
    kernel = lazy_with_output()
    assert kernel.attrs["tilelang_out_idx"] == [-1]
    assert [p.name for p in kernel.params] == ["A", "B"]
    a = rand(rng, (48, 40))
    b = tilewright.compile(kernel, target=target, execution_backend=backend)(a)
    close(b, f64(a) * 3.0 + 1.0)


def test_out_idx_given_for_a_function_returning_outputs_is_a_conflict():
    with pytest.raises(ValueError, match="Out index conflict"):
        tilewright.compile(lazy_with_output(), out_idx=[-1], target="interpret")


@pytest.mark.parametrize("before", [True, False])
def test_annotations_before_or_after_the_declarations(rng, before):
    if before:
        @T.prim_func
        def kernel(A, B):
            T.annotate_pass_configs({PassConfigKey.TL_ENABLE_FAST_MATH: True})
            T.annotate_compile_flags(["--use_fast_math"])
            A: T.Tensor[[32, 16], T.float32]
            B: T.Tensor[[32, 16], T.float32]
            with T.Kernel(1):
                for i in T.serial(32):
                    for j in T.serial(16):
                        B[i, j] = A[i, j] - 2.0
    else:
        @T.prim_func
        def kernel(A, B):
            A: T.Tensor[[32, 16], T.float32]
            B: T.Tensor[[32, 16], T.float32]
            T.annotate_pass_configs({PassConfigKey.TL_ENABLE_FAST_MATH: True})
            T.annotate_compile_flags(["--use_fast_math"])
            with T.Kernel(1):
                for i in T.serial(32):
                    for j in T.serial(16):
                        B[i, j] = A[i, j] - 2.0

    assert kernel.attrs["tilelang_pass_configs"] == {"tl.enable_fast_math": True}
    assert kernel.attrs["tilelang_compile_flags"] == ["--use_fast_math"]
    assert "tilelang_out_idx" not in kernel.attrs
    with pytest.warns(TilewrightWarning, match="no effect"):
        compiled = tilewright.compile(kernel, out_idx=[-1], target="interpret")
    a = rand(rng, (32, 16))
    close(compiled(a), f64(a) - 2.0)


def test_annotated_pass_configs_are_checked_like_given_ones():
    @T.prim_func
    def kernel(A: T.Tensor((8,), T.float32)):
        T.annotate_pass_configs({"tl.no_such_key": True})
        with T.Kernel(1, threads=1):
            A[0] = 1.0

    with pytest.raises(Exception, match="no_such_key"):
        tilewright.compile(kernel, target="interpret")


def test_annotation_arguments_are_checked():
    with pytest.raises(tilewright.CompileError, match="takes a dict"):
        @T.prim_func
        def bad(A: T.Tensor((8,), T.float32)):
            T.annotate_pass_configs(["tl.enable_fast_math"])
            with T.Kernel(1, threads=1):
                A[0] = 1.0


def test_eager_jit_with_annotated_pass_configs(rng):
    @tilewright.jit(target="interpret")
    def kernel(A):
        M, N = T.const("M N")
        A: T.Tensor[[M, N], T.float32]
        B = T.empty([M, N], T.float32)
        T.annotate_pass_configs({PassConfigKey.TL_DISABLE_TMA_LOWER: True})
        with T.Kernel(1):
            for i in T.serial(M):
                for j in T.serial(N):
                    B[i, j] = A[i, j] + 1.0
        return B

    a = rand(rng, (8, 24))
    close(kernel(a), f64(a) + 1.0)


def test_lazy_parameter_never_declared_is_refused():
    with pytest.raises(tilewright.CompileError, match="'B' has no value and no declaration"):
        @T.prim_func
        def kernel(A, B):
            A: T.Tensor[[8], T.float32]
            with T.Kernel(1, threads=1):
                A[0] = 1.0
