"""TileLang names and kernel shapes (issue 12): optional tensors passed as ``None``, Python's lazy
``x if c else y`` on compile-time values, and the TileLang names of language/compat_names.py.

Kernels are written as TileLang users write them and run in the tile interpreter and, lowered for
``sm_90a`` and ``gfx942``, on the thread-level emulator, against float64 NumPy references with
NaN-poisoned outputs.  The GPU runs are in test_compat_names_gpu.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from zoo import close, f64, poisoned, rand

import tilewright as tw
import tilewright.language as T
from tilewright.errors import ArgumentError

BACKENDS = [("interpret", None), ("cuda -arch=sm_90a", "emulator"), ("hip -arch=gfx942", "emulator")]
IDS = ["interpret", "emulator-sm_90a", "emulator-gfx942"]


@pytest.fixture
def rng():
    return np.random.default_rng(12_5)


# --------------------------------------------------------------------------------------------
# optional tensors: None for a parameter the kernel never touches


def gemm_with_optional_bias(M, N, K, with_bias, bm=64, bn=64, bk=32):
    """TileLang's test_nullptr kernel: Bias is read only when ``with_bias``."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((N, K), "float16"), C: T.Tensor((M, N), "float32"),
             Bias: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            A_shared = T.alloc_shared((bm, bk), "float16")
            B_shared = T.alloc_shared((bn, bk), "float16")
            C_local = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_local)
            for ko in T.Pipelined(T.ceildiv(K, bk), num_stages=2):
                T.copy(A[by * bm, ko * bk], A_shared)
                T.copy(B[bx * bn, ko * bk], B_shared)
                T.gemm(A_shared, B_shared, C_local, transpose_B=True)
            if with_bias:
                for i, j in T.Parallel(bm, bn):
                    C_local[i, j] += Bias[bx * bn + j]
            T.copy(C_local, C[by * bm, bx * bn])

    return main


@pytest.mark.parametrize("target,backend", BACKENDS, ids=IDS)
def test_none_for_a_tensor_the_kernel_does_not_use(rng, target, backend):
    M, N, K = 64, 128, 64
    a, b = rand(rng, (M, K), "float16"), rand(rng, (N, K), "float16")
    plain = tw.compile(gemm_with_optional_bias(M, N, K, False), target=target, execution_backend=backend)
    c = poisoned((M, N))
    plain(a, b, c, None)
    close(c, f64(a) @ f64(b).T, rtol=1e-3, atol=1e-3)
    # the same with out_idx: the output is allocated, Bias stays None
    out = tw.compile(gemm_with_optional_bias(M, N, K, False), out_idx=[2], target=target,
                     execution_backend=backend)(a, b, None)
    close(out, f64(a) @ f64(b).T, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("target,backend", BACKENDS, ids=IDS)
def test_none_for_a_tensor_the_kernel_uses_is_refused(rng, target, backend):
    M, N, K = 64, 64, 32
    biased = tw.compile(gemm_with_optional_bias(M, N, K, True), target=target, execution_backend=backend)
    with pytest.raises(ArgumentError, match=r"argument Bias is None, but the kernel reads or writes Bias"):
        biased(rand(rng, (M, K), "float16"), rand(rng, (N, K), "float16"), poisoned((M, N)), None)
    bias = rand(rng, (N,))
    a, b, c = rand(rng, (M, K), "float16"), rand(rng, (N, K), "float16"), poisoned((M, N))
    biased(a, b, c, bias)
    close(c, f64(a) @ f64(b).T + f64(bias), rtol=1e-3, atol=1e-3)


def test_none_for_an_unused_tensor_does_not_bind_its_size():
    """A symbolic size only an unused tensor carries cannot be read from None: a clear error."""
    n = T.dynamic("n")

    @T.prim_func
    def main(A: T.Tensor((64,), "float32"), Unused: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=64):
            for i in T.Parallel(64):
                A[i] = A[i] + 1.0

    with pytest.raises(ArgumentError, match=r"could not infer dynamic dimension\(s\) \['n'\]"):
        tw.compile(main, target="interpret")(np.zeros(64, np.float32), None)


# --------------------------------------------------------------------------------------------
# `x if c else y`: only the taken branch when c is known while the kernel is read


def windowed_start(window):
    """The attention-sink example's `start = ... if window_size is not None else 0`."""

    @T.prim_func
    def main(A: T.Tensor((4, 64), "float32"), B: T.Tensor((4, 64), "float32")):
        with T.Kernel(4, threads=64) as bx:
            start = T.max(0, bx - window) if window is not None else 0
            for j in T.Parallel(64):
                B[bx, j] = A[bx, j] * (2.0 if A[bx, j] > 0 else 3.0) + start

    return main


@pytest.mark.parametrize("target,backend", BACKENDS, ids=IDS)
@pytest.mark.parametrize("window", [None, 2])
def test_conditional_expression_on_a_compile_time_value_is_lazy(rng, target, backend, window):
    a, b = rand(rng, (4, 64)), poisoned((4, 64))
    tw.compile(windowed_start(window), target=target, execution_backend=backend)(a, b)
    start = np.zeros((4, 1)) if window is None else np.maximum(0, np.arange(4) - window)[:, None]
    close(b, f64(a) * np.where(a > 0, 2.0, 3.0) + start)


# --------------------------------------------------------------------------------------------
# TileLang's per-vendor language modules


def test_default_language_is_the_cuda_dialect():
    import importlib

    from tilewright.cuda import language as cuda_language

    assert tw.language is T and importlib.import_module("tilewright.language") is T
    assert T.__tilelang_dialect__ == cuda_language.__tilelang_dialect__ == "cuda"
    assert set(T.__all__) == set(cuda_language.__all__)
    assert {"copy", "gemm", "Kernel", "StridedTensor", "ws", "tma_copy", "pdl_trigger", "__log"} <= set(T.__all__)
    for name in T.__all__:
        assert getattr(T, name) is getattr(cuda_language, name)


@pytest.mark.parametrize("dialect", ["rocm", "cpu", "metal", "webgpu"])
def test_other_dialects_are_the_common_surface_without_cuda_only_names(dialect):
    import importlib

    import tilewright.language.common as common
    from tilewright.language.dialects import CUDA_ONLY

    module = importlib.import_module(f"tilewright.{dialect}.language")
    assert module.__tilelang_dialect__ == dialect and common.__tilelang_dialect__ == "common"
    assert set(module.__all__) == set(common.__all__)
    assert CUDA_ONLY.isdisjoint(module.__all__)
    assert {"ws", "tma_copy", "pdl_trigger"} <= set(T.__all__) - set(module.__all__)
    assert module.copy is T.copy and module.reduce_sum is T.reduce_sum and module.__log is T.__log
    with pytest.raises(AttributeError, match=r"has no attribute 'ws' \(a CUDA-only name"):
        module.ws  # noqa: B018


def test_a_kernel_written_against_a_dialect_module_runs(rng):
    from tilewright.rocm import language as R

    @R.prim_func
    def add_one(A: R.Tensor((128,), "float32"), B: R.Tensor((128,), "float32")):
        with R.Kernel(1, threads=128):
            for i in R.Parallel(128):
                B[i] = A[i] + 1.0

    a, b = rand(rng, (128,)), poisoned((128,))
    tw.compile(add_one, target="hip -arch=gfx942", execution_backend="emulator")(a, b)
    close(b, f64(a) + 1)


def test_unknown_language_name_keeps_its_hint():
    with pytest.raises(AttributeError) as e:
        T.no_such_name  # noqa: B018
    assert e.value.obj is T and e.value.name == "no_such_name"
