"""Two sm_90a dispatch candidates measured with the causal ones (bench/attention_causal_variants.py):

- ``attention_dispatch.HOPPER_SCORES_IN_REGISTERS``: the shared-memory fit of the sm_90a path leaves
  out the float32 score tile (wgmma keeps the scores in registers) and counts the staged output tile,
  so head dim 128 and 256 keep two K/V stages (the fit with the score tile gave them one);
- ``attention_dispatch.HOPPER_D64_BLOCKS``: the (block_M, block_N) of head dim <= 64.

Each run by the cooperative emulator (which checks the mbarrier protocol and slot reuse) on the grid
and the persistent kernel against float64 with poisoned outputs: causal and not, ragged lengths,
S_q != S_k both ways, GQA, the LSE, varlen; and the H200 kernels built with NVRTC without spills
within the shared memory of a block."""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")

from shared_attention_emulator import dense_call  # noqa: E402
from test_ops_attention import _varlen_case  # noqa: E402
from test_s8_attnp_persistent import SM90A, check_varlen, persistent_on_cpu  # noqa: E402
from toolchains import needs_nvrtc  # noqa: E402

from tilewright import ops  # noqa: E402
from tilewright.ops import attention_kernels as ak  # noqa: E402

dispatch = importlib.import_module("tilewright.ops.attention_dispatch")
BLOCKS = 3


def _on_cpu(monkeypatch, persistent, **knobs):
    """persistent_on_cpu with the dispatch knobs set (and PERSISTENT as given); yields the kernels used."""
    for name, value in knobs.items():
        monkeypatch.setattr(dispatch, name, value)
    setup = persistent_on_cpu(monkeypatch, BLOCKS)
    used = next(setup)
    monkeypatch.setattr(dispatch, "PERSISTENT", persistent)
    return setup, used


def _sm90_kernel(used, persistent):
    """(flags of the last sm_90a attention kernel: its key from ``causal`` on, the kernel)."""
    hits = [(key, k) for key, cfg, k in used if key[0] == "attention" and cfg]
    assert hits, "the sm_90a path was not taken"
    key, k = hits[-1]
    src = k.get_kernel_source()
    assert k.num_threads == 384 and "wgmma.mma_async" in src and "setmaxnreg.inc" in src
    assert ("Q_s_empty" in src) == persistent
    assert k.spec.shared_bytes <= 232448
    return key[9:], k  # (after the kernel name, head counts, dtypes, target, configs and stage_out)


def _dense_case(used, persistent, B, H, Hkv, Sq, Sk, D, causal, dtype, seed):
    dense_call(B, H, Hkv, Sq, Sk, D, causal, dtype, seed)
    return _sm90_kernel(used, persistent)


@pytest.mark.parametrize("persistent", [True, False])
@pytest.mark.parametrize("B, H, Hkv, Sq, Sk, D, causal, dtype", [
    (1, 2, 1, 400, 333, 128, True, torch.float16),     # GQA, ragged, fewer keys than queries
    (1, 2, 2, 200, 460, 128, True, torch.bfloat16),    # more keys than queries: 4 key blocks, the diagonal in the 3rd
    (1, 2, 1, 300, 333, 128, False, torch.bfloat16),   # non-causal, ragged: 3 key blocks through a 2-slot ring
    (1, 1, 1, 200, 150, 256, True, torch.bfloat16),    # d 256: two stages of 64 keys (one Q slot when persistent)
])
def test_two_stages_at_d128_and_d256(monkeypatch, persistent, B, H, Hkv, Sq, Sk, D, causal, dtype):
    setup, used = _on_cpu(monkeypatch, persistent, HOPPER_SCORES_IN_REGISTERS=True, PERSISTENT_ORDER="pairs")
    try:
        flags, k = _dense_case(used, persistent, B, H, Hkv, Sq, Sk, D, causal, dtype, Sq + Sk + D + persistent)
        bM, bN, stages = flags[8:11]
        assert (bM, bN, stages) == (128, 128 if D == 128 else 64, 2)
    finally:
        setup.close()


def test_the_fit_with_and_without_the_score_tile():
    """With the score tile (the non-sm_90a paths, and sm_90a calls other than long causal ones by
    default): d 128 and 256 get one stage; without it two, and the staged output tile with a second Q
    slot still fits at d 128."""
    assert dispatch.HOPPER_D64_BLOCKS == (128, 128)
    fit = dispatch._fit_shared
    assert fit((128, 128, 2, 256), 128, 232448) == (128, 128, 1, 256)
    assert fit((128, 128, 2, 256), 128, 232448, scores=False, out_tile=True) == (128, 128, 2, 256)
    assert fit((128, 64, 2, 256), 256, 232448, scores=False) == (128, 64, 2, 256)
    assert fit((128, 192, 2, 256), 64, 232448, scores=False, out_tile=True) == (128, 192, 2, 256)
    assert fit((128, 128, 2, 256), 128, 101376, scores=False, out_tile=True)[2] == 1  # a smaller part: one stage


class _Planned(Exception):
    pass


def _planned_key(monkeypatch, causal, keys, D=128, queries=1024):
    """The sm_90a kernel key and pass configs a dense call's plan asks for (nothing is built)."""
    seen = []

    def record(key, build, target, pass_configs=None):
        seen.append((key, pass_configs))
        raise _Planned  # (the key is all these tests read)

    monkeypatch.setattr(dispatch, "_kernel", record)
    monkeypatch.setattr(dispatch, "_is_hopper", lambda t: True)
    q, k = torch.zeros(1, 2, queries, D, dtype=torch.float16), torch.zeros(1, 2, keys, D, dtype=torch.float16)
    dispatch.forget_plans()
    with pytest.raises(_Planned):
        dispatch._make_plan(q, k, k, causal, None, False, 1, queries, False, None)
    dispatch.forget_plans()
    return seen[-1]


@pytest.mark.parametrize("causal, keys, D, long_causal", [
    (True, 4096, 128, True), (True, 1100, 128, True), (True, 1024, 128, False),
    (True, 4096, 256, False), (True, 4096, 64, True)])
def test_the_long_causal_defaults(monkeypatch, causal, keys, D, long_causal):
    """The defaults from the H200 run: causal calls with more than PERSISTENT_MAX_KEY_BLOCKS key
    blocks at d <= 128 take two K/V stages and (d 65..128) the overlap, and are persistent up to
    PERSISTENT_MAX_KEY_BLOCKS_CAUSAL (32) key blocks, in the "pairs" order; short causal
    calls at d 128 take two stages too since session 10 (HOPPER_SHORT_CAUSAL_OVERRIDES), d 256 as before
    (non-causal ones: test_s10_noncausal_stages.py)."""
    assert dispatch.HOPPER_SCORES_IN_REGISTERS == "long causal" and dispatch.PERSISTENT_ORDER == "pairs"
    assert dispatch.PERSISTENT == "auto" and dispatch.PERSISTENT_MAX_KEY_BLOCKS_CAUSAL == 32
    key, configs = _planned_key(monkeypatch, causal, keys, D)
    bN, stages = key[18:20]
    assert stages == (1 if D == 256 else 2)
    overlap = configs["tw.attention_overlap"]
    assert overlap == (D != 256)
    blocks = -(-keys // bN)
    # (persistent up to 32 key blocks; short causal calls at d 65..128 in PERSISTENT_ORDER_SHORT_CAUSAL's order)
    short = causal and blocks <= dispatch.PERSISTENT_MAX_KEY_BLOCKS and 64 < D <= 128
    order = dispatch.PERSISTENT_ORDER_SHORT_CAUSAL if short else "pairs"
    assert (key[-1] == order) == (blocks <= (32 if causal else 8)), key


@pytest.mark.parametrize("blocks", [(128, 64), (128, 192)])
@pytest.mark.parametrize("persistent", [True, False])
@pytest.mark.parametrize("Sq, Sk, causal", [(300, 333, True), (333, 200, True), (129, 250, False)])
def test_d64_blocks(monkeypatch, blocks, persistent, Sq, Sk, causal):
    """Head dim 64 with 128 x 64 and 128 x 192 blocks (192 keys: a block_N that is no power of two,
    ragged against every length here), GQA."""
    setup, used = _on_cpu(monkeypatch, persistent, HOPPER_D64_BLOCKS=blocks, HOPPER_SCORES_IN_REGISTERS=True,
                          PERSISTENT_ORDER="pairs")
    try:
        flags, k = _dense_case(used, persistent, 1, 2, 1, Sq, Sk, 64, causal, torch.float16, Sq + Sk + blocks[1])
        assert tuple(flags[8:11]) == (*blocks, 2)
    finally:
        setup.close()


def test_varlen_two_stages(monkeypatch):
    """Packed sequences (one empty) on the persistent kernel with two stages at d 128."""
    setup, used = _on_cpu(monkeypatch, True, HOPPER_SCORES_IN_REGISTERS=True, PERSISTENT_ORDER="pairs")
    try:
        g = torch.Generator().manual_seed(71)
        lens_q, lens_k = [70, 0, 140, 200], [90, 30, 250, 0]
        q, k, v, cu_q, cu_k = _varlen_case(g, lens_q, lens_k, 2, 1, 128)
        out, lse = ops.attention(q, k, v, causal=True, return_lse=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
        check_varlen(q, k, v, cu_q, cu_k, lens_q, out, lse, True)
        assert _sm90_kernel(used, True)[0][8:11] == (128, 128, 2)
    finally:
        setup.close()


@needs_nvrtc
@pytest.mark.parametrize("D, bN, persistent", [(128, 128, 132), (128, 128, 0), (64, 192, 132), (64, 192, 0),
                                                (64, 64, 132), (256, 64, 132)])
def test_h200_kernels_build_without_spills(D, bN, persistent):
    """The H200 kernels (16 heads, causal, shipped pass configs) with two stages build with NVRTC
    without spills, within a block's shared memory."""
    from tilewright.codegen.cuda import print_cuda
    from tilewright.passes.pipeline import PassContext, run_pipeline
    from tilewright.target import Target
    from tilewright.toolchain import nvrtc

    configs = {**dispatch.HOPPER_CONFIGS, **(dispatch.HOPPER_D64_OVERRIDES if D <= 64 else {})}
    f = ak.attention_fwd(16, 16, D, "bfloat16", "bfloat16", True, False, False, 1, False, False, False, False, 128,
                         bN, 2, 256, stage_out=D <= 128, persistent=persistent, order="pairs")
    k = run_pipeline(f, PassContext(Target.parse(SM90A), {"optimize_level": 2, **configs}))
    assert k.num_threads == 384 and k.shared_bytes <= 232448
    res = nvrtc.compile_cuda(print_cuda(k), "sm_90a", [k.name]).resources[k.name]
    assert res["spills"] == 0 and res["local_bytes"] == 0, res


@pytest.mark.parametrize("persistent", [True, False])
@pytest.mark.parametrize("configs", [{"tw.attention_overlap": True},
                                     {"tw.attention_overlap": True, "tw.pingpong": True}])
def test_two_stages_with_the_overlap(monkeypatch, persistent, configs):
    """d 128 with two K/V stages under the overlap (Q K^T of the next key block issued before the
    softmax: the next K is in the other slot) and with ping-pong too, causal, ragged, GQA."""
    setup, used = _on_cpu(monkeypatch, persistent, HOPPER_SCORES_IN_REGISTERS=True, PERSISTENT_ORDER="pairs",
                          HOPPER_CONFIGS={**dispatch.HOPPER_CONFIGS, **configs})
    try:
        flags, k = _dense_case(used, persistent, 1, 2, 1, 300, 460, 128, True, torch.bfloat16, 72 + persistent)
        assert flags[8:11] == (128, 128, 2) and "wgmma.wait_group.sync.aligned 1" in k.get_kernel_source()
    finally:
        setup.close()


def test_two_stages_even_lengths(monkeypatch):
    """``SPECIALIZE_EVEN`` with two stages on the persistent "pairs" kernel: lengths that divide the
    blocks (no row checks, only the diagonal masked), Sq != Sk."""
    setup, used = _on_cpu(monkeypatch, True, HOPPER_SCORES_IN_REGISTERS=True, PERSISTENT_ORDER="pairs",
                          SPECIALIZE_EVEN=True)
    try:
        flags, k = _dense_case(used, True, 1, 3, 1, 384, 512, 128, True, torch.float16, 73)
        assert flags[8:11] == (128, 128, 2) and flags[12:14] == (True, True)  # even_q, even_k
    finally:
        setup.close()


@pytest.mark.parametrize("causal, keys, bound, persistent", [
    (True, 1100, 8, False), (True, 1100, 9, True), (False, 1100, 9, False), (True, 1024, 8, True),
    (False, 1024, 8, True)])
def test_auto_persistence_bound_for_causal_calls(monkeypatch, causal, keys, bound, persistent):
    """``PERSISTENT="auto"``: a causal call takes the persistent kernel where its items have at most
    ``PERSISTENT_MAX_KEY_BLOCKS_CAUSAL`` key blocks (1100 keys: 9), a non-causal one at most
    ``PERSISTENT_MAX_KEY_BLOCKS`` (the plan's kernel key says which; nothing is run)."""
    monkeypatch.setattr(dispatch, "PERSISTENT", "auto")
    monkeypatch.setattr(dispatch, "PERSISTENT_MAX_KEY_BLOCKS_CAUSAL", bound)
    monkeypatch.setattr(dispatch, "PERSISTENT_ORDER_SHORT_CAUSAL", None)  # (the key then ends in PERSISTENT_ORDER)
    key, _ = _planned_key(monkeypatch, causal, keys)
    assert (key[-1] == dispatch.PERSISTENT_ORDER) == persistent, key
