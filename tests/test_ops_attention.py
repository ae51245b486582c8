"""tilewright.ops.attention on CPU tensors (the tile interpreter runs the kernels the GPU runs):
dense MHA/GQA/MQA, causal with separate query and key lengths, ragged lengths, head dims, fp16/bf16,
log-sum-exp, variable-length batches, a padded KV cache, split-KV decoding, argument errors and
torch.compile capture -- against a float64 reference, with every output allocation poisoned (NaN)."""

from __future__ import annotations

import importlib
import math

import pytest

torch = pytest.importorskip("torch")

import tilewright  # noqa: E402
from tilewright import ops  # noqa: E402

dispatch = importlib.import_module("tilewright.ops.attention_dispatch")


class _PoisonedTorch:
    """torch, but ``empty`` returns NaN-filled tensors: a row the kernels fail to write shows."""

    def __getattr__(self, name):
        return getattr(torch, name)

    @staticmethod
    def empty(*args, **kwargs):
        t = torch.empty(*args, **kwargs)
        return t.fill_(math.nan) if t.is_floating_point() else t.fill_(-7)


@pytest.fixture(autouse=True)
def _poison(monkeypatch):
    monkeypatch.setattr(dispatch, "_torch", lambda: _PoisonedTorch())


def reference(q, k, v, causal, scale=None, kv_len=None):
    """float64 attention for one dense batch: q (B, H, Sq, D), k/v (B, Hkv, Sk, D); ``kv_len``
    per batch (a padded cache).  Rows that see no key: output 0, lse -inf."""
    q, k, v = q.double(), k.double(), v.double()
    B, H, Sq, D = q.shape
    Sk, g = k.shape[2], H // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    s = q @ k.transpose(-1, -2) * (scale if scale is not None else 1 / math.sqrt(D))
    lens = kv_len if kv_len is not None else [Sk] * B
    mask = torch.zeros(B, 1, Sq, Sk, dtype=torch.bool)
    for b, n in enumerate(lens):
        i, j = torch.arange(Sq)[:, None], torch.arange(Sk)[None]
        mask[b, 0] = (j >= n) | ((j > i + n - Sq) if causal else False)
    s = s.masked_fill(mask, -math.inf)
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)
    return p @ v, lse


def _close(got, want, tol=3e-3):
    assert not got.isnan().any(), "NaN in the output (an unwritten or poisoned element)"
    err = (got.double() - want).abs().max().item()
    assert err <= tol * max(1.0, want.abs().max().item()), err


def _close_lse(got, want):
    assert got.dtype == torch.float32
    finite = torch.isfinite(want)
    assert torch.equal(torch.isfinite(got), finite) and (got[~finite] == -math.inf).all()
    if finite.any():
        err = (got.double()[finite] - want[finite]).abs().max().item()
        assert err <= 1e-4 * max(1.0, want[finite].abs().max().item()), err


def _rand(g, *shape, dtype=torch.float16):
    return torch.randn(*shape, generator=g).to(dtype)


@pytest.mark.parametrize("B, H, Hkv, Sq, Sk, D, causal, dtype", [
    (2, 2, 2, 37, 53, 64, False, torch.float16),      # MHA, ragged lengths
    (1, 4, 2, 70, 70, 128, True, torch.bfloat16),     # GQA, causal square
    (2, 4, 1, 45, 30, 32, True, torch.float16),       # MQA, more queries than keys: first rows see nothing
    (1, 2, 2, 20, 77, 80, True, torch.float16),       # queries aligned to the end of longer keys, dim 80
    (1, 2, 1, 17, 33, 256, False, torch.bfloat16),    # dim 256
])
def test_dense(B, H, Hkv, Sq, Sk, D, causal, dtype):
    g = torch.Generator().manual_seed(B * 1000 + Sq * 10 + D)
    q, k, v = _rand(g, B, H, Sq, D, dtype=dtype), _rand(g, B, Hkv, Sk, D, dtype=dtype), \
        _rand(g, B, Hkv, Sk, D, dtype=dtype)
    out, lse = ops.attention(q, k, v, causal=causal, return_lse=True)
    want, want_lse = reference(q, k, v, causal)
    assert out.shape == q.shape and out.dtype == dtype and lse.shape == (B, H, Sq)
    _close(out, want, 3e-3 if dtype == torch.float16 else 1e-2)
    _close_lse(lse, want_lse)
    if Sq > Sk and causal:
        assert (out[:, :, :Sq - Sk] == 0).all() and (lse[:, :, :Sq - Sk] == -math.inf).all()


def test_flash_attn_layout_read_in_place_and_scale():
    g = torch.Generator().manual_seed(11)
    q, k, v = (_rand(g, 2, 29, 4, 64) for _ in range(3))  # (batch, seq, heads, dim)
    out = ops.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), scale=0.3)
    want, _ = reference(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), False, scale=0.3)
    _close(out, want)
    compiled = len(ops.dispatch._kernels)
    out = ops.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), scale=0.05)
    _close(out, reference(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), False, scale=0.05)[0])
    assert len(ops.dispatch._kernels) == compiled  # the scale is a kernel argument: no new compile


def _varlen_case(g, lens_q, lens_k, H, Hkv, D):
    cu_q = torch.tensor([0] + list(torch.tensor(lens_q).cumsum(0)), dtype=torch.int32)
    cu_k = torch.tensor([0] + list(torch.tensor(lens_k).cumsum(0)), dtype=torch.int32)
    q = _rand(g, int(cu_q[-1]), H, D)
    k, v = _rand(g, int(cu_k[-1]), Hkv, D), _rand(g, int(cu_k[-1]), Hkv, D)
    return q, k, v, cu_q, cu_k


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("num_splits", [None, 3])
def test_varlen(causal, num_splits):
    g = torch.Generator().manual_seed(12 + causal)
    lens_q, lens_k = [5, 0, 33, 17, 3], [9, 4, 20, 40, 0]
    q, k, v, cu_q, cu_k = _varlen_case(g, lens_q, lens_k, 4, 2, 64)
    out, lse = ops.attention(q, k, v, causal=causal, return_lse=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                             num_splits=num_splits)
    assert out.shape == q.shape and lse.shape == (4, q.shape[0])
    for b in range(len(lens_q)):
        qs, ks = slice(int(cu_q[b]), int(cu_q[b + 1])), slice(int(cu_k[b]), int(cu_k[b + 1]))
        if lens_q[b] == 0:
            continue
        want, want_lse = reference(q[qs].transpose(0, 1)[None], k[ks].transpose(0, 1)[None],
                                   v[ks].transpose(0, 1)[None], causal)
        _close(out[qs], want[0].transpose(0, 1))
        _close_lse(lse[:, qs], want_lse[0])


def test_varlen_max_seqlen_given():
    g = torch.Generator().manual_seed(13)
    q, k, v, cu_q, cu_k = _varlen_case(g, [7, 12], [7, 12], 2, 2, 32)
    out = ops.attention(q, k, v, causal=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=12)
    for b in range(2):
        qs = slice(int(cu_q[b]), int(cu_q[b + 1]))
        want, _ = reference(*(t[qs].transpose(0, 1)[None] for t in (q, k, v)), True)
        _close(out[qs], want[0].transpose(0, 1))


@pytest.mark.parametrize("H, Hkv, num_splits", [(8, 2, 4), (4, 4, None), (4, 1, 1)])
def test_decode_one_token_split_kv(H, Hkv, num_splits):
    """One query token over a long KV: split-KV partials merged by their log-sum-exps; with GQA the
    group's heads share one kv head's block."""
    g = torch.Generator().manual_seed(H * 10 + Hkv)
    B, Sk, D = 2, 700, 64
    q, k, v = _rand(g, B, H, 1, D), _rand(g, B, Hkv, Sk, D), _rand(g, B, Hkv, Sk, D)
    out, lse = ops.attention(q, k, v, causal=True, return_lse=True, num_splits=num_splits)
    want, want_lse = reference(q, k, v, True)
    _close(out, want)
    _close_lse(lse, want_lse)


def test_default_heuristic_splits_long_decode(monkeypatch):
    seen = []
    real = dispatch._splits
    monkeypatch.setattr(dispatch, "_splits", lambda *a: seen.append(real(*a)) or seen[-1])
    g = torch.Generator().manual_seed(14)
    q, k, v = _rand(g, 1, 2, 1, 64), _rand(g, 1, 2, 900, 64), _rand(g, 1, 2, 900, 64)
    _close(ops.attention(q, k, v), reference(q, k, v, False)[0])
    assert seen and seen[-1] > 1


@pytest.mark.parametrize("Sq, causal, num_splits", [(1, False, 3), (3, True, 2), (3, True, 1)])
def test_kv_cache(Sq, causal, num_splits):
    """A padded cache: batch b uses its first cache_seqlens[b] keys (causal aligned to that end)."""
    g = torch.Generator().manual_seed(15 + Sq)
    B, H, Hkv, Smax, D = 3, 4, 2, 150, 64
    q, k, v = _rand(g, B, H, Sq, D), _rand(g, B, Hkv, Smax, D), _rand(g, B, Hkv, Smax, D)
    lens = torch.tensor([150, 37, 2], dtype=torch.int32)
    out, lse = ops.attention(q, k, v, causal=causal, return_lse=True, cache_seqlens=lens, num_splits=num_splits)
    want, want_lse = reference(q, k, v, causal, kv_len=lens.tolist())
    _close(out, want)
    _close_lse(lse, want_lse)


def test_empty_inputs():
    q = torch.randn(2, 2, 0, 64).half()
    k = torch.randn(2, 2, 5, 64).half()
    assert ops.attention(q, k, k).shape == (2, 2, 0, 64)
    out, lse = ops.attention(torch.randn(1, 2, 3, 64).half(), k[:1, :, :0], k[:1, :, :0], return_lse=True)
    assert (out == 0).all() and (lse == -math.inf).all()


def _qkv(shape_q=(1, 4, 8, 64), shape_k=(1, 2, 8, 64), dtype=torch.float16):
    return torch.randn(shape_q).to(dtype), torch.randn(shape_k).to(dtype), torch.randn(shape_k).to(dtype)


_CU = torch.tensor([0, 3, 8], dtype=torch.int32)


@pytest.mark.parametrize("call, message", [
    (lambda: ops.attention(*_qkv(dtype=torch.float32)), "q has dtype torch.float32"),
    (lambda: ops.attention(torch.randn(4, 8, 64).half(), *_qkv()[1:]), r"q must be \(batch, heads, seq, dim\)"),
    (lambda: ops.attention(*_qkv(shape_k=(1, 3, 8, 64))), "3 heads, which must divide q's 4"),
    (lambda: ops.attention(*_qkv(shape_k=(2, 2, 8, 64))), "q has batch 1 and k 2"),
    (lambda: ops.attention(*_qkv((1, 4, 8, 40), (1, 2, 8, 40))), "head dim 40 is not supported"),
    (lambda: ops.attention(*_qkv((1, 4, 8, 64), (1, 2, 8, 32))), "q has head dim 64 and k 32"),
    (lambda: ops.attention(_qkv()[0], _qkv()[1], torch.randn(1, 2, 9, 64).half()), "k has shape"),
    (lambda: ops.attention(_qkv()[0], _qkv()[1].bfloat16(), _qkv()[2].bfloat16()), "one dtype"),
    (lambda: ops.attention(*_qkv(), causal=1), "causal must be a bool"),
    (lambda: ops.attention(*_qkv(), scale=-1.0), "scale must be a positive"),
    (lambda: ops.attention(*_qkv(), num_splits=0), "num_splits must be"),
    (lambda: ops.attention(*_qkv(), max_seqlen_q=8), "max_seqlen_q is for variable-length"),
    (lambda: ops.attention(*_qkv(), cache_seqlens=torch.tensor([3, 4], dtype=torch.int32)),
     "cache_seqlens has 2 elements; expected 1"),
    (lambda: ops.attention(*_qkv(), cache_seqlens=torch.tensor([9], dtype=torch.int32)), "cache_seqlens must lie"),
    (lambda: ops.attention(*_qkv(), cache_seqlens=torch.tensor([3])), "cache_seqlens must be a 1-D torch.int32"),
    (lambda: ops.attention(*(t[0].transpose(0, 1) for t in _qkv()), cu_seqlens_q=_CU), "needs both"),
    (lambda: ops.attention(*(t[0].transpose(0, 1) for t in _qkv()), cu_seqlens_q=_CU, cu_seqlens_k=_CU[:2]),
     "cu_seqlens_k has 2 elements; expected 3"),
    (lambda: ops.attention(*(t[0].transpose(0, 1) for t in _qkv()), cu_seqlens_q=_CU.flip(0), cu_seqlens_k=_CU),
     "cu_seqlens_q must start at 0"),
    (lambda: ops.attention(*(t[0].transpose(0, 1) for t in _qkv()), cu_seqlens_q=_CU * 2, cu_seqlens_k=_CU),
     "end at most at 8"),
    (lambda: ops.attention(*_qkv(), cu_seqlens_q=_CU, cu_seqlens_k=_CU), r"q must be \(total, heads, dim\)"),
])
def test_argument_errors_name_the_argument(call, message):
    with pytest.raises(tilewright.ArgumentError, match=message):
        call()


def test_torch_compile_captures_attention_without_graph_breaks():
    g = torch.Generator().manual_seed(16)
    q, k, v = _rand(g, 1, 4, 19, 64), _rand(g, 1, 2, 19, 64), _rand(g, 1, 2, 19, 64)

    def layer(q, k, v):
        out, lse = ops.attention(q, k, v, causal=True, return_lse=True)
        return out.float() * 2, lse

    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")  # fullgraph: a break would raise
    out, lse = compiled(q, k, v)
    want, want_lse = reference(q, k, v, True)
    _close(out / 2, want)
    _close_lse(lse, want_lse)
    explanation = torch._dynamo.explain(layer)(q, k, v)
    assert explanation.graph_break_count == 0 and explanation.graph_count == 1


def test_broadcast_kv_heads_by_expand():
    g = torch.Generator().manual_seed(17)
    q, k, v = _rand(g, 1, 4, 9, 32), _rand(g, 1, 1, 12, 32), _rand(g, 1, 1, 12, 32)
    out = ops.attention(q, k.expand(1, 2, 12, 32), v.expand(1, 2, 12, 32))
    _close(out, reference(q, k, v, False)[0])


def test_no_backward_is_an_error_not_a_silent_detach():
    g = torch.Generator().manual_seed(18)
    q = _rand(g, 1, 2, 8, 32).requires_grad_()
    k, v = _rand(g, 1, 2, 8, 32), _rand(g, 1, 2, 8, 32)
    out = ops.attention(q, k, v)
    _close(out.detach(), reference(q.detach(), k, v, False)[0])
    with pytest.raises(RuntimeError):
        out.float().sum().backward()


@pytest.mark.parametrize("target, case", [
    ("cuda -arch=sm_90a", "dense"),      # the H200's lowering (mma.sync, cp.async ring)
    ("hip -arch=gfx942", "decode"),      # MFMA, wave64: split-KV and the combine kernel
    ("hip -arch=gfx1100", "varlen"),     # WMMA with a 64 KiB LDS: the configuration shrinks to fit
])
def test_gpu_lowering_on_the_cpu_emulator(monkeypatch, target, case):
    """The per-thread code compiled for each GPU target, run by the CPU emulator against float64."""
    monkeypatch.setattr(dispatch, "_kernel", lambda key, build, _target, pass_configs=None: tilewright.compile(
        build(), target=target, execution_backend="emulator", pass_configs=pass_configs))
    monkeypatch.setattr(dispatch, "_shared_bytes", lambda t: 65536 if "hip" in target else 232448)
    g = torch.Generator().manual_seed(19)
    if case == "dense":
        q, k, v = _rand(g, 1, 2, 20, 64), _rand(g, 1, 1, 37, 64), _rand(g, 1, 1, 37, 64)
        out, lse = ops.attention(q, k, v, causal=True, return_lse=True)
        want, want_lse = reference(q, k, v, True)
        _close(out, want)
        _close_lse(lse, want_lse)
    elif case == "decode":
        q, k, v = _rand(g, 1, 4, 1, 64), _rand(g, 1, 2, 150, 64), _rand(g, 1, 2, 150, 64)
        out, lse = ops.attention(q, k, v, return_lse=True, num_splits=2)
        want, want_lse = reference(q, k, v, False)
        _close(out, want)
        _close_lse(lse, want_lse)
    else:
        q, k, v, cu_q, cu_k = _varlen_case(g, [5, 20], [9, 30], 2, 1, 128)
        out = ops.attention(q, k, v, causal=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
        for b in range(2):
            qs, ks = slice(int(cu_q[b]), int(cu_q[b + 1])), slice(int(cu_k[b]), int(cu_k[b + 1]))
            want, _ = reference(q[qs].transpose(0, 1)[None], k[ks].transpose(0, 1)[None],
                                v[ks].transpose(0, 1)[None], True)
            _close(out[qs], want[0].transpose(0, 1))


def test_mixed_layouts_and_copied_views():
    """q as a (b, s, h, d) view, k contiguous (b, h, s, d), v a non-contiguous slice (copied)."""
    g = torch.Generator().manual_seed(20)
    q = _rand(g, 2, 23, 4, 64).transpose(1, 2)
    k = _rand(g, 2, 2, 31, 64)
    v = _rand(g, 2, 2, 31, 128)[..., ::2]
    out, lse = ops.attention(q, k, v, causal=True, return_lse=True)
    want, want_lse = reference(q, k, v, True)
    _close(out, want)
    _close_lse(lse, want_lse)


def test_symbolic_innermost_stride_is_stored_element_by_element():
    """Regression (lower_parallel's vector planner): a T.Tensor whose innermost stride is a
    T.dynamic name crashed the lowering for AMD targets ("l_ss != 1 has no truth value")."""
    import numpy as np

    from tilewright import language as T

    n, s = T.dynamic("n"), T.dynamic("s")

    @T.prim_func
    def scatter(X: T.Tensor((64,), "float32"), Y: T.Tensor((n,), "float32", strides=(s,))):
        with T.Kernel(1, threads=64) as _bx:
            x = T.alloc_fragment((64,), "float32")
            T.copy(X[0], x)
            for i in T.Parallel(64):
                if i < n:
                    Y[i] = x[i] * 2

    x = np.random.default_rng(0).standard_normal(64).astype(np.float32)
    y = np.full(192, np.nan, dtype=np.float32)
    tilewright.compile(scatter, target="hip -arch=gfx942", execution_backend="emulator")(x, y[::3])
    np.testing.assert_array_equal(y[::3], x * 2)
    assert np.isnan(y[1::3]).all() and np.isnan(y[2::3]).all()
