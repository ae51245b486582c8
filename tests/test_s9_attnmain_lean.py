"""``attention_dispatch.LEAN_LOOP`` (``attention_fwd(lean=True)``): the forward's key loop without the
softmax's -inf guard where no row can see only masked keys (non-causal), its output rescale on the
hardware's 2**x.  Checked against float64 with NaN-poisoned outputs on the sm_90a path run by the CPU
emulator (the code an H200 runs: the grid kernel, with the shipped pass configs and with ping-pong +
overlap, and the persistent kernel), and on the tile interpreter: ragged lengths (the last key block
masked), GQA, head dims 64/128/256, the log-sum-exp, variable-length batches with a sequence that has
no keys, a padded KV cache with split-KV, and causal kernels (which keep the guard: rows that see no
key).  The generated code of a lean non-causal kernel has no guard in its loop."""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")

from test_ops_attention import _close, _close_lse, _rand, _varlen_case, reference  # noqa: E402
from test_ops_attention_hopper import _hopper_kernel, hopper  # noqa: E402, F401 (hopper: a fixture, see sm90a)
from test_s8_attnp_persistent import BLOCKS, check_varlen, persistent_on_cpu  # noqa: E402

from tilewright import ops  # noqa: E402
from tilewright.ops import attention_kernels as ak  # noqa: E402

dispatch = importlib.import_module("tilewright.ops.attention_dispatch")
PP_OV = {"tw.pingpong": True, "tw.attention_overlap": True}
GUARD = "== (-tw_inf())"  # the -inf guard of the running max, as the CUDA printer writes it


@pytest.fixture
def lean(monkeypatch):
    """LEAN_LOOP on, the plans (which remember their kernels) forgotten before and after."""
    monkeypatch.setattr(dispatch, "LEAN_LOOP", True)
    dispatch.forget_plans()
    yield
    dispatch.forget_plans()


@pytest.fixture
def sm90a(request, monkeypatch):
    """ops.attention as on an H200 (sm_90a kernels run by the emulator), the grid kernel."""
    monkeypatch.setattr(dispatch, "PERSISTENT", False)
    return request.getfixturevalue("hopper")


def _lean_keys(used) -> list:
    return [key for key, *_ in used if key[0] == "attention" and key[-1] == "lean"]


def _dense(B, H, Hkv, Sq, Sk, D, causal, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    q = _rand(g, B, H, Sq, D, dtype=dtype)
    k, v = _rand(g, B, Hkv, Sk, D, dtype=dtype), _rand(g, B, Hkv, Sk, D, dtype=dtype)
    out, lse = ops.attention(q, k, v, causal=causal, return_lse=True)
    want, want_lse = reference(q, k, v, causal)
    _close(out, want, tol=3e-3 if dtype == torch.float16 else 1e-2)
    _close_lse(lse, want_lse)


@pytest.mark.parametrize("B, H, Hkv, Sq, Sk, D, causal, dtype", [
    (1, 2, 1, 130, 200, 128, False, torch.float16),   # GQA, ragged keys: the last key block masked
    (2, 2, 2, 129, 77, 64, False, torch.bfloat16),    # one key block, ragged, d 64
    (1, 2, 1, 100, 150, 256, False, torch.float16),   # d 256 (128 x 64 blocks)
    (1, 1, 1, 200, 130, 128, True, torch.bfloat16),   # causal keeps the guard: the first rows see no key
])
def test_lean_on_the_sm90a_path(sm90a, lean, B, H, Hkv, Sq, Sk, D, causal, dtype):
    _dense(B, H, Hkv, Sq, Sk, D, causal, dtype, seed=Sq * 3 + Sk + D)
    _hopper_kernel(sm90a)
    assert _lean_keys(sm90a), "the lean kernel was not built"


@pytest.mark.parametrize("causal", [False, True])
def test_lean_with_pingpong_and_overlap(sm90a, lean, monkeypatch, causal):
    monkeypatch.setattr(dispatch, "HOPPER_CONFIGS", {**dispatch.HOPPER_CONFIGS, **PP_OV})
    _dense(1, 2, 1, 256, 300, 128, causal, torch.float16, seed=91 + causal)
    _hopper_kernel(sm90a)
    assert _lean_keys(sm90a)


def test_lean_varlen_with_a_sequence_without_keys(sm90a, lean):
    """Packed sequences, one with queries but no keys (its loop has no step: output 0, lse -inf),
    one with no queries."""
    g = torch.Generator().manual_seed(93)
    lens_q, lens_k = [70, 30, 0, 140], [90, 0, 20, 200]
    q, k, v, cu_q, cu_k = _varlen_case(g, lens_q, lens_k, 2, 1, 64)
    out, lse = ops.attention(q, k, v, return_lse=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    check_varlen(q, k, v, cu_q, cu_k, lens_q, out, lse, False)
    assert _lean_keys(sm90a)


def test_lean_kv_cache_split_kv(sm90a, lean):
    """A padded cache (per-batch key counts) cut into two key ranges: a range may hold no key block."""
    g = torch.Generator().manual_seed(94)
    q, k, v = _rand(g, 2, 2, 80, 64), _rand(g, 2, 1, 300, 64), _rand(g, 2, 1, 300, 64)
    lens = torch.tensor([300, 93], dtype=torch.int32)
    out, lse = ops.attention(q, k, v, return_lse=True, cache_seqlens=lens, num_splits=2)
    want, want_lse = reference(q, k, v, False, kv_len=lens.tolist())
    _close(out, want)
    _close_lse(lse, want_lse)
    assert _lean_keys(sm90a)


@pytest.fixture
def persistent(monkeypatch):
    yield from persistent_on_cpu(monkeypatch)


def test_lean_persistent_kernel(persistent, lean):
    """The persistent kernel shares the loop body: a few blocks, each with several work items."""
    _dense(1, 2, 2, 300, 260, 64, False, torch.float16, seed=95)
    # the key ends with (blocks, order, "lean")
    assert any(key[-1] == "lean" and key[-3] == BLOCKS for key in _lean_keys(persistent))


@pytest.mark.parametrize("causal", [False, True])
def test_lean_on_the_interpreter(lean, causal):
    """CPU tensors: the tile interpreter runs the same kernel body."""
    _dense(2, 4, 2, 37, 53, 64, causal, torch.float16, seed=96 + causal)


def test_the_lean_loop_has_no_guard_and_causal_keeps_it():
    import tilewright

    def source(causal, lean):
        f = ak.attention_fwd(2, 2, 128, "float16", "float16", causal, False, False, 1, False, False, False, False,
                             128, 128, 2, 256, stage_out=True, lean=lean)
        return tilewright.compile(f, target="cuda -arch=sm_90a", execution_backend="emulator",
                                  pass_configs=dispatch.HOPPER_CONFIGS).get_kernel_source()

    shipped, lean_src = source(False, False), source(False, True)
    assert GUARD in shipped and GUARD not in lean_src
    # the output's rescale factor on the hardware's 2**x: no exp2f left in the lean kernel
    assert "exp2f(" in shipped and "exp2f(" not in lean_src
    assert GUARD in source(True, True)  # causal: a row may see no key


def test_the_knob_is_read_at_plan_time(monkeypatch):
    """LEAN_LOOP picks the kernel of a new plan (its cache key), and off keeps the shipped keys."""
    keys = []
    real = dispatch._kernel

    def record(key, build, target, pass_configs=None):
        keys.append(key)
        return real(key, build, target, pass_configs)

    monkeypatch.setattr(dispatch, "_kernel", record)
    g = torch.Generator().manual_seed(97)
    q, k, v = (_rand(g, 1, 2, 40, 32) for _ in range(3))
    for on in (False, True):
        monkeypatch.setattr(dispatch, "LEAN_LOOP", on)
        dispatch.forget_plans()
        _close(ops.attention(q, k, v), reference(q, k, v, False)[0])
    dispatch.forget_plans()
    att = [key for key in keys if key[0] == "attention"]
    assert att[0][-1] != "lean" and att[-1][-1] == "lean"
