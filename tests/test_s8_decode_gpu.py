"""The flash-decoding kernel's candidate variants (ops/decode_kernels.VARIANTS: wave, flatmerge, cpasync, ws and
combinations, cover for MQA; TILEWRIGHT_DECODE_VARIANT) on a CUDA GPU, against float64 with the op's allocations poisoned
(NaN): the benchmark's shape (batch 8, 32 heads, 8 KV heads, d 128, KV 4k: the split count "wave" picks),
ragged cache lengths with 0 and lengths off the key block, MQA, head dims 64/256, forced split counts,
repeat calls from pointers and a CUDA graph replayed with new inputs (the merge counters must be back at
zero each time).  Skipped without a GPU."""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from shared_gpu_attention import check_decode_calls, check_graph_replay, poisoned_decode  # noqa: E402,F401 - autouse
from shared_gpu_attention import rand_cuda as _rand  # noqa: E402

from tilewright import ops  # noqa: E402

ad = importlib.import_module("tilewright.ops.attention_dispatch")
dk = importlib.import_module("tilewright.ops.decode_kernels")

VARIANTS = ["wave", "flatmerge", "wave,flatmerge", "cpasync", "ws", "ws,flatmerge", "wave,cpasync", "cover",
            "cover,wave,flatmerge"]


@pytest.fixture(params=VARIANTS)
def variant(request, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_DECODE_VARIANT", request.param)
    ad.forget_plans()
    return request.param


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("B, H, Hkv, S, D, lens, splits", [
    (8, 32, 8, 4096, 128, None, None),                    # the benchmark's shape, the variant's splits
    (4, 32, 8, 4096, 128, [4096, 0, 1, 2049], None),      # ragged cache, an empty sequence
    (3, 16, 2, 3001, 64, [3001, 77, 1000], 7),
    (2, 8, 2, 2000, 256, [2000, 63], 32),
    (2, 32, 1, 1500, 128, [1500, 999], None),             # MQA group 32: two slices (one 32-row block with cover)
    (2, 80, 1, 1200, 64, [1200, 0], 3),                   # group 80: 64 + 16 rows with cover
])
def test_against_float64(variant, B, H, Hkv, S, D, lens, splits, dtype):
    check_decode_calls(B, H, Hkv, S, D, lens, splits, dtype)


def test_cuda_graph_replay_with_new_inputs(variant):
    check_graph_replay(8)


def test_wave_fills_the_gpu_in_one_wave(monkeypatch):
    """"wave" at the benchmark's shape: as many blocks as the SMs hold at once by the compiled kernel's
    own resources (shared memory, registers), not more."""
    monkeypatch.setenv("TILEWRIGHT_DECODE_VARIANT", "wave")
    ad.forget_plans()
    q, k, v = (_rand(*s, dtype=torch.float16) for s in ((8, 32, 1, 128), (8, 8, 4096, 128), (8, 8, 4096, 128)))
    ops.attention(q, k, v)
    (plan,) = dk._plans.values()
    use = plan.fwd.kernel.resource_usage
    props = torch.cuda.get_device_properties(0)
    per_sm = min(getattr(props, "shared_memory_per_multiprocessor", 233472) // (use["shared_bytes"] + 1024),
                 65536 // (use["registers"] * plan.fwd.kernel.num_threads))
    assert 1 < plan.splits and plan.splits * 64 <= props.multi_processor_count * per_sm, (plan.splits, use)
