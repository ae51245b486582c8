"""The session-14 decode candidates (bench/decode_splits.py ``S14_GQA``) on a CUDA GPU, against float64 with the op's
allocations poisoned (NaN): "kvpre" / "kvpre4" (the first key blocks of a split prefetched into L2 before
griddepcontrol.wait) and "occ2" (2 blocks a SM).  Session 12's checks (the benchmark's shape, a ragged cache, repeat
calls from pointers, calls back to back, a graph of GQA and MQA calls) with these variants, and the hazard the
prefetch must not create: a call whose K/V the kernel just before it wrote (a copy into the cache; the previous
decode call's output, written by its merge after a late trigger) still reads the new values.  Skipped without a
GPU."""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from shared_gpu_attention import check_decode, check_repeat_calls, decode_reference  # noqa: E402
from test_s12_decode_gpu import _inputs  # noqa: E402
from test_s12_decode_gpu import test_against_float64 as _against_float64  # noqa: E402
from test_s12_decode_gpu import test_back_to_back_calls as _back_to_back  # noqa: E402
from test_s12_decode_gpu import test_graph_of_two_shapes_replayed as _graph_of_two_shapes  # noqa: E402

from tilewright import ops  # noqa: E402

ad = importlib.import_module("tilewright.ops.attention_dispatch")

CANDIDATES = ["tmerge,gcount,pdlwait,kvpre", "tmerge,gcount,pdlwait,kvpre4", "tmerge,gcount,kvpre,pdllate",
              "tmerge,gcount,kvpre,occ2,pdllate", "tmerge,gcount,kvpre,occ2,pdl", "tmerge,gcount,occ2,pdllate",
              "tmerge,gcount,kvpre4,occ2,pdllate", "tmerge,gcount,kvpre,pdlpre",
              "tmerge,gcount,occ2,pdl", "tmerge,gcount,occ2,pdllate,pdlpre",  # (bench/decode_splits.py S14_GQA)
              "cmerge,cover,gcount,occ2,pdl", "cmerge,cover,gcount,occ2,pdllate"]  # (S14_MQA: 1 kv head, KV 16k)


@pytest.mark.parametrize("variant", CANDIDATES)
def test_against_float64(monkeypatch, variant):
    """The benchmark's shape (batch 8, KV 4k (MQA 16k), no cache lengths: the prefetching path)."""
    _against_float64(monkeypatch, variant, 8, 4096, None, torch.bfloat16)


@pytest.mark.parametrize("variant", ["tmerge,gcount,kvpre4,occ2,pdllate", "tmerge,gcount,kvpre,occ2,pdl",
                                     "tmerge,gcount,occ2,pdllate", "cmerge,cover,gcount,occ2,pdllate"])
def test_ragged_against_float64(monkeypatch, variant):
    """Ragged cache lengths, an empty sequence, lengths off the key block (no prefetch: the lengths live in memory)."""
    _against_float64(monkeypatch, variant, 4, 4096, [4096, 0, 1, 2049], torch.float16)


@pytest.mark.parametrize("variant", ["tmerge,gcount,kvpre,pdllate", "tmerge,gcount,kvpre,occ2,pdl",
                                     "tmerge,gcount,occ2,pdllate", "tmerge,gcount,occ2,pdl",
                                     "cmerge,cover,gcount,occ2,pdl"])
def test_back_to_back_calls(monkeypatch, variant):
    _back_to_back(monkeypatch, variant)


@pytest.mark.parametrize("gqa, mqa", [("tmerge,gcount,kvpre,occ2,pdllate", "cover,gcount,pdlpre,tmerge"),
                                      ("gcount,occ2,pdllate,tmerge", "cmerge,cover,gcount,occ2,pdllate")])
def test_graph_replayed(monkeypatch, gqa, mqa):
    """session 12's capture of GQA and MQA calls; the second pair is the GQA default since 11:29 with an MQA
    candidate."""
    _graph_of_two_shapes(monkeypatch, gqa, mqa)


def test_the_default_is_the_measured_one(monkeypatch):
    """Without TILEWRIGHT_DECODE_VARIANT a GQA plan on this GPU takes occ2 with the late trigger on sm_90 (the
    plain kernel without clusters), and its output matches float64 (the benchmark's shape)."""
    monkeypatch.delenv("TILEWRIGHT_DECODE_VARIANT", raising=False)
    dk = importlib.import_module("tilewright.ops.decode_kernels")
    cfg = dk.decode_config(128, ad._shared_bytes(torch.empty(1, device="cuda")), 4,
                           ad._target_of(torch.empty(1, device="cuda")), 4096)
    want = ("gcount", "occ2", "pdllate", "tmerge") if torch.cuda.get_device_capability()[0] >= 9 else ()
    assert cfg[4] == want
    ad.forget_plans()
    q, k, v, cache = _inputs(False, 8, 4096, torch.float16)
    check_repeat_calls(q, k, v, cache, None, torch.float16)  # (the variable still unset: the default's kernel)
    ad.forget_plans()


@pytest.mark.parametrize("variant", ["tmerge,gcount,pdlwait,kvpre4", "tmerge,gcount,kvpre,pdllate",
                                     "tmerge,gcount,kvpre,occ2,pdl"])
def test_cache_written_just_before(monkeypatch, variant):
    """Eight rounds without a synchronization: a copy kernel writes new keys and values into the cache, then a decode
    call reads them (its launch may start once the copy's blocks exit, its prefetch before the copy's writes are
    flushed); each output against float64 of what was copied in."""
    monkeypatch.setenv("TILEWRIGHT_DECODE_VARIANT", variant)
    ad.forget_plans()
    torch.manual_seed(5)
    k = torch.zeros(8, 8, 4096, 128, dtype=torch.float16, device="cuda")
    v = torch.zeros_like(k)
    q = torch.randn(8, 32, 1, 128, dtype=torch.float16, device="cuda")
    srcs = [(torch.randn_like(k), torch.randn_like(v)) for _ in range(8)]
    torch.cuda.synchronize()
    got = []
    for sk, sv in srcs:
        k.copy_(sk)
        v.copy_(sv)
        got.append(ops.attention(q, k, v, return_lse=True))
    torch.cuda.synchronize()
    for (sk, sv), (out, lse) in zip(srcs, got):
        check_decode(out, lse, *decode_reference(q, sk, sv, None), torch.float16)
    ad.forget_plans()


@pytest.mark.parametrize("variant", ["tmerge,gcount,kvpre,pdllate", "tmerge,gcount,kvpre,occ2,pdl"])
def test_output_feeds_the_next_call(monkeypatch, variant):
    """A chain of 12 decode calls, each reading the previous call's output as its keys and values (32 heads x 1 row
    viewed as 8 kv heads x 4 keys, one split): the previous kernel triggers before it writes that output, so the next
    one's prefetch may run before the write; every step against float64 of the output it was given."""
    monkeypatch.setenv("TILEWRIGHT_DECODE_VARIANT", variant)
    ad.forget_plans()
    torch.manual_seed(9)
    qs = [torch.randn(8, 32, 1, 128, dtype=torch.bfloat16, device="cuda") for _ in range(13)]
    first = torch.randn(8, 32, 1, 128, dtype=torch.bfloat16, device="cuda")
    outs = [first]
    lses = []
    for q in qs:
        kv = outs[-1].view(8, 8, 4, 128)
        out, lse = ops.attention(q, kv, kv, return_lse=True)
        outs.append(out)
        lses.append(lse)
    torch.cuda.synchronize()
    for i, q in enumerate(qs):
        kv = outs[i].view(8, 8, 4, 128)
        check_decode(outs[i + 1], lses[i], *decode_reference(q, kv, kv, None), torch.bfloat16)
    ad.forget_plans()
