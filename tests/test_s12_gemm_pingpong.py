"""Session 12: ping-pong consumers for the persistent GEMM (``GemmConfig.pingpong``, pass config
``tw.gemm_pingpong``, passes/warp_specialize_pingpong.py): two consumer warpgroups, each owning whole tiles,
take the block's tiles in turn over one TMA ring.  On the sm_90a emulator against float64 with NaN-poisoned
outputs (ragged M, N and K; tile counts per block odd, even, and blocks without a tile; fp16 / bf16; bias and
activation epilogues; B transposed); the emulator reporting the ring's wrong phase when the turns are left
out; the pass declining kernels it does not apply to; names, shared-memory accounting, candidate lists; NVRTC
builds for sm_90a without spills, HGMMA in the SASS."""

import dataclasses

import pytest
from test_s10_gemm_candidates import assert_builds_without_spills, run_on_the_emulator
from toolchains import needs_nvrtc

from tilewright.interp.emulator.errors import EmulatorError
from tilewright.ops import gemm_configs
from tilewright.ops.gemm_configs import GemmConfig
from tilewright.passes import warp_specialize_pingpong

P = GemmConfig.parse
PP128 = P("persistent 128x128x64 s4 t128 g8 wgmma ws tma-store pingpong")
EMULATED = [
    # (config, M, N, K, dtype, trans_b, activation) on 4 blocks: tiles per block 2, 2, 1, 1 / 4, 4, 4, 3 / 1, 0, 0, 0
    (PP128, 200, 328, 136, "float16", False, "none"),
    (PP128, 264, 392, 200, "bfloat16", True, "relu"),
    (P("persistent 128x128x64 s5 t128 g8 wgmma ws tma-store pingpong"), 520, 392, 72, "float16", False, "silu"),
    (P("persistent 128x192x64 s3 t128 g8 wgmma ws tma-store pingpong"), 300, 584, 136, "float16", False, "silu"),
    (P("persistent 128x192x64 s4 t128 g8 wgmma ws tma-store/64 pingpong"), 136, 200, 360, "bfloat16", False, "none"),
    (P("persistent 128x192x64 s4 t128 g8 wgmma ws tma-store/64 pingpong"), 392, 584, 136, "float16", True, "silu"),
    (PP128, 100, 120, 40, "float16", False, "relu"),
    (P("persistent 128x128x64 s6 t128 g8 wgmma ws tma-store/64 pingpong"), 264, 392, 520, "float16", False, "relu"),
    (P("persistent 64x256x64 s4 t128 g8 wgmma ws tma-store pingpong"), 200, 584, 136, "float16", False, "relu"),
    (P("persistent 64x256x64 s4 t128 g8 wgmma ws tma-store pingpong"), 72, 520, 200, "bfloat16", True, "silu"),
    # clusters of two blocks (A multicast) walking pairs of N tiles: 2 clusters of 2 blocks
    (P("persistent 128x128x64 s4 t128 g8 wgmma ws tma-store c2x1 pingpong"), 264, 392, 200, "float16", False, "relu"),
    (P("persistent 128x128x64 s4 t128 g8 wgmma ws tma-store c2x1 pingpong"), 520, 520, 136, "bfloat16", True, "none"),
    (P("persistent 128x192x64 s4 t128 g8 wgmma ws tma-store/64 c2x1 pingpong"), 136, 520, 200, "bfloat16", True, "silu"),
    (P("persistent 128x192x64 s5 t128 g8 wgmma ws tma-store/32 c2x1 pingpong"), 264, 392, 520, "float16", False, "relu"),
    (P("persistent 128x192x64 s5 t128 g8 wgmma ws tma-store/32 pingpong"), 136, 520, 200, "bfloat16", True, "silu"),
]


@pytest.mark.parametrize("cfg, M, N, K, dtype, trans_b, activation", EMULATED,
                         ids=lambda x: x.short().replace(" ", "_") if isinstance(x, GemmConfig) else None)
def test_pingpong_on_the_emulator(cfg, M, N, K, dtype, trans_b, activation):
    src = run_on_the_emulator(cfg, M, N, K, dtype, trans_b, activation)
    assert "__launch_bounds__(384)" in src  # a producer warpgroup and two consumer warpgroups
    assert src.count("setmaxnreg.inc.sync.aligned.u32 232;") == 2 and "setmaxnreg.dec.sync.aligned.u32 40;" in src
    # the turns: each warpgroup waits for its own and hands the other its turn
    for wait, hand in ((15, 14), (14, 15)):
        assert f'"bar.sync %0, %1;" :: "r"({wait}), "r"(256)' in src
        assert f'"r"((int)({hand})), "r"(256)' in src
    assert "_wg1" in src  # the second warpgroup's own staged C tile


def test_the_emulator_reports_mainloops_out_of_turn(monkeypatch):
    """Without the turns the second warpgroup waits on the ring's full barrier before the first warpgroup's
    steps have filled it: its wait returns on an older phase, which the emulator names."""
    monkeypatch.setattr(warp_specialize_pingpong, "_turn", lambda *a: [])
    with pytest.raises(EmulatorError, match=r"waits for phase \d+ \(parity \d\) of mbarrier k_full"):
        run_on_the_emulator(PP128, 264, 392, 200, "float16", False, "none")


@pytest.mark.parametrize("name", ["persistent 128x128x64 s4 t256 g8 wgmma ws tma-store",
                                  "persistent 128x192x64 s4 t256 g8 wgmma ws tma-store c2x1"])
def test_the_option_leaves_two_warpgroup_kernels_alone(name):
    """tw.gemm_pingpong on a kernel of two consumer warpgroups: the usual warp-specialized kernel (one
    consumer partition, no turns)."""
    cfg = P(name)
    k = _kernel_with_option(cfg)
    src = k.get_kernel_source()
    assert "__launch_bounds__(384)" in src and '"r"(15), "r"(256)' not in src and "_wg1" not in src


def _kernel_with_option(cfg):
    from test_s10_gemm_candidates import SM90, _kernel_of

    import tilewright

    return tilewright.compile(_kernel_of(cfg, 392, 200, "float16", False, False, "none"), target=SM90,
                              execution_backend="emulator",
                              pass_configs={**cfg.pass_configs("sm_90"), "tw.gemm_pingpong": True})


def test_names_shared_memory_and_candidate_lists():
    for cfg, *_ in EMULATED:
        assert GemmConfig.parse(cfg.short()) == cfg
        assert GemmConfig.from_json(cfg.to_json()) == cfg
        assert cfg.pass_configs("sm_90")["tw.gemm_pingpong"] is True
        assert gemm_configs.fit_shared(cfg, gemm_configs.H200_SHARED_BYTES) == cfg  # fits as named
    # each warpgroup has its own staged C tile: 128x192 with whole 48 KB tiles takes three stages, not four
    assert gemm_configs.fit_shared(P("persistent 128x192x64 s4 t128 g8 wgmma ws tma-store pingpong"),
                                   gemm_configs.H200_SHARED_BYTES).stages == 3
    for bad in ({"threads": 256}, {"kind": "direct"}, {"cluster": (1, 2)}, {"ws": False}):
        assert GemmConfig.from_json({**PP128.to_json(), **bad}) is None, bad
    # only the heuristic's own choice is on the candidate lists (with and without its PDL launch; the rest:
    # selectable by name)
    weak = gemm_configs.candidates(2000, 3000, 1000, "float16", "sm_90", 132)
    own = gemm_configs.heuristic(2000, 3000, 1000, "float16", "sm_90", 132)
    assert [c for c in weak if c.pingpong] == [own, dataclasses.replace(own, pdl="")]
    assert gemm_configs.s12_candidates(128, 8192, 8192) == []
    assert [c.cluster for c in gemm_configs.s12_candidates(2000, 3000, 1000)].count((2, 1)) == 3
    assert all(c.cluster == (1, 1) for c in gemm_configs.s12_candidates(8192, 8192, 1024))
    assert not any(c.pingpong for c in gemm_configs.candidates(2000, 3000, 1000, "float16", "sm_80", 108))


def test_the_heuristic_takes_pingpong_where_it_won():
    """Mid-session H200 run of 2026-12-02 07:48 UTC: 128x192 ping-pong in 64-column chunks won at 8192x8192x1024
    (1.03x / 1.03x cuBLAS against 0.99x / 0.99x), lost at 2000x3000x1000 and 4096^3; a gelu_tanh epilogue (it
    spills there) or a 32-bit C keeps the kernel of two warpgroups per tile."""
    h = gemm_configs.heuristic
    won = h(8192, 8192, 1024, "bfloat16", "sm_90", 132)
    assert won == P("persistent 128x192x64 s4 t128 g8 wgmma ws tma-store/64 pingpong")
    assert won in gemm_configs.s12_candidates(8192, 8192, 1024)  # the form the emulator tests check
    for shape in ((4096, 4096, 4096), (8192, 8192, 8192), (128, 8192, 8192)):
        assert not h(*shape, "float16", "sm_90", 132).pingpong
    # few tiles (at most four waves of 128x192): ping-pong in clusters of two blocks (final H200 run of 2026-12-02
    # 08:42 UTC: 2000x3000x1000 483.4 / 484.1 TFLOP/s against 468.7 / 471.5 for the clusters without ping-pong)
    few = h(2000, 3000, 1000, "float16", "sm_90", 132)
    # (launched with PDL since the H200 runs of 2026-12-02 11:30 and 12:03 UTC: tests/test_s13_gemm_pdl)
    assert few == P("persistent 128x192x64 s4 t128 g8 wgmma ws tma-store/64 pingpong c2x1 pdlearly")
    assert dataclasses.replace(few, pdl="") in gemm_configs.s12_candidates(2000, 3000, 1000)  # (emulator-tested)
    assert not h(2000, 3000, 1000, "float16", "sm_90", 132, activation="gelu_tanh").pingpong
    for epilogue in ({"activation": "gelu_tanh"}, {"out_dtype": "float32"}):
        other = h(8192, 8192, 1024, "float16", "sm_90", 132, **epilogue)
        assert not other.pingpong and (other.block_M, other.block_N, other.threads) == (128, 192, 256)
    assert h(8192, 8192, 1024, "float16", "sm_90", 132, activation="silu").pingpong
    assert not h(8192, 8192, 1024, "float16", "sm_80", 108).pingpong


@needs_nvrtc
@pytest.mark.parametrize("cfg", gemm_configs.s12_candidates(2000, 3000, 1000), ids=lambda c: c.short().replace(" ", "_"))
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_pingpong_builds_without_spills(cfg, dtype, tmp_path):
    assert_builds_without_spills(cfg, 3000, 1000, dtype, tmp_path)


def test_partition_barriers_avoid_the_turns(monkeypatch):
    """The turns' named barriers (15, 14) are placed by the tile pass; the lowering numbers the
    partitions' own barriers around them, and says so when the ids run out."""
    from tilewright.errors import CompileError
    from tilewright.passes import lowering_context

    contexts = []
    original = lowering_context.LoweringContext.__init__

    def remember(self, *args, **kwargs):
        original(self, *args, **kwargs)
        contexts.append(self)

    monkeypatch.setattr(lowering_context.LoweringContext, "__init__", remember)
    monkeypatch.setenv("TILEWRIGHT_DISABLE_CACHE", "1")  # (an earlier test may have compiled the same kernel)
    _kernel_with_option(PP128).get_kernel_source()
    assert contexts, "the kernel was not lowered"
    ctx = contexts[-1]
    assert ctx.fixed_barriers == {14, 15}
    assert set(ctx.named_barriers.values()).isdisjoint({14, 15})
    ctx.named_barriers = {}
    ids = [ctx.named_barrier_id(base, 32) for base in range(0, 13 * 32, 32)]
    assert ids == list(range(1, 14))
    with pytest.raises(CompileError, match=r"15 besides the block's \(2 taken by the compiler's ping-pong turns\)"):
        ctx.named_barrier_id(13 * 32, 32)
