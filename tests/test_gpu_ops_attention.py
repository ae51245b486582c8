"""tilewright.ops.attention on a CUDA GPU at realistic shapes, against float64 (and SDPA where its
semantics match): dense MHA/GQA/MQA, causal, head dims 64/128/256, fp16/bf16, ragged lengths,
LSE, varlen, a padded KV cache and split-KV decoding over long KV.  Skipped without a GPU."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from shared_gpu_attention import dense_reference as reference  # noqa: E402
from shared_gpu_attention import rand_cuda as _rand  # noqa: E402

from tilewright import ops  # noqa: E402


def _rel(got, want):
    return ((got.double() - want).abs().max() / want.abs().max().clamp_min(1e-6)).item()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("B, H, Hkv, Sq, Sk, D", [
    (2, 16, 16, 1024, 1024, 128),
    (1, 16, 4, 2048, 2048, 64),
    (1, 8, 1, 1000, 1337, 128),   # MQA, ragged, Sq < Sk
    (2, 8, 2, 517, 517, 256),
])
@pytest.mark.parametrize("causal", [False, True])
def test_dense_against_float64(B, H, Hkv, Sq, Sk, D, causal, dtype):
    torch.manual_seed(B * H + Sq + D)
    q, k, v = _rand(B, H, Sq, D, dtype=dtype), _rand(B, Hkv, Sk, D, dtype=dtype), _rand(B, Hkv, Sk, D, dtype=dtype)
    out, lse = ops.attention(q, k, v, causal=causal, return_lse=True)
    want, want_lse = reference(q, k, v, causal)
    assert not out.isnan().any()
    assert _rel(out, want) < 3e-3 * (4 if dtype == torch.bfloat16 else 1)
    assert (lse.double() - want_lse).abs().max().item() < 1e-3


def test_matches_sdpa_on_its_shapes():
    torch.manual_seed(1)
    q, k, v = (_rand(4, 16, 4096, 128, dtype=torch.bfloat16) for _ in range(3))
    for causal in (False, True):
        got = ops.attention(q, k, v, causal=causal)
        want = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        assert (got.float() - want.float()).abs().max().item() < 2e-2
    # flash-attn's (batch, seq, heads, dim) tensors, read in place through transposed views
    qb, kb, vb = (_rand(2, 2048, 16, 128, dtype=torch.float16) for _ in range(3))
    got = ops.attention(qb.transpose(1, 2), kb.transpose(1, 2), vb.transpose(1, 2), causal=True)
    want, _ = reference(qb.transpose(1, 2), kb.transpose(1, 2), vb.transpose(1, 2), True)
    assert _rel(got, want) < 3e-3


@pytest.mark.parametrize("H, Hkv, Sk", [(32, 8, 4096), (32, 32, 16384), (16, 1, 65536)])
def test_decode_split_kv(H, Hkv, Sk):
    torch.manual_seed(Sk)
    q, k, v = _rand(4, H, 1, 128, dtype=torch.float16), _rand(4, Hkv, Sk, 128, dtype=torch.float16), \
        _rand(4, Hkv, Sk, 128, dtype=torch.float16)
    out, lse = ops.attention(q, k, v, causal=True, return_lse=True)
    want, want_lse = reference(q, k, v, True)
    assert _rel(out, want) < 3e-3
    assert (lse.double() - want_lse).abs().max().item() < 1e-3


def test_kv_cache_and_varlen():
    torch.manual_seed(2)
    q, k, v = _rand(3, 16, 1, 128, dtype=torch.bfloat16), _rand(3, 4, 8192, 128, dtype=torch.bfloat16), \
        _rand(3, 4, 8192, 128, dtype=torch.bfloat16)
    lens = torch.tensor([8192, 1000, 17], dtype=torch.int32, device="cuda")
    out = ops.attention(q, k, v, cache_seqlens=lens)
    assert _rel(out, reference(q, k, v, False, kv_len=lens.tolist())[0]) < 1e-2

    lens_q = [300, 1, 2048, 77]
    cu = torch.tensor([0] + list(torch.tensor(lens_q).cumsum(0)), dtype=torch.int32, device="cuda")
    qp, kp, vp = (_rand(int(cu[-1]), 8, 128, dtype=torch.float16) for _ in range(3))
    out = ops.attention(qp, kp, vp, causal=True, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=max(lens_q))
    for b in range(len(lens_q)):
        s = slice(int(cu[b]), int(cu[b + 1]))
        want, _ = reference(*(t[s].transpose(0, 1)[None] for t in (qp, kp, vp)), True)
        assert _rel(out[s], want[0].transpose(0, 1)) < 3e-3


@pytest.mark.parametrize("Sk", [512, 8192])
def test_repeat_calls_of_one_signature_read_their_own_tensors(Sk):
    """A repeat call reuses the signature's plan and passes only new pointers (BoundKernel): each
    call must read its own inputs, also a misaligned view (copied) between aligned ones."""
    for trial in range(3):
        q = _rand(2, 16, 1, 128, dtype=torch.float16)
        kv = _rand(2, 4, Sk + 8, 128, dtype=torch.float16)
        k, v = kv[:, :, :Sk], _rand(2, 4, Sk, 128, dtype=torch.float16)
        if trial == 1:
            k = kv.view(-1)[8:8 + k.numel()].view(k.shape)  # off a 16-byte boundary
        out = ops.attention(q, k, v)
        want, _ = reference(q, k, v, False)
        assert _rel(out, want) < 3e-3, trial
