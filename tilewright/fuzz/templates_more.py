"""More fuzz templates: the parts of the language the first set leaves out.

Dynamic sizes, integer and mixed dtypes with casts, masks and infinities, floor/trunc division,
atomics (histograms, ``return_prev`` tickets), broadcast nests in 2-D and 3-D, row reductions
broadcast back (softmax / layernorm / rmsnorm with several rows a block and thread counts such as
96 and 192), ``T.serial`` loops carrying a fragment, GEMM variants (A from a fragment,
``clear_accum``, policies, split-K with atomics, int8 with int32 accumulation, fp8), copies with
offsets into 3-D/4-D tensors, thread-partitioned copies and the compiler's warp-specialized GEMM.

Tolerances (``_tol`` in templates.py): the least precise dtype gives the base (float32 1e-5,
float16 4e-3, bfloat16 2e-2) and it grows with sqrt(accumulation length)/4; integer results are
exact (tolerance 0); a value rounded to a narrow dtype once more (a cast) adds one ulp of it.
"""

from __future__ import annotations

import numpy as np

from .. import language as T
from .templates import Case, Template, _f64, _poison, _rand, _tol

ODD = (1, 3, 7, 13, 31, 33, 61, 96, 97, 100, 127, 129, 191, 192, 200, 255, 320, 640, 1000)
F_DTYPES = ("float32", "float16", "bfloat16")
_EPS = {"float32": 1e-6, "float16": 1e-3, "bfloat16": 8e-3, "int8": 0, "int32": 0}


def _np(dtype):
    from ..ir import dtype as dt

    return dt.to_numpy(dtype)


def _round_to(x, dtype):
    """float64 values as the dtype holds them (the reference rounds where the kernel casts)."""
    return _f64(np.asarray(x).astype(_np(dtype)))


# ---------------------------------------------------------------- masks, casts, infinities, dynamic n
def _draw_mask_cast(rng):
    return {"n": int(rng.choice(ODD + (8, 64, 256))), "block": int(rng.choice((32, 64, 96, 128, 256))),
            "threads": int(rng.choice((32, 64, 96, 128, 192))),
            "src": str(rng.choice(F_DTYPES + ("int8", "int32"))), "dst": str(rng.choice(F_DTYPES + ("int32",))),
            "op": str(rng.choice(("where", "clamp_inf", "cmp", "relu_cast", "neg_inf_max"))),
            "dynamic": bool(rng.random() < 0.5), "style": str(rng.choice(("guard", "fragment")))}


def _make_mask_cast(p) -> Case:
    n, block, src, dst, op = p["n"], p["block"], p["src"], p["dst"], p["op"]
    nd = T.dynamic("n") if p["dynamic"] else n
    isint_src = src.startswith("int")

    def body(a, b):
        if op == "where":
            return T.if_then_else(a > b, T.cast(a, "float32") * 2.0, T.cast(b, "float32") - 1.0)
        if op == "clamp_inf":  # an infinite bound: min(a, +inf) is a, max(b, -inf) is b
            return T.min(T.cast(a, "float32"), T.infinity("float32")) + T.max(T.cast(b, "float32"),
                                                                              -T.infinity("float32"))
        if op == "cmp":
            return T.if_then_else(a == b, 3.0, T.if_then_else(a < b, -1.0, 1.0))
        if op == "relu_cast":
            return T.cast(T.max(a, b), "float32") * T.cast(a >= b, "float32")
        return T.max(T.if_then_else(a < b, -T.infinity("float32"), T.cast(a, "float32")), T.cast(b, "float32"))

    if p["style"] == "guard":
        @T.prim_func
        def mc(A: T.Tensor((nd,), src), B: T.Tensor((nd,), src), C: T.Tensor((nd,), dst)):
            with T.Kernel(T.ceildiv(nd, block), threads=p["threads"]) as bx:
                for i in T.Parallel(block):
                    if bx * block + i < nd:
                        C[bx * block + i] = T.cast(body(A[bx * block + i], B[bx * block + i]), dst)
    else:
        @T.prim_func
        def mc(A: T.Tensor((nd,), src), B: T.Tensor((nd,), src), C: T.Tensor((nd,), dst)):
            with T.Kernel(T.ceildiv(nd, block), threads=p["threads"]) as bx:
                a = T.alloc_fragment((block,), src)
                b = T.alloc_fragment((block,), src)
                c = T.alloc_fragment((block,), dst)
                T.copy(A[bx * block], a)
                T.copy(B[bx * block], b)
                for i in T.Parallel(block):
                    c[i] = T.cast(body(a[i], b[i]), dst)
                T.copy(c, C[bx * block])

    rng = np.random.default_rng(p.get("seed", 0))
    if isint_src:
        a = rng.integers(-20, 21, n).astype(_np(src))
        b = rng.integers(-20, 21, n).astype(_np(src))
    else:
        a = _rand(rng, (n,), src, -4, 4)
        b = a.copy() if n < 2 else _rand(rng, (n,), src, -4, 4)
        b[::5] = a[::5]  # some equal pairs for the comparisons
    fa, fb = _round_to(a, "float32"), _round_to(b, "float32")
    if op == "where":
        want = np.where(fa > fb, fa * 2, fb - 1)
    elif op == "clamp_inf":
        want = fa + fb
    elif op == "cmp":
        want = np.where(fa == fb, 3.0, np.where(fa < fb, -1.0, 1.0))
    elif op == "relu_cast":
        want = np.maximum(fa, fb) * (fa >= fb)
    else:
        want = np.maximum(np.where(fa < fb, -np.inf, fa), fb)
    if dst == "int32":
        want = np.trunc(want)  # float -> int casts truncate toward zero
    rtol, atol = _tol(dst, k=1)
    eps = _EPS[dst]
    return Case("mask_cast", p, mc, [a, b, _poison((n,), dst)], {2: want}, rtol + eps, atol + eps * 8)


# ---------------------------------------------------------------- integer arithmetic: floor/trunc div/mod
def _draw_intdiv(rng):
    return {"n": int(rng.choice(ODD + (64, 128))), "threads": int(rng.choice((32, 64, 128))),
            "d": int(rng.choice((1, 2, 3, 7, 8, 16, -3, -8))), "dtype": str(rng.choice(("int32", "int8"))),
            "op": str(rng.choice(("floordiv", "floormod", "truncdiv", "truncmod", "shift", "mix")))}


def _make_intdiv(p) -> Case:
    n, d, dtype, op = p["n"], p["d"], p["dtype"], p["op"]
    block = 128

    def f(x):
        xi = T.cast(x, "int32")
        if op == "floordiv":
            return T.floordiv(xi, d)
        if op == "floormod":
            return T.floormod(xi, d)
        if op == "truncdiv":
            return T.truncdiv(xi, d)
        if op == "truncmod":
            return T.truncmod(xi, d)
        if op == "shift":
            return xi * 4 + T.min(xi, d) - T.max(xi, -d)
        return T.cast(T.cast(xi * 3, "float32") * 0.5, "int32")  # float round trip truncates toward zero

    @T.prim_func
    def idiv(A: T.Tensor((n,), dtype), C: T.Tensor((n,), "int32")):
        with T.Kernel(T.ceildiv(n, block), threads=p["threads"]) as bx:
            for i in T.Parallel(block):
                if bx * block + i < n:
                    C[bx * block + i] = f(A[bx * block + i])

    rng = np.random.default_rng(p.get("seed", 0))
    a = rng.integers(-100, 101, n).astype(_np(dtype))
    x = a.astype(np.int64)
    if op == "floordiv":
        want = np.floor_divide(x, d)
    elif op == "floormod":
        want = np.mod(x, d)
    elif op == "truncdiv":
        want = np.trunc(x / d).astype(np.int64)
    elif op == "truncmod":
        want = x - np.trunc(x / d).astype(np.int64) * d
    elif op == "shift":
        want = x * 4 + np.minimum(x, d) - np.maximum(x, -d)
    else:
        want = np.trunc(x * 3 * 0.5)
    return Case("intdiv", p, idiv, [a, _poison((n,), "int32")], {1: want.astype(np.float64)}, 0.0, 0.0)


# ---------------------------------------------------------------- atomics: histograms and tickets
def _draw_atomic(rng):
    return {"n": int(rng.choice(ODD + (64, 256, 1024))), "bins": int(rng.choice((1, 2, 5, 16, 33))),
            "block": int(rng.choice((32, 64, 128, 256))), "threads": int(rng.choice((32, 64, 96, 128, 256))),
            "op": str(rng.choice(("count", "weighted", "max", "ticket"))),
            "dtype": str(rng.choice(("int32", "float32")))}


def _make_atomic(p) -> Case:
    n, bins, block, op = p["n"], p["bins"], p["block"], p["op"]
    dtype = "int32" if op in ("count", "ticket") else p["dtype"]

    if op == "ticket":
        @T.prim_func
        def at(Bin: T.Tensor((n,), "int32"), W: T.Tensor((n,), dtype), H: T.Tensor((bins,), "int32"),
               Seen: T.Tensor((n + 1,), "int32")):
            with T.Kernel(T.ceildiv(n, block), threads=p["threads"]) as bx:
                for i in T.Parallel(block):
                    if bx * block + i < n:
                        prev = T.atomic_add(H[0], 1, return_prev=True)
                        Seen[prev] = 1
    else:
        @T.prim_func
        def at(Bin: T.Tensor((n,), "int32"), W: T.Tensor((n,), dtype), H: T.Tensor((bins,), dtype),
               Seen: T.Tensor((n + 1,), "int32")):
            with T.Kernel(T.ceildiv(n, block), threads=p["threads"]) as bx:
                for i in T.Parallel(block):
                    if bx * block + i < n:
                        if op == "count":
                            T.atomic_add(H[Bin[bx * block + i]], 1)
                        elif op == "weighted":
                            T.atomic_add(H[Bin[bx * block + i]], W[bx * block + i])
                        else:
                            T.atomic_max(H[Bin[bx * block + i]], W[bx * block + i])

    rng = np.random.default_rng(p.get("seed", 0))
    binv = rng.integers(0, bins, n).astype(np.int32)
    w = (rng.integers(-50, 50, n) if dtype == "int32" else rng.uniform(-1, 1, n)).astype(_np(dtype))
    seen = np.zeros(n + 1, np.int32)
    if op == "ticket":
        h = np.zeros(bins, np.int32)
        want = {2: np.array([n] + [0] * (bins - 1), np.float64), 3: np.array([1] * n + [0], np.float64)}
        return Case("atomic", p, at, [binv, w, h, seen], want, 0.0, 0.0)
    if op == "max":
        h = np.full(bins, -1000, _np(dtype))
        ref = np.full(bins, -1000.0)
        np.maximum.at(ref, binv, _f64(w))
    else:
        h = (np.arange(bins) % 3).astype(_np(dtype))  # a non-zero start: the adds accumulate onto it
        ref = _f64(h).copy()
        np.add.at(ref, binv, 1.0 if op == "count" else _f64(w))
    tol = 0.0 if dtype == "int32" else 1e-5 * max(1.0, np.sqrt(n))
    return Case("atomic", p, at, [binv, w, h, seen], {2: ref}, tol, tol)


# ---------------------------------------------------------------- broadcast nests in 2-D and 3-D
def _draw_bcast(rng):
    return {"b": int(rng.choice((1, 2, 3))), "m": int(rng.choice((1, 3, 8, 16, 31, 32, 64))),
            "n": int(rng.choice((1, 7, 16, 32, 33, 64, 96, 100))), "threads": int(rng.choice((32, 64, 96, 128, 192))),
            "rank": int(rng.choice((2, 3))), "dtype": str(rng.choice(F_DTYPES)),
            "via": str(rng.choice(("global", "fragment")))}


def _make_bcast(p) -> Case:
    B, M, N, dtype = p["b"], p["m"], p["n"], p["dtype"]
    if p["rank"] == 2:
        @T.prim_func
        def bc(X: T.Tensor((M, N), dtype), R: T.Tensor((N,), dtype), Cv: T.Tensor((M,), dtype),
               Y: T.Tensor((M, N), dtype)):
            with T.Kernel(1, threads=p["threads"]):
                x = T.alloc_fragment((M, N), "float32")
                r = T.alloc_fragment((N,), "float32")
                c = T.alloc_fragment((M,), "float32")
                T.copy(X, x)
                T.copy(R, r)
                T.copy(Cv, c)
                if p["via"] == "fragment":
                    for i, j in T.Parallel(M, N):
                        x[i, j] = x[i, j] * r[j] + c[i]
                    T.copy(x, Y)
                else:
                    for i, j in T.Parallel(M, N):
                        Y[i, j] = x[i, j] * R[j] + c[i]
        shapes = ((M, N), (N,), (M,))
    else:
        @T.prim_func
        def bc(X: T.Tensor((B, M, N), dtype), R: T.Tensor((N,), dtype), Cv: T.Tensor((B, M), dtype),
               Y: T.Tensor((B, M, N), dtype)):
            with T.Kernel(1, threads=p["threads"]):
                x = T.alloc_fragment((B, M, N), "float32")
                T.copy(X, x)
                if p["via"] == "fragment":
                    for b, i, j in T.Parallel(B, M, N):
                        x[b, i, j] = x[b, i, j] * R[j] + Cv[b, i]
                    T.copy(x, Y)
                else:
                    for b, i, j in T.Parallel(B, M, N):
                        Y[b, i, j] = x[b, i, j] * R[j] + Cv[b, i]
        shapes = ((B, M, N), (N,), (B, M))
    rng = np.random.default_rng(p.get("seed", 0))
    x, r, c = (_rand(rng, s, dtype) for s in shapes)
    want = _f64(x) * _f64(r) + _f64(c)[..., None]
    rtol, atol = _tol(dtype, k=4)
    eps = _EPS[dtype]
    return Case("bcast", p, bc, [x, r, c, _poison(shapes[0], dtype)], {3: want}, rtol + eps, atol + 4 * eps)


# ---------------------------------------------------------------- row norms: reduce, then broadcast back
def _draw_rownorm(rng):
    return {"m": int(rng.choice((1, 2, 3, 8, 16, 33, 64))), "n": int(rng.choice(ODD + (16, 64, 128, 256))),
            "bm": int(rng.choice((1, 2, 4, 8))), "threads": int(rng.choice((32, 64, 96, 128, 192, 256))),
            "kind": str(rng.choice(("softmax", "layernorm", "rmsnorm", "logsumexp"))),
            "dtype": str(rng.choice(F_DTYPES)), "dynamic": bool(rng.random() < 0.4)}


def _make_rownorm(p) -> Case:
    M, N, bm, kind, dtype = p["m"], p["n"], p["bm"], p["kind"], p["dtype"]
    Md = T.dynamic("m") if p["dynamic"] else M

    @T.prim_func
    def rn(X: T.Tensor((Md, N), dtype), G: T.Tensor((N,), "float32"), Y: T.Tensor((Md, N), dtype),
           S: T.Tensor((Md,), "float32")):
        with T.Kernel(T.ceildiv(Md, bm), threads=p["threads"]) as bx:
            x = T.alloc_fragment((bm, N), "float32")
            t = T.alloc_fragment((bm, N), "float32")
            st = T.alloc_fragment((bm,), "float32")
            st2 = T.alloc_fragment((bm,), "float32")
            T.copy(X[bx * bm, 0], x)
            if kind == "softmax" or kind == "logsumexp":
                T.reduce_max(x, st, dim=1)
                for i, j in T.Parallel(bm, N):
                    t[i, j] = T.exp(x[i, j] - st[i])
                T.reduce_sum(t, st2, dim=1)
                if kind == "softmax":
                    for i, j in T.Parallel(bm, N):
                        x[i, j] = t[i, j] / st2[i]
                else:
                    for i, j in T.Parallel(bm, N):
                        x[i, j] = x[i, j] - st[i] - T.log(st2[i])
                    for i in T.Parallel(bm):
                        st2[i] = st[i] + T.log(st2[i])
            elif kind == "layernorm":
                T.reduce_sum(x, st, dim=1)
                for i in T.Parallel(bm):
                    st[i] = st[i] / N
                for i, j in T.Parallel(bm, N):
                    t[i, j] = (x[i, j] - st[i]) * (x[i, j] - st[i])
                T.reduce_sum(t, st2, dim=1)
                for i, j in T.Parallel(bm, N):
                    x[i, j] = (x[i, j] - st[i]) * T.rsqrt(st2[i] / N + 1e-5) * G[j]
            else:
                for i, j in T.Parallel(bm, N):
                    t[i, j] = x[i, j] * x[i, j]
                T.reduce_sum(t, st2, dim=1)
                for i in T.Parallel(bm):
                    st2[i] = T.rsqrt(st2[i] / N + 1e-6)
                for i, j in T.Parallel(bm, N):
                    x[i, j] = x[i, j] * st2[i] * G[j]
            T.copy(x, Y[bx * bm, 0])
            T.copy(st2, S[bx * bm])

    rng = np.random.default_rng(p.get("seed", 0))
    x = _rand(rng, (M, N), dtype, -3, 3)
    g = _rand(rng, (N,), "float32")
    fx = _f64(x)
    if kind in ("softmax", "logsumexp"):
        mx = fx.max(1, keepdims=True)
        e = np.exp(fx - mx)
        s = e.sum(1, keepdims=True)
        y = e / s if kind == "softmax" else fx - mx - np.log(s)
        stat = (s if kind == "softmax" else mx + np.log(s))[:, 0]
    elif kind == "layernorm":
        mu = fx.mean(1, keepdims=True)
        var = ((fx - mu) ** 2).sum(1, keepdims=True)
        y = (fx - mu) / np.sqrt(var / N + 1e-5) * _f64(g)
        stat = var[:, 0]
    else:
        ms = (fx * fx).sum(1, keepdims=True)
        y = fx / np.sqrt(ms / N + 1e-6) * _f64(g)
        stat = 1 / np.sqrt(ms[:, 0] / N + 1e-6)
    rtol, atol = _tol(dtype, k=N)
    eps = _EPS[dtype]
    return Case("rownorm", p, rn, [x, g, _poison((M, N), dtype), _poison((M,), "float32")], {2: y, 3: stat},
                rtol + 2 * eps, atol + 4 * eps + 1e-5 * np.sqrt(N))


# ---------------------------------------------------------------- T.serial carrying a fragment (running sums)
def _draw_carry(rng):
    return {"chunks": int(rng.choice((1, 2, 3, 5))), "bm": int(rng.choice((1, 4, 8, 16, 32))),
            "n": int(rng.choice((1, 3, 16, 32, 33, 64, 96))), "threads": int(rng.choice((32, 64, 96, 128))),
            "unroll": bool(rng.random() < 0.3), "scale": bool(rng.random() < 0.5)}


def _make_carry(p) -> Case:
    C, bm, N, sc = p["chunks"], p["bm"], p["n"], p["scale"]
    loop = T.unroll if p["unroll"] else T.serial

    @T.prim_func
    def carry(X: T.Tensor((C * bm, N), "float32"), Run: T.Tensor((C, N), "float32"), Tot: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=p["threads"]):
            acc = T.alloc_fragment((N,), "float32")
            part = T.alloc_fragment((N,), "float32")
            x = T.alloc_fragment((bm, N), "float32")
            T.fill(acc, 0)
            for k in loop(C):
                T.copy(X[k * bm, 0], x)
                T.reduce_sum(x, part, dim=0)
                for j in T.Parallel(N):
                    acc[j] = acc[j] * (0.5 if sc else 1.0) + part[j]
                T.copy(acc, Run[k, 0])
            T.copy(acc, Tot)

    rng = np.random.default_rng(p.get("seed", 0))
    x = _rand(rng, (C * bm, N), "float32")
    parts = _f64(x).reshape(C, bm, N).sum(1)
    run = np.zeros((C, N))
    acc = np.zeros(N)
    for k in range(C):
        acc = acc * (0.5 if sc else 1.0) + parts[k]
        run[k] = acc
    return Case("carry", p, carry, [x, _poison((C, N), "float32"), _poison((N,), "float32")], {1: run, 2: acc},
                1e-5, 1e-5 * np.sqrt(bm * C))


# ---------------------------------------------------------------- gemm variants
def _draw_gemm_var(rng):
    return {"m": int(rng.choice((16, 32, 33, 64, 100, 128))), "n": int(rng.choice((16, 32, 48, 64, 97, 128))),
            "k": int(rng.choice((16, 32, 64, 96, 128, 200))), "bm": int(rng.choice((16, 32, 64))),
            "bn": int(rng.choice((16, 32, 48, 64))), "bk": int(rng.choice((16, 32, 48, 64, 80))),
            "threads": int(rng.choice((64, 128, 256))),
            "variant": str(rng.choice(("frag_a", "clear_accum", "policy_row", "policy_col", "splitk", "int8",
                                       "fp8", "k_pack"))),
            "dtype": str(rng.choice(("float16", "bfloat16"))), "splits": int(rng.choice((2, 3))),
            "stages": int(rng.choice((0, 1, 2)))}


def _make_gemm_var(p) -> Case:
    M, N, K, bm, bn, bk, v = p["m"], p["n"], p["k"], p["bm"], p["bn"], p["bk"], p["variant"]
    dtype = {"int8": "int8", "fp8": "float8_e4m3fn"}.get(v, p["dtype"])
    acc_t = "int32" if v == "int8" else "float32"
    policy = {"policy_row": T.GemmWarpPolicy.FullRow, "policy_col": T.GemmWarpPolicy.FullCol}.get(
        v, T.GemmWarpPolicy.Square)
    splits = p["splits"] if v == "splitk" else 1
    kper = T.ceildiv(K, splits)
    ksteps = (kper + bk - 1) // bk
    stages = p["stages"]

    if v == "frag_a":
        @T.prim_func
        def gv(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), acc_t)):
            with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=p["threads"]) as (bx, by):
                As = T.alloc_shared((bm, bk), dtype)
                Af = T.alloc_fragment((bm, bk), dtype)
                Bs = T.alloc_shared((bk, bn), dtype)
                Cf = T.alloc_fragment((bm, bn), acc_t)
                T.clear(Cf)
                for k in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                    T.copy(A[by * bm, k * bk], As)
                    T.copy(B[k * bk, bx * bn], Bs)
                    T.copy(As, Af)
                    for i, j in T.Parallel(bm, bk):
                        Af[i, j] = Af[i, j] * 2.0
                    T.gemm(Af, Bs, Cf)
                T.copy(Cf, C[by * bm, bx * bn])
    elif v == "clear_accum":
        # only the last K step counts: every gemm clears the accumulator first
        @T.prim_func
        def gv(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), acc_t)):
            with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=p["threads"]) as (bx, by):
                As = T.alloc_shared((bm, bk), dtype)
                Bs = T.alloc_shared((bk, bn), dtype)
                Cf = T.alloc_fragment((bm, bn), acc_t)
                for k in T.serial(T.ceildiv(K, bk)):
                    T.copy(A[by * bm, k * bk], As)
                    T.copy(B[k * bk, bx * bn], Bs)
                    T.gemm(As, Bs, Cf, clear_accum=True)
                T.copy(Cf, C[by * bm, bx * bn])
    elif v == "splitk":
        @T.prim_func
        def gv(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), acc_t)):
            with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), splits, threads=p["threads"]) as (bx, by, bz):
                As = T.alloc_shared((bm, bk), dtype)
                Bs = T.alloc_shared((bk, bn), dtype)
                Cf = T.alloc_fragment((bm, bn), acc_t)
                T.clear(Cf)
                for k in T.Pipelined(ksteps, num_stages=stages):
                    for i, j in T.Parallel(bm, bk):
                        kk = bz * kper + k * bk + j
                        As[i, j] = T.if_then_else(kk < T.min((bz + 1) * kper, K) and by * bm + i < M,
                                                  A[T.min(by * bm + i, M - 1), T.min(kk, K - 1)], 0)
                    for i, j in T.Parallel(bk, bn):
                        kk = bz * kper + k * bk + i
                        Bs[i, j] = T.if_then_else(kk < T.min((bz + 1) * kper, K) and bx * bn + j < N,
                                                  B[T.min(kk, K - 1), T.min(bx * bn + j, N - 1)], 0)
                    T.gemm(As, Bs, Cf)
                for i, j in T.Parallel(bm, bn):
                    if by * bm + i < M and bx * bn + j < N:
                        T.atomic_add(C[by * bm + i, bx * bn + j], Cf[i, j])
    else:
        @T.prim_func
        def gv(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), acc_t)):
            with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=p["threads"]) as (bx, by):
                As = T.alloc_shared((bm, bk), dtype)
                Bs = T.alloc_shared((bk, bn), dtype)
                Cf = T.alloc_fragment((bm, bn), acc_t)
                T.clear(Cf)
                for k in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                    T.copy(A[by * bm, k * bk], As)
                    T.copy(B[k * bk, bx * bn], Bs)
                    T.gemm(As, Bs, Cf, policy=policy, k_pack=2 if v == "k_pack" else 1)
                T.copy(Cf, C[by * bm, bx * bn])

    rng = np.random.default_rng(p.get("seed", 0))
    if v == "int8":
        a = rng.integers(-128, 128, (M, K)).astype(np.int8)
        b = rng.integers(-128, 128, (K, N)).astype(np.int8)
    else:
        a, b = _rand(rng, (M, K), dtype), _rand(rng, (K, N), dtype)
    fa, fb = _f64(a), _f64(b)
    if v == "frag_a":
        fa = _round_to(fa * 2, dtype)
    if v == "clear_accum":
        last = (T.ceildiv(K, bk) - 1) * bk
        fa, fb = fa[:, last:], fb[last:, :]
    want = fa @ fb
    c0 = np.zeros((M, N), np.float32) if v == "splitk" else _poison((M, N), acc_t)
    if v == "int8":
        return Case("gemm_var", p, gv, [a, b, c0], {2: want}, 0.0, 0.0)
    rtol, atol = _tol(dtype, k=K)
    if dtype.startswith("float8"):
        rtol, atol = 2e-2, 2e-2
    return Case("gemm_var", p, gv, [a, b, c0], {2: want}, rtol, max(atol, 1e-3 * np.sqrt(K)))


# ---------------------------------------------------------------- copies into 3-D / 4-D tensors at offsets
def _draw_copy_nd(rng):
    return {"d0": int(rng.choice((1, 2, 3))), "d1": int(rng.choice((1, 2, 5))), "h": int(rng.choice((4, 16, 31, 64))),
            "w": int(rng.choice((8, 16, 33, 64))), "bh": int(rng.choice((4, 8, 16))),
            "bw": int(rng.choice((8, 16, 32))),
            "rank": int(rng.choice((3, 4))), "threads": int(rng.choice((32, 64, 128))),
            "dtype": str(rng.choice(("float32", "float16", "int8", "int32"))),
            "via": str(rng.choice(("shared", "fragment", "slice")))}


def _make_copy_nd(p) -> Case:
    d0, d1, H, W, bh, bw, dtype, via = p["d0"], p["d1"], p["h"], p["w"], p["bh"], p["bw"], p["dtype"], p["via"]
    if p["rank"] == 3:
        d1 = 1
    shape = (d0, H, W) if p["rank"] == 3 else (d0, d1, H, W)
    four = p["rank"] == 4

    @T.prim_func
    def cnd(A: T.Tensor(shape, dtype), B: T.Tensor(shape, dtype)):
        with T.Kernel(T.ceildiv(W, bw), T.ceildiv(H, bh), d0 * d1, threads=p["threads"]) as (bx, by, bz):
            s = T.alloc_shared((bh, bw), dtype)
            f = T.alloc_fragment((bh, bw), dtype)
            if four:
                if via == "slice":
                    T.copy(A[bz // d1, bz % d1, by * bh:by * bh + bh, bx * bw:bx * bw + bw], s)
                else:
                    T.copy(A[bz // d1, bz % d1, by * bh, bx * bw], s)
            else:
                if via == "slice":
                    T.copy(A[bz, by * bh:by * bh + bh, bx * bw:bx * bw + bw], s)
                else:
                    T.copy(A[bz, by * bh, bx * bw], s)
            if via == "fragment":
                T.copy(s, f)
                for i, j in T.Parallel(bh, bw):
                    f[i, j] = f[i, j] * 2
                T.copy(f, s)
            if four:
                T.copy(s, B[d0 - 1 - bz // d1, bz % d1, by * bh, bx * bw])
            else:
                T.copy(s, B[d0 - 1 - bz, by * bh, bx * bw])

    rng = np.random.default_rng(p.get("seed", 0))
    a = _rand(rng, shape, dtype)
    want = _f64(a)[::-1] * (2 if via == "fragment" else 1)
    if dtype == "int8":
        want = _f64(_f64(want).astype(np.int64).astype(np.int8))
    rtol, atol = _tol(dtype)
    return Case("copy_nd", p, cnd, [a, _poison(shape, dtype)], {1: want.copy()}, rtol, atol)


# ---------------------------------------------------------------- thread-partitioned copies
def _draw_partition(rng):
    return {"m": int(rng.choice((8, 16, 32, 64))), "n": int(rng.choice((16, 32, 64, 128))),
            "threads": int(rng.choice((128, 192, 256))), "split": int(rng.choice((32, 64, 96))),
            "dtype": str(rng.choice(("float32", "float16")))}


def _make_partition(p) -> Case:
    M, N, split, dtype = p["m"], p["n"], p["split"], p["dtype"]

    @T.prim_func
    def part(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(1, threads=p["threads"]):
            sa = T.alloc_shared((M, N), dtype)
            sb = T.alloc_shared((M, N), dtype)
            if T.get_thread_binding() < split:
                T.copy(A, sa)
            else:
                T.copy(B, sb)
            f = T.alloc_fragment((M, N), "float32")
            for i, j in T.Parallel(M, N):
                f[i, j] = sa[i, j] * 2.0 + sb[i, j]
            T.copy(f, C)

    rng = np.random.default_rng(p.get("seed", 0))
    a, b = _rand(rng, (M, N), dtype), _rand(rng, (M, N), dtype)
    want = _f64(a) * 2 + _f64(b)
    rtol, atol = _tol(dtype, k=2)
    eps = _EPS[dtype]
    return Case("partition", p, part, [a, b, _poison((M, N), dtype)], {2: want}, rtol + eps, atol + 4 * eps)


# ---------------------------------------------------------------- the compiler's warp-specialized gemm
def _draw_ws_gemm(rng):
    return {"m": int(rng.choice((64, 100, 128, 200))), "n": int(rng.choice((64, 72, 128, 136))),
            "k": int(rng.choice((32, 64, 104, 128, 256))), "bm": int(rng.choice((64, 128))),
            "bn": int(rng.choice((64, 128))), "bk": int(rng.choice((32, 64))), "stages": int(rng.choice((1, 2, 3))),
            "threads": int(rng.choice((128, 256))), "dtype": str(rng.choice(("float16", "bfloat16"))),
            "epilogue": str(rng.choice(("none", "relu")))}


def _make_ws_gemm(p) -> Case:
    M, N, K, bm, bn, bk, dtype = p["m"], p["n"], p["k"], p["bm"], p["bn"], p["bk"], p["dtype"]
    relu = p["epilogue"] == "relu"

    @T.prim_func
    def wsg(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=p["threads"]) as (bx, by):
            As = T.alloc_shared((bm, bk), dtype)
            Bs = T.alloc_shared((bk, bn), dtype)
            Cf = T.alloc_fragment((bm, bn), "float32")
            T.clear(Cf)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=p["stages"]):
                T.copy(A[by * bm, k * bk], As)
                T.copy(B[k * bk, bx * bn], Bs)
                T.gemm(As, Bs, Cf)
            if relu:
                for i, j in T.Parallel(bm, bn):
                    Cf[i, j] = T.max(Cf[i, j], 0.0)
            T.copy(Cf, C[by * bm, bx * bn])

    rng = np.random.default_rng(p.get("seed", 0))
    a, b = _rand(rng, (M, K), dtype), _rand(rng, (K, N), dtype)
    want = _f64(a) @ _f64(b)
    if relu:
        want = np.maximum(want, 0)
    rtol, atol = _tol(dtype, k=K)
    return Case("ws_gemm", p, wsg, [a, b, _poison((M, N), "float32")], {2: want}, rtol, max(atol, 1e-3 * np.sqrt(K)),
                pass_configs={"tw.warp_specialize": True})


# ---------------------------------------------------------------- math functions, scalar params, alloc_var
_MATH = {"exp2": (T.exp2, np.exp2, -4, 4), "log": (T.log, np.log, 0.1, 8), "log2": (T.log2, np.log2, 0.1, 8),
         "sqrt": (T.sqrt, np.sqrt, 0.0, 8), "rsqrt": (T.rsqrt, lambda x: 1 / np.sqrt(x), 0.1, 8),
         "tanh": (T.tanh, np.tanh, -4, 4), "sigmoid": (T.sigmoid, lambda x: 1 / (1 + np.exp(-x)), -8, 8),
         "pow": (lambda x: T.pow(x, 1.5), lambda x: x ** 1.5, 0.0, 4), "exp": (T.exp, np.exp, -8, 4)}


def _draw_math(rng):
    return {"n": int(rng.choice(ODD + (64, 512))), "rows": int(rng.choice((1, 2, 3, 5))),
            "threads": int(rng.choice((32, 64, 128, 256))), "fn": str(rng.choice(sorted(_MATH))),
            "dtype": str(rng.choice(F_DTYPES)), "pipelined": bool(rng.random() < 0.5)}


def _make_math(p) -> Case:
    n, rows, fn, dtype = p["n"], p["rows"], p["fn"], p["dtype"]
    f, ref, lo, hi = _MATH[fn]
    block = 128

    @T.prim_func
    def mth(X: T.Tensor((rows, n), dtype), Y: T.Tensor((rows, n), dtype), Tot: T.Tensor((n,), "float32"),
            alpha: T.float32, start: T.int32):
        with T.Kernel(T.ceildiv(n, block), threads=p["threads"]) as bx:
            acc = T.alloc_fragment((block,), "float32")
            T.fill(acc, 0)
            if p["pipelined"]:
                for r in T.Pipelined(start, rows, num_stages=1):
                    for i in T.Parallel(block):
                        if bx * block + i < n:
                            Y[r, bx * block + i] = f(X[r, bx * block + i]) * alpha
                            acc[i] += T.cast(X[r, bx * block + i], "float32")
            else:
                for r in T.serial(start, rows):
                    for i in T.Parallel(block):
                        if bx * block + i < n:
                            Y[r, bx * block + i] = f(X[r, bx * block + i]) * alpha
                            acc[i] += T.cast(X[r, bx * block + i], "float32")
            for i in T.Parallel(block):
                if bx * block + i < n:
                    Tot[bx * block + i] = acc[i]

    rng = np.random.default_rng(p.get("seed", 0))
    x = _rand(rng, (rows, n), dtype, lo, hi)
    start = 1 if rows > 1 else 0
    y = _poison((rows, n), dtype)
    y[:start] = 0
    fx = _f64(x)
    want = np.concatenate([np.zeros((start, n)), ref(fx[start:]) * 0.75])
    tot = fx[start:].sum(0)
    rtol, atol = _tol(dtype, k=4)
    eps = 4 * _EPS[dtype]
    return Case("math", p, mth, [x, y, _poison((n,), "float32"), 0.75, start], {1: want, 2: tot},
                rtol + eps, atol + eps + 1e-6 * rows)


# ---------------------------------------------------------------- gemm with dynamic N and K, swizzled block order
def _draw_gemm_dyn(rng):
    return {"m": int(rng.choice((1, 17, 64, 100, 128))), "n": int(rng.choice((8, 24, 64, 100, 128))),
            "k": int(rng.choice((8, 16, 40, 64, 136))), "bm": int(rng.choice((32, 64))),
            "bn": int(rng.choice((32, 64))),
            "bk": int(rng.choice((16, 32))), "stages": int(rng.choice((0, 2))), "threads": int(rng.choice((128, 256))),
            "dyn": str(rng.choice(("n", "k", "nk"))), "swizzle": int(rng.choice((0, 2, 3))),
            "dtype": str(rng.choice(("float16", "bfloat16"))), "out": str(rng.choice(("float32", "float16")))}


def _make_gemm_dyn(p) -> Case:
    M, N, K, bm, bn, bk, dtype, out = p["m"], p["n"], p["k"], p["bm"], p["bn"], p["bk"], p["dtype"], p["out"]
    Nd = T.dynamic("n") if "n" in p["dyn"] else N
    Kd = T.dynamic("k") if "k" in p["dyn"] else K
    sw = p["swizzle"]

    @T.prim_func
    def gd(A: T.Tensor((M, Kd), dtype), B: T.Tensor((Kd, Nd), dtype), C: T.Tensor((M, Nd), out)):
        with T.Kernel(T.ceildiv(Nd, bn), T.ceildiv(M, bm), threads=p["threads"]) as (bx, by):
            As = T.alloc_shared((bm, bk), dtype)
            Bs = T.alloc_shared((bk, bn), dtype)
            Cf = T.alloc_fragment((bm, bn), "float32")
            Cs = T.alloc_shared((bm, bn), out)
            if sw:
                T.use_swizzle(panel_size=sw)
            T.clear(Cf)
            for k in T.Pipelined(T.ceildiv(Kd, bk), num_stages=p["stages"]):
                T.copy(A[by * bm, k * bk], As)
                T.copy(B[k * bk, bx * bn], Bs)
                T.gemm(As, Bs, Cf)
            T.copy(Cf, Cs)
            T.copy(Cs, C[by * bm, bx * bn])

    rng = np.random.default_rng(p.get("seed", 0))
    a, b = _rand(rng, (M, K), dtype), _rand(rng, (K, N), dtype)
    want = _f64(a) @ _f64(b)
    rtol, atol = _tol(dtype, out, k=K)
    return Case("gemm_dyn", p, gd, [a, b, _poison((M, N), out)], {2: want}, rtol, max(atol, 1e-3 * np.sqrt(K)))


# ---------------------------------------------------------------- per-thread locals and variables, int8 wrap-around
def _draw_locals(rng):
    return {"n": int(rng.choice(ODD + (64, 256))), "threads": int(rng.choice((32, 64, 128, 256))),
            "steps": int(rng.choice((1, 2, 5))), "dtype": str(rng.choice(("int8", "int32", "float32")))}


def _make_locals(p) -> Case:
    n, steps, dtype = p["n"], p["steps"], p["dtype"]
    nt = p["threads"]

    @T.prim_func
    def loc(A: T.Tensor((n,), dtype), B: T.Tensor((n,), dtype), C: T.Tensor((n,), dtype)):
        with T.Kernel(T.ceildiv(n, nt), threads=nt) as bx:
            tx = T.get_thread_binding()
            v = T.alloc_var(dtype)
            buf = T.alloc_local((2,), dtype)
            if bx * nt + tx < n:
                v = A[bx * nt + tx]
                buf[0] = B[bx * nt + tx]
                buf[1] = T.cast(0, dtype)
                for _ in T.serial(steps):
                    buf[1] = buf[1] + v * buf[0]
                    v = v + T.cast(1, dtype)
                C[bx * nt + tx] = buf[1]

    rng = np.random.default_rng(p.get("seed", 0))
    if dtype == "float32":
        a, b = _rand(rng, (n,), dtype), _rand(rng, (n,), dtype)
    else:
        a = rng.integers(-9, 10, n).astype(_np(dtype))
        b = rng.integers(-9, 10, n).astype(_np(dtype))
    fa, fb = a.astype(np.int64 if dtype != "float32" else np.float64), _f64(b) if dtype == "float32" else \
        b.astype(np.int64)
    acc = np.zeros(n, fa.dtype)
    for s in range(steps):
        acc = acc + (fa + s) * fb
    if dtype == "int8":  # every store to an int8 wraps around (two's complement)
        acc = np.zeros(n, np.int64)
        v = fa.copy()
        for _ in range(steps):
            acc = ((acc + v * fb + 128) % 256) - 128
            v = ((v + 1 + 128) % 256) - 128
    want = _f64(acc)
    tol = 1e-5 * steps if dtype == "float32" else 0.0
    return Case("locals", p, loc, [a, b, _poison((n,), dtype)], {2: want}, tol, tol)


# ---------------------------------------------------------------- reductions of a gemm accumulator, broadcast back
def _draw_gemm_reduce(rng):
    return {"bm": int(rng.choice((16, 32, 64, 128))), "bn": int(rng.choice((16, 32, 64, 128))),
            "k": int(rng.choice((16, 32, 48, 64, 96, 160))), "threads": int(rng.choice((64, 128, 256))),
            "dim": int(rng.choice((0, 1))), "op": str(rng.choice(("sum", "max", "absmax"))),
            "dtype": str(rng.choice(("float16", "bfloat16"))), "iters": int(rng.choice((1, 2)))}


def _make_gemm_reduce(p) -> Case:
    bm, bn, K, dim, op, dtype, it = p["bm"], p["bn"], p["k"], p["dim"], p["op"], p["dtype"], p["iters"]
    R = bm if dim == 1 else bn
    reducer = {"sum": T.reduce_sum, "max": T.reduce_max, "absmax": T.reduce_absmax}[op]

    @T.prim_func
    def gr(A: T.Tensor((it * bm, K), dtype), B: T.Tensor((K, bn), dtype), C: T.Tensor((it * bm, bn), "float32"),
           Red: T.Tensor((it, R), "float32")):
        with T.Kernel(1, threads=p["threads"]):
            As = T.alloc_shared((bm, K), dtype)
            Bs = T.alloc_shared((K, bn), dtype)
            Cf = T.alloc_fragment((bm, bn), "float32")
            r = T.alloc_fragment((R,), "float32")
            T.copy(B, Bs)
            for t in T.serial(it):
                T.copy(A[t * bm, 0], As)
                T.gemm(As, Bs, Cf, clear_accum=True)
                reducer(Cf, r, dim=dim)
                if dim == 1:
                    for i, j in T.Parallel(bm, bn):
                        Cf[i, j] = Cf[i, j] - r[i]
                else:
                    for i, j in T.Parallel(bm, bn):
                        Cf[i, j] = Cf[i, j] - r[j]
                T.copy(Cf, C[t * bm, 0])
                T.copy(r, Red[t, 0])

    rng = np.random.default_rng(p.get("seed", 0))
    a, b = _rand(rng, (it * bm, K), dtype), _rand(rng, (K, bn), dtype)
    prod = (_f64(a) @ _f64(b)).reshape(it, bm, bn)
    fn = {"sum": lambda x, ax: x.sum(ax), "max": lambda x, ax: x.max(ax), "absmax": lambda x, ax: np.abs(x).max(ax)}[op]
    red = fn(prod, 1 + dim)  # per iteration: dim 1 reduces columns (one value a row), dim 0 rows
    back = prod - (red[:, :, None] if dim == 1 else red[:, None, :])
    rtol, atol = _tol(dtype, k=K * (R if op == "sum" else 1))
    return Case("gemm_reduce", p, gr, [a, b, _poison((it * bm, bn), "float32"), _poison((it, R), "float32")],
                {2: back.reshape(it * bm, bn), 3: red}, rtol, max(atol, 1e-3 * np.sqrt(K * (bn if op == "sum" else 1))))


# ---------------------------------------------------------------- a reduced fragment applied in place to memory
def _draw_reduce_inplace(rng):
    return {"m": int(rng.choice((1, 3, 8, 16, 32, 33, 64))), "n": int(rng.choice((1, 5, 7, 16, 33, 64, 100))),
            "threads": int(rng.choice((32, 64, 96, 128, 256))), "dim": int(rng.choice((0, 1))),
            "sink": str(rng.choice(("shared", "global", "atomic")))}


def _make_reduce_inplace(p) -> Case:
    M, N, dim, sink = p["m"], p["n"], p["dim"], p["sink"]
    R = M if dim == 1 else N

    @T.prim_func
    def ri(X: T.Tensor((M, N), "float32"), S0: T.Tensor((R,), "float32"), Out: T.Tensor((R,), "float32")):
        with T.Kernel(1, threads=p["threads"]):
            x = T.alloc_fragment((M, N), "float32")
            r = T.alloc_fragment((R,), "float32")
            s = T.alloc_shared((R,), "float32")
            T.copy(X, x)
            T.reduce_sum(x, r, dim=dim)
            if sink == "shared":
                T.copy(S0, s)
                for i in T.Parallel(R):
                    s[i] = s[i] * 0.5 + r[i]
                T.copy(s, Out)
            elif sink == "global":
                for i in T.Parallel(R):
                    Out[i] = Out[i] * 0.5 + r[i]
            else:
                for i in T.Parallel(R):
                    T.atomic_add(Out[i], r[i])

    rng = np.random.default_rng(p.get("seed", 0))
    x = _rand(rng, (M, N), "float32")
    s0 = _rand(rng, (R,), "float32")
    red = _f64(x).sum(dim)
    if sink == "shared":
        o, want = _poison((R,), "float32"), _f64(s0) * 0.5 + red
    elif sink == "global":
        o = s0.copy()
        want = _f64(s0) * 0.5 + red
    else:
        o = s0.copy()
        want = _f64(s0) + red
    return Case("reduce_inplace", p, ri, [x, s0, o], {2: want}, 1e-5, 1e-5 * np.sqrt(M * N))


MORE = (
    Template("mask_cast", _draw_mask_cast, _make_mask_cast),
    Template("intdiv", _draw_intdiv, _make_intdiv),
    Template("atomic", _draw_atomic, _make_atomic),
    Template("bcast", _draw_bcast, _make_bcast),
    Template("rownorm", _draw_rownorm, _make_rownorm),
    Template("carry", _draw_carry, _make_carry),
    Template("gemm_var", _draw_gemm_var, _make_gemm_var),
    Template("copy_nd", _draw_copy_nd, _make_copy_nd),
    Template("partition", _draw_partition, _make_partition),
    Template("ws_gemm", _draw_ws_gemm, _make_ws_gemm),
    Template("math", _draw_math, _make_math),
    Template("gemm_dyn", _draw_gemm_dyn, _make_gemm_dyn),
    Template("locals", _draw_locals, _make_locals),
    Template("gemm_reduce", _draw_gemm_reduce, _make_gemm_reduce),
    Template("reduce_inplace", _draw_reduce_inplace, _make_reduce_inplace),
)
