"""Session 12's sm_90a candidates for head dim 64 causal (bench/attention_variants.py ``TW_VARIANTS=s12``):

- ``attention_dispatch.HOPPER_D64_STAGE_OUT``: the output stored by each consumer thread (False) instead of
  staged through shared memory and stored by TMA behind two block-wide barriers per work item (True), or
  staged for non-causal calls only ("noncausal", shipped since the H200 run of session 12);
- ``attention_dispatch.HOPPER_D64_STAGES`` 3: a third K/V stage at head dim 64 (slower on the H200: off);
- the pass config ``tw.wgmma_desc_fold`` (in ``HOPPER_D64_OVERRIDES`` for the candidate): a wgmma operand's
  descriptor printed as its tile's first element's descriptor plus a constant (passes/lower_gemm.py), so that
  the K steps of a gemm share one descriptor computation (38 of 485 SASS instructions less a key block in the
  d 64 loop; slower on the H200 all the same: off); the emulator decodes the same sum.

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


FOLD = {"HOPPER_D64_OVERRIDES": {**dispatch.HOPPER_D64_OVERRIDES, "tw.wgmma_desc_fold": True}}
DIRECT = {"HOPPER_D64_STAGE_OUT": False}
THREE = {"HOPPER_D64_STAGES": 3}


def _staged(causal) -> bool:
    """Does HOPPER_D64_STAGE_OUT, as set now, stage a d 64 call's output?"""
    value = dispatch.HOPPER_D64_STAGE_OUT
    return value is True or value == "noncausal" and not causal


def _stages_out(k) -> bool:
    """Does the kernel stage its output tile through shared memory (a TMA store from O_s)?"""
    return "O_s" in k.get_kernel_source()


@pytest.mark.parametrize("knobs", [DIRECT, FOLD, {**DIRECT, **FOLD}, THREE, {**DIRECT, **THREE}],
                         ids=["direct", "fold", "direct+fold", "3st", "direct+3st"])
@pytest.mark.parametrize("persistent", [True, False])
@pytest.mark.parametrize("B, H, Hkv, Sq, Sk, causal, dtype", [
    (1, 2, 1, 300, 333, True, torch.bfloat16),    # GQA, ragged: the last query block's rows checked
    (1, 2, 2, 333, 200, True, torch.float16),     # more queries than keys: the first rows see no key
    (1, 2, 1, 256, 384, True, torch.bfloat16),    # even lengths: the kernel without tail handling, diagonal masks
    (1, 1, 1, 200, 290, False, torch.float16),    # ragged, non-causal
    (2, 2, 1, 256, 256, False, torch.bfloat16),   # even, non-causal, two sequences
])
def test_d64_candidates(monkeypatch, knobs, persistent, B, H, Hkv, Sq, Sk, causal, dtype):
    setup, used = _on_cpu(monkeypatch, persistent, PERSISTENT_ORDER="pairs", **knobs)
    try:
        flags, k = _dense_case(used, persistent, B, H, Hkv, Sq, Sk, 64, causal, dtype, Sq + Sk + B + persistent)
        assert flags[8:11] == (128, 128, knobs.get("HOPPER_D64_STAGES", 2))
        assert _stages_out(k) == _staged(causal) and _configs(used)["tw.pingpong"]
        assert ("ull) + 2ull)" in k.get_kernel_source()) == ("HOPPER_D64_OVERRIDES" in knobs)  # (K's 2nd step)
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


@pytest.mark.parametrize("knobs", [DIRECT, {**DIRECT, **THREE}], ids=["direct", "direct+3st"])
def test_direct_output_split_kv(monkeypatch, knobs):
    """A causal d 64 call on a padded KV cache (key counts 300 and 93) in two split-KV ranges: the direct store
    writes float32 partials (each split's rows), merged by the combine kernel."""
    from shared_attention_emulator import check_split_kv
    setup, used = _on_cpu(monkeypatch, True, PERSISTENT_ORDER="pairs", **knobs)
    try:
        kern = check_split_kv(used, 1213, dim=64)
        flags, _ = _sm90_kernel(used, True)
        assert flags[3] == 2 and not _stages_out(kern)  # (two splits, float32 partials stored directly)
    finally:
        setup.close()


@pytest.mark.parametrize("value, causal, staged", [
    (True, True, True), (True, False, True), (False, True, False), (False, False, False),
    ("noncausal", True, False), ("noncausal", False, True)])
def test_the_stage_out_knob_plans(monkeypatch, value, causal, staged):
    """The knob decides the d 64 kernels' stage_out (in their key, after the pass configs); d 128 keeps staging.
    Shipped: "noncausal" (the H200 run of session 12: causal d 64 faster with the direct store, non-causal not)."""
    assert dispatch.HOPPER_D64_STAGE_OUT == "noncausal"
    monkeypatch.setattr(dispatch, "HOPPER_D64_STAGE_OUT", value)
    assert _planned_key(monkeypatch, causal, 4096, 64)[0][8] is staged
    assert _planned_key(monkeypatch, causal, 4096, 128)[0][8] is True


@needs_nvrtc
@pytest.mark.parametrize("causal, persistent", [(True, 132), (True, 0), (False, 0), (False, 132)])
@pytest.mark.parametrize("even", [True, False])
@pytest.mark.parametrize("stage_out, fold, stages", [(False, False, 2), (False, True, 2), (True, True, 2),
                                                     (True, False, 3), (False, False, 3)])
def test_candidates_build_without_spills(causal, persistent, even, stage_out, fold, stages):
    from tilewright.toolchain import nvrtc
    f = ak.attention_fwd(16, 16, 64, "bfloat16", "bfloat16", causal, False, False, 1, False, False, False, False,
                         128, 128, stages, 256, stage_out=stage_out, even_q=even, even_k=even, persistent=persistent,
                         order="pairs")
    configs = {**dispatch.HOPPER_CONFIGS, **dispatch.HOPPER_D64_OVERRIDES, "tw.wgmma_desc_fold": fold}
    k = tilewright.compile(f, target="cuda -arch=sm_90a", pass_configs=configs)
    res = nvrtc.compile_cuda(k.get_kernel_source(), "sm_90a", ["attention_fwd_kernel_kernel"]).resources
    assert res["attention_fwd_kernel_kernel"]["spills"] == 0, res
    assert res["attention_fwd_kernel_kernel"]["local_bytes"] == 0, res
    assert k.spec.shared_bytes <= 232448


def test_the_stages_knob_plans(monkeypatch):
    """HOPPER_D64_STAGES sets the K/V ring of d 64 calls (4k causal and not; it fits beside Q and the staged
    output tile), not of d 128."""
    assert dispatch.HOPPER_D64_STAGES == 2
    monkeypatch.setattr(dispatch, "HOPPER_D64_STAGES", 3)
    for causal in (True, False):
        assert _planned_key(monkeypatch, causal, 4096, 64)[0][19] == 3
        assert _planned_key(monkeypatch, causal, 4096, 128)[0][19] == 2


# ---------------------------------------------------------------- tw.wgmma_desc_fold alone
def test_the_fold_is_the_same_descriptor():
    """desc(a) + s == desc(a + 16 s) for every 16-byte aligned shared address pair of an H200 block (232448
    bytes): the start-address field is the low 14 bits, address / 16, and never carries into the LBO field."""
    import numpy as np

    from tilewright.target.matrix import wgmma_descriptor
    top = 232448
    for lbo, sbo, swz in [(16, 1024, 128), (16384, 1024, 128), (16, 512, 64), (4096, 256, 32)]:
        for step in (1, 2, 6, 128, 896, top // 16 - 1):
            for a in np.r_[0:top - 16 * step:16 * 37, top - 16 * step - 16]:
                a = int(a)
                assert wgmma_descriptor(a, lbo, sbo, swz) + step == wgmma_descriptor(a + 16 * step, lbo, sbo, swz)


def test_byte_step_matches_terms_structurally():
    from tilewright.ir import expr as E
    from tilewright.passes.lower_gemm import _byte_step
    x, y, x2 = E.Var("x"), E.Var("y"), E.Var("x")
    base = x % 2 * 8192 + y * 64
    assert _byte_step(base + 16, base, 2) == 2
    assert _byte_step(x % 2 * 8192 + y * 64 + 1024, base, 2) == 128  # rebuilt alike: same terms
    assert _byte_step(base + 4, base, 2) == 0  # 8 bytes: not a descriptor step
    assert _byte_step(base, base + 16, 2) == 0  # below the base
    assert _byte_step(x2 % 2 * 8192 + y * 64 + 16, base, 2) == 0  # another variable of the same name
    assert _byte_step((x ^ 2) * 8 + y, (x ^ 0) * 8 + y, 2) == 0  # a swizzled (XOR) step: not a constant


@pytest.mark.parametrize("M, N, K, bm, bn, bk, dtype, threads, trans_B", [
    (128, 128, 192, 64, 128, 64, "float16", 128, False), (128, 256, 128, 128, 256, 64, "bfloat16", 256, True),
    (100, 120, 200, 64, 128, 64, "bfloat16", 128, True)])
def test_the_fold_in_gemms_on_the_emulator(M, N, K, bm, bn, bk, dtype, threads, trans_B):
    """wgmma GEMMs (K-major and MN-major B, ragged) lowered with the fold, run by the emulator (which decodes
    the folded descriptors) against float64 with a NaN-filled output."""
    from test_wgmma import _run_gemm
    k, mm = _run_gemm(M, N, K, bm, bn, bk, dtype, threads, trans_B, seed=M + K, **{"tw.wgmma_desc_fold": True})
    assert any(w.b.base is not None for w in mm)
