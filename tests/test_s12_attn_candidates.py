"""Session 12's sm_90a candidates for head dim 64 causal (bench/attention_variants.py ``TW_VARIANTS=s12``):

- ``attention_dispatch.HOPPER_D64_STAGE_OUT``: the output stored by each consumer thread (False) instead of
  staged through shared memory and stored by TMA behind two block-wide barriers per work item (True, shipped),
  or staged for non-causal calls only ("noncausal").

Each run by the cooperative emulator (which checks the mbarrier protocol, slot reuse and that no register of
an unretired wgmma is touched) on the grid and the persistent kernel against float64 with poisoned outputs:
causal and not, ragged lengths (the row checks of the direct store), S_q != S_k both ways (rows that see no
key), GQA, the LSE, varlen with an empty sequence; the plans the knob gives; and the H200 kernels built with
NVRTC without spills."""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")

from test_ops_attention import _varlen_case  # noqa: E402
from test_s8_attnp_persistent import check_varlen  # noqa: E402
from test_s9_causal_stages import _dense_case, _on_cpu, _planned_key, _sm90_kernel  # noqa: E402
from toolchains import needs_nvrtc  # noqa: E402

import tilewright  # noqa: E402
from tilewright import ops  # noqa: E402
from tilewright.ops import attention_kernels as ak  # noqa: E402

dispatch = importlib.import_module("tilewright.ops.attention_dispatch")


def _stages_out(k) -> bool:
    """Does the kernel stage its output tile through shared memory (a TMA store from O_s)?"""
    return "O_s" in k.get_kernel_source()


@pytest.mark.parametrize("persistent", [True, False])
@pytest.mark.parametrize("B, H, Hkv, Sq, Sk, causal, dtype", [
    (1, 2, 1, 300, 333, True, torch.bfloat16),    # GQA, ragged: the last query block's rows checked
    (1, 2, 2, 333, 200, True, torch.float16),     # more queries than keys: the first rows see no key
    (1, 2, 1, 256, 384, True, torch.bfloat16),    # even lengths: the kernel without tail handling, diagonal masks
    (1, 1, 1, 200, 290, False, torch.float16),    # ragged, non-causal
    (2, 2, 1, 256, 256, False, torch.bfloat16),   # even, non-causal, two sequences
])
def test_direct_output_stores(monkeypatch, persistent, B, H, Hkv, Sq, Sk, causal, dtype):
    setup, used = _on_cpu(monkeypatch, persistent, HOPPER_D64_STAGE_OUT=False, PERSISTENT_ORDER="pairs")
    try:
        flags, k = _dense_case(used, persistent, B, H, Hkv, Sq, Sk, 64, causal, dtype, Sq + Sk + B + persistent)
        assert flags[8:11] == (128, 128, 2)
        assert not _stages_out(k) and _configs(used)["tw.pingpong"]
    finally:
        setup.close()


def _configs(used):
    return [c for key, c, _ in used if key[0] == "attention" and c][-1]


@pytest.mark.parametrize("causal", [True, False])
def test_direct_output_varlen(monkeypatch, causal):
    """Packed sequences (one empty, one without keys), GQA, d 64, on the persistent kernel: items whose key
    loops have 0, 1 and 2 steps, each storing only its sequence's rows."""
    setup, used = _on_cpu(monkeypatch, True, HOPPER_D64_STAGE_OUT=False, PERSISTENT_ORDER="pairs")
    try:
        g = torch.Generator().manual_seed(1212 + causal)
        lens_q, lens_k = [70, 0, 140, 200], [90, 30, 250, 0]
        q, k, v, cu_q, cu_k = _varlen_case(g, lens_q, lens_k, 2, 1, 64)
        out, lse = ops.attention(q, k, v, causal=causal, return_lse=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
        check_varlen(q, k, v, cu_q, cu_k, lens_q, out, lse, causal)
        assert not _stages_out(_sm90_kernel(used, True)[1])
    finally:
        setup.close()


@pytest.mark.parametrize("value, causal, staged", [
    (True, True, True), (True, False, True), (False, True, False), (False, False, False),
    ("noncausal", True, False), ("noncausal", False, True)])
def test_the_stage_out_knob_plans(monkeypatch, value, causal, staged):
    """The knob decides the d 64 kernels' stage_out (in their key, after the pass configs); d 128 keeps staging."""
    assert dispatch.HOPPER_D64_STAGE_OUT is True  # (shipped: unchanged until measured)
    monkeypatch.setattr(dispatch, "HOPPER_D64_STAGE_OUT", value)
    assert _planned_key(monkeypatch, causal, 4096, 64)[0][8] is staged
    assert _planned_key(monkeypatch, causal, 4096, 128)[0][8] is True


@needs_nvrtc
@pytest.mark.parametrize("causal, persistent", [(True, 132), (True, 0), (False, 0), (False, 132)])
@pytest.mark.parametrize("even", [True, False])
def test_direct_output_builds_without_spills(causal, persistent, even):
    from tilewright.toolchain import nvrtc
    f = ak.attention_fwd(16, 16, 64, "bfloat16", "bfloat16", causal, False, False, 1, False, False, False, False,
                         128, 128, 2, 256, stage_out=False, even_q=even, even_k=even, persistent=persistent,
                         order="pairs")
    configs = {**dispatch.HOPPER_CONFIGS, **dispatch.HOPPER_D64_OVERRIDES}
    k = tilewright.compile(f, target="cuda -arch=sm_90a", pass_configs=configs)
    res = nvrtc.compile_cuda(k.get_kernel_source(), "sm_90a", ["attention_fwd_kernel_kernel"]).resources
    assert res["attention_fwd_kernel_kernel"]["spills"] == 0, res
    assert res["attention_fwd_kernel_kernel"]["local_bytes"] == 0, res
