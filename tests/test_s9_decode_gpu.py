"""The flash-decoding kernel's session-9 candidates (ops/decode_kernels.VARIANTS "cmerge": the merge spread over a
thread-block cluster of the group's splits; "fill": one block a SM; with "cover" for MQA) on a CUDA GPU, against
float64 with the op's allocations poisoned (NaN): the benchmarks' shapes (GQA batch 8, 32/8 heads, d 128, KV 4k;
MQA 32 heads on 1 KV head at KV 16k, also with 4 stages), ragged cache lengths with 0 and lengths off the key
block, group 80, head dims 64/256 with forced split counts (clusters of 2, 4, 8; one to four rounds), repeat calls
from pointers and a CUDA graph replayed with new inputs (the merge counters back at zero each time).  On a GPU
without clusters (before sm_90) "cmerge" is dropped by the plan and these run the default merge.  Skipped without
a GPU."""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from shared_gpu_attention import check_decode as _check  # noqa: E402
from shared_gpu_attention import check_decode_calls, check_graph_replay, poisoned_decode  # noqa: E402,F401 - autouse
from shared_gpu_attention import decode_reference as reference  # noqa: E402
from shared_gpu_attention import rand_cuda as _rand  # noqa: E402

from tilewright import ops  # noqa: E402

ad = importlib.import_module("tilewright.ops.attention_dispatch")
dk = importlib.import_module("tilewright.ops.decode_kernels")

VARIANTS = ["cmerge", "cmerge,fill", "cover,cmerge", "cover,cmerge,fill", "fill", "cmerge,wave", "cmerge,flatmerge"]


@pytest.fixture(params=VARIANTS)
def variant(request, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_DECODE_VARIANT", request.param)
    ad.forget_plans()
    return request.param


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("B, H, Hkv, S, D, lens, splits", [
    (8, 32, 8, 4096, 128, None, None),                    # the GQA benchmark's shape, the variant's splits
    (4, 32, 8, 4096, 128, [4096, 0, 1, 2049], None),      # ragged cache, an empty sequence
    (8, 32, 1, 16384, 128, None, None),                   # the MQA benchmark's shape
    (3, 16, 2, 3001, 64, [3001, 77, 1000], 6),            # clusters of 2, three rounds
    (2, 8, 2, 2000, 256, [2000, 63], 32),                 # clusters of 8, four rounds
    (2, 80, 1, 1200, 64, [1200, 0], 4),                   # group 80: 64 + 16 rows with cover
])
def test_against_float64(variant, B, H, Hkv, S, D, lens, splits, dtype):
    check_decode_calls(B, H, Hkv, S, D, lens, splits, dtype)
    (plan,) = dk._plans.values()
    if "cmerge" in variant and torch.cuda.get_device_capability()[0] >= 9:
        c = dk.merge_cluster(plan.splits, ("cmerge",))
        assert plan.splits % c == 0 and plan.counters % c == 0 and (c > 1) == (plan.splits > 1)


def test_mqa_four_stages(monkeypatch):
    """The MQA benchmark's 4-stage columns (one block a SM, 3 tiles in flight)."""
    monkeypatch.setenv("TILEWRIGHT_DECODE_CONFIG", "64,4,128")
    for variant in ("cover,cmerge,fill", "cmerge,fill", "cover,flatmerge,fill"):
        monkeypatch.setenv("TILEWRIGHT_DECODE_VARIANT", variant)
        ad.forget_plans()
        torch.manual_seed(len(variant))
        q, k, v = _rand(8, 32, 1, 128, dtype=torch.bfloat16), *(_rand(8, 1, 16384, 128, dtype=torch.bfloat16)
                                                                 for _ in range(2))
        for _ in range(2):
            out, lse = ops.attention(q, k, v, return_lse=True)
            torch.cuda.synchronize()
            _check(out, lse, *reference(q, k, v), torch.bfloat16)


def test_cuda_graph_replay_with_new_inputs(variant):
    check_graph_replay(8)
