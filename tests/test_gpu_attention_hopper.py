"""The Hopper attention path on an sm_90a GPU (H100/H200), against float64: the TileLang-style
flash-attention program compiled with ``tw.enable_wgmma`` (both gemms on wgmma) and with
``tw.warp_specialize`` too (a TMA producer warpgroup, two consumer warpgroups, setmaxnreg), with
``tw.pingpong`` on top (the consumer warpgroups take turns at their gemms), and
``ops.attention``, which takes that path on sm_90a.  Outputs are poisoned (NaN) before each run.
Skipped without an sm_90 GPU."""

from __future__ import annotations

import importlib
import math

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or torch.version.hip or torch.cuda.get_device_capability() != (9, 0):
    pytest.skip("needs an sm_90 (Hopper) CUDA GPU", allow_module_level=True)

import tilewright  # noqa: E402
from tilewright import ops  # noqa: E402
from tilewright.kernels import flash_attention  # noqa: E402

kernel_cache = importlib.import_module("tilewright.ops.dispatch")._kernels  # (key, target, pass configs) -> kernel
dispatch = importlib.import_module("tilewright.ops.attention_dispatch")
WGMMA = {"tw.enable_wgmma": True, "tw.warp_specialize": False}  # wgmma only (warp specialization is the default)
WS = {"tw.enable_wgmma": True, "tw.warp_specialize": True}
PINGPONG = {**WS, "tw.pingpong": True}


def reference(q, k, v, causal):
    """float64 attention over (B, S, H, D) tensors, one batch and head group at a time."""
    B, S, H, D = q.shape
    out = torch.empty(q.shape, dtype=torch.float64, device=q.device)
    for b in range(B):
        qb, kb, vb = (x[b].transpose(0, 1).double() for x in (q, k, v))  # (H, S, D)
        s = qb @ kb.transpose(-1, -2) / math.sqrt(D)
        if causal:
            i, j = torch.arange(S, device=q.device)[:, None], torch.arange(S, device=q.device)[None]
            s = s.masked_fill(j > i, -math.inf)
        out[b] = (torch.softmax(s, -1) @ vb).transpose(0, 1)
    return out


def _rel(got, want):
    return ((got.double() - want).abs().max() / want.abs().max()).item()


@pytest.mark.parametrize("configs", [WGMMA, WS, PINGPONG], ids=["wgmma", "wgmma+ws", "wgmma+ws+pingpong"])
@pytest.mark.parametrize("B, H, S, D, bm, bn", [
    (2, 4, 1024, 128, 128, 128),
    (2, 4, 1024, 128, 128, 64),
    (1, 4, 1000, 128, 128, 128),  # ragged: the last key tile is partly past the end
    (2, 4, 1024, 64, 128, 128),
    (1, 2, 777, 64, 128, 64),
])
@pytest.mark.parametrize("causal", [False, True])
def test_user_program_on_the_hopper_path(B, H, S, D, bm, bn, causal, configs):
    torch.manual_seed(S + D + bn)
    q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.float16) for _ in range(3))
    kern = tilewright.compile(flash_attention(B, H, S, D, causal, bm, bn, 2, 256), target="cuda",
                              pass_configs=configs)
    src = kern.get_kernel_source()
    assert "wgmma.mma_async" in src and "mma.sync" not in src
    assert ("setmaxnreg" in src) == (configs is not WGMMA)
    o = torch.full_like(q, math.nan)
    kern(q, k, v, o)
    torch.cuda.synchronize()
    assert not o.isnan().any()
    assert _rel(o, reference(q, k, v, causal)) < 3e-3
    if configs is not WGMMA:
        assert kern.resource_usage["spills"] == 0


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("B, H, Hkv, S, D, causal", [
    (2, 16, 16, 1024, 128, True), (2, 16, 4, 1500, 64, False), (1, 8, 2, 999, 256, True), (1, 8, 8, 4096, 128, False)])
def test_ops_attention_takes_the_hopper_path(B, H, Hkv, S, D, causal, dtype):
    torch.manual_seed(B + H + S + D)
    q = torch.randn(B, S, H, D, device="cuda", dtype=dtype)
    k, v = (torch.randn(B, S, Hkv, D, device="cuda", dtype=dtype) for _ in range(2))
    kernel_cache.clear()
    out = ops.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=causal).transpose(1, 2)
    torch.cuda.synchronize()
    assert any(key[0] == "attention" and "sm_90a" in key for key, *_ in kernel_cache), \
        "ops.attention did not take the sm_90a path"
    g = H // Hkv
    want = reference(q, k.repeat_interleave(g, 2), v.repeat_interleave(g, 2), causal)
    assert not out.isnan().any()
    assert _rel(out, want) < (3e-3 if dtype == torch.float16 else 1e-2)


@pytest.mark.parametrize("causal", [False, True])
def test_ops_attention_with_pingpong(monkeypatch, causal):
    """The sm_90a path with ``tw.pingpong`` on top (off by default until benchmarked)."""
    monkeypatch.setattr(dispatch, "HOPPER_CONFIGS", PINGPONG)
    torch.manual_seed(7 + causal)
    q, k, v = (torch.randn(2, 1024, 16, 128, device="cuda", dtype=torch.float16) for _ in range(3))
    kernel_cache.clear()
    out = ops.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=causal).transpose(1, 2)
    torch.cuda.synchronize()
    assert any(key[0] == "attention" and "sm_90a" in key and ("tw.pingpong", True) in key[7] for key, *_ in kernel_cache)
    assert not out.isnan().any()
    assert _rel(out, reference(q, k, v, causal)) < 3e-3
