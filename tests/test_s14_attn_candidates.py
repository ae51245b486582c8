"""Session 14's sm_90a candidates (bench/attention_variants.py ``TW_VARIANTS=s14``):

- ``attention_dispatch.HOPPER_D64_CAUSAL_BLOCKS`` (192, 128): causal head dim <= 64 on three consumer warpgroups
  (192-row query blocks, FlashAttention-3's tile there), the grid kernel;
- ``attention_dispatch.PREFILL_PDL``: the forward kernels start with ``griddepcontrol.wait`` (``T.pdl_sync``) and
  launch with programmatic stream serialization; ``passes/warp_specialize_loop`` puts the wait ahead of both roles
  (the producer's TMA loads must wait too), after the rings' mbarrier set-up.

Each run by the cooperative emulator (which checks the mbarrier protocol and slot reuse) against float64 with
NaN-poisoned outputs: causal and not, ragged lengths, S_q != S_k both ways, GQA, the LSE, varlen with an empty
sequence; the H200 kernels built with NVRTC without spills."""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")

from shared_attention_emulator import check_varlen, dense_call  # noqa: E402
from test_ops_attention import _varlen_case  # noqa: E402
from test_s9_causal_stages import _on_cpu  # noqa: E402
from toolchains import needs_nvrtc  # noqa: E402

import tilewright  # noqa: E402
from tilewright import ops  # noqa: E402
from tilewright.ops import attention_kernels as ak  # noqa: E402

dispatch = importlib.import_module("tilewright.ops.attention_dispatch")
WAIT = "griddepcontrol.wait;"


def _last_sm90(used):
    """(key, kernel) of the last sm_90a attention forward built."""
    hits = [(key, k) for key, cfg, k in used if key[0] == "attention" and cfg]
    assert hits, "the sm_90a path was not taken"
    return hits[-1]


# ---------------------------------------------------------------- three consumer warpgroups, causal d 64
@pytest.mark.parametrize("B, H, Hkv, Sq, Sk, dtype", [
    (1, 2, 1, 300, 333, torch.bfloat16),   # GQA, ragged: a 192-row block's diagonal across two key blocks
    (1, 2, 2, 333, 200, torch.float16),    # more queries than keys: rows and whole blocks without keys
    (1, 2, 1, 384, 384, torch.bfloat16),   # even lengths: no tail handling (384 = 2 x 192 = 3 x 128)
    (2, 1, 1, 150, 500, torch.float16),    # one query block shorter than 192 rows, Sq < Sk
])
def test_d64_causal_three_warpgroups(monkeypatch, B, H, Hkv, Sq, Sk, dtype):
    setup, used = _on_cpu(monkeypatch, True, HOPPER_D64_CAUSAL_BLOCKS=(192, 128))
    try:
        dense_call(B, H, Hkv, Sq, Sk, 64, True, dtype, Sq * 7 + Sk + B)
        key, k = _last_sm90(used)
        src = k.get_kernel_source()
        # the grid kernel (no second Q slot) of 3 consumer warpgroups + the producer, 192 x 128 blocks, 2 stages
        assert k.num_threads == 512 and "setmaxnreg.inc" in src and "Q_s_empty" not in src
        assert key[17:20] == (192, 128, 2) and key[21:23] == (Sq % 192 == 0, Sk % 128 == 0)
        assert k.spec.shared_bytes <= 232448
    finally:
        setup.close()


@pytest.mark.parametrize("Sq, Sk", [(300, 333), (384, 384)])
def test_d64_causal_three_warpgroups_staged(monkeypatch, Sq, Sk):
    """With HOPPER_D64_STAGE_OUT True the 192-row causal blocks store their output through shared memory (TMA)."""
    setup, used = _on_cpu(monkeypatch, True, HOPPER_D64_CAUSAL_BLOCKS=(192, 128), HOPPER_D64_STAGE_OUT=True)
    try:
        dense_call(1, 2, 1, Sq, Sk, 64, True, torch.bfloat16, Sq + Sk)
        key, k = _last_sm90(used)
        assert k.num_threads == 512 and key[8] is True and "cp.async.bulk.tensor.2d.global.shared" in \
            k.get_kernel_source()
    finally:
        setup.close()


@pytest.mark.parametrize("persistent", [True, False])
@pytest.mark.parametrize("B, H, Hkv, Sq, Sk, dtype", [
    (1, 2, 1, 300, 333, torch.bfloat16),   # GQA, ragged: a 192-row block's diagonal across four 64-key blocks
    (1, 2, 2, 333, 200, torch.float16),    # more queries than keys: rows and whole blocks without keys
    (1, 2, 1, 384, 384, torch.bfloat16),   # even lengths: no tail handling
])
def test_d64_causal_three_warpgroups_n64(monkeypatch, persistent, B, H, Hkv, Sq, Sk, dtype):
    """HOPPER_D64_CAUSAL_BLOCKS (192, 64): the overlap fits (P V one key block behind); with
    HOPPER_D64_CAUSAL_PERSISTENT the persistent kernel ("pairs", several items a block) at any key count."""
    setup, used = _on_cpu(monkeypatch, True, HOPPER_D64_CAUSAL_BLOCKS=(192, 64), PERSISTENT_ORDER="pairs",
                          HOPPER_D64_CAUSAL_PERSISTENT=persistent)
    try:
        dense_call(B, H, Hkv, Sq, Sk, 64, True, dtype, Sq * 3 + Sk + persistent)
        key, k = _last_sm90(used)
        src = k.get_kernel_source()
        assert k.num_threads == 512 and key[17:19] == (192, 64) and ("Q_s_empty" in src) == persistent
        assert "wgmma.wait_group.sync.aligned 1;" in src
    finally:
        setup.close()


def test_d64_causal_three_warpgroups_n64_persistent_varlen(monkeypatch):
    setup, used = _on_cpu(monkeypatch, True, HOPPER_D64_CAUSAL_BLOCKS=(192, 64), HOPPER_D64_CAUSAL_PERSISTENT=True)
    try:
        _varlen(used, True, 1416)
        assert "Q_s_empty" in _last_sm90(used)[1].get_kernel_source()
    finally:
        setup.close()


def test_d64_causal_three_warpgroups_varlen(monkeypatch):
    setup, used = _on_cpu(monkeypatch, True, HOPPER_D64_CAUSAL_BLOCKS=(192, 128))
    try:
        _varlen(used, True, 1414)
        assert _last_sm90(used)[1].num_threads == 512
    finally:
        setup.close()


def test_the_causal_knob_leaves_other_calls_alone(monkeypatch):
    """Non-causal d 64 and causal d 128 keep their blocks with HOPPER_D64_CAUSAL_BLOCKS set."""
    assert dispatch.HOPPER_D64_CAUSAL_BLOCKS is None
    setup, used = _on_cpu(monkeypatch, True, HOPPER_D64_CAUSAL_BLOCKS=(192, 128))
    try:
        dense_call(1, 1, 1, 200, 200, 64, False, torch.bfloat16, 3)
        assert _last_sm90(used)[0][17:19] == (128, 128)
        dense_call(1, 1, 1, 200, 200, 128, True, torch.bfloat16, 4)
        assert _last_sm90(used)[0][17] == 128
    finally:
        setup.close()


def _varlen(used, causal, seed):
    """Packed sequences (one empty, one without keys), GQA 2 on 1, d 64, checked against float64."""
    g = torch.Generator().manual_seed(seed)
    lens_q, lens_k = [70, 0, 210, 200], [90, 30, 250, 0]
    q, k, v, cu_q, cu_k = _varlen_case(g, lens_q, lens_k, 2, 1, 64)
    out, lse = ops.attention(q, k, v, causal=causal, return_lse=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    check_varlen(q, k, v, cu_q, cu_k, lens_q, out, lse, causal)


# ---------------------------------------------------------------- 192-row non-causal blocks with the overlap
@pytest.mark.parametrize("B, H, Hkv, Sq, Sk, dtype, overlapped", [
    (1, 2, 1, 384, 384, torch.bfloat16, True),    # lengths that divide the blocks: the overlap, GQA
    (2, 1, 1, 192, 256, torch.float16, True),
    (1, 2, 1, 200, 290, torch.bfloat16, False),   # ragged: the loop as without the knob (it would spill)
])
def test_d64_noncausal_three_warpgroups_overlap(monkeypatch, B, H, Hkv, Sq, Sk, dtype, overlapped):
    setup, used = _on_cpu(monkeypatch, True, HOPPER_D64_NONCAUSAL_BLOCKS=(192, 128), HOPPER_D64_3WG_OVERLAP=True)
    try:
        dense_call(B, H, Hkv, Sq, Sk, 64, False, dtype, Sq + Sk + B)
        key, k = _last_sm90(used)
        src = k.get_kernel_source()
        assert k.num_threads == 512 and key[17:19] == (192, 128)
        assert (("tw.attention_overlap_registers", 32) in key[7]) == overlapped
        assert ("wgmma.wait_group.sync.aligned 1;" in src) == overlapped  # (P V one key block behind)
    finally:
        setup.close()


# ---------------------------------------------------------------- programmatic dependent launch
def _check_pdl(k):
    """One wait, after the mbarrier set-up's block barrier and before both roles; launched programmatically."""
    src = k.get_kernel_source()
    assert src.count(WAIT) == 1 and k.spec.programmatic
    if "thread partition producer" in src:
        assert src.index("__syncthreads();") < src.index(WAIT) < src.index("thread partition producer")
        assert src.index("prefetch.tensormap") < src.index(WAIT)


@pytest.mark.parametrize("persistent", [True, False])
@pytest.mark.parametrize("B, H, Hkv, Sq, Sk, D, causal, dtype", [
    (1, 2, 1, 300, 333, 64, True, torch.bfloat16),    # GQA, ragged
    (1, 2, 2, 333, 200, 64, True, torch.float16),     # more queries than keys
    (1, 1, 1, 256, 384, 64, False, torch.bfloat16),   # even lengths, the staged output store
    (1, 2, 1, 200, 290, 128, False, torch.float16),   # d 128, ragged
])
def test_pdl(monkeypatch, persistent, B, H, Hkv, Sq, Sk, D, causal, dtype):
    setup, used = _on_cpu(monkeypatch, persistent, PREFILL_PDL=True, PERSISTENT_ORDER="pairs")
    try:
        dense_call(B, H, Hkv, Sq, Sk, D, causal, dtype, Sq + Sk + D + persistent)
        key, k = _last_sm90(used)
        assert ("Q_s_empty" in k.get_kernel_source()) == persistent
        assert ("tw.pdl_prologue", True) in key[7]
        _check_pdl(k)
    finally:
        setup.close()


@pytest.mark.parametrize("causal", [True, False])
def test_pdl_varlen_and_three_warpgroups(monkeypatch, causal):
    setup, used = _on_cpu(monkeypatch, True, PREFILL_PDL=True, HOPPER_D64_CAUSAL_BLOCKS=(192, 128),
                          HOPPER_D64_NONCAUSAL_BLOCKS=(192, 128))
    try:
        _varlen(used, causal, 1415 + causal)
        _, k = _last_sm90(used)
        assert k.num_threads == 512
        _check_pdl(k)
    finally:
        setup.close()


def test_pdl_off_by_default_and_split_kv(monkeypatch):
    """Off by default (no wait, plain launch); a split-KV call with it: the forward waits, the combine is as before."""
    assert dispatch.PREFILL_PDL is False
    setup, used = _on_cpu(monkeypatch, True)
    try:
        dense_call(1, 1, 1, 200, 200, 64, True, torch.bfloat16, 5)
        _, k = _last_sm90(used)
        assert WAIT not in k.get_kernel_source() and not k.spec.programmatic
    finally:
        setup.close()
    setup, used = _on_cpu(monkeypatch, True, PREFILL_PDL=True)
    try:
        from shared_attention_emulator import check_split_kv
        check_split_kv(used, 16, dim=64)
        _check_pdl(_last_sm90(used)[1])
        combine = [k for key, cfg, k in used if key[0] == "attention_combine"]
        assert combine and all(WAIT not in c.get_kernel_source() for c in combine)
    finally:
        setup.close()


def test_unspecialized_kernel_keeps_its_wait_in_place():
    """A kernel the pass leaves alone (one consumer warpgroup, no explicit tw.warp_specialize) is unchanged:
    its wait stays where the program put it, after the block's first statements."""
    f = ak.attention_fwd(1, 1, 64, "bfloat16", "bfloat16", True, False, False, 1, False, False, False, False, 64, 64,
                         2, 128, pdl=True)
    k = tilewright.compile(f, target="cuda -arch=sm_90a", pass_configs={"tw.enable_wgmma": True})
    src = k.get_kernel_source()
    assert "setmaxnreg" not in src and src.count(WAIT) == 1 and k.spec.programmatic


# ---------------------------------------------------------------- the H200 kernels: NVRTC, no spills
def _nvrtc(causal, even, persistent, bm, pdl, stage_out=False, dim=64, dtype="bfloat16", configs=None, bn=128):
    from tilewright.toolchain import nvrtc
    f = ak.attention_fwd(16, 16, dim, dtype, dtype, causal, False, False, 1, False, False, False, False,
                         bm, bn, 2, 2 * bm if bm == 128 else 3 * 128, stage_out=stage_out, even_q=even,
                         even_k=even, persistent=persistent, order="pairs", pdl=pdl)
    configs = {**dispatch.HOPPER_CONFIGS, **(dispatch.HOPPER_D64_OVERRIDES if dim == 64 else {}),
               "tw.pdl_prologue": pdl, **(configs or {})}
    k = tilewright.compile(f, target="cuda -arch=sm_90a", pass_configs=configs)
    res = nvrtc.compile_cuda(k.get_kernel_source(), "sm_90a", ["attention_fwd_kernel_kernel"]).resources
    assert res["attention_fwd_kernel_kernel"]["spills"] == 0, res
    assert res["attention_fwd_kernel_kernel"]["local_bytes"] == 0, res
    return k


@needs_nvrtc
@pytest.mark.parametrize("even", [True, False])
@pytest.mark.parametrize("pdl", [True, False])
@pytest.mark.parametrize("stage_out", [True, False])
def test_three_warpgroups_causal_builds_without_spills(even, pdl, stage_out):
    _nvrtc(True, even, 0, 192, pdl, stage_out)


@needs_nvrtc
@pytest.mark.parametrize("causal, persistent, stage_out, dim", [
    (True, 132, False, 64), (True, 0, False, 64), (False, 0, True, 64), (True, 132, True, 128),
    (False, 132, True, 128), (True, 0, True, 128)])
def test_pdl_builds_without_spills(causal, persistent, stage_out, dim):
    _check_pdl(_nvrtc(causal, False, persistent, 128, True, stage_out, dim))


@needs_nvrtc
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("pdl", [True, False])
def test_three_warpgroups_overlap_builds_without_spills(dtype, pdl):
    """The kernel HOPPER_D64_3WG_OVERLAP takes (non-causal, lengths that divide the blocks, staged store)."""
    k = _nvrtc(False, True, 0, 192, pdl, True, dtype=dtype, configs={"tw.attention_overlap_registers": 32})
    assert "wgmma.wait_group.sync.aligned 1;" in k.get_kernel_source()


@needs_nvrtc
@pytest.mark.parametrize("even", [True, False])
@pytest.mark.parametrize("persistent", [132, 0])
@pytest.mark.parametrize("pdl", [True, False])
def test_three_warpgroups_causal_n64_builds_without_spills(even, persistent, pdl):
    k = _nvrtc(True, even, persistent, 192, pdl, bn=64)
    assert "wgmma.wait_group.sync.aligned 1;" in k.get_kernel_source()
