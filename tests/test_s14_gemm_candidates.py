"""Session 14 GEMM candidates for the two shapes still below 0.95x cuBLAS (issue 8), all existing kernels in
combinations the H200 has not run: for 128x8192x8192 a ninth stage with C in the ring's memory, and A multicast
(c2x1) under programmatic dependent launch; for 2000x3000x1000 the ping-pong pairs five stages deep beside
32-column chunks with the trigger right after the wait.  On the sm_90a emulator against float64 with NaN-poisoned
outputs (ragged M, N and K, fp16 / bf16, bias and activation epilogues, B transposed), NVRTC builds without
spills, and the bench's per-round rotation of the timing order (bench/gemm.py ``rotated``)."""

import sys
from pathlib import Path

import pytest
from test_s10_gemm_candidates import assert_builds_without_spills, run_on_the_emulator
from toolchains import needs_nvrtc

from tilewright.ops import gemm_configs
from tilewright.ops.gemm_configs import GemmConfig

P = GemmConfig.parse
NEW = [
    # (config, M, N, K, dtype, trans_b, activation)
    (P("direct 128x64x64 s9 t128 wgmma ws tma-store/ring pdllate"), 120, 200, 648, "float16", False, "none"),
    (P("direct 128x64x64 s9 t128 wgmma ws tma-store/ring pdllate"), 77, 136, 392, "bfloat16", True, "silu"),
    (P("direct 128x64x64 s8 t128 wgmma ws tma-store c2x1 pdllate"), 128, 264, 584, "bfloat16", False, "relu"),
    (P("direct 128x64x64 s8 t128 wgmma ws tma-store c2x1 pdllate"), 100, 136, 200, "float16", True, "none"),
    (P("persistent 128x192x64 s5 t128 g8 wgmma ws tma-store/32 pingpong c2x1 pdlearly"), 264, 584, 200, "float16",
     False, "relu"),
    (P("persistent 128x192x64 s5 t128 g8 wgmma ws tma-store/32 pingpong c2x1 pdlearly"), 136, 392, 136, "bfloat16",
     True, "none"),
    # the defaults with 256-byte L2 promotion (the same kernel; the descriptors differ)
    (P("direct 128x64x64 s8 t128 wgmma ws tma-store pdllate l2p256"), 128, 200, 456, "float16", False, "none"),
    (P("persistent 128x192x64 s4 t128 g8 wgmma ws tma-store/64 pingpong c2x1 pdlearly l2p256"), 200, 392, 200,
     "bfloat16", False, "silu"),
    (P("persistent 128x256x64 s4 t256 g8 wgmma ws tma-store/128 l2p256"), 300, 520, 200, "float16", True, "relu"),
    # round 2 (after the H200 run of 15:43 UTC): shallower rings for 128 rows, other L2 promotions
    (P("direct 128x64x64 s6 t128 wgmma ws tma-store pdllate"), 120, 200, 584, "bfloat16", False, "none"),
    (P("direct 128x64x128 s4 t128 wgmma ws tma-store pdllate"), 128, 136, 648, "float16", True, "relu"),
    (P("direct 128x64x64 s8 t128 wgmma ws tma-store pdllate l2p64"), 100, 200, 392, "float16", False, "none"),
    (P("persistent 128x192x64 s4 t128 g8 wgmma ws tma-store/64 pingpong c2x1 pdlearly l2p0"), 264, 392, 136,
     "float16", False, "none"),
]


@pytest.mark.parametrize("cfg, M, N, K, dtype, trans_b, activation", NEW,
                         ids=lambda x: x.short().replace(" ", "_") if isinstance(x, GemmConfig) else None)
def test_s14_candidates_on_the_emulator(cfg, M, N, K, dtype, trans_b, activation):
    src = run_on_the_emulator(cfg, M, N, K, dtype, trans_b, activation)
    assert ("griddepcontrol.wait" in src) == bool(cfg.pdl)


def test_s14_candidates_fit_as_named():
    for cfg, *_ in NEW:
        assert GemmConfig.parse(cfg.short()) == cfg
        assert gemm_configs.fit_shared(cfg, gemm_configs.H200_SHARED_BYTES) == cfg
    # a tenth 24 KB stage would not fit beside nothing: the ring shrinks back to nine at most
    ten = P("direct 128x64x64 s10 t128 wgmma ws tma-store/ring pdllate")
    assert gemm_configs.fit_shared(ten, gemm_configs.H200_SHARED_BYTES).stages < 10


@needs_nvrtc
@pytest.mark.parametrize("cfg", sorted({c for c, *_ in NEW}, key=GemmConfig.short),
                         ids=lambda c: c.short().replace(" ", "_"))
def test_s14_candidates_build_without_spills(cfg, tmp_path):
    N, K = (3000, 1000) if cfg.block_N > 64 else (8192, 8192)
    assert_builds_without_spills(cfg, N, K, "bfloat16", tmp_path)


def test_bench_rotates_the_timing_order_per_round():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    pytest.importorskip("torch")  # (bench/gemm.py imports it)
    import gemm as bench_gemm

    items = ["heuristic", "a", "b", "c"]
    firsts = [bench_gemm.rotated(items, r)[0] for r in range(1, 5)]
    assert firsts == items  # each contender timed first in one of four rounds
    for r in range(1, 9):
        assert sorted(bench_gemm.rotated(items, r)) == sorted(items)  # nothing lost or repeated
    assert bench_gemm.rotated(items, 1) == items and bench_gemm.rotated([], 3) == []


# ---------------------------------------------------------------- the TMA descriptors' L2 promotion
def test_l2_promotion_reaches_every_descriptor_of_the_kernel():
    from test_s10_gemm_candidates import _compile

    from tilewright.runtime.tensor_maps import L2_PROMOTIONS, TensorMapSpec

    base = P("direct 128x64x64 s8 t128 wgmma ws tma-store pdllate")
    wide = P("direct 128x64x64 s8 t128 wgmma ws tma-store pdllate l2p256")
    assert wide.short() == "direct 128x64x64 s8 t128 wgmma ws tma-store pdllate l2p256"
    assert wide.pass_configs("sm_90")["tw.tma_l2_promotion"] == 256
    assert "tw.tma_l2_promotion" not in base.pass_configs("sm_90") and wide.pass_configs("sm_80") == {}
    specs = {c: _compile(c, 200, 392).spec.tensor_maps for c in (base, wide)}
    assert specs[base] and len(specs[base]) == len(specs[wide])  # (A, B and the C store)
    assert {sp.l2_promotion for sp in specs[base]} == {128}
    assert {sp.l2_promotion for sp in specs[wide]} == {256}
    for sp in specs[wide] + specs[base]:  # the disk cache's record keeps it
        back = TensorMapSpec.from_json(sp.to_json())
        assert (back.l2_promotion, back.box, back.swizzle) == (sp.l2_promotion, sp.box, sp.swizzle)
    assert len(specs[base][0].to_json()) == 4  # (records of the default read as before)
    assert set(L2_PROMOTIONS) == {0, 64, 128, 256}


def test_l2_promotion_names_the_driver_setting():
    cu = pytest.importorskip("cuda.bindings.driver")
    from tilewright.runtime.tensor_maps import L2_PROMOTIONS

    for name in L2_PROMOTIONS.values():
        assert hasattr(cu.CUtensorMapL2promotion, "CU_TENSOR_MAP_L2_PROMOTION_" + name)


@pytest.mark.parametrize("bad", [96, 512, -1, True, "256"])
def test_a_bad_l2_promotion_is_refused(bad):
    import tilewright
    from tilewright.errors import CompileValueError
    from tilewright.kernels import matmul

    with pytest.raises(CompileValueError, match="tw.tma_l2_promotion"):
        tilewright.compile(matmul(128, 128, 128, 64, 64, 32), target="cuda -arch=sm_90a", execution_backend="emulator",
                           pass_configs={"tw.tma_l2_promotion": bad})
    if isinstance(bad, int) and not isinstance(bad, bool):
        with pytest.raises(ValueError, match="L2 promotion"):
            P(f"direct 128x64x64 s8 t128 wgmma ws tma-store l2p{bad}")


def test_bench_times_each_contender_forwards_then_backwards():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    pytest.importorskip("torch")  # (bench/gemm.py imports it)
    import gemm as bench_gemm

    assert bench_gemm.timing_order(3, 1) == [0, 1, 2]
    assert bench_gemm.timing_order(3, 2) == [0, 1, 2, 2, 1, 0]
    assert bench_gemm.timing_order(2, 3) == [0, 1, 1, 0, 0, 1]
    order = bench_gemm.timing_order(5, 2)  # each contender's two places add up to the same: none always early
    assert {order.index(i) + (len(order) - 1 - order[::-1].index(i)) for i in range(5)} == {9}
    assert bench_gemm.timing_order(4, 0) == [0, 1, 2, 3]


def test_the_losers_of_round_one_stay_selectable_and_off_the_lists():
    for shape in ((128, 8192, 8192), (2000, 3000, 1000)):
        listed = gemm_configs.candidates(*shape, "float16", "sm_90", 132)
        lost = gemm_configs.s14_candidates(*shape)
        assert lost and not any(c in listed for c in lost)
        assert all(GemmConfig.parse(c.short()) == c for c in lost)
    assert gemm_configs.s14_candidates(16, 8192, 8192) == []


def test_bench_warm_up_calls_for_the_time_asked(monkeypatch):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    torch = pytest.importorskip("torch")
    import gemm as bench_gemm

    syncs = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: syncs.append(1))
    calls = []
    bench_gemm.warm_up(lambda: calls.append(1), 0)
    assert calls == [] and syncs == []  # (0: none)
    bench_gemm.warm_up(lambda: calls.append(1), 0.02)
    assert len(calls) >= 10 and len(calls) == 10 * len(syncs)  # whole batches, each waited for


def test_the_heuristic_keeps_its_choices_for_the_weak_shapes_in_both_dtypes():
    # (the two H200 runs of session 14 confirmed them: gemm_configs.s14_candidates)
    h = gemm_configs.heuristic
    for dtype in ("float16", "bfloat16"):
        assert h(128, 8192, 8192, dtype, "sm_90", 132).short() == "direct 128x64x64 s8 t128 wgmma ws tma-store pdllate"
        assert h(2000, 3000, 1000, dtype, "sm_90", 132).short() == \
            "persistent 128x192x64 s4 t128 g8 wgmma ws tma-store/64 pingpong c2x1 pdlearly"
        assert h(4096, 4096, 4096, dtype, "sm_90", 132).l2_promotion == 128
