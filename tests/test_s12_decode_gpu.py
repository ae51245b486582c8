"""The session-12 decode candidates (bench/decode_splits.py ``S12_GQA`` / ``S12_MQA``) on a CUDA GPU, against float64
with the op's allocations poisoned (NaN): "gcount" (captured split calls share their capture's counters from the
device's pool), "pdl" / "pdlwait" (programmatic dependent launch: consecutive decode kernels of a stream overlap,
each waiting for the previous one before touching memory).  The benchmarks' shapes (batch 8, 32 heads on 8 kv heads
at KV 4k, or on 1 at KV 16k; d 128), a ragged cache with an empty sequence and lengths off the key block; repeat
calls from pointers; many calls back to back without a synchronization (each reusing the stream's partials and
counters while the previous one may still run); CUDA graphs of several calls of two shapes (GQA and MQA in one
capture) replayed with new inputs; the merge counters (the stream workspaces' and the capture pool's) back at zero.
Skipped without a GPU."""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from shared_gpu_attention import check_decode, check_repeat_calls, decode_reference, poisoned_decode  # noqa: E402,F401
from shared_gpu_attention import rand_cuda as _rand  # noqa: E402

from tilewright import ops  # noqa: E402

ad = importlib.import_module("tilewright.ops.attention_dispatch")
dk = importlib.import_module("tilewright.ops.decode_kernels")

CANDIDATES = ["tmerge,gcount,pdl", "tmerge,gcount,pdlwait", "tmerge,pdl",
              "cmerge,cover,gcount,pdl", "cover,tmerge,gcount,pdl"]  # (the last two MQA: one kv head below)


def _pool_zero() -> bool:
    return all(int(p.abs().sum()) == 0 for p, _ in dk._counter_pools.values())


def _inputs(mqa, B, S, dtype, lens=None, seed=0):
    hkv, S = (1, 4 * S) if mqa else (8, S)
    torch.manual_seed(seed + B + S)
    q, k, v = _rand(B, 32, 1, 128, dtype=dtype), _rand(B, hkv, S, 128, dtype=dtype), _rand(B, hkv, S, 128, dtype=dtype)
    cache = None if lens is None else torch.tensor([min(n * (4 if mqa else 1), S) for n in lens], dtype=torch.int32,
                                                   device="cuda")
    return q, k, v, cache


@pytest.mark.parametrize("variant", CANDIDATES)
@pytest.mark.parametrize("B, S, lens, dtype", [
    (8, 4096, None, torch.float16),                       # the benchmark's shape (MQA: KV 16k)
    (4, 4096, [4096, 0, 1, 2049], torch.bfloat16),        # ragged, an empty sequence, lengths off the key block
])
def test_against_float64(monkeypatch, variant, B, S, lens, dtype):
    monkeypatch.setenv("TILEWRIGHT_DECODE_VARIANT", variant)
    ad.forget_plans()
    q, k, v, cache = _inputs("cover" in variant, B, S, dtype, lens)
    check_repeat_calls(q, k, v, cache, None, dtype)
    ad.forget_plans()


@pytest.mark.parametrize("variant", ["tmerge,gcount,pdl", "cmerge,cover,gcount,pdl"])
def test_back_to_back_calls(monkeypatch, variant):
    """Eight calls of new queries and caches launched without a synchronization between them (programmatic
    launches overlap; every call reuses the stream's partials and counters), then each output checked."""
    monkeypatch.setenv("TILEWRIGHT_DECODE_VARIANT", variant)
    ad.forget_plans()
    mqa = "cover" in variant
    calls = [_inputs(mqa, 8, 1024, torch.float16, [1024, 0, 513, 1, 1024, 64, 1000, 7] if i % 2 else None, seed=i)
             for i in range(8)]
    got = [ops.attention(q, k, v, return_lse=True, cache_seqlens=c) for q, k, v, c in calls]
    torch.cuda.synchronize()
    for (q, k, v, c), (out, lse) in zip(calls, got):
        check_decode(out, lse, *decode_reference(q, k, v, None if c is None else c.tolist()), torch.float16)
    ad.forget_plans()


@pytest.mark.parametrize("gqa, mqa", [("tmerge,gcount,pdl", "cover,tmerge,gcount,pdl"),
                                      ("tmerge,gcount,pdlwait", "cmerge,cover,gcount,pdl")])
def test_graph_of_two_shapes_replayed(monkeypatch, gqa, mqa):
    """One capture of six calls: GQA (KV 4k) on two caches alternated and MQA (KV 16k, ragged) between them, so
    the calls of one capture and stream share counters of different counts; replayed three times with new inputs
    copied in, every output against float64, the counters back at zero."""
    dtype = torch.bfloat16
    sets = []
    for i, (variant, is_mqa, lens) in enumerate([(gqa, False, None), (mqa, True, [4096, 0, 1, 2049, 100, 4096, 64,
                                                                                    3000]), (gqa, False, None)]):
        monkeypatch.setenv("TILEWRIGHT_DECODE_VARIANT", variant)
        q, k, v, cache = _inputs(is_mqa, 8, 4096, dtype, lens, seed=10 * i)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):  # (the plan and, for gcount, the device's counter pool: before the capture)
            ops.attention(q, k, v, return_lse=True, cache_seqlens=cache)
        torch.cuda.current_stream().wait_stream(s)
        sets.append((variant, q, k, v, cache))
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    outs = []
    with torch.cuda.graph(g):
        for j in range(6):
            variant, q, k, v, cache = sets[[0, 1, 2, 1, 0, 2][j]]
            monkeypatch.setenv("TILEWRIGHT_DECODE_VARIANT", variant)
            outs.append(ops.attention(q, k, v, return_lse=True, cache_seqlens=cache))
    for _ in range(3):
        for _, q, k, v, _ in sets:
            for t in (q, k, v):
                t.copy_(_rand(*t.shape, dtype=dtype))
        g.replay()
        torch.cuda.synchronize()
        for j, (out, lse) in enumerate(outs):
            _, q, k, v, cache = sets[[0, 1, 2, 1, 0, 2][j]]
            check_decode(out, lse, *decode_reference(q, k, v, None if cache is None else cache.tolist()), dtype)
        assert _pool_zero(), "a captured merge counter left non-zero"
    ad.forget_plans()

