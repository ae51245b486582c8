"""The flash-decoding kernel (tilewright/ops/decode_kernels.py) on a CUDA GPU at decoding shapes,
against float64 with the op's allocations poisoned (NaN): head dims 64/128/256, fp16/bf16, GQA/MQA/MHA
(group 32: two 16-row slices), ragged cache lengths with 0 and lengths off the key block, forced and
chosen split counts, LSE; repeat calls from pointers with fresh tensors (the merge counters must be
back at zero for each), two streams at once (their own counters), a CUDA graph replayed with new
inputs, and agreement with the old path (TILEWRIGHT_DECODE_KERNEL=old).  Skipped without a GPU."""

from __future__ import annotations

import importlib
import math

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from test_ops_attention import _PoisonedTorch as PoisonedTorch  # noqa: E402

from tilewright import ops  # noqa: E402

ad = importlib.import_module("tilewright.ops.attention_dispatch")
dk = importlib.import_module("tilewright.ops.decode_kernels")


class _PoisonedTorch(PoisonedTorch):
    """test_ops_attention's poisoned torch, ``empty_like`` poisoned too."""

    @staticmethod
    def empty_like(*args, **kwargs):
        t = torch.empty_like(*args, **kwargs)
        return t.fill_(math.nan) if t.is_floating_point() else t.fill_(-7)


@pytest.fixture(autouse=True)
def _poison(monkeypatch):
    monkeypatch.setattr(ad, "_torch", lambda: _PoisonedTorch())


def reference(q, k, v, kv_len=None):
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


def _check(out, lse, want, want_lse, dtype):
    assert not out.isnan().any()
    err = ((out.double() - want).abs().max() / want.abs().max().clamp_min(1e-6)).item()
    assert err < 3e-3 * (4 if dtype == torch.bfloat16 else 1), err
    finite = torch.isfinite(want_lse)
    assert torch.equal(torch.isfinite(lse), finite) and (lse[~finite] == -math.inf).all()
    assert (lse.double()[finite] - want_lse[finite]).abs().max().item() < 1e-3


def _rand(*shape, dtype):
    return torch.randn(*shape, device="cuda", dtype=torch.float32).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("B, H, Hkv, S, D, lens, splits", [
    (8, 32, 8, 4096, 128, None, None),                    # the benchmark's shape, the heuristic's splits
    (4, 32, 8, 4096, 128, [4096, 0, 1, 2049], 7),         # ragged cache, an empty sequence, 7 splits
    (3, 16, 2, 3001, 64, [3001, 77, 1000], None),
    (2, 8, 2, 2000, 256, [2000, 63], 5),
    (2, 32, 1, 1500, 128, [1500, 999], None),             # MQA group 32: two slices
    (2, 4, 4, 1000, 64, [1000, 513], 1),                  # MHA, one range
])
def test_against_float64(B, H, Hkv, S, D, lens, splits, dtype):
    torch.manual_seed(B * H + S + D)
    q, k, v = _rand(B, H, 1, D, dtype=dtype), _rand(B, Hkv, S, D, dtype=dtype), _rand(B, Hkv, S, D, dtype=dtype)
    cache = torch.tensor(lens, dtype=torch.int32, device="cuda") if lens is not None else None
    want, want_lse = reference(q, k, v, lens)
    for _ in range(3):  # the first call plans and binds; the others launch from pointers
        out, lse = ops.attention(q, k, v, return_lse=True, cache_seqlens=cache, num_splits=splits)
        _check(out, lse, want, want_lse, dtype)


def test_repeat_calls_with_fresh_tensors():
    """Same signature, new tensors each call: the pointer path, the counters reused every call."""
    dtype = torch.float16
    for i in range(4):
        torch.manual_seed(100 + i)
        q, k, v = _rand(4, 32, 1, 128, dtype=dtype), _rand(4, 8, 2048, 128, dtype=dtype), _rand(4, 8, 2048, 128,
                                                                                                dtype=dtype)
        out, lse = ops.attention(q, k, v, return_lse=True, num_splits=4)
        _check(out, lse, *reference(q, k, v), dtype)


def test_two_streams_at_once():
    dtype = torch.bfloat16
    torch.manual_seed(5)
    cases = [tuple(_rand(*s, dtype=dtype) for s in ((4, 32, 1, 128), (4, 8, 8192, 128), (4, 8, 8192, 128)))
             for _ in range(2)]
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    torch.cuda.synchronize()
    results = [[], []]
    for _ in range(5):
        for i, (s, (q, k, v)) in enumerate(zip(streams, cases)):
            with torch.cuda.stream(s):
                results[i].append(ops.attention(q, k, v, return_lse=True, num_splits=8))
    torch.cuda.synchronize()
    for (q, k, v), got in zip(cases, results):
        want = reference(q, k, v)
        for out, lse in got:
            _check(out, lse, *want, dtype)


def test_cuda_graph_replay_with_new_inputs():
    dtype = torch.float16
    torch.manual_seed(6)
    q, k, v = _rand(2, 32, 1, 128, dtype=dtype), _rand(2, 8, 4096, 128, dtype=dtype), _rand(2, 8, 4096, 128,
                                                                                          dtype=dtype)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        ops.attention(q, k, v, num_splits=4)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out, lse = ops.attention(q, k, v, return_lse=True, num_splits=4)
    for _ in range(3):
        q.copy_(_rand(*q.shape, dtype=dtype))
        k.copy_(_rand(*k.shape, dtype=dtype))
        g.replay()
        torch.cuda.synchronize()
        _check(out, lse, *reference(q, k, v), dtype)


def test_agrees_with_the_old_path(monkeypatch):
    dtype = torch.bfloat16
    torch.manual_seed(7)
    q, k, v = _rand(8, 32, 1, 128, dtype=dtype), _rand(8, 8, 4096, 128, dtype=dtype), _rand(8, 8, 4096, 128,
                                                                                          dtype=dtype)
    new = ops.attention(q, k, v, return_lse=True)
    monkeypatch.setattr(dk, "KERNEL", "old")
    old = ops.attention(q, k, v, return_lse=True)
    want = reference(q, k, v)
    _check(*new, *want, dtype)
    _check(*old, *want, dtype)
