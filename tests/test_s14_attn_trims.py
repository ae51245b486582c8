"""Issue 9's causal head-dim-64 key-loop trims (``attention_dispatch.HOPPER_D64_CAUSAL_TRIMS``, names from
``attention_kernels.LOOP_TRIMS``): "fast_rescale" (the output's rescale factor on ex2.approx.ftz, the -inf guard
kept) and "mask_bound" (the diagonal block's mask as one compare of the key column against a per-row bound; even
key lengths only) and "skip_rescale" (the running max moves only by more than 2**8; warps where no row's max moved
skip the output's rescale: an ``if`` on a warp vote around a T.Parallel, which the verifier lets through).  Each run by the cooperative emulator against float64 with NaN-poisoned outputs: the grid and the
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
ALL = ("fast_rescale", "mask_bound", "skip_rescale")


def _last_sm90(used):
    """(key, kernel) of the last sm_90a attention forward built."""
    hits = [(key, k) for key, cfg, k in used if key[0] == "attention" and cfg]
    assert hits, "the sm_90a path was not taken"
    return hits[-1]


@pytest.mark.parametrize("trims", [BOTH, ("mask_bound",), ("fast_rescale",), ("skip_rescale",), ALL])
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
        assert ("trims",) + tuple(sorted(trims)) in key
        assert ("bound[0] =" in src) == ("mask_bound" in trims)
        assert ("exp2f(" in src) == ("fast_rescale" not in trims)  # (the rescale was the loop's only exp2f)
        assert ("Q_s_empty" in src) == persistent
        assert ("__any_sync" in src) == ("skip_rescale" in trims)
    finally:
        setup.close()


@pytest.mark.parametrize("persistent", [True, False])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_skip_rescale_where_the_max_moves(monkeypatch, persistent, dtype):
    """Keys whose scale grows along the sequence (later key blocks' maxima exceed the running one by far more than
    2**LAZY_MAX_LOG2 in some rows and not in others, so some warps rescale and others skip), a few rows of huge
    scores (probabilities near the 256 bound), and the LSE."""
    from test_ops_attention import _close, _close_lse, reference

    setup, used = _on_cpu(monkeypatch, persistent, HOPPER_D64_CAUSAL_TRIMS=ALL)
    try:
        g = torch.Generator().manual_seed(91 + persistent)
        q = torch.randn(1, 2, 384, 64, generator=g)
        k = torch.randn(1, 1, 384, 64, generator=g) * torch.linspace(0.2, 4.0, 384)[:, None]
        v = torch.randn(1, 1, 384, 64, generator=g)
        q[:, :, 200:210] *= 6.0
        q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
        out, lse = tilewright.ops.attention(q, k, v, causal=True, return_lse=True)
        want, want_lse = reference(q, k, v, True)
        _close(out, want, tol=3e-3 if dtype == torch.float16 else 1e-2)
        _close_lse(lse, want_lse)
        assert "__any_sync" in _last_sm90(used)[1].get_kernel_source()
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


@pytest.mark.parametrize("B, H, Hkv, Sq, Sk, dtype", [
    (1, 2, 1, 256, 384, torch.bfloat16),   # GQA, even lengths (the staged store, no mask)
    (1, 1, 1, 200, 333, torch.float16),    # ragged: the key-count mask
])
def test_d64_noncausal_skip_rescale(monkeypatch, B, H, Hkv, Sq, Sk, dtype):
    setup, used = _on_cpu(monkeypatch, False, HOPPER_D64_NONCAUSAL_TRIMS=("skip_rescale",))
    try:
        dense_call(B, H, Hkv, Sq, Sk, 64, False, dtype, Sq + 3 * Sk)
        key, k = _last_sm90(used)
        assert ("trims", "skip_rescale") in key and "__any_sync" in k.get_kernel_source()
    finally:
        setup.close()


@pytest.mark.parametrize("persistent", [True, False])
def test_the_d64_causal_default_takes_mask_bound_and_skip_rescale(monkeypatch, persistent):
    """The default from the H200 run of 16:08 UTC: causal d 64 calls take "mask_bound" and "skip_rescale" (not
    "fast_rescale"), non-causal ones none."""
    assert dispatch.HOPPER_D64_CAUSAL_TRIMS == ("mask_bound", "skip_rescale")
    assert dispatch.HOPPER_D64_NONCAUSAL_TRIMS == ()
    setup, used = _on_cpu(monkeypatch, persistent)
    try:
        dense_call(1, 2, 1, 256, 384, 64, True, torch.bfloat16, 17 + persistent)
        key, k = _last_sm90(used)
        src = k.get_kernel_source()
        assert ("trims", "mask_bound", "skip_rescale") in key
        assert "bound[0] =" in src and "__any_sync" in src and "exp2f(" in src
        dense_call(1, 2, 1, 256, 384, 64, False, torch.bfloat16, 18 + persistent)
        key, k = _last_sm90(used)
        assert "trims" not in str(key) and "__any_sync" not in k.get_kernel_source()
    finally:
        setup.close()


def test_trims_leave_other_calls_alone(monkeypatch):
    """With them set, non-causal d 64 and causal d 128 kernels are as without them."""
    setup, used = _on_cpu(monkeypatch, True, HOPPER_D64_CAUSAL_TRIMS=ALL)
    try:
        dense_call(1, 1, 1, 256, 256, 64, False, torch.bfloat16, 5)
        dense_call(1, 1, 1, 256, 256, 128, True, torch.bfloat16, 6)
        for key, cfg, k in used:
            if key[0] == "attention" and cfg:
                src = k.get_kernel_source()
                assert "trims" not in str(key) and "bound[0] =" not in src and "__any_sync" not in src
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
@pytest.mark.parametrize("causal, persistent", [(True, 132), (True, 0), (False, 0)])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_trims_build_without_spills(causal, persistent, dtype):
    """The H200 kernels (even lengths, the shipped d 64 pass configs and output store) with all the trims."""
    f = ak.attention_fwd(16, 16, 64, dtype, dtype, causal, False, False, 1, False, False, False, False, 128, 128, 2,
                         256, stage_out=not causal, even_q=True, even_k=True, persistent=persistent, order="pairs",
                         fast_rescale=causal, mask_bound=causal, skip_rescale=True)
    from tilewright.toolchain import nvrtc
    k = tilewright.compile(f, target="cuda -arch=sm_90a",
                           pass_configs={**dispatch.HOPPER_CONFIGS, **dispatch.HOPPER_D64_OVERRIDES})
    res = nvrtc.compile_cuda(k.get_kernel_source(), "sm_90a", ["attention_fwd_kernel_kernel"]).resources
    assert res["attention_fwd_kernel_kernel"]["spills"] == 0, res
    assert res["attention_fwd_kernel_kernel"]["local_bytes"] == 0, res


# ---------------------------------------------------------------- an `if` on a warp vote around T.Parallel
def _vote_kernel(cond_on_vote):
    from tilewright import language as T

    @T.prim_func
    def k(A: T.Tensor((64, 8), "float32"), B: T.Tensor((64, 8), "float32")):
        with T.Kernel(1, threads=64):
            x = T.alloc_fragment((64, 8), "float32")
            flag = T.alloc_var("int32")
            T.copy(A, x)
            flag = 0
            for i, j in T.Parallel(64, 8):
                if x[i, j] > 3.0:
                    flag = 1
            if cond_on_vote:
                if T.any_sync(0xFFFFFFFF, flag != 0):
                    for i, j in T.Parallel(64, 8):
                        x[i, j] = x[i, j] * 2.0
            else:
                if flag != 0:
                    for i, j in T.Parallel(64, 8):
                        x[i, j] = x[i, j] * 2.0
            T.copy(x, B)

    return k


def test_parallel_under_a_warp_vote():
    """Each warp doubles its elements where one of its lanes saw a value above 3; an `if` on the per-thread flag
    itself is still refused."""
    import numpy as np

    k = tilewright.compile(_vote_kernel(True), target="cuda -arch=sm_90a", execution_backend="emulator")
    a = torch.randn(64, 8, generator=torch.Generator().manual_seed(5))
    a[3, 2] = 5.0  # only in the first warp's rows (a warp holds some of the 64 x 8 elements)
    b = torch.full_like(a, float("nan"))
    k(a, b)
    doubled = torch.isclose(b, 2 * a)
    kept = torch.isclose(b, a)
    assert bool((doubled | kept).all()) and bool(doubled.any()) and bool(kept.any())
    assert bool(doubled[3, 2]) and not np.isnan(b.numpy()).any()
    with pytest.raises(tilewright.errors.CompileError, match="T.Parallel under an `if`"):
        tilewright.compile(_vote_kernel(False), target="cuda -arch=sm_90a", execution_backend="emulator")


def _transpose_kernel(vote):
    from tilewright import language as T

    @T.prim_func
    def k(A: T.Tensor((64, 64), "float32"), B: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=64):
            x = T.alloc_fragment((64, 64), "float32")
            y = T.alloc_fragment((64, 64), "float32")
            flag = T.alloc_var("int32")
            T.copy(A, x)
            T.fill(y, 0)
            flag = 0
            for i, j in T.Parallel(64, 64):
                if x[i, j] > 3.0:
                    flag = 1
            if vote:
                if T.any_sync(0xFFFFFFFF, flag != 0):
                    for i, j in T.Parallel(64, 64):
                        y[i, j] = x[j, i]
            else:
                for i, j in T.Parallel(64, 64):
                    y[i, j] = x[j, i]
            T.copy(y, B)

    return k


def test_layout_conversion_under_a_warp_vote_is_refused():
    """A T.Parallel reading a fragment transposed goes through shared memory between block barriers: fine
    unconditionally, refused under the vote (the barriers would wait for the warps that skipped the branch)."""
    k = tilewright.compile(_transpose_kernel(False), target="cuda -arch=sm_90a", execution_backend="emulator")
    assert "xchg" in k.get_kernel_source()
    with pytest.raises(tilewright.errors.CompileError, match="in another layout"):
        tilewright.compile(_transpose_kernel(True), target="cuda -arch=sm_90a", execution_backend="emulator")
