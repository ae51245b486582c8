"""The thread-IR emulator: kernels lowered for NVIDIA (mma.sync, wave 32), CDNA (MFMA, wave 64) and
RDNA3 (WMMA, wave 32), executed on the CPU against float64 NumPy references.

Outputs are poisoned with NaN before each run, so an element a kernel forgets to write fails the
comparison.  Most runs enable the shared-memory race detector.  Several tests pin lowering bugs the
emulator found (guarded vector stores, replicated layouts, thread-dependent guards, padded layouts,
signed loop variables, cross-warp fold order, shared-memory budget); all are fixed.

The second half checks the emulator itself: every matrix instruction record against ``A @ B + C``
with hand-built thread IR, ldmatrix, and that it refuses what a GPU would do wrong (missing barriers
and async waits, out-of-bounds and misaligned accesses, collectives under divergence).
"""

import dataclasses
import math
import os
from pathlib import Path

import numpy as np
import pytest
import zoo
from zoo import GEMM_TOL, NP, close, f64, poisoned, rand

import tilewright.language as T
from tilewright.errors import ArgumentError
from tilewright.interp.emulator import (
    DivergenceError,
    EmulatorError,
    EmulatorOutOfBoundsError,
    MisalignedAccessError,
    RaceError,
    run_thread_kernel,
)
from tilewright.ir import expr as E
from tilewright.ir import thread as th
from tilewright.ir import tile as t
from tilewright.ir.visitor import map_stmt, walk
from tilewright.kernels import softmax
from tilewright.passes.pipeline import PassContext, run_pipeline
from tilewright.target.base import Target

CUDA, GFX942, GFX90A, GFX1100 = "cuda -arch=sm_90a", "hip -arch=gfx942", "hip -arch=gfx90a", "hip -arch=gfx1100"
TARGETS = [CUDA, GFX942, GFX90A, GFX1100]
WAVE32 = (CUDA, GFX1100)


def lower(func, target: str) -> th.ThreadKernel:
    return run_pipeline(func, PassContext(Target.parse(target)))


@pytest.fixture
def rng():
    return np.random.default_rng(20240611)


# ============================================================================================
# kernels, written as TileLang users write them: the shared workloads (copies, GEMMs, softmax, norms,
# attention, ...) and their references are in zoo.py; these probe one lowering behaviour each


def thread_guarded_writes(nthreads):
    @T.prim_func
    def kern(Out: T.Tensor((2,), "float32")):
        with T.Kernel(2, threads=nthreads):
            tx = T.get_thread_binding()
            if tx < 3:
                T.atomic_add(Out[0], 1.0)  # once per thread 0, 1, 2 of each block
            if tx == 5:
                Out[1] = 7.0  # thread 5 stores

    return kern


def scale_rows(M, N, bm):
    @T.prim_func
    def scale(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32"), alpha: T.float32):
        with T.Kernel(T.ceildiv(M, bm), threads=128) as bx:
            x = T.alloc_fragment((bm, N), "float32")
            T.copy(X[bx * bm, 0], x)
            for i, j in T.Parallel(bm, N):
                x[i, j] = x[i, j] * alpha + T.cast(M, "float32")
            T.copy(x, Y[bx * bm, 0])

    return scale


# ============================================================================================
# lowered kernels against NumPy




@pytest.mark.parametrize("target", TARGETS)
def test_elementwise_ragged_guarded(rng, target):
    N = 1000
    k = lower(zoo.elementwise(N, 128, op="fma"), target)
    a, b, c = rand(rng, N), rand(rng, N), poisoned(N)
    run_thread_kernel(k, [a, b, c], check_races=True)
    close(c, f64(a) * f64(b) + 1.0, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("N,block", [(1000, 128), (3000, 1024)])
def test_elementwise_ragged_fragments(rng, target, N, block):
    k = lower(zoo.elementwise_fragments(N, block), target)
    a, b, c = rand(rng, N), rand(rng, N), poisoned(N)
    run_thread_kernel(k, [a, b, c], check_races=True)
    close(c, f64(a) * f64(b) + np.exp(f64(b)), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_copy_through_shared_ragged(rng, target, dtype):
    M, N = 333, 200
    k = lower(zoo.tiled_copy(M, N, 64, 64, dtype, sliced=False), target)
    a, b = rand(rng, (M, N), dtype), poisoned((M, N), dtype)
    run_thread_kernel(k, [a, b], check_races=True)
    np.testing.assert_array_equal(b, a)


@pytest.mark.parametrize("target", TARGETS)
def test_transpose_through_shared(rng, target):
    M, N = 300, 200
    k = lower(zoo.transpose(M, N, 64, 32), target)
    a, b = rand(rng, (M, N), "float16"), poisoned((N, M), "float16")
    run_thread_kernel(k, [a, b], check_races=True)
    np.testing.assert_array_equal(b, a.T)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("trans_a,trans_b", [(False, False), (False, True), (True, False), (True, True)])
def test_gemm_ragged(rng, target, dtype, trans_a, trans_b):
    M, N, K = 100, 72, 40
    k = lower(zoo.matmul(M, N, K, 64, 64, 32, dtype, trans_a=trans_a, trans_b=trans_b), target)
    a = rand(rng, (K, M) if trans_a else (M, K), dtype)
    b = rand(rng, (N, K) if trans_b else (K, N), dtype)
    c = poisoned((M, N), dtype)
    run_thread_kernel(k, [a, b, rand(rng, N), c], check_races=True)
    close(c, zoo.gemm_ref(a, b, trans_a, trans_b), *GEMM_TOL[dtype])


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("M,N,K,bm,bn", [(33, 45, 50, 64, 64), (70, 40, 36, 32, 32)])
def test_gemm_odd_shapes_and_small_tiles(rng, target, M, N, K, bm, bn):
    # 32x32 tiles over 128 threads take the 16x16 MFMA on CDNA (the 32x32 one needs 64-wide tiles)
    k = lower(zoo.matmul(M, N, K, bm, bn, 32, "float16", trans_b=True), target)
    a, b, c = rand(rng, (M, K), "float16"), rand(rng, (N, K), "float16"), poisoned((M, N), "float16")
    run_thread_kernel(k, [a, b, rand(rng, N), c], check_races=True)
    close(c, zoo.gemm_ref(a, b, trans_b=True), *GEMM_TOL["float16"])


@pytest.mark.parametrize("target", TARGETS)
def test_pipelined_gemm_256(rng, target):
    M = N = 256
    K = 128
    k = lower(zoo.matmul(M, N, K, 128, 128, 32, "float16", stages=3, swizzle=2), target)
    a, b, c = rand(rng, (M, K), "float16"), rand(rng, (K, N), "float16"), poisoned((M, N), "float16")
    run_thread_kernel(k, [a, b, rand(rng, N), c])
    close(c, zoo.gemm_ref(a, b), rtol=1e-2, atol=5e-2)
    c[:] = np.nan
    run_thread_kernel(k, [a, b, rand(rng, N), c], check_races=True)
    close(c, zoo.gemm_ref(a, b), rtol=1e-2, atol=5e-2)


@pytest.mark.parametrize("target", TARGETS)
def test_gemm_bias_relu_epilogue(rng, target):
    M, N, K = 100, 72, 64
    k = lower(zoo.matmul(M, N, K, 64, 64, 32, "float16", stages=2, epilogue="bias_relu"), target)
    a, b, bias = rand(rng, (M, K), "float16"), rand(rng, (K, N), "float16"), rand(rng, N)
    c = poisoned((M, N), "float16")
    run_thread_kernel(k, [a, b, bias, c], check_races=True)
    close(c, zoo.gemm_ref(a, b, bias=bias, epilogue="bias_relu"), rtol=1e-2, atol=2e-2)
    assert (f64(c) == 0).any() and (f64(c) > 0).any()


@pytest.mark.parametrize("target", TARGETS)
def test_fp32_gemm(rng, target):
    # no fp32 matrix instruction on sm_90a / gfx1100: the SIMT path; MFMA 16x16x4 f32 on CDNA
    M, N, K = 100, 72, 40
    k = lower(zoo.matmul(M, N, K, 64, 64, 32, "float32"), target)
    a, b, c = rand(rng, (M, K)), rand(rng, (K, N)), poisoned((M, N))
    run_thread_kernel(k, [a, b, rand(rng, N), c], check_races=True)
    close(c, zoo.gemm_ref(a, b), *GEMM_TOL["float32"])


@pytest.mark.parametrize("target", TARGETS)
def test_int8_gemm_exact(rng, target):
    M, N, K = 70, 50, 96
    k = lower(zoo.int8_gemm(M, N, K, 64, 32, 32), target)
    a = rng.integers(-128, 128, (M, K)).astype(np.int8)
    b = rng.integers(-128, 128, (N, K)).astype(np.int8)
    c = np.full((M, N), -7, np.int32)
    run_thread_kernel(k, [a, b, c], check_races=True)
    np.testing.assert_array_equal(c, a.astype(np.int64) @ b.astype(np.int64).T)


@pytest.mark.parametrize("target", TARGETS)
def test_split_k_gemm_atomic_add(rng, target):
    M, N, K = 90, 80, 128
    k = lower(zoo.splitk_gemm(M, N, K, 64, 64, 32, 2), target)
    a, b = rand(rng, (M, K), "float16"), rand(rng, (K, N), "float16")
    c = np.zeros((M, N), np.float32)
    run_thread_kernel(k, [a, b, c], check_races=True)
    close(c, zoo.gemm_ref(a, b), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", TARGETS)
def test_row_softmax(rng, target):
    k = lower(softmax(64, 1024, 4), target)
    x, y = rand(rng, (64, 1024), lo=-5, hi=5), poisoned((64, 1024))
    run_thread_kernel(k, [x, y], check_races=True)
    close(y, zoo.softmax_ref(x), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("target", TARGETS)
def test_rmsnorm(rng, target):
    M, N = 37, 256
    k = lower(zoo.rmsnorm(M, N, 8), target)
    x, w, y = rand(rng, (M, N), "float16"), rand(rng, N, "float16"), poisoned((M, N), "float16")
    run_thread_kernel(k, [x, w, y], check_races=True)
    close(y, zoo.rmsnorm_ref(x, w), rtol=1e-2, atol=1e-2)




@pytest.mark.parametrize("target", TARGETS)
def test_flash_attention(rng, target):
    S, D = 200, 64
    k = lower(zoo.flash_attention(S, D, 64, 64), target)
    q, kk, v = (rand(rng, (S, D), "float16") for _ in range(3))
    o = poisoned((S, D), "float16")
    run_thread_kernel(k, [q, kk, v, o], check_races=True)
    close(o, zoo.attention_ref(q, kk, v), rtol=2e-2, atol=5e-3)




@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("style", ["idiomatic", "fresh"])
def test_column_reduction(rng, target, style):
    M, N = 333, 100
    k = lower(zoo.column_sum(M, N, 64, 32, style), target)
    x, s = rand(rng, (M, N)), poisoned(N)
    run_thread_kernel(k, [x, s])
    close(s, f64(x).sum(axis=0), rtol=1e-5, atol=1e-4)
    s[:] = np.nan
    run_thread_kernel(k, [x, s], check_races=True)  # replicas must agree bit for bit
    close(s, f64(x).sum(axis=0), rtol=1e-5, atol=1e-4)


REPLICATED_SUM_BUG = ("lower_reduce uses sharing_masks(dst layout), which also contains the replication bits of the "
                      "source layout (an (8, 16) fragment over 128 threads with 4-wide chunks is held 4 times: "
                      "tx, tx^32, tx^64, tx^96; a (16,) one 32 times), so reduce_sum adds every partial once per "
                      "replica (4x and 32x too large); reduce_max is unaffected")


@pytest.mark.parametrize("target", TARGETS)
def test_reductions_of_replicated_fragments(rng, target):
    M, N = 8, 16
    k = lower(zoo.row_reductions(M, N, (("max", 1), ("sum", 1))), target)
    x, r, tot = rand(rng, (M, N), lo=-3, hi=3), poisoned((2, M)), poisoned(1)
    run_thread_kernel(k, [x, r, tot], check_races=True)
    close(r[0], f64(x).max(axis=1), rtol=1e-6, atol=1e-6)
    close(r[1], f64(x).sum(axis=1), rtol=1e-5, atol=1e-5)
    close(tot, [f64(x)[0].sum()], rtol=1e-5, atol=1e-5)




@pytest.mark.parametrize("target", TARGETS)
def test_atomics_in_parallel(rng, target):
    N = 1000
    k = lower(zoo.atomic_sum(N, 128), target)
    a, tot, hist = rand(rng, N), np.zeros(1, np.float32), np.zeros(4, np.int32)
    run_thread_kernel(k, [a, tot, hist], check_races=True)
    np.testing.assert_array_equal(hist, [250, 250, 250, 250])
    close(tot, [f64(a).sum()], rtol=1e-4, atol=1e-4)




@pytest.mark.parametrize("target", TARGETS)
def test_thread_guarded_atomic_and_store(target):
    k = lower(thread_guarded_writes(64), target)
    out = np.zeros(2, np.float32)
    run_thread_kernel(k, [out], check_races=True)
    np.testing.assert_array_equal(out, [6.0, 7.0])


PADDED_LAYOUT_BUG = ("LoweringContext.frag_register range-checks the fragment index of every thread, including the "
                     "padded register slots of a Striped layout whose chunks do not divide evenly over the threads "
                     "((16, 48) float32 = 192 chunks of 4 over 128 threads); lower_parallel guards those slots "
                     "with the layout's valid_expr but asks for their register anyway")


@pytest.mark.parametrize("target", TARGETS)
def test_padded_fragment_layout(rng, target):
    M, N = 100, 48
    k = lower(scale_rows(M, N, 16), target)
    x, y = rand(rng, (M, N)), poisoned((M, N))
    run_thread_kernel(k, [x, y, 2.0])
    close(y, f64(x) * 2.0 + M, rtol=1e-6, atol=1e-6)


def negative_loop_floordiv():
    @T.prim_func
    def kern(Out: T.Tensor((4,), "int32")):
        with T.Kernel(1, threads=64):
            for k in T.serial(-2, 2):
                Out[k + 2] = k // 2

    return kern




@pytest.mark.parametrize("target", TARGETS)
def test_floor_division_of_negative_loop_variable(target):
    k = lower(negative_loop_floordiv(), target)
    out = np.full(4, 99, np.int32)
    run_thread_kernel(k, [out])
    np.testing.assert_array_equal(out, [-1, -1, 0, 0])


@pytest.mark.parametrize("target", [CUDA, GFX942])
def test_scalar_params_and_arguments(rng, target):
    M, N = 100, 64
    k = lower(scale_rows(M, N, 16), target)
    x, y = rand(rng, (M, N)), poisoned((M, N))
    run_thread_kernel(k, [x, y, -1.5])
    close(y, f64(x) * -1.5 + M, rtol=1e-6, atol=1e-6)
    with pytest.raises(ArgumentError):
        run_thread_kernel(k, [x, y])
    with pytest.raises(ArgumentError):
        run_thread_kernel(k, [x.astype(np.float64), y, 1.0])
    with pytest.raises(ArgumentError):
        run_thread_kernel(k, [x, np.asfortranarray(y), 1.0])


def test_dynamic_dimension_inferred_and_explicit(rng):
    k = lower(zoo.dynamic_rows(64, 16), CUDA)
    for rows in (100, 37):
        x, y = rand(rng, (rows, 64)), poisoned((rows, 64))
        run_thread_kernel(k, [x, y])
        close(y, f64(x) * 2 + rows, rtol=1e-6, atol=1e-6)
    x, y = rand(rng, (20, 64)), poisoned((20, 64))
    run_thread_kernel(k, [x, y], dyn={"m": 20})
    close(y, f64(x) * 2 + 20, rtol=1e-6, atol=1e-6)
    with pytest.raises(ArgumentError):
        run_thread_kernel(k, [x, poisoned((21, 64))])
    with pytest.raises(ArgumentError):
        run_thread_kernel(k, [x, y], dyn={"m": 19})


# ============================================================================================
# the emulator itself: hand-built thread IR


def hand_kernel(params, build, threads, target, grid=(1,), shared_bytes=0):
    tx = E.Var("tx", "int32", kind="thread")
    bx = E.Var("bx", "int32", kind="block")
    return th.ThreadKernel(name="hand", params=list(params), dyn_vars=[], grid=tuple(E.as_expr(g) for g in grid),
                           num_threads=threads, shared_bytes=shared_bytes, body=t.SeqStmt(build(tx, bx)),
                           thread_var=tx, block_vars=(bx,), target=Target.parse(target))


def gbuf(name, n, dtype):
    return t.Buffer(name, (n,), dtype, "global")


def lbuf(name, n, dtype):
    return t.Buffer(name, (n,), dtype, "local")


def store(buf, idx, value):
    return t.BufferStore(buf, (E.as_expr(idx),), E.as_expr(value))


def load(buf, idx):
    return E.Load(buf, (E.as_expr(idx),))


def _all_matrix_instrs():
    seen = {}
    for arch in (CUDA, GFX90A, GFX942, "hip -arch=gfx950", GFX1100, "hip -arch=gfx1201"):
        for mi in Target.parse(arch).matrix_instrs:
            seen.setdefault(mi.name, (mi, arch))
    return list(seen.values())


MATRIX_INSTRS = _all_matrix_instrs()


def mma_kernel(mi, arch, groups_per_block=2, blocks=2, perturb_replicas=False):
    """Each group loads A, B, C through the instruction's lane layouts, runs it, stores D."""
    G, m, n, kk = mi.group_size, mi.m, mi.n, mi.k
    total = groups_per_block * blocks
    A, B = gbuf("A", total * m * kk, mi.a_dtype), gbuf("B", total * kk * n, mi.b_dtype)
    C, D = gbuf("C", total * m * n, mi.acc_dtype), gbuf("D", total * m * n, mi.acc_dtype)
    a, b = lbuf("a", mi.a_elems, mi.a_dtype), lbuf("b", mi.b_elems, mi.b_dtype)
    c, d = lbuf("c", mi.c_elems, mi.acc_dtype), lbuf("d", mi.c_elems, mi.acc_dtype)

    def build(tx, bx):
        lane = tx % G
        grp = bx * groups_per_block + tx // G
        out = [th.LocalDecl(x) for x in (a, b, c, d)]
        for e in range(mi.a_elems):
            r, col = mi.a_index(lane, e)
            idx = r * kk + col
            if perturb_replicas:  # the upper half-wave loads a different element: replicas disagree
                idx = (idx + E.select(lane >= 16, 1, 0)) % (m * kk)
            out.append(store(a, e, load(A, grp * (m * kk) + idx)))
        for e in range(mi.b_elems):
            r, col = mi.b_index(lane, e)
            out.append(store(b, e, load(B, grp * (kk * n) + r * n + col)))
        for e in range(mi.c_elems):
            r, col = mi.c_index(lane, e)
            out.append(store(c, e, load(C, grp * (m * n) + r * n + col)))
        out.append(th.MatrixMultiply(mi, (d, 0), (a, 0), (b, 0), (c, 0)))
        for e in range(mi.c_elems):
            r, col = mi.c_index(lane, e)
            out.append(store(D, grp * (m * n) + r * n + col, load(d, e)))
        return out

    k = hand_kernel([A, B, C, D], build, G * groups_per_block, arch, grid=(blocks,))
    return k, total


def _operand(rng, shape, dtype):
    if dtype == "int8":
        return rng.integers(-128, 128, shape).astype(np.int8)
    return rng.uniform(-2, 2, shape).astype(NP[dtype])


@pytest.mark.parametrize("mi,arch", MATRIX_INSTRS, ids=[mi.name for mi, _ in MATRIX_INSTRS])
def test_matrix_instruction_semantics(rng, mi, arch):
    k, total = mma_kernel(mi, arch)
    a = _operand(rng, (total, mi.m, mi.k), mi.a_dtype)
    b = _operand(rng, (total, mi.k, mi.n), mi.b_dtype)
    integer = mi.acc_dtype == "int32"
    c = rng.integers(-1000, 1000, (total, mi.m, mi.n)).astype(np.int32) if integer else rand(rng, (total, mi.m, mi.n))
    d = np.full((total, mi.m, mi.n), -1, np.int32) if integer else poisoned((total, mi.m, mi.n))
    run_thread_kernel(k, [x.reshape(-1) for x in (a, b, c, d)], check_races=True)  # flat views: written in place
    want = f64(a) @ f64(b) + f64(c)
    if integer:
        np.testing.assert_array_equal(d, want.astype(np.int64))
    else:
        close(d, want, rtol=1e-5, atol=1e-5)


def test_wmma_replicas_must_agree(rng):
    mi = Target.parse(GFX1100).matrix_instr_for("float16", "float16", "float32")[0]
    k, total = mma_kernel(mi, GFX1100, perturb_replicas=True)
    a, b = rand(rng, (total, 16, 16), "float16"), rand(rng, (total, 16, 16), "float16")
    with pytest.raises(EmulatorError, match="replicated"):
        run_thread_kernel(k, [x.reshape(-1) for x in (a, b, rand(rng, (total, 16, 16)), poisoned((total, 16, 16)))])


@pytest.mark.parametrize("num", [1, 2, 4])
@pytest.mark.parametrize("trans", [False, True])
def test_ldmatrix(rng, num, trans):
    G, O = gbuf("G", 256, "float16"), gbuf("O", 256, "float16")
    S = t.Buffer("S", (256,), "float16", "shared")
    r = lbuf("r", 8, "float16")

    def build(tx, bx):
        out = [th.SharedDecl(S, 0)]
        out += [store(S, tx * 8 + j, load(G, tx * 8 + j)) for j in range(8)]
        out.append(th.Barrier())
        # lane l supplies row l % 8 of matrix l // 8; lanes past 8 * num supply garbage, which must be ignored
        row = E.select(tx < 8 * num, (tx // 8) * 64 + (tx % 8) * 8, 1 << 20)
        out += [th.LocalDecl(r), th.LoadMatrix(r, 0, S, row, num, trans)]
        out += [store(O, tx * 8 + j, load(r, j)) for j in range(2 * num)]
        return out

    k = hand_kernel([G, O], build, 32, CUDA, shared_bytes=512)
    g, o = rand(rng, 256, "float16"), poisoned(256, "float16")
    run_thread_kernel(k, [g, o], check_races=True)
    mats = g.reshape(4, 8, 8)
    got = o.reshape(32, 8)
    for lane in range(32):
        for q in range(num):
            for j in range(2):
                want = mats[q, 2 * (lane % 4) + j, lane // 4] if trans else mats[q, lane // 4, 2 * (lane % 4) + j]
                assert got[lane, 2 * q + j] == want, (lane, q, j)


def test_expression_semantics(rng):
    n = 64
    X, Y = gbuf("X", n, "float32"), gbuf("Y", n, "float16")
    Out, IOut = gbuf("Out", 9 * n, "float32"), gbuf("IOut", 5 * n, "int32")
    Mx = gbuf("Mx", 2, "float32")
    regs = lbuf("regs", 4, "float32")

    def build(tx, bx):
        x, y = load(X, tx), load(Y, tx)
        ti = E.cast("int32", tx) - 32
        floats = [
            E.call("erf", [x]), E.call("sigmoid", [x]), E.call("round", [x * 4.0]), E.call("rsqrt", [E.call("abs", [x])]),
            E.cast("float32", y * y),  # a float16 product, rounded to float16
            E.cast("float32", E.call("exp", [y])),  # computed in float32, rounded to float16
            E.binary("%", x * 10.0, 3.0),  # fmod
            E.call("fma", [x, x, 1.0]),
            load(regs, tx % 4),  # a per-thread register index
        ]
        ints = [ti // 5, ti % 5, E.cast("int32", x * 1e10), (ti << 2) ^ 7, E.binary("/", ti, E.as_expr(5))]
        out = [th.LocalDecl(regs)] + [store(regs, j, float(j) * 10.0) for j in range(4)]
        out += [store(Out, j * n + tx, v) for j, v in enumerate(floats)]
        out += [store(IOut, j * n + tx, v) for j, v in enumerate(ints)]
        out += [th.AtomicRMW("max", Mx, E.as_expr(0), x), th.AtomicRMW("min", Mx, E.as_expr(1), x)]
        return out

    k = hand_kernel([X, Y, Out, IOut, Mx], build, n, GFX942)
    x = rand(rng, n, lo=-2, hi=2)
    x[5] = np.nan  # the printers' compare-and-swap loops never store a NaN operand
    y = rand(rng, n, "float16", lo=-3, hi=3)
    out, iout, mx = poisoned(9 * n), np.zeros(5 * n, np.int32), np.array([-np.inf, np.inf], np.float32)
    run_thread_kernel(k, [x, y, out, iout, mx])
    x64, ti = f64(x), np.arange(n) - 32
    want = [np.array([math.erf(v) for v in x64]), 1 / (1 + np.exp(-x64)), np.copysign(np.floor(np.abs(x64 * 4) + 0.5), x64),
            1 / np.sqrt(np.abs(x64)), f64((y * y).astype(np.float16)), f64(np.exp(f64(y)).astype(np.float16)),
            np.fmod(f64(x * np.float32(10)), 3), x64 * x64 + 1, (np.arange(n) % 4) * 10.0]
    for j, w in enumerate(want):
        np.testing.assert_allclose(out[j * n:(j + 1) * n], w, rtol=2e-6, atol=1e-6, equal_nan=True, err_msg=str(j))
    big = np.clip(np.nan_to_num(np.trunc(f64(x * np.float32(1e10)))), -2**31, 2**31 - 1)  # saturates, NaN -> 0
    iwant = [ti // 5, ti % 5, big, (ti << 2) ^ 7, np.trunc(ti / 5)]
    for j, w in enumerate(iwant):
        np.testing.assert_array_equal(iout[j * n:(j + 1) * n], w, err_msg=str(j))
    np.testing.assert_array_equal(mx, [np.nanmax(x), np.nanmin(x)])


def test_per_lane_loop_trip_counts():
    Out = gbuf("Out", 64, "int32")
    acc = lbuf("acc", 1, "int32")
    i = E.Var("i", "int32", kind="loop")

    def build(tx, bx):
        body = store(acc, 0, load(acc, 0) + i)
        return [th.LocalDecl(acc), store(acc, 0, 0), t.For(i, tx % 3, tx % 5, body), store(Out, tx, load(acc, 0))]

    k = hand_kernel([Out], build, 64, GFX942)
    out = np.full(64, -1, np.int32)
    run_thread_kernel(k, [out])
    want = [sum(range(x % 3, x % 3 + x % 5)) for x in range(64)]
    np.testing.assert_array_equal(out, want)


def test_uninitialised_registers_are_nan():
    Out = gbuf("Out", 32, "float32")
    reg = lbuf("reg", 2, "float32")
    k = hand_kernel([Out], lambda tx, bx: [th.LocalDecl(reg), store(reg, 0, 1.0), store(Out, tx, load(reg, 1))], 32,
                    CUDA)
    out = np.zeros(32, np.float32)
    run_thread_kernel(k, [out])
    assert np.isnan(out).all()


def test_out_of_bounds_store_names_the_buffer():
    Out = gbuf("Out", 32, "float32")
    k = hand_kernel([Out], lambda tx, bx: [store(Out, tx + 1, 1.0)], 32, CUDA)
    with pytest.raises(EmulatorOutOfBoundsError, match=r"thread 31.*Out"):
        run_thread_kernel(k, [np.zeros(32, np.float32)])
    # the same store under a guard that masks thread 31 is fine
    k = hand_kernel([Out], lambda tx, bx: [t.IfThenElse(tx < 31, store(Out, tx + 1, 1.0))], 32, CUDA)
    out = np.zeros(32, np.float32)
    run_thread_kernel(k, [out])
    assert out[0] == 0 and (out[1:] == 1).all()


def test_guarded_load_in_select_does_not_fault():
    A, Out = gbuf("A", 32, "float32"), gbuf("Out", 32, "float32")
    k = hand_kernel([A, Out], lambda tx, bx: [store(Out, tx, E.select(tx > 0, load(A, tx - 1), -1.0))], 32, CUDA)
    a, out = np.arange(32, dtype=np.float32), poisoned(32)
    run_thread_kernel(k, [a, out])
    np.testing.assert_array_equal(out, np.concatenate([[-1.0], a[:-1]]))


def test_misaligned_vector_access():
    Out = gbuf("Out", 256, "float32")
    v = lbuf("v", 4, "float32")

    def build(tx, bx):
        return [th.LocalDecl(v, init=0.0), th.VecCopy(Out, tx * 4 + 1, v, E.as_expr(0), 4)]

    k = hand_kernel([Out], build, 32, CUDA)
    with pytest.raises(MisalignedAccessError):
        run_thread_kernel(k, [np.zeros(256, np.float32)])


def test_shuffle_under_divergence():
    Out = gbuf("Out", 32, "float32")

    def build(tx, bx):
        val = E.Shuffle(E.cast("float32", tx), 16, 32)  # lanes 0..15 read lanes 16..31, which are not here
        return [t.IfThenElse(tx < 16, store(Out, tx, val))]

    k = hand_kernel([Out], build, 32, CUDA)
    with pytest.raises(DivergenceError, match="shuffle"):
        run_thread_kernel(k, [np.zeros(32, np.float32)])
    k = hand_kernel([Out], lambda tx, bx: [store(Out, tx, E.Shuffle(E.cast("float32", tx), 5, 8))], 32, CUDA)
    out = poisoned(32)
    run_thread_kernel(k, [out])
    np.testing.assert_array_equal(out, np.arange(32) ^ 5)


def test_barrier_under_divergence():
    Out = gbuf("Out", 64, "float32")
    k = hand_kernel([Out], lambda tx, bx: [t.IfThenElse(tx < 16, th.Barrier())], 64, GFX942)
    with pytest.raises(DivergenceError, match="barrier"):
        run_thread_kernel(k, [np.zeros(64, np.float32)])
    # a condition uniform over each block is fine
    k = hand_kernel([Out], lambda tx, bx: [t.IfThenElse(bx < 1, th.Barrier()), store(Out, bx * 32 + tx % 32, 1.0)],
                    64, GFX942, grid=(2,))
    run_thread_kernel(k, [np.zeros(64, np.float32)])


# --------------------------------------------------------------------------------------------
# mutated lowerings: the emulator must notice


def _mutate(kernel, fn):
    return dataclasses.replace(kernel, body=map_stmt(kernel.body, fn))


def test_missing_barrier_is_a_race(rng):
    k = lower(zoo.transpose(128, 64, 64, 32), CUDA)
    a = rand(rng, (128, 64), "float16")
    run_thread_kernel(k, [a, poisoned((64, 128), "float16")], check_races=True)
    broken = _mutate(k, lambda s: [] if isinstance(s, th.Barrier) else None)
    with pytest.raises(RaceError, match="missing barrier"):
        run_thread_kernel(broken, [a, poisoned((64, 128), "float16")], check_races=True)


def test_weakened_async_wait_is_caught(rng):
    M = N = 128
    K = 256
    k = lower(zoo.matmul(M, N, K, 64, 64, 32, "float16", stages=3), "cuda -arch=sm_80")  # cp.async (no TMA)
    waits = []
    walk(k.body, lambda s: waits.append(s) if isinstance(s, th.AsyncWait) else None)
    assert waits, "the pipelined loop should wait for its async copies"
    broken = _mutate(k, lambda s: th.AsyncWait(s.pending + 1) if isinstance(s, th.AsyncWait) else None)
    a, b, bias = rand(rng, (M, K), "float16"), rand(rng, (K, N), "float16"), rand(rng, N)
    good, bad = poisoned((M, N), "float16"), poisoned((M, N), "float16")
    run_thread_kernel(k, [a, b, bias, good])
    close(good, zoo.gemm_ref(a, b), rtol=1e-2, atol=5e-2)
    run_thread_kernel(broken, [a, b, bias, bad], check_races=False)  # reads stages whose copies have not landed
    assert not np.allclose(f64(bad), zoo.gemm_ref(a, b), rtol=1e-2, atol=5e-2, equal_nan=False)
    with pytest.raises(RaceError, match="async copy"):
        run_thread_kernel(broken, [a, b, bias, poisoned((M, N), "float16")], check_races=True)


def test_tma_pipeline_runs_and_its_waits_are_checked(rng):
    """sm_90 pipelines load through TMA: the emulator runs them (zero-filling ragged boxes), and a
    wait with the wrong phase parity (the GPU would hang) or a missing wait is reported."""
    from tilewright.interp.emulator import EmulatorError
    from tilewright.passes.pipeline import PassContext, run_pipeline

    M, N, K = 72, 136, 200  # ragged in every dimension; rows stay 16-byte aligned for TMA
    f = zoo.matmul(M, N, K, 64, 64, 32, "float16", stages=3)
    # the block-wide TMA pipeline (sm_90a warp-specializes it by default: test_warp_specialize)
    k = run_pipeline(f, PassContext(Target.parse(CUDA), {"tl.disable_warp_specialized": True}))
    assert k.tensor_maps, "an sm_90 pipelined GEMM should load its tiles through TMA"
    waits = []
    walk(k.body, lambda s: waits.append(s) if isinstance(s, th.MbarrierWait) else None)
    assert waits
    a, b, bias = rand(rng, (M, K), "float16"), rand(rng, (K, N), "float16"), rand(rng, N)
    out = poisoned((M, N), "float16")
    run_thread_kernel(k, [a, b, bias, out], check_races=True)
    close(out, zoo.gemm_ref(a, b), rtol=1e-2, atol=5e-2)
    flipped = _mutate(k, lambda s: th.MbarrierWait(s.bar, s.index, 1 - s.parity) if isinstance(s, th.MbarrierWait)
                      else None)
    with pytest.raises(EmulatorError, match="would hang"):
        run_thread_kernel(flipped, [a, b, bias, poisoned((M, N), "float16")])
    unwaited = _mutate(k, lambda s: [] if isinstance(s, th.MbarrierWait) else None)
    with pytest.raises(RaceError):
        run_thread_kernel(unwaited, [a, b, bias, poisoned((M, N), "float16")], check_races=True)


def test_compiled_program_is_cached(rng):
    from tilewright.interp import emulator

    k = lower(zoo.tiled_copy(64, 64, 64, 64, sliced=False), CUDA)
    a = rand(rng, (64, 64))
    run_thread_kernel(k, [a, poisoned((64, 64))])
    prog = emulator._program(k)
    run_thread_kernel(k, [a, poisoned((64, 64))])
    assert emulator._program(k) is prog


def test_logical_ops_with_a_uniform_left_side():
    """``uniform and per-lane`` / ``uniform or per-lane`` (a ragged-K guard ``k * bk + c < K and col < N``
    with ``k`` a loop variable): the right side alone decides and differs between lanes; it used to
    crash the emulator."""
    Out = gbuf("Out", 64, "float32")
    i = E.Var("i", "int32", kind="loop")

    def build(tx, bx):
        both = E.binary("and", i < 1, tx < 20)
        either = E.binary("or", i > 0, tx % 3 == 0)
        inside = E.Select(E.binary("and", i < 1, tx >= 40), E.as_expr(2.0), E.as_expr(3.0), "float32")
        body = t.SeqStmt([t.IfThenElse(both, store(Out, tx, load(Out, tx) + 1.0)),
                          t.IfThenElse(either, store(Out, tx, load(Out, tx) + 10.0)),
                          t.IfThenElse(tx >= 60, store(Out, tx, load(Out, tx) + inside))])
        return [store(Out, tx, 0.0), t.For(i, 0, 2, body)]

    k = hand_kernel([Out], build, 64, CUDA)
    out = poisoned(64)
    run_thread_kernel(k, [out])
    tx = np.arange(64)
    want = np.where(tx < 20, 1.0, 0.0) + np.where(tx % 3 == 0, 10.0, 0.0) + 10.0 + np.where(tx >= 60, 5.0, 0.0)
    np.testing.assert_array_equal(out, want)


def test_emulator_and_interpreter_do_not_need_scipy():
    """``erf`` is computed without scipy (not a dependency): run it with scipy made unimportable."""
    import subprocess
    import sys

    code = ("import sys; sys.modules['scipy'] = None; sys.modules['scipy.special'] = None\n"
            "import numpy as np, math\n"
            "import tilewright.interp.emulator, tilewright.interp.tile\n"
            "from tilewright.interp.emulator.mathfns import _erf\n"
            "x = np.linspace(-4, 4, 101)\n"
            "assert np.array_equal(_erf(x), [math.erf(v) for v in x])\n"
            "assert _erf(x.astype(np.float32)).dtype == np.float32\n"
            "assert not any(m.startswith('scipy') and sys.modules[m] for m in sys.modules)\n")
    root = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root,
                       env={**os.environ, "PYTHONPATH": str(root)})
    assert r.returncode == 0, r.stderr
