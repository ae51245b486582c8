"""What the GPU tests of ``ops.attention`` share (test_s7/s8/s9/s10_decode_gpu.py, test_gpu_ops_attention.py,
test_s8_attnp_gpu.py, test_s9_causal_gpu.py, test_s9_attnmain_gpu.py, test_s10_attn_gpu.py): the
flash-decoding tests' poisoned allocations, float64 reference, checks (a shape called three times) and
CUDA-graph replay; the dense float64 reference and the dense / packed checks of a candidate; the
persistent/lean tests' kernel recorder and candidate knobs.  Not a test file;
its importers skip before importing it where there is no GPU (only torch is needed to import it)."""

from __future__ import annotations

import importlib
import math

import pytest
import torch
from test_ops_attention import _PoisonedTorch as PoisonedTorch

from tilewright import ops

dispatch = importlib.import_module("tilewright.ops.attention_dispatch")
decode_kernels = importlib.import_module("tilewright.ops.decode_kernels")


# ---------------------------------------------------------------- flash decoding (ops/decode_kernels.py)
class DecodePoisonedTorch(PoisonedTorch):
    """test_ops_attention's poisoned torch, ``empty_like`` poisoned too (the pointer path's outputs)."""

    @staticmethod
    def empty_like(*args, **kwargs):
        t = torch.empty_like(*args, **kwargs)
        return t.fill_(math.nan) if t.is_floating_point() else t.fill_(-7)


@pytest.fixture(autouse=True)
def poisoned_decode(monkeypatch):
    """ops.attention's allocations poisoned (NaN, -7) for the importing module's tests; plans forgotten after."""
    monkeypatch.setattr(dispatch, "_torch", lambda: DecodePoisonedTorch())
    yield
    dispatch.forget_plans()


def decode_reference(q, k, v, kv_len=None):
    """float64 on the GPU, one sequence at a time."""
    B, H, _, D = q.shape
    g = H // k.shape[1]
    outs, lses = [], []
    for b in range(B):
        kb, vb = k[b].double().repeat_interleave(g, 0), v[b].double().repeat_interleave(g, 0)
        s = q[b].double() @ kb.transpose(-1, -2) / math.sqrt(D)
        if kv_len is not None:
            s[..., kv_len[b]:] = -math.inf
        lse = torch.logsumexp(s, -1)
        outs.append(torch.exp(s - lse[..., None]).nan_to_num(0.0) @ vb)
        lses.append(lse)
    return torch.stack(outs), torch.stack(lses)


def check_decode(out, lse, want, want_lse, dtype, counters=True):
    """``out``/``lse`` against the float64 ``want``/``want_lse`` (no NaN left, -inf LSE where no key);
    with ``counters``, every merge counter is back at zero as well."""
    assert not out.isnan().any()
    err = ((out.double() - want).abs().max() / want.abs().max().clamp_min(1e-6)).item()
    assert err < 3e-3 * (4 if dtype == torch.bfloat16 else 1), err
    finite = torch.isfinite(want_lse)
    assert torch.equal(torch.isfinite(lse), finite) and (lse[~finite] == -math.inf).all()
    assert (lse.double()[finite] - want_lse[finite]).abs().max().item() < 1e-3
    if counters:
        assert all(int(c.abs().sum()) == 0 for c in decode_kernels._counters.values()), "a merge counter left non-zero"


def check_repeat_calls(q, k, v, cache, splits, dtype, calls=3):
    """``ops.attention`` with the LSE ``calls`` times against the float64 reference, each checked (the first call
    plans and binds; the others launch from pointers)."""
    want, want_lse = decode_reference(q, k, v, None if cache is None else cache.tolist())
    for _ in range(calls):
        out, lse = ops.attention(q, k, v, return_lse=True, cache_seqlens=cache, num_splits=splits)
        torch.cuda.synchronize()
        check_decode(out, lse, want, want_lse, dtype)


def rand_cuda(*shape, dtype):
    return torch.randn(*shape, device="cuda", dtype=torch.float32).to(dtype)


def check_graph_replay(batch, counters=True, **kwargs):
    """``ops.attention`` (fp16, ``batch`` x 32 heads over 8 KV heads, d 128, KV 4k; ``kwargs`` passed on)
    captured in a CUDA graph after a warm-up call on a side stream, then replayed three times with new
    inputs copied in: each replay against float64 (``counters``: the merge counters back at zero)."""
    dtype = torch.float16
    torch.manual_seed(6)
    q, k, v = rand_cuda(batch, 32, 1, 128, dtype=dtype), rand_cuda(batch, 8, 4096, 128, dtype=dtype), \
        rand_cuda(batch, 8, 4096, 128, dtype=dtype)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        ops.attention(q, k, v, **kwargs)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out, lse = ops.attention(q, k, v, return_lse=True, **kwargs)
    for _ in range(3):
        q.copy_(rand_cuda(*q.shape, dtype=dtype))
        k.copy_(rand_cuda(*k.shape, dtype=dtype))
        g.replay()
        torch.cuda.synchronize()
        check_decode(out, lse, *decode_reference(q, k, v), dtype, counters)


def check_decode_calls(B, H, Hkv, S, D, lens, splits, dtype, counters=True):
    """The flash-decoding tests' shape check: seeded inputs (``B`` x ``H`` query heads of one token over
    ``Hkv`` x ``S`` keys, head dim ``D``; ``lens``: the cache lengths, or None), ``ops.attention`` called
    three times with ``num_splits=splits`` (the first plans and binds; the others launch from pointers),
    each against float64 (``check_decode``)."""
    torch.manual_seed(B * H + S + D)
    q, k, v = rand_cuda(B, H, 1, D, dtype=dtype), rand_cuda(B, Hkv, S, D, dtype=dtype), \
        rand_cuda(B, Hkv, S, D, dtype=dtype)
    cache = torch.tensor(lens, dtype=torch.int32, device="cuda") if lens is not None else None
    want, want_lse = decode_reference(q, k, v, lens)
    for _ in range(3):
        out, lse = ops.attention(q, k, v, return_lse=True, cache_seqlens=cache, num_splits=splits)
        torch.cuda.synchronize()
        check_decode(out, lse, want, want_lse, dtype, counters)


# ---------------------------------------------------------------- dense and packed forward calls
def dense_reference(q, k, v, causal, kv_len=None):
    """float64 attention of (B, H, S, D) tensors on the GPU (GQA by repeating the kv heads; ``kv_len``: the keys
    of each sequence), one batch at a time: (output, LSE), rows without keys 0 and -inf."""
    B, H, Sq, D = q.shape
    Sk, g = k.shape[2], H // k.shape[1]
    outs, lses = [], []
    for b in range(B):
        qb, kb, vb = q[b].double(), k[b].double().repeat_interleave(g, 0), v[b].double().repeat_interleave(g, 0)
        n = kv_len[b] if kv_len is not None else Sk
        s = qb @ kb.transpose(-1, -2) / math.sqrt(D)
        i, j = torch.arange(Sq, device=q.device)[:, None], torch.arange(Sk, device=q.device)[None]
        mask = (j >= n) | ((j > i + n - Sq) if causal else torch.zeros_like(j, dtype=torch.bool))
        s = s.masked_fill(mask, -math.inf)
        lse = torch.logsumexp(s, -1)
        outs.append(torch.exp(s - lse[..., None]).nan_to_num(0.0) @ vb)
        lses.append(lse)
    return torch.stack(outs), torch.stack(lses)


def rel_err(got, want):
    """The largest error of ``got`` relative to the largest element of ``want`` (no NaN allowed in ``got``)."""
    assert not got.isnan().any(), "NaN in the output (an unwritten or poisoned element)"
    return ((got.double() - want).abs().max() / want.abs().max().clamp_min(1e-6)).item()


def check_dense_calls(B, H, Hkv, Sq, Sk, D, causal, dtype, check_kernel):
    """The dense tests' check of a shape: seeded inputs, ``ops.attention`` with the LSE against float64 (output
    to 3e-3 of its largest element, 4x that in bf16; the LSE to 1e-3, -inf exactly where a row has no key),
    ``check_kernel()`` on what was built, then a repeat call (the plan's bound launch from pointers) with a
    new ``q``, which must read its own inputs."""
    tol = 3e-3 * (4 if dtype == torch.bfloat16 else 1)
    torch.manual_seed(B * H + Sq + D)
    q, k, v = (rand_cuda(B, h, s, D, dtype=dtype) for h, s in ((H, Sq), (Hkv, Sk), (Hkv, Sk)))
    out, lse = ops.attention(q, k, v, causal=causal, return_lse=True)
    want, want_lse = dense_reference(q, k, v, causal)
    assert rel_err(out, want) < tol
    finite = torch.isfinite(want_lse)
    assert torch.equal(torch.isfinite(lse), finite)
    assert (lse.double()[finite] - want_lse[finite]).abs().max().item() < 1e-3
    check_kernel()
    q2 = rand_cuda(B, H, Sq, D, dtype=dtype)
    assert rel_err(ops.attention(q2, k, v, causal=causal), dense_reference(q2, k, v, causal)[0]) < tol


def check_varlen_calls(seed, check_kernel=None):
    """Packed sequences (an empty query sequence, one with queries but no keys, lengths off the blocks) at
    head dims 64 and 128, causal and not, fp16, 8 query heads over 2 kv heads: ``check_kernel(D)`` after each
    call when given, each sequence against float64 (3e-3; 0 where it has no key)."""
    torch.manual_seed(seed)
    lens_q, lens_k = [300, 1, 2048, 77, 0, 129], [500, 7, 2048, 0, 33, 129]
    cu_q = torch.tensor([0] + list(torch.tensor(lens_q).cumsum(0)), dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0] + list(torch.tensor(lens_k).cumsum(0)), dtype=torch.int32, device="cuda")
    for D in (64, 128):
        qp = rand_cuda(int(cu_q[-1]), 8, D, dtype=torch.float16)
        kp, vp = (rand_cuda(int(cu_k[-1]), 2, D, dtype=torch.float16) for _ in range(2))
        for causal in (False, True):
            out = ops.attention(qp, kp, vp, causal=causal, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                                max_seqlen_q=max(lens_q))
            if check_kernel is not None:
                check_kernel(D)
            for b in range(len(lens_q)):
                sq, sk = slice(int(cu_q[b]), int(cu_q[b + 1])), slice(int(cu_k[b]), int(cu_k[b + 1]))
                if lens_q[b] == 0:
                    continue
                got = out[sq].transpose(0, 1)[None]
                if lens_k[b] == 0:
                    assert (got == 0).all()
                else:
                    want, _ = dense_reference(qp[sq].transpose(0, 1)[None], kp[sk].transpose(0, 1)[None],
                                              vp[sk].transpose(0, 1)[None], causal)
                    assert rel_err(got, want) < 3e-3


# ---------------------------------------------------------------- the forward kernels (persistent, lean)
def record_attention_kernels(monkeypatch, with_configs=False):
    """``ops.attention`` with its allocations (``torch.empty``) filled with NaN and each forward kernel
    it is given recorded: returns the list that gets a (cache key, kernel) pair for each, in order
    (``with_configs``: (cache key, pass configs, kernel))."""
    built = []
    real_kernel = dispatch._kernel

    def record(key, build, target, pass_configs=None):
        k = real_kernel(key, build, target, pass_configs)
        if key[0] == "attention":
            built.append((key, pass_configs, k) if with_configs else (key, k))
        return k

    class Poisoned:
        def __getattr__(self, name):
            return getattr(torch, name)

        @staticmethod
        def empty(*args, **kwargs):
            return torch.empty(*args, **kwargs).fill_(math.nan)

    monkeypatch.setattr(dispatch, "_kernel", record)
    monkeypatch.setattr(dispatch, "_torch", lambda: Poisoned())
    return built


def with_knobs(monkeypatch, knobs, with_configs=False):
    """A fixture's body (``yield from``): ``attention_dispatch``'s ``knobs`` (name -> value) set, the forward
    kernels recorded as by ``record_attention_kernels`` (whose list it yields), plans forgotten before and after."""
    built = record_attention_kernels(monkeypatch, with_configs)
    for name, value in knobs.items():
        monkeypatch.setattr(dispatch, name, value)
    dispatch.forget_plans()
    yield built
    dispatch.forget_plans()


def use_schedule(monkeypatch, configs):
    """The consumer schedule's pass configs over the shipped Hopper ones (the d64 overrides dropped when
    a schedule is asked for, so that it applies at every head dim)."""
    monkeypatch.setattr(dispatch, "HOPPER_CONFIGS", {**dispatch.HOPPER_CONFIGS, **configs})
    if configs:
        monkeypatch.setattr(dispatch, "HOPPER_D64_OVERRIDES", {})
