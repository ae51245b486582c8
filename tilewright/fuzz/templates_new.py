"""Fuzz templates for the features that landed last, where a wrong answer would hide.

- ``hopper_gemm``: pipelined GEMMs on the sm_90a path: wgmma and automatic warp specialization
  (``tw.enable_wgmma`` / ``tw.warp_specialize`` set explicitly, on or off, so the template exercises
  them whatever the default), block_M 64/128/256 x block_N 64..256 x block_K 32/64, 1-4 stages,
  128/256/384 threads, ragged M/N/K, transposes, fp16/bf16, fused epilogues, C through shared or not.
- ``lib_splitk``: ``kernels.gemm.matmul_splitk`` then ``splitk_reduce`` (deterministic workspace of
  one slice per split, or fp32 atomics into a zeroed slice), random shapes and splits.
- ``lib_persistent``: ``kernels.gemm.matmul_persistent`` with few blocks looping over the tiles in
  grouped (rasterized) order, bias and activation.
- ``ws_attention``: ``kernels.flash_attention`` with wgmma + the warp-specialized loop
  (``warp_specialize_loop``), causal or not, ragged S, D 64/128, blocks 64/128.
- ``sparse_gemm``: conditional bodies inside ``T.Pipelined`` (a block-sparse GEMM with a random
  block mask: the whole body, the gemm alone, or the A copy with a cleared tile otherwise, or
  operand copies split between warpgroups by ``if tx < 128``).
- ``launch_sized``: a shared buffer sized at launch (``T.alloc_shared((n,))`` with ``n`` a scalar
  argument), ``T.Parallel(n)`` over it, tile copies under a thread-index condition, and a reduction
  into ``out[0]``.
- ``guarded_select``: ``T.if_then_else(i < n, A[...], x)`` inside ``T.Parallel`` over ragged 1-D and
  2-D tiles (a vectorized loop must not issue the guarded element's load unguarded: an out-of-bounds
  read the emulator reports), reads offset by a run-time amount, 16-bit and 32-bit elements.

Shapes are small (a few blocks): the emulator runs every thread of every block.
"""

from __future__ import annotations

import numpy as np

from .. import language as T
from .templates import Case, Template, _f64, _poison, _rand, _tol


def _ragged(rng, block, most_blocks):
    """A size of at most ``most_blocks`` blocks, ragged more often than not (1, primes, a block +- 1)."""
    whole = int(rng.integers(1, most_blocks + 1)) * block
    choices = [whole, max(1, whole - 1), max(1, whole - block // 2 + 3), 1, 7, 61]
    if whole < most_blocks * block:
        choices.append(whole + 1)
    return int(rng.choice([c for c in choices if c <= most_blocks * block]))


def _gemm_tol(dtype, out, K):
    rtol, atol = _tol(dtype, out, k=K)
    return rtol, max(atol, 1e-3 * np.sqrt(K))


def _epilogue_np(want, epi, bias, scale=0.5):
    if epi in ("bias", "bias_relu"):
        want = want + _f64(bias)[None, :]
    if epi in ("relu", "bias_relu"):
        want = np.maximum(want, 0)
    if epi == "scale":
        want = want * scale
    return want


# ---------------------------------------------------------------- sm_90a gemm (wgmma / warp specialization)
def _draw_hopper_gemm(rng):
    bm = int(rng.choice((64, 128, 256), p=(0.45, 0.45, 0.1)))
    bn = int(rng.choice((64, 96, 128, 192, 256), p=(0.35, 0.15, 0.3, 0.1, 0.1)))
    bk = int(rng.choice((32, 64)))
    # 384 threads (three warpgroups) only where the tile splits over 12 warps
    threads = int(rng.choice((128, 256, 384) if bm * bn >= 128 * 192 else (128, 256)))
    most = 2 if bm * bn <= 128 * 128 else 1
    m, n, k = _ragged(rng, bm, most), _ragged(rng, bn, most), _ragged(rng, bk, 4)
    if rng.random() < 0.6:
        # whole 16-byte rows: the operands can go through TMA, which the automatic warp
        # specialization needs (still ragged against the blocks: 56, 72, 136, ...)
        m, n, k = (-(-v // 8) * 8 for v in (m, n, k))
    return {"m": m, "n": n, "k": k,
            "bm": bm, "bn": bn, "bk": bk, "stages": int(rng.integers(1, 5)), "threads": threads,
            "trans_a": bool(rng.random() < 0.3), "trans_b": bool(rng.random() < 0.4),
            "dtype": str(rng.choice(("float16", "bfloat16"))), "out": str(rng.choice(("float32", "in"))),
            "epilogue": str(rng.choice(("none", "relu", "bias", "scale", "bias_relu"))),
            "c_shared": bool(rng.random() < 0.5), "wgmma": bool(rng.random() < 0.8),
            "ws": bool(rng.random() < 0.6)}


def _make_hopper_gemm(p) -> Case:
    M, N, K, bm, bn, bk, dtype = p["m"], p["n"], p["k"], p["bm"], p["bn"], p["bk"], p["dtype"]
    ta, tb, epi, c_shared = p["trans_a"], p["trans_b"], p["epilogue"], p["c_shared"]
    out = dtype if p["out"] == "in" else "float32"
    a_shape, b_shape = ((K, M) if ta else (M, K)), ((N, K) if tb else (K, N))
    as_shape, bs_shape = ((bk, bm) if ta else (bm, bk)), ((bn, bk) if tb else (bk, bn))

    @T.prim_func
    def hgemm(A: T.Tensor(a_shape, dtype), B: T.Tensor(b_shape, dtype), Bias: T.Tensor((N,), "float32"),
              C: T.Tensor((M, N), out)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=p["threads"]) as (bx, by):
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
            if epi in ("bias", "bias_relu"):
                for i, j in T.Parallel(bm, bn):
                    Cf[i, j] = Cf[i, j] + Bias[T.min(bx * bn + j, N - 1)]
            if epi in ("relu", "bias_relu"):
                for i, j in T.Parallel(bm, bn):
                    Cf[i, j] = T.max(Cf[i, j], 0.0)
            if epi == "scale":
                for i, j in T.Parallel(bm, bn):
                    Cf[i, j] = Cf[i, j] * 0.5
            if c_shared:
                Cs = T.alloc_shared((bm, bn), out)
                T.copy(Cf, Cs)
                T.copy(Cs, C[by * bm, bx * bn])
            else:
                T.copy(Cf, C[by * bm, bx * bn])

    rng = np.random.default_rng(p.get("seed", 0))
    a, b, bias = _rand(rng, a_shape, dtype), _rand(rng, b_shape, dtype), _rand(rng, (N,), "float32")
    fa = _f64(a).T if ta else _f64(a)
    fb = _f64(b).T if tb else _f64(b)
    want = _epilogue_np(fa @ fb, epi, bias)
    rtol, atol = _gemm_tol(dtype, out, K)
    return Case("hopper_gemm", p, hgemm, [a, b, bias, _poison((M, N), out)], {3: want}, rtol, atol,
                pass_configs={"tw.enable_wgmma": p["wgmma"], "tw.warp_specialize": p["ws"]})


# ---------------------------------------------------------------- library split-K (two kernels)
_ACTS = {"none": lambda x: x, "relu": lambda x: np.maximum(x, 0), "silu": lambda x: x / (1 + np.exp(-x)),
         "gelu_tanh": lambda x: 0.5 * x * (1 + np.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))}


def _draw_splitk(rng):
    bm, bn, bk = int(rng.choice((16, 32, 64))), int(rng.choice((32, 64, 128))), int(rng.choice((32, 64, 128)))
    return {"m": _ragged(rng, bm, 2), "n": _ragged(rng, bn, 2), "k": _ragged(rng, bk, 4), "bm": bm, "bn": bn,
            "bk": bk, "splits": int(rng.integers(1, 5)), "stages": int(rng.integers(1, 5)),
            "threads": int(rng.choice((128, 256))), "trans_a": bool(rng.random() < 0.3),
            "trans_b": bool(rng.random() < 0.4), "dtype": str(rng.choice(("float16", "bfloat16"))),
            "atomic": bool(rng.random() < 0.5), "bias": bool(rng.random() < 0.5),
            "act": str(rng.choice(sorted(_ACTS))), "out": str(rng.choice(("float32", "in"))),
            "wgmma": bool(rng.random() < 0.5)}


def _make_splitk(p) -> Case:
    from ..kernels.gemm import k_tiles_per_split, matmul_splitk, splitk_reduce

    M, N, K, bm, bn, bk, S, dtype = p["m"], p["n"], p["k"], p["bm"], p["bn"], p["bk"], p["splits"], p["dtype"]
    ta, tb, atomic = p["trans_a"], p["trans_b"], p["atomic"]
    out = dtype if p["out"] == "in" else "float32"
    bias_dt = dtype if p["bias"] else None
    first = matmul_splitk(M, N, K, bm, bn, bk, S, dtype, ta, tb, p["stages"], p["threads"], atomic)
    slices = 1 if atomic else S
    second = splitk_reduce(M, N, slices, out, bias_dt, p["act"], bm, bn, p["threads"])
    a_shape, b_shape = ((K, M) if ta else (M, K)), ((N, K) if tb else (K, N))
    rng = np.random.default_rng(p.get("seed", 0))
    a, b = _rand(rng, a_shape, dtype), _rand(rng, b_shape, dtype)
    bias = _rand(rng, (N if bias_dt else 1,), bias_dt or "float32")
    # the workspace: the atomic form's contract is a zeroed slice; the deterministic one's is written
    ws = np.zeros((M, 1, N), np.float32) if atomic else _poison((M, S, N), "float32")  # (M, slices, N)
    fa = _f64(a).T if ta else _f64(a)
    fb = _f64(b).T if tb else _f64(b)
    kps = k_tiles_per_split(K, bk, S) * bk
    parts = np.stack([fa[:, z * kps:(z + 1) * kps] @ fb[z * kps:(z + 1) * kps, :] for z in range(S)], axis=1)
    total = parts.sum(1)
    want = _ACTS[p["act"]](total + (_f64(bias)[None, :] if bias_dt else 0))
    rtol, atol = _gemm_tol(dtype, out, K)
    expected = {4: want, 2: total[:, None] if atomic else parts}
    return Case("lib_splitk", p, first, [a, b, ws, bias, _poison((M, N), out)], expected, rtol, atol,
                chain=[(first, [0, 1, 2], {"tw.enable_wgmma": p.get("wgmma", False)}), (second, [2, 3, 4], None)])


# ---------------------------------------------------------------- library persistent gemm
def _draw_persistent(rng):
    bm, bn = int(rng.choice((32, 64, 128), p=(0.4, 0.4, 0.2))), int(rng.choice((32, 64, 128), p=(0.4, 0.4, 0.2)))
    bk = int(rng.choice((32, 64)))
    m, n, k = _ragged(rng, bm, 3), _ragged(rng, bn, 2), _ragged(rng, bk, 3)
    if rng.random() < 0.75:
        # sizes of whole 8-element (16-byte) runs keep every operand TMA-eligible on sm_90 (the
        # warp-specialized persistent loop); the rest take the cp.async pipeline nested in the tile loop
        m, n, k = (-(-v // 8) * 8 for v in (m, n, k))
    return {"m": m, "n": n, "k": k, "bm": bm, "bn": bn, "bk": bk,
            "stages": int(rng.integers(1, 4)), "threads": 128 if bm * bn < 64 * 128 else int(rng.choice((128, 256))),
            "blocks": int(rng.integers(1, 5)), "group": int(rng.integers(1, 5)), "trans_a": bool(rng.random() < 0.3),
            "trans_b": bool(rng.random() < 0.4), "dtype": str(rng.choice(("float16", "bfloat16"))),
            "bias": bool(rng.random() < 0.5), "act": str(rng.choice(sorted(_ACTS))),
            "out": str(rng.choice(("float32", "in"))), "wgmma": bool(rng.random() < 0.5)}


def tma_eligible(p) -> bool:
    """Whether every operand row of a ``lib_persistent`` case is a whole number of 16 bytes."""
    return all(v % 8 == 0 for v in (p["m"], p["n"], p["k"]))


def _make_persistent(p) -> Case:
    from ..kernels.gemm import matmul_persistent

    M, N, K, dtype, ta, tb = p["m"], p["n"], p["k"], p["dtype"], p["trans_a"], p["trans_b"]
    out = dtype if p["out"] == "in" else "float32"
    bias_dt = dtype if p["bias"] else None
    func = matmul_persistent(M, N, K, p["bm"], p["bn"], p["bk"], dtype, out, ta, tb, p["stages"], p["threads"],
                             p["blocks"], p["group"], bias_dt, p["act"])
    a_shape, b_shape = ((K, M) if ta else (M, K)), ((N, K) if tb else (K, N))
    rng = np.random.default_rng(p.get("seed", 0))
    a, b = _rand(rng, a_shape, dtype), _rand(rng, b_shape, dtype)
    bias = _rand(rng, (N if bias_dt else 1,), bias_dt or "float32")
    fa = _f64(a).T if ta else _f64(a)
    fb = _f64(b).T if tb else _f64(b)
    want = _ACTS[p["act"]](fa @ fb + (_f64(bias)[None, :] if bias_dt else 0))
    rtol, atol = _gemm_tol(dtype, out, K)
    return Case("lib_persistent", p, func, [a, b, bias, _poison((M, N), out)], {3: want}, rtol, atol,
                pass_configs={"tw.enable_wgmma": p.get("wgmma", False)})


# ---------------------------------------------------------------- flash attention on the warp-specialized loop
def _draw_ws_attention(rng):
    bm = int(rng.choice((64, 128)))
    return {"batch": int(rng.choice((1, 2), p=(0.8, 0.2))), "heads": int(rng.choice((1, 2), p=(0.8, 0.2))),
            "seq": int(rng.choice((1, 17, 64, 65, 100, 128, 129))), "dim": int(rng.choice((64, 128))),
            "causal": bool(rng.random() < 0.5), "bm": bm, "bn": int(rng.choice((64, 128))),
            "stages": int(rng.choice((1, 2, 3))), "threads": int(rng.choice((128, 256)) if bm == 128 else 128),
            "dtype": str(rng.choice(("float16", "bfloat16"))), "ws": bool(rng.random() < 0.85)}


def _make_ws_attention(p) -> Case:
    from ..kernels import flash_attention

    b, h, s, d, dtype = p["batch"], p["heads"], p["seq"], p["dim"], p["dtype"]
    func = flash_attention(b, h, s, d, p["causal"], p["bm"], p["bn"], p["stages"], p["threads"], dtype)
    rng = np.random.default_rng(p.get("seed", 0))
    q, k, v = (_rand(rng, (b, s, h, d), dtype) for _ in range(3))
    fq, fk, fv = (_f64(x).transpose(0, 2, 1, 3) for x in (q, k, v))
    sc = fq @ fk.transpose(0, 1, 3, 2) / np.sqrt(d)
    if p["causal"]:
        sc = np.where(np.tril(np.ones((s, s), bool)), sc, -np.inf)
    e = np.exp(sc - sc.max(-1, keepdims=True))
    want = (e / e.sum(-1, keepdims=True)) @ fv
    tol = 2e-2 if dtype == "bfloat16" else 5e-3
    return Case("ws_attention", p, func, [q, k, v, _poison((b, s, h, d), dtype)], {3: want.transpose(0, 2, 1, 3)},
                tol, tol, pass_configs={"tw.enable_wgmma": True, "tw.warp_specialize": p["ws"]})


# ---------------------------------------------------------------- conditional bodies inside T.Pipelined
def _draw_sparse_gemm(rng):
    bm, bn, bk = int(rng.choice((32, 64, 128))), int(rng.choice((32, 64, 128))), int(rng.choice((16, 32, 64)))
    variant = str(rng.choice(("whole", "gemm_only", "copy_else_clear", "tx_split")))
    threads = 256 if variant == "tx_split" else int(rng.choice((128, 256)))
    return {"m": _ragged(rng, bm, 2), "n": _ragged(rng, bn, 2), "k": _ragged(rng, bk, 5), "bm": bm, "bn": bn,
            "bk": bk, "stages": int(rng.integers(0, 4)), "threads": threads, "variant": variant,
            "density": float(rng.choice((0.0, 0.3, 0.6, 1.0))), "mask_dtype": str(rng.choice(("bool", "int32"))),
            "dtype": str(rng.choice(("float16", "bfloat16"))), "wgmma": bool(rng.random() < 0.5),
            "ws": bool(rng.random() < 0.5)}


def _make_sparse_gemm(p) -> Case:
    M, N, K, bm, bn, bk, dtype, variant = p["m"], p["n"], p["k"], p["bm"], p["bn"], p["bk"], p["dtype"], p["variant"]
    mb, kb = -(-M // bm), -(-K // bk)

    @T.prim_func
    def sparse(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), Mask: T.Tensor((mb, kb), p["mask_dtype"]),
               C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), mb, threads=p["threads"]) as (bx, by):
            tx = T.get_thread_binding()
            As = T.alloc_shared((bm, bk), dtype)
            Bs = T.alloc_shared((bk, bn), dtype)
            Cf = T.alloc_fragment((bm, bn), "float32")
            T.clear(Cf)
            for ko in T.Pipelined(kb, num_stages=p["stages"]):
                if variant == "whole":
                    if Mask[by, ko]:
                        T.copy(A[by * bm, ko * bk], As)
                        T.copy(B[ko * bk, bx * bn], Bs)
                        T.gemm(As, Bs, Cf)
                elif variant == "gemm_only":
                    T.copy(A[by * bm, ko * bk], As)
                    T.copy(B[ko * bk, bx * bn], Bs)
                    if Mask[by, ko]:
                        T.gemm(As, Bs, Cf)
                elif variant == "copy_else_clear":
                    T.copy(B[ko * bk, bx * bn], Bs)
                    if Mask[by, ko]:
                        T.copy(A[by * bm, ko * bk], As)
                    else:
                        T.clear(As)
                    T.gemm(As, Bs, Cf)
                else:
                    if tx < 128:
                        T.copy(A[by * bm, ko * bk], As)
                    else:
                        T.copy(B[ko * bk, bx * bn], Bs)
                    if Mask[by, ko]:
                        T.gemm(As, Bs, Cf)
            T.copy(Cf, C[by * bm, bx * bn])

    rng = np.random.default_rng(p.get("seed", 0))
    a, b = _rand(rng, (M, K), dtype), _rand(rng, (K, N), dtype)
    keep = rng.random((mb, kb)) < p["density"]
    mask = keep.astype(bool if p["mask_dtype"] == "bool" else np.int32)
    fa, fb = _f64(a), _f64(b)
    want = np.zeros((M, N))
    for i in range(mb):
        for k in range(kb):
            if keep[i, k]:
                rows, ks = slice(i * bm, (i + 1) * bm), slice(k * bk, (k + 1) * bk)
                want[rows] += fa[rows, ks] @ fb[ks]
    rtol, atol = _gemm_tol(dtype, "float32", K)
    return Case("sparse_gemm", p, sparse, [a, b, mask, _poison((M, N), "float32")], {3: want}, rtol, atol,
                pass_configs={"tw.enable_wgmma": p["wgmma"], "tw.warp_specialize": p["ws"]})


# ---------------------------------------------------------------- launch-sized shared, run-time T.Parallel, tx ranges
def _draw_launch_sized(rng):
    threads = int(rng.choice((64, 128, 256, 384)))
    size = int(rng.choice((1, 7, 64, 100, 257, 1000)))
    ranges = [r for r in ("all", "lt128", "ge128", "lt64") if r != "ge128" or threads > 128]
    return {"size": size, "n": int(rng.integers(1, size + 1)), "threads": threads,
            "where": str(rng.choice(ranges)), "dtype": str(rng.choice(("float32", "float16", "bfloat16"))),
            "scale": float(rng.choice((0.5, -2.0, 3.0))), "red": str(rng.choice(("sum", "max", "absmax"))),
            "rows": int(rng.choice((1, 2, 4, 8, 16, 32, 33), p=(0.15,) * 6 + (0.1,))),
            "cols": int(rng.choice((8, 32, 64))),
            "blocks": int(rng.choice((1, 2, 3)))}


def _make_launch_sized(p) -> Case:
    size, n, threads, where, dtype, scale = p["size"], p["n"], p["threads"], p["where"], p["dtype"], p["scale"]
    R, Cn, nb = p["rows"], p["cols"], p["blocks"]
    reducer = {"sum": T.reduce_sum, "max": T.reduce_max, "absmax": T.reduce_absmax}[p["red"]]
    hi = 64 if where == "lt64" else 128

    Md = T.dynamic("m")

    @T.prim_func
    def sized(A: T.Tensor((nb, Md), dtype), B: T.Tensor((nb, Md), "float32"), X: T.Tensor((nb, R, Cn), dtype),
              Tot: T.Tensor((nb, 1), "float32"), n: T.int32):
        with T.Kernel(nb, threads=threads) as bx:
            tx = T.get_thread_binding()
            S = T.alloc_shared((Md,), "float32")
            F = T.alloc_fragment((R, Cn), "float32")
            Rw = T.alloc_fragment((R,), "float32")
            Out = T.alloc_fragment((1,), "float32")
            if where == "all":
                T.copy(A[bx, 0:Md], S)
            elif where == "ge128":
                if tx >= 128:
                    T.copy(A[bx, 0:Md], S)
            else:
                if tx < hi:
                    T.copy(A[bx, 0:Md], S)
            for i in T.Parallel(n):
                S[i] = S[i] * scale + 1.0
            T.copy(S, B[bx, 0:Md])
            T.copy(X[bx, 0, 0], F)
            reducer(F, Rw, dim=1)
            reducer(Rw, Out[0], dim=0)
            T.copy(Out, Tot[bx, 0])

    rng = np.random.default_rng(p.get("seed", 0))
    a, x = _rand(rng, (nb, size), dtype), _rand(rng, (nb, R, Cn), dtype)
    want_b = _f64(a).copy()
    want_b[:, :n] = want_b[:, :n] * scale + 1.0
    fx = _f64(x)
    tot = {"sum": fx.sum((1, 2)), "max": fx.max((1, 2)), "absmax": np.abs(fx).max((1, 2))}[p["red"]]
    rtol, atol = _tol("float32", k=R * Cn)
    return Case("launch_sized", p, sized, [a, _poison((nb, size), "float32"), x, _poison((nb, 1), "float32"), n],
                {1: want_b, 3: tot[:, None]}, rtol, max(atol, 1e-5 * R * Cn))


# ---------------------------------------------------------------- guarded reads inside T.if_then_else
def _draw_guarded_select(rng):
    return {"rows": int(rng.choice((1, 4, 16))), "cols": int(rng.choice((8, 16, 64, 128))),
            "threads": int(rng.choice((32, 64, 128))), "dtype": str(rng.choice(("float32", "float16", "bfloat16"))),
            "blocks": int(rng.integers(1, 4)), "cut": str(rng.choice(("cols", "rows", "both"))),
            "offset": int(rng.choice((0, 1, 3, 8))), "seed_n": int(rng.integers(1 << 30)),
            "fill": float(rng.choice((0.0, -1.5, 7.0)))}


def _make_guarded_select(p) -> Case:
    R, C, nb, dtype, off, fill = p["rows"], p["cols"], p["blocks"], p["dtype"], p["offset"], p["fill"]
    rng = np.random.default_rng(p.get("seed", 0))
    # A holds exactly the elements the guard admits: rows x cols of valid data starting at ``off``
    n_rows = int(np.random.default_rng(p["seed_n"]).integers(1, nb * R + 1)) if p["cut"] != "cols" else nb * R
    n_cols = int(np.random.default_rng(p["seed_n"] + 1).integers(1, C + 1)) if p["cut"] != "rows" else C
    Ar, Ac = T.dynamic("ar"), T.dynamic("ac")

    @T.prim_func
    def guarded(A: T.Tensor((Ar, Ac), dtype), B: T.Tensor((nb * R, C), dtype), n_r: T.int32, n_c: T.int32,
                o: T.int32):
        with T.Kernel(nb, threads=p["threads"]) as bx:
            F = T.alloc_fragment((R, C), dtype)
            for i, j in T.Parallel(R, C):
                F[i, j] = T.if_then_else((bx * R + i < n_r) and (j < n_c), A[bx * R + i, j + o], T.cast(fill, dtype))
            T.copy(F, B[bx * R, 0])

    a = _rand(rng, (n_rows, n_cols + off), dtype)
    want = np.full((nb * R, C), fill, dtype=np.float64)
    want[:n_rows, :n_cols] = _f64(a)[:, off:off + n_cols]
    return Case("guarded_select", p, guarded, [a, _poison((nb * R, C), dtype), n_rows, n_cols, off],
                {1: want}, *_tol(dtype))


NEW = (
    Template("hopper_gemm", _draw_hopper_gemm, _make_hopper_gemm),
    Template("lib_splitk", _draw_splitk, _make_splitk),
    Template("lib_persistent", _draw_persistent, _make_persistent),
    Template("ws_attention", _draw_ws_attention, _make_ws_attention),
    Template("sparse_gemm", _draw_sparse_gemm, _make_sparse_gemm),
    Template("launch_sized", _draw_launch_sized, _make_launch_sized),
    Template("guarded_select", _draw_guarded_select, _make_guarded_select),
)
