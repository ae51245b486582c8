"""Session 13's sm_90a candidates (tests/test_s13_attn_candidates.py runs them in the emulator) on an sm_90 GPU
(H100/H200): the pass config ``tw.uniform_ring`` at head dim 64 (the persistent kernel's ring position broadcast
from lane 0 once a key step), alone, with ``tw.wgmma_desc_fold`` and with the head-major persistent order:
``ops.attention`` against float64 with NaN-poisoned outputs (causal and not, ragged, S_q != S_k both ways, GQA,
the LSE, varlen with empty sequences), a repeat call from pointers, the kernel checked to be the one asked for.
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
D64 = dispatch.HOPPER_D64_OVERRIDES
CANDIDATES = {"uniform": {"HOPPER_D64_OVERRIDES": {**D64, "tw.uniform_ring": True}},
              "uniform fold": {"HOPPER_D64_OVERRIDES": {**D64, "tw.uniform_ring": True, "tw.wgmma_desc_fold": True}},
              "uniform hm-snake": {"HOPPER_D64_OVERRIDES": {**D64, "tw.uniform_ring": True},
                                   "PERSISTENT_ORDER": "head_major_snake"}}


@pytest.fixture(params=list(CANDIDATES))
def candidate(request, monkeypatch):
    """The candidate's knobs, outputs poisoned; the forward kernels built are recorded (key, kernel)."""
    yield from with_knobs(monkeypatch, CANDIDATES[request.param])


def _was_asked_for(built, D):
    key, k = built[-1]
    src = k.get_kernel_source()
    assert "wgmma" in src
    # the warp-specialized persistent kernel (its tile loop, the register split) at d 64 broadcasts its ring
    # position; no other kernel broadcasts anything
    specialized = "for (int r = 0; r < " in src and "setmaxnreg" in src
    broadcasts = src.count("tw_lane0(") - src.count("int tw_lane0(int x)")
    assert (broadcasts > 0) == (D <= 64 and specialized)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("B, H, Hkv, Sq, Sk, D, causal", [
    (4, 16, 16, 4096, 4096, 64, True),    # the d64 causal shape: persistent, pairs
    (1, 16, 16, 4096, 4096, 64, False),   # grid kernel, no tail handling
    (3, 5, 5, 700, 300, 64, True),        # Sq > Sk at d 64: rows without keys
    (2, 8, 4, 777, 900, 64, False),       # non-causal, GQA, ragged (persistent: 8 key blocks)
    (1, 8, 2, 1000, 1337, 64, True),      # GQA, ragged, Sq < Sk
    (2, 8, 4, 777, 900, 128, True),       # d 128 (the knobs leave it alone), ragged
])
def test_candidates_on_gpu(candidate, B, H, Hkv, Sq, Sk, D, causal, dtype):
    check_dense_calls(B, H, Hkv, Sq, Sk, D, causal, dtype, lambda: _was_asked_for(candidate, D))


def test_varlen_candidates_on_gpu(candidate):
    check_varlen_calls(13, lambda D: _was_asked_for(candidate, D))
