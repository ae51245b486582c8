"""The session-15 decode candidates (bench/decode_splits.py ``S15_GQA`` / ``S15_MQA``): the GQA default's variants at
other rings (64 keys x 3 stages without the occ2 pad, 32 keys x 4 stages with it) and with lazysum; the MQA tree merge
with occ2 and the late trigger, the cluster merge with the late trigger or lazysum, and 32-key tiles at 3 stages.

Each runs in the CPU emulator of its sm_90a per-thread code against float64 on fresh random inputs, every allocation of
the op poisoned (NaN), twice (the plan's repeat call and the merge counters left at zero): ragged cache lengths with an
empty sequence, or no cache lengths and a length off the key block.  The lists the bench times are checked to parse
(a typo would only show as an ERROR cell on the H200)."""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")

from test_s8_decode_variants import SMEM, _run  # noqa: E402
from test_s9_decode_cmerge import emulate  # noqa: E402, F401  (the fixture)
from test_s13_decode_candidates import load_decode_bench  # noqa: E402
from test_s14_decode_candidates import _run_dense  # noqa: E402
from toolchains import needs_nvrtc  # noqa: E402

dk = importlib.import_module("tilewright.ops.decode_kernels")

SM90, _SM80 = SMEM

GQA = [  # (B, H, Hkv, S, D, dtype, lens or None, splits), variant, config
    ((2, 8, 2, 700, 128, torch.bfloat16, [700, 0], 4), "gcount,pdllate,tmerge", "64,3"),
    ((2, 8, 2, 650, 128, torch.float16, None, 4), "gcount,occ2,pdllate,tmerge", "32,4"),
    ((2, 8, 2, 600, 128, torch.bfloat16, None, 6), "gcount,lazysum,occ2,pdllate,tmerge", None),
    ((2, 8, 2, 610, 128, torch.float16, [610, 33], 4), "gcount,lazysum,occ2,pdllate,tmerge", "32,4"),
]


@needs_nvrtc
@pytest.mark.parametrize("case, variant, cfg", GQA, ids=["64x3-late", "32x4-occ2", "lazy-occ2-s6", "lazy-32x4"])
def test_gqa_against_float64(emulate, monkeypatch, case, variant, cfg):  # noqa: F811
    built = emulate(SM90, variant)
    if cfg:
        monkeypatch.setenv("TILEWRIGHT_DECODE_CONFIG", cfg)
    B, H, Hkv, S, D, dtype, lens, splits = case
    if lens is None:
        _run_dense(B, H, Hkv, S, D, dtype, splits, seed=hash((variant, cfg)) % 1000)
    else:
        _run(*case, seed=23)
    _built_as(built, variant, cfg)


def _built_as(built, variant, cfg):
    """The kernel the plan built has the variant, the ring (block_N, stages) and the threads asked for (64,2: the
    default)."""
    assert built, "no kernel built"
    key = built[0]  # ("decode", heads, kv heads, dim, dtype, cache, splits, k_hc, v_hc, block_H, block_N, stages, ...)
    assert key[-1] == tuple(sorted(variant.split(",")))
    given = [int(x) for x in (cfg or "64,2").split(",")]  # (block_N, stages[, threads])
    assert list(key[10:10 + len(given)]) == given


MQA = [  # (B, H, Hkv, S, D, dtype, lens, splits), variant, config: 32 query heads on one kv head (cover: 32 rows)
    ((2, 32, 1, 1100, 128, torch.float16, [1100, 300], 16), "cover,gcount,occ2,pdllate,tmerge", None),
    ((2, 32, 1, 1100, 128, torch.bfloat16, [1100, 0], 16), "cmerge,cover,gcount,lazysum,pdl", None),
    ((2, 32, 1, 1100, 128, torch.float16, [1000, 65], 16), "cmerge,cover,gcount,pdllate", None),
    ((2, 32, 1, 1100, 128, torch.bfloat16, [1100, 1], 16), "cmerge,cover,gcount,pdl", "32,3"),
    # round 2 (S15B_MQA): lazysum on the tree merge (the long-cache default's), the new short-cache default with the
    # late trigger (with the moved prologue: checked here, left out of the bench), both lazysum ones on 2 warps
    ((2, 32, 1, 1100, 128, torch.float16, [1100, 0], 16), "cover,gcount,lazysum,tmerge", None),
    ((2, 32, 1, 1100, 128, torch.bfloat16, [900, 129], 16), "cmerge,cover,gcount,lazysum,pdllate", None),
    ((2, 32, 1, 1100, 128, torch.float16, [1100, 64], 16), "cmerge,cover,gcount,lazysum,pdl,pdlpre", None),
    ((2, 32, 1, 1100, 128, torch.bfloat16, [1100, 500], 16), "cmerge,cover,gcount,lazysum,pdl", "64,2,64"),  # 2 warps
    ((2, 32, 1, 1100, 128, torch.float16, [1037, 0], 16), "cover,gcount,lazysum,tmerge", "64,2,64"),
]


@needs_nvrtc
@pytest.mark.parametrize("case, variant, cfg", MQA, ids=["tree-occ2-late", "cluster-lazy", "cluster-late", "cluster-32x3",
                                                                 "tree-lazy", "cluster-lazy-late", "cluster-lazy-pre",
                                                                 "cluster-lazy-2warps", "tree-lazy-2warps"])
def test_mqa_against_float64(emulate, monkeypatch, case, variant, cfg):  # noqa: F811
    built = emulate(SM90, variant)
    if cfg:
        monkeypatch.setenv("TILEWRIGHT_DECODE_CONFIG", cfg)
    _run(*case, seed=29)
    _built_as(built, variant, cfg)
    assert built[0][9] == 32  # (cover: one 32-row block of the group)


def test_bench_lists_parse(monkeypatch):
    """Every S15 candidate names known variants and a configuration decode_config takes; at d 128 on an H200 the
    rings give the blocks a SM the comments promise (64,3: 2 without the pad; 32,4 with occ2: 2; MQA 32,3: 3 or more)."""
    ds = load_decode_bench()
    smem = 232448
    per_sm = {}
    for group, table in ((4, ds.S15_GQA + ds.S15B_GQA), (32, ds.S15_MQA + ds.S15B_MQA)):
        for variant, _n, cfg in table:
            monkeypatch.setenv("TILEWRIGHT_DECODE_VARIANT", variant)
            if cfg:
                monkeypatch.setenv("TILEWRIGHT_DECODE_CONFIG", cfg)
            else:
                monkeypatch.delenv("TILEWRIGHT_DECODE_CONFIG", raising=False)
            got = dk.decode_config(128, smem, group)
            assert got[4] == tuple(sorted(variant.split(",")))
            if cfg:
                given = [int(x) for x in cfg.split(",")]
                assert list(got[1:1 + len(given)]) == given
            per_sm[variant, cfg] = dk.blocks_per_sm(128, got, smem)
    assert per_sm["gcount,pdllate,tmerge", "64,3"] == 2
    assert per_sm["gcount,occ2,pdllate,tmerge", "32,4"] == 2
    assert per_sm["cmerge,cover,gcount,pdl", "32,3"] >= 3


@pytest.mark.parametrize("dim", [64, 128, 256])
def test_occ2_two_blocks_a_sm_at_every_head_dim(monkeypatch, dim):
    """occ2's fixed 12 KiB was sized for d 128; at the default rings of d 64 (64 x 4) and d 256 (32 x 3) the built
    sm_90a kernels also come to 2 blocks an H200 SM (228 KiB, 1 KiB a block reserved): 3 -> 2 at d 64 and 128, 2
    stays 2 at d 256 (never 1)."""
    from tilewright.passes.pipeline import PassContext, run_pipeline
    from tilewright.target import Target

    monkeypatch.delenv("TILEWRIGHT_DECODE_VARIANT", raising=False)
    monkeypatch.delenv("TILEWRIGHT_DECODE_CONFIG", raising=False)
    per_sm = {}
    for occ2 in (False, True):
        variant = ("gcount",) + (("occ2",) if occ2 else ()) + ("pdllate", "tmerge")
        bH, bN, stages, threads, _ = dk.decode_config(dim, 232448, 4)
        f = dk.decode_fwd(32, 8, dim, "bfloat16", False, 4, False, False, bH, bN, stages, threads, variant)
        kernel = run_pipeline(f, PassContext(Target.parse(SM90), {"optimize_level": 2}))
        per_sm[occ2] = (228 * 1024) // (kernel.shared_bytes + 1024)
    assert per_sm == ({False: 2, True: 2} if dim == 256 else {False: 3, True: 2})


@needs_nvrtc
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("variant, ring, heads", [
    ("gcount,pdllate,tmerge", (64, 3), (32, 8)), ("gcount,occ2,pdllate,tmerge", (32, 4), (32, 8)),
    ("gcount,lazysum,occ2,pdllate,tmerge", (64, 2), (32, 8)), ("gcount,lazysum,occ2,pdllate,tmerge", (32, 4), (32, 8)),
    ("cover,gcount,occ2,pdllate,tmerge", (64, 2), (32, 1)), ("cmerge,cover,gcount,pdl", (32, 3), (32, 1)),
    ("cover,gcount,lazysum,tmerge", (64, 2), (32, 1)), ("cmerge,cover,gcount,lazysum,pdllate", (64, 2), (32, 1)),
    ("cmerge,cover,gcount,lazysum,pdl,pdlpre", (64, 2), (32, 1)), ("cmerge,cover,gcount,lazysum,pdl", (64, 2, 64), (32, 1)),
    ("cover,gcount,lazysum,tmerge", (64, 2, 64), (32, 1))])
def test_h200_kernels_build_without_spills(dtype, variant, ring, heads):
    """The benchmark's kernels at their rings (d 128; 32-row blocks on 1 kv head) for the H200: no spills, within
    227 KiB, and the blocks a SM the bench's comments count on (64,3 and occ2: 2; 32,3 without occ2: 3 or more)."""
    from tilewright.codegen.cuda import print_cuda
    from tilewright.passes.pipeline import PassContext, run_pipeline
    from tilewright.target import Target
    from tilewright.toolchain import nvrtc

    names = tuple(sorted(variant.split(",")))
    block_H = 32 if "cover" in names else 16
    splits = 32 if "cover" in names else 4
    f = dk.decode_fwd(*heads, 128, dtype, False, splits, False, False, block_H, *(ring + (128,))[:3], names)
    k = run_pipeline(f, PassContext(Target.parse(SM90), {"optimize_level": 2, **(dk.decode_pass_configs(names) or {})}))
    per_sm = (228 * 1024) // (k.shared_bytes + 1024)
    assert per_sm == 2 if ("occ2" in names or ring == (64, 3)) else per_sm >= 3, (k.shared_bytes, per_sm)
    res = nvrtc.compile_cuda(print_cuda(k), "sm_90a", [k.name]).resources[k.name]
    assert res["spills"] == 0 and res["local_bytes"] == 0, res


def test_defaults_after_round_2(monkeypatch):
    """The H200 rounds of 15:45 and 16:10: MQA below MQA_LONG_FROM keys takes lazysum and, at d 128 on blocks of up to 32
    rows, 2 warps (DEFAULT_CONFIG); from there the tree merge with lazysum on 4 warps; GQA unchanged.  The 2-warp ring
    only where it was measured: not on 48/64-row cover blocks, other head dims, a target whose default is the plain
    kernel, a named variant (even the default's names) or under TILEWRIGHT_DECODE_CONFIG."""
    monkeypatch.delenv("TILEWRIGHT_DECODE_VARIANT", raising=False)
    monkeypatch.delenv("TILEWRIGHT_DECODE_CONFIG", raising=False)
    short, long_ = ("cmerge", "cover", "gcount", "lazysum", "pdl"), ("cover", "gcount", "lazysum", "tmerge")
    assert dk.decode_config(128, 232448, 32, SM90, 16384) == (32, 64, 2, 64, short)
    assert dk.decode_config(128, 232448, 24, SM90, 16384) == (32, 64, 2, 64, short)  # (24 heads: the same 32-row block)
    assert dk.decode_config(128, 232448, 32, SM90, 65536) == (32, 64, 2, 128, long_)
    assert dk.decode_config(128, 232448, 64, SM90, 16384) == (64, 64, 2, 128, short)  # 64 rows: 4 warps
    assert dk.decode_config(128, 232448, 48, SM90, 16384)[1:4] == (64, 2, 128)
    assert dk.decode_config(64, 232448, 32, SM90, 16384)[1:4] == (64, 4, 128)
    assert dk.decode_config(256, 232448, 32, SM90, 16384)[1:4] == (32, 3, 128)
    assert dk.decode_config(128, 166912, 32, _SM80, 16384) == (16, 64, 2, 128, ())
    assert dk.decode_config(128, 232448, 4, SM90, 4096) == (16, 64, 2, 128, ("gcount", "occ2", "pdllate", "tmerge"))
    monkeypatch.setenv("TILEWRIGHT_DECODE_CONFIG", "64,2")
    assert dk.decode_config(128, 232448, 32, SM90, 16384) == (32, 64, 2, 128, short)
    monkeypatch.delenv("TILEWRIGHT_DECODE_CONFIG")
    monkeypatch.setenv("TILEWRIGHT_DECODE_VARIANT", ",".join(short))
    assert dk.decode_config(128, 232448, 32, SM90, 16384) == (32, 64, 2, 128, short)


@needs_nvrtc
def test_short_mqa_default_runs_on_two_warps(emulate, monkeypatch):  # noqa: F811
    """The default (no variable) at MQA group 32, d 128, sm_90a, below MQA_LONG_FROM: the 2-warp cluster-merge kernel
    with lazysum against float64, an empty and a ragged sequence, fp16."""
    built = emulate(SM90, "")
    monkeypatch.delenv("TILEWRIGHT_DECODE_VARIANT")
    _run(2, 32, 1, 1100, 128, torch.float16, [0, 1099], 16, seed=31)
    (key,) = built
    assert key[-1] == ("cmerge", "cover", "gcount", "lazysum", "pdl") and key[9:13] == (32, 64, 2, 64)
