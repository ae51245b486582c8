"""Fuzz templates for the features of sessions 6-7 that the other templates do not reach.

- ``user_fragment``: a fragment laid out by the program (``T.annotate_layout({x: T.Fragment(...)})``:
  columns split over a range of threads, rows then columns over threads, or a flat cyclic map),
  filled by ``T.copy`` or a ``T.Parallel`` loop, combined with a fragment of the compiler's own
  layout (read through shared memory where the threads differ), reduced along its rows into a
  default or replicated user layout, copied out.
- ``store_driven``: ``T.Parallel`` loops storing to a fragment at other positions than their own: a
  transpose (``t[j, i] = s[i, j]``), a slice cleared through an alias (``x = c[:a, :b]; T.clear(x)``),
  a reshaped view updated in place and reduced; the source from a copy or a gemm accumulator.
- ``widen``: a fragment declared smaller than the ``T.Parallel`` loops that index it (TileLang's
  attention-sink pattern), widened by the frontend.
- ``vectorized``: ``T.vectorized`` loops each thread runs: scaled copies with an invariant-index
  operand, a local accumulator, a loop-carried prefix sum, a block-uniform fill, odd lengths.
- ``fp8_cast``: conversions to the 8-bit floats (saturating by default: satfinite; ``sat=False``
  keeps infinity/NaN), by ``T.cast``, a store of a float32 value, ``T.copy`` of a float32 fragment,
  fp8 arithmetic; inputs include values beyond the largest finite one and infinities.  The
  reference rounds with ml_dtypes after clipping to the largest finite value.
- ``view_copy``: ``T.copy(view[i, j], tile)`` and back, where the view merges dimensions of the
  tensor (``T.reshape`` or ``T.Tensor(shape, dtype, A.data)``) and tiles overhang its end.
- ``reduce_acc``: ``T.reduce_*(clear=False)`` accumulating over a ``T.serial`` loop of tiles, odd
  2-D and 3-D shapes, every reduced dimension, fp16/bf16/fp32 sources.
- ``tile_atomic``: ``T.atomic_add`` of a whole tile (fragment or shared, or a scalar broadcast over a
  region) from several blocks into the same ragged output.

Sizes are small: the emulator runs every thread of every block.  Every reference is plain NumPy in
float64 (fp8: ml_dtypes rounding), written without the compiler's helpers.
"""

from __future__ import annotations

import warnings

import numpy as np

from .. import language as T
from ..errors import TilewrightWarning
from ..ir import dtype as dt
from .templates import Case, Template, _f64, _poison, _rand, _tol

F_DTYPES = ("float32", "float16", "bfloat16")


def _round_to(x, dtype):
    return _f64(np.asarray(x).astype(dt.to_numpy(dtype)))


# ---------------------------------------------------------------- T.Fragment layouts given by the program
def _draw_user_fragment(rng):
    kind = str(rng.choice(("cols", "rows", "flat", "cols_rep", "split_fns")))
    vec = int(rng.choice((1, 2, 4, 8)))
    threads = int(rng.choice((64, 128, 256)))
    reps = 2 if kind == "cols_rep" else 1  # x itself replicated over two groups of threads
    nt = int(rng.choice([t for t in (8, 16, 32, 64, 128) if t * reps <= threads]))
    rows = int(rng.choice((1, 2, 3, 4)))
    if kind == "rows":  # each row over its own group of nt // rows threads (nt a multiple of rows)
        rows = int(rng.choice([r for r in (1, 2, 4) if nt % r == 0 and nt // r >= 1]))
    # a reduction needs a warp-aligned power-of-two range: offsets of whole 64-thread waves
    off = int(rng.choice([o for o in range(0, threads - nt * reps + 1, 32)]))
    return {"kind": kind, "vec": vec, "threads": threads, "nt": nt, "rows": rows, "off": off,
            "fill": str(rng.choice(("copy", "loop", "fill_then_add"))),
            "other": str(rng.choice(("none", "global", "fragment", "mirror"))),
            "reduce": str(rng.choice(("none", "sum", "max", "sum_replicated"))),
            "dtype": str(rng.choice(F_DTYPES)), "scale": float(rng.choice((0.5, -1.0, 3.0)))}


def _user_fragment_layout(p, shape, fn):
    """The ``T.Fragment`` of the drawn kind (``fn`` from ``_user_shape_and_fn``)."""
    kind, vec, nt, off = p["kind"], p["vec"], p["nt"], p["off"]
    if kind == "cols_rep":
        return T.Fragment(shape, forward_fn=lambda i, j, rep: (off + rep * nt + j // vec, i * vec + j % vec),
                          replicate=2)
    if kind == "split_fns":
        return T.Fragment(shape, forward_thread_fn=lambda i, j: fn(i, j)[0], forward_index_fn=lambda i, j: fn(i, j)[1])
    return T.Fragment(shape, forward_fn=fn)


def _user_shape_and_fn(p):
    kind, vec, nt, rows, off = p["kind"], p["vec"], p["nt"], p["rows"], p["off"]
    if kind in ("cols", "cols_rep", "split_fns"):  # every row over the same nt threads, vec columns a thread
        width = nt * vec
        return (rows, width), (lambda i, j: (off + j // vec, i * vec + j % vec))
    if kind == "rows":  # row i over threads off + i * g ... (g = nt // rows), vec columns a thread
        g = nt // rows
        width = g * vec
        return (rows, width), (lambda i, j: (off + i * g + j // vec, j % vec))
    width = nt * vec // 2 if nt * vec >= 16 else nt * vec  # flat: runs of vec elements dealt round nt threads
    W = width

    def flat(i, j):
        idx = i * W + j
        return off + idx // vec % nt, idx // (vec * nt) * vec + idx % vec

    return (rows, width), flat


def _make_user_fragment(p) -> Case:
    (R, W), fn = _user_shape_and_fn(p)
    dtype, scale, other, red = p["dtype"], p["scale"], p["other"], p["reduce"]
    red_nt = p["nt"] if p["kind"] in ("cols", "split_fns") else 0  # one row's threads: a replicated result there
    replicated = red == "sum_replicated" and red_nt > 0
    reducer = T.reduce_max if red == "max" else T.reduce_sum
    off = p["off"]

    @T.prim_func
    def user(X: T.Tensor((R, W), dtype), Y: T.Tensor((R, W), dtype), Out: T.Tensor((R, W), "float32"),
             RowOut: T.Tensor((R,), "float32")):
        with T.Kernel(1, threads=p["threads"]):
            x = T.alloc_fragment((R, W), "float32")
            y = T.alloc_fragment((R, W), "float32")
            r = T.alloc_fragment((R,), "float32")
            if replicated:
                T.annotate_layout({x: _user_fragment_layout(p, (R, W), fn),
                                   r: T.Fragment((R,), forward_fn=lambda i, rep: (off + rep, i), replicate=red_nt)})
            else:
                T.annotate_layout({x: _user_fragment_layout(p, (R, W), fn)})
            if p["fill"] == "copy":
                T.copy(X, x)
            elif p["fill"] == "loop":
                for i, j in T.Parallel(R, W):
                    x[i, j] = X[i, j]
            else:
                T.fill(x, 1.0)
                for i, j in T.Parallel(R, W):
                    x[i, j] = x[i, j] + X[i, j] - 1.0
            if other in ("fragment", "mirror"):
                T.copy(Y, y)
            if other == "mirror":  # y (the compiler's layout) from x read at mirrored positions
                for i, j in T.Parallel(R, W):
                    y[i, j] = y[i, j] + x[R - 1 - i, W - 1 - j]
            for i, j in T.Parallel(R, W):
                if other == "global":
                    x[i, j] = x[i, j] * scale + Y[i, j]
                elif other in ("fragment", "mirror"):
                    x[i, j] = x[i, j] * scale + y[i, j]
                else:
                    x[i, j] = x[i, j] * scale
            if red != "none":
                reducer(x, r, dim=1)
                for i in T.Parallel(R):
                    RowOut[i] = r[i]
            else:
                for i in T.Parallel(R):
                    RowOut[i] = x[i, 0]
            T.copy(x, Out)

    rng = np.random.default_rng(p.get("seed", 0))
    a, b = _rand(rng, (R, W), dtype), _rand(rng, (R, W), dtype)
    fa, fb = _f64(a), _f64(b)
    if other == "mirror":
        fb = fb + fa[::-1, ::-1]
    want = fa * scale + (fb if other != "none" else 0)
    rows = want.max(1) if red == "max" else want.sum(1) if red != "none" else want[:, 0]
    rtol, atol = _tol("float32", k=W)
    return Case("user_fragment", p, user, [a, b, _poison((R, W), "float32"), _poison((R,), "float32")],
                {2: want, 3: rows}, rtol, max(atol, 1e-5 * W))


# ---------------------------------------------------------------- stores to other positions of a fragment
def _draw_store_driven(rng):
    return {"variant": str(rng.choice(("transpose", "slice_clear", "reshape", "offset"))),
            "src": str(rng.choice(("copy", "gemm"))), "m": int(rng.choice((16, 32, 64))),
            "n": int(rng.choice((16, 32, 64))), "k": int(rng.choice((16, 32))),
            "a": int(rng.integers(1, 65)), "b": int(rng.integers(1, 65)), "h": int(rng.choice((2, 4, 8))),
            "threads": int(rng.choice((64, 128, 256))), "reduce": bool(rng.random() < 0.5)}


def _make_store_driven(p) -> Case:
    M, N, K, variant, src, th = p["m"], p["n"], p["k"], p["variant"], p["src"], p["threads"]
    a_cut, b_cut = min(p["a"], M), min(p["b"], N)
    if variant == "offset":  # rows [0, a) and [M - a, M) disjoint: no element both read and written
        a_cut = min(a_cut, M // 2)
    H = p["h"] if N % p["h"] == 0 else 2
    Q = N // H
    do_red = p["reduce"]
    red_len = N if variant == "transpose" else M  # the transposed tile is (N, M): its rows are reduced
    red_shape = (N,) if variant == "transpose" else (M, Q) if variant == "reshape" else (M,)
    out_shape = (N, M) if variant == "transpose" else (M, N)

    @T.prim_func
    def stores(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), Xin: T.Tensor((M, N), "float32"),
               W: T.Tensor((Q, H), "float32"), Out: T.Tensor(out_shape, "float32"),
               Red: T.Tensor(red_shape, "float32")):
        with T.Kernel(1, threads=th):
            a_s = T.alloc_shared((M, K), "float16")
            b_s = T.alloc_shared((K, N), "float16")
            c = T.alloc_fragment((M, N), "float32")
            if src == "gemm":
                T.copy(A, a_s)
                T.copy(B, b_s)
                T.clear(c)
                T.gemm(a_s, b_s, c)
            else:
                T.copy(Xin, c)
            if variant == "transpose":
                t_ = T.alloc_fragment((N, M), "float32")
                rt = T.alloc_fragment((N,), "float32")
                for i, j in T.Parallel(M, N):
                    t_[j, i] = c[i, j] * 2.0 - 1.0
                if do_red:
                    T.reduce_sum(t_, rt, dim=1)
                    T.copy(rt, Red)
                T.copy(t_, Out)
            elif variant == "offset":  # a loop over a corner storing to the opposite corner
                ro = T.alloc_fragment((M,), "float32")
                for i, j in T.Parallel(a_cut, b_cut):
                    c[M - a_cut + i, N - b_cut + j] = c[i, j] + 3.0
                if do_red:
                    T.reduce_max(c, ro, dim=1)
                    T.copy(ro, Red)
                T.copy(c, Out)
            elif variant == "slice_clear":
                x = c[:a_cut, :b_cut]
                T.clear(x)
                rr = T.alloc_fragment((M,), "float32")
                if do_red:
                    T.reduce_sum(c, rr, dim=1)
                    T.copy(rr, Red)
                T.copy(c, Out)
            else:
                s3 = T.reshape(c, (M, Q, H))
                w = T.alloc_fragment((Q, H), "float32")
                lg = T.alloc_fragment((M, Q), "float32")
                T.copy(W, w)
                for n, q, h in T.Parallel(M, Q, H):
                    s3[n, q, h] = T.max(s3[n, q, h], 0.0) * w[q, h]
                if do_red:
                    T.reduce_sum(s3, lg, dim=-1)
                    T.copy(lg, Red)
                T.copy(c, Out)

    rng = np.random.default_rng(p.get("seed", 0))
    a, b = _rand(rng, (M, K), "float16"), _rand(rng, (K, N), "float16")
    xin, w = _rand(rng, (M, N), "float32"), _rand(rng, (Q, H), "float32")
    base = _f64(a) @ _f64(b) if src == "gemm" else _f64(xin)
    if variant == "transpose":
        out = (base * 2.0 - 1.0).T
        red = out.sum(1)
    elif variant == "slice_clear":
        out = base.copy()
        out[:a_cut, :b_cut] = 0.0
        red = out.sum(1)
    elif variant == "offset":
        out = base.copy()
        out[M - a_cut:, N - b_cut:] = base[:a_cut, :b_cut] + 3.0
        red = out.max(1)
    else:
        out = (np.maximum(base.reshape(M, Q, H), 0) * _f64(w)[None]).reshape(M, N)
        red = out.reshape(M, Q, H).sum(-1)
    expected = {4: out}
    if do_red:
        expected[5] = red
    rtol, atol = _tol("float16", "float32", k=max(K, red_len))
    return Case("store_driven", p, stores, [a, b, xin, w, _poison(out_shape, "float32"),
                                            _poison(red_shape, "float32")], expected, rtol, max(atol, 1e-3 * K))


# ---------------------------------------------------------------- fragments widened to the loops that index them
def _draw_widen(rng):
    return {"heads": int(rng.choice((1, 2, 3, 8))), "bm": int(rng.choice((16, 32, 64, 128))),
            "dim": int(rng.choice((8, 16, 32))), "threads": int(rng.choice((64, 128, 256))),
            "value": str(rng.choice(("uniform", "per_row", "const"))), "use": str(rng.choice(("add", "exp2", "max")))}


def _make_widen(p) -> Case:
    heads, bm, dim, value, use = p["heads"], p["bm"], p["dim"], p["value"], p["use"]

    with warnings.catch_warnings():  # the frontend says it widened the fragment: expected here
        warnings.simplefilter("ignore", TilewrightWarning)

        @T.prim_func
        def widen(S: T.Tensor((heads,), "float32"), P: T.Tensor((heads, bm), "float32"),
                  X: T.Tensor((heads, bm, dim), "float32"), Out: T.Tensor((heads, bm), "float32")):
            with T.Kernel(heads, threads=p["threads"]) as by:
                x = T.alloc_fragment((bm, dim), "float32")
                s = T.alloc_fragment((bm,), "float32")
                sinks = T.alloc_fragment([heads], "float32")
                T.copy(X[by, 0, 0], x)
                for i in T.Parallel(bm):
                    if value == "uniform":
                        sinks[i] = S[by]
                    elif value == "per_row":
                        sinks[i] = P[by, i] * 2.0
                    else:
                        sinks[i] = 0.25
                T.reduce_sum(x, s, dim=1)
                for i in T.Parallel(bm):
                    if use == "add":
                        s[i] += sinks[i]
                    elif use == "exp2":
                        s[i] += T.exp2(sinks[i] * 1.44269504)
                    else:
                        s[i] = T.max(s[i], sinks[i])
                T.copy(s, Out[by, 0])

    rng = np.random.default_rng(p.get("seed", 0))
    sv, pv, xv = _rand(rng, (heads,), "float32"), _rand(rng, (heads, bm), "float32"), _rand(rng, (heads, bm, dim),
                                                                                           "float32")
    sink = {"uniform": np.repeat(_f64(sv)[:, None], bm, 1), "per_row": _f64(pv) * 2.0,
            "const": np.full((heads, bm), 0.25)}[value]
    s = _f64(xv).sum(2)
    want = {"add": s + sink, "exp2": s + np.exp2(sink * 1.44269504), "max": np.maximum(s, sink)}[use]
    rtol, atol = _tol("float32", k=dim)
    return Case("widen", p, widen, [sv, pv, xv, _poison((heads, bm), "float32")], {3: want}, rtol, atol)


# ---------------------------------------------------------------- T.vectorized loops
def _draw_vectorized(rng):
    return {"variant": str(rng.choice(("scale", "invariant", "accumulate", "prefix", "fill", "shared", "window",
                                        "strided", "inplace_dep"))), "start": int(rng.choice((0, 1, 2, 4, 8))),
            "m": int(rng.choice((2, 3, 4, 5, 8, 12, 16, 24, 32, 33))), "k": int(rng.choice((1, 2, 4))),
            "threads": int(rng.choice((32, 64, 128))), "blocks": int(rng.choice((1, 2))),
            "dtype": str(rng.choice(("float32", "float16", "bfloat16", "int8", "int32"))),
            "fill_n": int(rng.integers(2, 17))}


def _make_vectorized(p) -> Case:
    variant, th, nb, dtype = p["variant"], p["threads"], p["blocks"], p["dtype"]
    M = p["m"]
    K = p["k"] if M % p["k"] == 0 else 1
    N = th * nb
    is_int = dtype.startswith("int")
    acc_t = "int32" if is_int else "float32"
    fill_n = min(p["fill_n"], 64)
    s0 = min(p.get("start", 0), M - 1)

    @T.prim_func
    def vec(A: T.Tensor((N, M), dtype), C: T.Tensor((N, M // K), dtype), B: T.Tensor((N, M), dtype),
            S: T.Tensor((N,), acc_t), F: T.Tensor((64,), "float32")):
        with T.Kernel(nb, threads=th) as bx:
            tx = T.get_thread_binding(0)
            row = bx * th + tx
            if variant == "scale":
                for col in T.vectorized(M):
                    B[row, col] = A[row, col] + A[row, col]
            elif variant == "invariant":
                for col in T.vectorized(M):
                    B[row, col] = A[row, col] * C[row, col // K]
            elif variant == "accumulate":
                acc = T.alloc_local((1,), acc_t)
                acc[0] = T.cast(0, acc_t)
                for col in T.vectorized(M):
                    acc[0] = acc[0] + T.cast(A[row, col], acc_t)
                S[row] = acc[0]
            elif variant == "prefix":
                B[row, 0] = A[row, 0]
                for col in T.vectorized(M - 1):
                    B[row, col + 1] = B[row, col] + A[row, col + 1]
            elif variant == "fill":
                for i in T.vectorized(fill_n):
                    F[i] = T.cast(i + 1, "float32") * 0.5
            elif variant == "window":  # columns [s0, M) only, from a start that may be unaligned
                for col in T.vectorized(s0, M):
                    B[row, col] = A[row, col] - C[row, col // K]
            elif variant == "inplace_dep":  # iteration col reads what iteration col // K (<= col) stored
                for col in T.vectorized(M):
                    A[row, col] = A[row, col] + A[row, col // K] * T.cast(2, dtype)
            elif variant == "strided":  # every other element of a row of 2M, into a row of M
                for col in T.vectorized(M // 2):
                    B[row, col] = A[row, 2 * col + 1]
                    B[row, M // 2 + col] = A[row, 2 * col]
            else:
                sh = T.alloc_shared((th, M), dtype)
                for col in T.vectorized(M):
                    sh[tx, col] = A[row, col]
                for col in T.vectorized(M):
                    B[row, col] = sh[tx, col]

    rng = np.random.default_rng(p.get("seed", 0))
    a, c = _rand(rng, (N, M), dtype), _rand(rng, (N, M // K), dtype)
    if is_int:  # sums of at most 33 values of -8..8 (int8: prefix sums kept in range)
        a = (a // 4).astype(a.dtype) if dtype == "int8" else a
    fa, fc = _f64(a), _f64(c)
    expected = {}
    if variant == "scale":
        expected[2] = _round_to(fa + fa, dtype)
    elif variant == "invariant":
        expected[2] = _round_to(fa * fc[:, np.arange(M) // K], dtype)
    elif variant == "accumulate":
        expected[3] = fa.sum(1)
    elif variant == "prefix":
        expected[2] = np.cumsum(fa, axis=1)
    elif variant == "window":
        want = np.full((N, M), np.nan)
        want[:, s0:] = _round_to(fa[:, s0:] - fc[:, np.arange(s0, M) // K], dtype)
        if is_int:
            want[:, :s0] = np.iinfo(np.dtype(dt.to_numpy(dtype))).min
        expected[2] = want
    elif variant == "inplace_dep":
        seq = fa.copy()
        bits = 8 * np.dtype(dt.to_numpy(dtype)).itemsize

        def rounded(x):  # integers wrap around (two's complement), floats round to the dtype
            return (x + 2 ** (bits - 1)) % 2 ** bits - 2 ** (bits - 1) if is_int else _round_to(x, dtype)

        for col in range(M):  # one iteration after another
            seq[:, col] = rounded(seq[:, col] + rounded(seq[:, col // K] * 2))
        expected[0] = seq
    elif variant == "strided":
        want = np.full((N, M), np.iinfo(np.dtype(dt.to_numpy(dtype))).min if is_int else np.nan)
        h = M // 2
        want[:, :h] = fa[:, 1:2 * h:2]
        want[:, h:2 * h] = fa[:, 0:2 * h:2]
        expected[2] = want
    elif variant == "fill":
        want = np.full(64, np.nan)
        want[:fill_n] = (np.arange(fill_n) + 1) * 0.5
        expected[4] = want
    else:
        expected[2] = fa
    if is_int:
        rtol = atol = 0.0
    else:
        rtol, atol = _tol(dtype, k=M * 4 if variant == "prefix" else M)
    return Case("vectorized", p, vec, [a, c, _poison((N, M), dtype), _poison((N,), acc_t), _poison((64,), "float32")],
                expected, rtol, atol)


# ---------------------------------------------------------------- conversions to fp8 (satfinite)
FP8 = ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")


def _draw_fp8(rng):
    return {"dst": str(rng.choice(FP8, p=(0.4, 0.4, 0.1, 0.1))), "src": str(rng.choice(F_DTYPES)),
            "how": str(rng.choice(("cast", "store", "copy", "arith", "nosat"))),
            "n": int(rng.choice((7, 32, 100, 129))),
            "block": int(rng.choice((32, 64, 128))), "threads": int(rng.choice((32, 64, 128))),
            "scale": float(rng.choice((1.0, 0.125, 3.0, 1000.0))), "specials": bool(rng.random() < 0.6)}


def _finite_max(dtype):
    import ml_dtypes

    return float(ml_dtypes.finfo(dt.to_numpy(dtype)).max)


def _satfinite(x32, dst):
    """float32 values rounded to ``dst`` the satfinite way: NaN stays NaN, beyond the largest finite
    value (infinity included) that value with its sign, else round to nearest even (ml_dtypes)."""
    top = _finite_max(dst)
    x = np.asarray(x32, np.float32)
    clipped = np.where(np.isnan(x), x, np.clip(x, -top, top)).astype(np.float32)
    return clipped.astype(dt.to_numpy(dst))


def _make_fp8(p) -> Case:
    dst, src, how, n, block, scale = p["dst"], p["src"], p["how"], p["n"], p["block"], p["scale"]

    @T.prim_func
    def fp8(A: T.Tensor((n,), src), B: T.Tensor((n,), dst), C: T.Tensor((n,), dst), D: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, block), threads=p["threads"]) as bx:
            if how == "copy":
                f = T.alloc_fragment((block,), "float32")
                for i in T.Parallel(block):
                    if bx * block + i < n:
                        f[i] = T.cast(A[bx * block + i], "float32") * scale
                T.copy(f, B[bx * block])
            for i in T.Parallel(block):
                g = bx * block + i
                if g < n:
                    v = T.cast(A[g], "float32") * scale
                    if how == "cast":
                        B[g] = T.cast(v, dst)
                    elif how == "store":
                        B[g] = v
                    elif how == "arith":
                        B[g] = T.cast(v, dst)
                    elif how == "nosat":
                        B[g] = T.cast(v, dst, sat=False)
                    C[g] = T.cast(T.cast(A[g], "float32") * 0.5, dst)
            for i in T.Parallel(block):
                g = bx * block + i
                if g < n:
                    if how == "arith":
                        D[g] = T.cast(B[g] + C[g], "float32")
                    else:
                        D[g] = T.cast(B[g], "float32") * 2.0

    rng = np.random.default_rng(p.get("seed", 0))
    top = _finite_max(dst)
    x = rng.uniform(-1.0, 1.0, n) * rng.choice([1.0, top / 4, top * 0.99, top * 1.7, top * 50], n) / max(scale, 1.0)
    if p["specials"]:
        for v in (np.inf, -np.inf, 0.0, -0.0, top / scale, -top * 1.03 / scale):
            x[int(rng.integers(n))] = v
    finite_src = _finite_max(src)
    x = np.where(np.isfinite(x), np.clip(x, -finite_src, finite_src), x)
    a = x.astype(dt.to_numpy(src))
    v32 = (a.astype(np.float32) * np.float32(scale)).astype(np.float32)
    half = (a.astype(np.float32) * np.float32(0.5)).astype(np.float32)
    if how == "nosat":
        b = v32.astype(dt.to_numpy(dst))  # ml_dtypes: beyond the range gives infinity (e5m2) or NaN
    else:
        b = _satfinite(v32, dst)
    c = _satfinite(half, dst)
    if how == "arith":  # fp8 + fp8 computed in float32, rounded back (satfinite), then widened
        d = _f64(_satfinite((b.astype(np.float32) + c.astype(np.float32)).astype(np.float32), dst))
    else:
        d = _f64(b) * 2.0
    expected = {1: _f64(b), 2: _f64(c), 3: d}
    return Case("fp8_cast", p, fp8, [a, _poison((n,), dst), _poison((n,), dst), _poison((n,), "float32")],
                expected, 0.0, 0.0)


# ---------------------------------------------------------------- tile copies from views
def _draw_view_copy(rng):
    return {"d0": int(rng.choice((1, 2, 3, 5))), "d1": int(rng.choice((1, 3, 4, 6, 7))),
            "d2": int(rng.choice((4, 8, 12, 16, 32))), "bm": int(rng.choice((4, 8, 16))),
            "bn": int(rng.choice((4, 8, 16))), "threads": int(rng.choice((32, 64, 128))),
            "how": str(rng.choice(("reshape", "data"))), "via": str(rng.choice(("shared", "fragment"))),
            "dtype": str(rng.choice(("float32", "float16", "int32")))}


def _make_view_copy(p) -> Case:
    d0, d1, d2, bm, bn, dtype, how, via = p["d0"], p["d1"], p["d2"], p["bm"], p["bn"], p["dtype"], p["how"], p["via"]
    rows = d0 * d1

    @T.prim_func
    def vcopy(A: T.Tensor((d0, d1, d2), dtype), B: T.Tensor((d0, d1, d2), dtype)):
        with T.Kernel(T.ceildiv(d2, bn), T.ceildiv(rows, bm), threads=p["threads"]) as (bx, by):
            if how == "reshape":
                a = T.reshape(A, (rows, d2))
                b = T.reshape(B, (rows, d2))
            else:
                a = T.Tensor((rows, d2), dtype, A.data)
                b = T.Tensor((rows, d2), dtype, B.data)
            if via == "shared":
                s = T.alloc_shared((bm, bn), dtype)
                T.copy(a[by * bm, bx * bn], s)
                for i, j in T.Parallel(bm, bn):
                    s[i, j] = s[i, j] * T.cast(2, dtype) + T.cast(1, dtype)
                T.copy(s, b[by * bm, bx * bn])
            else:
                f = T.alloc_fragment((bm, bn), dtype)
                T.copy(a[by * bm, bx * bn], f)
                for i, j in T.Parallel(bm, bn):
                    f[i, j] = f[i, j] * T.cast(2, dtype) + T.cast(1, dtype)
                T.copy(f, b[by * bm, bx * bn])

    rng = np.random.default_rng(p.get("seed", 0))
    a = _rand(rng, (d0, d1, d2), dtype)
    want = _round_to(_f64(a) * 2 + 1, dtype)
    rtol, atol = (0.0, 0.0) if dtype == "int32" else _tol(dtype)
    return Case("view_copy", p, vcopy, [a, _poison((d0, d1, d2), dtype)], {1: want}, rtol, atol)


# ---------------------------------------------------------------- reductions accumulated with clear=False
ODD = (1, 2, 3, 5, 7, 13, 31, 33, 61, 97)


def _draw_reduce_acc(rng):
    nd = int(rng.choice((2, 3), p=(0.7, 0.3)))
    shape = [int(rng.choice(ODD)) for _ in range(nd)]
    while int(np.prod(shape)) > 2048:
        shape[int(np.argmax(shape))] //= 2
    return {"shape": tuple(shape), "dim": int(rng.integers(-1, nd)), "tiles": int(rng.integers(1, 4)),
            "op": str(rng.choice(("sum", "max", "min", "abssum", "absmax"))),
            "threads": int(rng.choice((32, 64, 96, 128, 256))), "dtype": str(rng.choice(F_DTYPES)),
            "init": str(rng.choice(("global", "fill", "first_clear")))}


def _make_reduce_acc(p) -> Case:
    shape, dim, nt, op, dtype, init = tuple(p["shape"]), p["dim"], p["tiles"], p["op"], p["dtype"], p["init"]
    nd = len(shape)
    axis = dim % nd
    rshape = tuple(s for k, s in enumerate(shape) if k != axis)
    reducer = {"sum": T.reduce_sum, "max": T.reduce_max, "min": T.reduce_min, "abssum": T.reduce_abssum,
               "absmax": T.reduce_absmax}[op]
    full = (nt,) + shape

    @T.prim_func
    def racc(A: T.Tensor(full, dtype), Init: T.Tensor(rshape, "float32"), Out: T.Tensor(rshape, "float32")):
        with T.Kernel(1, threads=p["threads"]):
            a = T.alloc_fragment(shape, "float32")
            r = T.alloc_fragment(rshape, "float32")
            if init == "global":
                T.copy(Init, r)
            elif init == "fill":
                T.fill(r, 0.5)
            for t in T.serial(nt):
                if nd == 2:
                    T.copy(A[t, 0, 0], a)
                else:
                    T.copy(A[t, 0, 0, 0], a)
                if init == "first_clear":
                    if t == 0:
                        reducer(a, r, dim=dim, clear=True)
                    else:
                        reducer(a, r, dim=dim, clear=False)
                else:
                    reducer(a, r, dim=dim, clear=False)
            T.copy(r, Out)

    rng = np.random.default_rng(p.get("seed", 0))
    a, iv = _rand(rng, full, dtype), _rand(rng, rshape, "float32")
    fa = _f64(a)
    if op in ("abssum", "absmax"):
        fa = np.abs(fa)
    combine = {"sum": np.add, "abssum": np.add, "max": np.maximum, "absmax": np.maximum, "min": np.minimum}[op]
    per = {"sum": np.sum, "abssum": np.sum, "max": np.max, "absmax": np.max, "min": np.min}[op]
    acc = _f64(iv) if init == "global" else np.full(rshape, 0.5) if init == "fill" else None
    for t in range(nt):
        part = per(fa[t], axis=axis)
        acc = part if acc is None else combine(acc, part)
    rtol, atol = _tol("float32", k=int(np.prod(shape)) * nt)
    return Case("reduce_acc", p, racc, [a, iv, _poison(rshape, "float32")], {2: acc}, rtol,
                max(atol, 1e-5 * shape[axis] * nt))


# ---------------------------------------------------------------- tile atomics from several blocks
def _draw_tile_atomic(rng):
    return {"m": int(rng.choice((1, 7, 16, 31, 33, 64))), "n": int(rng.choice((3, 8, 17, 32, 64))),
            "bm": int(rng.choice((8, 16, 32))), "bn": int(rng.choice((8, 16, 32))),
            "splits": int(rng.integers(1, 5)), "threads": int(rng.choice((32, 64, 128))),
            "value": str(rng.choice(("fragment", "shared", "scalar"))),
            "form": str(rng.choice(("element", "slice"))), "dtype": str(rng.choice(("float32", "float16")))}


def _make_tile_atomic(p) -> Case:
    M, N, bm, bn, S, value, form, dtype = (p["m"], p["n"], p["bm"], p["bn"], p["splits"], p["value"], p["form"],
                                           p["dtype"])

    @T.prim_func
    def tatomic(X: T.Tensor((S, M, N), dtype), Out: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), S, threads=p["threads"]) as (bx, by, bz):
            if value == "fragment":
                v = T.alloc_fragment((bm, bn), dtype)
                T.copy(X[bz, by * bm, bx * bn], v)
                for i, j in T.Parallel(bm, bn):
                    v[i, j] = v[i, j] * T.cast(2, dtype)
            elif value == "shared":
                v = T.alloc_shared((bm, bn), dtype)
                T.copy(X[bz, by * bm, bx * bn], v)
            if value == "scalar":
                if form == "slice":
                    T.atomic_add(Out[by * bm:(by + 1) * bm, bx * bn:(bx + 1) * bn], T.cast(bz + 1, dtype))
                else:
                    T.atomic_add(Out[by * bm:(by + 1) * bm, bx * bn:(bx + 1) * bn], T.cast(1, dtype))
            elif form == "slice":
                T.atomic_add(Out[by * bm:(by + 1) * bm, bx * bn:(bx + 1) * bn], v)
            else:
                T.atomic_add(Out[by * bm, bx * bn], v)

    rng = np.random.default_rng(p.get("seed", 0))
    x = _rand(rng, (S, M, N), dtype)
    init = _rand(rng, (M, N), dtype)
    fx = _f64(x)
    if value == "fragment":
        add = (fx * 2).sum(0)
    elif value == "shared":
        add = fx.sum(0)
    else:
        add = np.full((M, N), float(sum(z + 1 for z in range(S))) if form == "slice" else float(S))
    want = _f64(init) + add
    rtol, atol = _tol(dtype, k=16 * S)
    return Case("tile_atomic", p, tatomic, [x, init.copy()], {1: want}, rtol, atol)


S8 = (
    Template("user_fragment", _draw_user_fragment, _make_user_fragment),
    Template("store_driven", _draw_store_driven, _make_store_driven),
    Template("widen", _draw_widen, _make_widen),
    Template("vectorized", _draw_vectorized, _make_vectorized),
    Template("fp8_cast", _draw_fp8, _make_fp8),
    Template("view_copy", _draw_view_copy, _make_view_copy),
    Template("reduce_acc", _draw_reduce_acc, _make_reduce_acc),
    Template("tile_atomic", _draw_tile_atomic, _make_tile_atomic),
)
