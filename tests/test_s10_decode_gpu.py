"""The flash-decoding kernel's session-10 candidates (ops/decode_kernels.VARIANTS "tmerge": the split merge as a
tree through global memory, no cluster; "w8": 8 warps a block; with "cover" for MQA) on a CUDA GPU, against float64
with the op's allocations poisoned (NaN): the benchmarks' shapes (GQA batch 8, 32/8 heads, d 128, KV 4k; MQA 32
heads on 1 KV head at KV 16k, also at 3 stages), ragged cache lengths with 0 and lengths off the key block, group
80, head dims 64/256 with forced split counts (sets of 2, 4, 8; one to four sets; an odd count), repeat calls from
pointers and a CUDA graph replayed with new inputs (the merge counters back at zero each time).  Skipped without a
GPU."""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from shared_gpu_attention import check_decode as _check  # noqa: E402
from shared_gpu_attention import check_decode_calls, poisoned_decode  # noqa: E402,F401 - poisoned_decode: autouse
from shared_gpu_attention import decode_reference as reference  # noqa: E402
from shared_gpu_attention import rand_cuda as _rand  # noqa: E402

from tilewright import ops  # noqa: E402

ad = importlib.import_module("tilewright.ops.attention_dispatch")
dk = importlib.import_module("tilewright.ops.decode_kernels")

VARIANTS = ["tmerge", "w8", "tmerge,w8", "cover,tmerge", "cover,tmerge,w8"]


@pytest.fixture(params=VARIANTS)
def variant(request, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_DECODE_VARIANT", request.param)
    monkeypatch.delenv("TILEWRIGHT_DECODE_CONFIG", raising=False)
    ad.forget_plans()
    yield request.param
    ad.forget_plans()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("B, H, Hkv, S, D, lens, splits", [
    (8, 32, 8, 4096, 128, None, None),                    # the GQA benchmark's shape, the variant's splits
    (4, 32, 8, 4096, 128, [4096, 0, 1, 2049], None),      # ragged cache, an empty sequence
    (8, 32, 1, 16384, 128, None, None),                   # the MQA benchmark's shape (32 splits: 4 sets of 8)
    (3, 16, 2, 3001, 64, [3001, 77, 1000], 6),            # sets of 2, three of them
    (2, 8, 2, 2000, 256, [2000, 63], 32),                 # sets of 8, four of them
    (2, 8, 2, 2000, 64, [1999, 500], 7),                  # an odd count: no set, the plain merge
    (2, 80, 1, 1200, 64, [1200, 0], 4),                   # group 80: 64 + 16 rows with cover
])
def test_against_float64(variant, B, H, Hkv, S, D, lens, splits, dtype):
    check_decode_calls(B, H, Hkv, S, D, lens, splits, dtype)
    (plan,) = dk._plans.values()
    t = dk.merge_set(plan.splits, tuple(variant.split(",")))
    assert plan.splits % t == 0 and (t > 1) == ("tmerge" in variant and plan.splits > 1 and plan.splits % 2 == 0)


def test_mqa_three_stages(monkeypatch):
    """The MQA benchmark's 64,3 columns (2 blocks a SM by shared memory, 2 tiles in flight each)."""
    monkeypatch.setenv("TILEWRIGHT_DECODE_CONFIG", "64,3")
    for variant in ("cover,tmerge", "cover,tmerge,w8"):
        monkeypatch.setenv("TILEWRIGHT_DECODE_VARIANT", variant)
        ad.forget_plans()
        torch.manual_seed(len(variant))
        q, k, v = _rand(8, 32, 1, 128, dtype=torch.bfloat16), *(_rand(8, 1, 16384, 128, dtype=torch.bfloat16)
                                                                 for _ in range(2))
        for _ in range(2):
            out, lse = ops.attention(q, k, v, return_lse=True)
            torch.cuda.synchronize()
            _check(out, lse, *reference(q, k, v), torch.bfloat16)
    ad.forget_plans()


def test_cuda_graph_replay_with_new_inputs(variant):
    dtype = torch.float16
    torch.manual_seed(6)
    hkv = 1 if "cover" in variant else 8
    q, k, v = _rand(8, 32, 1, 128, dtype=dtype), _rand(8, hkv, 4096, 128, dtype=dtype), _rand(8, hkv, 4096, 128,
                                                                                            dtype=dtype)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        ops.attention(q, k, v)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out, lse = ops.attention(q, k, v, return_lse=True)
    for _ in range(3):
        q.copy_(_rand(*q.shape, dtype=dtype))
        k.copy_(_rand(*k.shape, dtype=dtype))
        g.replay()
        torch.cuda.synchronize()
        _check(out, lse, *reference(q, k, v), dtype)
