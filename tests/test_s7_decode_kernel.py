"""The flash-decoding kernel (tilewright/ops/decode_kernels.py) behind ``ops.attention`` with one
query token: in the tile interpreter (CPU tensors), in the CPU emulator of the per-thread code for
sm_90a (TMA ring, mma.sync) and gfx942 (MFMA, wave64, 64 KiB LDS), and compiled without spills --
against float64 on fresh random inputs with every allocation of the op poisoned (NaN): GQA/MQA group
sizes 1..20 (more than one 16-row slice), head dims 64/128/256, fp16/bf16, ragged cache lengths
(0, not a multiple of the key block, the whole cache), split counts with empty ranges, LSE, the
counters of the fused merge left at zero for the next launch, and the old path behind the switch."""

from __future__ import annotations

import importlib
import math

import pytest

torch = pytest.importorskip("torch")

from test_ops_attention import _PoisonedTorch  # noqa: E402
from toolchains import needs_hip_compiler, needs_nvrtc  # noqa: E402

import tilewright  # noqa: E402
from tilewright import ops  # noqa: E402
from tilewright.errors import ArgumentError  # noqa: E402

ad = importlib.import_module("tilewright.ops.attention_dispatch")
dk = importlib.import_module("tilewright.ops.decode_kernels")


@pytest.fixture(autouse=True)
def _poison_and_count(monkeypatch):
    """Poisoned allocations; ``built`` lists the kernels compiled (to see which path ran)."""
    monkeypatch.setattr(ad, "_torch", lambda: _PoisonedTorch())
    built = []
    real = ad._kernel

    def spy(key, build, target, pass_configs=None):
        built.append(key[0])
        return real(key, build, target, pass_configs=pass_configs)

    monkeypatch.setattr(ad, "_kernel", spy)
    ad.forget_plans()
    return built


def reference(q, k, v, kv_len=None, scale=None):
    """float64 decoding: q (B, H, 1, D), k/v (B, Hkv, S, D); batch b sees its first kv_len[b] keys.
    A row without keys: output 0, lse -inf."""
    q, k, v = q.double(), k.double(), v.double()
    B, H, _, D = q.shape
    g = H // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    s = q @ k.transpose(-1, -2) * (scale if scale is not None else 1 / math.sqrt(D))
    if kv_len is not None:
        for b, n in enumerate(kv_len):
            s[b, :, :, n:] = -math.inf
    lse = torch.logsumexp(s, -1)
    return (torch.exp(s - lse[..., None]).nan_to_num(0.0) @ v), lse


def _check(out, lse, want, want_lse, tol=3e-3):
    assert not out.isnan().any(), "NaN in the output (an element never written)"
    err = (out.double() - want).abs().max().item()
    assert err <= tol * max(1.0, want.abs().max().item()), err
    assert lse.dtype == torch.float32 and lse.shape == want_lse.shape
    finite = torch.isfinite(want_lse)
    assert torch.equal(torch.isfinite(lse), finite) and (lse[~finite] == -math.inf).all()
    if finite.any():
        assert (lse.double()[finite] - want_lse[finite]).abs().max().item() <= 1e-4 * max(
            1.0, want_lse[finite].abs().max().item())


def _rand(g, *shape, dtype=torch.float16):
    return torch.randn(*shape, generator=g).to(dtype)


def _counters_zero():
    return all(int(c.abs().sum()) == 0 for c in dk._counters.values())


@pytest.mark.parametrize("H, Hkv, D, dtype, lens, splits", [
    (8, 2, 64, torch.float16, [150, 37, 0], 3),         # GQA 4, ragged lengths, an empty sequence, merged
    (8, 8, 128, torch.bfloat16, [64, 1, 129], None),    # MHA (group 1: one used row of 16), the heuristic
    (8, 1, 64, torch.float16, [150, 150, 5], 8),        # MQA group 8, more splits than a short sequence's blocks
    (40, 2, 64, torch.bfloat16, [99, 150, 70], 2),      # group 20: two 16-row slices, the second one partial
    (4, 2, 256, torch.float16, [150, 0, 33], 4),        # d 256 (32-key blocks)
    (32, 2, 128, torch.float16, [150, 150, 150], 1),    # group 16 exactly, one range: no merge, no counter
])
def test_interpreter_against_float64(H, Hkv, D, dtype, lens, splits, _poison_and_count):
    g = torch.Generator().manual_seed(H * 1000 + D + len(lens))
    B, S = len(lens), 150
    q, k, v = _rand(g, B, H, 1, D, dtype=dtype), _rand(g, B, Hkv, S, D, dtype=dtype), _rand(g, B, Hkv, S, D, dtype=dtype)
    cache = torch.tensor(lens, dtype=torch.int32)
    for _ in range(2):  # the second call reuses the plan and the counters the first one left at zero
        out, lse = ops.attention(q, k, v, return_lse=True, cache_seqlens=cache, num_splits=splits)
        want, want_lse = reference(q, k, v, lens)
        _check(out, lse, want, want_lse)
        assert _counters_zero()
    assert _poison_and_count == ["decode"]


def test_no_cache_scale_causal_and_layouts(_poison_and_count):
    """Without a cache every key is seen (causal masks nothing for one query); a given scale; k as a
    (batch, seq, heads, dim) view read in place, v a non-contiguous slice (copied)."""
    g = torch.Generator().manual_seed(7)
    q = _rand(g, 2, 6, 1, 64)
    k = _rand(g, 2, 131, 3, 64).transpose(1, 2)
    v = _rand(g, 2, 3, 131, 128)[..., ::2]
    out, lse = ops.attention(q, k, v, causal=True, scale=0.3, return_lse=True, num_splits=3)
    want, want_lse = reference(q, k, v, scale=0.3)
    _check(out, lse, want, want_lse)
    out, lse = ops.attention(q, k, v, return_lse=True, num_splits=1)
    _check(out, lse, *reference(q, k, v))
    assert set(_poison_and_count) == {"decode"}


def test_old_path_behind_the_switch(monkeypatch, _poison_and_count):
    monkeypatch.setattr(dk, "KERNEL", "old")
    g = torch.Generator().manual_seed(8)
    q, k, v = _rand(g, 2, 4, 1, 64), _rand(g, 2, 2, 150, 64), _rand(g, 2, 2, 150, 64)
    out, lse = ops.attention(q, k, v, return_lse=True, num_splits=2)
    _check(out, lse, *reference(q, k, v))
    assert "decode" not in _poison_and_count and "attention" in _poison_and_count


def test_queries_longer_than_one_take_the_general_path(_poison_and_count):
    g = torch.Generator().manual_seed(9)
    q, k, v = _rand(g, 1, 2, 3, 64), _rand(g, 1, 2, 40, 64), _rand(g, 1, 2, 40, 64)
    ops.attention(q, k, v)
    assert "decode" not in _poison_and_count


@pytest.mark.parametrize("call, message", [
    (lambda q, k, v: ops.attention(q.float(), k, v), "dtype"),
    (lambda q, k, v: ops.attention(q, k[:, :1].expand(2, 3, 50, 64).contiguous(), v[:, :1].expand(2, 3, 50, 64)),
     "divide"),
    (lambda q, k, v: ops.attention(q, k, v, cache_seqlens=torch.tensor([3, 51], dtype=torch.int32)), "cache_seqlens"),
    (lambda q, k, v: ops.attention(q, k, v, cache_seqlens=torch.tensor([3, 5])), "cache_seqlens"),
    (lambda q, k, v: ops.attention(q, k, v, num_splits=0), "num_splits"),
    (lambda q, k, v: ops.attention(q, k, v[..., :32]), "shape"),
])
def test_bad_arguments_keep_their_argument_error(call, message):
    g = torch.Generator().manual_seed(10)
    q, k, v = _rand(g, 2, 4, 1, 64), _rand(g, 2, 2, 50, 64), _rand(g, 2, 2, 50, 64)
    with pytest.raises(ArgumentError, match=message):
        call(q, k, v)


def test_empty_cache_gives_zeros_and_minus_inf():
    q, k, v = torch.randn(2, 4, 1, 64).half(), torch.randn(2, 2, 0, 64).half(), torch.randn(2, 2, 0, 64).half()
    out, lse = ops.attention(q, k, v, return_lse=True)
    assert (out == 0).all() and (lse == -math.inf).all()


@pytest.mark.parametrize("target", [
    pytest.param("cuda -arch=sm_90a", marks=needs_nvrtc),
    pytest.param("hip -arch=gfx942", marks=needs_hip_compiler),
])
@pytest.mark.parametrize("D", [64, 80])
def test_lowered_code_on_the_emulator(monkeypatch, target, D, _poison_and_count):
    """The per-thread code of each target run by the CPU emulator: the sm_90a TMA ring and its
    mbarrier phases, gfx942's smaller LDS configuration, the fused merge's counter; d 80 (an odd
    multiple of 16) on 2 warps / 1 wave."""
    monkeypatch.setattr(ad, "_kernel", lambda key, build, _t, pass_configs=None: tilewright.compile(
        build(), target=target, execution_backend="emulator", pass_configs=pass_configs))
    monkeypatch.setattr(ad, "_shared_bytes", lambda t: 65536 if "hip" in target else 232448)
    g = torch.Generator().manual_seed(11)
    B, H, Hkv, S = 2, 8, 2, 300
    q, k, v = _rand(g, B, H, 1, D), _rand(g, B, Hkv, S, D), _rand(g, B, Hkv, S, D)
    lens = [300, 0]
    cache = torch.tensor(lens, dtype=torch.int32)
    out, lse = ops.attention(q, k, v, return_lse=True, cache_seqlens=cache, num_splits=3)
    _check(out, lse, *reference(q, k, v, lens))
    assert _counters_zero()


@needs_nvrtc
@pytest.mark.parametrize("config", ["64,3,32", "32,4,64", "128,2,128"])
def test_swept_configurations(monkeypatch, config, _poison_and_count):
    """The configurations bench/decode_splits.py sweeps (TILEWRIGHT_DECODE_CONFIG): one warp (the score tile
    stays in registers), two warps, 128-key blocks -- their sm_90a code on the emulator."""
    monkeypatch.setenv("TILEWRIGHT_DECODE_CONFIG", config)
    monkeypatch.setattr(ad, "_kernel", lambda key, build, _t, pass_configs=None: tilewright.compile(
        build(), target="cuda -arch=sm_90a", execution_backend="emulator", pass_configs=pass_configs))
    g = torch.Generator().manual_seed(12)
    B, H, Hkv, S, D = 2, 8, 2, 300, 64
    q, k, v = _rand(g, B, H, 1, D, dtype=torch.bfloat16), _rand(g, B, Hkv, S, D), _rand(g, B, Hkv, S, D)
    k, v = k.bfloat16(), v.bfloat16()
    lens = [277, 3]
    out, lse = ops.attention(q, k, v, return_lse=True, cache_seqlens=torch.tensor(lens, dtype=torch.int32),
                             num_splits=2)
    _check(out, lse, *reference(q, k, v, lens))
    assert _counters_zero()


@pytest.mark.parametrize("D", [64, 80, 128, 256])
@pytest.mark.parametrize("target", [
    pytest.param("cuda -arch=sm_90a", marks=needs_nvrtc),
    pytest.param("hip -arch=gfx942", marks=needs_hip_compiler),
])
def test_compiles_without_spills(target, D):
    smem = 65536 if "hip" in target else 232448
    cfg = dk.decode_config(D, smem)
    kern = tilewright.compile(dk.decode_fwd(32, 8, D, "bfloat16", True, 4, False, False, *cfg), target=target,
                              execution_backend="emulator")
    kern.get_code_object()  # (compiled by NVRTC / clang-19: the registers and spills are known from here)
    usage = kern.resource_usage
    assert usage["spills"] == 0, (cfg, usage)
    assert usage["shared_bytes"] <= smem, (cfg, usage)


@pytest.mark.parametrize("target", [
    pytest.param("cuda -arch=sm_90a", marks=needs_nvrtc),
    pytest.param("hip -arch=gfx942", marks=needs_hip_compiler),
])
def test_every_head_dim_has_a_warp_partition(target):
    """Head dims ops.attention accepts (multiples of 16 up to 256) lower for both targets: the odd
    multiples of 16 take 2 warps / 1 wave (4 warps cannot split them in the P V gemm)."""
    smem = 65536 if "hip" in target else 232448
    for D in (16, 48, 112, 144, 208, 240):
        tilewright.compile(dk.decode_fwd(8, 2, D, "float16", False, 2, False, False, *dk.decode_config(D, smem)),
                           target=target, execution_backend="emulator")
