"""examples/llama_dropin.py: ops.attention as a transformers attention implementation, on the CPU
(the tile interpreter).  Skipped without transformers (``pip install tilewright[examples]``)."""

import copy
import importlib.util
import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tilewright.errors import ArgumentError  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def ex():
    spec = importlib.util.spec_from_file_location("llama_dropin", os.path.join(ROOT, "examples", "llama_dropin.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.register()
    return mod


class _Module:  # what the attention function reads from a transformers attention module
    is_causal = True
    training = False


def _reference(q, k, v, allowed, scale):
    """float64 attention; ``allowed`` (batch, q_len, kv_len) bool; rows with no key give 0."""
    group = q.shape[1] // k.shape[1]
    k64, v64 = (t.double().repeat_interleave(group, 1) for t in (k, v))
    s = (q.double() @ k64.transpose(-1, -2)) * scale
    s = s.masked_fill(~allowed[:, None], float("-inf"))
    p = torch.softmax(s, -1).nan_to_num(0.0)
    return (p @ v64).transpose(1, 2)  # (batch, q_len, heads, dim), as transformers wants it


def _causal(B, Sq, Skv, start, end):
    j = torch.arange(Skv)
    i = torch.arange(Sq)[:, None]
    start, end = torch.tensor(start)[:, None, None], torch.tensor(end)[:, None, None]
    return (j >= start) & (j < end) & (j <= i + end - Sq)


@pytest.mark.parametrize("case", ["prefill", "decode", "left_pad_prefill", "left_pad_decode", "static_cache_decode",
                                  "static_cache_chunk"])
def test_attention_function_against_float64(ex, case):
    torch.manual_seed(hash(case) % 1000)
    B, H, Hkv, D = 3, 4, 2, 32
    Sq, Skv = {"prefill": (20, 20), "decode": (1, 37), "left_pad_prefill": (20, 20), "left_pad_decode": (1, 21),
               "static_cache_decode": (1, 48), "static_cache_chunk": (5, 48)}[case]
    # query/key/value as the Llama module passes them: (batch, heads, seq, dim) views of (batch, seq, heads, dim)
    q = torch.randn(B, Sq, H, D, dtype=torch.bfloat16).transpose(1, 2)
    k = torch.randn(B, Skv, Hkv, D, dtype=torch.bfloat16).transpose(1, 2)
    v = torch.randn(B, Skv, Hkv, D, dtype=torch.bfloat16).transpose(1, 2)
    start, end = [0] * B, [Skv] * B
    if case.startswith("left_pad"):
        start = [0, 7, 3]
    if case.startswith("static_cache"):
        end = [30, 9, 48]
    allowed = _causal(B, Sq, Skv, start, end)
    mask = None if case in ("prefill", "decode") else allowed[:, None].clone()
    out, weights = ex.tilewright_attention(_Module(), q, k, v, mask, scaling=0.3)
    assert weights is None and out.shape == (B, Sq, H, D)
    ref = _reference(q, k, v, allowed, 0.3)
    valid = allowed.any(-1)  # query rows of padding tokens see no key: their output carries no meaning
    err = (out.double() - ref).abs()[valid].max() / ref[valid].abs().max()
    assert err < 1e-2, err


def test_mask_refusals(ex):
    B, H, S, D = 2, 2, 8, 16
    q = torch.randn(B, H, S, D, dtype=torch.bfloat16)
    k, v = torch.randn_like(q), torch.randn_like(q)
    right = _causal(B, S, S, [0, 0], [S, S]) & (torch.arange(S) < torch.tensor([[5], [8]]))[:, None, :]
    with pytest.raises(ArgumentError, match="attention_mask.*left padding"):
        ex.tilewright_attention(_Module(), q, k, v, right[:, None])
    holes = _causal(B, S, S, [0, 0], [S, S])
    holes[:, :, 3] = False
    with pytest.raises(ArgumentError, match="attention_mask"):
        ex.tilewright_attention(_Module(), q, k, v, holes[:, None])
    with pytest.raises(ArgumentError, match="dropout"):
        ex.tilewright_attention(_Module(), q, k, v, None, dropout=0.1)
    with pytest.raises(ArgumentError, match="output_attentions"):
        ex.tilewright_attention(_Module(), q, k, v, None, output_attentions=True)
    with pytest.raises(ArgumentError, match="sliding_window"):
        ex.tilewright_attention(_Module(), q, k, v, None, sliding_window=4)
    with pytest.raises(ArgumentError, match="dtype"):  # ops.attention's own check: fp16/bf16 only
        ex.tilewright_attention(_Module(), q.float(), k.float(), v.float(), None)


def test_model_right_padding_is_refused(ex):
    model = ex.build_model("tiny", torch.bfloat16, "cpu")
    model.set_attn_implementation(ex.NAME)
    ids = torch.randint(0, model.config.vocab_size, (2, 10))
    mask = torch.ones(2, 10, dtype=torch.long)
    mask[0, 7:] = 0
    with torch.no_grad(), pytest.raises(ArgumentError, match="left"):
        model(ids, attention_mask=mask)


def test_static_cache_logits(ex):
    from transformers import DynamicCache, StaticCache

    model = ex.build_model("tiny", torch.bfloat16, "cpu", seed=3)
    ref = copy.deepcopy(model).float()
    ref.set_attn_implementation("eager")
    model.set_attn_implementation(ex.NAME)
    ids = torch.randint(0, model.config.vocab_size, (2, 10))
    nxt = torch.randint(0, model.config.vocab_size, (2, 1))
    with torch.no_grad():
        r1 = ref(ids, past_key_values=DynamicCache(config=ref.config), use_cache=True)
        r2 = ref(nxt, past_key_values=r1.past_key_values, use_cache=True).logits
        cache = StaticCache(config=model.config, max_cache_len=32)
        g1 = model(ids, past_key_values=cache, use_cache=True).logits
        g2 = model(nxt, past_key_values=cache, use_cache=True).logits
    assert ex._rel_err(g1, r1.logits) < 3e-2 and ex._rel_err(g2, r2) < 3e-2


def test_check_sees_a_wrong_attention(ex, monkeypatch):
    """The logits check of the example fails when the attention is wrong (here: a halved scale)."""
    model = ex.build_model("tiny", torch.bfloat16, "cpu")
    good = ex.check_logits(model, 2, 12, left_pad=4)
    attention = ex.ops.attention
    monkeypatch.setattr(ex.ops, "attention", lambda *a, **kw: attention(*a, **{**kw, "scale": kw["scale"] / 2}))
    bad = ex.check_logits(model, 2, 12, left_pad=4)
    assert good[ex.NAME] < 3e-2 and bad[ex.NAME] > 0.1, (good, bad)
    assert bad["sdpa"] == good["sdpa"]


def test_example_end_to_end_on_cpu(ex, capsys):
    res = ex.main(["--device", "cpu", "--size", "tiny", "--repeat", "1", "--decode", "3"])
    out = capsys.readouterr().out
    assert "| tilewright |" in out and "| sdpa |" in out and "time to first token" in out
    assert res["errors"][ex.NAME] < 3e-2 and res["errors_padded"][ex.NAME] < 3e-2
    ttft, tps, tokens = res["results"][ex.NAME]
    assert ttft > 0 and tps > 0 and tokens.shape == (2, 3)


def test_generate_with_left_padding(ex):
    """generate() pads a batch on the left and passes the mask at every step: the varlen path."""
    model = ex.build_model("tiny", torch.bfloat16, "cpu")
    model.set_attn_implementation(ex.NAME)
    g = torch.Generator().manual_seed(4)
    ids = torch.randint(1, model.config.vocab_size, (2, 9), generator=g)
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[1, :4] = 0
    ids[1, :4] = 0
    calls = []
    attention = ex.ops.attention

    def spy(*a, **kw):
        calls.append("cu_seqlens_k" in kw)
        return attention(*a, **kw)

    ex.ops.attention = spy
    try:
        out = model.generate(ids, attention_mask=mask, max_new_tokens=3, do_sample=False, pad_token_id=0)
    finally:
        ex.ops.attention = attention
    assert out.shape == (2, 12) and calls and all(calls)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_example_on_the_gpu():
    """The GPU run of the example (a ~1B model, shorter prompt): logits match, both rows timed."""
    spec = importlib.util.spec_from_file_location("llama_dropin_gpu", os.path.join(ROOT, "examples", "llama_dropin.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    res = mod.main(["--device", "cuda", "--size", "small", "--prompt", "512", "--decode", "16", "--repeat", "1"])
    assert res["errors"][mod.NAME] < 5e-2 and res["errors_padded"][mod.NAME] < 5e-2
    assert all(r[0] > 0 and r[1] > 0 for r in res["results"].values())
