"""TileLang names and kernel shapes (issue 12): optional tensors passed as ``None``, Python's lazy
``x if c else y`` on compile-time values, and the TileLang names of language/compat_names.py.

Kernels are written as TileLang users write them and run in the tile interpreter and, lowered for
``sm_90a`` and ``gfx942``, on the thread-level emulator, against float64 NumPy references with
NaN-poisoned outputs.  The GPU runs are in test_compat_names_gpu.py.
"""

from __future__ import annotations

import warnings

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


# --------------------------------------------------------------------------------------------
# T.attr reduce scopes and T.tvm_thread_allreduce (TileLang's issue 2628 kernel)


def allreduce_kernel(threads, dtype, combine, identity, with_cond=False):
    @T.prim_func
    def main(A: T.Tensor((threads,), dtype), C: T.Tensor((threads,), dtype)):
        with T.Kernel(1, threads=threads):
            tk = T.get_thread_binding(0)
            v = T.alloc_local((1,), dtype)
            v[0] = A[tk]
            Cr = T.alloc_local((1,), dtype)
            cond = tk % 3 != 1 if with_cond else True
            with T.attr(T.comm_reducer(combine, [T.cast(identity, dtype)]), "reduce_scope",
                        T.reinterpret(T.uint64(0), dtype="handle")):
                T.evaluate(T.tvm_thread_allreduce(T.uint32(1), v[0], cond, Cr[0], tk, dtype="handle"))
            C[tk] = Cr[0]  # every thread holds the result

    return main


ALLREDUCE_BACKENDS = [("interpret", None), ("cuda -arch=sm_90a", "emulator")]


@pytest.mark.parametrize("target,backend", ALLREDUCE_BACKENDS, ids=IDS[:2])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int32", "int16", "int8"])
def test_thread_allreduce_sum_and_product(rng, target, backend, dtype):
    threads = 8
    # TileLang's values; a product that overflows int32 is undefined in C (the emulator refuses it): smaller ones
    vals = np.array([10, 25, 40, 30, 15, 42, 20, 20]) if dtype not in ("bfloat16", "int32") else \
        np.array([3, 8, 5, 2, 7, 6, 4, 6])
    a = vals.astype(np.float32).astype(_np_dtype(dtype))
    for combine, identity, ref in ((lambda x, y: x + y, 0, vals.sum()), (lambda x, y: x * y, 1, np.prod(vals))):
        c = np.full(threads, -7, dtype=a.dtype)
        tw.compile(allreduce_kernel(threads, dtype, combine, identity), target=target, execution_backend=backend)(a, c)
        if dtype.startswith("int"):  # integer arithmetic wraps: the same in any order
            want = np.array(ref).astype(np.int64).astype(a.dtype)
            np.testing.assert_array_equal(c, np.full(threads, want, dtype=a.dtype))
        else:  # each step rounds to the dtype (float16: the product overflows to inf, as the reference)
            with np.errstate(over="ignore"):
                want = np.float64(ref).astype(a.dtype).astype(np.float64)
            np.testing.assert_allclose(f64(c), np.full(threads, want), rtol=1e-6 if dtype == "float32" else 2e-2)


@pytest.mark.parametrize("target,backend", BACKENDS, ids=IDS)
def test_thread_allreduce_max_with_condition_over_a_block(rng, target, backend):
    """128 threads; threads with tx % 3 == 1 contribute the identity."""
    a = rand(rng, (128,))
    c = poisoned((128,))
    func = allreduce_kernel(128, "float32", lambda x, y: T.max(x, y), -np.inf, with_cond=True)
    tw.compile(func, target=target, execution_backend=backend)(a, c)
    keep = np.arange(128) % 3 != 1
    close(c, np.full(128, f64(a)[keep].max()))


def test_attr_keys_other_than_reducers_and_pragmas_are_refused():
    with pytest.raises(tw.errors.CompileError, match="T.attr key 'thread_extent' is not supported"):
        @T.prim_func
        def main(A: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32):
                with T.attr(0, "thread_extent", 32):
                    A[0] = 1.0


def test_attr_pragma_warns_and_keeps_its_body(rng):
    with pytest.warns(tw.errors.TilewrightWarning, match="pragma_unroll_explicit.*has no effect"):
        @T.prim_func
        def main(A: T.Tensor((32,), "float32"), B: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32):
                with T.attr(0, "pragma_unroll_explicit", 1):
                    for i in T.Parallel(32):
                        B[i] = A[i] * 4.0

    a, b = rand(rng, (32,)), poisoned((32,))
    tw.compile(main, target="interpret")(a, b)
    close(b, 4 * f64(a))


def test_allreduce_outside_a_reduce_scope_is_refused():
    with pytest.raises(tw.errors.CompileError, match="needs a reducer"):
        @T.prim_func
        def main(A: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32):
                tk = T.get_thread_binding(0)
                r = T.alloc_local((1,), "float32")
                T.tvm_thread_allreduce(T.uint32(1), A[tk], True, r[0], tk)


def _np_dtype(dtype):
    from zoo import NP

    return NP.get(dtype) or getattr(np, dtype)


# --------------------------------------------------------------------------------------------
# launch and loop forms: T.ClusterKernel, T.Persistent; T.func_attr, T.device_assert, T.wgmma_gemm


def persistent_visit(MB, NB, sm_num):
    """TileLang's issue 2433 kernel: each tile is visited once; the value written names the tile."""

    @T.prim_func
    def kernel(Visited: T.Tensor((MB, NB), T.int32)):
        with T.Kernel(sm_num, threads=64) as block_id:
            for bx, by in T.Persistent([MB, NB], sm_num, block_id):
                if T.get_thread_binding() == 0:
                    Visited[bx, by] += bx * 100 + by + 1

    return kernel


@pytest.mark.parametrize("target,backend", BACKENDS, ids=IDS)
@pytest.mark.parametrize("shape", [(4, 5, 3), (2, 2, 7), (3, 8, 8)])
def test_persistent_tile_loop_visits_every_tile_once(target, backend, shape):
    MB, NB, sm = shape
    visited = np.zeros((MB, NB), np.int32)
    tw.compile(persistent_visit(MB, NB, sm), target=target, execution_backend=backend)(visited)
    np.testing.assert_array_equal(visited, np.arange(MB)[:, None] * 100 + np.arange(NB) + 1)


def test_persistent_tile_loop_over_a_symbolic_domain(rng):
    """A persistent GEMV-like loop: the tile count depends on a T.dynamic size."""
    M = T.dynamic("M")

    @T.prim_func
    def main(A: T.Tensor((M, 64), "float32"), S: T.Tensor((M,), "float32")):
        with T.Kernel(3, threads=64) as bid:
            for (row,) in T.Persistent([M], 3, bid):
                acc = T.alloc_fragment((1,), "float32")
                vals = T.alloc_fragment((64,), "float32")
                T.copy(A[row, 0:64], vals)
                T.reduce_sum(vals, acc, dim=0)
                S[row] = acc[0]

    for target, backend in BACKENDS[:2]:
        for rows in (5, 9):
            a, s = rand(rng, (rows, 64)), poisoned((rows,))
            tw.compile(main, target=target, execution_backend=backend)(a, s)
            close(s, f64(a).sum(1))


def cluster_gemm(M, N, K):
    @T.prim_func
    def gemm(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.ClusterKernel(T.ceildiv(N, 32), T.ceildiv(M, 32), threads=128, cluster_dims=(2, 1, 1)) as (bx, by):
            A_s = T.alloc_shared((32, 32), "float16")
            B_s = T.alloc_shared((32, 32), "float16")
            C_f = T.alloc_fragment((32, 32), "float32")
            T.clear(C_f)
            for k in T.Pipelined(K // 32, num_stages=2):
                T.copy(A[by * 32, k * 32], A_s)
                T.copy(B[k * 32, bx * 32], B_s)
                T.wgmma_gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * 32, bx * 32])

    return gemm


@pytest.mark.parametrize("target,backend", BACKENDS, ids=IDS)
def test_cluster_kernel_is_a_kernel_with_cluster_dims(rng, target, backend):
    M = N = K = 64
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tw.errors.TilewrightWarning)
        func = cluster_gemm(M, N, K)
        kernel = tw.compile(func, target=target, execution_backend=backend)  # warns where clusters do not exist
    a, b, c = rand(rng, (M, K), "float16"), rand(rng, (K, N), "float16"), poisoned((M, N))
    kernel(a, b, c)
    close(c, f64(a) @ f64(b), rtol=1e-3, atol=1e-3)


def test_cluster_kernel_warns_that_blocks_launch_independently_where_there_are_no_clusters():
    func = cluster_gemm(96, 64, 32)
    for target in ("interpret", "cuda -arch=sm_80", "hip -arch=gfx942"):
        with pytest.warns(tw.errors.TilewrightWarning, match=r"cluster_dims.*has no effect.*launch independently"):
            tw.compile(func, target=target, execution_backend=None if target == "interpret" else "emulator")
    with warnings.catch_warnings():
        warnings.simplefilter("error", tw.errors.TilewrightWarning)  # sm_90a: a real cluster, no warning
        k = tw.compile(func, target="cuda -arch=sm_90a", execution_backend="emulator")
    assert "__cluster_dims__(2, 1, 1)" in k.get_kernel_source()


@pytest.mark.parametrize("name", ["clc_is_canceled", "clc_try_cancel"])
def test_unimplemented_cluster_intrinsics_are_refused_by_name(name):
    with pytest.raises(tw.errors.CompileError, match=rf"T.{name} is not implemented"):
        @T.prim_func
        def main(A: T.Tensor((4,), T.uint32)):
            with T.ClusterKernel(1, threads=32, cluster_dims=1):
                getattr(T, name)(A)


def test_func_attr_noalias_and_device_assert_on_compile_time_values(rng):
    @T.prim_func
    def main(A: T.Buffer((16,), T.float32), B: T.Buffer((16,), T.float32)):
        T.func_attr({"tir.noalias": True, "global_symbol": "main"})
        with T.Kernel(1, threads=32):
            for i in T.serial(16):
                T.device_assert(16 > 3, "never fails")
                B[i] = A[15 - i]

    a, b = rand(rng, (16,)), poisoned((16,))
    tw.compile(main, target="interpret")(a, b)
    close(b, f64(a)[::-1])


def test_func_attr_and_device_assert_refusals():
    with pytest.raises(tw.errors.CompileError, match="tir.noalias': False"):
        @T.prim_func
        def aliasing(A: T.Buffer((16,), T.float32)):
            T.func_attr({"tir.noalias": False})
            A[0] = 1.0
    @T.prim_func  # a run-time condition is checked by the threads (test_s7_ptrs_assert)
    def runtime(A: T.Buffer((16,), T.float32)):
        with T.Kernel(1, threads=32):
            for i in T.serial(16):
                T.device_assert(A[i] > 0, "positive")

    with pytest.raises(tw.errors.TilewrightError, match="positive"):
        tw.compile(runtime, target="interpret")(-np.random.default_rng(0).random(16).astype(np.float32))
    with pytest.raises(tw.errors.CompileError, match="T.device_assert failed: sizes"):
        @T.prim_func
        def failing(A: T.Buffer((16,), T.float32)):
            with T.Kernel(1, threads=32):
                T.device_assert(16 < 3, "sizes")


# --------------------------------------------------------------------------------------------
# layout objects: T.Layout on shared buffers honored, T.Fragment on fragments honored (test_s7_frag_user_layouts.py)


def shared_roundtrip(fwd, N=128, shift=5):
    """TileLang's issue 2632 kernel, reading back at another position (so a wrong map shows)."""
    from tilewright.layout import Layout

    @T.prim_func
    def main(A: T.Tensor((N,), "int32"), Out: T.Tensor((N,), "int32")):
        with T.Kernel(1, threads=N):
            s = T.alloc_shared((N,), "int32")
            T.annotate_layout({s: Layout((N,), fwd)})
            for i in T.Parallel(N):
                s[i] = A[i]
            for i in T.Parallel(N):
                Out[i] = s[(i + shift) % N]

    return main


INJECTIVE = {"identity": lambda i: i, "xor-pair-swap": lambda i: i ^ 1, "grow-i-times-2": lambda i: i * 2,
             "grow-i-plus-10": lambda i: i + 10}


@pytest.mark.parametrize("target,backend", BACKENDS, ids=IDS)
@pytest.mark.parametrize("name", list(INJECTIVE))
def test_injective_shared_layout_is_honored(rng, target, backend, name):
    func = shared_roundtrip(INJECTIVE[name])
    kern = tw.compile(func, out_idx=[1], target=target, execution_backend=backend)
    a = rng.integers(-1000, 1000, size=128).astype(np.int32)
    np.testing.assert_array_equal(kern(a), np.roll(a, -5))


def test_shared_layout_places_elements_where_it_says():
    """The physical index is the layout's: s[i] is stored at i ^ 1, and the buffer spans 2N for i * 2."""
    src = tw.compile(shared_roundtrip(INJECTIVE["xor-pair-swap"]), target="cuda -arch=sm_90a",
                     execution_backend="emulator").get_kernel_source()
    assert "^ 1)]" in src
    grown = tw.compile(shared_roundtrip(INJECTIVE["grow-i-times-2"]), target="cuda -arch=sm_90a",
                       execution_backend="emulator")
    assert grown.shared_bytes >= 4 * (2 * 127 + 1)


@pytest.mark.parametrize("fwd", [lambda i: i % 64, lambda i: i * 0, lambda i: (i % 64) * 4],
                         ids=["mod64-2-to-1", "zero-N-to-1", "mod64-times4-padded-2-to-1"])
def test_noninjective_shared_layout_is_a_value_error(fwd):
    with pytest.raises(ValueError, match=r"shared buffer `s[^`]*`.*must be injective.*both map to physical coordinates"):
        shared_roundtrip(fwd)


def test_two_dimensional_shared_layout_with_a_list_of_coordinates(rng):
    """A (16, 32) tile stored transposed and padded: physical (j, i) in a 32 x 17 box."""
    from tilewright.layout import Layout

    @T.prim_func
    def main(A: T.Tensor((16, 32), "float32"), B: T.Tensor((16, 32), "float32")):
        with T.Kernel(1, threads=128):
            s = T.alloc_shared((16, 32), "float32")
            T.annotate_layout({s: Layout((16, 32), lambda i, j: [j, i])})
            for i, j in T.Parallel(16, 32):
                s[i, j] = A[i, j]
            for i, j in T.Parallel(16, 32):
                B[i, j] = s[15 - i, j] + 1.0

    for target, backend in BACKENDS:
        a, b = rand(rng, (16, 32)), poisoned((16, 32))
        tw.compile(main, target=target, execution_backend=backend)(a, b)
        close(b, f64(a)[::-1] + 1)


def test_tile_operations_on_a_laid_out_shared_buffer_are_refused():
    from tilewright.layout import Layout

    with pytest.raises(tw.errors.CompileError, match="has an annotated layout.*cannot be a tile copy"):
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64):
                s = T.alloc_shared((64,), "float32")
                T.annotate_layout({s: Layout((64,), lambda i: 63 - i)})
                T.copy(A, s)


def test_fragment_layouts_on_shared_buffers_are_refused():  # on fragments: test_s7_frag_user_layouts.py
    with pytest.raises(tw.errors.CompileError, match=r"T.Fragment\(\.\.\.\)\): s is a shared buffer"):
        @T.prim_func
        def frag(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64):
                s = T.alloc_shared((64,), "float32")
                T.annotate_layout({s: T.Fragment(s.shape, forward_fn=lambda i: (i, 0))})
                T.copy(A, s)
    with pytest.raises(tw.errors.CompileError, match="must come before the first use of s"):
        @T.prim_func
        def late(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64):
                s = T.alloc_shared((64,), "float32")
                for i in T.Parallel(64):
                    s[i] = A[i]
                T.annotate_layout({s: T.Layout((64,), lambda i: 63 - i)})


# --------------------------------------------------------------------------------------------
# T.ptr tables, T.make_tensor, PrimFunc.buffer_map, tilewright.errors.enrich_error


def test_pointer_table_is_an_int64_tensor(rng):
    G = 4

    @T.prim_func
    def main(src_ptrs: T.Tensor([G], T.ptr), out: T.Tensor([G], T.int64)):
        with T.Kernel(1, threads=32):
            for g in T.serial(G):
                out[g] = src_ptrs[g] // 16

    table = main.buffer_map[main.params[0]]
    assert table.dtype == "int64" and [int(d) for d in table.shape] == [G]
    ptrs = rng.integers(0, 2**48, size=G).astype(np.int64)
    out = np.full(G, -1, np.int64)
    for target, backend in BACKENDS[:2]:
        tw.compile(main, target=target, execution_backend=backend)(ptrs, out)
        np.testing.assert_array_equal(out, ptrs // 16)


def test_make_tensor_from_a_pointer_table_entry():  # on a T.ptr parameter: test_s6_names_pointers; more: test_s7_ptrs_tables
    @T.prim_func
    def main(ptrs: T.Tensor([2], T.ptr), m: T.int32):
        with T.Kernel(2, threads=32) as bx:
            A = T.make_tensor(ptrs[bx], (m, 16), T.float16)
            A[m - 1, 15] = T.float16(bx + 1)

    arrays = [np.zeros((3, 16), np.float16) for _ in range(2)]
    tw.compile(main, target="interpret")(tw.pointer_table(arrays), 3)
    assert [a[2, 15] for a in arrays] == [1, 2] and all(np.count_nonzero(a) == 1 for a in arrays)


def test_buffer_map_maps_each_tensor_parameter_to_its_buffer():
    @T.prim_func
    def main(A: T.Tensor((128, 128), "float16"), n: T.int32, B: T.Tensor((128, 128), "float16")):
        with T.Kernel(1, threads=128):
            T.copy(A, B)

    assert list(main.buffer_map) == [main.params[0], main.params[2]]
    assert main.buffer_map[main.params[0]].shape == (128, 128) and main.buffer_map[main.params[0]].loc is not None


def test_enrich_error_adds_the_marked_source_line(tmp_path):
    from tilewright.errors import _MARKER_RE, enrich_error

    folder = tmp_path / "dir with spaces"
    folder.mkdir()
    src = folder / "kernel.py"
    src.write_text("line one\nline two\nline three\n")
    exc = ValueError(f"boom\n  --> {src}:2:3")
    assert enrich_error(exc) is exc
    assert "line two" in str(exc) and "line one" not in str(exc) and "\n   |   ^" in str(exc)
    m = _MARKER_RE.search("\n  --> C:\\work\\kernel.py:21:1")
    assert (m.group("file"), m.group("line"), m.group("col")) == ("C:\\work\\kernel.py", "21", "1")
    plain = ValueError("plain error without marker")
    assert enrich_error(plain) is plain and str(plain) == "plain error without marker"


# --------------------------------------------------------------------------------------------
# T.annotate_safe_value: the value out-of-bounds reads of a global tensor give


def shifted_rows(M, N, bm, bn, pad):
    """TileLang's annotate_safe_value test: rows read 10 above the block, the first ones out of bounds."""

    @T.prim_func
    def main(A: T.Tensor((M, N), "float16"), B: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            A_shared = T.alloc_shared((bm, bn), "float16")
            T.annotate_safe_value({A: pad})
            for i, j in T.Parallel(bm, bn):
                A_shared[i, j] = A[by * bm + i - 10, bx * bn + j]
            for i, j in T.Parallel(bm, bn):
                B[by * bm + i, bx * bn + j] = A_shared[i, j]

    return main


def padded_tile_copy(M, N, pM, pN, bm, bn, src_dtype, dst_dtype, pad):
    @T.prim_func
    def main(A: T.Tensor((M, N), src_dtype), B: T.Tensor((pM, pN), dst_dtype)):
        with T.Kernel(T.ceildiv(pN, bn), T.ceildiv(pM, bm), threads=128) as (bx, by):
            if pad is not None:
                T.annotate_safe_value({A: pad})
            T.copy(A[by * bm:(by + 1) * bm, bx * bn:(bx + 1) * bn], B[by * bm:(by + 1) * bm, bx * bn:(bx + 1) * bn])

    return main


def padded_element_copy(M, N, pM, pN, pad):
    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((pM, pN), "float32")):
        with T.Kernel(1, threads=128):
            T.annotate_safe_value({A: pad})
            for i, j in T.Parallel(pM, pN):
                T.copy(A[i, j], B[i, j])

    return main


@pytest.mark.parametrize("target,backend", BACKENDS, ids=IDS)
def test_safe_value_of_element_reads(rng, target, backend):
    M = N = 256
    a = rand(rng, (M, N), "float16")
    b = tw.compile(shifted_rows(M, N, 128, 128, 10), out_idx=[1], target=target, execution_backend=backend)(a)
    ref = np.full((M, N), 10.0)
    ref[10:] = f64(a)[:-10]
    close(b, ref, rtol=0, atol=0)


@pytest.mark.parametrize("target,backend", BACKENDS, ids=IDS)
@pytest.mark.parametrize("pad,dst_dtype", [(None, "float32"), (-99, "float32"), (-99, "float16"), (2.5, "float32")])
def test_safe_value_of_tile_copies(rng, target, backend, pad, dst_dtype):
    M, N = 70, 75
    a = rand(rng, (M, N))
    func = padded_tile_copy(M, N, 96, 96, 32, 32, "float32", dst_dtype, pad)
    b = tw.compile(func, out_idx=[1], target=target, execution_backend=backend)(a)
    ref = np.full((96, 96), 0.0 if pad is None else float(pad))
    ref[:M, :N] = f64(a)
    close(b, ref, rtol=1e-3 if dst_dtype == "float16" else 0, atol=1e-3 if dst_dtype == "float16" else 0)


@pytest.mark.parametrize("target,backend", BACKENDS, ids=IDS)
def test_safe_value_of_element_to_element_copies(rng, target, backend):
    a = rand(rng, (70, 75))
    b = tw.compile(padded_element_copy(70, 75, 96, 96, -99), out_idx=[1], target=target, execution_backend=backend)(a)
    ref = np.full((96, 96), -99.0)
    ref[:70, :75] = f64(a)
    close(b, ref, rtol=0, atol=0)


def test_safe_value_ends_with_its_block(rng):
    """Annotated inside an `if` body: the copy after the `if` reads zeros out of bounds again."""

    @T.prim_func
    def main(A: T.Tensor((50,), "float32"), B: T.Tensor((64,), "float32"), C: T.Tensor((64,), "float32"),
             flag: T.int32):
        with T.Kernel(1, threads=64):
            if flag > 0:
                T.annotate_safe_value({A: 7})
                T.copy(A[0:64], B[0:64])
            T.copy(A[0:64], C[0:64])

    a = rand(rng, (50,))
    for target, backend in BACKENDS:
        b, c = poisoned((64,)), poisoned((64,))
        tw.compile(main, target=target, execution_backend=backend)(a, b, c, 1)
        close(b, np.concatenate([f64(a), np.full(14, 7.0)]))
        close(c, np.concatenate([f64(a), np.zeros(14)]))


def test_safe_value_takes_global_tensors_and_constants():
    with pytest.raises(tw.errors.CompileError, match="is not a global tensor"):
        @T.prim_func
        def on_shared(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64):
                s = T.alloc_shared((64,), "float32")
                T.annotate_safe_value({s: 1.0})
                T.copy(A, s)


def test_safe_value_of_element_reads_bound_to_names(rng):
    @T.prim_func
    def main(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64):
            T.annotate_safe_value({A: -5})
            for i in T.Parallel(64):
                x = A[i - 3]
                B[i] = x * 2.0

    a = rand(rng, (64,))
    for target, backend in BACKENDS[:2]:
        b = poisoned((64,))
        tw.compile(main, target=target, execution_backend=backend)(a, b)
        close(b, np.concatenate([np.full(3, -10.0), 2 * f64(a)[:-3]]))
