"""``tw.attention_overlap_retire = "top"`` (passes/attention_overlap.py): the overlapped attention loop
rotated so that the wait for the P V in flight and the cast of P open the next iteration, where the
device compiler cannot move the wait above the softmax.  Checked on the sm_90a path run by the CPU
emulator (which checks the wgmma and mbarrier protocol: no register of an unretired wgmma touched,
parities, arrival counts) against float64 with NaN-poisoned outputs: ops.attention (grid and
persistent kernels, with and without ping-pong, causal and not, ragged lengths, GQA, d 64/128,
varlen with short and empty sequences: loops of 0, 1 and 2 key blocks) and the user-level program;
the generated loop has the shape the pass's contract gives."""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")

from test_ops_attention import _close, _close_lse, _rand, _varlen_case, reference  # noqa: E402
from test_ops_attention_hopper import _hopper_kernel, hopper  # noqa: E402, F401 (hopper: a fixture, see sm90a)
from test_s8_attnp_persistent import check_varlen, persistent_on_cpu  # noqa: E402

import tilewright  # noqa: E402
from tilewright import ops  # noqa: E402
from tilewright.errors import CompileError  # noqa: E402
from tilewright.kernels import flash_attention  # noqa: E402

dispatch = importlib.import_module("tilewright.ops.attention_dispatch")
SM90A = "cuda -arch=sm_90a"
TOP = {"tw.attention_overlap": True, "tw.attention_overlap_retire": "top"}
SCHEDULES = {"ov-top": TOP, "pp+ov-top": {**TOP, "tw.pingpong": True}}


@pytest.fixture(params=list(SCHEDULES))
def sm90a(request, monkeypatch):
    """ops.attention as on an H200 (sm_90a kernels run by the emulator), the grid kernel, with the
    rotated overlap (with and without ping-pong) at every head dim."""
    monkeypatch.setattr(dispatch, "PERSISTENT", False)
    monkeypatch.setattr(dispatch, "HOPPER_CONFIGS", {**dispatch.HOPPER_CONFIGS, **SCHEDULES[request.param]})
    monkeypatch.setattr(dispatch, "HOPPER_D64_OVERRIDES", {})
    dispatch.forget_plans()
    yield request.getfixturevalue("hopper")
    dispatch.forget_plans()


def _rotated(src: str, loop: str) -> bool:
    """Does the consumers' key loop (the CUDA ``for`` header ``loop``, the last such in ``src``) open
    with the wait for the P V in flight?"""
    body = src[src.rindex(loop):].split("\n")[1:3]
    return any("wgmma.wait_group.sync.aligned 0" in line for line in body)


@pytest.mark.parametrize("B, H, Hkv, Sq, Sk, D, causal, dtype", [
    (1, 2, 1, 130, 300, 128, False, torch.float16),    # GQA, ragged: 3 key blocks, the last masked
    (1, 1, 1, 256, 256, 128, True, torch.bfloat16),    # causal whole tiles: loops of 1 and 2 key blocks
    (1, 1, 1, 200, 130, 64, True, torch.float16),      # more queries than keys: rows without keys; d 64
])
def test_dense_rotated(sm90a, B, H, Hkv, Sq, Sk, D, causal, dtype):
    g = torch.Generator().manual_seed(Sq + Sk + D + causal)
    q = _rand(g, B, H, Sq, D, dtype=dtype)
    k, v = _rand(g, B, Hkv, Sk, D, dtype=dtype), _rand(g, B, Hkv, Sk, D, dtype=dtype)
    out, lse = ops.attention(q, k, v, causal=causal, return_lse=True)
    want, want_lse = reference(q, k, v, causal)
    _close(out, want, tol=3e-3 if dtype == torch.float16 else 1e-2)
    _close_lse(lse, want_lse)
    assert _rotated(_hopper_kernel(sm90a).get_kernel_source(), "for (int kb = (lo + 1);")


def test_varlen_rotated(sm90a):
    """Sequences of 0, 1, 2 and 3 key blocks (and one without queries)."""
    g = torch.Generator().manual_seed(98)
    lens_q, lens_k = [70, 0, 140, 60], [0, 30, 250, 300]
    q, k, v, cu_q, cu_k = _varlen_case(g, lens_q, lens_k, 2, 1, 64)
    out, lse = ops.attention(q, k, v, return_lse=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    check_varlen(q, k, v, cu_q, cu_k, lens_q, out, lse, False)
    assert _rotated(_hopper_kernel(sm90a).get_kernel_source(), "for (int kb = (lo + 1);")


@pytest.fixture
def persistent(monkeypatch):
    monkeypatch.setattr(dispatch, "HOPPER_CONFIGS", {**dispatch.HOPPER_CONFIGS, **TOP, "tw.pingpong": True})
    monkeypatch.setattr(dispatch, "HOPPER_D64_OVERRIDES", {})
    yield from persistent_on_cpu(monkeypatch)


def test_persistent_rotated(persistent):
    """The persistent form: the rotated key loop inside the tile loop, items of 1..3 key blocks."""
    g = torch.Generator().manual_seed(99)
    q, k, v = _rand(g, 1, 2, 300, 128), _rand(g, 1, 1, 290, 128), _rand(g, 1, 1, 290, 128)
    out, lse = ops.attention(q, k, v, causal=True, return_lse=True)
    want, want_lse = reference(q, k, v, True)
    _close(out, want)
    _close_lse(lse, want_lse)
    src = [k for key, cfg, k in persistent if key[0] == "attention"][-1].get_kernel_source()
    assert _rotated(src, "for (int kb = ")


@pytest.mark.parametrize("causal", [False, True])
def test_user_program_rotated(causal):
    """The user-level program with its default schedule (ping-pong + overlap) and the rotation."""
    B, H, S, D = 1, 2, 256, 64
    f = flash_attention(B, H, S, D, causal, 128, 128, 2, 256, "float16")
    k = tilewright.compile(f, out_idx=[-1], target=SM90A, execution_backend="emulator",
                           pass_configs={"tw.attention_overlap_retire": "top"})
    g = torch.Generator().manual_seed(100 + causal)
    q, kk, v = (_rand(g, B, S, H, D) for _ in range(3))
    out = k(q, kk, v)
    want, _ = reference(q.transpose(1, 2), kk.transpose(1, 2), v.transpose(1, 2), causal)
    _close(out.transpose(1, 2), want)
    src = k.get_kernel_source()
    # the loop opens with the wait for the P V in flight, before the turn's bar.sync
    assert _rotated(src, "for (int k = 1;")
    loop = src[src.index("for (int k = 1;"):]
    assert loop.index("wgmma.wait_group.sync.aligned 0") < loop.index("bar.sync")


def test_a_bad_value_is_refused():
    f = flash_attention(1, 1, 256, 64, False, 128, 128, 2, 256, "float16")
    with pytest.raises(CompileError, match="attention_overlap_retire"):
        tilewright.compile(f, out_idx=[-1], target=SM90A, execution_backend="emulator",
                           pass_configs={"tw.attention_overlap": True, "tw.attention_overlap_retire": "middle"})
