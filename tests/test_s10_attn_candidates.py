"""Session 10's sm_90a attention candidates (bench/attention_variants.py ``TW_VARIANTS=s10``), each a set of
``attention_dispatch`` knobs:

- ping-pong with the overlap for long causal calls at d 128 (``HOPPER_LONG_CAUSAL_OVERRIDES``), for short
  causal calls at d 128 with two K/V stages (``HOPPER_SHORT_CAUSAL_OVERRIDES``) and at head dim 64
  (``HOPPER_D64_OVERRIDES``); short causal calls with two stages and the overlap only, or neither;
- head dim 64 with 128 x 192 blocks under ping-pong and the overlap;
- non-causal d 128 with 128 x 176 blocks (``HOPPER_NONCAUSAL_BLOCK_N``) on the grid kernel.

Each run by the cooperative emulator (which checks the mbarrier protocol, slot reuse and that no register
of an unretired wgmma is touched) on the grid and the persistent kernel, against float64 with poisoned
outputs: causal and not, ragged lengths, S_q != S_k both ways, GQA, the LSE, varlen with an empty sequence;
and the H200 kernels built with NVRTC without spills."""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")

from test_ops_attention import _close, _close_lse, _rand, _varlen_case, reference  # noqa: E402
from test_s8_attnp_persistent import SM90A, check_varlen  # noqa: E402
from test_s9_causal_stages import _dense_case, _on_cpu, _planned_key, _sm90_kernel  # noqa: E402
from toolchains import needs_nvrtc  # noqa: E402

from tilewright import ops  # noqa: E402
from tilewright.ops import attention_kernels as ak  # noqa: E402

dispatch = importlib.import_module("tilewright.ops.attention_dispatch")
PP_OV = {"tw.pingpong": True, "tw.attention_overlap": True}
OV = {"tw.attention_overlap": True}


def _configs(used):
    return [c for key, c, _ in used if key[0] == "attention" and c][-1]


def test_the_session10_defaults(monkeypatch):
    """From the H200 run (bench/results/2026-12-02-0207-attention-variants-s10): short causal d 128 with two
    stages, ping-pong and the overlap; d 64 with ping-pong too; even lengths without tail handling; 4k causal
    keys (32 blocks) and 1024 (8) persistent (the grid kernel lost at 4k in a paired check); non-causal d 128 keeps
    128-key blocks.  Session 11 added tw.reduce_tree at d 64 and the "head_major_snake" order for short causal calls
    (tests/test_s11_fma_exp2.py)."""
    assert dispatch.HOPPER_SHORT_CAUSAL_OVERRIDES == PP_OV
    assert dispatch.HOPPER_D64_OVERRIDES == {**PP_OV, "tw.reduce_tree": True}
    assert dispatch.SPECIALIZE_EVEN is True and dispatch.PERSISTENT_MAX_KEY_BLOCKS_CAUSAL == 32
    assert dispatch.HOPPER_NONCAUSAL_BLOCK_N == 128
    key, configs = _planned_key(monkeypatch, True, 1024)
    assert key[19] == 2 and configs == {**dispatch.HOPPER_CONFIGS, **PP_OV} and key[-1] == "head_major_snake"
    assert key[21:23] == (True, True)  # even_q, even_k
    key, configs = _planned_key(monkeypatch, True, 4096)
    assert key[19] == 2 and "tw.pingpong" not in configs and key[-1] == "pairs"
    key, configs = _planned_key(monkeypatch, True, 4096, 64)
    assert configs == {**dispatch.HOPPER_CONFIGS, **dispatch.HOPPER_D64_OVERRIDES} and key[-1] == "pairs"


@pytest.mark.parametrize("persistent", [True, False])
@pytest.mark.parametrize("Sq, Sk, D, causal", [(256, 384, 128, False), (384, 256, 128, True), (256, 384, 64, True),
                                               (128, 256, 64, False)])
def test_the_defaults_on_even_lengths(monkeypatch, persistent, Sq, Sk, D, causal):
    """The shipped knobs where the lengths divide the blocks (the kernel without tail handling), GQA, Sq != Sk."""
    setup, used = _on_cpu(monkeypatch, persistent, PERSISTENT_ORDER="pairs")
    try:
        flags, k = _dense_case(used, persistent, 1, 2, 1, Sq, Sk, D, causal, torch.bfloat16, Sq + Sk + D)
        assert flags[8:11] == (128, 128, 2) and flags[12:14] == (True, True)
        assert _configs(used)["tw.pingpong"]
    finally:
        setup.close()


@pytest.mark.parametrize("overrides", [PP_OV, OV, {}])
@pytest.mark.parametrize("keys, D, short", [(1024, 128, True), (1024, 96, True), (1100, 128, False),
                                            (1024, 64, False), (1024, 256, False)])
def test_the_short_causal_knob_plans(monkeypatch, overrides, keys, D, short):
    """Set, it gives short causal calls at d 65..128 two stages and its configs; long causal calls (more
    than PERSISTENT_MAX_KEY_BLOCKS key blocks), d 64 and d 256 are left as they were."""
    before = _planned_key(monkeypatch, True, keys, D)
    monkeypatch.setattr(dispatch, "HOPPER_SHORT_CAUSAL_OVERRIDES", overrides)
    key, configs = _planned_key(monkeypatch, True, keys, D)
    if not short:
        assert (key, configs) == before
        return
    assert key[19] == 2
    assert configs == {**dispatch.HOPPER_CONFIGS, **overrides}
    assert _planned_key(monkeypatch, False, keys, D)[1].get("tw.pingpong")  # (non-causal: its own knob)


@pytest.mark.parametrize("persistent", [True, False])
@pytest.mark.parametrize("overrides", [PP_OV, OV])
@pytest.mark.parametrize("B, H, Hkv, Sq, Sk, dtype", [
    (1, 2, 1, 400, 333, torch.float16),     # GQA, ragged, fewer keys than queries
    (1, 2, 2, 200, 460, torch.bfloat16),    # more keys than queries: the diagonal in the 3rd of 4 key blocks
])
def test_short_causal_two_stages(monkeypatch, persistent, overrides, B, H, Hkv, Sq, Sk, dtype):
    setup, used = _on_cpu(monkeypatch, persistent, HOPPER_SHORT_CAUSAL_OVERRIDES=overrides,
                          PERSISTENT_ORDER="pairs")
    try:
        flags, k = _dense_case(used, persistent, B, H, Hkv, Sq, Sk, 128, True, dtype, Sq + Sk + persistent)
        assert flags[8:11] == (128, 128, 2)
        assert _configs(used) == {**dispatch.HOPPER_CONFIGS, **overrides}
    finally:
        setup.close()


@pytest.mark.parametrize("persistent", [True, False])
@pytest.mark.parametrize("Sq, Sk", [(300, 460), (460, 333)])
def test_long_causal_pingpong(monkeypatch, persistent, Sq, Sk):
    """Long causal with ping-pong and the overlap (PERSISTENT_MAX_KEY_BLOCKS 2 makes 3..4 key blocks a long
    causal call, so that the emulator runs it small), GQA, ragged."""
    monkeypatch.setattr(dispatch, "PERSISTENT_MAX_KEY_BLOCKS", 2)
    setup, used = _on_cpu(monkeypatch, persistent, HOPPER_LONG_CAUSAL_OVERRIDES=PP_OV, PERSISTENT_ORDER="pairs")
    try:
        flags, k = _dense_case(used, persistent, 1, 2, 1, Sq, Sk, 128, True, torch.bfloat16, Sq * Sk + persistent)
        assert flags[8:11] == (128, 128, 2)
        assert _configs(used)["tw.pingpong"] and "wgmma.wait_group.sync.aligned 1" in k.get_kernel_source()
    finally:
        setup.close()


@pytest.mark.parametrize("blocks", [(128, 128), (128, 192)])
@pytest.mark.parametrize("persistent", [True, False])
@pytest.mark.parametrize("Sq, Sk, causal", [(300, 333, True), (333, 200, True), (129, 250, False)])
def test_d64_pingpong(monkeypatch, blocks, persistent, Sq, Sk, causal):
    """Head dim 64 with ping-pong and the overlap at 128 x 128 and 128 x 192 blocks (two stages: the fit
    without the score tile), GQA, ragged."""
    setup, used = _on_cpu(monkeypatch, persistent, HOPPER_D64_BLOCKS=blocks, HOPPER_D64_OVERRIDES=PP_OV,
                          HOPPER_SCORES_IN_REGISTERS=True, PERSISTENT_ORDER="pairs")
    try:
        flags, k = _dense_case(used, persistent, 1, 2, 1, Sq, Sk, 64, causal, torch.float16, Sq + Sk + blocks[1])
        assert tuple(flags[8:11]) == (*blocks, 2)
        assert _configs(used) == {**dispatch.HOPPER_CONFIGS, **PP_OV}
    finally:
        setup.close()


def test_varlen_with_the_candidates(monkeypatch):
    """Packed sequences (one empty) on the persistent kernel with every ping-pong candidate set: short causal
    d 128 (two stages)."""
    setup, used = _on_cpu(monkeypatch, True, HOPPER_SHORT_CAUSAL_OVERRIDES=PP_OV, HOPPER_LONG_CAUSAL_OVERRIDES=PP_OV,
                          HOPPER_D64_OVERRIDES=PP_OV, PERSISTENT_ORDER="pairs")
    try:
        g = torch.Generator().manual_seed(1020)
        lens_q, lens_k = [70, 0, 140, 200], [90, 30, 250, 0]
        q, k, v, cu_q, cu_k = _varlen_case(g, lens_q, lens_k, 2, 1, 128)
        out, lse = ops.attention(q, k, v, causal=True, return_lse=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
        check_varlen(q, k, v, cu_q, cu_k, lens_q, out, lse, True)
        assert _sm90_kernel(used, True)[0][8:11] == (128, 128, 2)
        assert _configs(used)["tw.pingpong"]
    finally:
        setup.close()


@needs_nvrtc
@pytest.mark.parametrize("D, bM, bN, causal, persistent, configs", [
    (128, 128, 128, True, 132, PP_OV), (128, 128, 128, True, 0, PP_OV), (64, 128, 128, True, 132, PP_OV),
    (64, 128, 128, False, 0, PP_OV), (64, 128, 192, False, 0, PP_OV), (64, 128, 192, True, 132, PP_OV),
    (128, 128, 176, False, 0, PP_OV), (64, 192, 128, False, 0, OV), (64, 192, 128, True, 0, OV)])
def test_h200_kernels_build_without_spills(D, bM, bN, causal, persistent, configs):
    """The candidates' H200 kernels (16 heads, two stages) build with NVRTC without spills, within a
    block's shared memory."""
    from tilewright.codegen.cuda import print_cuda
    from tilewright.passes.pipeline import PassContext, run_pipeline
    from tilewright.target import Target
    from tilewright.toolchain import nvrtc

    f = ak.attention_fwd(16, 16, D, "bfloat16", "bfloat16", causal, False, False, 1, False, False, False, False,
                         bM, bN, 2, 2 * bM, stage_out=True, persistent=persistent, order="pairs")
    k = run_pipeline(f, PassContext(Target.parse(SM90A), {"optimize_level": 2, **dispatch.HOPPER_CONFIGS,
                                                          **configs}))
    assert k.num_threads == 2 * bM + 128 and k.shared_bytes <= 232448
    res = nvrtc.compile_cuda(print_cuda(k), "sm_90a", [k.name]).resources[k.name]
    assert res["spills"] == 0 and res["local_bytes"] == 0, res


@pytest.mark.parametrize("keys, num_splits, bN, stages, persistent", [
    (4096, None, 176, 2, False), (1024, None, 176, 2, False), (4096, 2, 128, 2, False), (1024, 2, 128, 2, True)])
def test_the_wide_noncausal_block_plans(monkeypatch, keys, num_splits, bN, stages, persistent):
    """HOPPER_NONCAUSAL_BLOCK_N 176: non-causal d 128 takes 128 x 176 blocks with two stages on the grid kernel
    (1024 keys too, which "auto" would make persistent); a split call keeps 128 (its float32 output tile), and is
    persistent again where "auto" says so."""
    assert dispatch.HOPPER_NONCAUSAL_BLOCK_N == 128
    monkeypatch.setattr(dispatch, "HOPPER_NONCAUSAL_BLOCK_N", 176)
    seen = []

    def record(key, build, target, pass_configs=None):
        seen.append(key)
        raise RuntimeError("planned")

    monkeypatch.setattr(dispatch, "_kernel", record)
    monkeypatch.setattr(dispatch, "_is_hopper", lambda t: True)
    # (32 heads: 256 query blocks fill the SMs, so that only a forced num_splits splits)
    q, k = torch.zeros(1, 32, 1024, 128, dtype=torch.float16), torch.zeros(1, 32, keys, 128, dtype=torch.float16)
    dispatch.forget_plans()
    with pytest.raises(RuntimeError, match="planned"):
        dispatch._make_plan(q, k, k, False, None, False, 1, 1024, False, num_splits)
    dispatch.forget_plans()
    key = seen[-1]
    assert key[18:20] == (bN, stages) and (key[-1] == "pairs") == persistent, key
    assert _planned_key(monkeypatch, True, keys)[0][18] == 128  # causal calls keep 128


@pytest.mark.parametrize("persistent", [True, "auto"])
@pytest.mark.parametrize("B, H, Hkv, Sq, Sk, dtype", [
    (1, 2, 1, 300, 400, torch.bfloat16),   # GQA, ragged: 176 + 176 + 48 keys through the 2-slot ring
    (2, 1, 1, 150, 176, torch.float16),    # exactly one key block, two sequences
])
def test_wide_noncausal_block(monkeypatch, persistent, B, H, Hkv, Sq, Sk, dtype):
    """128 x 176 blocks (ping-pong and the overlap, the shipped non-causal configs) on the grid kernel, even
    where PERSISTENT asks for the persistent one."""
    setup, used = _on_cpu(monkeypatch, persistent, HOPPER_NONCAUSAL_BLOCK_N=176)
    try:
        flags, k = _dense_case(used, False, B, H, Hkv, Sq, Sk, 128, False, dtype, Sq + Sk + B)
        assert flags[8:11] == (128, 176, 2)
        assert _configs(used) == {**dispatch.HOPPER_CONFIGS, **dispatch.HOPPER_NONCAUSAL_OVERRIDES}
    finally:
        setup.close()


def test_wide_noncausal_block_varlen(monkeypatch):
    """Packed sequences (one empty, one without keys) with 128 x 176 blocks."""
    setup, used = _on_cpu(monkeypatch, "auto", HOPPER_NONCAUSAL_BLOCK_N=176)
    try:
        g = torch.Generator().manual_seed(1021)
        lens_q, lens_k = [130, 0, 200], [380, 40, 0]
        q, k, v, cu_q, cu_k = _varlen_case(g, lens_q, lens_k, 2, 1, 128)
        out, lse = ops.attention(q, k, v, causal=False, return_lse=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
        check_varlen(q, k, v, cu_q, cu_k, lens_q, out, lse, False)
        assert _sm90_kernel(used, False)[0][8:11] == (128, 176, 2)
    finally:
        setup.close()


@pytest.mark.parametrize("persistent", [True, False])
@pytest.mark.parametrize("Sq, Sk, causal", [(300, 333, True), (333, 200, True), (129, 250, False), (400, 400, False)])
def test_d64_three_consumer_warpgroups(monkeypatch, persistent, Sq, Sk, causal):
    """Head dim 64 with 192 x 128 blocks (FlashAttention-3's query block there): three consumer warpgroups of
    64 rows (512 threads with the producer), two stages (the fit without the score tile), GQA, ragged."""
    setup, used = _on_cpu(monkeypatch, persistent, HOPPER_D64_BLOCKS=(192, 128), HOPPER_SCORES_IN_REGISTERS=True,
                          PERSISTENT_ORDER="pairs")
    try:
        g = torch.Generator().manual_seed(Sq + Sk + persistent)
        q, k, v = _rand(g, 1, 3, Sq, 64, dtype=torch.float16), _rand(g, 1, 1, Sk, 64, dtype=torch.float16), \
            _rand(g, 1, 1, Sk, 64, dtype=torch.float16)
        out, lse = ops.attention(q, k, v, causal=causal, return_lse=True)
        want, want_lse = reference(q, k, v, causal)
        _close(out, want, tol=3e-3)
        _close_lse(lse, want_lse)
        key, cfg, kern = [u for u in used if u[0][0] == "attention" and u[1]][-1]
        src = kern.get_kernel_source()
        assert kern.num_threads == 512 and "wgmma.mma_async" in src and "setmaxnreg.inc" in src
        assert ("Q_s_empty" in src) == persistent and key[17:20] == (192, 128, 2)
        assert kern.spec.shared_bytes <= 232448
    finally:
        setup.close()


@pytest.mark.parametrize("Sq, Sk", [(384, 256), (200, 333)])
def test_the_d64_noncausal_three_warpgroups_knob(monkeypatch, Sq, Sk):
    """HOPPER_D64_NONCAUSAL_BLOCKS (192, 128) (measured faster, off until the other tests ran with it): non-causal
    d 64 takes 192 x 128 blocks, three consumer warpgroups, two stages, the grid kernel even where PERSISTENT asks
    for the persistent one; even lengths (no tail handling where they divide the blocks) and ragged ones, GQA."""
    assert dispatch.HOPPER_D64_NONCAUSAL_BLOCKS is None
    setup, used = _on_cpu(monkeypatch, True, HOPPER_D64_NONCAUSAL_BLOCKS=(192, 128))
    try:
        g = torch.Generator().manual_seed(Sq + Sk)
        q, k, v = _rand(g, 1, 2, Sq, 64, dtype=torch.bfloat16), _rand(g, 1, 1, Sk, 64, dtype=torch.bfloat16), \
            _rand(g, 1, 1, Sk, 64, dtype=torch.bfloat16)
        out, lse = ops.attention(q, k, v, causal=False, return_lse=True)
        want, want_lse = reference(q, k, v, False)
        _close(out, want, tol=1e-2)
        _close_lse(lse, want_lse)
        key, cfg, kern = [u for u in used if u[0][0] == "attention" and u[1]][-1]
        assert kern.num_threads == 512 and "Q_s_empty" not in kern.get_kernel_source()
        assert key[17:20] == (192, 128, 2) and key[21:23] == (Sq % 192 == 0, Sk % 128 == 0)
    finally:
        setup.close()
