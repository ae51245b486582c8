"""Op-level fuzz templates: ``tilewright.ops.matmul`` and ``tilewright.ops.attention`` called as a
user would (torch CPU tensors), their kernels compiled for the fuzz backend and run on the CPU
(``interpret``: the ordinary CPU path; ``emulator:sm_90a`` / ``emulator:sm_80``: the op planning for
that GPU, its kernels run by the emulator), every allocation of the op poisoned (NaN).

Each case makes two calls and checks both against float64: a *previous* call whose inputs differ
from the checked one only in one thing (strides, dtype, a size, an option, the data only, a
storage offset), then the checked call.  A plan or kernel cache hit on a plan made for the previous
call's metadata is a wrong answer there.

- ``ops_matmul``: random shapes (1, primes, ragged), transposes as strides (``w.t()``), bias and
  activation, fp16/bf16 in, the input dtype or fp32 out; the configuration forced to one of
  ``ops/gemm_configs.candidates()`` of the shape or of a large shape (split-K, stream-K, persistent
  and clusters included), with a small SM count so that the persistent grids stay small.
- ``ops_attention``: dense (MHA/GQA/MQA, causal or not, ragged lengths), flash-attn layout
  (``transpose(1, 2)`` views), varlen packed sequences (an empty one included), a padded KV cache
  with ``num_splits``, decoding (one query token) with random split counts, the LSE; on sm_90a the
  persistent forward on or off with a random SM count.

The references are NumPy in float64, written here.  Needs torch (``skipped`` without it).
"""

from __future__ import annotations

import contextlib
import math
import os

import numpy as np

from .templates import Case, Template

OPS_BACKENDS = ("interpret", "emulator:sm_90a", "emulator:sm_80", "gpu")
ACTS = {"none": lambda x: x, "relu": lambda x: np.maximum(x, 0), "silu": lambda x: x / (1 + np.exp(-x)),
        "gelu_tanh": lambda x: 0.5 * x * (1 + np.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))}
SMEM = {"emulator:sm_90a": 232448, "emulator:sm_80": 166912}
BUILT: list = []  # (kernel key, pass configs) of the attention kernels planned in the last ``ops_on``


def _torch():
    import torch

    return torch


class _PoisonedTorch:
    """torch, but ``empty`` / ``empty_like`` give NaN-filled tensors (integers: -7)."""

    def __getattr__(self, name):
        return getattr(_torch(), name)

    @staticmethod
    def _fill(x):
        return x.fill_(math.nan) if x.is_floating_point() else x.fill_(-7)

    def empty(self, *a, **kw):
        return self._fill(_torch().empty(*a, **kw))

    def empty_like(self, *a, **kw):
        return self._fill(_torch().empty_like(*a, **kw))


@contextlib.contextmanager
def ops_on(backend: str, sms: int = 132, persistent=None, decode_variant=None, force_config=None):
    """``tilewright.ops`` planning for ``backend`` with ``sms`` multiprocessors, its kernels compiled for
    it (the emulator: run on the CPU; ``gpu``: the local GPU as it is, ``sms`` and ``persistent``
    apart), allocations poisoned; every plan forgotten before and after."""
    import tilewright

    from ..ops import attention_dispatch as ad
    from ..ops import dispatch

    saved, env = [], os.environ.get("TILEWRIGHT_DECODE_VARIANT")

    def patch(mod, name, value):
        saved.append((mod, name, getattr(mod, name)))
        setattr(mod, name, value)

    poisoned = _PoisonedTorch()
    patch(dispatch, "_torch", lambda: poisoned)
    patch(ad, "_torch", lambda: poisoned)
    if force_config is not None:
        patch(dispatch, "matmul_config", lambda *a, **k: force_config)
    if backend.startswith("emulator:"):
        arch = backend.split(":", 1)[1]
        target = f"cuda -arch={arch}"
        family = "sm_90" if arch.startswith("sm_90") else arch

        def compile_here(key, build, _target, pass_configs=None):
            hit = dispatch._kernels.get((key, target, tuple(sorted((pass_configs or {}).items()))))
            if hit is None:
                hit = tilewright.compile(build(), target=target, execution_backend="emulator",
                                         pass_configs=pass_configs or None)
                dispatch._kernels[(key, target, tuple(sorted((pass_configs or {}).items())))] = hit
            return hit

        for mod in (dispatch, ad):
            patch(mod, "_kernel", compile_here)
            patch(mod, "_target_of", lambda t: target)
        patch(dispatch, "_arch_of", lambda t: (family, sms, "fuzz"))
        patch(dispatch, "shared_limit", lambda t: SMEM[backend])
        patch(ad, "_is_hopper", lambda t: family == "sm_90")
        patch(ad, "_shared_bytes", lambda t: SMEM[backend])
        patch(ad, "_sm_count", lambda t: sms)
    if backend == "gpu" and persistent is not None:
        patch(ad, "_sm_count", lambda t: sms)  # (a small persistent grid: blocks with several items)
    if persistent is not None:
        patch(ad, "PERSISTENT", persistent)
    if decode_variant is not None:
        os.environ["TILEWRIGHT_DECODE_VARIANT"] = decode_variant
    inner = ad._kernel
    BUILT.clear()

    def recording(key, build, target, pass_configs=None):  # (what the tests read: which kernels were planned)
        BUILT.append((key, dict(pass_configs or {})))
        return inner(key, build, target, pass_configs)

    patch(ad, "_kernel", recording)
    dispatch.forget_plans()
    try:
        yield
    finally:
        dispatch.forget_plans()
        for mod, name, value in reversed(saved):
            setattr(mod, name, value)
        if decode_variant is not None:
            if env is None:
                os.environ.pop("TILEWRIGHT_DECODE_VARIANT", None)
            else:
                os.environ["TILEWRIGHT_DECODE_VARIANT"] = env


def _np(x):
    """A torch result as a float64 NumPy array."""
    return x.detach().double().cpu().numpy()


def _ragged(rng, most):
    return int(rng.choice([1, 2, 7, 13, 31, 33, 61, 64, 65, 97, 127, 128, 129, most]))


# ---------------------------------------------------------------- ops.matmul
HINTS = (None, (4096, 4096, 4096), (128, 8192, 8192), (2000, 3000, 1000))
CHANGES = ("same", "data", "stride", "dtype", "shape", "option", "offset")


def _draw_matmul(rng):
    return {"m": _ragged(rng, 200), "n": int(rng.choice((8, 16, 24, 40, 64, 72, 136, 200, 7, 33))),
            "k": int(rng.choice((8, 16, 32, 40, 64, 96, 136, 200, 5, 31))), "dtype": str(rng.choice(("float16",
                                                                                                      "bfloat16"))),
            "ta": bool(rng.random() < 0.3), "tb": bool(rng.random() < 0.5), "bias": bool(rng.random() < 0.5),
            "act": str(rng.choice(sorted(ACTS))), "out32": bool(rng.random() < 0.5),
            "cand": int(rng.integers(0, 1000)), "sms": int(rng.choice((2, 3, 4, 8))),
            "hint": int(rng.choice((0, 0, 1, 2, 3))),
            "change": str(rng.choice(CHANGES))}


def _make_matmul(p) -> Case:
    def call(backend):
        torch = _torch()
        from ..ops import dispatch, gemm_configs

        device = "cuda" if backend == "gpu" else "cpu"
        arch = {"interpret": "interpret", "emulator:sm_90a": "sm_90", "emulator:sm_80": "sm_80"}.get(backend)
        if arch is None:  # the local GPU: what ops plans for it
            arch = dispatch._arch_of(torch.empty(0, device=device))[0]
        smem = SMEM.get(backend, gemm_configs.H200_SHARED_BYTES)
        # the candidates of this shape, or of a large one (clusters, persistent, stream-K, split-K
        # configurations), forced on this small one
        shape = HINTS[p.get("hint", 0)] or (p["m"], p["n"], p["k"])
        cands = gemm_configs.candidates(*shape, p["dtype"], arch, p["sms"] if shape == (p["m"], p["n"], p["k"])
                                        else 132, smem)
        cfg = cands[p["cand"] % len(cands)]
        if arch == "sm_80" and cfg.kind in ("persistent", "streamk"):
            cfg = cands[0]
        g = torch.Generator().manual_seed(p.get("seed", 0))
        first = _matmul_args(p, g, p["change"], device)
        second = _matmul_args(p, g, None, device)
        outs = []
        with ops_on(backend, sms=p["sms"], force_config=cfg):
            for a, b, bias, act, out_dtype in REPEATS(first, second):
                outs.append(_np(dispatch.matmul_impl(a, b, bias, act, out_dtype)))
        return outs[1:]

    first_ref = _matmul_ref(p, p["change"])
    second_ref = _matmul_ref(p, None)
    return Case("ops_matmul", p, None, [np.full(first_ref.shape, np.nan)] + [np.full((p["m"], p["n"]), np.nan)] * 2,
                {0: first_ref, 1: second_ref, 2: second_ref}, 2e-2 if not p["out32"] else 4e-3,
                2e-2 if not p["out32"] else 4e-3, call=call, backends=OPS_BACKENDS)


def REPEATS(first, second):  # noqa: N802 - a constant's role
    """The calls of a case: the previous signature twice (a repeat call is what keeps a fast plan
    for a signature: its launches bind during the first), then the checked one twice; the results
    of the last three are checked."""
    return (first, first, second, second)


def _variant(p, change):
    """The parameters of the previous call (``change``) or the checked one (None)."""
    q = dict(p)
    if change == "stride":
        q.update(ta=not p["ta"]) if p["m"] % 2 else q.update(tb=not p["tb"])
    elif change == "dtype":
        q.update(dtype="bfloat16" if p["dtype"] == "float16" else "float16")
    elif change == "shape":
        q.update(m=p["m"] + 9 if p["m"] < 100 else p["m"] - 9)
    elif change == "option":
        which = p["m"] % 3
        if which == 0:
            q.update(bias=not p["bias"])
        elif which == 1:
            q.update(act="relu" if p["act"] != "relu" else "none")
        else:
            q.update(out32=not p["out32"])
    elif change == "offset":
        q.update(offset=1)
    return q


def _matmul_values(q, salt):
    """Deterministic values (a, b, bias) of a call's parameters, NumPy float64 (rounded to the dtype)."""
    rng = np.random.default_rng((q.get("seed", 0) + salt) % 2**32)
    import ml_dtypes

    nd = np.float16 if q["dtype"] == "float16" else ml_dtypes.bfloat16
    a = rng.uniform(-1, 1, (q["m"], q["k"])).astype(nd).astype(np.float64)
    b = rng.uniform(-1, 1, (q["k"], q["n"])).astype(nd).astype(np.float64)
    bias = rng.uniform(-1, 1, q["n"]).astype(nd).astype(np.float64)
    return a, b, bias


def _matmul_ref(p, change):
    q = _variant(p, change)
    a, b, bias = _matmul_values(q, 0 if change is None else 17)
    return ACTS[q["act"]](a @ b + (bias if q["bias"] else 0))


def _matmul_args(p, g, change, device="cpu"):
    torch = _torch()
    q = _variant(p, change)
    a, b, bias = _matmul_values(q, 0 if change is None else 17)
    dt = getattr(torch, q["dtype"])
    ta = torch.from_numpy(np.ascontiguousarray(a.T) if q["ta"] else a).to(device, dt)
    tb = torch.from_numpy(np.ascontiguousarray(b.T) if q["tb"] else b).to(device, dt)
    ta, tb = (ta.t() if q["ta"] else ta), (tb.t() if q["tb"] else tb)
    if q.get("offset"):  # the same values at a storage offset of one element (not 16-byte aligned)
        big = torch.empty(ta.numel() + 1, dtype=dt, device=device)
        big[1:] = ta.t().contiguous().reshape(-1) if q["ta"] else ta.reshape(-1)
        view = big[1:].view(q["k"], q["m"]) if q["ta"] else big[1:].view(q["m"], q["k"])
        ta = view.t() if q["ta"] else view
    bt = torch.from_numpy(bias).to(device, dt) if q["bias"] else None
    return ta, tb, bt, q["act"], torch.float32 if q["out32"] else None


# ---------------------------------------------------------------- ops.attention
MODES = ("dense", "dense", "layout", "varlen", "cache", "decode")
ATT_CHANGES = ("same", "data", "causal", "dtype", "seq_k", "layout", "splits")


def _draw_attention(rng):
    mode = str(rng.choice(MODES))
    hkv = int(rng.choice((1, 2)))
    return {"mode": mode, "b": int(rng.integers(1, 3)), "hkv": hkv, "group": int(rng.choice((1, 2, 4))),
            "sq": 1 if mode == "decode" else int(rng.choice((1, 33, 64, 65, 129, 200))),
            "sk": int(rng.choice((1, 31, 64, 77, 130, 200, 257))), "d": int(rng.choice((64, 128))),
            "causal": bool(rng.random() < 0.5), "dtype": str(rng.choice(("float16", "bfloat16"))),
            "splits": int(rng.choice((1, 2, 3, 5, 8))), "lse": bool(rng.random() < 0.6),
            "persistent": bool(rng.random() < 0.5), "sms": int(rng.choice((1, 2, 3, 5))),
            "variant": str(rng.choice(("flatmerge", "cpasync", "ws", "ws,flatmerge"))),
            "change": str(rng.choice(ATT_CHANGES))}


def _att_variant(p, change):
    q = dict(p)
    if change == "causal":
        q.update(causal=not p["causal"])
    elif change == "dtype":
        q.update(dtype="bfloat16" if p["dtype"] == "float16" else "float16")
    elif change == "seq_k":
        q.update(sk=p["sk"] + 40)
    elif change == "layout" and p["mode"] in ("dense", "layout"):
        q.update(mode="layout" if p["mode"] == "dense" else "dense")
    elif change == "splits" and p["mode"] in ("cache", "decode"):
        q.update(splits=p["splits"] % 8 + 1)
    return q


def _att_values(q, salt):
    """(q, k, v, lengths) in float64 rounded to the dtype: dense (B, H, Sq, D) / (B, Hkv, Sk, D);
    varlen: lists of per-sequence arrays; cache: per-batch key counts."""
    import ml_dtypes

    rng = np.random.default_rng((q.get("seed", 0) + salt) % 2**32)
    nd = np.float16 if q["dtype"] == "float16" else ml_dtypes.bfloat16
    H, Hkv, D = q["hkv"] * q["group"], q["hkv"], q["d"]

    def r(*shape):
        return rng.standard_normal(shape).astype(nd).astype(np.float64)

    if q["mode"] == "varlen":
        lens_q = [q["sq"], 0, max(1, q["sq"] // 2 + 3)][:q["b"] + 1]
        lens_k = [q["sk"], 17, max(1, q["sk"] - 20)][:q["b"] + 1]
        if q.get("empty_k"):  # the last sequence has queries and no keys (output 0, LSE -inf)
            lens_k[-1] = 0
        return [r(n, H, D) for n in lens_q], [r(n, Hkv, D) for n in lens_k], [r(n, Hkv, D) for n in lens_k], None
    lens = None
    if q["mode"] in ("cache", "decode"):
        lens = [int(v) for v in rng.integers(0, q["sk"] + 1, size=q["b"])]
        lens[0] = q["sk"]
    return r(q["b"], H, q["sq"], D), r(q["b"], Hkv, q["sk"], D), r(q["b"], Hkv, q["sk"], D), lens


def _att_ref_one(q, k, v, causal, nkeys):
    """One sequence: q (H, Sq, D), k/v (Hkv, Sk, D); the first ``nkeys`` keys; causal aligned at the end."""
    H, Sq, D = q.shape
    g = H // k.shape[0]
    k, v = np.repeat(k, g, 0), np.repeat(v, g, 0)
    s = q @ k.transpose(0, 2, 1) / math.sqrt(D)
    Sk = k.shape[1]
    mask = np.arange(Sk)[None, :] >= nkeys
    if causal:
        mask = mask | (np.arange(Sk)[None, :] > np.arange(Sq)[:, None] + nkeys - Sq)
    s = np.where(mask[None], -np.inf, s)
    m = s.max(-1, keepdims=True, initial=-np.inf)  # (no keys at all: -inf, as for a fully masked row)
    with np.errstate(invalid="ignore", divide="ignore"):
        e = np.exp(s - np.where(np.isfinite(m), m, 0))
        den = e.sum(-1, keepdims=True)
        out = np.where(den > 0, (e @ v) / np.where(den > 0, den, 1), 0.0)
        lse = np.where(den[..., 0] > 0, np.log(np.where(den[..., 0] > 0, den[..., 0], 1)) + m[..., 0], -np.inf)
    return out, lse


def _att_ref(p, change):
    q_ = _att_variant(p, change)
    q, k, v, lens = _att_values(q_, 0 if change is None else 29)
    causal = q_["causal"] and q_["mode"] != "decode"
    if q_["mode"] == "varlen":
        outs, lses = zip(*[_att_ref_one(a.transpose(1, 0, 2), b.transpose(1, 0, 2), c.transpose(1, 0, 2), causal,
                                        b.shape[0]) for a, b, c in zip(q, k, v)])
        return np.concatenate([o.transpose(1, 0, 2) for o in outs]), np.concatenate(lses, axis=1)
    res = [_att_ref_one(q[i], k[i], v[i], causal if q_["mode"] != "decode" else False,
                        lens[i] if lens is not None else k.shape[2]) for i in range(q.shape[0])]
    out, lse = np.stack([o for o, _ in res]), np.stack([s for _, s in res])
    return out, lse


def _att_call_args(q_, salt, device="cpu"):
    torch = _torch()
    q, k, v, lens = _att_values(q_, salt)
    dt = getattr(torch, q_["dtype"])
    kw = {"causal": q_["causal"] and q_["mode"] != "decode", "return_lse": q_["lse"]}
    if q_["mode"] == "varlen":
        def cu(xs):
            return torch.tensor(np.concatenate([[0], np.cumsum([x.shape[0] for x in xs])]), dtype=torch.int32)

        kw.update(cu_seqlens_q=cu(q).to(device), cu_seqlens_k=cu(k).to(device))
        return [torch.from_numpy(np.concatenate(x)).to(device, dt) for x in (q, k, v)], kw
    tq, tk, tv = (torch.from_numpy(x).to(device, dt) for x in (q, k, v))
    if q_["mode"] == "layout":  # (batch, seq, heads, dim) storage read through transpose(1, 2)
        tq, tk, tv = (x.transpose(1, 2).contiguous().transpose(1, 2) for x in (tq, tk, tv))
    if lens is not None:
        kw.update(cache_seqlens=torch.tensor(lens, dtype=torch.int32, device=device), num_splits=q_["splits"])
    return [tq, tk, tv], kw


def _make_attention(p) -> Case:
    def call(backend):
        from .. import ops

        results = []
        with ops_on(backend, sms=p["sms"], persistent=p["persistent"], decode_variant=p["variant"]):
            for change, salt in REPEATS((p["change"], 29), (None, 0)):
                q_ = _att_variant(p, change)
                args, kw = _att_call_args(q_, salt, "cuda" if backend == "gpu" else "cpu")
                r = ops.attention(*args, **kw)
                out, lse = r if q_["lse"] else (r, None)
                results.append(_np(out))
                results.append(_np(lse) if lse is not None else None)
        return results[2:]

    expected, args = {}, []
    for i, change in enumerate((p["change"], None, None)):
        q_ = _att_variant(p, change)
        out, lse = _att_ref(p, change)
        expected[2 * i] = out
        args += [np.full(out.shape, np.nan), np.full(lse.shape, np.nan)]
        if q_["lse"]:
            expected[2 * i + 1] = lse
    tol = 2e-2 if p["dtype"] == "bfloat16" else 5e-3
    return Case("ops_attention", p, None, args, expected, tol, tol, call=call, backends=OPS_BACKENDS)


OPS = [
    Template("ops_matmul", _draw_matmul, _make_matmul),
    Template("ops_attention", _draw_attention, _make_attention),
]
