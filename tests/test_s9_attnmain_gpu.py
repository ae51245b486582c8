"""``attention_dispatch.LEAN_LOOP`` on an sm_90 GPU (H100/H200): the lean key loop against float64
with NaN-poisoned outputs, with the shipped pass configs, with ping-pong + overlap and with the
overlap rotated (``tw.attention_overlap_retire = "top"``, also for the user program), on the grid
kernel (long sequences) and the persistent one: dense MHA/GQA, ragged lengths, head dims 64/128/256,
causal and not, the flash-attn layout, variable-length batches and the log-sum-exp.  Skipped
without such a GPU."""

from __future__ import annotations

import importlib
import math

import pytest

torch = pytest.importorskip("torch")
if not (torch.cuda.is_available() and not getattr(torch.version, "hip", None)
        and torch.cuda.get_device_capability() == (9, 0)):
    pytest.skip("needs an sm_90 NVIDIA GPU with a CUDA build of PyTorch", allow_module_level=True)

from shared_gpu_attention import use_schedule, with_knobs  # noqa: E402

from tilewright import ops  # noqa: E402

dispatch = importlib.import_module("tilewright.ops.attention_dispatch")
SCHEDULES = {"shipped": {}, "pp+ov": {"tw.pingpong": True, "tw.attention_overlap": True},
             "pp+ov-top": {"tw.pingpong": True, "tw.attention_overlap": True, "tw.attention_overlap_retire": "top"},
             "ov-top": {"tw.attention_overlap": True, "tw.attention_overlap_retire": "top"}}


@pytest.fixture(params=[(s, p) for s in SCHEDULES for p in (False, True)], ids=lambda x: f"{x[0]}-pers{x[1]}")
def lean(request, monkeypatch):
    """LEAN_LOOP on with a schedule and the grid or persistent kernel, outputs poisoned; the forward
    kernels built are recorded (cache key, kernel)."""
    schedule, persistent = request.param
    use_schedule(monkeypatch, SCHEDULES[schedule])
    yield from with_knobs(monkeypatch, {"LEAN_LOOP": True, "PERSISTENT": persistent})


def _reference(q, k, v, causal):
    """float64 attention of (B, H, S, D) tensors (GQA by repeating the kv heads); rows without keys 0."""
    q, k, v = q.double(), k.double(), v.double()
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        sq, sk = q.shape[2], k.shape[2]
        i, j = torch.arange(sq, device=q.device)[:, None], torch.arange(sk, device=q.device)[None]
        s = s.masked_fill(j > i + sk - sq, -math.inf)
    lse = torch.logsumexp(s, -1)
    return torch.exp(s - lse[..., None]).nan_to_num(0.0) @ v, lse


def _check(out, lse, want, want_lse, tol):
    assert not out.isnan().any()
    assert (out.double() - want).abs().max().item() <= tol * max(1.0, want.abs().max().item())
    finite = torch.isfinite(want_lse)
    assert torch.equal(torch.isfinite(lse), finite)
    if finite.any():
        assert (lse.double()[finite] - want_lse[finite]).abs().max().item() <= 1e-3


@pytest.mark.parametrize("B, H, Hkv, Sq, Sk, D, causal, dtype", [
    (1, 4, 4, 2048, 2048, 128, False, torch.bfloat16),   # whole blocks, many key blocks: the bare loop
    (1, 4, 4, 2048, 2048, 128, True, torch.bfloat16),
    (2, 4, 2, 1000, 1500, 128, False, torch.float16),    # GQA, ragged: the last key block masked
    (2, 4, 2, 1000, 1500, 128, True, torch.float16),     # causal aligned to the end
    (1, 4, 1, 1100, 1100, 64, False, torch.bfloat16),    # MQA, d 64
    (1, 2, 2, 700, 900, 256, False, torch.float16),      # d 256
])
def test_lean_dense(lean, B, H, Hkv, Sq, Sk, D, causal, dtype):
    g = torch.Generator(device="cuda").manual_seed(Sq + Sk + D + causal)
    q = torch.randn(B, H, Sq, D, device="cuda", generator=g).to(dtype)
    k, v = (torch.randn(B, Hkv, Sk, D, device="cuda", generator=g).to(dtype) for _ in range(2))
    out, lse = ops.attention(q, k, v, causal=causal, return_lse=True)
    want, want_lse = _reference(q, k, v, causal)
    _check(out, lse, want, want_lse, 3e-3 if dtype == torch.float16 else 1e-2)
    assert any(key[-1] == "lean" for key, _ in lean)


def test_lean_flash_attn_layout(lean):
    """(B, S, H, D) tensors read in place through transpose(1, 2), as the user program reads them."""
    g = torch.Generator(device="cuda").manual_seed(7)
    q, k, v = (torch.randn(2, 1200, 4, 128, device="cuda", generator=g).to(torch.bfloat16).transpose(1, 2)
               for _ in range(3))
    out, lse = ops.attention(q, k, v, return_lse=True)
    want, want_lse = _reference(q, k, v, False)
    _check(out, lse, want, want_lse, 1e-2)


def test_lean_varlen(lean):
    g = torch.Generator(device="cuda").manual_seed(8)
    lens_q, lens_k = [700, 30, 0, 1300], [900, 0, 20, 1300]
    cu_q = torch.tensor([0] + list(torch.tensor(lens_q).cumsum(0)), dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0] + list(torch.tensor(lens_k).cumsum(0)), dtype=torch.int32, device="cuda")
    q = torch.randn(sum(lens_q), 4, 128, device="cuda", generator=g).half()
    k, v = (torch.randn(sum(lens_k), 2, 128, device="cuda", generator=g).half() for _ in range(2))
    out, lse = ops.attention(q, k, v, return_lse=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=1300)
    assert not out.isnan().any()
    for b in range(len(lens_q)):
        qs = slice(int(cu_q[b]), int(cu_q[b + 1]))
        ks = slice(int(cu_k[b]), int(cu_k[b + 1]))
        if lens_q[b]:
            want, want_lse = _reference(q[qs].transpose(0, 1)[None], k[ks].transpose(0, 1)[None],
                                        v[ks].transpose(0, 1)[None], False)
            _check(out[qs], lse[:, qs], want[0].transpose(0, 1), want_lse[0], 3e-3)


@pytest.mark.parametrize("causal", [False, True])
def test_user_program_rotated(causal):
    """The user-level program with its default schedule and the rotated overlap."""
    import tilewright
    from tilewright.kernels import flash_attention

    B, H, S, D = 2, 4, 1536, 128
    k = tilewright.compile(flash_attention(B, H, S, D, causal, 128, 128, 2, 256, "bfloat16"), out_idx=[-1],
                           pass_configs={"tw.attention_overlap_retire": "top"})
    g = torch.Generator(device="cuda").manual_seed(9 + causal)
    q, kk, v = (torch.randn(B, S, H, D, device="cuda", generator=g).to(torch.bfloat16) for _ in range(3))
    out = k(q, kk, v)
    want, _ = _reference(q.transpose(1, 2), kk.transpose(1, 2), v.transpose(1, 2), causal)
    assert (out.transpose(1, 2).double() - want).abs().max().item() <= 1e-2 * max(1.0, want.abs().max().item())
