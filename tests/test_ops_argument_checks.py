"""Argument checks of ops.layer_norm, ops.rms_norm (with residual), ops.softmax and ops.attention:
bad input is an ArgumentError naming the argument (dtype, shape, device, head dim, values), never
another exception or a wrong answer; non-contiguous inputs are accepted and computed correctly
(against float64).  CPU tensors run in the tile interpreter."""

import math

import pytest

torch = pytest.importorskip("torch")

from tilewright import ops  # noqa: E402
from tilewright.errors import ArgumentError  # noqa: E402

bf = torch.bfloat16


def _t(*shape, dtype=bf, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


X, W, B = _t(4, 64), _t(64, seed=1), _t(64, seed=2)
Q, K = _t(1, 4, 8, 64, seed=3), _t(1, 2, 8, 64, seed=4)
I32 = torch.int32


@pytest.mark.parametrize("call, message", [
    # layer_norm
    (lambda: ops.layer_norm(X.int(), W, B), "x has dtype torch.int32"),
    (lambda: ops.layer_norm(X.double(), W, B), "x has dtype torch.float64"),
    (lambda: ops.layer_norm([1.0], W, B), "x must be a torch.Tensor"),
    (lambda: ops.layer_norm(torch.tensor(1.0, dtype=bf), W[:1], B[:1]), "x must have at least one dimension"),
    (lambda: ops.layer_norm(X, W.half(), B), "weight has dtype torch.float16"),
    (lambda: ops.layer_norm(X, W[None], B), "weight must have 1 dimensions"),
    (lambda: ops.layer_norm(X, W, B[:32]), "bias has 32 elements"),
    (lambda: ops.layer_norm(X, W, None), "bias must be a torch.Tensor"),
    (lambda: ops.layer_norm(X, W, B, 0.0), "eps must be positive"),
    (lambda: ops.layer_norm(X, W, B, float("nan")), "eps must be positive"),
    (lambda: ops.layer_norm(X, W, B, "1e-5"), "eps must be positive"),
    (lambda: ops.layer_norm(X, W.to("meta"), B), "weight on meta"),
    (lambda: ops.layer_norm(X.to("meta"), W.to("meta"), B.to("meta")), "tensors on meta are not supported"),
    # rms_norm, with and without the fused residual
    (lambda: ops.rms_norm(X, W[:3]), "weight has 3 elements"),
    (lambda: ops.rms_norm(X, None), "weight must be a torch.Tensor"),
    (lambda: ops.rms_norm(X, W, -1.0), "eps must be positive"),
    (lambda: ops.rms_norm(X, W, float("inf")), "eps must be positive"),
    (lambda: ops.rms_norm(X, W, residual=X[:2]), "residual has shape"),
    (lambda: ops.rms_norm(X, W, residual=X.half()), "residual has dtype torch.float16"),
    (lambda: ops.rms_norm(X, W, residual=[1.0]), "residual must be a torch.Tensor"),
    (lambda: ops.rms_norm(X, W, residual=X.to("meta")), "residual on meta"),
    # softmax
    (lambda: ops.softmax(X, 0), "dim=0"),
    (lambda: ops.softmax(X.long()), "x has dtype torch.int64"),
    (lambda: ops.softmax([1.0]), "x must be a torch.Tensor"),
    (lambda: ops.softmax(X.to("meta")), "tensors on meta are not supported"),
    # attention: dtype, shapes, head dim, devices, values
    (lambda: ops.attention(Q.float(), K.float(), K.float()), "q has dtype torch.float32"),
    (lambda: ops.attention(Q, K.half(), K), "one dtype"),
    (lambda: ops.attention([1.0], K, K), "q must be a torch.Tensor"),
    (lambda: ops.attention(Q[..., :40], K[..., :40], K[..., :40]), "head dim 40 is not supported"),
    (lambda: ops.attention(*(_t(1, 1, 4, 512) for _ in range(3))), "head dim 512 is not supported"),
    (lambda: ops.attention(Q[..., :8], K[..., :8], K[..., :8]), "head dim 8 is not supported"),
    (lambda: ops.attention(Q, K[..., :32], K[..., :32]), "q has head dim 64 and k 32"),
    (lambda: ops.attention(Q, K, K[:, :, :4]), "k has shape .* and v"),
    (lambda: ops.attention(Q, _t(1, 3, 8, 64), _t(1, 3, 8, 64)), "3 heads, which must divide q's 4"),
    (lambda: ops.attention(Q[0], K[0], K[0]), r"q must be \(batch, heads, seq, dim\)"),
    (lambda: ops.attention(Q, torch.cat([K, K]), torch.cat([K, K])), "q has batch 1 and k 2"),
    (lambda: ops.attention(Q, K.to("meta"), K), "k on meta"),
    (lambda: ops.attention(Q, K, K, causal=1), "causal must be a bool"),
    (lambda: ops.attention(Q, K, K, scale=-1.0), "scale must be a positive finite number"),
    (lambda: ops.attention(Q, K, K, scale=math.inf), "scale must be a positive finite number"),
    (lambda: ops.attention(Q, K, K, num_splits=0), "num_splits"),
    (lambda: ops.attention(Q, K, K, cache_seqlens=torch.tensor([3])), "cache_seqlens must be a 1-D torch.int32"),
    (lambda: ops.attention(Q, K, K, cache_seqlens=torch.tensor([3, 3], dtype=I32)), "cache_seqlens has 2 elements"),
    (lambda: ops.attention(Q, K, K, cache_seqlens=torch.tensor([30], dtype=I32)), "cache_seqlens must lie in 0..8"),
    (lambda: ops.attention(Q, K, K, cache_seqlens=torch.tensor([-1], dtype=I32)), "cache_seqlens must lie in 0..8"),
    (lambda: ops.attention(Q, K, K, max_seqlen_q=8), "max_seqlen_q is for variable-length"),
    (lambda: ops.attention(Q[0].transpose(0, 1), K[0].transpose(0, 1), K[0].transpose(0, 1),
                           cu_seqlens_q=torch.tensor([0, 8], dtype=I32)), "needs both cu_seqlens_q and cu_seqlens_k"),
    (lambda: ops.attention(Q[0].transpose(0, 1), K[0].transpose(0, 1), K[0].transpose(0, 1),
                           cu_seqlens_q=torch.tensor([0, 9], dtype=I32), cu_seqlens_k=torch.tensor([0, 8], dtype=I32)),
     "cu_seqlens_q must start at 0, never decrease and end at most at 8"),
    (lambda: ops.attention(Q[0].transpose(0, 1), K[0].transpose(0, 1), K[0].transpose(0, 1),
                           cu_seqlens_q=torch.tensor([0, 8], dtype=I32), cu_seqlens_k=torch.tensor([0, 4, 8], dtype=I32)),
     "cu_seqlens_k has 3 elements"),
])
def test_bad_arguments_are_argument_errors(call, message):
    with pytest.raises(ArgumentError, match=message):
        call()


def _rel(x, ref):
    return float((x.double() - ref).abs().max() / ref.abs().max())


def test_norms_and_softmax_read_non_contiguous_inputs():
    big = _t(64, 96, seed=5)
    x = big[:, ::2].t()  # (48, 64): strided and transposed
    assert not x.is_contiguous()
    w, b = _t(128, seed=6)[::2], _t(128, seed=7)[::2]
    r = _t(64, 48, seed=8).t()
    xd, wd, bd, rd = x.double(), w.double(), b.double(), r.double()
    mu = xd.mean(-1, keepdim=True)
    ln = (xd - mu) / torch.sqrt(((xd - mu) ** 2).mean(-1, keepdim=True) + 1e-5) * wd + bd
    assert _rel(ops.layer_norm(x, w, b, 1e-5), ln) < 2e-2
    s = xd + rd
    y, res = ops.rms_norm(x, w, 1e-6, residual=r)
    assert _rel(y, s / torch.sqrt((s * s).mean(-1, keepdim=True) + 1e-6) * wd) < 2e-2
    assert _rel(res, s) < 1e-2
    assert _rel(ops.softmax(x), torch.softmax(xd, -1)) < 2e-2
    x3 = _t(2, 4, 96, seed=9)[..., :64]  # 3-D, last dimension sliced
    out = ops.layer_norm(x3, w, b, 1e-5)
    assert out.shape == x3.shape
    x3d = x3.double()
    m3 = x3d.mean(-1, keepdim=True)
    assert _rel(out, (x3d - m3) / torch.sqrt(((x3d - m3) ** 2).mean(-1, keepdim=True) + 1e-5) * wd + bd) < 2e-2


def test_attention_reads_non_contiguous_inputs():
    q = _t(2, 9, 4, 32, seed=10).transpose(1, 2)  # flash-attn layout seen as (B, H, S, D)
    k = _t(2, 2, 24, 32, seed=11)[:, :, ::2]  # every other key: strided
    v = _t(2, 2, 12, 64, seed=12)[..., 16:48]  # a slice of a wider head dim
    assert not (q.is_contiguous() or k.is_contiguous() or v.is_contiguous())
    out = ops.attention(q, k, v, causal=True)
    kd, vd = (t.double().repeat_interleave(2, 1) for t in (k, v))
    s = q.double() @ kd.transpose(-1, -2) / math.sqrt(32)
    allowed = torch.arange(12)[None, :] <= torch.arange(9)[:, None] + 12 - 9  # causal, aligned at the ends
    ref = torch.softmax(s.masked_fill(~allowed, -math.inf), -1) @ vd
    assert out.shape == (2, 4, 9, 32)
    assert _rel(out, ref) < 2e-2
