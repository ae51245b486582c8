"""The session-11 decode candidates (bench/decode_splits.py ``S11_GQA``: "fill" with 4/5 stages or 128-key blocks,
6 splits, 3 stages, no split at all with 64,5 / 128,3, cp.async) on a CUDA GPU, against float64 with the op's
allocations poisoned (NaN): the benchmark's shape (batch 8, 32 heads on 8 kv heads, d 128, KV 4k), a ragged cache
with an empty sequence and lengths off the key block, repeat calls from pointers, the merge counters back at zero.
Skipped without a GPU."""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from shared_gpu_attention import check_decode as _check  # noqa: E402
from shared_gpu_attention import decode_reference as reference  # noqa: E402
from shared_gpu_attention import poisoned_decode  # noqa: E402,F401 - poisoned_decode: autouse
from shared_gpu_attention import rand_cuda as _rand  # noqa: E402

from tilewright import ops  # noqa: E402

ad = importlib.import_module("tilewright.ops.attention_dispatch")

CANDIDATES = [("tmerge", 6, "64,2"), ("tmerge,fill", None, "64,4"), ("tmerge,fill", None, "64,5"),
              ("tmerge", None, "64,3"), ("tmerge,fill", None, "128,3"), ("none", 1, "64,5"), ("none", 1, "128,3"),
              ("tmerge,cpasync", None, "64,2")]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("variant, splits, config", CANDIDATES, ids=[f"{v}-{s}-{c}" for v, s, c in CANDIDATES])
@pytest.mark.parametrize("B, S, lens", [(8, 4096, None), (4, 4096, [4096, 0, 1, 2049]), (3, 8192, [8191, 100, 5000])])
def test_against_float64(monkeypatch, variant, splits, config, B, S, lens, dtype):
    monkeypatch.setenv("TILEWRIGHT_DECODE_VARIANT", variant)
    monkeypatch.setenv("TILEWRIGHT_DECODE_CONFIG", config)
    ad.forget_plans()
    torch.manual_seed(B + S)
    q, k, v = _rand(B, 32, 1, 128, dtype=dtype), _rand(B, 8, S, 128, dtype=dtype), _rand(B, 8, S, 128, dtype=dtype)
    cache = torch.tensor(lens, dtype=torch.int32, device="cuda") if lens is not None else None
    want, want_lse = reference(q, k, v, lens)
    for _ in range(3):  # the first call plans and binds; the others launch from pointers
        out, lse = ops.attention(q, k, v, return_lse=True, cache_seqlens=cache, num_splits=splits)
        torch.cuda.synchronize()
        _check(out, lse, want, want_lse, dtype)
    ad.forget_plans()
