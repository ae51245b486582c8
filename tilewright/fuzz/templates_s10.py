"""Session-10 kernel-level fuzz templates: combinations that the earlier templates reach one at a
time, written as a user would (not through the library kernels).

- ``chain_gemm``: ``S = Q K^T`` (K stored either way: ``transpose_B``), a mask by
  ``T.if_then_else(..., -T.infinity)`` of the ragged key columns, ``exp``/``relu`` of the scores, a
  fragment-to-fragment cast to fp16/bf16 (``T.copy`` of the float32 fragment, a ``T.Parallel`` store
  or through shared memory) feeding a second ``T.gemm`` (``O += P V``), over a ``T.Pipelined`` key
  loop of 1..4 stages with a ragged last block (the key count static or ``T.dynamic``), row sums of
  P reduced with ``clear=False``.
- ``splitk_user``: a GEMM split over K by the program (grid z = the splits, each split a range of K
  blocks ``T.Pipelined(lo, hi, num_stages=1..4)``, empty ranges included), ragged K, transposed
  operands, M dynamic (``T.dynamic``) or not; partials added by ``T.atomic_add`` (element or tile
  form) into an output that holds a prior value, or stored per split and summed by a second kernel.
- ``reduce_2d``: a ragged (M, N) matrix in (bm, bn) tiles (out-of-bounds elements masked to the
  reduction's identity, ``-T.infinity`` for max), each block a row band looping over the column
  tiles (``T.Pipelined`` 1..4 stages or ``T.serial``): the row results accumulate over the loop
  with ``clear=False`` (dim 1), the column results of each tile (dim 0) go to global memory by
  ``T.atomic_add`` / ``T.atomic_max`` from every block.
- ``ws_attn_knobs``: the user's flash attention (``kernels.flash_attention``, 256 threads: two consumer
  warpgroups, warp-specialized) at head dim 64..128 in steps of 16, causal or not, ragged lengths, with
  ``tw.pingpong`` / ``tw.attention_overlap`` each on, off or unset (the defaults) and the overlap's
  ``tw.attention_overlap_retire`` "end" or "top".

Sizes are small (a few blocks): the emulator runs every thread of every block.  Every reference is
NumPy in float64, written here without the compiler's helpers.
"""

from __future__ import annotations

import numpy as np

from .. import language as T
from .templates import Case, Template, _f64, _poison, _rand, _tol

RAGGED = (1, 7, 16, 31, 33, 48, 64, 65, 97, 100, 128, 129, 160)


def _rounded(x, dtype):
    from ..ir import dtype as dt

    return _f64(np.asarray(x).astype(dt.to_numpy(dtype)))


# ---------------------------------------------------------------- two gemms chained by a cast fragment
def _threads(rng, bm, bn):
    """128/256 threads only for tiles that split over that many warps (fewer: a refusal, not a case)."""
    return int(min(rng.choice((64, 128, 256)), max(64, bm * bn // 8)))


HOPPER = {"default": None, "off": {"tw.enable_wgmma": False, "tw.warp_specialize": False},
          "wgmma": {"tw.enable_wgmma": True, "tw.warp_specialize": False},
          "wgmma_ws": {"tw.enable_wgmma": True, "tw.warp_specialize": True}}


def _draw_chain(rng):
    bm, bn = int(rng.choice((16, 32, 64))), int(rng.choice((16, 32, 64)))
    return {"m": int(rng.choice((1, 16, 33, 64, 100, 128))), "n": int(rng.choice(RAGGED)),
            "d": int(rng.choice((16, 32, 64))), "dv": int(rng.choice((16, 32, 64))),
            "bm": bm, "bn": bn, "stages": int(rng.choice((0, 1, 2, 3, 4))), "threads": _threads(rng, bm, bn),
            "kt": bool(rng.random() < 0.5), "act": str(rng.choice(("exp", "relu"))),
            "cast": str(rng.choice(("copy", "parallel", "shared"))), "dtype": str(rng.choice(("float16", "bfloat16"))),
            "rowsum": bool(rng.random() < 0.5), "hopper": str(rng.choice(tuple(HOPPER))),
            "dyn_n": bool(rng.random() < 0.3)}


def _make_chain(p) -> Case:
    M, N, D, DV, bm, bn = p["m"], p["n"], p["d"], p["dv"], p["bm"], p["bn"]
    dtype, act, cast, kt = p["dtype"], p["act"], p["cast"], p["kt"]
    Nd = T.dynamic("n") if p.get("dyn_n") else N
    k_shape = (D, Nd) if kt else (Nd, D)
    ks_shape = (D, bn) if kt else (bn, D)
    neg_inf = -T.infinity("float32")
    scale = 2.0 / D  # (|scores| <= 2: exp stays well inside fp16)

    @T.prim_func
    def chain(Q: T.Tensor((M, D), dtype), K: T.Tensor(k_shape, dtype), V: T.Tensor((Nd, DV), dtype),
              Out: T.Tensor((M, DV), "float32"), L: T.Tensor((M,), "float32")):
        with T.Kernel(T.ceildiv(M, bm), threads=p["threads"]) as bx:
            Qs = T.alloc_shared((bm, D), dtype)
            Ks = T.alloc_shared(ks_shape, dtype)
            Vs = T.alloc_shared((bn, DV), dtype)
            S = T.alloc_fragment((bm, bn), "float32")
            P = T.alloc_fragment((bm, bn), dtype)
            Ps = T.alloc_shared((bm, bn), dtype)
            Of = T.alloc_fragment((bm, DV), "float32")
            rs = T.alloc_fragment((bm,), "float32")
            T.copy(Q[bx * bm, 0], Qs)
            T.clear(Of)
            T.clear(rs)
            for j in T.Pipelined(T.ceildiv(Nd, bn), num_stages=p["stages"]):
                if kt:
                    T.copy(K[0, j * bn], Ks)
                else:
                    T.copy(K[j * bn, 0], Ks)
                T.copy(V[j * bn, 0], Vs)
                T.clear(S)
                T.gemm(Qs, Ks, S, transpose_B=not kt)
                for r, c in T.Parallel(bm, bn):
                    S[r, c] = T.if_then_else(j * bn + c < Nd, S[r, c] * scale, neg_inf)
                if act == "exp":
                    for r, c in T.Parallel(bm, bn):
                        S[r, c] = T.exp(S[r, c])
                else:
                    for r, c in T.Parallel(bm, bn):
                        S[r, c] = T.max(S[r, c], 0.0)
                if p["rowsum"]:
                    T.reduce_sum(S, rs, dim=1, clear=False)
                if cast == "copy":
                    T.copy(S, P)
                    T.gemm(P, Vs, Of)
                elif cast == "parallel":
                    for r, c in T.Parallel(bm, bn):
                        P[r, c] = S[r, c]
                    T.gemm(P, Vs, Of)
                else:
                    T.copy(S, Ps)
                    T.gemm(Ps, Vs, Of)
            T.copy(Of, Out[bx * bm, 0])
            if p["rowsum"]:
                T.copy(rs, L[bx * bm])

    rng = np.random.default_rng(p.get("seed", 0))
    q, k, v = _rand(rng, (M, D), dtype), _rand(rng, (D, N) if kt else (N, D), dtype), _rand(rng, (N, DV), dtype)
    fk = _f64(k).T if kt else _f64(k)
    s = _f64(q) @ fk.T * scale
    s = np.exp(s) if act == "exp" else np.maximum(s, 0)
    want = _rounded(s, dtype) @ _f64(v)  # (P is rounded to the dtype before the second gemm)
    expected = {3: want}
    args = [q, k, v, _poison((M, DV), "float32"), _poison((M,), "float32")]
    if p["rowsum"]:
        expected[4] = s.sum(1)
    rtol, atol = _tol(dtype, "float32", k=max(N, D))
    return Case("chain_gemm", p, chain, args, expected, rtol, max(atol, 2e-3 * np.sqrt(N)),
                pass_configs=HOPPER[p.get("hopper", "default")])


# ---------------------------------------------------------------- user split-K
def _draw_splitk(rng):
    bm, bn = int(rng.choice((16, 32, 64))), int(rng.choice((16, 32, 64)))
    return {"m": int(rng.choice((1, 17, 33, 64, 100))), "n": int(rng.choice((8, 24, 33, 64, 100))),
            "k": int(rng.choice((1, 15, 16, 40, 64, 100, 136, 200, 257))), "bm": bm, "bn": bn,
            "bk": int(rng.choice((16, 32, 64))), "splits": int(rng.choice((1, 2, 3, 4, 5))),
            "stages": int(rng.choice((0, 1, 2, 3, 4))), "threads": _threads(rng, bm, bn),
            "ta": bool(rng.random() < 0.3),
            "tb": bool(rng.random() < 0.5), "dyn_m": bool(rng.random() < 0.3),
            "reduce": str(rng.choice(("atomic_elem", "atomic_tile", "workspace"))),
            "dtype": str(rng.choice(("float16", "bfloat16"))), "hopper": str(rng.choice(tuple(HOPPER)))}


def _make_splitk(p) -> Case:
    M, N, K, bm, bn, bk, S = p["m"], p["n"], p["k"], p["bm"], p["bn"], p["bk"], p["splits"]
    dtype, ta, tb, how = p["dtype"], p["ta"], p["tb"], p["reduce"]
    kb = -(-K // bk)
    per = -(-kb // S)  # K blocks per split (the last splits may get none)
    Md = T.dynamic("m") if p["dyn_m"] else M
    a_shape = (K, Md) if ta else (Md, K)
    b_shape = (N, K) if tb else (K, N)
    as_shape = (bk, bm) if ta else (bm, bk)
    bs_shape = (bn, bk) if tb else (bk, bn)

    @T.macro
    def split_product(A, B, As, Bs, Cf, bx, by, bz):
        """Cf += the (by, bx) tile of A B over the K blocks of split bz (none for the last splits)."""
        for kk in T.Pipelined(bz * per, T.min((bz + 1) * per, kb), num_stages=p["stages"]):
            if ta:
                T.copy(A[kk * bk, by * bm], As)
            else:
                T.copy(A[by * bm, kk * bk], As)
            if tb:
                T.copy(B[bx * bn, kk * bk], Bs)
            else:
                T.copy(B[kk * bk, bx * bn], Bs)
            T.gemm(As, Bs, Cf, transpose_A=ta, transpose_B=tb)

    if how == "workspace":
        @T.prim_func
        def part(A: T.Tensor(a_shape, dtype), B: T.Tensor(b_shape, dtype), W: T.Tensor((S, Md, N), "float32")):
            with T.Kernel(T.ceildiv(N, bn), T.ceildiv(Md, bm), S, threads=p["threads"]) as (bx, by, bz):
                As = T.alloc_shared(as_shape, dtype)
                Bs = T.alloc_shared(bs_shape, dtype)
                Cf = T.alloc_fragment((bm, bn), "float32")
                T.clear(Cf)
                split_product(A, B, As, Bs, Cf, bx, by, bz)
                T.copy(Cf, W[bz, by * bm, bx * bn])

        @T.prim_func
        def total(W: T.Tensor((S, Md, N), "float32"), C: T.Tensor((Md, N), "float32")):
            with T.Kernel(T.ceildiv(N, bn), T.ceildiv(Md, bm), threads=p["threads"]) as (bx, by):
                acc = T.alloc_fragment((bm, bn), "float32")
                w = T.alloc_fragment((bm, bn), "float32")
                T.copy(W[0, by * bm, bx * bn], acc)
                for s in T.serial(1, S):
                    T.copy(W[s, by * bm, bx * bn], w)
                    for i, j in T.Parallel(bm, bn):
                        acc[i, j] = acc[i, j] + w[i, j]
                T.copy(acc, C[by * bm, bx * bn])
    else:
        @T.prim_func
        def part(A: T.Tensor(a_shape, dtype), B: T.Tensor(b_shape, dtype), C: T.Tensor((Md, N), "float32")):
            with T.Kernel(T.ceildiv(N, bn), T.ceildiv(Md, bm), S, threads=p["threads"]) as (bx, by, bz):
                As = T.alloc_shared(as_shape, dtype)
                Bs = T.alloc_shared(bs_shape, dtype)
                Cf = T.alloc_fragment((bm, bn), "float32")
                T.clear(Cf)
                split_product(A, B, As, Bs, Cf, bx, by, bz)
                if how == "atomic_tile":
                    T.atomic_add(C[by * bm, bx * bn], Cf)
                else:
                    for i, j in T.Parallel(bm, bn):
                        if by * bm + i < Md and bx * bn + j < N:
                            T.atomic_add(C[by * bm + i, bx * bn + j], Cf[i, j])

    rng = np.random.default_rng(p.get("seed", 0))
    a = _rand(rng, (K, M) if ta else (M, K), dtype)
    b = _rand(rng, b_shape, dtype)
    want = (_f64(a).T if ta else _f64(a)) @ (_f64(b).T if tb else _f64(b))
    rtol, atol = _tol(dtype, "float32", k=K)
    atol = max(atol, 1e-3 * np.sqrt(K))
    configs = HOPPER[p.get("hopper", "default")]
    if how == "workspace":
        # (a split with no K blocks stores its cleared tile: zeros, which the sum needs)
        args = [a, b, _poison((S, M, N), "float32"), _poison((M, N), "float32")]
        return Case("splitk_user", p, part, args, {3: want}, rtol, atol, chain=[(part, [0, 1, 2], configs),
                                                                              (total, [2, 3], None)])
    prior = _rand(rng, (M, N), "float32")  # (atomics add to what is there: a prior value, not poison)
    return Case("splitk_user", p, part, [a, b, prior], {2: want + _f64(prior)}, rtol, atol, pass_configs=configs)


# ---------------------------------------------------------------- 2-D reductions, both axes, atomics out
def _draw_reduce_2d(rng):
    return {"m": int(rng.choice((1, 7, 16, 33, 64, 100))), "n": int(rng.choice(RAGGED + (300,))),
            "bm": int(rng.choice((8, 16, 32, 64))), "bn": int(rng.choice((16, 32, 64, 128))),
            "op": str(rng.choice(("sum", "max", "abssum", "absmax"))),
            "loop": str(rng.choice(("pipelined", "serial"))), "stages": int(rng.choice((1, 2, 3, 4))),
            "threads": int(rng.choice((32, 64, 128, 256))), "dtype": str(rng.choice(("float32", "float16",
                                                                                       "bfloat16"))),
            "dyn_n": bool(rng.random() < 0.3), "cols": bool(rng.random() < 0.7),
            "cdtype": str(rng.choice(("float32", "float32", "float16", "bfloat16")))}


def _make_reduce_2d(p) -> Case:
    M, N, bm, bn, op, dtype = p["m"], p["n"], p["bm"], p["bn"], p["op"], p["dtype"]
    cdtype = p.get("cdtype", "float32")  # the column results' dtype: 16-bit atomics (max: a CAS loop)
    reducer = {"sum": T.reduce_sum, "max": T.reduce_max, "abssum": T.reduce_abssum, "absmax": T.reduce_absmax}[op]
    is_max = op in ("max", "absmax")
    # the identity outside the matrix: -inf for max (absmax reduces |x|, so 0 is its identity too)
    fill = -T.infinity("float32") if op == "max" else 0.0
    Nd = T.dynamic("n") if p["dyn_n"] else N
    cols = p["cols"]
    tiles = T.ceildiv(Nd, bn)

    @T.macro
    def tile_step(A, Cols, As, a, r, c, bx, j):
        """Column tile j of row band bx: its row results into r, its column results to Cols by atomics."""
        T.copy(A[bx * bm, j * bn], As)
        for i, k in T.Parallel(bm, bn):
            a[i, k] = T.if_then_else(bx * bm + i < M and j * bn + k < Nd, As[i, k], fill)
        reducer(a, r, dim=1, clear=False)
        if cols:
            reducer(a, c, dim=0)
            for k in T.Parallel(bn):
                if j * bn + k < Nd:
                    if is_max:
                        T.atomic_max(Cols[j * bn + k], c[k])
                    else:
                        T.atomic_add(Cols[j * bn + k], c[k])

    @T.prim_func
    def red(A: T.Tensor((M, Nd), dtype), Init: T.Tensor((M,), "float32"), Rows: T.Tensor((M,), "float32"),
            Cols: T.Tensor((Nd,), cdtype)):
        with T.Kernel(T.ceildiv(M, bm), threads=p["threads"]) as bx:
            As = T.alloc_shared((bm, bn), dtype)
            a = T.alloc_fragment((bm, bn), "float32")
            r = T.alloc_fragment((bm,), "float32")
            c = T.alloc_fragment((bn,), "float32")
            T.copy(Init[bx * bm], r)
            if p["loop"] == "pipelined":
                for j in T.Pipelined(tiles, num_stages=p["stages"]):
                    tile_step(A, Cols, As, a, r, c, bx, j)
            else:
                for j in T.serial(tiles):
                    tile_step(A, Cols, As, a, r, c, bx, j)
            T.copy(r, Rows[bx * bm])

    rng = np.random.default_rng(p.get("seed", 0))
    a = _rand(rng, (M, N), dtype, -2.0, 2.0)
    init = _rand(rng, (M,), "float32")
    fa = _f64(a)
    x = np.abs(fa) if op.startswith("abs") else fa
    fi = _f64(init)
    rows = np.maximum(x.max(1), fi) if is_max else x.sum(1) + fi
    col_prior = _rand(rng, (N,), cdtype, -3.0, -2.5) if is_max else _rand(rng, (N,), cdtype)
    fc = _f64(col_prior)
    expected = {2: rows}
    if cols:
        expected[3] = np.maximum(x.max(0), fc) if is_max else x.sum(0) + fc
    else:
        expected[3] = fc  # (untouched)
    rtol, atol = _tol(dtype if dtype != "float32" else "float32", k=max(M, N))
    rtol, atol = max(rtol, 1e-5), max(atol, 2e-5 * max(M, N))
    if cdtype != "float32" and cols:  # each block's column partial rounded to 16 bits as it is added
        eps = 2.0 ** (-10 if cdtype == "float16" else -7)
        atol = max(atol, eps * float(np.abs(expected[3]).max() + 1) * (-(-M // bm) + 1))
    return Case("reduce_2d", p, red, [a, init, _poison((M,), "float32"), col_prior], expected, rtol, atol)


# ---------------------------------------------------------------- the user's WS attention, each knob set
def _draw_ws_knobs(rng):
    return {"batch": 1, "heads": int(rng.choice((1, 2))), "seq": int(rng.choice((17, 65, 100, 128, 129, 200, 257))),
            "dim": int(rng.choice((64, 80, 96, 112, 128))), "causal": bool(rng.random() < 0.4),
            "bn": int(rng.choice((64, 128))), "stages": int(rng.choice((1, 2, 3))),
            "dtype": str(rng.choice(("float16", "bfloat16"))), "pingpong": str(rng.choice(("unset", "on", "off"))),
            "overlap": str(rng.choice(("unset", "on", "off"))), "retire": str(rng.choice(("end", "top")))}


def _make_ws_knobs(p) -> Case:
    from .templates_new import _make_ws_attention

    case = _make_ws_attention(dict(p, bm=128, threads=256, ws=True))
    configs = dict(case.pass_configs)
    for knob, name in (("pingpong", "tw.pingpong"), ("overlap", "tw.attention_overlap")):
        if p[knob] != "unset":
            configs[name] = p[knob] == "on"
    if p["retire"] == "top":
        configs["tw.attention_overlap_retire"] = "top"
    case.pass_configs, case.template = configs, "ws_attn_knobs"
    return case


S10 = [
    Template("chain_gemm", _draw_chain, _make_chain),
    Template("splitk_user", _draw_splitk, _make_splitk),
    Template("reduce_2d", _draw_reduce_2d, _make_reduce_2d),
    Template("ws_attn_knobs", _draw_ws_knobs, _make_ws_knobs),
]
