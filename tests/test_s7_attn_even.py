"""``ops.attention``'s kernel without tail handling (``attention_fwd(even_q=, even_k=)``, chosen by
``attention_dispatch.SPECIALIZE_EVEN`` for dense calls whose lengths divide the blocks): no key mask
outside the causal diagonal, no row checks on the output and the LSE.  Each case is checked against
float64 with poisoned (NaN) outputs, on the sm_90a path run by the CPU emulator (the code an H200
runs, with the shipped configs and with ping-pong + overlap) and on the interpreter; ragged lengths
with the switch on keep the tail handling (and stay correct); the generated code has no mask and no
row checks where the lengths divide the blocks; an sm_90 GPU runs the same cases when present."""

from __future__ import annotations

import importlib
import math
import re

import pytest

torch = pytest.importorskip("torch")

from test_ops_attention import _close, _close_lse, _rand, reference  # noqa: E402
from test_ops_attention_hopper import SM90A, _hopper_kernel, hopper  # noqa: E402, F401 (hopper: a fixture, see sm90a)
from toolchains import needs_nvrtc  # noqa: E402

import tilewright  # noqa: E402
from tilewright import ops  # noqa: E402
from tilewright.ops import attention_kernels as ak  # noqa: E402

dispatch = importlib.import_module("tilewright.ops.attention_dispatch")
PP_OV = {"tw.pingpong": True, "tw.attention_overlap": True}  # the schedule the user program runs fastest with


@pytest.fixture
def sm90a(request, monkeypatch):
    """test_ops_attention_hopper's ``hopper``: ops.attention as on an H200 (sm_90a kernels run by the
    emulator); the list of (key, pass configs, kernel) compiled.  The grid kernel these tests were
    written for (its cache key ends with the even flags): the persistent one, which "auto" takes for
    these short sequences, is tested in test_s8_attnp_persistent."""
    monkeypatch.setattr(dispatch, "PERSISTENT", False)
    return request.getfixturevalue("hopper")


@pytest.fixture
def even(monkeypatch):
    """SPECIALIZE_EVEN on, with the plans (which remember their kernels) forgotten before and after."""
    monkeypatch.setattr(dispatch, "SPECIALIZE_EVEN", True)
    dispatch.forget_plans()
    yield
    dispatch.forget_plans()


def _even_flags(used) -> tuple:
    """(even_q, even_k) of the last attention kernel compiled: the last two booleans of its cache key (after
    them come only entries that are not booleans: the key-loop trims, the persistent grid and order, lean marks)."""
    keys = [key for key, *_ in used if key[0] == "attention"]
    assert keys, "no attention kernel was compiled"
    key = keys[-1]
    while key and not isinstance(key[-1], bool):
        key = key[:-1]
    return key[-2:]


def _case(B, H, Hkv, Sq, Sk, D, causal, dtype):
    g = torch.Generator().manual_seed(Sq * 7 + Sk + D + causal)
    q = _rand(g, B, H, Sq, D, dtype=dtype)
    k, v = _rand(g, B, Hkv, Sk, D, dtype=dtype), _rand(g, B, Hkv, Sk, D, dtype=dtype)
    out, lse = ops.attention(q, k, v, causal=causal, return_lse=True)
    want, want_lse = reference(q, k, v, causal)
    _close(out, want, tol=3e-3 if dtype == torch.float16 else 1e-2)
    _close_lse(lse, want_lse)


@pytest.mark.parametrize("B, H, Hkv, Sq, Sk, D, causal, dtype, flags", [
    (1, 2, 2, 256, 256, 128, False, torch.float16, (True, True)),   # the bare loop: no mask at all
    (1, 2, 1, 128, 384, 64, True, torch.bfloat16, (True, True)),    # GQA, causal aligned to the end: diagonal only
    (1, 1, 1, 256, 200, 128, False, torch.float16, (True, False)),  # ragged keys keep their mask
    (1, 1, 1, 200, 256, 128, True, torch.bfloat16, (False, True)),  # ragged queries keep their row checks
    (1, 1, 1, 128, 128, 256, True, torch.float16, (True, True)),    # d 256: 128 x 64 blocks, no staged output
])
def test_sm90a_path_on_the_emulator(sm90a, even, B, H, Hkv, Sq, Sk, D, causal, dtype, flags):
    _case(B, H, Hkv, Sq, Sk, D, causal, dtype)
    _hopper_kernel(sm90a)
    assert _even_flags(sm90a) == flags


@pytest.mark.parametrize("causal", [False, True])
def test_with_pingpong_and_overlap_on_the_emulator(sm90a, even, monkeypatch, causal):
    """The candidate default: the even kernel with ping-pong and the P V / softmax overlap."""
    monkeypatch.setattr(dispatch, "HOPPER_CONFIGS", {**dispatch.HOPPER_CONFIGS, **PP_OV})
    _case(1, 2, 2, 256, 384 if causal else 256, 128, causal, torch.bfloat16)
    k = _hopper_kernel(sm90a)
    assert _even_flags(sm90a) == (True, True)
    assert [cfg for key, cfg, _ in sm90a if key[0] == "attention"][-1]["tw.pingpong"] is True
    assert "wgmma.wait_group.sync.aligned 2;" in k.get_kernel_source()  # the overlap took the loop


@pytest.mark.parametrize("B, H, Hkv, Sq, Sk, D, causal", [
    (2, 2, 1, 128, 256, 64, False), (1, 2, 2, 256, 128, 32, True), (1, 1, 1, 100, 128, 64, True)])
def test_interpreter_path(even, B, H, Hkv, Sq, Sk, D, causal):
    _case(B, H, Hkv, Sq, Sk, D, causal, torch.float16)


def test_off_by_choice_and_ragged_lengths_keep_the_tail_handling(sm90a, monkeypatch):
    monkeypatch.setattr(dispatch, "SPECIALIZE_EVEN", False)  # (on by default since session 10)
    dispatch.forget_plans()
    _case(1, 1, 1, 256, 256, 64, False, torch.float16)
    assert _even_flags(sm90a) == (False, False)
    monkeypatch.setattr(dispatch, "SPECIALIZE_EVEN", True)
    dispatch.forget_plans()
    _case(1, 1, 1, 130, 250, 64, False, torch.float16)
    assert _even_flags(sm90a) == (False, False)
    dispatch.forget_plans()


def _source(causal, even_q, even_k):
    f = ak.attention_fwd(2, 2, 128, "bfloat16", "bfloat16", causal, False, False, 1, False, False, False, False,
                         128, 128, 2, 256, stage_out=True, even_q=even_q, even_k=even_k)
    configs = {**dispatch.HOPPER_CONFIGS, **PP_OV}
    return tilewright.compile(f, target=SM90A, execution_backend="emulator", pass_configs=configs).get_kernel_source()


def _row_checks(src: str) -> int:
    return len(re.findall(r"< len_q\b", src)) + src.count("< ((long long)(len_q)")


def test_the_even_kernel_has_no_tail_handling():
    """Non-causal with lengths dividing the blocks: no key mask in the loop (the branch around it
    moved ptxas's release of the V slot behind the softmax) and no row checks on the stores."""
    ragged, bare, causal = _source(False, False, False), _source(False, True, True), _source(True, True, True)
    assert ragged.count("? acc_s[") > 0 and _row_checks(ragged) > 0
    assert bare.count("? acc_s[") == 0 and _row_checks(bare) == 0
    assert "cp.async.bulk.tensor.2d.global.shared::cta" in bare  # the output tile leaves by TMA stores
    assert causal.count("? acc_s[") > 0  # the diagonal tiles are still masked


@needs_nvrtc
@pytest.mark.parametrize("causal", [False, True])
def test_the_even_kernel_compiles_without_spills(causal):
    from tilewright.toolchain import nvrtc

    src = _source(causal, True, True)
    name = src.split("__launch_bounds__(384, 1) ")[1].split("(")[0]
    binary = nvrtc.compile_cuda(src, "sm_90a", [name])
    res = binary.resources[name]
    assert res["spills"] == 0 and res["local_bytes"] == 0, res
    assert "serialized" not in binary.log, binary.log


# ---------------------------------------------------------------------------------------------
# on an sm_90 GPU


def _hopper_gpu() -> bool:
    return torch.cuda.is_available() and not torch.version.hip and torch.cuda.get_device_capability() == (9, 0)


class _PoisonTorch:
    """torch, but ``empty``/``empty_like`` give NaN-filled tensors (the outputs the kernels write)."""

    def __getattr__(self, name):
        return getattr(torch, name)

    @staticmethod
    def empty(*a, **kw):
        t = torch.empty(*a, **kw)
        return t.fill_(math.nan) if t.is_floating_point() else t.fill_(-7)

    @staticmethod
    def empty_like(*a, **kw):
        t = torch.empty_like(*a, **kw)
        return t.fill_(math.nan) if t.is_floating_point() else t.fill_(-7)


@pytest.mark.skipif(not _hopper_gpu(), reason="needs an sm_90 (Hopper) CUDA GPU")
@pytest.mark.parametrize("configs", [{}, PP_OV], ids=["shipped", "pingpong+overlap"])
@pytest.mark.parametrize("B, H, Hkv, Sq, Sk, D, causal, dtype", [
    (2, 4, 4, 1024, 1024, 128, False, torch.bfloat16), (1, 8, 2, 1024, 2048, 128, True, torch.float16),
    (1, 4, 4, 1000, 1024, 128, False, torch.bfloat16), (1, 4, 4, 1024, 1000, 64, True, torch.float16),
    (1, 8, 2, 512, 512, 256, True, torch.bfloat16)])
def test_on_the_gpu(even, monkeypatch, configs, B, H, Hkv, Sq, Sk, D, causal, dtype):
    monkeypatch.setattr(dispatch, "HOPPER_CONFIGS", {**dispatch.HOPPER_CONFIGS, **configs})
    monkeypatch.setattr(dispatch, "_torch", lambda: _PoisonTorch())
    g = torch.Generator(device="cuda").manual_seed(Sq + Sk + D)
    q = torch.randn(B, H, Sq, D, device="cuda", dtype=dtype, generator=g)
    k, v = (torch.randn(B, Hkv, Sk, D, device="cuda", dtype=dtype, generator=g) for _ in range(2))
    want, want_lse = reference(q.cpu(), k.cpu(), v.cpu(), causal)
    for _ in range(3):  # the first call binds the launch, the next ones take the dense fast path
        out, lse = ops.attention(q, k, v, causal=causal, return_lse=True)
        torch.cuda.synchronize()
        _close(out.cpu(), want, tol=3e-3 if dtype == torch.float16 else 1e-2)
        _close_lse(lse.cpu(), want_lse)
