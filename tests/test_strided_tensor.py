"""``T.StridedTensor`` (TileLang's strided tensor parameter), written as TileLang's tests write it.

Each kernel runs in the tile interpreter and, lowered for ``sm_90a`` and ``gfx942``, in the thread-level
emulator (race detector on), against float64 NumPy references with NaN-poisoned outputs.  Strides
that are not multiples of a vector (odd row pitches, a symbolic pitch) must give correct results:
vector accesses only where the strides prove the elements contiguous and aligned.
The GPU runs are in test_strided_tensor_gpu.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from zoo import close, f64, poisoned, rand

import tilewright as tw
import tilewright.language as T
from tilewright.errors import ArgumentError
from tilewright.interp.emulator import run_thread_kernel
from tilewright.ir import thread as th
from tilewright.ir.visitor import walk

TARGETS = ("cuda -arch=sm_90a", "hip -arch=gfx942")


@pytest.fixture
def rng():
    return np.random.default_rng(2_883)


def run_everywhere(func, make_args, check, targets=TARGETS):
    """``func`` in the interpreter and on the emulator of each target, fresh arguments each time."""
    args = make_args()
    tw.compile(func, target="interpret")(*args)
    check(args, "interpret")
    for target in targets:
        args = make_args()
        kern = tw.compile(func, target=target, execution_backend="emulator")
        run_thread_kernel(kern.thread_kernel, args, check_races=True)
        check(args, target)


def vector_lanes(kern, buffer_name: str) -> set:
    """The lane counts of the vector accesses reading ``buffer_name`` in the lowered kernel."""
    out = set()

    def f(s):
        if isinstance(s, th.VecCopy) and s.src.name == buffer_name:
            out.add(s.lanes)

    walk(kern.thread_kernel.body, f)
    return out


def copy_with_stride(M, N, NN, block_M, block_N, dtype="float16"):
    """TileLang's test_tilelang_copy_with_stride kernel: rows of A are NN elements apart."""

    @T.prim_func
    def main(A: T.StridedTensor((M, N), (NN, 1), dtype), B: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            for i, j in T.Parallel(block_M, block_N):
                B[by * block_M + i, bx * block_N + j] = A[by * block_M + i, bx * block_N + j]

    return main


@pytest.mark.parametrize("pitch", [96, 67], ids=["pitch96", "pitch67-odd"])
def test_copy_with_static_stride(rng, pitch):
    M, N = 48, 64
    func = copy_with_stride(M, N, pitch, 16, 32)

    def args():
        wide = rand(rng, (M, pitch), "float16")
        return [wide[:, :N], poisoned((M, N), "float16")]

    def check(a, where):
        close(a[1], f64(a[0]), rtol=0, atol=0)

    run_everywhere(func, args, check)


def test_copy_with_symbolic_stride_one_kernel_for_every_pitch(rng):
    """``NN = T.dynamic("NN")``: one compiled kernel serves every row pitch, read from the argument."""
    M, N = 32, 64
    func = copy_with_stride(M, N, T.dynamic("NN"), 16, 32)
    kernels = [tw.compile(func, target="interpret")]
    kernels += [tw.compile(func, target=t, execution_backend="emulator") for t in TARGETS]
    for pitch in (64, 65, 128, 71):
        for kern in kernels:
            wide = rand(rng, (M, pitch), "float16")
            a, b = wide[:, :N], poisoned((M, N), "float16")
            kern(a, b)
            close(b, f64(a), rtol=0, atol=0)


def test_symbolic_pitch_is_not_read_with_vectors():
    """A run-time row pitch does not prove the rows aligned: the loads of A are scalar (the plain B is
    stored with vectors)."""
    func = copy_with_stride(32, 64, T.dynamic("NN"), 16, 32)
    kern = tw.compile(func, target="cuda -arch=sm_90a", execution_backend="emulator")
    assert vector_lanes(kern, "A") <= {1}
    static = tw.compile(copy_with_stride(32, 64, 128, 16, 32), target="cuda -arch=sm_90a",
                        execution_backend="emulator")
    assert max(vector_lanes(static, "A")) > 1  # a pitch of 128 halves: aligned rows, vectors allowed


def column_major_copy(N, M, stride_A, stride_B):
    """TileLang's vectorize test: (N, M) tensors stored column by column (strides (1, stride))."""

    @T.prim_func
    def main(A: T.StridedTensor[(N, M), (1, stride_A), T.float32], B: T.StridedTensor[(N, M), (1, stride_B), T.float32]):
        with T.Kernel(M // 64, threads=64) as bx:
            tx = T.get_thread_binding(0)
            col = bx * 64 + tx
            for row in T.vectorized(N):
                B[row, col] = A[row, col] * 2.0

    return main


@pytest.mark.parametrize("stride_a,stride_b", [(16, 16), (19, 24)])
def test_column_major_strided_tensors(rng, stride_a, stride_b):
    N, M = 16, 128
    bases = []

    def args():
        base_a = rand(rng, (M, stride_a))
        base_b = np.full((M, stride_b), -7.0, dtype=np.float32)
        bases.append(base_b)
        a = np.lib.stride_tricks.as_strided(base_a, (N, M), (4, 4 * stride_a))
        b = np.lib.stride_tricks.as_strided(base_b, (N, M), (4, 4 * stride_b))
        return [a, b]

    def check(a, where):
        close(a[1], 2 * f64(a[0]))
        assert (bases[-1][:, N:] == -7.0).all(), f"{where}: the padding between columns was written"

    run_everywhere(column_major_copy(N, M, stride_a, stride_b), args, check)


def test_strided_arguments_are_checked(rng):
    func = copy_with_stride(32, 64, 96, 16, 32)
    kern = tw.compile(func, target="interpret")
    a = rand(rng, (32, 64), "float16")  # contiguous: pitch 64, not 96
    with pytest.raises(ArgumentError, match=r"argument A has strides \(64, 1\).*expects \(96, 1\)"):
        kern(a, poisoned((32, 64), "float16"))


def test_strided_tensor_subscript_needs_three_entries():
    with pytest.raises(tw.errors.CompileError, match=r"T.StridedTensor\[\.\.\.\] takes \[shape, strides, dtype\]"):
        T.StridedTensor[(4, 4), "float32"]


def test_strided_tensor_in_eager_jit(rng):
    """The eager-JIT style: ``x: T.StridedTensor[[m, 16], [s, 1], dtype]`` declared in the body, m and s
    read from the argument (a slice of every other row: pitch 32)."""

    @tw.jit(target="interpret")
    def double_rows(x):
        m, s = T.dynamic("m"), T.dynamic("s")
        x: T.StridedTensor[[m, 16], [s, 1], T.float32]
        y = T.empty((m, 16), T.float32)
        with T.Kernel(1, threads=32):
            for i, j in T.Parallel(m, 16):
                y[i, j] = x[i, j] * 2.0
        return y

    base = rand(rng, (8, 16))
    y = double_rows(base[::2])
    close(y, 2 * f64(base[::2]))
    y = double_rows(base[1::4])
    close(y, 2 * f64(base[1::4]))
