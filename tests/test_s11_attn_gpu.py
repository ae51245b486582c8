"""Session 11's sm_90a attention candidates (tests/test_s11_fma_exp2.py runs them in the emulator) on an
sm_90 GPU (H100/H200): ``tw.reduce_tree`` (the softmax's row max and sum folded as trees) at head dim 64 and
128, ``attention_dispatch.HOPPER_D64_FMA_EXP2`` (part of the 2**x on the FMA pipe) with and without the tree
and without ping-pong, and the "head_major_snake" order for causal persistent calls: ``ops.attention``
against float64 with NaN-poisoned outputs (causal and not, ragged, S_q != S_k both ways, GQA, the LSE, varlen
with empty sequences), a repeat call from pointers, and the kernel checked to be the one asked for.  Skipped
without such a GPU."""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")
if not (torch.cuda.is_available() and not getattr(torch.version, "hip", None)
        and torch.cuda.get_device_capability() == (9, 0)):
    pytest.skip("needs an sm_90 NVIDIA GPU with a CUDA build of PyTorch", allow_module_level=True)

from shared_gpu_attention import check_varlen_calls, record_attention_kernels  # noqa: E402
from test_s8_attnp_gpu import _rand, _rel, reference  # noqa: E402

from tilewright import ops  # noqa: E402

dispatch = importlib.import_module("tilewright.ops.attention_dispatch")
PP_OV = {"tw.pingpong": True, "tw.attention_overlap": True}
TREE = {"tw.reduce_tree": True}
CANDIDATES = {
    "shipped": {},  # (since the 05:02 run: the tree at d 64, "head_major_snake" for short causal calls)
    "tree": {"HOPPER_D64_OVERRIDES": {**PP_OV, **TREE}, "HOPPER_CONFIGS": {**dispatch.HOPPER_CONFIGS, **TREE}},
    "fma 1/4": {"HOPPER_D64_FMA_EXP2": (1, 4)},
    "fma 3/8 grid": {"HOPPER_D64_FMA_EXP2": (3, 8), "PERSISTENT": False},
    "tree fma 1/4 no-pp": {"HOPPER_D64_OVERRIDES": {"tw.attention_overlap": True, **TREE},
                           "HOPPER_D64_FMA_EXP2": (1, 4)},
    "hm-snake": {"PERSISTENT_ORDER": "head_major_snake"},
    "3wg tree fma 1/4": {"HOPPER_D64_NONCAUSAL_BLOCKS": (192, 128), "HOPPER_D64_FMA_EXP2": (1, 4),
                         "HOPPER_D64_OVERRIDES": {**PP_OV, **TREE}},
}


@pytest.fixture(params=list(CANDIDATES))
def candidate(request, monkeypatch):
    """The candidate's knobs, outputs poisoned; the forward kernels built are recorded (key, kernel)."""
    built = record_attention_kernels(monkeypatch)
    for name, value in CANDIDATES[request.param].items():
        monkeypatch.setattr(dispatch, name, value)
    dispatch.forget_plans()
    yield built
    dispatch.forget_plans()


def _was_asked_for(built, D):
    key, k = built[-1]
    configs = dict(key[7])  # (after the name, head counts, dim, dtypes and target: the pass configs)
    src = k.get_kernel_source()
    assert "wgmma" in src
    assert ("12582912.0f" in src) == (D <= 64 and dispatch.HOPPER_D64_FMA_EXP2 is not None)
    want_tree = (dispatch.HOPPER_D64_OVERRIDES if D <= 64 else dispatch.HOPPER_CONFIGS).get("tw.reduce_tree", False)
    assert configs.get("tw.reduce_tree", False) == want_tree


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("B, H, Hkv, Sq, Sk, D, causal", [
    (1, 16, 16, 4096, 4096, 64, True),    # the d64 shapes (one batch): persistent causal
    (1, 16, 16, 4096, 4096, 64, False),   # grid kernel, no tail handling
    (3, 5, 5, 700, 300, 64, True),        # Sq > Sk at d 64: rows without keys
    (2, 8, 4, 777, 900, 64, False),       # non-causal, GQA, ragged
    (1, 8, 2, 1000, 1337, 64, True),      # GQA, ragged, Sq < Sk
    (4, 16, 16, 1024, 1024, 128, True),   # short causal d 128
    (1, 8, 2, 2000, 1500, 128, True),     # GQA, Sq > Sk, long causal
    (2, 8, 4, 777, 900, 128, False),      # non-causal d 128, ragged
])
def test_candidates_on_gpu(candidate, B, H, Hkv, Sq, Sk, D, causal, dtype):
    torch.manual_seed(B * H + Sq + D)
    q, k, v = _rand(B, H, Sq, D, dtype=dtype), _rand(B, Hkv, Sk, D, dtype=dtype), _rand(B, Hkv, Sk, D, dtype=dtype)
    out, lse = ops.attention(q, k, v, causal=causal, return_lse=True)
    want, want_lse = reference(q, k, v, causal)
    tol = 3e-3 * (4 if dtype == torch.bfloat16 else 1)
    assert _rel(out, want) < tol
    finite = torch.isfinite(want_lse)
    assert torch.equal(torch.isfinite(lse), finite)
    assert (lse.double()[finite] - want_lse[finite]).abs().max().item() < 1e-3
    _was_asked_for(candidate, D)
    q2 = _rand(B, H, Sq, D, dtype=dtype)  # a repeat call (the plan's bound launch from pointers)
    assert _rel(ops.attention(q2, k, v, causal=causal), reference(q2, k, v, causal)[0]) < tol


def test_varlen_candidates_on_gpu(candidate):
    check_varlen_calls(6)
