"""Session-10 op-level fuzz template: ``ops.attention`` non-causal at head dim 65..128, where the
sm_90a plan takes two K/V stages with ping-pong and the intra-warpgroup overlap
(``attention_dispatch.HOPPER_NONCAUSAL_OVERRIDES``).

- ``ops_attention_nc``: the checked call is non-causal with at least 65 query rows (fewer take the
  decode-shaped kernels, not the sm_90a path) at d 80/96/112/128 (ops accepts multiples of 16 only):
  dense and flash-attn layout (``transpose(1, 2)`` views), varlen with an empty sequence (and one
  with queries but no keys: ``empty_k``), a padded KV cache with ``num_splits`` (float32 partials
  staged through shared memory, then the combine kernel);
  ragged S_q != S_k both ways, MHA/GQA/MQA, the LSE, fp16/bf16, the persistent kernel on, off or
  "auto" with a small SM count.  The previous call differs in one thing as in ``ops_attention`` (causal
  among them: a plan keyed without the overrides would be reused).

Cases, references and the two-call protocol are ``ops_cases._make_attention``'s; only the draw is new.
(``ops_cases.BUILT`` lists the kernels the last case planned: the tests check that the new
configuration is the one exercised.)"""

from __future__ import annotations

from .ops_cases import ATT_CHANGES, _make_attention
from .templates import Template

DIMS = (80, 96, 112, 128)


def _draw_attention_nc(rng):
    mode = str(rng.choice(("dense", "dense", "layout", "varlen", "cache")))
    hkv = int(rng.choice((1, 2)))
    group = int(rng.choice((1, 2, 4) if hkv == 1 else (1, 2)))  # (at most 4 query heads: the emulator's time)
    return {"mode": mode, "b": int(rng.integers(1, 3)), "hkv": hkv, "group": group,
            "sq": int(rng.choice((65, 97, 127, 128, 129, 200, 255))),
            "sk": int(rng.choice((1, 31, 64, 100, 127, 128, 129, 200, 257, 300))), "d": int(rng.choice(DIMS)),
            "causal": False, "dtype": str(rng.choice(("float16", "bfloat16"))),
            "splits": int(rng.choice((1, 2, 3, 5))), "lse": bool(rng.random() < 0.6),
            "persistent": [True, False, "auto"][int(rng.integers(3))], "sms": int(rng.choice((1, 2, 3, 5))),
            "variant": "flatmerge", "change": str(rng.choice(ATT_CHANGES)), "empty_k": bool(rng.random() < 0.3)}


def _make_attention_nc(p):
    case = _make_attention(p)
    case.template = "ops_attention_nc"
    return case


OPS_S10 = [Template("ops_attention_nc", _draw_attention_nc, _make_attention_nc)]
