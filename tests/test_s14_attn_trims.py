"""Issue 9's causal head-dim-64 key-loop trims (``attention_dispatch.HOPPER_D64_CAUSAL_TRIMS``, names from
``attention_kernels.LOOP_TRIMS``): "fast_rescale" (the output's rescale factor on ex2.approx.ftz, the -inf guard
kept) and "mask_bound" (the diagonal block's mask as one compare of the key column against a per-row bound; even
key lengths only).  Each run by the cooperative emulator against float64 with NaN-poisoned outputs: the grid and the
persistent kernel, S_q == S_k, S_q < S_k and S_q > S_k (rows and whole blocks without keys), GQA, ragged lengths
(the tail-handling mask keeps its form), the LSE; and the H200 kernels built with NVRTC without spills."""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")

from shared_attention_emulator import dense_call  # noqa: E402
from test_s9_causal_stages import _on_cpu  # noqa: E402
from toolchains import needs_nvrtc  # noqa: E402

import tilewright  # noqa: E402
from tilewright.ops import attention_kernels as ak  # noqa: E402

dispatch = importlib.import_module("tilewright.ops.attention_dispatch")
BOTH = ("fast_rescale", "mask_bound")


def _last_sm90(used):
    """(key, kernel) of the last sm_90a attention forward built."""
    hits = [(key, k) for key, cfg, k in used if key[0] == "attention" and cfg]
    assert hits, "the sm_90a path was not taken"
    return hits[-1]


@pytest.mark.parametrize("trims", [BOTH, ("mask_bound",), ("fast_rescale",)])
@pytest.mark.parametrize("persistent", [True, False])
@pytest.mark.parametrize("B, H, Hkv, Sq, Sk, dtype", [
    (1, 2, 1, 256, 256, torch.bfloat16),   # GQA, even: the diagonal block is each item's last
    (1, 1, 1, 128, 384, torch.float16),    # more keys than queries: the diagonal shifted by 256
    (2, 1, 1, 384, 256, torch.bfloat16),   # more queries than keys: the first block's rows see no key
])
def test_d64_causal_trims(monkeypatch, trims, persistent, B, H, Hkv, Sq, Sk, dtype):
    setup, used = _on_cpu(monkeypatch, persistent, HOPPER_D64_CAUSAL_TRIMS=trims)
    try:
        dense_call(B, H, Hkv, Sq, Sk, 64, True, dtype, Sq * 5 + Sk + persistent + len(trims))
        key, k = _last_sm90(used)
        src = k.get_kernel_source()
        assert key[-1] == ("trims",) + tuple(sorted(trims))
        assert ("bound[0] =" in src) == ("mask_bound" in trims)
        assert ("exp2f(" in src) == ("fast_rescale" not in trims)  # (the rescale was the loop's only exp2f)
        assert ("Q_s_empty" in src) == persistent
    finally:
        setup.close()


@pytest.mark.parametrize("Sq, Sk", [(200, 333), (333, 150)])
def test_d64_causal_trims_ragged(monkeypatch, Sq, Sk):
    """Lengths that do not divide the blocks: the mask checks the key count too, so "mask_bound" leaves it as it
    was; "fast_rescale" still applies."""
    setup, used = _on_cpu(monkeypatch, True, HOPPER_D64_CAUSAL_TRIMS=BOTH)
    try:
        dense_call(1, 2, 1, Sq, Sk, 64, True, torch.float16, Sq + Sk)
        src = _last_sm90(used)[1].get_kernel_source()
        assert "bound[0] =" not in src and "exp2f(" not in src
    finally:
        setup.close()


def test_trims_leave_other_calls_alone(monkeypatch):
    """Off by default; with them set, non-causal d 64 and causal d 128 kernels are as without them."""
    assert dispatch.HOPPER_D64_CAUSAL_TRIMS == ()
    setup, used = _on_cpu(monkeypatch, True, HOPPER_D64_CAUSAL_TRIMS=BOTH)
    try:
        dense_call(1, 1, 1, 256, 256, 64, False, torch.bfloat16, 5)
        dense_call(1, 1, 1, 256, 256, 128, True, torch.bfloat16, 6)
        for key, cfg, k in used:
            if key[0] == "attention" and cfg:
                assert "trims" not in str(key) and "bound[0] =" not in k.get_kernel_source()
    finally:
        setup.close()


def test_unknown_trim_is_refused(monkeypatch):
    setup, used = _on_cpu(monkeypatch, True, HOPPER_D64_CAUSAL_TRIMS=("fast_rescale", "skip"))
    try:
        with pytest.raises(ValueError, match="HOPPER_D64_CAUSAL_TRIMS"):
            dense_call(1, 1, 1, 256, 256, 64, True, torch.bfloat16, 7)
    finally:
        setup.close()


@needs_nvrtc
@pytest.mark.parametrize("persistent", [132, 0])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_trims_build_without_spills(persistent, dtype):
    """The H200 kernels (even lengths, direct store, the shipped d 64 pass configs) with both trims."""
    f = ak.attention_fwd(16, 16, 64, dtype, dtype, True, False, False, 1, False, False, False, False, 128, 128, 2,
                         256, stage_out=False, even_q=True, even_k=True, persistent=persistent, order="pairs",
                         fast_rescale=True, mask_bound=True)
    from tilewright.toolchain import nvrtc
    k = tilewright.compile(f, target="cuda -arch=sm_90a",
                           pass_configs={**dispatch.HOPPER_CONFIGS, **dispatch.HOPPER_D64_OVERRIDES})
    res = nvrtc.compile_cuda(k.get_kernel_source(), "sm_90a", ["attention_fwd_kernel_kernel"]).resources
    assert res["attention_fwd_kernel_kernel"]["spills"] == 0, res
    assert res["attention_fwd_kernel_kernel"]["local_bytes"] == 0, res
