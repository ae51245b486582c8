"""The session-11 decode candidates (bench/decode_splits.py ``S11_GQA``: "fill" with 4/5 stages or 128-key blocks,
6 splits, 3 stages, no split at all with 64,5 / 128,3, cp.async; ``S11_MQA``: "cover,tmerge" with fewer splits and
deeper rings) on a CUDA GPU, against float64 with the op's allocations poisoned (NaN): the benchmarks' shapes
(batch 8, 32 heads on 8 kv heads at KV 4k, or on 1 at KV 16k; d 128), a ragged cache with an empty sequence and
lengths off the key block, repeat calls from pointers, the merge counters back at zero, the split counts the
candidates plan.  Skipped without a GPU."""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from shared_gpu_attention import check_repeat_calls, poisoned_decode  # noqa: E402,F401 - poisoned_decode: autouse
from shared_gpu_attention import rand_cuda as _rand  # noqa: E402

ad = importlib.import_module("tilewright.ops.attention_dispatch")
dk = importlib.import_module("tilewright.ops.decode_kernels")

CANDIDATES = [("tmerge", 6, "64,2"), ("tmerge,fill", None, "64,4"), ("tmerge,fill", None, "64,5"),
              ("tmerge", None, "64,3"), ("tmerge,fill", None, "128,3"), ("none", 1, "64,5"), ("none", 1, "128,3"),
              ("tmerge,cpasync", None, "64,2"),
              # MQA (one kv head: the cases below take Hkv = 1 for these)
              ("cover,tmerge,fill", None, "64,4"), ("cover,tmerge,fill", None, "64,5"), ("cover,tmerge", 16, "64,2"),
              ("cover,tmerge", 8, "64,5")]


@pytest.mark.parametrize("variant, splits, config", CANDIDATES, ids=[f"{v}-{s}-{c}" for v, s, c in CANDIDATES])
@pytest.mark.parametrize("B, S, lens, dtype", [
    (8, 4096, None, torch.float16),                       # the benchmark's shape (MQA: KV 16k)
    (8, 4096, None, torch.bfloat16),
    (4, 4096, [4096, 0, 1, 2049], torch.bfloat16),        # ragged, an empty sequence, lengths off the key block
])
def test_against_float64(monkeypatch, variant, splits, config, B, S, lens, dtype):
    monkeypatch.setenv("TILEWRIGHT_DECODE_VARIANT", variant)
    monkeypatch.setenv("TILEWRIGHT_DECODE_CONFIG", config)
    ad.forget_plans()
    mqa = "cover" in variant
    hkv, S = (1, 4 * S) if mqa else (8, S)
    lens = None if lens is None else [min(n * (4 if mqa else 1), S) for n in lens]
    torch.manual_seed(B + S)
    q, k, v = _rand(B, 32, 1, 128, dtype=dtype), _rand(B, hkv, S, 128, dtype=dtype), _rand(B, hkv, S, 128, dtype=dtype)
    cache = torch.tensor(lens, dtype=torch.int32, device="cuda") if lens is not None else None
    check_repeat_calls(q, k, v, cache, splits, dtype)
    if B == 8 and ad._NUM_SMS == 132:  # the H200's split counts at the benchmarks' shapes (64 groups, MQA 8)
        (plan,) = dk._plans.values()
        assert plan.splits == (splits or ((16 if mqa else 2) if "fill" in variant else 4)), plan.splits
    ad.forget_plans()
