"""Session 12's sm_90a candidates (tests/test_s12_attn_candidates.py runs them in the emulator) on an sm_90 GPU
(H100/H200): ``attention_dispatch.HOPPER_D64_STAGE_OUT`` False (each consumer thread stores its output pairs),
``HOPPER_D64_STAGES`` 3, the pass config ``tw.wgmma_desc_fold`` at head dim 64 (the descriptor of a tile's first element plus a
constant per K step), both, and the persistent orders of the s12 bench: ``ops.attention`` against float64 with
NaN-poisoned outputs (causal and not, ragged, S_q != S_k both ways, GQA, the LSE, varlen with empty sequences),
a repeat call from pointers, the kernel checked to be the one asked for; and wgmma GEMMs built with the fold
against float64.  Skipped without such a GPU."""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")
if not (torch.cuda.is_available() and not getattr(torch.version, "hip", None)
        and torch.cuda.get_device_capability() == (9, 0)):
    pytest.skip("needs an sm_90 NVIDIA GPU with a CUDA build of PyTorch", allow_module_level=True)

from shared_gpu_attention import check_dense_calls, check_varlen_calls, with_knobs  # noqa: E402

import tilewright  # noqa: E402
from tilewright.kernels import matmul  # noqa: E402

dispatch = importlib.import_module("tilewright.ops.attention_dispatch")
FOLD = {"HOPPER_D64_OVERRIDES": {**dispatch.HOPPER_D64_OVERRIDES, "tw.wgmma_desc_fold": True}}
DIRECT = {"HOPPER_D64_STAGE_OUT": False}
CANDIDATES = {"shipped": {}, "staged": {"HOPPER_D64_STAGE_OUT": True}, "direct": DIRECT, "fold": FOLD, "direct fold": {**DIRECT, **FOLD},
              "direct hm-snake": {**DIRECT, "PERSISTENT_ORDER": "head_major_snake"},
              "direct 3st": {**DIRECT, "HOPPER_D64_STAGES": 3},
              "grid direct": {**DIRECT, "PERSISTENT_MAX_KEY_BLOCKS_CAUSAL": 16}}


@pytest.fixture(params=list(CANDIDATES))
def candidate(request, monkeypatch):
    """The candidate's knobs, outputs poisoned; the forward kernels built are recorded (key, kernel)."""
    yield from with_knobs(monkeypatch, CANDIDATES[request.param])


def _was_asked_for(built, D):
    key, k = built[-1]
    src = k.get_kernel_source()
    assert "wgmma" in src
    if D <= 64:
        value, causal = dispatch.HOPPER_D64_STAGE_OUT, key[9]
        assert ("O_s" in src) == (value is True or value == "noncausal" and not causal)
        assert ("ull) + 2ull)" in src) == bool(dispatch.HOPPER_D64_OVERRIDES.get("tw.wgmma_desc_fold"))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("B, H, Hkv, Sq, Sk, D, causal", [
    (1, 16, 16, 4096, 4096, 64, True),    # the d64 causal shape (one batch): persistent, pairs
    (1, 16, 16, 4096, 4096, 64, False),   # grid kernel, no tail handling
    (3, 5, 5, 700, 300, 64, True),        # Sq > Sk at d 64: rows without keys
    (2, 8, 4, 777, 900, 64, False),       # non-causal, GQA, ragged
    (1, 8, 2, 1000, 1337, 64, True),      # GQA, ragged, Sq < Sk
    (2, 8, 4, 777, 900, 128, True),       # d 128 (the knobs leave it alone), ragged
])
def test_candidates_on_gpu(candidate, B, H, Hkv, Sq, Sk, D, causal, dtype):
    check_dense_calls(B, H, Hkv, Sq, Sk, D, causal, dtype, lambda: _was_asked_for(candidate, D))


def test_varlen_candidates_on_gpu(candidate):
    check_varlen_calls(12, lambda D: _was_asked_for(candidate, D))


@pytest.mark.parametrize("ws", [False, True])
@pytest.mark.parametrize("M, N, K, bm, bn, bk, dtype, threads, trans_B", [
    (1024, 1024, 1024, 128, 256, 64, "bfloat16", 256, False), (1000, 1000, 1000, 128, 128, 64, "float16", 128, True),
    (512, 768, 4096, 128, 128, 64, "bfloat16", 256, True)])
def test_fold_gemms_on_gpu(M, N, K, bm, bn, bk, dtype, threads, trans_B, ws):
    """wgmma GEMMs (warp-specialized or not) with the fold against float64 (test_gpu_wgmma's check)."""
    from test_gpu_wgmma import _check, _uses_wgmma
    f = matmul(M, N, K, bm, bn, bk, dtype=dtype, out_dtype="float32", trans_B=trans_B, num_stages=3, threads=threads)
    kern = tilewright.compile(f, target="cuda", pass_configs={"tw.enable_wgmma": True, "tw.warp_specialize": ws,
                                                              "tw.wgmma_desc_fold": True})
    _uses_wgmma(kern)
    assert "ull) + " in kern.get_kernel_source()
    _check(kern, M, N, K, dtype, trans_B)
