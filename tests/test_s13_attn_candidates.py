"""Session 13's sm_90a candidate for head dim 64 causal (bench/attention_variants.py ``TW_VARIANTS=s13``):
the pass config ``tw.uniform_ring`` (``passes/warp_specialize_persistent_loop.py``): the persistent kernel's
consumers take their ring position through ``warp_uniform`` (interp/warp_ops.py), which CUDA prints as one
broadcast from lane 0 per key step (codegen/cuda.py shares equal broadcasts of a loop or branch body), so that
ptxas keeps the slot and the wgmma descriptors in uniform registers (the causal d 64 key loop 696 -> 687 SASS
instructions, its 32 R2UR moves gone).

Each run by the cooperative emulator, which checks every ``warp_uniform`` (a lane holding another value than
its warp's first is an error), on the persistent kernel against float64 with poisoned outputs: causal and not,
ragged lengths, S_q != S_k, GQA, varlen with an empty sequence; the grid kernel unchanged; the H200 kernels
built with NVRTC without spills."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from test_ops_attention import _varlen_case  # noqa: E402
from test_s8_attnp_persistent import check_varlen  # noqa: E402
from test_s9_causal_stages import _dense_case, _on_cpu  # noqa: E402
from toolchains import needs_nvrtc  # noqa: E402

import tilewright  # noqa: E402
from tilewright import ops  # noqa: E402
from tilewright.ops import attention_kernels as ak  # noqa: E402

dispatch = importlib.import_module("tilewright.ops.attention_dispatch")

UNIFORM = {"HOPPER_D64_OVERRIDES": {**dispatch.HOPPER_D64_OVERRIDES, "tw.uniform_ring": True}}
DIRECT = {"HOPPER_D64_STAGE_OUT": False}
UNIFORM_FOLD = {"HOPPER_D64_OVERRIDES": {**UNIFORM["HOPPER_D64_OVERRIDES"], "tw.wgmma_desc_fold": True}}


@pytest.mark.parametrize("knobs", [UNIFORM, {**UNIFORM, **DIRECT}, UNIFORM_FOLD],
                         ids=["uniform", "uniform+direct", "uniform+fold"])
@pytest.mark.parametrize("persistent", [True, False])
@pytest.mark.parametrize("B, H, Hkv, Sq, Sk, causal, dtype", [
    (1, 2, 1, 300, 333, True, torch.bfloat16),    # GQA, ragged: items of 1..3 key blocks
    (1, 2, 2, 333, 200, True, torch.float16),     # more queries than keys: items with no key step
    (1, 2, 1, 256, 384, True, torch.bfloat16),    # even lengths
    (1, 1, 1, 200, 290, False, torch.float16),    # ragged, non-causal
])
def test_d64_uniform_ring(monkeypatch, knobs, persistent, B, H, Hkv, Sq, Sk, causal, dtype):
    setup, used = _on_cpu(monkeypatch, persistent, PERSISTENT_ORDER="pairs", **knobs)
    try:
        _, k = _dense_case(used, persistent, B, H, Hkv, Sq, Sk, 64, causal, dtype, Sq + Sk + B + persistent + 13)
        # only the persistent kernel has a ring position that runs across work items
        assert (_broadcasts(k.get_kernel_source()) > 0) == persistent
        assert ("ull) + 2ull)" in k.get_kernel_source()) == (knobs is UNIFORM_FOLD)  # (the fold: K's 2nd step)
    finally:
        setup.close()


@pytest.mark.parametrize("causal", [True, False])
def test_uniform_ring_varlen(monkeypatch, causal):
    """Packed sequences (one empty, one without keys), GQA, d 64, persistent: key loops of 0, 1 and 2 steps
    between the broadcasts, so the ring position of a step differs from the item's first."""
    setup, used = _on_cpu(monkeypatch, True, PERSISTENT_ORDER="pairs", **UNIFORM)
    try:
        g = torch.Generator().manual_seed(1313 + causal)
        lens_q, lens_k = [70, 0, 140, 200], [90, 30, 250, 0]
        q, k, v, cu_q, cu_k = _varlen_case(g, lens_q, lens_k, 2, 1, 64)
        out, lse = ops.attention(q, k, v, causal=causal, return_lse=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
        check_varlen(q, k, v, cu_q, cu_k, lens_q, out, lse, causal)
    finally:
        setup.close()


def _broadcasts(src: str) -> int:
    """How many times the CUDA source broadcasts a value from lane 0 (tw_lane0 calls, its definition left out)."""
    return src.count("tw_lane0(") - src.count("int tw_lane0(int x)")


def _source(causal, even, uniform, stage_out=False):
    f = ak.attention_fwd(16, 16, 64, "bfloat16", "bfloat16", causal, False, False, 1, False, False, False, False,
                         128, 128, 2, 256, stage_out=stage_out, even_q=even, even_k=even, persistent=132,
                         order="pairs")
    configs = {**dispatch.HOPPER_CONFIGS, **dispatch.HOPPER_D64_OVERRIDES, "tw.uniform_ring": uniform}
    return tilewright.compile(f, target="cuda -arch=sm_90a", pass_configs=configs)


def test_one_broadcast_a_key_step():
    """The key loop's body broadcasts the ring position once (K's slot and V's, one step behind, share it:
    the broadcast of x serves x - 1) and before any use; without the config nothing is broadcast."""
    src = _source(True, True, True).get_kernel_source()
    loop = src[src.index("for (int kb = (lo + 1)"):]
    body = loop[:loop.index("kb_steps = (kb_steps")]
    assert body.count("tw_lane0(") == 1
    first_use = body.index("kb_uniform", body.index("tw_lane0(") + 20)
    assert body.index("const int kb_uniform = tw_lane0(") < first_use
    assert "(kb_uniform + -1)" in body
    assert _broadcasts(_source(True, True, False).get_kernel_source()) == 0


@needs_nvrtc
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("even", [True, False])
@pytest.mark.parametrize("stage_out", [False, True])
def test_uniform_ring_builds_without_spills(causal, even, stage_out):
    from tilewright.toolchain import nvrtc
    k = _source(causal, even, True, stage_out)
    res = nvrtc.compile_cuda(k.get_kernel_source(), "sm_90a", ["attention_fwd_kernel_kernel"]).resources
    assert res["attention_fwd_kernel_kernel"]["spills"] == 0, res
    assert res["attention_fwd_kernel_kernel"]["local_bytes"] == 0, res


def test_the_emulator_checks_the_promise():
    """warp_uniform of a value that differs between the lanes of a warp is an error, not lane 0's value; one the
    same in each warp (of the target's width: 32 lanes on sm_90a, 64 on gfx942) passes through."""
    from tilewright.interp.emulator.errors import EmulatorError

    with pytest.raises(EmulatorError, match="warp_uniform"):
        _run_uniform_kernel(lambda tid: tid % 3, CUDA)
    out = _run_uniform_kernel(lambda tid: tid // 32 * 7, CUDA)
    assert np.array_equal(out, np.arange(64) // 32 * 7)
    with pytest.raises(EmulatorError, match="warp_uniform"):
        _run_uniform_kernel(lambda tid: tid // 32 * 7, GFX942)  # two values in one wave of 64
    assert np.array_equal(_run_uniform_kernel(lambda tid: tid // 64 + 5, GFX942), np.full(64, 5))


def _run_uniform_kernel(value_of_tid, target):
    """B[tid] = warp_uniform(value_of_tid(tid)) for 64 threads, run by the emulator of ``target``; the printed
    CUDA broadcasts lane 0's value, the HIP source takes the value itself."""
    import tilewright.language as T
    from tilewright.ir import expr as E

    @T.prim_func
    def kernel(B: T.Tensor((64,), "int32")):
        with T.Kernel(1, threads=64):
            tx = T.get_thread_binding()
            v = E.as_expr(value_of_tid(tx))
            B[tx] = E.Call(NAME_UNIFORM, (v,), v.dtype)

    k = tilewright.compile(kernel, target=target, execution_backend="emulator")
    assert _broadcasts(k.get_kernel_source()) == (1 if target == CUDA else 0)
    out = np.full(64, -12345, np.int32)
    k(out)
    return out


NAME_UNIFORM = "warp_uniform"
CUDA, GFX942 = "cuda -arch=sm_90a", "hip -arch=gfx942"
