"""Fuzz templates for the features of session 8 (kernel level; the op-level ones are in ops_cases.py).

- ``cluster_ring``: thread-block clusters (``T.Kernel(..., cluster_dims=)``) of 2x1, 1x2, 2x2, 4x1 and
  1x4 blocks: the block's rank (``T.block_rank_in_cluster``), cluster barriers (``T.cluster_sync`` or
  ``T.cluster_arrive`` + ``T.cluster_wait``), arrivals on a peer's mbarrier (``T.mbarrier_arrive(bar,
  cta_id=r)``) and data a peer wrote to global memory before the cluster barrier.  Only the targets
  with clusters run it (the others refuse it, which is counted as a refusal).
- ``cluster_gemm``: ``kernels.gemm.matmul(cluster=(2, 1) | (1, 2))`` (the multicast ring of
  passes/cluster_multicast.py on sm_90a) and ``matmul_persistent(cluster=2)``, ragged M/N/K, transposes,
  fp16/bf16, TMA-store epilogue; on targets without clusters the blocks run independently.
- ``ws_var_init``: warp-specialized kernels (the GEMM mainloop and the general loop) with ``T.alloc_var``
  initial values that read other variables (assigned earlier, reassigned later), lets, tensors, the
  block index; the variable used by the epilogue, by the producer's copy coordinates, or by both
  (passes/warp_specialize.py ``hoisted_alloc``: the session-8 wrong answer).
- ``persistent_tiles``: ``T.Persistent`` tile loops (a persistent GEMM with a pipelined K loop, or a
  row reduction) over a ragged tile domain with a random wave size.

Every reference is NumPy in float64, written here without the compiler's helpers.
"""

from __future__ import annotations

import numpy as np

from .. import language as T
from .templates import Case, Template, _f64, _poison, _rand
from .templates_new import _ACTS, _gemm_tol, _ragged

CLUSTERS = ((2, 1), (1, 2), (2, 2), (4, 1), (1, 4))


# ---------------------------------------------------------------- cluster rank, barriers, peer arrivals
def _draw_cluster_ring(rng):
    cx, cy = CLUSTERS[int(rng.integers(len(CLUSTERS)))]
    return {"cx": cx, "cy": cy, "nx": int(rng.integers(1, 3)), "ny": int(rng.integers(1, 3)),
            "n": int(rng.choice((32, 64, 96, 128))), "shift": int(rng.integers(1, 4)),
            "mode": str(rng.choice(("arrive", "exchange", "split_sync", "rank"))),
            "dtype": str(rng.choice(("float32", "float16")))}


def _make_cluster_ring(p) -> Case:
    cx, cy, N, mode, dtype = p["cx"], p["cy"], p["n"], p["mode"], p["dtype"]
    gx, gy = cx * p["nx"], cy * p["ny"]
    size = cx * cy
    shift = p["shift"] % size or 1

    @T.prim_func
    def ring(A: T.Tensor((gy, gx, N), dtype), W: T.Tensor((gy, gx, N), "float32"),
             B: T.Tensor((gy, gx, N), "float32")):
        with T.Kernel(gx, gy, threads=N, cluster_dims=(cx, cy, 1)) as (bx, by):
            r = T.block_rank_in_cluster()
            if mode == "arrive":
                bars = T.alloc_barrier([N])
                T.cluster_sync()  # every peer's barrier initialised before anyone arrives on it
                T.mbarrier_arrive(bars[0], cta_id=(r + shift) % size)
                T.mbarrier_wait_parity(bars[0], 0)
                for i in T.Parallel(N):
                    B[by, bx, i] = T.cast(A[by, bx, i], "float32") * 2 + T.cast(r * 10 + by * 100 + bx, "float32")
                T.cluster_sync()  # no block exits while a peer may still arrive on its barrier
            elif mode == "rank":
                for i in T.Parallel(N):
                    B[by, bx, i] = T.cast(A[by, bx, i], "float32") * 2 + T.cast(r * 10 + by * 100 + bx, "float32")
            else:  # a peer's global writes, ordered by the cluster barrier (release / acquire)
                for i in T.Parallel(N):
                    W[by, bx, i] = T.cast(A[by, bx, i], "float32") * 2 + T.cast(r, "float32")
                if mode == "split_sync":
                    T.cluster_arrive()
                    T.cluster_wait()
                else:
                    T.cluster_sync()
                pr = (r + shift) % size
                px = bx - bx % cx + pr % cx
                py = by - by % cy + pr // cx
                for i in T.Parallel(N):
                    B[by, bx, i] = W[py, px, i] + T.cast(r * 10, "float32")

    rng = np.random.default_rng(p.get("seed", 0))
    a = _rand(rng, (gy, gx, N), dtype)
    fa = _f64(a)
    y, x = np.meshgrid(np.arange(gy), np.arange(gx), indexing="ij")
    rank = (x % cx) + cx * (y % cy)
    if mode in ("arrive", "rank"):
        want_b = fa * 2 + (10 * rank + 100 * y + x)[:, :, None]
        want = {2: want_b}
    else:
        w = fa * 2 + rank[:, :, None]
        pr = (rank + shift) % size
        px, py = x - x % cx + pr % cx, y - y % cy + pr // cx
        want = {1: w, 2: w[py, px] + (10 * rank)[:, :, None]}
    return Case("cluster_ring", p, ring, [a, _poison((gy, gx, N), "float32"), _poison((gy, gx, N), "float32")],
                want, 1e-6, 1e-6)


# ---------------------------------------------------------------- multicast GEMM (direct and persistent)
def _draw_cluster_gemm(rng):
    form = str(rng.choice(("direct", "direct", "persistent")))
    cluster = [(2, 1), (1, 2)][int(rng.integers(2))] if form == "direct" else (2, 1)
    bm, bn = int(rng.choice((64, 128), p=(0.7, 0.3))), int(rng.choice((64, 128), p=(0.7, 0.3)))
    bk = int(rng.choice((32, 64)))
    m, n, k = _ragged(rng, bm, 3), _ragged(rng, bn, 3), _ragged(rng, bk, 3)
    if rng.random() < 0.75:  # whole 16-byte rows: TMA (and so multicast) on sm_90a
        m, n, k = (-(-v // 8) * 8 for v in (m, n, k))
    return {"form": form, "cx": cluster[0], "cy": cluster[1], "m": m, "n": n, "k": k, "bm": bm, "bn": bn, "bk": bk,
            "stages": int(rng.integers(1, 5)), "threads": 128 if bm * bn <= 64 * 64 else int(rng.choice((128, 256))),
            "trans_a": bool(rng.random() < 0.2), "trans_b": bool(rng.random() < 0.4),
            "dtype": str(rng.choice(("float16", "bfloat16"))), "out": str(rng.choice(("float32", "in"))),
            "staged": bool(rng.random() < 0.4), "panel": int(rng.choice((2, 4, 8))),
            "blocks": int(rng.choice((2, 4, 6))),
            "bias": bool(rng.random() < 0.5), "act": str(rng.choice(sorted(_ACTS)))}


def _make_cluster_gemm(p) -> Case:
    from ..kernels.gemm import matmul, matmul_persistent

    M, N, K, dtype, ta, tb = p["m"], p["n"], p["k"], p["dtype"], p["trans_a"], p["trans_b"]
    out = dtype if p["out"] == "in" else "float32"
    staged = p["staged"] and out != "float32"
    rng = np.random.default_rng(p.get("seed", 0))
    a = _rand(rng, (K, M) if ta else (M, K), dtype)
    b = _rand(rng, (N, K) if tb else (K, N), dtype)
    fa = _f64(a).T if ta else _f64(a)
    fb = _f64(b).T if tb else _f64(b)
    rtol, atol = _gemm_tol(dtype, out, K)
    if p["form"] == "direct":
        func = matmul(M, N, K, p["bm"], p["bn"], p["bk"], dtype=dtype, out_dtype=out, trans_A=ta, trans_B=tb,
                      num_stages=p["stages"], threads=p["threads"], swizzle_panel=p["panel"], staged_epilogue=staged,
                      cluster=(p["cx"], p["cy"]))
        return Case("cluster_gemm", p, func, [a, b, _poison((M, N), out)], {2: fa @ fb}, rtol, atol)
    bias_dt = "float32" if p["bias"] else None
    func = matmul_persistent(M, N, K, p["bm"], p["bn"], p["bk"], dtype=dtype, out_dtype=out, trans_A=ta, trans_B=tb,
                             num_stages=p["stages"], threads=p["threads"], num_blocks=p["blocks"], bias_dtype=bias_dt,
                             activation=p["act"], staged_epilogue=staged, cluster=2)
    bias = _rand(rng, (N if bias_dt else 1,), "float32")
    want = _ACTS[p["act"]](fa @ fb + (_f64(bias)[None, :] if bias_dt else 0))
    return Case("cluster_gemm", p, func, [a, b, bias, _poison((M, N), out)], {3: want}, rtol, atol)


# ---------------------------------------------------------------- T.alloc_var initial values under warp specialization
VAR_INITS = ("const", "var", "let", "tensor", "block", "var_then_update", "var_late", "var_of_var")


def _draw_ws_var_init(rng):
    return {"form": str(rng.choice(("gemm", "loop"))), "scale": str(rng.choice(VAR_INITS)),
            "off": str(rng.choice(VAR_INITS + ("none",) * 3)), "blocks": int(rng.integers(1, 3)),
            "ksteps": int(rng.integers(1, 5)), "stages": int(rng.integers(1, 4)),
            "s": [int(v) for v in rng.integers(0, 4, size=3)], "early": bool(rng.random() < 0.5)}


def _var_value(kind, s, bx):
    """The value ``_init`` gives, in NumPy terms (``a`` = s0 + 6 when ``b`` is declared)."""
    a = s[0] + 6
    return {"const": 3, "var": a, "let": a, "tensor": s[2] + 1, "block": bx + s[2], "var_then_update": 2 * a,
            "var_late": a, "var_of_var": a + 1}[kind]


OFF_PAD = 24  # the rows past the blocks' own that an offset may reach (at most 2 * (3 + 6) + ... < 24)


def _make_ws_var_init(p) -> Case:
    form, kinds, blocks, ksteps, s = p["form"], (p["scale"], p["off"]), p["blocks"], p["ksteps"], p["s"]
    BK = 32 if form == "gemm" else 64
    K = BK * ksteps
    rows = blocks * 64 + OFF_PAD

    def init(kind, a, n, S, bx):
        """A var declared from ``kind``'s initial value (what the emulator must see at the declaration)."""
        if kind == "const":
            return T.alloc_var("int32", init=3)
        if kind in ("var", "var_then_update", "var_late"):
            return T.alloc_var("int32", init=a)
        if kind == "let":
            return T.alloc_var("int32", init=n - S[1])
        if kind == "tensor":
            return T.alloc_var("int32", init=S[2] + 1)
        if kind == "block":
            return T.alloc_var("int32", init=bx + S[2])
        c = T.alloc_var("int32", init=a)  # var_of_var
        return T.alloc_var("int32", init=c[0] + 1)  # (a helper is not rewritten: c is the buffer here)

    scale_kind, off_kind = kinds
    early, gemm = p["early"], form == "gemm"
    a_rows, a_cols = (rows, K) if gemm else (rows + K, 64)
    a_first = 1 if gemm else 0  # (a's first value, overwritten before any use)

    @T.prim_func
    def kernel(A: T.Tensor((a_rows, a_cols), "float16"), B: T.Tensor((K, 64), "float16"),
               C: T.Tensor((blocks * 64, 64), "float32"), S: T.Tensor((3,), "int32")):
        with T.Kernel(blocks, threads=128) as bx:
            if early:
                A_s = T.alloc_shared((64, BK), "float16")
                if gemm:
                    B_s = T.alloc_shared((BK, 64), "float16")
            a = T.alloc_var("int32", init=a_first)
            a = S[0] + 6
            n = S[1] + a
            w = init(scale_kind, a, n, S, bx)
            o = init(off_kind, a, n, S, bx) if off_kind != "none" else 0
            if scale_kind == "var_then_update":
                w = w * 2
            if off_kind == "var_then_update":
                o = o * 2
            if scale_kind == "var_late" or off_kind == "var_late":
                a = a + 100  # the vars declared from a keep a's earlier value
            if not early:
                A_s = T.alloc_shared((64, BK), "float16")
                if gemm:
                    B_s = T.alloc_shared((BK, 64), "float16")
            acc = T.alloc_fragment((64, 64), "float32")
            T.clear(acc)
            for k in T.Pipelined(ksteps, num_stages=p["stages"]):
                if gemm:  # the GEMM mainloop: A's rows from the offset, the scale in the epilogue
                    T.copy(A[bx * 64 + o, k * BK], A_s)
                    T.copy(B[k * BK, 0], B_s)
                    T.gemm(A_s, B_s, acc)
                else:  # the general loop: A's rows from the offset and the step, scaled as they are summed
                    T.copy(A[bx * 64 + o + k * 64, 0], A_s)
                    for i, j in T.Parallel(64, 64):
                        acc[i, j] += T.cast(A_s[i, j], "float32") * w
            if gemm:
                for i, j in T.Parallel(64, 64):
                    C[bx * 64 + i, j] = acc[i, j] * w
            else:
                T.copy(acc, C[bx * 64, 0])

    configs = {"tw.warp_specialize": True} if gemm else {"tw.warp_specialize": True, "tw.enable_wgmma": True}

    rng = np.random.default_rng(p.get("seed", 0))
    a = _rand(rng, (a_rows, a_cols), "float16")
    b = _rand(rng, (K, 64), "float16")
    sv = np.array(s, np.int32)
    fa, fb = _f64(a), _f64(b)
    want = np.empty((blocks * 64, 64))
    for bx in range(blocks):
        w = _var_value(scale_kind, s, bx)
        o = _var_value(off_kind, s, bx) if off_kind != "none" else 0
        if form == "gemm":
            want[bx * 64:(bx + 1) * 64] = (fa[bx * 64 + o: bx * 64 + o + 64] @ fb) * w
        else:
            want[bx * 64:(bx + 1) * 64] = w * sum(fa[bx * 64 + o + k * 64: bx * 64 + o + k * 64 + 64]
                                                  for k in range(ksteps))
    tol = 2e-3 * max(1, np.sqrt(K) / 4) * 20
    return Case("ws_var_init", p, kernel, [a, b, _poison((blocks * 64, 64), "float32"), sv], {2: want}, 1e-3, tol,
                pass_configs=configs)


# ---------------------------------------------------------------- T.Persistent tile loops
def _draw_persistent_tiles(rng):
    body = str(rng.choice(("gemm", "gemm", "rowsum")))
    bm, bn = int(rng.choice((32, 64))), int(rng.choice((32, 64)))
    return {"body": body, "bm": bm, "bn": bn, "bk": int(rng.choice((16, 32))),
            "m": _ragged(rng, bm, 3), "n": _ragged(rng, bn, 3), "k": int(rng.choice((16, 32, 48, 64, 96))),
            "wave": int(rng.integers(1, 6)), "stages": int(rng.integers(1, 4)), "threads": int(rng.choice((64, 128))),
            "dtype": str(rng.choice(("float16", "bfloat16"))), "ws": bool(rng.random() < 0.5),
            "epi": str(rng.choice(("plain", "var_scale", "let_coords")))}


def _make_persistent_tiles(p) -> Case:
    M, N, K, bm, bn, bk, wave, dtype = p["m"], p["n"], p["k"], p["bm"], p["bn"], p["bk"], p["wave"], p["dtype"]
    MB, NB = -(-M // bm), -(-N // bn)
    ksteps = -(-K // bk)
    rng = np.random.default_rng(p.get("seed", 0))
    if p["body"] == "gemm":
        epi = p.get("epi", "plain")

        @T.prim_func
        def kernel(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), "float32")):
            with T.Kernel(wave, threads=p["threads"]) as bid:
                A_s = T.alloc_shared((bm, bk), dtype)
                B_s = T.alloc_shared((bk, bn), dtype)
                acc = T.alloc_fragment((bm, bn), "float32")
                w = T.alloc_var("float32", init=1.0)
                for ti, tj in T.Persistent([MB, NB], wave, bid):
                    row = ti * bm  # (a let the producer recomputes, in the let_coords form)
                    col = tj * bn
                    if epi == "var_scale":
                        w = T.cast(ti * 3 + tj + 1, "float32")  # assigned per tile, read by the epilogue
                    T.clear(acc)
                    for k in T.Pipelined(ksteps, num_stages=p["stages"]):
                        if epi == "let_coords":
                            T.copy(A[row, k * bk], A_s)
                            T.copy(B[k * bk, col], B_s)
                        else:
                            T.copy(A[ti * bm, k * bk], A_s)
                            T.copy(B[k * bk, tj * bn], B_s)
                        T.gemm(A_s, B_s, acc)
                    if epi == "var_scale":
                        for i, j in T.Parallel(bm, bn):
                            if ti * bm + i < M and tj * bn + j < N:
                                C[ti * bm + i, tj * bn + j] = acc[i, j] * w
                    else:
                        T.copy(acc, C[ti * bm, tj * bn])

        a, b = _rand(rng, (M, K), dtype), _rand(rng, (K, N), dtype)
        want = _f64(a) @ _f64(b)
        if epi == "var_scale":
            ti, tj = np.meshgrid(np.arange(M) // bm, np.arange(N) // bn, indexing="ij")
            want = want * (ti * 3 + tj + 1)
        rtol, atol = _gemm_tol(dtype, "float32", K)
        return Case("persistent_tiles", p, kernel, [a, b, _poison((M, N), "float32")], {2: want},
                    rtol, atol * (3 * MB + NB if epi == "var_scale" else 1),
                    pass_configs={"tw.warp_specialize": p["ws"]})

    @T.prim_func
    def rowsum(A: T.Tensor((M, N), dtype), S: T.Tensor((M, NB), "float32")):
        with T.Kernel(wave, threads=p["threads"]) as bid:
            tile = T.alloc_fragment((bm, bn), "float32")
            part = T.alloc_fragment((bm,), "float32")
            for ti, tj in T.Persistent([MB, NB], wave, bid):
                T.clear(tile)
                for i, j in T.Parallel(bm, bn):
                    if ti * bm + i < M and tj * bn + j < N:
                        tile[i, j] = T.cast(A[ti * bm + i, tj * bn + j], "float32")
                T.reduce_sum(tile, part, dim=1)
                for i in T.Parallel(bm):
                    if ti * bm + i < M:
                        S[ti * bm + i, tj] = part[i]

    a = _rand(rng, (M, N), dtype)
    fa = _f64(a)
    want = np.stack([fa[:, j * bn:(j + 1) * bn].sum(1) for j in range(NB)], axis=1)
    return Case("persistent_tiles", p, rowsum, [a, _poison((M, NB), "float32")], {1: want}, 1e-5, 1e-4)


S9 = [
    Template("cluster_ring", _draw_cluster_ring, _make_cluster_ring),
    Template("cluster_gemm", _draw_cluster_gemm, _make_cluster_gemm),
    Template("ws_var_init", _draw_ws_var_init, _make_ws_var_init),
    Template("persistent_tiles", _draw_persistent_tiles, _make_persistent_tiles),
]
