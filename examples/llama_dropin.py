"""``tilewright.ops.attention`` as the attention of a Hugging Face transformers Llama model.

transformers looks attention functions up by name (``AttentionInterface``); this example registers
one called ``"tilewright"`` that runs ``ops.attention``, builds a Llama model from a small
``LlamaConfig`` with random weights (nothing is downloaded; grouped-query attention), checks its
logits against the eager implementation in float32, then times prefill (time to first token) and
greedy decoding (tokens/s) with the tilewright attention and with SDPA, side by side::

    python examples/llama_dropin.py                 # on a GPU: a ~1B-parameter model
    python examples/llama_dropin.py --save          # also writes the table under bench/results/
    python examples/llama_dropin.py --device cpu --size tiny   # CPU: the tile interpreter

What the attention function handles (``tilewright_attention``):

* no mask (transformers skips building one when the causal flag says it all): causal prefill, and
  decoding (one query token against the whole KV cache; ``ops.attention`` splits long caches
  over several blocks, flash-decoding);
* a causal mask with left padding (how ``generate`` pads decoder-only batches), also over a static
  (preallocated) cache: the mask is turned once per forward into per-sequence key ranges, read
  by the kernel as a KV cache length (``cache_seqlens``) or as packed variable-length sequences
  (``cu_seqlens``);
* anything else -- right padding, masks with holes, sliding windows, dropout, attention weights
  as output, soft-capping, sinks -- is refused with an ``ArgumentError`` that says what to change.

transformers is needed only here (``pip install tilewright[examples]``), not by tilewright.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the checkout, when not installed

from tilewright import ops  # noqa: E402
from tilewright.errors import ArgumentError  # noqa: E402

NAME = "tilewright"

# model sizes: LlamaConfig fields, plus the batch, prompt and decode lengths timed
SIZES = {
    # on the CPU, in the tile interpreter: seconds, not minutes
    "tiny": dict(config=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=2, vocab_size=256),
                 batch=2, prompt=12, decode=4, check_prompt=12),
    # on a GPU: about 1.1B parameters, head dim 128, 4 query heads per KV head
    "small": dict(config=dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=16,
                              num_attention_heads=16, num_key_value_heads=4, vocab_size=32000),
                  batch=4, prompt=2048, decode=128, check_prompt=256),
}


# ---------------------------------------------------------------- the attention function
class _MaskPlan:
    """How a 4-D boolean mask (batch, 1, q_len, kv_len) maps onto ``ops.attention``: sequence b
    sees keys ``start[b] <= j < end[b]``, each query aligned to the end of that range (the causal
    rule of ``ops.attention``).  Built once per mask: the model passes one mask to every layer."""

    def __init__(self, mask, q_len: int):
        if mask.dtype != torch.bool:  # an additive float mask: 0 where attended, a large negative elsewhere
            mask = mask > torch.finfo(mask.dtype).min / 2
        if mask.dim() != 4 or mask.shape[1] != 1:
            raise ArgumentError(f"attention_mask: expected a (batch, 1, q_len, kv_len) mask, got shape "
                                f"{tuple(mask.shape)} (per-head masks are not supported)")
        m = mask[:, 0]
        B, Sq, Skv = m.shape
        last = m[:, -1, :]  # the keys the last query sees: the sequence's whole key range
        j = torch.arange(Skv, device=m.device)
        count = last.sum(-1)
        start = torch.where(count > 0, torch.where(last, j, Skv).amin(-1), 0)
        end = torch.where(count > 0, torch.where(last, j, -1).amax(-1) + 1, 0)
        i = torch.arange(Sq, device=m.device)
        expected = ((j >= start[:, None, None]) & (j < end[:, None, None])
                    & (j <= i[:, None] + (end - Sq)[:, None, None]))
        if not torch.equal(m, expected):  # one host read per forward
            raise ArgumentError(
                "attention_mask: the tilewright attention supports causal masks with left padding (how "
                "generate() pads decoder-only batches) and no padding; this mask is something else (right "
                "padding, holes, a sliding window or a custom pattern). Pad on the left "
                "(tokenizer.padding_side = 'left') or use attn_implementation='sdpa' for this model.")
        self.shape = tuple(mask.shape)
        self.q_len = Sq
        self.kv_len = Skv
        self.lengths = (end - start).to(torch.int32)
        self.ragged_start = bool((start != 0).any())
        if self.ragged_start:  # left padding: gather each sequence's keys into packed varlen tensors
            self.key_index = torch.cat([torch.arange(int(s), int(e), device=m.device) + b * Skv
                                        for b, (s, e) in enumerate(zip(start.tolist(), end.tolist()))])
            self.cu_seqlens_k = torch.zeros(B + 1, dtype=torch.int32, device=m.device)
            self.cu_seqlens_k[1:] = torch.cumsum(self.lengths, 0)
            self.cu_seqlens_q = torch.arange(0, (B + 1) * Sq, Sq, dtype=torch.int32, device=m.device)


_plan_cache: list = [None, None]  # [the last mask seen, its plan]: every layer of one forward shares the mask


def _plan(mask, q_len: int) -> _MaskPlan:
    if _plan_cache[0] is not mask:
        _plan_cache[:] = [mask, _MaskPlan(mask, q_len)]
    return _plan_cache[1]


def _refuse_unsupported(module, dropout, kwargs):
    if dropout:
        raise ArgumentError(f"dropout: the tilewright attention is forward-only without dropout; got {dropout} "
                            "(call model.eval())")
    if kwargs.get("output_attentions"):
        raise ArgumentError("output_attentions: the tilewright attention does not materialize attention weights; "
                            "use attn_implementation='eager' to get them")
    for name in ("sliding_window", "softcap", "s_aux", "position_bias"):
        if kwargs.get(name) is not None or (name == "sliding_window" and getattr(module, name, None)):
            raise ArgumentError(f"{name}: not supported by the tilewright attention; use attn_implementation='sdpa'")


def tilewright_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None,
                         is_causal=None, **kwargs):
    """transformers attention function: query (batch, heads, q_len, dim), key/value (batch,
    kv_heads, kv_len, dim) with kv_heads dividing heads; returns ((batch, q_len, heads, dim), None)."""
    _refuse_unsupported(module, dropout, kwargs)
    B, H, Sq, D = query.shape
    is_causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    if attention_mask is None:
        causal = bool(is_causal) and Sq > 1
        if causal and key.shape[2] > Sq:
            # transformers omits the mask here only for a prefill into an empty static cache: the keys
            # past the prompt are empty slots (its causal flag is aligned to the top-left)
            key, value = key[:, :, :Sq], value[:, :, :Sq]
        out = ops.attention(query, key, value, causal=causal, scale=scaling)
        return out.transpose(1, 2), None
    if not is_causal:
        raise ArgumentError("attention_mask: non-causal attention with a mask is not supported by the tilewright "
                            "attention")
    plan = _plan(attention_mask, Sq)
    if plan.shape[2:] != (Sq, key.shape[2]):
        raise ArgumentError(f"attention_mask has shape {plan.shape}; query has {Sq} tokens and key {key.shape[2]}")
    if not plan.ragged_start:  # keys 0..length-1 of every sequence: the KV-cache form
        out = ops.attention(query, key, value, causal=Sq > 1, scale=scaling, cache_seqlens=plan.lengths)
        return out.transpose(1, 2), None
    Hkv, Skv = key.shape[1], key.shape[2]
    q = query.transpose(1, 2).reshape(B * Sq, H, D)
    k = key.transpose(1, 2).reshape(B * Skv, Hkv, D)[plan.key_index]
    v = value.transpose(1, 2).reshape(B * Skv, Hkv, D)[plan.key_index]
    out = ops.attention(q, k, v, causal=True, scale=scaling, cu_seqlens_q=plan.cu_seqlens_q,
                        cu_seqlens_k=plan.cu_seqlens_k, max_seqlen_q=Sq)
    return out.view(B, Sq, H, D), None


def register():
    """Make ``attn_implementation="tilewright"`` known to transformers (and build its masks the
    way SDPA's are built: none when the causal flag says it all)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NAME, tilewright_attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)


# ---------------------------------------------------------------- the model, the check, the timing
def build_model(size: str, dtype, device, seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    c = SIZES[size]["config"]
    # weights of standard deviation 1/sqrt(hidden): every layer's attention moves the logits (with
    # transformers' default 0.02 a small model's logits hardly depend on attention, and the check
    # below would not see a wrong attention)
    config = LlamaConfig(**c, max_position_embeddings=8192, initializer_range=c["hidden_size"] ** -0.5)
    with torch.device(device):  # initialized where it runs: a 1B model's random init is slow on the CPU
        model = LlamaForCausalLM(config)
    model = model.to(dtype=dtype).eval()
    return model


def _rel_err(x, ref) -> float:
    return float((x.double() - ref.double()).abs().max() / ref.double().abs().max())


@torch.no_grad()
def check_logits(model, batch: int, prompt: int, left_pad: int = 0, seed: int = 1) -> dict:
    """Logits of a prefill and of one decoding step (through a DynamicCache) with the tilewright
    attention and with SDPA, each against the eager attention of a float32 copy of the model.
    ``left_pad``: the first sequence gets that many padding tokens on the left (a masked batch)."""
    import copy

    from transformers import DynamicCache

    g = torch.Generator().manual_seed(seed)
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (batch, prompt), generator=g).to(model.device)
    nxt = torch.randint(0, vocab, (batch, 1), generator=g).to(model.device)
    mask = torch.ones(batch, prompt + 1, dtype=torch.long, device=model.device)
    mask[0, :left_pad] = 0
    ref_model = copy.deepcopy(model).float()

    def run(m, impl):
        m.set_attn_implementation(impl)
        cache = DynamicCache(config=m.config)
        kw = dict(attention_mask=mask[:, :prompt]) if left_pad else {}
        pos = (mask[:, :prompt].cumsum(-1) - 1).clamp(min=0) if left_pad else None
        first = m(ids, past_key_values=cache, use_cache=True, position_ids=pos, **kw).logits
        kw = dict(attention_mask=mask) if left_pad else {}
        pos = (mask.sum(-1, keepdim=True) - 1) if left_pad else None
        second = m(nxt, past_key_values=cache, use_cache=True, position_ids=pos, **kw).logits
        return first, second

    ref = run(ref_model, "eager")
    out = {}
    for impl in (NAME, "sdpa"):
        got = run(model, impl)
        # rows of padding tokens carry no meaning (each implementation fills them its own way)
        out[impl] = max(_rel_err(got[0][:, left_pad:] if left_pad else got[0], ref[0][:, left_pad:] if left_pad
                                 else ref[0]), _rel_err(got[1], ref[1]))
    del ref_model
    return out


def _sync(device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


@torch.no_grad()
def time_generation(model, impl: str, batch: int, prompt: int, decode: int, repeat: int = 3) -> tuple:
    """(time to first token in ms, decode tokens/s over the batch, generated tokens): greedy
    decoding through a DynamicCache; the best of ``repeat`` runs after one warm-up (compilation)."""
    from transformers import DynamicCache

    model.set_attn_implementation(impl)
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(0, model.config.vocab_size, (batch, prompt), generator=g).to(model.device)
    best_ttft, best_tps, tokens = float("inf"), 0.0, None
    for it in range(repeat + 1):
        cache = DynamicCache(config=model.config)
        _sync(model.device)
        t0 = time.perf_counter()
        # logits_to_keep=1: only the last position's logits, as generate() asks for
        tok = model(ids, past_key_values=cache, use_cache=True, logits_to_keep=1).logits[:, -1].argmax(-1, keepdim=True)
        _sync(model.device)
        t1 = time.perf_counter()
        out = [tok]
        for _ in range(decode - 1):
            tok = model(tok, past_key_values=cache, use_cache=True).logits[:, -1].argmax(-1, keepdim=True)
            out.append(tok)
        _sync(model.device)
        t2 = time.perf_counter()
        if it == 0:
            continue  # warm-up: kernels compile on first use
        best_ttft = min(best_ttft, (t1 - t0) * 1e3)
        if decode > 1:
            best_tps = max(best_tps, batch * (decode - 1) / (t2 - t1))
        tokens = torch.cat(out, 1)
    return best_ttft, best_tps, tokens


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--size", choices=sorted(SIZES), default=None, help="tiny on the CPU, small on a GPU by default")
    p.add_argument("--dtype", choices=("bfloat16", "float16"), default="bfloat16")
    p.add_argument("--batch", type=int)
    p.add_argument("--prompt", type=int)
    p.add_argument("--decode", type=int)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--tol", type=float, default=3e-2, help="largest relative logits error against float32 eager")
    p.add_argument("--save", action="store_true", help="write the table under bench/results/")
    a = p.parse_args(argv)
    size = a.size or ("tiny" if a.device == "cpu" else "small")
    s = SIZES[size]
    batch, prompt, decode = a.batch or s["batch"], a.prompt or s["prompt"], a.decode or s["decode"]
    register()
    model = build_model(size, getattr(torch, a.dtype), a.device)
    cfg = model.config
    print(f"Llama, random weights: {cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}, "
          f"{cfg.num_attention_heads} heads / {cfg.num_key_value_heads} KV heads, head dim "
          f"{cfg.hidden_size // cfg.num_attention_heads}, {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M "
          f"parameters, {a.dtype} on {a.device}", flush=True)

    errs = check_logits(model, batch, s["check_prompt"])
    errs_pad = check_logits(model, batch, s["check_prompt"], left_pad=max(1, s["check_prompt"] // 3))
    print(f"logits vs float32 eager (max relative error): tilewright {errs[NAME]:.2e}, sdpa {errs['sdpa']:.2e}; "
          f"left-padded batch: tilewright {errs_pad[NAME]:.2e}, sdpa {errs_pad['sdpa']:.2e}", flush=True)
    worst = max(errs[NAME], errs_pad[NAME])
    # bf16 rounding grows with depth: a deep model may pass the tolerance only as far as SDPA does
    limit = max(a.tol, 1.5 * max(errs["sdpa"], errs_pad["sdpa"]))
    if not worst <= limit:
        raise SystemExit(f"FAILED: tilewright logits differ from eager by {worst:.2e} (> {limit:.1e})")

    results = {}
    for impl in (NAME, "sdpa"):
        results[impl] = time_generation(model, impl, batch, prompt, decode, a.repeat)
    agree = float((results[NAME][2] == results["sdpa"][2]).float().mean())
    rows = [f"Llama {cfg.num_hidden_layers}L h{cfg.hidden_size} {cfg.num_attention_heads}/{cfg.num_key_value_heads} "
            f"heads, {a.dtype}, batch {batch}, prompt {prompt}, {decode} decoded tokens"
            + (" (CPU: the tile interpreter, times are not performance)" if a.device == "cpu" else ""), "",
            "| attention | time to first token (ms) | decode tokens/s | logits rel. err vs fp32 eager |",
            "|---|---|---|---|"]
    for impl in (NAME, "sdpa"):
        ttft, tps, _ = results[impl]
        rows.append(f"| {impl} | {ttft:.2f} | {tps:.1f} | {max(errs[impl], errs_pad[impl]):.2e} |")
    t, sd = results[NAME], results["sdpa"]
    rows += ["", f"tilewright / sdpa: TTFT {t[0] / sd[0]:.2f}x (lower is better), decode "
             f"{t[1] / max(sd[1], 1e-9):.2f}x; greedy tokens identical to sdpa's for {agree:.0%} of positions "
             "(random weights give near-flat logits: one bf16 rounding difference changes the rest of a "
             "sequence; correctness is the logits check above, prefill and a decoding step)"]
    print("\n".join(rows), flush=True)
    if a.save:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
        from common import save

        print("saved", save("llama_dropin", rows))
    return dict(errors=errs, errors_padded=errs_pad, results=results, agreement=agree)


if __name__ == "__main__":
    main()
