"""The test kernel zoo: T-language kernels shared by the interpreter, emulator and HIP codegen tests,
their float64 NumPy references, and small input helpers.

Kernels are written as TileLang users write them: builder functions whose arguments become closure
constants of a ``@T.prim_func``.  A Python ``if`` on such an argument keeps only the taken branch
while the kernel is read, so one builder serves several variants with exactly the IR each would have
on its own.  Row softmax is the library's ``tilewright.kernels.softmax``; the library GEMM, RMSNorm
and attention are not used here, because the test ones differ (a bias input and epilogue, a weight
vector, 2-D tensors with a ragged sequence).

Outputs are poisoned with NaN (:func:`poisoned`) before each run, so an element a kernel forgets to
write fails the comparison.
"""

import math

import ml_dtypes
import numpy as np

import tilewright.language as T

NP = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float32": np.float32, "float64": np.float64,
      "int8": np.int8, "int32": np.int32, "float8_e4m3fnuz": ml_dtypes.float8_e4m3fnuz,
      "float8_e4m3fn": ml_dtypes.float8_e4m3fn}

# (rtol, atol) of a GEMM's output against the float64 reference, by operand dtype
GEMM_TOL = {"float16": (1e-2, 2e-2), "bfloat16": (2e-2, 6e-2), "float32": (1e-5, 1e-5)}


# --------------------------------------------------------------------------------------------
# inputs and comparisons


def rand(rng, shape, dtype="float32", lo=-1.0, hi=1.0):
    """Uniform random values in [lo, hi), rounded to ``dtype``."""
    return rng.uniform(lo, hi, size=shape).astype(NP[dtype])


def poisoned(shape, dtype="float32"):
    """An output buffer full of NaN: an element the kernel does not write fails the comparison."""
    return np.full(shape, np.nan, dtype=NP[dtype])


def f64(x):
    return np.asarray(x).astype(np.float64)


def close(got, want, rtol=1e-5, atol=1e-5):
    """``got`` (any dtype, NaN fails) against a float64 reference."""
    np.testing.assert_allclose(f64(got), want, rtol=rtol, atol=atol)


# --------------------------------------------------------------------------------------------
# float64 references


def gemm_ref(a, b, trans_a=False, trans_b=False, bias=None, epilogue=None):
    """``op(a) @ op(b)``, then ``max(. + bias, 0)`` for the ``bias_relu`` epilogue."""
    a64, b64 = f64(a), f64(b)
    ref = (a64.T if trans_a else a64) @ (b64.T if trans_b else b64)
    if epilogue == "bias_relu":
        ref = np.maximum(ref + f64(bias), 0.0)
    return ref


def softmax_ref(x):
    """Softmax over the rows of a 2-D array."""
    x = f64(x)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def attention_ref(q, k, v):
    """``softmax(q k^T / sqrt(D)) v`` for (S, D) arrays."""
    return softmax_ref(f64(q) @ f64(k).T / math.sqrt(q.shape[1])) @ f64(v)


def rmsnorm_ref(x, w, eps=1e-6):
    x64 = f64(x)
    return x64 / np.sqrt((x64 ** 2).mean(axis=1, keepdims=True) + eps) * f64(w)


def layernorm_ref(x, g, b, eps=1e-5):
    x64 = f64(x)
    mu = x64.mean(axis=1, keepdims=True)
    return (x64 - mu) / np.sqrt(x64.var(axis=1, keepdims=True) + eps) * f64(g) + f64(b)


# --------------------------------------------------------------------------------------------
# elementwise and copies


def elementwise(N, block, op="add"):
    """``C = A + B`` (``op="add"``) or ``C = A * B + 1`` (``op="fma"``) over float32 vectors, a guarded
    scalar store per lane (N need not be a multiple of ``block``)."""

    @T.prim_func
    def add(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32"), C: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
            for i in T.Parallel(block):
                if bx * block + i < N:
                    if op == "add":
                        C[bx * block + i] = A[bx * block + i] + B[bx * block + i]
                    else:
                        C[bx * block + i] = A[bx * block + i] * B[bx * block + i] + 1.0

    return add


def elementwise_fragments(N, block):
    """``C = A * B + exp(B)`` through fragments: ragged tail read as zero, not written back."""

    @T.prim_func
    def fused(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32"), C: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
            a = T.alloc_fragment((block,), "float32")
            b = T.alloc_fragment((block,), "float32")
            T.copy(A[bx * block], a)  # the tail past N reads as zero
            T.copy(B[bx * block], b)
            for i in T.Parallel(block):
                a[i] = a[i] * b[i] + T.exp(b[i])
            T.copy(a, C[bx * block])  # the tail is not written

    return fused


def elementwise_activation(N, block):
    """``C = f16(tanh(A) * sigmoid(B) + relu(A))`` with a float16 A and C and a float32 B, guarded."""

    @T.prim_func
    def ew(A: T.Tensor((N,), "float16"), B: T.Tensor((N,), "float32"), C: T.Tensor((N,), "float16")):
        with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
            for i in T.Parallel(block):
                if bx * block + i < N:
                    x = T.cast(A[bx * block + i], "float32")
                    C[bx * block + i] = T.cast(T.tanh(x) * T.sigmoid(B[bx * block + i]) + T.max(x, 0.0), "float16")

    return ew


def tiled_copy(M, N, bm, bn, dtype="float32", via="shared", sliced=True):
    """``B = A`` in (bm, bn) tiles through a ``via`` ("shared" or "fragment") buffer; the store names
    its destination as a full slice (``sliced``) or by its corner."""

    @T.prim_func
    def copy(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            if via == "shared":
                tile = T.alloc_shared((bm, bn), dtype)
            else:
                tile = T.alloc_fragment((bm, bn), dtype)
            T.copy(A[by * bm, bx * bn], tile)
            if sliced:
                T.copy(tile, B[by * bm:(by + 1) * bm, bx * bn:(bx + 1) * bn])
            else:
                T.copy(tile, B[by * bm, bx * bn])

    return copy


def transpose(M, N, bm, bn):
    """``B = A^T`` (float16): a tile through shared memory, transposed in a fragment."""

    @T.prim_func
    def tr(A: T.Tensor((M, N), "float16"), B: T.Tensor((N, M), "float16")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=256) as (bx, by):
            tile = T.alloc_shared((bm, bn), "float16")
            out = T.alloc_fragment((bn, bm), "float16")
            T.copy(A[by * bm, bx * bn], tile)
            for j, i in T.Parallel(bn, bm):
                out[j, i] = tile[i, j]
            T.copy(out, B[bx * bn, by * bm])

    return tr


def convert_copy(M, N, bm, bn):
    """float32 X -> float16 Y and Z: converting on the way out of a fragment and on the way into shared."""

    @T.prim_func
    def conv(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float16"), Z: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            f32 = T.alloc_fragment((bm, bn), "float32")
            h = T.alloc_shared((bm, bn), "float16")
            T.copy(X[by * bm, bx * bn], f32)
            T.copy(f32, Y[by * bm, bx * bn])  # converts on the way out
            T.copy(X[by * bm, bx * bn], h)  # converts on the way in
            T.copy(h, Z[by * bm, bx * bn])

    return conv


# --------------------------------------------------------------------------------------------
# GEMM


def matmul(M, N, K, bm, bn, bk, dtype, accum="float32", out_dtype=None, trans_a=False, trans_b=False, stages=0,
           epilogue=None, threads=128, swizzle=0):
    """``C = op(A) @ op(B)`` (A is (K, M) when ``trans_a``, B is (N, K) when ``trans_b``), ``accum``
    accumulation, ``stages``-deep pipelined copies, optional ``T.use_swizzle(swizzle)``.  The bias
    argument is read only by ``epilogue="bias_relu"``: ``C = max(C + bias, 0)``."""
    out_dtype = out_dtype or dtype
    as_shape = (bk, bm) if trans_a else (bm, bk)
    bs_shape = (bn, bk) if trans_b else (bk, bn)

    @T.prim_func
    def gemm(A: T.Tensor((K, M) if trans_a else (M, K), dtype), B: T.Tensor((N, K) if trans_b else (K, N), dtype),
             bias: T.Tensor((N,), "float32"), C: T.Tensor((M, N), out_dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            A_s = T.alloc_shared(as_shape, dtype)
            B_s = T.alloc_shared(bs_shape, dtype)
            C_f = T.alloc_fragment((bm, bn), accum)
            if swizzle:
                T.use_swizzle(swizzle)
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                if trans_a:
                    T.copy(A[k * bk, by * bm], A_s)
                else:
                    T.copy(A[by * bm, k * bk], A_s)
                if trans_b:
                    T.copy(B[bx * bn, k * bk], B_s)
                else:
                    T.copy(B[k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_f, transpose_A=trans_a, transpose_B=trans_b)
            if epilogue == "bias_relu":
                for i, j in T.Parallel(bm, bn):
                    # columns past N would read past the end of bias: guard the read
                    C_f[i, j] = T.max(C_f[i, j] + T.if_then_else(bx * bn + j < N, bias[bx * bn + j], 0.0), 0.0)
            T.copy(C_f, C[by * bm, bx * bn])

    return gemm


def int8_gemm(M, N, K, bm, bn, bk):
    """``C = A @ B^T`` with int8 operands and an int32 accumulator (exact)."""

    @T.prim_func
    def gemm(A: T.Tensor((M, K), "int8"), B: T.Tensor((N, K), "int8"), C: T.Tensor((M, N), "int32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "int8")
            B_s = T.alloc_shared((bn, bk), "int8")
            C_f = T.alloc_fragment((bm, bn), "int32")
            T.clear(C_f)
            for k in T.serial(T.ceildiv(K, bk)):
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(B[bx * bn, k * bk], B_s)
                T.gemm(A_s, B_s, C_f, transpose_B=True)
            T.copy(C_f, C[by * bm, bx * bn])

    return gemm


def splitk_gemm(M, N, K, bm, bn, bk, splits):
    """float16 ``C += A @ B`` split over K into ``splits`` blocks, each adding its tile atomically
    into a float32 C (which starts at zero)."""

    @T.prim_func
    def gemm(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), splits, threads=128) as (bx, by, bz):
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn), "float16")
            C_f = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_f)
            for k in T.Pipelined(K // splits // bk, num_stages=2):
                T.copy(A[by * bm, bz * (K // splits) + k * bk], A_s)
                T.copy(B[bz * (K // splits) + k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_f)
            T.atomic_add(C[by * bm, bx * bn], C_f)

    return gemm


# --------------------------------------------------------------------------------------------
# softmax, norms, attention


def online_softmax(M, N, bm, bn):
    """Row softmax of a float16 (M, N) input in (bm, bn) column tiles: a running max and sum in a
    first pass (columns past N masked to -inf), the normalised values in a second."""

    @T.prim_func
    def softmax(X: T.Tensor((M, N), "float16"), Y: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(M, bm), threads=128) as bx:
            x = T.alloc_fragment((bm, bn), "float32")
            m_prev = T.alloc_fragment((bm,), "float32")
            m_cur = T.alloc_fragment((bm,), "float32")
            l_sum = T.alloc_fragment((bm,), "float32")
            l_cur = T.alloc_fragment((bm,), "float32")
            T.fill(m_cur, -T.infinity("float32"))
            T.fill(l_sum, 0.0)
            for k in T.Pipelined(T.ceildiv(N, bn), num_stages=2):
                T.copy(X[bx * bm, k * bn], x)
                for i, j in T.Parallel(bm, bn):  # columns past N must not count
                    x[i, j] = T.if_then_else(k * bn + j < N, x[i, j], -T.infinity("float32"))
                T.copy(m_cur, m_prev)
                T.reduce_max(x, m_cur, dim=1, clear=False)
                for i, j in T.Parallel(bm, bn):
                    x[i, j] = T.exp(x[i, j] - m_cur[i])
                T.reduce_sum(x, l_cur, dim=1)
                for i in T.Parallel(bm):
                    l_sum[i] = l_sum[i] * T.exp(m_prev[i] - m_cur[i]) + l_cur[i]
            for k in T.serial(T.ceildiv(N, bn)):
                T.copy(X[bx * bm, k * bn], x)
                for i, j in T.Parallel(bm, bn):
                    x[i, j] = T.exp(x[i, j] - m_cur[i]) / l_sum[i]
                T.copy(x, Y[bx * bm, k * bn])

    return softmax


def rmsnorm(M, N, bm, eps=1e-6):
    """float16 ``Y = X / sqrt(mean(X^2) + eps) * W`` per row, bm rows per block (see :func:`rmsnorm_ref`)."""

    @T.prim_func
    def norm(X: T.Tensor((M, N), "float16"), W: T.Tensor((N,), "float16"), Y: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(M, bm), threads=128) as bx:
            x = T.alloc_fragment((bm, N), "float32")
            sq = T.alloc_fragment((bm, N), "float32")
            ss = T.alloc_fragment((bm,), "float32")
            T.copy(X[bx * bm, 0], x)
            for i, j in T.Parallel(bm, N):
                sq[i, j] = x[i, j] * x[i, j]
            T.reduce_sum(sq, ss, dim=1)
            for i, j in T.Parallel(bm, N):
                x[i, j] = x[i, j] * T.rsqrt(ss[i] / N + eps) * W[j]
            T.copy(x, Y[bx * bm, 0])

    return norm


def layernorm(M, N, bm, eps=1e-5):
    """float32 ``Y = (X - mean) / sqrt(var + eps) * G + Bt`` per row (see :func:`layernorm_ref`)."""

    @T.prim_func
    def norm(X: T.Tensor((M, N), "float32"), G: T.Tensor((N,), "float32"), Bt: T.Tensor((N,), "float32"),
             Y: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(M, bm), threads=128) as bx:
            x = T.alloc_fragment((bm, N), "float32")
            d = T.alloc_fragment((bm, N), "float32")
            mean = T.alloc_fragment((bm,), "float32")
            var = T.alloc_fragment((bm,), "float32")
            T.copy(X[bx * bm, 0], x)
            T.reduce_sum(x, mean, dim=1)
            for i in T.Parallel(bm):
                mean[i] = mean[i] / N
            for i, j in T.Parallel(bm, N):
                d[i, j] = (x[i, j] - mean[i]) * (x[i, j] - mean[i])
            T.reduce_sum(d, var, dim=1)
            for i, j in T.Parallel(bm, N):
                x[i, j] = (x[i, j] - mean[i]) / T.sqrt(var[i] / N + eps) * G[j] + Bt[j]
            T.copy(x, Y[bx * bm, 0])

    return norm


def flash_attention(S, D, bm, bn, p_in_registers=True, policy=T.GemmWarpPolicy.Square, v_with_k=False,
                    threads=128):
    """Forward attention over float16 (S, D) tensors (S ragged): S = Q K^T in a fragment, online softmax
    in base 2, then P @ V with P a float16 fragment (TileLang's way) or staged in shared memory.
    ``policy`` is both gemms' warp policy; ``v_with_k`` loads the V tile next to the K tile (as
    TileLang's example does) instead of just before P @ V.  See :func:`attention_ref`."""
    scale = 1.0 / math.sqrt(D) * 1.44269504  # softmax in base 2

    @T.prim_func
    def attn(Q: T.Tensor((S, D), "float16"), K: T.Tensor((S, D), "float16"), V: T.Tensor((S, D), "float16"),
             O: T.Tensor((S, D), "float16")):
        with T.Kernel(T.ceildiv(S, bm), threads=threads) as bx:
            Q_s = T.alloc_shared((bm, D), "float16")
            K_s = T.alloc_shared((bn, D), "float16")
            V_s = T.alloc_shared((bn, D), "float16")
            s = T.alloc_fragment((bm, bn), "float32")
            if p_in_registers:
                p = T.alloc_fragment((bm, bn), "float16")
            else:
                p = T.alloc_shared((bm, bn), "float16")
            acc = T.alloc_fragment((bm, D), "float32")
            m_prev = T.alloc_fragment((bm,), "float32")
            m_cur = T.alloc_fragment((bm,), "float32")
            rescale = T.alloc_fragment((bm,), "float32")
            l_sum = T.alloc_fragment((bm,), "float32")
            l_cur = T.alloc_fragment((bm,), "float32")
            T.copy(Q[bx * bm, 0], Q_s)
            T.fill(acc, 0)
            T.fill(l_sum, 0)
            T.fill(m_cur, -T.infinity("float32"))
            for k in T.Pipelined(T.ceildiv(S, bn), num_stages=2):
                T.copy(K[k * bn, 0], K_s)
                if v_with_k:
                    T.copy(V[k * bn, 0], V_s)
                T.gemm(Q_s, K_s, s, transpose_B=True, clear_accum=True, policy=policy)
                for i, j in T.Parallel(bm, bn):
                    s[i, j] = T.if_then_else(k * bn + j < S, s[i, j], -T.infinity("float32"))
                T.copy(m_cur, m_prev)
                T.reduce_max(s, m_cur, dim=1, clear=False)
                for i in T.Parallel(bm):
                    rescale[i] = T.exp2(m_prev[i] * scale - m_cur[i] * scale)
                for i, j in T.Parallel(bm, bn):
                    s[i, j] = T.exp2(s[i, j] * scale - m_cur[i] * scale)
                T.reduce_sum(s, l_cur, dim=1)
                for i in T.Parallel(bm):
                    l_sum[i] = l_sum[i] * rescale[i] + l_cur[i]
                for i, j in T.Parallel(bm, D):
                    acc[i, j] *= rescale[i]
                T.copy(s, p)
                if not v_with_k:
                    T.copy(V[k * bn, 0], V_s)
                T.gemm(p, V_s, acc, policy=policy)
            for i, j in T.Parallel(bm, D):
                acc[i, j] /= l_sum[i]
            T.copy(acc, O[bx * bm, 0])

    return attn


# --------------------------------------------------------------------------------------------
# reductions, atomics, dynamic shapes


def column_sum(M, N, bm, bn, style="idiomatic"):
    """``S = X.sum(axis=0)`` (float32), folding (bm, bn) row tiles into a per-block partial:

    - ``"idiomatic"``: the TileLang idiom, ``T.clear`` an accumulator and fold each tile in with ``clear=False``;
    - ``"peeled"``: the first tile reduced with ``clear=True`` before the loop, the rest with ``clear=False``
      (the partial takes its layout from the reduction rather than from a ``T.clear`` of its own);
    - ``"fresh"``: each tile reduced into a fresh fragment, accumulated elementwise.

    Rows past M read as zero."""

    @T.prim_func
    def colsum(X: T.Tensor((M, N), "float32"), S: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, bn), threads=128) as bx:
            x = T.alloc_fragment((bm, bn), "float32")
            part = T.alloc_fragment((bn,), "float32")
            if style == "fresh":
                acc = T.alloc_fragment((bn,), "float32")
                T.clear(acc)
                for k in T.serial(T.ceildiv(M, bm)):
                    T.copy(X[k * bm, bx * bn], x)
                    T.reduce_sum(x, part, dim=0)
                    for j in T.Parallel(bn):
                        acc[j] = acc[j] + part[j]
                T.copy(acc, S[bx * bn])
            else:
                if style == "peeled":
                    T.copy(X[0, bx * bn], x)
                    T.reduce_sum(x, part, dim=0)
                else:
                    T.clear(part)
                for k in T.serial(1 if style == "peeled" else 0, T.ceildiv(M, bm)):
                    T.copy(X[k * bm, bx * bn], x)  # rows past M read as zero
                    T.reduce_sum(x, part, dim=0, clear=False)
                T.copy(part, S[bx * bn])

    return colsum


def row_reductions(M, N, ops):
    """Reductions of one (M, N) float32 tile, all through the same (M,) fragment: ``R[n]`` is row
    reduction ``ops[n]``, an ``(op, dim)`` or ``(op, dim, init)`` pair (``T.reduce_<op>`` along ``dim``;
    with ``init``, the fragment is filled with it first and folded in with ``clear=False``); ``Tot[0]``
    is the sum of row 0, a 1-D reduction to a single element."""
    steps = [(n, getattr(T, "reduce_" + op[0]), op[1], op[2] if len(op) > 2 else None) for n, op in enumerate(ops)]

    @T.prim_func
    def red(X: T.Tensor((M, N), "float32"), R: T.Tensor((len(ops), M), "float32"), Tot: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=128):
            x = T.alloc_fragment((M, N), "float32")
            r = T.alloc_fragment((M,), "float32")
            flat = T.alloc_fragment((N,), "float32")
            one = T.alloc_fragment((1,), "float32")
            T.copy(X, x)
            for n, reduce, dim, init in steps:  # unrolled while the kernel is read
                if init is not None:
                    T.fill(r, init)
                    reduce(x, r, dim=dim, clear=False)
                else:
                    reduce(x, r, dim=dim)
                T.copy(r, R[n, 0])
            T.copy(X[0, 0:N], flat)
            T.reduce_sum(flat, one, dim=0)
            T.copy(one, Tot)

    return red


def atomic_sum(N, block, with_max=False):
    """Per-element atomics from a guarded parallel loop: ``Tot[0] += A``, ``Tot[1] = max(Tot[1], A)``
    when ``with_max`` (Tot then has 2 elements), and an int32 ``Hist[i % 4] += 1``."""

    @T.prim_func
    def total(A: T.Tensor((N,), "float32"), Tot: T.Tensor((2 if with_max else 1,), "float32"),
              Hist: T.Tensor((4,), "int32")):
        with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
            for i in T.Parallel(block):
                if bx * block + i < N:
                    T.atomic_add(Tot[0], A[bx * block + i])
                    if with_max:
                        T.atomic_max(Tot[1], A[bx * block + i])
                    T.atomic_add(Hist[(bx * block + i) % 4], 1)

    return total


def dynamic_rows(N, bm):
    """``Y = 2 X + m`` for a (m, N) float32 X whose row count m is a ``T.dynamic`` size."""
    M = T.dynamic("m")

    @T.prim_func
    def scale_rows(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(M, bm), threads=128) as bx:
            x = T.alloc_fragment((bm, N), "float32")
            T.copy(X[bx * bm, 0], x)
            for i, j in T.Parallel(bm, N):
                x[i, j] = x[i, j] * 2.0 + T.cast(M, "float32")
            T.copy(x, Y[bx * bm, 0])

    return scale_rows
