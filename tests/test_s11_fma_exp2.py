"""Session 11's sm_90a candidate for head dim 64 (bench/attention_variants.py ``TW_VARIANTS=s11``):
``attention_dispatch.HOPPER_D64_FMA_EXP2``, part of the softmax's 2**x computed by a cubic on the FMA pipe
(``attention_kernels.exp2_on_fma``) instead of MUFU.

The function alone against float64 on the emulator of the sm_90a lowering (relative error, exact 0 for
-inf and below 2**-127, NaN kept); the kernels run by the cooperative emulator on the grid and the
persistent kernel against float64 with poisoned outputs: causal and not, ragged lengths, S_q != S_k both
ways (rows that see no key), GQA, the LSE; and the H200 kernel built with NVRTC without spills."""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from test_ops_attention import _close, _close_lse, _rand, reference  # noqa: E402
from test_s9_causal_stages import _dense_case, _on_cpu  # noqa: E402
from toolchains import needs_nvrtc  # noqa: E402

import tilewright  # noqa: E402
import tilewright.language as T  # noqa: E402
from tilewright import ops  # noqa: E402
from tilewright.ops import attention_kernels as ak  # noqa: E402

dispatch = importlib.import_module("tilewright.ops.attention_dispatch")


def _exp2_kernel(n):
    @T.prim_func
    def fma_exp2(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(n // 128, threads=128) as bx:
            S = T.alloc_fragment((128,), "float32")
            T.copy(A[bx * 128], S)
            for i in T.Parallel(128):
                S[i] = ak.exp2_on_fma(S[i])
            T.copy(S, B[bx * 128])

    return fma_exp2


def test_exp2_on_fma_against_float64():
    rng = np.random.default_rng(11)
    special = [-math.inf, np.nan, -127.0, -126.5, -126.0, -200.0, -1e30, 0.0, -0.0, 1e-7, -0.5, -0.49999997]
    a = np.concatenate([np.array(special), rng.uniform(-30, 0, 2048 - 512 - len(special)),
                        rng.uniform(-126, -100, 256), -rng.exponential(1.0, 256)]).astype(np.float32)
    b = np.full_like(a, np.nan)
    tilewright.compile(_exp2_kernel(a.size), target="cuda -arch=sm_90a", execution_backend="emulator")(a, b)
    want = np.exp2(a.astype(np.float64))
    assert np.isnan(b[1]) and np.isnan(b).sum() == 1  # NaN in, NaN out; every other element written
    assert b[0] == 0 and b[2] == 0 and b[5] == 0 and b[6] == 0  # -inf and x <= -127: exactly 0
    normal = (a >= -126) & ~np.isnan(a)
    rel = np.abs(b[normal] / want[normal] - 1)
    assert rel.max() < 1e-4, rel.max()  # the cubic's 7.5e-5 (the bar: 3e-3 relative, bf16's rounding)
    tiny = (a < -126) & (a > -127)  # 2**x below the normal range: at most the smallest normal
    assert (b[tiny] >= 0).all() and (b[tiny] <= 2.0 ** -125).all()


@pytest.mark.parametrize("fma", [(1, 4), (3, 8)])
@pytest.mark.parametrize("persistent", [True, False])
@pytest.mark.parametrize("B, H, Hkv, Sq, Sk, causal, dtype", [
    (1, 2, 1, 300, 333, True, torch.bfloat16),    # GQA, ragged
    (1, 2, 2, 333, 200, True, torch.float16),     # more queries than keys: the first rows see no key
    (1, 2, 1, 256, 384, False, torch.bfloat16),   # even lengths: the kernel without tail handling
    (1, 1, 1, 200, 290, False, torch.float16),    # ragged, non-causal
])
def test_fma_exp2_kernels(monkeypatch, fma, persistent, B, H, Hkv, Sq, Sk, causal, dtype):
    setup, used = _on_cpu(monkeypatch, persistent, HOPPER_D64_FMA_EXP2=fma, PERSISTENT_ORDER="pairs")
    try:
        flags, k = _dense_case(used, persistent, B, H, Hkv, Sq, Sk, 64, causal, dtype, Sq + Sk + fma[0])
        assert flags[8:11] == (128, 128, 2)
        assert "12582912.0f" in k.get_kernel_source()  # the cubic is in the kernel
    finally:
        setup.close()


def test_the_session11_defaults(monkeypatch):
    """From the H200 run of 05:02 UTC (TW_VARIANTS=s11): tw.reduce_tree at head dim 64 only (it lost at d 128, 4k
    causal); the cubic off (slower at every share); short causal d 128 calls in "head_major_snake" order, long
    ones and d 64 in "pairs"."""
    from test_s9_causal_stages import _planned_key
    assert dispatch.HOPPER_D64_FMA_EXP2 is None and dispatch.HOPPER_D64_OVERRIDES.get("tw.reduce_tree")
    assert "tw.reduce_tree" not in dispatch.HOPPER_CONFIGS
    for causal, keys, D, tree, order in [(True, 1024, 128, False, "head_major_snake"), (True, 1024, 96, False,
                                                                                        "head_major_snake"),
                                         (True, 4096, 128, False, "pairs"), (True, 4096, 64, True, "pairs"),
                                         (True, 1024, 64, True, "pairs"), (False, 4096, 64, True, None),
                                         (False, 1024, 128, False, "pairs")]:
        key, configs = _planned_key(monkeypatch, causal, keys, D)
        assert bool(configs.get("tw.reduce_tree")) == tree, (causal, keys, D)
        if order:
            assert key[-1] == order, (causal, keys, D)
    monkeypatch.setattr(dispatch, "PERSISTENT_ORDER_SHORT_CAUSAL", None)
    assert _planned_key(monkeypatch, True, 1024, 128)[0][-1] == "pairs"


def test_the_knob_is_off_and_only_for_head_dim_64(monkeypatch):
    assert dispatch.HOPPER_D64_FMA_EXP2 is None
    from test_s9_causal_stages import _planned_key
    monkeypatch.setattr(dispatch, "HOPPER_D64_FMA_EXP2", (1, 4))
    assert ("fma_exp2", (1, 4)) in _planned_key(monkeypatch, False, 4096, 64)[0]
    assert all("fma_exp2" not in str(x) for x in _planned_key(monkeypatch, False, 4096, 128)[0])


@needs_nvrtc
@pytest.mark.parametrize("fma, tree", [((1, 8), False), ((1, 4), False), ((3, 8), False), (None, True), ((1, 4), True)])
@pytest.mark.parametrize("causal, persistent", [(False, 0), (True, 132)])
def test_fma_exp2_builds_without_spills(fma, tree, causal, persistent):
    from tilewright.toolchain import nvrtc
    f = ak.attention_fwd(16, 16, 64, "bfloat16", "bfloat16", causal, False, False, 1, False, False, False, False,
                         128, 128, 2, 256, stage_out=True, even_q=True, even_k=True, persistent=persistent,
                         order="pairs", fma_exp2=fma)
    configs = {**dispatch.HOPPER_CONFIGS, **dispatch.HOPPER_D64_OVERRIDES, **({"tw.reduce_tree": True} if tree else {})}
    k = tilewright.compile(f, target="cuda -arch=sm_90a", pass_configs=configs)
    res = nvrtc.compile_cuda(k.get_kernel_source(), "sm_90a", ["attention_fwd_kernel_kernel"]).resources
    assert res["attention_fwd_kernel_kernel"]["spills"] == 0, res


# ---------------------------------------------------------------- tw.reduce_tree (passes/lower_reduce.py)
def _reduce_kernel(rows, cols):
    @T.prim_func
    def reduce_both(A: T.Tensor((rows, cols), "float32"), Mx: T.Tensor((rows,), "float32"),
                    Sm: T.Tensor((rows,), "float32")):
        with T.Kernel(1, threads=128):
            S = T.alloc_fragment((rows, cols), "float32")
            m = T.alloc_fragment((rows,), "float32")
            r = T.alloc_fragment((rows,), "float32")
            T.copy(A[0, 0], S)
            T.fill(m, -T.infinity("float32"))
            T.reduce_max(S, m, dim=1, clear=False)
            T.reduce_sum(S, r, dim=1)
            T.copy(m, Mx[0])
            T.copy(r, Sm[0])

    return reduce_both


@pytest.mark.parametrize("rows, cols", [(64, 96), (128, 40), (16, 8)])
def test_reduce_tree_against_float64(rows, cols):
    """The tree gives the chain's max bit for bit and the sum within float32 rounding; -inf and NaN rows too."""
    a = np.random.default_rng(rows + cols).standard_normal((rows, cols)).astype(np.float32) * 10
    a[1] = -np.inf
    a[2, 3] = np.nan  # (reduce_max without nan_propagate: fmaxf drops it; the sum keeps it)
    got, srcs = {}, {}
    for tree in (False, True):
        mx, sm = np.full(rows, np.nan, np.float32), np.full(rows, np.nan, np.float32)
        k = tilewright.compile(_reduce_kernel(rows, cols), target="cuda -arch=sm_90a", execution_backend="emulator",
                               pass_configs={"tw.reduce_tree": True} if tree else None)
        k(a, mx, sm)
        got[tree], srcs[tree] = (mx, sm), k.get_kernel_source()
    assert "fmaxf(fmaxf(S[0], S[1]), fmaxf(S[2], S[3]))" in srcs[True] and srcs[False].count("fmaxf(fmaxf(") > 0
    np.testing.assert_array_equal(got[True][0], got[False][0])
    np.testing.assert_array_equal(got[True][0], np.nanmax(a, axis=1))
    want = a.astype(np.float64).sum(axis=1)
    ok = np.isfinite(want)
    np.testing.assert_allclose(got[True][1][ok], want[ok], rtol=1e-5, atol=1e-3)
    assert np.isnan(got[True][1][2]) and got[True][1][1] == -np.inf


@pytest.mark.parametrize("persistent", [True, False])
@pytest.mark.parametrize("D, knobs, causal, Sq, Sk", [
    (64, {"HOPPER_D64_OVERRIDES": {"tw.attention_overlap": True, "tw.reduce_tree": True},
          "HOPPER_D64_FMA_EXP2": (1, 4)}, True, 333, 200),      # the overlap only, tree and cubic; rows without keys
    (64, {"HOPPER_D64_OVERRIDES": {"tw.attention_overlap": True, "tw.pingpong": True, "tw.reduce_tree": True}},
     False, 200, 290),
    (128, {"HOPPER_CONFIGS": {**dispatch.HOPPER_CONFIGS, "tw.reduce_tree": True}}, True, 300, 333),
])
def test_reduce_tree_kernels(monkeypatch, persistent, D, knobs, causal, Sq, Sk):
    setup, used = _on_cpu(monkeypatch, persistent, PERSISTENT_ORDER="pairs", **knobs)
    try:
        flags, k = _dense_case(used, persistent, 1, 2, 1, Sq, Sk, D, causal, torch.bfloat16, Sq + Sk + D)
        assert [c for key, c, _ in used if key[0] == "attention" and c][-1].get("tw.reduce_tree")
    finally:
        setup.close()


@pytest.mark.parametrize("Sq, Sk", [(200, 290), (384, 256)])
def test_three_warpgroups_with_the_tree_and_the_cubic(monkeypatch, Sq, Sk):
    """Non-causal d 64 on 192 x 128 blocks (HOPPER_D64_NONCAUSAL_BLOCKS: three consumer warpgroups, the grid
    kernel) with tw.reduce_tree and a quarter of the 2**x on the FMA pipe; ragged and even lengths."""
    setup, used = _on_cpu(monkeypatch, False, HOPPER_D64_NONCAUSAL_BLOCKS=(192, 128), HOPPER_D64_FMA_EXP2=(1, 4),
                          HOPPER_D64_OVERRIDES={"tw.attention_overlap": True, "tw.pingpong": True,
                                                "tw.reduce_tree": True})
    try:
        g = torch.Generator().manual_seed(Sq + Sk)
        q, k, v = _rand(g, 1, 2, Sq, 64, dtype=torch.bfloat16), _rand(g, 1, 1, Sk, 64, dtype=torch.bfloat16), \
            _rand(g, 1, 1, Sk, 64, dtype=torch.bfloat16)
        out, lse = ops.attention(q, k, v, causal=False, return_lse=True)
        want, want_lse = reference(q, k, v, False)
        _close(out, want, tol=1e-2)
        _close_lse(lse, want_lse)
        key, configs, kern = [u for u in used if u[0][0] == "attention" and u[1]][-1]
        assert key[17:19] == (192, 128) and configs["tw.reduce_tree"]
        assert "12582912.0f" in kern.get_kernel_source()
    finally:
        setup.close()
