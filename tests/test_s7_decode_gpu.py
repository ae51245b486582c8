"""The flash-decoding kernel (tilewright/ops/decode_kernels.py) on a CUDA GPU at decoding shapes,
against float64 with the op's allocations poisoned (NaN): head dims 64/128/256, fp16/bf16, GQA/MQA/MHA
(group 32: two 16-row slices), ragged cache lengths with 0 and lengths off the key block, forced and
chosen split counts, LSE; repeat calls from pointers with fresh tensors (the merge counters must be
back at zero for each), two streams at once (their own counters), a CUDA graph replayed with new
inputs, and agreement with the old path (TILEWRIGHT_DECODE_KERNEL=old).  Skipped without a GPU."""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from shared_gpu_attention import check_decode, check_decode_calls, check_graph_replay, poisoned_decode  # noqa: E402,F401 - autouse
from shared_gpu_attention import decode_reference as reference  # noqa: E402
from shared_gpu_attention import rand_cuda as _rand  # noqa: E402

from tilewright import ops  # noqa: E402

dk = importlib.import_module("tilewright.ops.decode_kernels")


def _check(out, lse, want, want_lse, dtype):
    check_decode(out, lse, want, want_lse, dtype, counters=False)


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
    check_decode_calls(B, H, Hkv, S, D, lens, splits, dtype, counters=False)


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
    check_graph_replay(2, counters=False, num_splits=4)


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
