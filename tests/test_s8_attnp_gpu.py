"""The persistent attention forward (``attention_dispatch.PERSISTENT``) on an sm_90 GPU (H100/H200):
every mode of ``ops.attention`` against float64 with NaN-poisoned outputs, under each consumer
schedule (plain, ping-pong, the overlap, both), and the kernel checked to be the persistent one (a
grid of one block per multiprocessor, 384 threads).  Skipped without such a GPU."""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")
if not (torch.cuda.is_available() and not getattr(torch.version, "hip", None)
        and torch.cuda.get_device_capability() == (9, 0)):
    pytest.skip("needs an sm_90 NVIDIA GPU with a CUDA build of PyTorch", allow_module_level=True)

from shared_gpu_attention import check_dense_calls, use_schedule, with_knobs  # noqa: E402
from shared_gpu_attention import dense_reference as reference  # noqa: E402
from shared_gpu_attention import rand_cuda as _rand  # noqa: E402
from shared_gpu_attention import rel_err as _rel  # noqa: E402

from tilewright import ops  # noqa: E402

dispatch = importlib.import_module("tilewright.ops.attention_dispatch")
SCHEDULES = {"shipped": {}, "pp": {"tw.pingpong": True, "tw.attention_overlap": False},
             "ov": {"tw.pingpong": False, "tw.attention_overlap": True},
             "pp+ov": {"tw.pingpong": True, "tw.attention_overlap": True}}


@pytest.fixture(params=list(SCHEDULES))
def persistent(request, monkeypatch):
    """PERSISTENT on, the schedule's pass configs over the shipped ones, outputs poisoned; the
    forward kernels built are recorded."""
    use_schedule(monkeypatch, SCHEDULES[request.param])
    yield from with_knobs(monkeypatch, {"PERSISTENT": True})


def _was_persistent(built):
    key, k = built[-1]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    # the plan's kernel key ends with the persistent grid and the work-item order (short causal calls at
    # d 65..128 take PERSISTENT_ORDER_SHORT_CAUSAL's: test_s9_causal_stages checks which call takes which)
    orders = (dispatch.PERSISTENT_ORDER, dispatch.PERSISTENT_ORDER_SHORT_CAUSAL)
    assert key[-2] == sms and key[-1] in orders and k.num_threads == 384, (key, k.num_threads)
    assert "Q_s_empty" in k.get_kernel_source()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("B, H, Hkv, Sq, Sk, D", [
    (16, 16, 16, 1024, 1024, 128),  # the shape: 2048 items over 132 blocks
    (1, 16, 4, 2048, 2048, 64),     # GQA
    (1, 8, 1, 1000, 1337, 128),     # MQA, ragged, Sq < Sk
    (2, 8, 2, 517, 517, 256),       # d = 256
    (3, 5, 5, 700, 300, 64),        # Sq > Sk: causal items without keys
])
@pytest.mark.parametrize("causal", [False, True])
def test_dense_persistent_on_gpu(persistent, B, H, Hkv, Sq, Sk, D, causal, dtype):
    check_dense_calls(B, H, Hkv, Sq, Sk, D, causal, dtype, lambda: _was_persistent(persistent))


def test_varlen_kv_cache_and_split_kv_persistent_on_gpu(persistent):
    torch.manual_seed(3)
    lens_q = [300, 1, 2048, 77, 0, 129]
    lens_k = [500, 7, 2048, 0, 33, 129]
    cu_q = torch.tensor([0] + list(torch.tensor(lens_q).cumsum(0)), dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0] + list(torch.tensor(lens_k).cumsum(0)), dtype=torch.int32, device="cuda")
    qp = _rand(int(cu_q[-1]), 8, 128, dtype=torch.float16)
    kp, vp = (_rand(int(cu_k[-1]), 2, 128, dtype=torch.float16) for _ in range(2))
    for causal in (False, True):
        out = ops.attention(qp, kp, vp, causal=causal, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                            max_seqlen_q=max(lens_q))
        _was_persistent(persistent)
        for b in range(len(lens_q)):
            sq, sk = slice(int(cu_q[b]), int(cu_q[b + 1])), slice(int(cu_k[b]), int(cu_k[b + 1]))
            if lens_q[b] == 0:
                continue
            want, _ = reference(qp[sq].transpose(0, 1)[None], kp[sk].transpose(0, 1)[None],
                                vp[sk].transpose(0, 1)[None], causal)
            got = out[sq].transpose(0, 1)[None]
            if lens_k[b] == 0:
                assert (got == 0).all()
            else:
                assert _rel(got, want) < 3e-3
    # a padded KV cache, prefill of 200 queries, in 3 split-KV ranges
    q = _rand(2, 8, 200, 128, dtype=torch.bfloat16)
    k, v = (_rand(2, 2, 4096, 128, dtype=torch.bfloat16) for _ in range(2))
    lens = torch.tensor([4096, 1234], dtype=torch.int32, device="cuda")
    out = ops.attention(q, k, v, causal=True, cache_seqlens=lens, num_splits=3)
    _was_persistent(persistent)
    assert _rel(out, reference(q, k, v, True, kv_len=lens.tolist())[0]) < 1e-2
