"""Lowering bugs a differential fuzz found (issue 11, items 1, 2 and 6), as regression tests.

Each kernel runs on the interpreter and on the emulator for sm_90a (mma.sync, wave 32), gfx942 (MFMA,
wave 64) and gfx1100 (WMMA, wave 32), against a float64 NumPy reference, outputs poisoned with NaN.

1. Online-softmax row statistics after a GEMM: a row vector from ``T.reduce_*`` of a GEMM accumulator
   rescales a (bm, D) fragment laid out differently (so the loop reads it through a shared scratch)
   and then feeds ``l = l * sc + rs``.  The scratch redirect leaked out of that loop, so the later
   row loop read ``sc`` from a scratch the next reduction had reused: ``l`` was wrong from the second
   iteration on, ``o`` right.
2. ``kernels.flash_attention`` on CDNA: the same leak (there the two GEMMs use different MFMA shapes,
   so the row scale needs converting); the emulator's MFMA model was right (it agrees with AMD's
   matrix instruction calculator, pinned below).
6. "reduction grouping differs between threads" on rows the threads do not divide evenly (softmax
   N = 640 or odd N in 129..255 at 128 threads, rms_norm, several rows of 65 over 64 threads).
"""

import numpy as np
import pytest
from zoo import close, f64, poisoned

import tilewright
import tilewright.language as T
from tilewright.kernels import flash_attention, rms_norm, softmax

CUDA, GFX942, GFX90A, GFX1100 = "cuda -arch=sm_90a", "hip -arch=gfx942", "hip -arch=gfx90a", "hip -arch=gfx1100"
BACKENDS = ["interpret", CUDA, GFX942, GFX1100]


def run(func, target, *args):
    kw = {} if target == "interpret" else {"execution_backend": "emulator"}
    tilewright.compile(func, target=target, **kw)(*args)


# ============================================================================================
# 1. row statistics of a GEMM accumulator inside a serial loop


def online_row_stats(bm, bn, D, S, threads, op="max", clear=False, pv=True):
    """Per K block: ``s = Q K^T``; ``m = reduce_op(s)`` (folding the previous ``m`` unless ``clear``);
    ``sc`` from the old and new ``m``; ``o *= sc``; ``s = exp(s - m)`` for ``max``; ``rs = sum(s)``;
    ``l = l * sc + rs``; with ``pv``, ``o += f16(s) @ V``.  ``op="max"`` with ``pv`` is online softmax."""
    steps = S // bn

    @T.prim_func
    def row_stats(Q: T.Tensor((bm, D), "float16"), K: T.Tensor((S, D), "float16"), V: T.Tensor((S, D), "float16"),
                  O0: T.Tensor((bm, D), "float32"), O: T.Tensor((bm, D), "float32"), L: T.Tensor((bm,), "float32")):
        with T.Kernel(1, threads=threads):
            q = T.alloc_shared((bm, D), "float16")
            ks = T.alloc_shared((bn, D), "float16")
            vs = T.alloc_shared((bn, D), "float16")
            s = T.alloc_fragment((bm, bn), "float32")
            p = T.alloc_fragment((bm, bn), "float16")
            o = T.alloc_fragment((bm, D), "float32")
            m = T.alloc_fragment((bm,), "float32")
            mp = T.alloc_fragment((bm,), "float32")
            sc = T.alloc_fragment((bm,), "float32")
            rs = T.alloc_fragment((bm,), "float32")
            lsum = T.alloc_fragment((bm,), "float32")
            T.copy(Q, q)
            T.copy(O0, o)
            T.fill(lsum, 0)
            if op == "max":
                T.fill(m, -T.infinity("float32"))
            elif op == "min":
                T.fill(m, T.infinity("float32"))
            else:
                T.fill(m, 0)
            for k in T.serial(steps):
                T.copy(K[k * bn, 0], ks)
                T.clear(s)
                T.gemm(q, ks, s, transpose_B=True)
                T.copy(m, mp)
                if op == "max":
                    T.reduce_max(s, m, dim=1, clear=clear)
                elif op == "min":
                    T.reduce_min(s, m, dim=1, clear=clear)
                else:
                    T.reduce_sum(s, m, dim=1, clear=clear)
                for i in T.Parallel(bm):
                    if op == "max":
                        sc[i] = T.exp(mp[i] - m[i])
                    elif op == "min":
                        sc[i] = T.exp(m[i] - mp[i])
                    else:
                        sc[i] = T.exp((mp[i] - m[i]) * 0.125)
                for i, j in T.Parallel(bm, D):
                    o[i, j] *= sc[i]
                if op == "max":
                    for i, j in T.Parallel(bm, bn):
                        s[i, j] = T.exp(s[i, j] - m[i])
                T.reduce_sum(s, rs, dim=1)
                for i in T.Parallel(bm):
                    lsum[i] = lsum[i] * sc[i] + rs[i]
                if pv:
                    T.copy(V[k * bn, 0], vs)
                    T.copy(s, p)
                    T.gemm(p, vs, o)
            T.copy(o, O)
            T.copy(lsum, L)

    return row_stats


def online_row_stats_ref(q, k, v, o0, bn, op, clear, pv):
    """The same recurrence in float64 (the probabilities rounded to float16 before ``@ V``, as the kernel does)."""
    q, k, v = f64(q), f64(k), f64(v)
    bm = q.shape[0]
    o = f64(o0).copy()
    lsum = np.zeros(bm)
    m = np.full(bm, {"max": -np.inf, "min": np.inf, "sum": 0.0}[op])
    fold = {"max": np.maximum, "min": np.minimum, "sum": np.add}[op]
    red = {"max": np.max, "min": np.min, "sum": np.sum}[op]
    for kb in range(k.shape[0] // bn):
        s = q @ k[kb * bn:(kb + 1) * bn].T
        mp = m
        m = red(s, axis=1) if clear else fold(m, red(s, axis=1))
        with np.errstate(invalid="ignore"):
            sc = {"max": lambda: np.exp(mp - m), "min": lambda: np.exp(m - mp),
                  "sum": lambda: np.exp((mp - m) * 0.125)}[op]()
        o *= sc[:, None]
        if op == "max":
            s = np.exp(s - m[:, None])
        lsum = lsum * sc + s.sum(axis=1)
        if pv:
            o += f64(s.astype(np.float16)) @ v[kb * bn:(kb + 1) * bn]
    return o, lsum


def check_online_row_stats(target, bm, bn, D, S, threads, op="max", clear=False, pv=True, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.uniform(-1, 1, (bm, D)).astype(np.float16)
    k = rng.uniform(-1, 1, (S, D)).astype(np.float16)
    v = rng.uniform(-1, 1, (S, D)).astype(np.float16)
    o0 = rng.uniform(-1, 1, (bm, D)).astype(np.float32)
    o, lsum = poisoned((bm, D)), poisoned((bm,))
    run(online_row_stats(bm, bn, D, S, threads, op, clear, pv), target, q, k, v, o0, o, lsum)
    o_ref, l_ref = online_row_stats_ref(q, k, v, o0, bn, op, clear, pv)
    close(lsum, l_ref, rtol=1e-4, atol=1e-3)
    close(o, o_ref, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("target", BACKENDS)
@pytest.mark.parametrize("pv", [False, True])
def test_online_softmax_row_sum_after_gemm(target, pv):
    """The issue's kernel: bm=32, bn=64, D=32, S=128, 128 threads (``l`` was off by 0.5-7x); without
    ``P @ V`` the (bm, D) fragment is striped, with it a GEMM accumulator."""
    check_online_row_stats(target, 32, 64, 32, 128, 128, pv=pv)


@pytest.mark.parametrize("target", BACKENDS)
@pytest.mark.parametrize("bm, bn, D, S, threads, op, clear, pv", [
    (32, 32, 64, 96, 128, "max", False, True),  # D != bn the other way, three iterations
    (16, 64, 16, 128, 64, "min", False, False),  # reduce_min, no P @ V, two warps
    (64, 32, 32, 64, 256, "sum", True, False),  # reduce_sum, clear=True, 8 warps
    (32, 64, 128, 128, 128, "max", True, True),  # a wide (bm, D) fragment
])
def test_row_statistics_after_gemm_siblings(target, bm, bn, D, S, threads, op, clear, pv):
    check_online_row_stats(target, bm, bn, D, S, threads, op, clear, pv, seed=bm + bn + D)


def column_stats(bm, bn, D, S, threads):
    """The column-vector sibling: per K block, ``sc`` from the column maxima of ``s = Q K^T`` scales
    the columns of a (D, bn) fragment, then ``c = c * sc + colsum(s)``."""

    @T.prim_func
    def col_stats(Q: T.Tensor((bm, D), "float16"), K: T.Tensor((S, D), "float16"), W0: T.Tensor((D, bn), "float32"),
                  W: T.Tensor((D, bn), "float32"), C: T.Tensor((bn,), "float32")):
        with T.Kernel(1, threads=threads):
            q = T.alloc_shared((bm, D), "float16")
            ks = T.alloc_shared((bn, D), "float16")
            s = T.alloc_fragment((bm, bn), "float32")
            w = T.alloc_fragment((D, bn), "float32")
            m = T.alloc_fragment((bn,), "float32")
            sc = T.alloc_fragment((bn,), "float32")
            cs = T.alloc_fragment((bn,), "float32")
            c = T.alloc_fragment((bn,), "float32")
            T.copy(Q, q)
            T.copy(W0, w)
            T.fill(c, 1)
            for k in T.serial(S // bn):
                T.copy(K[k * bn, 0], ks)
                T.clear(s)
                T.gemm(q, ks, s, transpose_B=True)
                T.reduce_max(s, m, dim=0)
                for j in T.Parallel(bn):
                    sc[j] = T.exp(-T.abs(m[j]) * 0.25)
                for i, j in T.Parallel(D, bn):
                    w[i, j] *= sc[j]
                T.reduce_sum(s, cs, dim=0)
                for j in T.Parallel(bn):
                    c[j] = c[j] * sc[j] + cs[j]
            T.copy(w, W)
            T.copy(c, C)

    return col_stats


@pytest.mark.parametrize("target", BACKENDS)
def test_column_statistics_after_gemm(target):
    bm, bn, D, S = 64, 32, 64, 96
    rng = np.random.default_rng(3)
    q = rng.uniform(-1, 1, (bm, D)).astype(np.float16)
    k = rng.uniform(-1, 1, (S, D)).astype(np.float16)
    w0 = rng.uniform(-1, 1, (D, bn)).astype(np.float32)
    w, c = poisoned((D, bn)), poisoned((bn,))
    run(column_stats(bm, bn, D, S, 256), target, q, k, w0, w, c)
    w_ref, c_ref = f64(w0).copy(), np.ones(bn)
    for kb in range(S // bn):
        s = f64(q) @ f64(k[kb * bn:(kb + 1) * bn]).T
        sc = np.exp(-np.abs(s.max(axis=0)) * 0.25)
        w_ref *= sc[None, :]
        c_ref = c_ref * sc + s.sum(axis=0)
    close(w, w_ref, rtol=1e-5, atol=1e-5)
    close(c, c_ref, rtol=1e-4, atol=1e-4)


# ============================================================================================
# 2. flash attention on CDNA


def attention_ref_4d(q, k, v):
    qd, kd, vd = (f64(x)[0, :, 0, :] for x in (q, k, v))
    s = qd @ kd.T / np.sqrt(q.shape[-1])
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ vd


@pytest.mark.parametrize("target", ["interpret", CUDA, GFX942, GFX90A, GFX1100])
@pytest.mark.parametrize("S, D, block_M, block_N, threads", [(128, 32, 32, 64, 128), (128, 64, 64, 32, 256)])
def test_flash_attention_mixed_mfma_shapes(target, S, D, block_M, block_N, threads):
    """(1, 1, S=128, D=32, 32x64 blocks, one stage, 128 threads) had a max error of 0.15 on CDNA."""
    rng = np.random.default_rng(S + D)
    q, k, v = (rng.standard_normal((1, S, 1, D)).astype(np.float16) for _ in range(3))
    o = poisoned((1, S, 1, D), "float16")
    run(flash_attention(1, 1, S, D, block_M=block_M, block_N=block_N, num_stages=1, threads=threads), target,
        q, k, v, o)
    close(o[0, :, 0, :], attention_ref_4d(q, k, v), rtol=2e-3, atol=2e-3)


def test_mfma_lane_layouts_match_amds_calculator():
    """The records the lowering and the emulator share, against AMD's Matrix Instruction Calculator
    (``-d``, CDNA3): v_mfma_f32_32x32x8_f16 "A i: lane % 32, A k: 4 * floor(lane / 32) + e",
    "C or D i: 8 * floor(GPR / 4) % 32 + 4 * floor(lane / 32) + GPR % 4, j: lane % 32";
    v_mfma_f32_16x16x16_f16 "A k: 4 * floor(lane / 16) + e", "C or D i: 4 * floor(lane / 16) + GPR % 4"."""
    from tilewright.target.base import Target

    instrs = {(i.m, i.n, i.k): i for i in Target.parse(GFX942).matrix_instr_for("float16", "float16", "float32")}
    big, small = instrs[(32, 32, 8)], instrs[(16, 16, 16)]
    for lane in range(64):
        for e in range(16):
            assert big.c_index(lane, e) == (8 * (e // 4) % 32 + 4 * (lane // 32) + e % 4, lane % 32)
        for e in range(4):
            assert big.a_index(lane, e) == (lane % 32, 4 * (lane // 32) + e)
            assert big.b_index(lane, e) == (4 * (lane // 32) + e, lane % 32)
            assert small.c_index(lane, e) == (4 * (lane // 16) + e, lane % 16)
            assert small.a_index(lane, e) == (lane % 16, 4 * (lane // 16) + e)


# ============================================================================================
# 6. rows the threads do not divide evenly


def softmax64(x):
    e = np.exp(f64(x) - f64(x).max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def rms64(x, eps=1e-6):
    return f64(x) / np.sqrt((f64(x) ** 2).mean(axis=1, keepdims=True) + eps)


@pytest.mark.parametrize("target", BACKENDS)
@pytest.mark.parametrize("N, block_M, threads", [(640, 1, 128), (129, 1, 128), (255, 2, 128), (1152, 1, 128),
                                                 (65, 2, 64), (100, 3, 64), (384, 1, 192), (640, 1, 192)])
def test_softmax_ragged_rows(target, N, block_M, threads):
    """Rows the threads do not divide evenly; 192 threads: a thread count that is not a power of two
    (the shuffle tree's partner ``tid ^ 64`` does not exist for every thread)."""
    M = 2 * block_M + 1  # a ragged last row block
    x = np.random.default_rng(N).standard_normal((M, N)).astype(np.float32)
    y = poisoned((M, N))
    run(softmax(M, N, block_M=block_M, threads=threads), target, x, y)
    close(y, softmax64(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("target", BACKENDS)
@pytest.mark.parametrize("N, block_M, threads", [(640, 1, 128), (201, 1, 128), (130, 2, 64)])
def test_rms_norm_ragged_rows(target, N, block_M, threads):
    M = 2 * block_M + 1
    x = np.random.default_rng(N).standard_normal((M, N)).astype(np.float16)
    y = poisoned((M, N), "float16")
    run(rms_norm(M, N, block_M=block_M, threads=threads), target, x, y)
    close(y, rms64(x), rtol=2e-3, atol=2e-3)


def row_and_column_stats(M, N, threads, op, clear):
    """One fragment reduced along both dimensions (no single layout suits both: one of them goes
    through shared memory), the destinations starting at 0.5 for ``clear=False``."""

    @T.prim_func
    def both(X: T.Tensor((M, N), "float32"), R: T.Tensor((M,), "float32"), C: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=threads):
            x = T.alloc_fragment((M, N), "float32")
            r = T.alloc_fragment((M,), "float32")
            c = T.alloc_fragment((N,), "float32")
            T.copy(X, x)
            T.fill(r, 0.5)
            T.fill(c, 0.5)
            if op == "sum":
                T.reduce_sum(x, r, dim=1, clear=clear)
                T.reduce_sum(x, c, dim=0, clear=clear)
            elif op == "max":
                T.reduce_max(x, r, dim=1, clear=clear)
                T.reduce_max(x, c, dim=0, clear=clear)
            else:
                T.reduce_min(x, r, dim=1, clear=clear)
                T.reduce_min(x, c, dim=0, clear=clear)
            T.copy(r, R)
            T.copy(c, C)

    return both


@pytest.mark.parametrize("target", BACKENDS)
@pytest.mark.parametrize("M, N, threads, op, clear", [(3, 130, 64, "sum", True), (2, 65, 64, "max", False),
                                                      (5, 7, 64, "min", True)])
def test_rows_and_columns_of_one_fragment(target, M, N, threads, op, clear):
    x = np.random.default_rng(M * N).standard_normal((M, N)).astype(np.float32)
    r, c = poisoned((M,)), poisoned((N,))
    run(row_and_column_stats(M, N, threads, op, clear), target, x, r, c)
    red = {"sum": np.sum, "max": np.max, "min": np.min}[op]
    fold = {"sum": np.add, "max": np.maximum, "min": np.minimum}[op]
    want_r, want_c = red(f64(x), axis=1), red(f64(x), axis=0)
    if not clear:
        want_r, want_c = fold(want_r, 0.5), fold(want_c, 0.5)
    close(r, want_r, rtol=1e-5, atol=1e-5)
    close(c, want_c, rtol=1e-5, atol=1e-5)


def reduce_then_broadcast(M, N, threads, op, dim, clear):
    """One reduction of a ragged (M, N) fragment along ``dim`` (into a vector starting at 0.5 for
    ``clear=False``), then ``x - r`` broadcast back over the tile."""
    L = N if dim == 0 else M

    @T.prim_func
    def red_bcast(X: T.Tensor((M, N), "float32"), R: T.Tensor((L,), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=threads):
            x = T.alloc_fragment((M, N), "float32")
            r = T.alloc_fragment((L,), "float32")
            T.copy(X, x)
            T.fill(r, 0.5)
            if op == "sum":
                T.reduce_sum(x, r, dim=dim, clear=clear)
            elif op == "max":
                T.reduce_max(x, r, dim=dim, clear=clear)
            elif op == "min":
                T.reduce_min(x, r, dim=dim, clear=clear)
            else:
                T.reduce_abssum(x, r, dim=dim, clear=clear)
            for i, j in T.Parallel(M, N):
                if dim == 1:
                    x[i, j] = x[i, j] - r[i]
                else:
                    x[i, j] = x[i, j] - r[j]
            T.copy(r, R)
            T.copy(x, Y)

    return red_bcast


@pytest.mark.parametrize("target", BACKENDS)
@pytest.mark.parametrize("M, N, threads, op, dim, clear", [
    (5, 64, 64, "sum", 0, False), (9, 64, 128, "abssum", 0, False), (16, 227, 128, "max", 1, True),
    (2, 297, 256, "min", 1, False), (9, 69, 64, "sum", 1, True), (4, 209, 64, "abssum", 1, True)])
def test_reduce_then_broadcast_ragged(target, M, N, threads, op, dim, clear):
    x = np.random.default_rng(M + N).standard_normal((M, N)).astype(np.float32)
    r, y = poisoned((N if dim == 0 else M,)), poisoned((M, N))
    run(reduce_then_broadcast(M, N, threads, op, dim, clear), target, x, r, y)
    red = {"sum": np.sum, "max": np.max, "min": np.min, "abssum": lambda a, axis: np.abs(a).sum(axis=axis)}[op]
    want = red(f64(x), axis=dim)
    if not clear:
        want = (np.add if op in ("sum", "abssum") else np.maximum if op == "max" else np.minimum)(want, 0.5)
    close(r, want, rtol=1e-5, atol=1e-5)
    close(y, f64(x) - (want[:, None] if dim == 1 else want[None, :]), rtol=1e-5, atol=1e-5)


def row_scale(M, N, threads):
    """A row vector used against a ragged (M, N) fragment (it cannot take the projection of its layout)."""

    @T.prim_func
    def scale(X: T.Tensor((M, N), "float32"), S: T.Tensor((M,), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=threads):
            x = T.alloc_fragment((M, N), "float32")
            s = T.alloc_fragment((M,), "float32")
            T.copy(X, x)
            T.copy(S, s)
            for i, j in T.Parallel(M, N):
                x[i, j] = x[i, j] * s[i] + s[i]
            T.copy(x, Y)

    return scale


@pytest.mark.parametrize("target", BACKENDS)
def test_row_vector_against_ragged_rows(target):
    M, N = 3, 130
    rng = np.random.default_rng(7)
    x, s = rng.standard_normal((M, N)).astype(np.float32), rng.standard_normal(M).astype(np.float32)
    y = poisoned((M, N))
    run(row_scale(M, N, 64), target, x, s, y)
    close(y, f64(x) * f64(s)[:, None] + f64(s)[:, None], rtol=1e-6, atol=1e-6)


def test_power_of_two_rows_keep_the_striped_layout():
    """The fix for ragged rows leaves the common case alone: rows of 8192 stay striped (vectorized
    across the row, reduced by shuffles), so their generated code is what it was."""
    import copy

    from tilewright.passes.pipeline import TILE_PASSES, PassContext
    from tilewright.target.base import Target

    ctx = PassContext(Target.parse(CUDA))
    for f in (softmax(64, 8192), rms_norm(64, 8192)):
        work = copy.copy(f)
        work.attrs = dict(f.attrs)
        for p in TILE_PASSES["cuda"]:  # up to infer_layouts
            work = p(work, ctx)
            if p.__name__ == "infer_layouts":
                break
        kinds = {b.name: lay.kind for b, lay in work.plans.fragment_layouts.items()}
        assert set(kinds.values()) == {"striped", "reduced"}, kinds


def _inplace_update(n=256, threads=128):
    @T.prim_func
    def f(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=threads):
            S = T.alloc_shared((n,), "float32")
            T.copy(A, S)
            for i in T.Parallel(n):
                S[i] = S[i] * 2.0
            T.copy(S, B)

    return f


@pytest.mark.parametrize("n, threads", [(256, 128), (64, 128), (1024, 512)])
def test_inplace_update_over_a_replicated_layout_is_done_once(n, threads):
    """Positions held by two replicas (threads t and t + 64 when 256 floats are spread 4 a thread):
    only one replica may store, or the other reads the updated value and doubles it again (a race
    on the GPU; the lockstep emulator happened to read first)."""
    import re

    f = _inplace_update(n, threads)
    for target in (CUDA, GFX942):
        k = tilewright.compile(f, target=target, execution_backend="emulator")
        a = np.random.default_rng(n).standard_normal(n).astype(np.float32)
        b = np.full(n, np.nan, np.float32)
        k(a, b)
        np.testing.assert_allclose(b, 2 * a.astype(np.float64), rtol=1e-6)
    src = tilewright.compile(f, target=CUDA, execution_backend="emulator").get_kernel_source()
    body = src[src.index("__global__"):]
    stores = [m.start() for m in re.finditer(r"\*reinterpret_cast<uint4\*>\(&S\[|\n\s*S\[[^\n]*\] = ", body)]
    guards = [m.start() for m in re.finditer(r"if \(\(\(\(\(int\)threadIdx\.x\) & \d+\) == 0\)\)", body)]
    assert stores, body
    if n * 1 < threads * 4:  # replicated: every shared store sits inside a replica guard's block
        assert guards and all(any(0 < s - g and body[g:s].count("{") > body[g:s].count("}") for g in guards)
                              for s in stores), body


def test_inplace_update_beside_register_writes_over_replicas_is_refused():
    """Replicas must all run a body that writes registers, and would read S while one of them
    stores it: no thread order gives that one meaning, so the kernel is refused with a hint."""
    @T.prim_func
    def f(A: T.Tensor((256,), "float32"), B: T.Tensor((256,), "float32"), C: T.Tensor((256,), "float32")):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((256,), "float32")
            F = T.alloc_fragment((256,), "float32")
            T.copy(A, S)
            for i in T.Parallel(256):
                F[i] = S[i] + 1.0
                S[i] = S[i] * 2.0
            T.copy(S, B)
            T.copy(F, C)

    with pytest.raises(tilewright.CompileError, match="updates S in place") as e:
        tilewright.compile(f, target=CUDA, execution_backend="emulator")
    assert "T.Parallel loop of its own" in str(e.value)


def test_round_means_half_away_from_zero_on_every_target():
    """T.round(x, "ties-away-from-zero") is C's roundf everywhere (CUDA, HIP, interpreter, emulator);
    HIP printed rintf (half to even) before, so 2.5 became 2 on AMD and 3 elsewhere.  (Plain
    T.round is TileLang's: halves to even, tests/test_regress_crashes.py and tests/test_cast_modes.py.)"""
    @T.prim_func
    def f(A: T.Tensor((8,), "float32"), B: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=64):
            for i in T.Parallel(8):
                B[i] = T.round(A[i], "ties-away-from-zero")

    a = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 2.4, -2.6, 3.5], np.float32)
    want = np.sign(a) * np.floor(np.abs(a.astype(np.float64)) + 0.5)
    for target in ("interpret", CUDA, GFX942, GFX1100):
        b = poisoned(8)
        tilewright.compile(f, target=target, execution_backend=None if target == "interpret" else "emulator")(a, b)
        np.testing.assert_array_equal(b, want)
    src = tilewright.compile(f, target=GFX942, execution_backend="emulator").get_kernel_source()
    assert "tw_roundf" in src and "tw_rintf(" not in src.split("__global__")[-1]
