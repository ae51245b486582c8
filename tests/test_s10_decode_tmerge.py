"""The flash-decoding kernel's session-10 candidate "tmerge" (ops/decode_kernels.VARIANTS): the split-KV merge as a
tree through global memory (sets of up to 8 neighbouring splits: the last block of a set to count merges the set's
partials into the set's first slot, the last set to count merges those), with no thread-block cluster, so it runs
on sm_80 as on sm_90a.  In the CPU emulator of the per-thread code for both, against float64 on fresh random inputs
with every allocation of the op poisoned (NaN): GQA group 4, MQA (group 32, one 32-row block with "cover", or two
16-row slices), MHA (15 of 16 rows past the group), ragged cache lengths (0, lengths off the 64-key block), 2..32
splits (one set, several sets, sets of 2/4/8, an odd count: no tree), fp16/bf16, head dims 64/128/256, the LSE;
the counters left at zero (``_run`` calls twice and checks)."""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")

from test_s8_decode_variants import SMEM, _run  # noqa: E402
from test_s9_decode_cmerge import emulate  # noqa: E402, F401  (the fixture)
from toolchains import needs_nvrtc  # noqa: E402

import tilewright  # noqa: E402

dk = importlib.import_module("tilewright.ops.decode_kernels")

SM90, SM80 = SMEM

CASES = [  # B, H, Hkv, S, D, dtype, lens, splits; variant; the set size; target
    ((2, 8, 2, 300, 64, torch.float16, [277, 0], 4), "tmerge", 4, SM90),             # GQA 4: one set of 4
    ((2, 8, 2, 1100, 64, torch.bfloat16, [1100, 130], 16), "tmerge", 8, SM90),       # two sets of 8, one nearly empty
    ((1, 8, 2, 800, 128, torch.float16, [799], 6), "tmerge", 2, SM90),               # three sets of 2, each with keys
    ((2, 32, 1, 2100, 128, torch.bfloat16, [2100, 700], 32), "tmerge,cover", 8, SM90),  # MQA 32 rows: 4 sets of 8
    ((2, 32, 1, 300, 128, torch.float16, [300, 65], 4), "tmerge", 4, SM90),          # MQA, two 16-row slices
    ((2, 4, 4, 260, 64, torch.float16, [260, 1], 4), "tmerge", 4, SM90),             # MHA: 1 row of 16 in the group
    ((2, 8, 2, 300, 128, torch.bfloat16, [0, 0], 4), "tmerge", 4, SM90),             # no keys at all: 0 and -inf
    ((2, 80, 1, 600, 64, torch.float16, [99, 599], 8), "tmerge,cover", 8, SM90),     # 64-row slices, the second partial
    ((1, 32, 1, 300, 256, torch.float16, [290], 4), "tmerge,cover", 4, SM90),        # d 256: 32-key blocks, 32 rows
    ((2, 8, 2, 400, 64, torch.float16, [400, 201], 5), "tmerge", 1, SM90),           # 5 splits: no set, the plain merge
    ((2, 32, 1, 1100, 128, torch.float16, [1100, 3], 16), "tmerge,cover", 8, SM80),  # sm_80: no cluster needed
    ((2, 8, 2, 800, 64, torch.bfloat16, [513, 64], 12), "tmerge", 4, SM80),          # sm_80, three sets of 4
]


@needs_nvrtc
@pytest.mark.parametrize("case, variant, tset, target", CASES,
                         ids=["gqa4-t4", "gqa4-t8x2", "gqa4-t2x3", "mqa-cover-t8x4", "mqa-slices", "mha", "empty",
                              "group80-cover", "d256-cover", "odd-plain", "sm80-mqa-cover", "sm80-t4x3"])
def test_tmerge_against_float64(emulate, case, variant, tset, target):  # noqa: F811 (the fixture)
    built = emulate(target, variant)
    _run(*case, seed=hash((variant, case[7], case[4])) % 1000)
    (key,) = built
    assert "tmerge" in key[-1] and key[6] == case[7]  # ("decode", heads, kv_heads, dim, dtype, cache, splits, ...)
    assert dk.merge_set(key[6], key[-1]) == tset
    (plan,) = dk._plans.values()
    B, H, Hkv = case[:3]
    groups = B * Hkv * -(-(H // Hkv) // key[9])
    assert plan.counters == (groups * (case[7] // tset + 1) if tset > 1 else groups)


@needs_nvrtc
def test_tmerge_kernel_has_no_cluster():
    """What the variant is for: the merge without a cluster launch (counters in global memory instead)."""
    cfg = (32, 64, 2, 128, ("cover", "tmerge"))
    src = tilewright.compile(dk.decode_fwd(32, 1, 128, "float16", False, 32, False, False, *cfg),
                             target=SM90, execution_backend="emulator").get_kernel_source()
    assert "barrier.cluster" not in src and "__cluster_dims__" not in src and src.count("atomicAdd") == 2


def test_set_sizes_counters_and_split_counts(monkeypatch):
    assert [dk.merge_set(s, ("tmerge",)) for s in (1, 2, 3, 4, 6, 7, 8, 12, 16, 24, 33)] == \
        [1, 2, 1, 4, 2, 1, 8, 4, 8, 8, 1]
    assert dk.merge_set(16, ()) == 1 and dk.merge_set(16, ("cmerge", "tmerge")) == 1  # (cmerge wins)
    assert dk.decode_counters(8, 32, ("tmerge",)) == 8 * 5 and dk.decode_counters(8, 5, ("tmerge",)) == 8
    monkeypatch.setenv("TILEWRIGHT_DECODE_VARIANT", "tmerge,cover")
    cfg = dk.decode_config(128, 232448, 32, SM80)
    assert cfg[0] == 32 and cfg[4] == ("cover", "tmerge")  # (no cluster: nothing dropped on sm_80)
    assert dk.decode_splits(8, 256, None, 128, cfg, 232448, 132) == 32  # 2 x 132 // 8 = 33 -> whole sets of 8
    assert dk.decode_splits(8, 256, 7, 128, cfg, 232448, 132) == 7  # num_splits given: as given
    monkeypatch.setenv("TILEWRIGHT_DECODE_VARIANT", "tmerge,cover,wave")  # one wave: 132 x 3 // 8 = 49 -> 48
    cfg = dk.decode_config(128, 232448, 32, SM90)
    assert dk.decode_splits(8, 1024, None, 128, cfg, 232448, 132) == 48 and dk.decode_counters(8, 48, cfg[4]) == 56


def test_defaults_after_the_0207_run(monkeypatch):
    """The measured defaults (H200, 02:07; session 12's 07:48 added gcount and programmatic launch, session 14's
    11:29 occ2 with the late trigger, 15:45 / 16:10 lazysum for MQA, 2 warps below MQA_LONG_FROM): GQA tmerge (gcount, occ2, pdllate); MQA cover,cmerge (gcount,
    lazysum, pdl) below MQA_LONG_FROM keys of cache and cover,tmerge (gcount)
    from there; a target without clusters keeps the plain kernel (measured on sm_90a only)."""
    monkeypatch.delenv("TILEWRIGHT_DECODE_VARIANT", raising=False)
    monkeypatch.delenv("TILEWRIGHT_DECODE_CONFIG", raising=False)
    gqa, mqa_long = ("gcount", "occ2", "pdllate", "tmerge"), ("cover", "gcount", "lazysum", "tmerge")
    mqa = ("cmerge", "cover", "gcount", "lazysum", "pdl")  # (lazysum since the 15:45 run of session 14, 2 warps since 16:10)
    assert dk.decode_config(128, 232448, 4, SM90, 4096) == (16, 64, 2, 128, gqa)
    assert dk.decode_config(128, 232448, 32, SM90, 16384) == (32, 64, 2, 64, mqa)
    assert dk.decode_config(128, 232448, 32, SM90, dk.MQA_LONG_FROM) == (32, 64, 2, 128, mqa_long)
    assert dk.decode_config(128, 232448, 32, SM90) == (32, 64, 2, 64, mqa)  # (no length given)
    assert dk.decode_config(128, 166912, 4, SM80, 4096)[4] == () and dk.decode_config(128, 166912, 32, SM80, 65536)[4] == ()


@needs_nvrtc
def test_mqa_long_default_runs(emulate, monkeypatch):  # noqa: F811 (the fixture)
    """The default at MQA group 32 with a cache of MQA_LONG_FROM keys or more on sm_90a: cover,tmerge (gcount, lazysum;
    4 warps)."""
    monkeypatch.setattr(dk, "MQA_LONG_FROM", 1024)
    built = emulate(SM90, "")
    monkeypatch.delenv("TILEWRIGHT_DECODE_VARIANT")
    _run(2, 32, 1, 1100, 128, torch.bfloat16, [1100, 555], 16, seed=13)
    (key,) = built
    assert key[-1] == ("cover", "gcount", "lazysum", "tmerge") and key[9] == 32 and key[12] == 128
