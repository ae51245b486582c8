"""The session-11 fuzz templates (tilewright/fuzz/ops_cases_s11.py: the sm_90a defaults of session 10 at
the sizes where they switch): a few seeded cases of each on the sm_90a emulator, none may give a wrong
answer, an internal error or a crash and some must run; the references can fail; and the cases reach
the configurations they are for (non-causal / short causal / long causal overrides, the even-length
kernels and their tails, the tree merge and MQA's cover,tmerge on either side of MQA_LONG_FROM, the
128-row GEMM tile, the persistent GEMM's nested ring)."""

from __future__ import annotations

import numpy as np
import pytest
from shared_fuzz import assert_reference_can_fail, assert_some_case_ran, run_quick_cases

from tilewright.fuzz import ops_cases
from tilewright.fuzz.ops_cases_s11 import OPS_S11, _matmul_def_config
from tilewright.fuzz.runner import run_case
from tilewright.fuzz.templates import TEMPLATES
from tilewright.ops import decode_kernels as dk

pytest.importorskip("torch")
SM90 = ("emulator:sm_90a",)


def _small_attention(p):
    p.update(kb=2, b=1, hkv=1, group=2, sq=min(p["sq"], 129), sk=min(p["sk"], 257))


def _small_decode(p):
    p.update(b=1, sk=min(p["sk"], 545), splits=p["splits"] if (p["splits"] or 0) <= 8 else 8)


ADJUST = {"ops_attention_s10def": _small_attention, "ops_decode_s10def": _small_decode}
SEEDS = {"ops_attention_s10def": 111, "ops_decode_s10def": 112, "ops_matmul_s10def": 113}


@pytest.mark.parametrize("name", [t.name for t in OPS_S11])
def test_s11_template_quick_cases(name):
    seen = run_quick_cases(name, SM90, 2, SEEDS[name], adjust=ADJUST.get(name))
    assert_some_case_ran(name, seen, SM90)


@pytest.mark.parametrize("name", [t.name for t in OPS_S11])
def test_s11_reference_is_not_vacuous(name):
    assert_reference_can_fail(name, 1.0)


def _attention(**over):
    """The configurations (key, pass configs) of the checked call of one ops_attention_s10def case."""
    tpl = TEMPLATES["ops_attention_s10def"]
    p = dict(tpl.draw(np.random.default_rng(0)), seed=1, mode="dense", b=1, hkv=1, group=1, lse=True, sms=2,
             change="same", **over)
    assert run_case(tpl.make(p), "emulator:sm_90a").status == "ok", p
    return [(key, cfg) for key, cfg in ops_cases.BUILT if key[0] == "attention" and cfg][-1]


@pytest.mark.parametrize("causal, sk, want", [
    (False, 129, {"tw.pingpong": True, "tw.attention_overlap": True}),   # non-causal d 65..128
    (True, 256, {"tw.pingpong": True, "tw.attention_overlap": True}),    # short causal: 2 key blocks, kb 2
    (True, 257, {"tw.attention_overlap": True}),                         # long causal: 3 key blocks
])
def test_the_attention_cases_take_the_session10_configurations(causal, sk, want):
    key, cfg = _attention(causal=causal, sk=sk, sq=128, d=96, kb=2)
    assert {k: cfg.get(k) for k in ("tw.pingpong", "tw.attention_overlap")} == {
        "tw.pingpong": want.get("tw.pingpong"), "tw.attention_overlap": want["tw.attention_overlap"]}, cfg
    assert key[17:20] == (128, 128, 2), key  # block_M, block_N, two K/V stages


def test_even_lengths_take_the_kernel_without_tails_and_one_off_does_not():
    """(even_q, even_k) of the kernel key: SPECIALIZE_EVEN's kernels at block multiples, tails one off."""
    assert _attention(causal=False, sq=128, sk=256, d=64, kb=2)[0][21:23] == (True, True)
    assert _attention(causal=True, sq=256, sk=255, d=64, kb=2)[0][21:23] == (True, False)
    assert _attention(causal=False, sq=129, sk=256, d=64, kb=2)[0][21:23] == (False, True)


def _decode_variant(group, sk, mqa_from, splits):
    tpl = TEMPLATES["ops_decode_s10def"]
    p = dict(tpl.draw(np.random.default_rng(0)), seed=2, b=1, hkv=1, group=group, sk=sk, d=64, splits=splits,
             mqa_from=mqa_from, change="same", sms=4)
    assert run_case(tpl.make(p), "emulator:sm_90a").status == "ok", p
    return [key for key, _ in ops_cases.BUILT if key[0] == "decode"][-1][-1]


@pytest.mark.parametrize("group, mqa_from, want", [(4, None, dk.DEFAULT_VARIANT["gqa"]),
                                                    (24, 1, dk.DEFAULT_VARIANT["mqa"]),
                                                    (24, 0, dk.DEFAULT_VARIANT["mqa_long"]),
                                                    (24, -1, dk.DEFAULT_VARIANT["mqa_long"])])
def test_the_decode_cases_take_the_default_merges(group, mqa_from, want):
    assert _decode_variant(group, 513, mqa_from, 8) == want


def test_the_shipped_mqa_boundary_and_tree_sets():
    """The real MQA_LONG_FROM (too many keys for the emulator) on the plan alone; the forced split counts
    of the template cover sets of 8, 4, 2 and none."""
    from tilewright.fuzz.ops_cases_s11 import SPLITS
    at = dk.MQA_LONG_FROM
    short = ("cmerge", "cover", "gcount", "lazysum", "pdl")
    assert dk.decode_config(128, 232448, 32, "cuda -arch=sm_90a", at - 1)[4] == short
    assert dk.decode_config(128, 232448, 32, "cuda -arch=sm_90a", at)[4] == ("cover", "gcount", "lazysum", "tmerge")
    assert dk.decode_config(128, 232448, 16, "cuda -arch=sm_90a", at)[4] == ("gcount", "occ2", "pdllate", "tmerge")
    assert {dk.merge_set(s, ("tmerge",)) for s in SPLITS if s} == {1, 2, 4, 8}


def test_the_matmul_cases_reach_the_128_row_tile_and_the_nested_ring():
    from tilewright.ops import gemm_configs

    tpl = TEMPLATES["ops_matmul_s10def"]
    rng = np.random.default_rng(4)
    chosen, rings = set(), set()
    for _ in range(200):
        p = tpl.draw(rng)
        if p["form"] == "heuristic":
            cfg = gemm_configs.heuristic(p["m"], p["n"], p["k"], p["dtype"], "sm_90", p["sms"])
            chosen.add((cfg.block_M, cfg.block_N, cfg.threads) if cfg.kind == "direct" else cfg.kind)
        else:
            cfg = _matmul_def_config(p)
            tiles = -(-p["m"] // cfg.block_M) * -(-p["n"] // cfg.block_N)
            ksteps = -(-p["k"] // cfg.block_K)
            rings.add((cfg.ws, tiles % p["sms"] != 0, ksteps % cfg.stages != 0))
    assert (128, 64, 128) in chosen and len(chosen) > 1, chosen  # t128 and something else around it
    assert (False, True, True) in rings and (True, True, True) in rings, rings


def test_the_persistent_case_without_warp_specialization_is_the_nested_ring():
    """Its kernel sets the ring's mbarriers up once and carries the phases over the tiles (``k_phases``)."""
    from tilewright.ops import dispatch

    tpl = TEMPLATES["ops_matmul_s10def"]
    p = dict(tpl.draw(np.random.default_rng(1)), seed=1, form="persistent", m=200, n=136, k=232, stages=3, bk=32,
             sms=5, change="same")  # (12 tiles of 64x64 over 5 blocks: 3, 3, 2, 2, 2; 8 K steps over 3 slots)
    dispatch._kernels.clear()
    assert run_case(tpl.make(p), "emulator:sm_90a").status == "ok"
    (src,) = [k.get_kernel_source() for k in dispatch._kernels.values()]
    assert "k_phases" in src and src.count("mbarrier.init") == p["stages"], src.count("mbarrier.init")
