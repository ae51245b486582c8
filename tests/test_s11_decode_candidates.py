"""The session-11 decode candidates (bench/decode_splits.py ``S11_GQA``: split count, stages and key-block size
against the fixed cost at KV 4k) in the CPU emulator of their per-thread code for sm_90a (TMA, mbarriers) and sm_80
(cp.async), against float64 on fresh random inputs with every allocation of the op poisoned (NaN): GQA group 4 at
head dim 128 (the benchmark's), ragged cache lengths (0, lengths off the key block), the LSE, fp16/bf16, the merge
counters left at zero; the configurations through ``TILEWRIGHT_DECODE_CONFIG`` as the benchmark sets them; the
split counts "fill" gives the benchmark's shape; and the H200 kernels at that shape built with NVRTC without
spills, within a block's shared memory."""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")

from test_s8_decode_variants import SMEM, _run  # noqa: E402
from test_s9_decode_cmerge import emulate  # noqa: E402, F401  (the fixture)
from toolchains import needs_nvrtc  # noqa: E402

dk = importlib.import_module("tilewright.ops.decode_kernels")

SM90, SM80 = SMEM

CASES = [  # (B, H, Hkv, S, D, dtype, lens, splits), variant, config, target
    ((2, 8, 2, 600, 128, torch.bfloat16, [600, 131], 2), "tmerge,fill", "64,4", SM90),  # one set of 2, 3 ahead
    ((2, 8, 2, 700, 128, torch.float16, [700, 0], 2), "tmerge,fill", "64,5", SM90),     # 4 ahead, an empty sequence
    ((2, 8, 2, 900, 128, torch.bfloat16, [900, 257], 2), "tmerge,fill", "128,3", SM90),  # 128-key blocks
    ((2, 8, 2, 700, 128, torch.float16, [699, 64], 6), "tmerge", "64,2", SM90),        # three sets of 2
    ((2, 8, 2, 600, 128, torch.bfloat16, [600, 65], 4), "tmerge", "64,3", SM90),       # one set of 4, 3 stages
    ((2, 8, 2, 500, 128, torch.float16, [500, 1], 1), "none", "64,5", SM90),           # no split: no merge at all
    ((2, 8, 2, 600, 128, torch.bfloat16, [577, 0], 1), "none", "128,3", SM90),
    ((2, 8, 2, 600, 128, torch.float16, [600, 130], 4), "tmerge,cpasync", "64,2", SM90),  # cp.async on sm_90a
    ((2, 8, 2, 600, 128, torch.float16, [600, 70], 2), "tmerge,fill", "64,4", SM80),   # sm_80 (smem shrinks it)
    ((2, 8, 2, 600, 128, torch.bfloat16, [600, 190], 1), "none", "128,3", SM80),
    # MQA (32 heads on 1 kv head, one 32-row "cover" block): two sets of 8 at 4 / 5 stages, one set of 8
    ((2, 32, 1, 1100, 128, torch.float16, [1100, 300], 16), "cover,tmerge,fill", "64,4", SM90),
    ((2, 32, 1, 2100, 128, torch.bfloat16, [2100, 129], 16), "cover,tmerge,fill", "64,5", SM90),
    ((2, 32, 1, 700, 128, torch.float16, [700, 0], 8), "cover,tmerge", "64,5", SM90),
]


@needs_nvrtc
@pytest.mark.parametrize("case, variant, config, target", CASES,
                         ids=["fill-64x4", "fill-64x5", "fill-128x3", "s6-sets2", "64x3", "s1-64x5", "s1-128x3",
                              "cpasync", "sm80-fill-64x4", "sm80-s1-128x3", "mqa-fill-64x4", "mqa-fill-64x5",
                              "mqa-s8-64x5"])
def test_candidates_against_float64(emulate, monkeypatch, case, variant, config, target):  # noqa: F811
    built = emulate(target, variant)
    monkeypatch.setenv("TILEWRIGHT_DECODE_CONFIG", config)
    _run(*case, seed=hash((variant, config, case[7])) % 1000)
    (key,) = built
    bN, stages = (int(x) for x in config.split(","))
    # ("decode", heads, kv_heads, dim, dtype, cache, splits, k_hc, v_hc, block_H, block_N, stages, threads, variant)
    assert key[6] == case[7] and key[-1] == tuple(sorted(x for x in variant.split(",") if x != "none"))
    # (sm_80's 163 KiB shrinks the deeper rings: 128,3 runs as 128,2 there, as the shrinking rule says)
    assert key[9:12] == dk.decode_config(128, SMEM[target], case[1] // case[2], target)[:3]
    assert key[10:12] == ((bN, stages) if target == SM90 else (bN, min(stages, 4 if bN == 64 else 2)))


def test_fill_splits_at_the_benchmark_shape(monkeypatch):
    """"fill" at batch 8 x 8 kv heads (64 groups) on 132 SMs: 2 splits at every length the benchmark times, with
    64- and 128-key blocks; the default tmerge keeps 4.  MQA (8 groups of 32 rows): 16 splits (two sets of 8)."""
    monkeypatch.setenv("TILEWRIGHT_DECODE_VARIANT", "tmerge,fill")
    for config in ("64,4", "64,5", "128,3"):
        monkeypatch.setenv("TILEWRIGHT_DECODE_CONFIG", config)
        cfg = dk.decode_config(128, SMEM[SM90], 4, SM90)
        assert cfg[1:3] == tuple(int(x) for x in config.split(","))
        for keys in (4096, 8192, 16384, 65536):
            assert dk.decode_splits(64, -(-keys // cfg[1]), None, 128, cfg, SMEM[SM90], 132) == 2
    monkeypatch.setenv("TILEWRIGHT_DECODE_VARIANT", "cover,tmerge,fill")
    for config in ("64,4", "64,5"):
        monkeypatch.setenv("TILEWRIGHT_DECODE_CONFIG", config)
        cfg = dk.decode_config(128, SMEM[SM90], 32, SM90)
        assert cfg[:3] == (32, 64, int(config[-1]))
        for keys in (16384, 65536):
            splits = dk.decode_splits(8, -(-keys // cfg[1]), None, 128, cfg, SMEM[SM90], 132)
            assert splits == 16 and dk.merge_set(splits, cfg[4]) == 8
    monkeypatch.delenv("TILEWRIGHT_DECODE_VARIANT")
    monkeypatch.delenv("TILEWRIGHT_DECODE_CONFIG")
    cfg = dk.decode_config(128, SMEM[SM90], 4, SM90, 4096)
    assert cfg == (16, 64, 2, 128, dk.DEFAULT_VARIANT["gqa"])
    assert dk.decode_splits(64, 64, None, 128, cfg, SMEM[SM90], 132) == 4


@needs_nvrtc
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("variant, splits, bN, stages", [
    (("tmerge",), 4, 64, 2), (("tmerge",), 6, 64, 2), (("fill", "tmerge"), 2, 64, 4), (("fill", "tmerge"), 2, 64, 5),
    (("tmerge",), 4, 64, 3), (("fill", "tmerge"), 2, 128, 3), ((), 1, 64, 5), ((), 1, 128, 3),
    (("cpasync", "tmerge"), 4, 64, 2), (("cover", "fill", "tmerge"), 16, 64, 4), (("cover", "fill", "tmerge"), 16, 64, 5),
    (("cover", "tmerge"), 8, 64, 5)])
def test_h200_kernels_build_without_spills(dtype, variant, splits, bN, stages):
    """The benchmark's kernels (32 heads on 8 kv heads, or on 1 with "cover": 32-row blocks; d 128) for the H200:
    no spills, within 227 KiB."""
    from tilewright.codegen.cuda import print_cuda
    from tilewright.passes.pipeline import PassContext, run_pipeline
    from tilewright.target import Target
    from tilewright.toolchain import nvrtc

    mqa = "cover" in variant
    f = dk.decode_fwd(32, 1 if mqa else 8, 128, dtype, False, splits, False, False, 32 if mqa else 16, bN, stages, 128,
                      variant)
    k = run_pipeline(f, PassContext(Target.parse(SM90), {"optimize_level": 2,
                                                         **(dk.decode_pass_configs(variant) or {})}))
    assert k.shared_bytes <= SMEM[SM90]
    res = nvrtc.compile_cuda(print_cuda(k), "sm_90a", [k.name]).resources[k.name]
    assert res["spills"] == 0 and res["local_bytes"] == 0, res
