"""Session-11 op-level fuzz templates: the sm_90a defaults that session 10 switched on, each drawn at
and around the sizes where the choice changes (``ops_on`` plans for sm_90a; the emulator runs the
kernels against float64; every allocation poisoned).

- ``ops_attention_s10def``: dense / flash-attn layout ``ops.attention`` at head dim 64 (ping-pong and the
  overlap), 80..128 non-causal (two K/V stages, ping-pong, the overlap: ``HOPPER_NONCAUSAL_OVERRIDES``)
  and causal with at most / more than ``PERSISTENT_MAX_KEY_BLOCKS`` key blocks (short causal: the same
  overrides; long: ``HOPPER_LONG_CAUSAL_OVERRIDES``); query and key lengths at the 128-row / 128-key block
  multiples (``SPECIALIZE_EVEN``'s kernels without tail handling) and one off them; MHA / GQA / MQA.
  ``kb``: 8 keeps ``PERSISTENT_MAX_KEY_BLOCKS`` as shipped (keys 1024 / 1025 around it); 2 lowers it for
  the case (the same short / long causal split at 256 / 257 keys, which the emulator runs in a fraction
  of the time).
- ``ops_decode_s10def``: one query token over a padded KV cache with the default decode variants (no
  ``TILEWRIGHT_DECODE_VARIANT``): GQA takes ``tmerge`` (the tree merge through global memory), MQA
  (group > 16) ``cmerge,cover`` below ``MQA_LONG_FROM`` cache keys and ``cover,tmerge`` from it.
  ``num_splits`` forced to counts whose sets of the tree are 8, 4, 2 or none (odd counts), or left to
  the planner; ``mqa_from`` moves ``MQA_LONG_FROM`` to the cache length, one above or one below it (the
  shipped 32768 keys are too many for the emulator: ``tests/test_fuzz_s11.py`` checks the real boundary
  on the plan alone).
- ``ops_matmul_s10def``: ``ops.matmul`` with the planner's own choice (no forced configuration) at
  ragged M around the 128-row heuristic (one consumer warpgroup of 128x64 over many columns: "t128"),
  or forced to the persistent kernel with or without warp specialization (without: the nested TMA ring
  whose mbarriers are set up once and whose phases carry over the tiles in a bit mask) at tile counts
  that are not multiples of the SM count and K steps that are not multiples of the stage depth.

Cases, references and the two-call protocol are ``ops_cases``'s."""

from __future__ import annotations

import contextlib

import numpy as np

from .ops_cases import (
    ACTS,
    ATT_CHANGES,
    CHANGES,
    OPS_BACKENDS,
    REPEATS,
    _make_attention,
    _matmul_args,
    _matmul_ref,
    _np,
    _torch,
    ops_on,
)
from .templates import Case, Template

EVEN_OR_OFF = (127, 128, 129, 255, 256, 257)


@contextlib.contextmanager
def _patched(mod, name, value):
    """``mod.name`` set to ``value`` for the block (``value`` None: left alone)."""
    if value is None:
        yield
        return
    saved = getattr(mod, name)
    setattr(mod, name, value)
    try:
        yield
    finally:
        setattr(mod, name, saved)


def _with_patch(case, mod, name, value, template):
    """``case`` renamed ``template`` whose op calls run with ``mod.name`` = ``value``."""
    call = case.call

    def patched_call(backend):
        with _patched(mod, name, value):
            return call(backend)

    case.call, case.template = patched_call, template
    return case


# ---------------------------------------------------------------- attention at the session-10 defaults
def _draw_attention_def(rng):
    causal = bool(rng.random() < 0.5)
    kb = int(rng.choice((8, 2, 2)))  # (the shipped bound a third of the time: its keys take the emulator long)
    hkv = int(rng.choice((1, 2)))
    if causal:  # at most / more than kb key blocks of 128, at a multiple of the block and one off it
        sk = int(rng.choice((kb * 128 - 1, kb * 128, kb * 128 + 1, kb * 128 + 128)))
    else:
        sk = int(rng.choice(EVEN_OR_OFF + (64, 100)))
    return {"mode": str(rng.choice(("dense", "dense", "layout"))), "b": int(rng.integers(1, 3)) if kb == 2 else 1,
            "hkv": hkv, "group": int(rng.choice((1, 2, 4) if hkv == 1 else (1, 2))),
            "sq": int(rng.choice(EVEN_OR_OFF if kb == 2 or not causal else (127, 128, 129))), "sk": sk,
            "d": int(rng.choice((64, 80, 96, 128))), "causal": causal,
            "dtype": str(rng.choice(("float16", "bfloat16"))),
            "splits": 1, "lse": bool(rng.random() < 0.6), "persistent": "auto", "sms": int(rng.choice((1, 2, 3, 5))),
            "variant": None, "change": str(rng.choice(ATT_CHANGES)), "kb": kb}


def _make_attention_def(p):
    from ..ops import attention_dispatch as ad

    return _with_patch(_make_attention(p), ad, "PERSISTENT_MAX_KEY_BLOCKS", p.get("kb", 8) if p.get("kb", 8) != 8
                       else None, "ops_attention_s10def")


# ---------------------------------------------------------------- decode at the session-10 merge defaults
SPLITS = (None, None, 2, 3, 4, 6, 8, 12, 16)  # (sets of the tree: 2, none, 4, 2, 8, 4, 8)


def _draw_decode_def(rng):
    mqa = bool(rng.random() < 0.4)
    splits = SPLITS[int(rng.integers(len(SPLITS)))]
    d = int(rng.choice((64, 128)))
    # at least one 64-key block per forced split, around a multiple of eight blocks (a full tree of sets)
    blocks = max(splits or 8, 8) * int(rng.choice((1, 2)))
    sk = int(blocks * 64 + rng.choice((-1, 0, 1, 33)))
    return {"mode": "decode", "b": int(rng.integers(1, 3)), "hkv": 1 if mqa else int(rng.choice((1, 2))),
            "group": int(rng.choice((24, 32))) if mqa else int(rng.choice((2, 4, 8))), "sq": 1, "sk": sk, "d": d,
            "causal": False, "dtype": str(rng.choice(("float16", "bfloat16"))), "splits": splits,
            "lse": bool(rng.random() < 0.6), "persistent": "auto", "sms": int(rng.choice((2, 4, 8, 16))),
            "variant": None, "change": str(rng.choice(("same", "data", "dtype", "seq_k") + ("splits",) * bool(splits))),
            "mqa_from": int(rng.choice((-1, 0, 1))) if mqa else None}


def _make_decode_def(p):
    from ..ops import decode_kernels as dk

    at = None if p.get("mqa_from") is None else p["sk"] + p["mqa_from"]
    return _with_patch(_make_attention(p), dk, "MQA_LONG_FROM", at, "ops_decode_s10def")


# ---------------------------------------------------------------- GEMM: the 128-row heuristic, the nested ring
def _draw_matmul_def(rng):
    form = str(rng.choice(("heuristic", "heuristic", "persistent", "persistent_ws")))
    if form == "heuristic":
        m = int(rng.choice((64, 65, 97, 100, 127, 128, 129)))
        n = int(rng.choice((64, 72, 136, 200, 264)))
    else:
        m = int(rng.choice((33, 65, 100, 129, 200)))
        n = int(rng.choice((40, 72, 136, 200)))
    return {"m": m, "n": n, "k": int(rng.choice((40, 64, 100, 136, 200, 232))),
            "dtype": str(rng.choice(("float16", "bfloat16"))), "ta": bool(rng.random() < 0.3),
            "tb": bool(rng.random() < 0.5), "bias": bool(rng.random() < 0.5), "act": str(rng.choice(sorted(ACTS))),
            "out32": bool(rng.random() < 0.5), "sms": int(rng.choice((2, 3, 5))), "form": form,
            "stages": int(rng.choice((2, 3, 4))), "bk": int(rng.choice((32, 64))),
            "change": str(rng.choice(CHANGES))}


def _matmul_def_config(p):
    """The forced configuration of a case (None: the planner's)."""
    from ..ops.gemm_configs import GemmConfig

    if p["form"] == "heuristic":
        return None
    ws = p["form"] == "persistent_ws"
    return GemmConfig("persistent", 64 if not ws else 128, 64, p["bk"], p["stages"], 128 if not ws else 256,
                      wgmma=True, ws=ws, group_M=2)


def _make_matmul_def(p) -> Case:
    def call(backend):
        torch = _torch()
        from ..ops import dispatch

        device = "cuda" if backend == "gpu" else "cpu"
        g = torch.Generator().manual_seed(p.get("seed", 0))
        first = _matmul_args(p, g, p["change"], device)
        second = _matmul_args(p, g, None, device)
        outs = []
        with ops_on(backend, sms=p["sms"], force_config=_matmul_def_config(p)):
            for a, b, bias, act, out_dtype in REPEATS(first, second):
                outs.append(_np(dispatch.matmul_impl(a, b, bias, act, out_dtype)))
        return outs[1:]

    first_ref = _matmul_ref(p, p["change"])
    second_ref = _matmul_ref(p, None)
    tol = 2e-2 if not p["out32"] else 4e-3
    return Case("ops_matmul_s10def", p, None,
                [np.full(first_ref.shape, np.nan)] + [np.full((p["m"], p["n"]), np.nan)] * 2,
                {0: first_ref, 1: second_ref, 2: second_ref}, tol, tol, call=call, backends=OPS_BACKENDS)


OPS_S11 = [Template("ops_attention_s10def", _draw_attention_def, _make_attention_def),
           Template("ops_decode_s10def", _draw_decode_def, _make_decode_def),
           Template("ops_matmul_s10def", _draw_matmul_def, _make_matmul_def)]
