"""Wrong results TileLang's tests found on the H200 (issue 12), on the CPU: the interpreter and the
emulators of sm_90a and gfx942 (``test_s6_wrong_gpu.py`` runs the same kernels on an NVIDIA GPU).

* NaN-propagating max/min reductions: the NaN test is a select, and the warp shuffle of a combine
  step sat in one of its sides; C evaluates that side only in the lanes taking it, so a lane holding
  NaN did not take part in the shuffle and its partner read an undefined value (the NaN was lost on
  the GPU, float32 and 16-bit alike).  The emulator now checks a shuffle's source lane against the
  lanes executing that side, and the printer refuses a shuffle inside ``?:`` / ``&&`` / ``||``.
* A small fragment read as a block-wide table (``a = mask_f[i]`` in a serial loop) is a per-thread
  copy; the loop filling it iterated by a striped layout, so with 8 elements over 128 threads each
  thread filled half of its copy (TileLang's blocksparse copy read garbage row indices).
* ``T.tvm_thread_allreduce`` folds in TVM's tree order (offsets n/2, n/4, ..., 1), rounding to the
  result's type at each combine as TVM does; a running fold rounded a bf16 product differently.
* The RNG helpers are out-of-line functions: inlined, the 640 draws of TileLang's ``test_rand_1d``
  kernel made NVRTC take minutes (the test timed out on the H200).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from zoo import poisoned, rand

import tilewright as tw
import tilewright.language as T
from tilewright.errors import InternalError
from tilewright.interp.emulator.errors import DivergenceError

CUDA, GFX942 = "cuda -arch=sm_90a", "hip -arch=gfx942"
TARGETS = ["interpret", CUDA, GFX942]
NP = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float32": np.float32}


@pytest.fixture
def rng():
    return np.random.default_rng()


def compile_for(func, target, **kw):
    return tw.compile(func, target=target, execution_backend=None if target == "interpret" else "emulator", **kw)


# ------------------------------------------------------------------ NaN-propagating reductions
def warp_nan_reduce(op, n, dtype, clear, threads=32):
    """TileLang's kernel: a 1-D fragment of ``n`` over one warp (replicated threads), one result."""
    fn = {"max": T.reduce_max, "min": T.reduce_min, "absmax": T.reduce_absmax}[op]

    @T.prim_func
    def kernel(A: T.Tensor((n,), dtype), Old: T.Tensor((1,), dtype), B: T.Tensor((1,), dtype)):
        with T.Kernel(1, threads=threads):
            frag = T.alloc_fragment((n,), dtype)
            out = T.alloc_fragment((1,), dtype)
            T.copy(A, frag)
            out[0] = Old[0]
            fn(frag, out, clear=clear, nan_propagate=True)
            T.copy(out, B)

    return kernel


def nan_reference(op, a, old, clear):
    x = np.asarray(a, np.float64)
    if op == "absmax":
        x = np.abs(x)
    r = x.max() if op != "min" else x.min()
    if not clear:
        r = r if np.isnan(r) or np.isnan(old) else (min(r, old) if op == "min" else max(r, old))
        r = old if np.isnan(old) else r
    return r


NAN_CASES = [(op, dtype, clear) for op in ("max", "min", "absmax") for dtype in ("float16", "bfloat16", "float32")
             for clear in (True, False)]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("warps", [1, 4])
@pytest.mark.parametrize(("op", "dtype", "clear"), NAN_CASES)
def test_nan_wins_a_warp_reduction(op, dtype, clear, warps, target, rng):
    threads = warps * (64 if target == GFX942 else 32)
    kernel = compile_for(warp_nan_reduce(op, 64, dtype, clear, threads), target)
    for where in (int(rng.integers(0, 64)), None):  # a NaN at a random element (each lane's share), none
        a = rand(rng, (64,), dtype, -50, 50)
        if where is not None:
            a[where] = np.nan
        old = np.asarray([rng.uniform(-60, 60)], NP[dtype])
        b = poisoned((1,), dtype)
        kernel(a, old, b)
        want = nan_reference(op, a, float(old[0]), clear)
        assert np.isnan(float(b[0])) == np.isnan(want), (where, float(b[0]), want)
        if not np.isnan(want):
            assert float(b[0]) == want  # max/min of values of the type: exact


@pytest.mark.parametrize("target", [CUDA, GFX942])
def test_nan_reduction_shuffles_outside_the_select(target):
    """Every shuffle of the combine steps is a statement of its own (not inside ?:), and folding the
    64 elements does not nest the select (the source grew exponentially with the elements)."""
    threads = 64 if target == GFX942 else 32
    src = tw.compile(warp_nan_reduce("absmax", 64, "float16", False, threads), target=target).get_kernel_source()
    shuffles = [ln for ln in src.splitlines() if "shfl_xor" in ln]
    assert shuffles and all("?" not in ln for ln in shuffles)
    assert len(src) < 60000


def shuffle_in_a_select(n):
    @T.prim_func
    def kernel(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=n):
            tx = T.get_thread_binding()
            B[tx] = T.if_then_else(A[tx] > 0, T.shfl_xor(A[tx], 1), A[tx])

    return kernel


def test_emulator_refuses_a_shuffle_some_lanes_skip(rng):
    """C runs the shuffle only in lanes where the condition holds: a lane reading one that skipped it
    gets an undefined value on the GPU.  The emulator used to check the statement's lanes only."""
    a = rand(rng, (32,))
    a[0], a[1] = 0.5, -0.5  # lane 0 shuffles with lane 1, which does not
    with pytest.raises(DivergenceError, match="not executing it"):
        compile_for(shuffle_in_a_select(32), CUDA)(a, poisoned((32,)))
    a = np.abs(a) + 0.25  # every lane shuffles: defined
    b = poisoned((32,))
    compile_for(shuffle_in_a_select(32), CUDA)(a, b)
    np.testing.assert_array_equal(b, a[np.arange(32) ^ 1])


def test_printer_refuses_a_shuffle_inside_a_select():
    from tilewright.codegen.base import _check_no_shuffle
    from tilewright.ir import expr as E

    x = E.Var("x", "float32")
    with pytest.raises(InternalError, match="shuffle"):
        _check_no_shuffle(E.binary("+", x, E.Shuffle(x, 1, 32)))
    _check_no_shuffle(x)


# ------------------------------------------------------------------ block-wide tables
def table_broadcast(n, threads):
    """Every thread writes the whole table it holds: an element it did not fill shows."""

    @T.prim_func
    def kernel(Mask: T.Tensor((n,), "int32"), Out: T.Tensor((threads, n), "int32")):
        with T.Kernel(1, threads=threads):
            tx = T.get_thread_binding()
            table = T.alloc_fragment((n,), "int32")
            T.copy(Mask, table)
            for i in T.serial(n):
                v = table[i]
                Out[tx, i] = v

    return kernel


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(("n", "threads"), [(8, 128), (16, 64), (6, 128), (2, 128)])
def test_every_thread_holds_the_whole_table(n, threads, target, rng):
    if target == GFX942 and threads < 64:
        pytest.skip("a gfx942 wave has 64 lanes")
    mask = rng.integers(-1000, 1000, size=n).astype(np.int32)
    out = np.full((threads, n), -(2**31), np.int32)
    compile_for(table_broadcast(n, threads), target)(mask, out)
    np.testing.assert_array_equal(out, np.broadcast_to(mask, (threads, n)))


def blocksparse_copy(M, N, bm, bn, dtype="float16"):
    """TileLang's let-layout test kernel: row blocks picked by a table read in a pipelined loop."""
    ns = N // bn

    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype), BlockMask: T.Tensor((M // bm, ns), "int32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm)) as (bx, by):
            A_shared = T.alloc_shared((bm, bn), dtype)
            mask_f = T.alloc_fragment((ns,), "int32")
            T.copy(BlockMask[by, :], mask_f)
            for i in T.Pipelined(ns):
                a = mask_f[i]
                if a >= 0:
                    T.copy(A[a, 0], A_shared)
                    T.copy(A_shared, B[by * bm:(by + 1) * bm, i * bn:(i + 1) * bn])

    return main


def blocksparse_reference(a, mask, bm, bn):
    ref = np.full(a.shape, np.nan, np.float64)
    for by in range(mask.shape[0]):
        for i in range(mask.shape[1]):
            r = int(mask[by, i])
            if r >= 0:
                ref[by * bm:(by + 1) * bm, i * bn:(i + 1) * bn] = a[r:r + bm, :bn]
    return ref


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("warp_specialized", [True, False])
def test_blocksparse_copy_through_a_table(target, warp_specialized, rng):
    M, N, bm, bn = 128, 512, 64, 64  # 8 table entries over 128 threads
    if target == "interpret" and not warp_specialized:
        pytest.skip("the interpreter has one schedule")
    configs = {} if warp_specialized else {"tl.disable_warp_specialized": True}
    a = rand(rng, (M, N), "float16")
    mask = rng.integers(0, (M - bm) // bm + 1, size=(M // bm, N // bn)).astype(np.int32) * bm
    mask[0, 3] = -1  # a skipped block stays as it was
    b = poisoned((M, N), "float16")
    compile_for(blocksparse_copy(M, N, bm, bn), target, pass_configs=configs)(a, b, mask)
    want = blocksparse_reference(a, mask, bm, bn)
    np.testing.assert_array_equal(np.asarray(b, np.float64), want)  # NaN where skipped, on both sides


# ------------------------------------------------------------------ thread all-reduce
def thread_allreduce(threads, dtype, combine, identity):
    @T.prim_func
    def kernel(A: T.Tensor((threads,), dtype), C: T.Tensor((threads,), dtype)):
        with T.Kernel(1, threads=threads):
            tx = T.get_thread_binding()
            v = T.alloc_local((1,), dtype)
            v[0] = A[tx]
            r = T.alloc_local((1,), dtype)
            with T.attr(T.comm_reducer(combine, [T.cast(identity, dtype)]), "reduce_scope",
                        T.reinterpret(T.uint64(0), dtype="handle")):
                T.evaluate(T.tvm_thread_allreduce(T.uint32(1), v[0], True, r[0], tx, dtype="handle"))
            C[tx] = r[0]

    return kernel


def tree_reference(values, combine, np_dtype):
    """TVM's order: with p the largest power of two <= n, slot t < n - p folds in t + p; then offsets
    p/2, ..., 1; each combine rounded to the type."""
    s = [np_dtype(x) for x in values]
    n = len(s)
    p = 1 << (n.bit_length() - 1)
    for t in range(n - p):
        s[t] = np_dtype(combine(s[t], s[t + p]))
    while p > 1:
        p //= 2
        for t in range(p):
            s[t] = np_dtype(combine(s[t], s[t + p]))
    return s[0]


@pytest.mark.parametrize("target", ["interpret", CUDA])  # 8 threads: not a whole gfx942 wave
def test_allreduce_product_in_tvm_order(target, rng):
    """TileLang's issue-2628 values: 3*8*5*2*7*6*4*6 = 241920, which bf16 rounds to 241664 when the
    products are taken as a tree (every step exact but the last); a running fold rounded 10080 on the
    way and gave 242688."""
    bf16 = ml_dtypes.bfloat16
    kernel = compile_for(thread_allreduce(8, "bfloat16", lambda x, y: x * y, 1), target)
    a = np.array([3, 8, 5, 2, 7, 6, 4, 6], bf16)
    c = poisoned((8,), "bfloat16")
    kernel(a, c)
    assert (np.asarray(c, np.float64) == 241664.0).all()
    a = np.asarray(rng.uniform(0.5, 2.0, 8), bf16)
    c = poisoned((8,), "bfloat16")
    kernel(a, c)
    want = float(tree_reference(a, lambda x, y: float(x) * float(y), bf16))
    assert (np.asarray(c, np.float64) == want).all()
    np.testing.assert_allclose(np.asarray(c, np.float64), np.prod(np.asarray(a, np.float64)), rtol=3e-2)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("threads", [64, 96, 128])
def test_allreduce_sum_over_the_block(threads, target, rng):
    if target == GFX942 and threads % 64:
        pytest.skip("a gfx942 block is whole waves")
    a = rand(rng, (threads,), "float32")
    c = poisoned((threads,))
    compile_for(thread_allreduce(threads, "float32", lambda x, y: x + y, 0), target)(a, c)
    want = tree_reference(a, lambda x, y: x + y, np.float32)
    assert (c == want).all()  # the same order in every thread and here
    np.testing.assert_allclose(c, np.asarray(a, np.float64).sum(), rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------ random numbers
def rand_per_thread(threads, per, generator, normal):
    """TileLang's test_rand_1d shape: each thread draws ``per`` values in an unrolled loop."""

    @T.prim_func
    def main(A: T.Tensor((threads * per,), "uint32"), D: T.Tensor((threads * per,), "float32")):
        with T.Kernel(1, threads=threads):
            tx = T.get_thread_binding()
            T.rng_init(42, 0, tx * per, generator=generator)
            for i, j in T.Parallel(threads, per):
                A[i * per + j] = T.rng_rand()
            for i, j in T.Parallel(threads, per):
                D[i * per + j] = T.rng_rand_float(dist="normal") if normal else T.rng_rand_float()

    return main


@pytest.mark.parametrize("target", [CUDA, GFX942])
def test_rng_draws_call_out_of_line_helpers(target):
    """Each draw calls a helper defined once, not inlined (a whole generator per draw)."""
    threads = 1 if target == CUDA else 64
    src = tw.compile(rand_per_thread(threads, 128, "curandStateMRG32k3a_t", target == CUDA),
                     target=target).get_kernel_source()
    head, body = src.split('extern "C"', 1)
    names = ["tw_rng_init", "tw_rng_rand", "tw_rng_uniform_f32"] + (["tw_rng_normal_f32"] if target == CUDA else [])
    for name in names:
        definition = [ln for ln in head.splitlines() if f" {name}(" in ln and "__device__" in ln]
        assert len(definition) == 1 and "__noinline__" in definition[0] and "inline__ " not in \
            definition[0].replace("__noinline__", ""), (name, definition)
    assert body.count("tw_rng_rand(") == 128
