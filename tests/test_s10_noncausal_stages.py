"""The sm_90a default for non-causal attention at head dim 65..128 (``attention_dispatch.
HOPPER_NONCAUSAL_OVERRIDES``): the shared-memory fit without the score tile (two K/V stages instead of
one at d 128) with ping-pong and the intra-warpgroup overlap, measured faster on the H200
(bench/results/2026-12-02-0050-attention-variants-regs).

Run by the cooperative emulator (which checks the mbarrier protocol, slot reuse and that no register
of an unretired wgmma is touched) with the shipped knobs on the grid and the persistent kernel,
against float64 with poisoned outputs: ragged lengths, S_q != S_k both ways, GQA, the LSE, varlen
with an empty sequence, and a padded KV cache split over key ranges (whose float32 partials are
staged through shared memory, so the fit counts 4-byte output elements)."""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")

from test_ops_attention import _close, _close_lse, _rand, _varlen_case, reference  # noqa: E402
from test_s8_attnp_persistent import check_varlen  # noqa: E402
from test_s9_causal_stages import _dense_case, _on_cpu, _planned_key  # noqa: E402

from tilewright import ops  # noqa: E402

dispatch = importlib.import_module("tilewright.ops.attention_dispatch")


@pytest.mark.parametrize("causal, D, stages, pingpong", [
    (False, 128, 2, True), (False, 96, 2, True), (False, 64, 2, True), (False, 256, 1, None),
    (True, 128, 2, None)])
def test_the_noncausal_defaults(monkeypatch, causal, D, stages, pingpong):
    """Non-causal d 65..128: two stages, ping-pong and the overlap (d 64 too: HOPPER_D64_OVERRIDES since
    session 10); d 256 and causal calls as before
    (4096 keys: the causal one is a long causal call, with two stages and the overlap, no ping-pong)."""
    assert dispatch.HOPPER_NONCAUSAL_OVERRIDES == {"tw.pingpong": True, "tw.attention_overlap": True}
    key, configs = _planned_key(monkeypatch, causal, 4096, D)
    assert key[19] == stages, key
    assert configs.get("tw.pingpong") == pingpong
    assert configs["tw.attention_overlap"] is (D != 256)


def test_the_defaults_can_be_turned_off(monkeypatch):
    monkeypatch.setattr(dispatch, "HOPPER_NONCAUSAL_OVERRIDES", None)
    key, configs = _planned_key(monkeypatch, False, 4096, 128)
    assert key[19] == 1 and "tw.pingpong" not in configs and configs["tw.attention_overlap"] is False


@pytest.mark.parametrize("persistent", [True, False])
@pytest.mark.parametrize("B, H, Hkv, Sq, Sk, D, dtype", [
    (1, 2, 1, 300, 333, 128, torch.bfloat16),   # GQA, ragged: 3 key blocks through the 2-slot ring
    (2, 1, 1, 150, 400, 128, torch.float16),    # more keys than queries, two sequences
    (1, 2, 2, 260, 100, 128, torch.bfloat16),   # one ragged key block
])
def test_noncausal_two_stages_pingpong_overlap(monkeypatch, persistent, B, H, Hkv, Sq, Sk, D, dtype):
    setup, used = _on_cpu(monkeypatch, persistent)
    try:
        flags, k = _dense_case(used, persistent, B, H, Hkv, Sq, Sk, D, False, dtype, Sq + Sk + D + persistent)
        assert flags[8:11] == (128, 128, 2)
        cfg = [c for key, c, _ in used if key[0] == "attention" and c][-1]
        assert cfg["tw.pingpong"] and cfg["tw.attention_overlap"]
        assert k.spec.shared_bytes <= 232448
    finally:
        setup.close()


def test_noncausal_d96_two_stages(monkeypatch):
    """d 96 (not warp-specialized: the kernel stays at 256 threads) takes the two stages too."""
    setup, used = _on_cpu(monkeypatch, False)
    try:
        g = torch.Generator().manual_seed(96)
        q, k, v = (_rand(g, 1, 2, n, 96, dtype=torch.bfloat16) for n in (260, 100, 100))
        out, lse = ops.attention(q, k, v, return_lse=True)
        want, want_lse = reference(q, k, v, False)
        _close(out, want, tol=1e-2)
        _close_lse(lse, want_lse)
        key = [key for key, c, _ in used if key[0] == "attention" and c][-1]
        assert key[17:20] == (128, 128, 2)
    finally:
        setup.close()


def test_noncausal_varlen_with_an_empty_sequence(monkeypatch):
    setup, used = _on_cpu(monkeypatch, False)
    try:
        g = torch.Generator().manual_seed(1010)
        lens_q, lens_k = [130, 0, 200], [300, 40, 0]
        q, k, v, cu_q, cu_k = _varlen_case(g, lens_q, lens_k, 2, 1, 128)
        out, lse = ops.attention(q, k, v, causal=False, return_lse=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
        check_varlen(q, k, v, cu_q, cu_k, lens_q, out, lse, False)
        assert [key for key, c, _ in used if key[0] == "attention" and c and c.get("tw.pingpong")]
    finally:
        setup.close()


def test_noncausal_cache_split_stages_float32_partials(monkeypatch):
    """Two key ranges: the forward kernel writes float32 partials through its staged output tile
    (64 KiB at d 128, still beside Q and two K/V stages), then the combine kernel merges them."""
    setup, used = _on_cpu(monkeypatch, False)
    try:
        g = torch.Generator().manual_seed(1011)
        B, H, Sq, Smax, D = 2, 2, 130, 400, 128
        q = _rand(g, B, H, Sq, D, dtype=torch.float16)
        k, v = _rand(g, B, H, Smax, D, dtype=torch.float16), _rand(g, B, H, Smax, D, dtype=torch.float16)
        lens = torch.tensor([400, 260], dtype=torch.int32)
        out, lse = ops.attention(q, k, v, return_lse=True, cache_seqlens=lens, num_splits=2)
        for b in range(B):
            n = int(lens[b])
            want, want_lse = reference(q[b:b + 1], k[b:b + 1, :, :n], v[b:b + 1, :, :n], False)
            _close(out[b:b + 1], want)
            _close_lse(lse[b:b + 1], want_lse)
        fwd = [(key, kern) for key, c, kern in used if key[0] == "attention" and c][-1]
        assert fwd[0][5] == "float32" and fwd[0][12] == 2  # split partials, two key ranges
        assert fwd[1].spec.shared_bytes <= 232448
    finally:
        setup.close()
