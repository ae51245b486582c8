"""Prim_funcs with several ``T.Kernel`` blocks (launched one after another, in order, on the same
arguments) and with none (plain statements: one block of one thread), as TileLang runs them.

Each program runs in the tile interpreter and, lowered for ``sm_90a`` and ``gfx942``, on the
thread-level emulator, against float64 NumPy references with poisoned outputs.  The GPU runs are in
test_compat_names_gpu.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from zoo import close, f64, poisoned, rand

import tilewright as tw
import tilewright.language as T
from tilewright.errors import ArgumentError, CompileError
from tilewright.jit.sequence import KernelSequence

BACKENDS = [("interpret", None), ("cuda -arch=sm_90a", "emulator"), ("hip -arch=gfx942", "emulator")]
IDS = ["interpret", "emulator-sm_90a", "emulator-gfx942"]


@pytest.fixture
def rng():
    return np.random.default_rng(1198)


def two_kernels(N, block=64):
    """TileLang's PDL test shape: the second kernel reads what the first wrote, at other blocks'
    positions (a rotation by 7), so it must start after the first has finished everywhere."""

    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32"), C: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block), threads=block) as (bx,):
            for i in T.Parallel(block):
                idx = bx * block + i
                if idx < N:
                    B[idx] = A[idx] + 1.0
        with T.Kernel(T.ceildiv(N, block), threads=block) as (bx2,):
            for i in T.Parallel(block):
                idx = bx2 * block + i
                if idx < N:
                    C[idx] = B[(idx + 7) % N] * 2.0

    return main


@pytest.mark.parametrize("target,backend", BACKENDS, ids=IDS)
def test_two_kernels_run_in_order(rng, target, backend):
    N = 200  # a ragged last block
    k = tw.compile(two_kernels(N), target=target, execution_backend=backend)
    assert isinstance(k, KernelSequence) and len(k.kernels) == 2
    a, b, c = rand(rng, (N,)), poisoned((N,)), poisoned((N,))
    k(a, b, c)
    close(b, f64(a) + 1)
    close(c, np.roll(f64(a) + 1, -7) * 2)


@pytest.mark.parametrize("target,backend", BACKENDS, ids=IDS)
def test_two_kernels_with_out_idx(rng, target, backend):
    """The outputs are allocated once and seen by both kernels."""
    N = 128
    k = tw.compile(two_kernels(N), out_idx=[1, 2], target=target, execution_backend=backend)
    a = rand(rng, (N,))
    b, c = k(a)
    close(b, f64(a) + 1)
    close(c, np.roll(f64(a) + 1, -7) * 2)


def pdl_pair(N):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32"), C: T.Tensor((N,), "float32")):
        with T.Kernel(2, threads=64) as (bx,):
            for i in T.Parallel(64):
                B[bx * 64 + i] = A[bx * 64 + i] * 3.0
            T.pdl_trigger()
        with T.Kernel(2, threads=64) as (bx,):
            T.pdl_sync()
            for i in T.Parallel(64):
                C[bx * 64 + i] = B[N - 1 - (bx * 64 + i)] - 1.0

    return main


def test_pdl_in_a_kernel_sequence_computes_the_same(rng):
    """T.pdl_trigger / T.pdl_sync are programmatic dependent launch (sm_90+): the second kernel waits for the
    first before reading what it wrote; the emulator runs the kernels in order."""
    N = 128
    func = pdl_pair(N)
    k = tw.compile(func, target="cuda -arch=sm_90a", execution_backend="emulator")
    a, b, c = rand(rng, (N,)), poisoned((N,)), poisoned((N,))
    k(a, b, c)
    close(c, f64(a)[::-1] * 3 - 1)
    src = k.get_kernel_source()
    first, second = src.split("main_kernel1")[0], src.split("main_kernel1")[1]
    assert "griddepcontrol.launch_dependents;" in first and "griddepcontrol.wait;" in second


def test_kernel_sequence_sources_in_launch_order():
    k = tw.compile(two_kernels(128), target="cuda -arch=sm_90a", execution_backend="emulator")
    src = k.get_kernel_source()
    assert src.index("main_kernel0") < src.index("main_kernel1")


@pytest.mark.parametrize("target,backend", BACKENDS, ids=IDS)
def test_kernels_with_different_grids_and_threads(rng, target, backend):
    """A row-sum kernel then a normalisation with another grid and thread count; a symbolic size."""
    M = T.dynamic("M")

    @T.prim_func
    def main(X: T.Tensor((M, 64), "float32"), S: T.Tensor((M,), "float32"), Y: T.Tensor((M, 64), "float32")):
        with T.Kernel(M, threads=64) as bx:
            row = T.alloc_fragment((64,), "float32")
            tot = T.alloc_fragment((1,), "float32")
            T.copy(X[bx, 0:64], row)
            T.reduce_sum(row, tot, dim=0)
            S[bx] = tot[0]
        with T.Kernel(T.ceildiv(M, 2), threads=128) as by:
            for i, j in T.Parallel(2, 64):
                r = by * 2 + i
                if r < M:
                    Y[r, j] = X[r, j] / S[r]

    k = tw.compile(main, target=target, execution_backend=backend)
    for rows in (5, 8):
        x = rand(rng, (rows, 64), lo=0.5, hi=1.5)
        s, y = poisoned((rows,)), poisoned((rows, 64))
        k(x, s, y)
        close(s, f64(x).sum(1))
        close(y, f64(x) / f64(x).sum(1, keepdims=True))


@pytest.mark.parametrize("target,backend", BACKENDS[:2], ids=IDS[:2])
def test_prim_func_without_kernel_block_runs_once(rng, target, backend):
    """Plain statements (TileLang's augmented assignment test): one block of one thread.  (AMD targets
    take whole waves of 64 threads, so there it is refused: see the next test.)"""

    @T.prim_func
    def main(A: T.Tensor[(4,), T.int32], B: T.Tensor[(4,), T.int32]):
        x = A[0]
        x -= 1
        B[0] = x
        for i in T.serial(1, 4):
            B[i] = A[i] * i

    a = rng.integers(-100, 100, size=4).astype(np.int32)
    b = np.full(4, -12345, dtype=np.int32)
    tw.compile(main, target=target, execution_backend=backend)(a, b)
    np.testing.assert_array_equal(b, [a[0] - 1, a[1], a[2] * 2, a[3] * 3])


def test_prim_func_without_kernel_block_on_amd_is_refused_by_wave_size():
    @T.prim_func
    def main(A: T.Tensor[(4,), T.int32]):
        A[0] = A[1]

    with pytest.raises(CompileError, match="threads=1.*wave size 64"):
        tw.compile(main, target="hip -arch=gfx942", execution_backend="emulator")


def test_prim_func_with_empty_body_compiles_and_runs():
    @T.prim_func
    def foo(x: T.Buffer([32], T.int32)):
        pass

    x = np.arange(32, dtype=np.int32)
    for target, backend in BACKENDS[:2]:
        tw.compile(foo, target=target, execution_backend=backend)(x)
    np.testing.assert_array_equal(x, np.arange(32))


def test_a_tensor_used_only_by_the_second_kernel_cannot_be_none(rng):
    k = tw.compile(two_kernels(64), target="interpret")
    with pytest.raises(ArgumentError, match="argument C is None, but the kernel reads or writes C"):
        k(rand(rng, (64,)), poisoned((64,)), None)


def test_two_kernels_in_an_eager_jit_function(rng):
    """The eager-JIT style: both outputs made with T.empty, the second kernel reading the first's."""

    @tw.jit(target="interpret")
    def two(A):
        N = T.const("N")
        A: T.Tensor((N,), T.float32)
        B = T.empty((N,), T.float32)
        C = T.empty((N,), T.float32)
        with T.Kernel(T.ceildiv(N, 64), threads=64) as bx:
            for i in T.Parallel(64):
                if bx * 64 + i < N:
                    B[bx * 64 + i] = A[bx * 64 + i] * 2.0
        with T.Kernel(T.ceildiv(N, 64), threads=64) as bx:
            for i in T.Parallel(64):
                if bx * 64 + i < N:
                    C[bx * 64 + i] = B[N - 1 - (bx * 64 + i)] + 1.0
        return B, C

    a = rand(rng, (100,))
    b, c = two(a)
    close(b, 2 * f64(a))
    close(c, (2 * f64(a))[::-1] + 1)


def test_kernel_sequence_profiler_runs_every_kernel():
    k = tw.compile(two_kernels(128), out_idx=[1, 2], target="interpret")
    assert k.get_profiler().do_bench(warmup=1, rep=1) > 0


def test_lower_of_a_kernel_sequence_names_its_parts():
    func = two_kernels(64)
    with pytest.raises(CompileError, match="main has 2 T.Kernel blocks"):
        tw.lower(func, target="cuda -arch=sm_90a")
    assert [p.name for p in func.attrs["kernel_parts"]] == ["main_kernel0", "main_kernel1"]
    tw.lower(func.attrs["kernel_parts"][1], target="cuda -arch=sm_90a")


@T.macro
def _launch_doubling(A, B):
    with T.Kernel(1, threads=64):
        for i in T.Parallel(64):
            B[i] = A[i] * 2.0


def test_kernel_launched_by_a_macro_is_not_wrapped(rng):
    """No `with` in the prim_func's own source, but its macro launches the kernel: read as written."""

    @T.prim_func
    def main(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
        _launch_doubling(A, B)

    a, b = rand(rng, (64,)), poisoned((64,))
    tw.compile(main, target="interpret")(a, b)
    close(b, 2 * f64(a))
