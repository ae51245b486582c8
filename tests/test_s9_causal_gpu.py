"""The session-9 causal candidates on an sm_90 GPU (H100/H200), each a set of ``attention_dispatch``
knobs (the "pairs" item order, the item coordinates as expressions, two K/V stages at d 128/256 with
``HOPPER_SCORES_IN_REGISTERS``, the d64 block shapes ``HOPPER_D64_BLOCKS``), on the grid and the
persistent kernel: ``ops.attention`` against float64 with NaN-poisoned outputs (causal and not, ragged,
S_q != S_k both ways, GQA/MQA, the LSE, varlen), and the kernel checked to be the one asked for.
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
TWO = {"HOPPER_SCORES_IN_REGISTERS": True}
CANDIDATES = {
    "pairs": {"PERSISTENT": True, "PERSISTENT_ORDER": "pairs"},
    "lf exprs": {"PERSISTENT": True, "PERSISTENT_ORDER": "longest_first", "PERSISTENT_ITEM_VARS": False},
    "2st grid": {**TWO, "PERSISTENT": False},
    "2st pairs": {**TWO, "PERSISTENT": True, "PERSISTENT_ORDER": "pairs"},
    "2st hm": {**TWO, "PERSISTENT": True, "PERSISTENT_ORDER": "head_major_snake"},
    "d64 128x64": {"HOPPER_D64_BLOCKS": (128, 64), "PERSISTENT": False},
    "d64 128x192 pairs": {**TWO, "HOPPER_D64_BLOCKS": (128, 192), "PERSISTENT": True, "PERSISTENT_ORDER": "pairs"},
}


@pytest.fixture(params=list(CANDIDATES))
def candidate(request, monkeypatch):
    """The candidate's knobs, outputs poisoned; the forward kernels built are recorded."""
    yield from with_knobs(monkeypatch, CANDIDATES[request.param])


def _was_asked_for(built, D):
    key, k = built[-1]
    assert k.num_threads == 384 and "wgmma" in k.get_kernel_source()
    assert ("Q_s_empty" in k.get_kernel_source()) == (dispatch.PERSISTENT is True)
    bM, bN, stages = key[17:20]  # (after name, heads, dims, dtypes, target, configs, stage_out, 8 flags)
    if D <= 64:
        assert (bM, bN, stages) == (*dispatch.HOPPER_D64_BLOCKS, 2)
    elif dispatch.HOPPER_SCORES_IN_REGISTERS is True:
        assert stages == 2


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("B, H, Hkv, Sq, Sk, D, causal", [
    (4, 16, 16, 1024, 1024, 128, True),   # the S=1024 shape (fewer batches): 512 items over the SMs
    (1, 16, 16, 4096, 4096, 64, True),    # the d64 causal shape (one batch)
    (1, 8, 1, 1000, 1337, 128, True),     # MQA, ragged, Sq < Sk
    (3, 5, 5, 700, 300, 64, True),        # Sq > Sk: items without keys
    (2, 8, 2, 517, 517, 256, True),       # d = 256 (two stages of 64 keys with the fit of 2st)
    (2, 8, 4, 777, 900, 128, False),      # non-causal, GQA, ragged
])
def test_candidates_on_gpu(candidate, B, H, Hkv, Sq, Sk, D, causal, dtype):
    check_dense_calls(B, H, Hkv, Sq, Sk, D, causal, dtype, lambda: _was_asked_for(candidate, D))


def test_varlen_candidates_on_gpu(candidate):
    check_varlen_calls(5, lambda D: _was_asked_for(candidate, D))
