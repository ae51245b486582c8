"""The flash-decoding kernel's session-9 candidates (ops/decode_kernels.VARIANTS): "cmerge" (the split-KV
merge spread over a thread-block cluster of the group's splits, then, with more splits than a cluster, over
the last cluster to count for each row slice) and "fill" (one block a SM) in the CPU emulator of their
per-thread code for sm_90a (clusters: every block of a cluster runs together) and sm_80 (no clusters: the
default merge), against float64 on fresh random inputs with every allocation of the op poisoned (NaN): GQA
group 4, MQA (group 32, one 32-row block with "cover" or two 16-row slices), MHA (group 1: 15 of 16 rows
past the group), ragged cache lengths (0, lengths off the 64-key block), 2..16 splits (cluster of 2, 4, 8;
one or several clusters a group), fp16/bf16, head dims 64/128, the LSE; the counters left at zero."""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")

from test_ops_attention import _PoisonedTorch  # noqa: E402
from test_s8_decode_variants import SMEM, _run  # noqa: E402
from toolchains import needs_nvrtc  # noqa: E402

import tilewright  # noqa: E402

ad = importlib.import_module("tilewright.ops.attention_dispatch")
dk = importlib.import_module("tilewright.ops.decode_kernels")

SM90, SM80 = SMEM


@pytest.fixture
def emulate(monkeypatch):
    """Poisoned allocations, kernels compiled for ``target`` (which the plan sees as the tensors' target)
    and run by the emulator; returns the keys of the kernels built."""
    monkeypatch.setattr(ad, "_torch", lambda: _PoisonedTorch())
    built = []

    def use(target, variant):
        monkeypatch.setenv("TILEWRIGHT_DECODE_VARIANT", variant)
        monkeypatch.setattr(ad, "_shared_bytes", lambda t: SMEM[target])
        monkeypatch.setattr(ad, "_target_of", lambda t: target)

        def kernel(key, build, _target, pass_configs=None):
            assert _target == target
            built.append(key)
            return tilewright.compile(build(), target=target, execution_backend="emulator", pass_configs=pass_configs)

        monkeypatch.setattr(ad, "_kernel", kernel)
        ad.forget_plans()
        return built

    yield use
    ad.forget_plans()


CASES = [  # B, H, Hkv, S, D, dtype, lens, splits; variant; the cluster
    ((2, 8, 2, 300, 64, torch.float16, [277, 0], 4), "cmerge", 4),            # GQA 4: one cluster of 4
    ((2, 8, 2, 600, 64, torch.bfloat16, [600, 130], 8), "cmerge", 8),          # clusters of 8: 2 rows a block
    ((1, 8, 2, 400, 64, torch.float16, [399], 6), "cmerge", 2),                # 3 clusters of 2: second round
    ((2, 32, 1, 1100, 128, torch.bfloat16, [1100, 700], 16), "cmerge,cover", 8),  # MQA 32 rows: 2 clusters of 8
    ((2, 32, 1, 300, 128, torch.float16, [300, 65], 4), "cmerge", 4),          # MQA, two 16-row slices
    ((2, 4, 4, 260, 64, torch.float16, [260, 1], 4), "cmerge", 4),             # MHA: 1 row of 16 in the group
    ((2, 8, 2, 300, 128, torch.bfloat16, [0, 0], 4), "cmerge", 4),             # no keys at all: 0 and -inf
    ((2, 80, 1, 300, 64, torch.float16, [99, 299], 4), "cmerge,cover", 4),     # 64-row slices, the second partial
    ((1, 32, 1, 300, 256, torch.float16, [290], 8), "cmerge,cover", 8),        # d 256: 32-key blocks, 32 rows
]


@needs_nvrtc
@pytest.mark.parametrize("case, variant, cluster", CASES,
                         ids=["gqa4-c4", "gqa4-c8", "gqa4-c2x3", "mqa-cover-c8x2", "mqa-slices", "mha", "empty",
                              "group80-cover", "d256-cover"])
def test_cmerge_against_float64(emulate, case, variant, cluster):
    built = emulate(SM90, variant)
    _run(*case, seed=hash((variant, case[7], case[4])) % 1000)
    (key,) = built
    assert "cmerge" in key[-1] and key[6] == case[7]  # ("decode", heads, kv_heads, dim, dtype, cache, splits, ...)
    assert dk.merge_cluster(key[6], key[-1]) == cluster
    (plan,) = dk._plans.values()
    B, H, Hkv = case[:3]
    assert plan.counters == B * Hkv * -(-(H // Hkv) // key[9]) * cluster


@needs_nvrtc
def test_cmerge_kernel_is_a_cluster_kernel():
    """What the variant is for: the cluster (cluster_dims, the barrier) and, with one cluster a group, no
    merge counter at all."""
    cfg = (16, 64, 2, 128, ("cmerge",))
    one = tilewright.compile(dk.decode_fwd(32, 8, 128, "float16", False, 4, False, False, *cfg),
                             target=SM90, execution_backend="emulator").get_kernel_source()
    assert "barrier.cluster.arrive" in one and "atomicAdd" not in one and "Cnt[" not in one
    two = tilewright.compile(dk.decode_fwd(32, 8, 128, "float16", False, 16, False, False, *cfg),
                             target=SM90, execution_backend="emulator").get_kernel_source()
    assert "barrier.cluster.arrive" in two and "atomicAdd" in two


@needs_nvrtc
def test_cmerge_without_clusters_is_the_default_merge(emulate):
    """sm_80 has no clusters: the plan drops "cmerge" (a kernel of the default merge, one counter a group)."""
    built = emulate(SM80, "cmerge,flatmerge")
    _run(2, 8, 2, 300, 64, torch.float16, [277, 3], 4, seed=5)
    (key,) = built
    assert key[-1] == ("flatmerge",)
    (plan,) = dk._plans.values()
    assert plan.counters == 2 * 2


@pytest.mark.parametrize("variant, groups, key_blocks, expected", [
    ("cmerge", 64, 64, 4),            # the heuristic's 4: one cluster of 4
    ("cmerge", 8, 256, 32),           # 2 x 132 // 8 = 33 -> 32 (4 clusters of 8)
    ("cmerge", 40, 256, 6),           # 6 -> whole clusters of 4: 4 ... (6 % 4 = 2)
    ("fill", 8, 256, 16),             # MQA cover: 132 // 8 = 16, one block a SM
    ("fill", 16, 256, 8),             # MQA in 16-row slices
    ("fill", 64, 256, 2),             # GQA: at least 2
    ("fill", 8, 40, 10),              # at least 4 key blocks a range
    ("fill,cmerge", 8, 256, 16),      # 16: two clusters of 8
    ("fill,cmerge", 12, 256, 8),      # 11 -> 8
    ("fill", 200, 256, 1),            # more groups than SMs: the heuristic (no split)
])
def test_split_counts(monkeypatch, variant, groups, key_blocks, expected):
    monkeypatch.setenv("TILEWRIGHT_DECODE_VARIANT", variant)
    cfg = dk.decode_config(128, 232448, 32)
    got = dk.decode_splits(groups, key_blocks, None, 128, cfg, 232448, 132)
    if variant == "cmerge" and groups == 40:
        expected = 4
    assert got == expected
    assert dk.decode_splits(groups, key_blocks, 7, 128, cfg, 232448, 132) == 7  # num_splits given: as given
    assert dk.decode_splits(groups, 7, None, 128, cfg, 232448, 132) == 1  # short sequences: no split
    c = dk.merge_cluster(got, cfg[4])
    assert got % c == 0 and (c == 1) == ("cmerge" not in variant or got == 1)


def test_merge_cluster_and_targets():
    assert [dk.merge_cluster(s, ("cmerge",)) for s in (1, 2, 3, 4, 6, 7, 8, 12, 16, 24, 33)] == \
        [1, 2, 1, 4, 2, 1, 8, 4, 8, 8, 1]
    assert dk.merge_cluster(16, ()) == 1
    cfg = (16, 64, 2, 128, ("cmerge", "cover"))
    assert dk.decode_for_target(cfg, SM90) == cfg
    assert dk.decode_for_target(cfg, SM80)[4] == ("cover",)
    assert dk.decode_for_target(cfg, "interpret")[4] == ("cover",)
    assert dk.decode_counters(8, 16, ("cmerge",)) == 64 and dk.decode_counters(8, 16, ()) == 8


def test_defaults_by_group_and_none(monkeypatch):
    """With TILEWRIGHT_DECODE_VARIANT unset a plan takes the DEFAULT_VARIANT (and DEFAULT_CONFIG) of its kind
    (MQA: a group of more than 16 query heads); "none" is the plain kernel; a set variable wins."""
    monkeypatch.setattr(dk, "DEFAULT_VARIANT", {"mqa": ("cmerge", "cover", "fill"), "gqa": ("cmerge",)})
    monkeypatch.setattr(dk, "DEFAULT_CONFIG", {("mqa", 128): "64,4,128"})
    monkeypatch.delenv("TILEWRIGHT_DECODE_VARIANT", raising=False)
    monkeypatch.delenv("TILEWRIGHT_DECODE_CONFIG", raising=False)
    assert dk.decode_config(128, 232448, 32) == (32, 64, 4, 128, ("cmerge", "cover", "fill"))
    assert dk.decode_config(64, 232448, 32) == (32, 64, 4, 128, ("cmerge", "cover", "fill"))  # (d 64's own rule)
    assert dk.decode_config(128, 232448, 4) == (16, 64, 2, 128, ("cmerge",))
    assert dk.decode_config(128, 232448, 16) == (16, 64, 2, 128, ("cmerge",))
    monkeypatch.setenv("TILEWRIGHT_DECODE_VARIANT", "none")
    assert dk.decode_config(128, 232448, 32) == (16, 64, 2, 128, ())
    monkeypatch.setenv("TILEWRIGHT_DECODE_VARIANT", "cover")
    assert dk.decode_config(128, 232448, 32) == (32, 64, 2, 128, ("cover",))
    monkeypatch.setenv("TILEWRIGHT_DECODE_VARIANT", "cover,bogus")
    with pytest.raises(ValueError, match="bogus"):
        dk.decode_config(128, 232448, 32)
    monkeypatch.setenv("TILEWRIGHT_DECODE_VARIANT", "ws,cmerge")  # (the emulator finds the cluster barrier stuck)
    with pytest.raises(ValueError, match="cmerge and ws cannot be combined"):
        dk.decode_config(128, 232448, 32)


def test_mqa_default_is_cover_cmerge_where_clusters_exist(monkeypatch):
    """The measured default (H200, 22:32; session 12's 07:48 added gcount,pdl): MQA (group > 16) takes cover,cmerge
    on a target with clusters; without clusters the default is the plain kernel (16-row slices), while a chosen
    variant only loses cmerge."""
    monkeypatch.delenv("TILEWRIGHT_DECODE_VARIANT", raising=False)
    monkeypatch.delenv("TILEWRIGHT_DECODE_CONFIG", raising=False)
    # (session 14's 15:45 run added lazysum, its 16:10 run 2 warps at d 128)
    assert dk.decode_config(128, 232448, 32, SM90) == (32, 64, 2, 64, ("cmerge", "cover", "gcount", "lazysum", "pdl"))
    assert dk.decode_config(128, 166912, 32, SM80) == (16, 64, 2, 128, ())
    assert dk.decode_config(128, 232448, 32, "interpret") == (16, 64, 2, 128, ())
    # GQA: session 10's tmerge, session 12's gcount, session 14's occ2,pdllate
    assert dk.decode_config(128, 232448, 4, SM90) == (16, 64, 2, 128, ("gcount", "occ2", "pdllate", "tmerge"))
    monkeypatch.setenv("TILEWRIGHT_DECODE_VARIANT", "cmerge,cover")
    assert dk.decode_config(128, 166912, 32, SM80) == (32, 64, 2, 128, ("cover",))


@needs_nvrtc
def test_mqa_default_runs(emulate, monkeypatch):
    """The default (no variable) at MQA group 32 on sm_90a: one 32-row block a kv head, clusters of the splits."""
    built = emulate(SM90, "")
    monkeypatch.delenv("TILEWRIGHT_DECODE_VARIANT")
    _run(2, 32, 1, 600, 128, torch.float16, [600, 333], 8, seed=11)
    (key,) = built
    assert key[-1] == ("cmerge", "cover", "gcount", "lazysum", "pdl") and key[9] == 32 and key[12] == 64
