"""Session 14's sm_90a candidates (tests/test_s14_attn_candidates.py runs them in the emulator) on an sm_90 GPU
(H100/H200): 192-row query blocks at head dim 64 (``HOPPER_D64_CAUSAL_BLOCKS``, ``HOPPER_D64_NONCAUSAL_BLOCKS``:
three consumer warpgroups), the causal one with the staged output store too, and programmatic dependent launch
(``PREFILL_PDL``): ``ops.attention`` against float64 with NaN-poisoned outputs (causal and not, ragged, S_q != S_k
both ways, GQA, the LSE, varlen with empty sequences), a repeat call from pointers, the kernel checked to be the
one asked for; with PDL, chains of calls each reading the previous call's output (the next kernel may start
before the previous one ends: its wait must hold back every load), eagerly and replayed in a CUDA graph.
Skipped without such a GPU."""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")
if not (torch.cuda.is_available() and not getattr(torch.version, "hip", None)
        and torch.cuda.get_device_capability() == (9, 0)):
    pytest.skip("needs an sm_90 NVIDIA GPU with a CUDA build of PyTorch", allow_module_level=True)

from shared_gpu_attention import (  # noqa: E402
    check_dense_calls,
    check_varlen_calls,
    dense_reference,
    rand_cuda,
    rel_err,
    with_knobs,
)

from tilewright import ops  # noqa: E402

dispatch = importlib.import_module("tilewright.ops.attention_dispatch")
WG3 = {"HOPPER_D64_NONCAUSAL_BLOCKS": (192, 128), "HOPPER_D64_CAUSAL_BLOCKS": (192, 128)}
CANDIDATES = {"3wg": WG3,
              "3wg causal staged": {**WG3, "HOPPER_D64_STAGE_OUT": True},
              "pdl": {"PREFILL_PDL": True},
              "3wg pdl": {**WG3, "PREFILL_PDL": True},
              "3wg ov": {**WG3, "HOPPER_D64_3WG_OVERLAP": True},
              "3wg causal n64 pers": {"HOPPER_D64_CAUSAL_BLOCKS": (192, 64), "HOPPER_D64_CAUSAL_PERSISTENT": True},
              "3wg causal n64": {"HOPPER_D64_CAUSAL_BLOCKS": (192, 64)}}


@pytest.fixture(params=list(CANDIDATES))
def candidate(request, monkeypatch):
    """(name, the forward kernels built: (key, kernel)), the candidate's knobs set, outputs poisoned."""
    for built in with_knobs(monkeypatch, CANDIDATES[request.param]):
        yield request.param, built


def _was_asked_for(candidate, D):
    name, built = candidate
    key, k = built[-1]
    src = k.get_kernel_source()
    assert "wgmma" in src
    three = "3wg" in name and D <= 64 and "setmaxnreg" in src  # (the sm_90a path: 128+ query rows)
    if three and (key[9] or "causal" not in name):  # (key[9]: causal; "3wg causal ..." only changes causal calls)
        assert k.num_threads == 512 and key[17] == 192
        assert ("Q_s_empty" in src) == ("pers" in name)  # (the persistent kernel's second Q slot)
    assert (src.count("griddepcontrol.wait;") == 1) == ("pdl" in name)
    assert bool(k.spec.programmatic) == ("pdl" in name)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("B, H, Hkv, Sq, Sk, D, causal", [
    (4, 16, 16, 4096, 4096, 64, True),    # the d64 rows
    (4, 16, 16, 4096, 4096, 64, False),
    (3, 5, 5, 700, 300, 64, True),        # Sq > Sk at d 64: rows without keys
    (2, 8, 4, 777, 900, 64, False),       # non-causal, GQA, ragged
    (1, 8, 2, 1000, 1337, 64, True),      # GQA, ragged, Sq < Sk
    (2, 8, 4, 777, 900, 128, True),       # d 128 (PDL applies; the block knobs leave it alone), ragged
])
def test_candidates_on_gpu(candidate, B, H, Hkv, Sq, Sk, D, causal, dtype):
    name = candidate[0]
    if "pdl" not in name and (D > 64 or ("staged" in name or "n64" in name) and not causal or "ov" in name and causal):
        pytest.skip(f"{name} builds the kernel of another candidate here")
    check_dense_calls(B, H, Hkv, Sq, Sk, D, causal, dtype, lambda: _was_asked_for(candidate, D))


def test_varlen_candidates_on_gpu(candidate):
    check_varlen_calls(14, lambda D: _was_asked_for(candidate, D))


def _chain(q, k, causal, calls):
    """``calls`` attention calls, each taking the previous output as its query and its value."""
    x = q
    for _ in range(calls):
        x = ops.attention(x, k, x, causal=causal)
    return x


def _chain_reference(q, k, causal, calls):
    """``_chain`` in float64, each output rounded to q's dtype before the next call (as ``_chain``'s are)."""
    x = q
    for _ in range(calls):
        x = dense_reference(x, k, x, causal)[0].to(q.dtype)
    return x


@pytest.mark.parametrize("D, causal", [(64, True), (64, False), (128, True)])
def test_pdl_chains_eager_and_in_a_graph(monkeypatch, D, causal):
    """Each call reads the previous call's output (q and v): the programmatic launch may start a kernel while the
    one it depends on runs, so a load ahead of its wait (the producer's TMA) would read stale or NaN rows."""
    for _ in with_knobs(monkeypatch, {"PREFILL_PDL": True}):
        torch.manual_seed(D + causal)
        q, k = (rand_cuda(2, 8, 1024, D, dtype=torch.float16) for _ in range(2))
        got = _chain(q, k, causal, 4)
        torch.cuda.synchronize()
        assert rel_err(got, _chain_reference(q, k, causal, 4)) < 1e-2
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            _chain(q, k, causal, 4)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = _chain(q, k, causal, 4)
        for _ in range(2):
            q.copy_(rand_cuda(*q.shape, dtype=q.dtype))
            g.replay()
            torch.cuda.synchronize()
            assert rel_err(out, _chain_reference(q, k, causal, 4)) < 1e-2
