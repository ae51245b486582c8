"""Random kernels from templates, each with its inputs and a float64 reference.

A template is a ``Template(name, draw, make)``: ``draw(rng)`` picks parameters (shapes including 1,
primes and ragged sizes, dtypes, tiles, pipeline depths, thread counts, transposes, epilogues) and
``make(params)`` returns a ``Case``: the prim_func, fresh inputs, the expected outputs computed in
float64, and the tolerance that the dtypes allow.  Parameters are plain dicts so a failing case
can be shrunk (``shrink.py``) and replayed from a script.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import language as T
from ..ir import dtype as dt

SIZES = (1, 2, 3, 7, 8, 13, 16, 31, 32, 33, 61, 64, 97, 100, 127, 128, 129, 191, 200, 256)


@dataclass
class Case:
    template: str
    params: dict
    func: object  # PrimFunc
    args: list  # NumPy arrays / scalars, outputs already poisoned
    expected: dict  # parameter index -> float64 array
    rtol: float
    atol: float
    out_idx: list = field(default_factory=list)
    pass_configs: dict | None = None
    # kernels run one after another on the same argument list (a library op of several passes):
    # (prim_func, indices into ``args`` that it takes, pass_configs); ``func`` is then the first
    chain: list | None = None
    # an op-level case (ops_cases.py): ``call(backend)`` runs it and returns the results, indexed as
    # ``args`` (``func`` is then None); ``backends``: the only backends it runs on (others: skipped)
    call: object = None
    backends: tuple | None = None


@dataclass(frozen=True)
class Template:
    name: str
    draw: object  # rng -> params
    make: object  # params -> Case


def _rand(rng, shape, dtype, lo=-1.0, hi=1.0):
    x = rng.uniform(lo, hi, size=shape)
    if dtype.startswith("int"):
        return rng.integers(-8, 9, size=shape).astype(dt.to_numpy(dtype))
    return x.astype(dt.to_numpy(dtype))


def sentinel(dtype: str):
    """The value outputs start with: NaN, or the most negative integer (never a template's result)."""
    nd = np.dtype(dt.to_numpy(dtype))
    return np.iinfo(nd).min if np.issubdtype(nd, np.integer) else np.nan


def _poison(shape, dtype):
    return np.full(shape, sentinel(dtype), dtype=dt.to_numpy(dtype))


def _f64(x):
    return np.asarray(x).astype(np.float64)


def _tol(*dtypes, k=1):
    """Tolerance from the least precise dtype involved; ``k`` grows with accumulation length."""
    if any(d in ("bfloat16",) for d in dtypes):
        base = 2e-2
    elif any(d in ("float16",) for d in dtypes):
        base = 4e-3
    else:
        base = 1e-5
    scale = max(1.0, np.sqrt(k) / 4)
    return base * scale, base * scale


# ---------------------------------------------------------------- elementwise
_UNARY = {"exp": (T.exp, np.exp), "sigmoid": (T.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
          "abs": (T.abs, np.abs), "tanh": (T.tanh, np.tanh)}


def _draw_elementwise(rng):
    return {"n": int(rng.choice(SIZES + (1000, 4097))), "block": int(rng.choice((32, 64, 128, 256, 512))),
            "threads": int(rng.choice((32, 64, 96, 128, 192, 256))),
            "dtype": str(rng.choice(("float32", "float16", "bfloat16"))),
            "op": str(rng.choice(("fma", "max", "exp", "sigmoid", "abs", "tanh", "sub"))),
            "style": str(rng.choice(("guard", "copy")))}


def _make_elementwise(p) -> Case:
    n, block, dtype, op = p["n"], p["block"], p["dtype"], p["op"]

    def combine(a, b, c):
        if op == "fma":
            return a * b + c
        if op == "max":
            return T.max(a, b)
        if op == "sub":
            return a - b
        return _UNARY[op][0](a) + c

    if p["style"] == "guard":
        @T.prim_func
        def ew(A: T.Tensor((n,), dtype), B: T.Tensor((n,), dtype), C: T.Tensor((n,), dtype),
               D: T.Tensor((n,), dtype)):
            with T.Kernel(T.ceildiv(n, block), threads=p["threads"]) as bx:
                for i in T.Parallel(block):
                    if bx * block + i < n:
                        D[bx * block + i] = combine(A[bx * block + i], B[bx * block + i], C[bx * block + i])
    else:
        @T.prim_func
        def ew(A: T.Tensor((n,), dtype), B: T.Tensor((n,), dtype), C: T.Tensor((n,), dtype),
               D: T.Tensor((n,), dtype)):
            with T.Kernel(T.ceildiv(n, block), threads=p["threads"]) as bx:
                a = T.alloc_fragment((block,), dtype)
                b = T.alloc_fragment((block,), dtype)
                c = T.alloc_fragment((block,), dtype)
                T.copy(A[bx * block], a)
                T.copy(B[bx * block], b)
                T.copy(C[bx * block], c)
                for i in T.Parallel(block):
                    a[i] = combine(a[i], b[i], c[i])
                T.copy(a, D[bx * block])

    rng = np.random.default_rng(p.get("seed", 0))
    a, b, c = (_rand(rng, (n,), dtype) for _ in range(3))
    fa, fb, fc = _f64(a), _f64(b), _f64(c)
    if op == "fma":
        want = fa * fb + fc
    elif op == "max":
        want = np.maximum(fa, fb)
    elif op == "sub":
        want = fa - fb
    else:
        want = _UNARY[op][1](fa) + fc
    rtol, atol = _tol(dtype, k=16)
    return Case("elementwise", p, ew, [a, b, c, _poison((n,), dtype)], {3: want}, rtol, atol)


# ---------------------------------------------------------------- gemm
def _draw_gemm(rng):
    return {"m": int(rng.choice(SIZES)), "n": int(rng.choice(SIZES)), "k": int(rng.choice(SIZES + (320,))),
            "bm": int(rng.choice((16, 32, 64, 128))), "bn": int(rng.choice((16, 32, 48, 64, 96, 128))),
            "bk": int(rng.choice((16, 32, 48, 64, 96))), "stages": int(rng.choice((0, 1, 2, 3))),
            "threads": int(rng.choice((64, 96, 128, 192, 256))), "trans_a": bool(rng.random() < 0.3),
            "trans_b": bool(rng.random() < 0.4), "dtype": str(rng.choice(("float16", "bfloat16"))),
            "out": str(rng.choice(("float32", "in"))), "epilogue": str(rng.choice(("none", "relu", "bias", "scale"))),
            "dynamic_m": bool(rng.random() < 0.2)}


def _make_gemm(p) -> Case:
    M, N, K, bm, bn, bk = p["m"], p["n"], p["k"], p["bm"], p["bn"], p["bk"]
    dtype = p["dtype"]
    out = dtype if p["out"] == "in" else "float32"
    epi = p["epilogue"]
    Md = T.dynamic("m") if p["dynamic_m"] else M
    a_shape = (K, Md) if p["trans_a"] else (Md, K)
    b_shape = (N, K) if p["trans_b"] else (K, N)
    as_shape = (bk, bm) if p["trans_a"] else (bm, bk)
    bs_shape = (bn, bk) if p["trans_b"] else (bk, bn)
    ta, tb = p["trans_a"], p["trans_b"]

    @T.prim_func
    def gemm(A: T.Tensor(a_shape, dtype), B: T.Tensor(b_shape, dtype), Bias: T.Tensor((N,), "float32"),
             C: T.Tensor((Md, N), out)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(Md, bm), threads=p["threads"]) as (bx, by):
            As = T.alloc_shared(as_shape, dtype)
            Bs = T.alloc_shared(bs_shape, dtype)
            Cf = T.alloc_fragment((bm, bn), "float32")
            T.clear(Cf)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=p["stages"]):
                if ta:
                    T.copy(A[k * bk, by * bm], As)
                else:
                    T.copy(A[by * bm, k * bk], As)
                if tb:
                    T.copy(B[bx * bn, k * bk], Bs)
                else:
                    T.copy(B[k * bk, bx * bn], Bs)
                T.gemm(As, Bs, Cf, transpose_A=ta, transpose_B=tb)
            if epi == "relu":
                for i, j in T.Parallel(bm, bn):
                    Cf[i, j] = T.max(Cf[i, j], 0.0)
            elif epi == "bias":
                for i, j in T.Parallel(bm, bn):
                    Cf[i, j] = Cf[i, j] + Bias[T.min(bx * bn + j, N - 1)]
            elif epi == "scale":
                for i, j in T.Parallel(bm, bn):
                    Cf[i, j] = Cf[i, j] * 0.5
            T.copy(Cf, C[by * bm, bx * bn])

    rng = np.random.default_rng(p.get("seed", 0))
    a, b = _rand(rng, a_shape if not p["dynamic_m"] else ((K, M) if ta else (M, K)), dtype), _rand(rng, b_shape, dtype)
    bias = _rand(rng, (N,), "float32")
    fa = _f64(a).T if ta else _f64(a)
    fb = _f64(b).T if tb else _f64(b)
    want = fa @ fb
    if epi == "relu":
        want = np.maximum(want, 0)
    elif epi == "bias":
        want = want + _f64(bias)[None, :]
    elif epi == "scale":
        want = want * 0.5
    rtol, atol = _tol(dtype, out, k=K)
    atol = max(atol, 1e-3 * np.sqrt(K))
    return Case("gemm", p, gemm, [a, b, bias, _poison((M, N), out)], {3: want}, rtol, atol)


# ---------------------------------------------------------------- reductions
def _draw_reduce(rng):
    return {"m": int(rng.choice(SIZES[:12] + (64, 128))), "n": int(rng.choice(SIZES + (384, 640))),
            "op": str(rng.choice(("sum", "max", "min", "abssum", "absmax"))), "dim": int(rng.choice((0, 1))),
            "clear": bool(rng.random() < 0.7), "threads": int(rng.choice((32, 64, 96, 128, 192, 256))),
            "dtype": str(rng.choice(("float32", "float16")))}


def _make_reduce(p) -> Case:
    M, N, op, dim, dtype = p["m"], p["n"], p["op"], p["dim"], p["dtype"]
    R = N if dim == 0 else M
    reducer = {"sum": T.reduce_sum, "max": T.reduce_max, "min": T.reduce_min, "abssum": T.reduce_abssum,
               "absmax": T.reduce_absmax}[op]
    clear = p["clear"]

    @T.prim_func
    def red(A: T.Tensor((M, N), dtype), Init: T.Tensor((R,), "float32"), Out: T.Tensor((R,), "float32")):
        with T.Kernel(1, threads=p["threads"]):
            a = T.alloc_fragment((M, N), "float32")
            r = T.alloc_fragment((R,), "float32")
            T.copy(A, a)
            T.copy(Init, r)
            reducer(a, r, dim=dim, clear=clear)
            T.copy(r, Out)

    rng = np.random.default_rng(p.get("seed", 0))
    a, init = _rand(rng, (M, N), dtype), _rand(rng, (R,), "float32")
    fa = _f64(a)
    axis = dim
    vals = {"sum": fa.sum(axis), "max": fa.max(axis), "min": fa.min(axis), "abssum": np.abs(fa).sum(axis),
            "absmax": np.abs(fa).max(axis)}[op]
    if not clear:
        fi = _f64(init)
        vals = {"sum": vals + fi, "abssum": vals + fi, "max": np.maximum(vals, fi), "min": np.minimum(vals, fi),
                "absmax": np.maximum(vals, fi)}[op]
    rtol, atol = _tol("float32", k=M * N)
    return Case("reduce", p, red, [a, init, _poison((R,), "float32")], {2: vals}, rtol, max(atol, 1e-5 * N))


# ---------------------------------------------------------------- row softmax after a gemm (online statistics)
def _draw_online(rng):
    return {"bm": int(rng.choice((16, 32, 64))), "bn": int(rng.choice((16, 32, 48, 64))),
            "d": int(rng.choice((16, 32, 48, 64, 96))), "iters": int(rng.choice((1, 2, 3))),
            "threads": int(rng.choice((64, 128, 256)))}


def _make_online(p) -> Case:
    bm, bn, D, it = p["bm"], p["bn"], p["d"], p["iters"]
    S = bn * it

    @T.prim_func
    def online(Q: T.Tensor((bm, D), "float16"), Kt: T.Tensor((S, D), "float16"), V: T.Tensor((S, D), "float16"),
               Out: T.Tensor((bm, D), "float32"), L: T.Tensor((bm,), "float32")):
        with T.Kernel(1, threads=p["threads"]):
            q = T.alloc_shared((bm, D), "float16")
            k_s = T.alloc_shared((bn, D), "float16")
            v_s = T.alloc_shared((bn, D), "float16")
            s = T.alloc_fragment((bm, bn), "float32")
            s16 = T.alloc_fragment((bm, bn), "float16")
            o = T.alloc_fragment((bm, D), "float32")
            m = T.alloc_fragment((bm,), "float32")
            m_prev = T.alloc_fragment((bm,), "float32")
            sc = T.alloc_fragment((bm,), "float32")
            rs = T.alloc_fragment((bm,), "float32")
            l_ = T.alloc_fragment((bm,), "float32")
            T.copy(Q, q)
            T.fill(o, 0)
            T.fill(l_, 0)
            T.fill(m, -T.infinity("float32"))
            for k in T.serial(it):
                T.copy(Kt[k * bn, 0], k_s)
                T.copy(V[k * bn, 0], v_s)
                T.clear(s)
                T.gemm(q, k_s, s, transpose_B=True)
                T.copy(m, m_prev)
                T.reduce_max(s, m, dim=1, clear=False)
                for i in T.Parallel(bm):
                    sc[i] = T.exp(m_prev[i] - m[i])
                for i, j in T.Parallel(bm, D):
                    o[i, j] *= sc[i]
                for i, j in T.Parallel(bm, bn):
                    s[i, j] = T.exp(s[i, j] - m[i])
                T.reduce_sum(s, rs, dim=1)
                for i in T.Parallel(bm):
                    l_[i] = l_[i] * sc[i] + rs[i]
                T.copy(s, s16)
                T.gemm(s16, v_s, o)
            T.copy(o, Out)
            T.copy(l_, L)

    rng = np.random.default_rng(p.get("seed", 0))
    q, k, v = (_rand(rng, shape, "float16") for shape in ((bm, D), (S, D), (S, D)))
    sc = _f64(q) @ _f64(k).T
    mx = sc.max(1, keepdims=True)
    e = np.exp(sc - mx)
    want_l = e.sum(1)
    want_o = e @ _f64(v)
    return Case("online_softmax", p, online, [q, k, v, _poison((bm, D), "float32"), _poison((bm,), "float32")],
                {3: want_o, 4: want_l}, 2e-2, 2e-2)


# ---------------------------------------------------------------- flash attention (the library kernel)
def _draw_attention(rng):
    bm = int(rng.choice((16, 32, 64)))
    return {"batch": int(rng.choice((1, 2))), "heads": int(rng.choice((1, 2))),
            "seq": int(rng.choice((16, 32, 48, 64, 100, 128))), "dim": int(rng.choice((16, 32, 64))),
            "causal": bool(rng.random() < 0.4), "bm": bm, "bn": int(rng.choice((16, 32, 64))),
            "stages": int(rng.choice((1, 2))), "threads": int(rng.choice((64, 128)))}


def _make_attention(p) -> Case:
    from ..kernels import flash_attention

    b, h, s, d = p["batch"], p["heads"], p["seq"], p["dim"]
    func = flash_attention(b, h, s, d, is_causal=p["causal"], block_M=p["bm"], block_N=p["bn"],
                           num_stages=p["stages"], threads=p["threads"])
    rng = np.random.default_rng(p.get("seed", 0))
    q, k, v = (_rand(rng, (b, s, h, d), "float16") for _ in range(3))
    fq, fk, fv = (_f64(x).transpose(0, 2, 1, 3) for x in (q, k, v))
    sc = fq @ fk.transpose(0, 1, 3, 2) / np.sqrt(d)
    if p["causal"]:
        sc = np.where(np.tril(np.ones((s, s), bool)), sc, -np.inf)
    e = np.exp(sc - sc.max(-1, keepdims=True))
    want = (e / e.sum(-1, keepdims=True)) @ fv
    return Case("attention", p, func, [q, k, v, _poison((b, s, h, d), "float16")], {3: want.transpose(0, 2, 1, 3)},
                2e-2, 2e-2)


# ---------------------------------------------------------------- tiled copies through shared memory
def _draw_copy(rng):
    return {"m": int(rng.choice(SIZES)), "n": int(rng.choice(SIZES)), "bm": int(rng.choice((8, 16, 32, 64))),
            "bn": int(rng.choice((8, 16, 32, 64, 128))), "threads": int(rng.choice((32, 64, 96, 128, 192, 256))),
            "dtype": str(rng.choice(("float32", "float16", "int32", "int8"))),
            "via": str(rng.choice(("shared", "fragment", "transpose"))), "dynamic": bool(rng.random() < 0.3)}


def _make_copy(p) -> Case:
    M, N, bm, bn, dtype, via = p["m"], p["n"], p["bm"], p["bn"], p["dtype"], p["via"]
    Md = T.dynamic("m") if p.get("dynamic") else M
    out_shape = (N, M) if via == "transpose" else (M, N)
    out_decl = (N, Md) if via == "transpose" else (Md, N)

    @T.prim_func
    def cp(A: T.Tensor((Md, N), dtype), B: T.Tensor(out_decl, dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(Md, bm), threads=p["threads"]) as (bx, by):
            s = T.alloc_shared((bm, bn), dtype)
            f = T.alloc_fragment((bm, bn), dtype)
            T.copy(A[by * bm, bx * bn], s)
            if via == "shared":
                T.copy(s, B[by * bm, bx * bn])
            elif via == "fragment":
                T.copy(s, f)
                for i, j in T.Parallel(bm, bn):
                    f[i, j] = f[i, j] + 1
                T.copy(f, B[by * bm, bx * bn])
            else:
                for i, j in T.Parallel(bm, bn):
                    if by * bm + i < Md and bx * bn + j < N:
                        B[bx * bn + j, by * bm + i] = s[i, j]

    rng = np.random.default_rng(p.get("seed", 0))
    a = _rand(rng, (M, N), dtype)
    want = _f64(a).T if via == "transpose" else _f64(a) + (1 if via == "fragment" else 0)
    rtol, atol = _tol(dtype)
    return Case("copy", p, cp, [a, _poison(out_shape, dtype)], {1: want}, rtol, atol)


TEMPLATES = {t.name: t for t in (
    Template("elementwise", _draw_elementwise, _make_elementwise),
    Template("gemm", _draw_gemm, _make_gemm),
    Template("reduce", _draw_reduce, _make_reduce),
    Template("online_softmax", _draw_online, _make_online),
    Template("attention", _draw_attention, _make_attention),
    Template("copy", _draw_copy, _make_copy),
)}

from .templates_more import MORE  # noqa: E402 - they build on the helpers above

TEMPLATES.update({t.name: t for t in MORE})

from .templates_new import NEW  # noqa: E402 - the features that landed last: wgmma/WS defaults, split-K, ...

TEMPLATES.update({t.name: t for t in NEW})

from .templates_s8 import S8  # noqa: E402 - session 8: user layouts, vectorized loops, fp8, views, tile atomics

TEMPLATES.update({t.name: t for t in S8})

from .templates_s9 import S9  # noqa: E402 - session 8 features: clusters, var inits under WS, T.Persistent

TEMPLATES.update({t.name: t for t in S9})

from .ops_cases import OPS  # noqa: E402 - ops.matmul / ops.attention called twice, against float64

TEMPLATES.update({t.name: t for t in OPS})

from .ops_cases_s10 import OPS_S10  # noqa: E402 - session 10: non-causal sm_90a attention at d 65..128

TEMPLATES.update({t.name: t for t in OPS_S10})

from .templates_s10 import S10  # noqa: E402 - session 10: gemm chains, user split-K, 2-D reductions with atomics

TEMPLATES.update({t.name: t for t in S10})

from .ops_cases_s11 import OPS_S11  # noqa: E402 - session 11: the session-10 sm_90a defaults at their boundaries

TEMPLATES.update({t.name: t for t in OPS_S11})
