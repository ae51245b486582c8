"""Session 10's sm_90a attention candidates (tests/test_s10_attn_candidates.py runs them in the emulator)
on an sm_90 GPU (H100/H200): ping-pong with the overlap for long causal, short causal (two K/V stages) and
head dim 64 calls, short causal with the overlap only, 128 x 192 and 192 x 128 (three consumer warpgroups)
blocks at d 64, 128 x 176 blocks for non-causal d 128 (grid kernel), each on the grid and the persistent
kernel: ``ops.attention`` against float64 with NaN-poisoned outputs (causal and not, ragged, S_q != S_k both
ways, GQA/MQA, the LSE, varlen with empty sequences), and the kernel checked to be the one asked for.
Skipped without such a GPU."""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")
if not (torch.cuda.is_available() and not getattr(torch.version, "hip", None)
        and torch.cuda.get_device_capability() == (9, 0)):
    pytest.skip("needs an sm_90 NVIDIA GPU with a CUDA build of PyTorch", allow_module_level=True)

from shared_gpu_attention import check_dense_calls, check_varlen_calls, with_knobs  # noqa: E402

dispatch = importlib.import_module("tilewright.ops.attention_dispatch")
PP_OV = {"tw.pingpong": True, "tw.attention_overlap": True}
PP_ALL = {"HOPPER_LONG_CAUSAL_OVERRIDES": PP_OV, "HOPPER_SHORT_CAUSAL_OVERRIDES": PP_OV, "HOPPER_D64_OVERRIDES": PP_OV}
CANDIDATES = {
    "pp auto": PP_ALL,
    "pp grid": {**PP_ALL, "PERSISTENT": False},
    "pp pers": {**PP_ALL, "PERSISTENT": True, "PERSISTENT_ORDER": "pairs"},
    "short ov pers": {"HOPPER_SHORT_CAUSAL_OVERRIDES": {"tw.attention_overlap": True}, "PERSISTENT": True},
    "d64 192 pp grid": {"HOPPER_D64_BLOCKS": (128, 192), "HOPPER_SCORES_IN_REGISTERS": True,
                        "HOPPER_D64_OVERRIDES": PP_OV, "PERSISTENT": False},
    "d64 192 pp pers": {"HOPPER_D64_BLOCKS": (128, 192), "HOPPER_SCORES_IN_REGISTERS": True,
                        "HOPPER_D64_OVERRIDES": PP_OV, "PERSISTENT": True, "PERSISTENT_ORDER": "pairs"},
    "nc 176": {"HOPPER_NONCAUSAL_BLOCK_N": 176},
    "d64 3wg grid": {"HOPPER_D64_BLOCKS": (192, 128), "HOPPER_SCORES_IN_REGISTERS": True, "PERSISTENT": False},
    "d64 3wg pers": {"HOPPER_D64_BLOCKS": (192, 128), "HOPPER_SCORES_IN_REGISTERS": True, "PERSISTENT": True,
                     "PERSISTENT_ORDER": "pairs"},
}


@pytest.fixture(params=list(CANDIDATES))
def candidate(request, monkeypatch):
    """The candidate's knobs, outputs poisoned; the forward kernels built are recorded (key, configs, kernel)."""
    yield from with_knobs(monkeypatch, CANDIDATES[request.param], with_configs=True)


def _was_asked_for(built, D, causal):
    key, configs, k = built[-1]
    src = k.get_kernel_source()
    assert k.num_threads == 2 * key[17] + 128 and "wgmma" in src
    wide = not causal and 64 < D <= 128 and dispatch.HOPPER_NONCAUSAL_BLOCK_N != 128
    if wide:
        assert key[18:20] == (dispatch.HOPPER_NONCAUSAL_BLOCK_N, 2) and "Q_s_empty" not in src
    elif dispatch.PERSISTENT is True:
        assert "Q_s_empty" in src
    elif dispatch.PERSISTENT is False:
        assert "Q_s_empty" not in src
    bM, bN, stages = key[17:20]  # (after name, heads, dims, dtypes, target, configs, stage_out, 8 flags)
    if D <= 64:
        assert (bM, bN, stages) == (*dispatch.HOPPER_D64_BLOCKS, 2)
        assert configs.get("tw.pingpong") == dispatch.HOPPER_D64_OVERRIDES.get("tw.pingpong")
    elif D <= 128:
        assert stages == 2 or causal and dispatch.HOPPER_SHORT_CAUSAL_OVERRIDES is None
        if causal and dispatch.HOPPER_SHORT_CAUSAL_OVERRIDES is not None:
            assert configs["tw.attention_overlap"]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("B, H, Hkv, Sq, Sk, D, causal", [
    (4, 16, 16, 1024, 1024, 128, True),   # the S=1024 shape (fewer batches): short causal
    (1, 16, 16, 4096, 4096, 128, True),   # long causal
    (1, 16, 16, 4096, 4096, 64, True),    # the d64 shapes (one batch)
    (1, 16, 16, 4096, 4096, 64, False),
    (1, 8, 1, 1000, 1337, 128, True),     # MQA, ragged, Sq < Sk
    (1, 8, 2, 2000, 1500, 128, True),     # GQA, Sq > Sk: rows without keys, long causal
    (3, 5, 5, 700, 300, 64, True),        # Sq > Sk at d 64
    (2, 8, 4, 777, 900, 64, False),       # non-causal, GQA, ragged
    (2, 8, 4, 777, 900, 128, False),      # non-causal d 128 (128 x 176 blocks under "nc 176")
    (4, 16, 16, 1024, 1024, 128, False),  # the S=1024 shape (fewer batches), non-causal
])
def test_candidates_on_gpu(candidate, B, H, Hkv, Sq, Sk, D, causal, dtype):
    check_dense_calls(B, H, Hkv, Sq, Sk, D, causal, dtype, lambda: _was_asked_for(candidate, D, causal))


def test_varlen_candidates_on_gpu(candidate):
    check_varlen_calls(6)
