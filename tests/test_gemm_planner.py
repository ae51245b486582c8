"""The gemm planner (``passes/plan_gemms``), target gating of Hopper features, typed plans keyed by
stable node ids (``ir/plans``) and the pipelined mainloop whose schedule lives in ``lower_gemm``."""

import copy
import dataclasses
import hashlib

import numpy as np
import pytest
import zoo

import tilewright
import tilewright.language as T
from tilewright.errors import CompileError, InternalError
from tilewright.ir import thread as th
from tilewright.ir import tile as t
from tilewright.ir.plans import Plans
from tilewright.ir.visitor import map_stmt, rebuild, walk
from tilewright.passes.pipeline import TILE_PASSES, PassContext, run_pipeline
from tilewright.passes.plan_gemms import plan_gemm
from tilewright.target.base import Target
from tilewright.target.matrix import REGISTERS, SMEM_DESC, wgmma_instr, wgmma_n_family


def _gemm(m, n, k, dtype="float16", acc="float32", a_scope="shared", trans_a=False, trans_b=False, policy="square"):
    a = t.Buffer("A", (k, m) if trans_a else (m, k), dtype, a_scope)
    b = t.Buffer("B", (n, k) if trans_b else (k, n), dtype, "shared")
    c = t.Buffer("C", (m, n), acc, "fragment")
    return t.Gemm(t.Region.full(a), t.Region.full(b), t.Region.full(c), trans_a, trans_b, policy)


def _plan(target, g, nthreads=128, **options):
    return plan_gemm(g, nthreads, Target.parse(target), options)


def _tile_passes(func, target, **options):
    """The function after the Tile IR passes (plans included), as ``run_pipeline`` sees it."""
    ctx = PassContext(Target.parse(target), dict(options))
    work = copy.copy(func)
    work.attrs, work.plans = dict(func.attrs), Plans()
    for p in TILE_PASSES[ctx.target.kind]:
        work = p(work, ctx)
    return work


def _nodes(root, cls):
    out = []
    walk(root, lambda s: out.append(s) if isinstance(s, cls) else None)
    return out


def _source(func, target, **options):
    from tilewright.compiler import print_source as _print

    tgt = Target.parse(target)
    return _print(run_pipeline(func, PassContext(tgt, dict(options))), tgt)


# ---------------------------------------------------------------------------------------------
# targets: Hopper-only features on sm_90a exactly


@pytest.mark.parametrize("arch, wgmma, tcgen05, tma", [
    ("sm_80", False, False, False), ("sm_86", False, False, False), ("sm_90", False, False, True),
    ("sm_90a", True, False, True), ("sm_100a", False, True, True), ("sm_120a", False, False, True),
])
def test_hopper_features_are_gated_on_sm_90a(arch, wgmma, tcgen05, tma):
    tgt = Target.parse(f"cuda -arch={arch}")
    assert tgt.has("wgmma") is wgmma and tgt.has("setmaxnreg") is wgmma
    assert tgt.has("tcgen05") is tcgen05
    assert tgt.has("tma") is tma and ("tma" in tgt.async_copy) is tma
    assert bool(tgt.wgmma_instrs("float16", "float16", "float32")) is wgmma


def test_wgmma_n_families_per_dtype():
    assert wgmma_n_family("float16") == tuple(range(8, 257, 8)) == wgmma_n_family("bfloat16")
    ints = wgmma_n_family("int8")
    assert ints[:4] == (8, 16, 24, 32) and all(b - a == 16 for a, b in zip(ints[3:], ints[4:])) and ints[-1] == 256
    assert wgmma_n_family("float32") == ()
    with pytest.raises(ValueError, match="no N = 12"):
        wgmma_instr("float16", 12)
    mi = wgmma_instr("bfloat16", 96)
    assert (mi.family, mi.m, mi.n, mi.k, mi.group_size) == ("wgmma", 64, 96, 16, 128)
    assert mi.b_sources == (SMEM_DESC,) and set(mi.a_sources) == {SMEM_DESC, REGISTERS}
    assert not wgmma_instr("int8", 48).transposable and wgmma_instr("int8", 48).k == 32


@pytest.mark.parametrize("n", [8, 64, 200, 256])
def test_wgmma_lane_layouts_cover_each_element_once(n):
    """The accumulator layout gives each of the 64 x N elements to exactly one (lane, element) of the
    warpgroup; A from registers likewise for 64 x 16."""
    mi = wgmma_instr("float16", n)
    lanes = np.arange(128)
    seen = np.zeros((64, n), dtype=int)
    for e in range(mi.c_elems):
        r, c = mi.c_index(lanes, e)
        np.add.at(seen, (r, c), 1)
    assert (seen == 1).all()
    seen_a = np.zeros((64, 16), dtype=int)
    for e in range(mi.a_elems):
        r, c = mi.a_index(lanes, e)
        np.add.at(seen_a, (r, c), 1)
    assert (seen_a == 1).all()


def test_instruction_families_are_named():
    assert {mi.family for mi in Target.parse("cuda -arch=sm_90a").matrix_instrs} == {"mma.sync"}
    assert {mi.family for mi in Target.parse("hip -arch=gfx942").matrix_instrs} == {"mfma"}
    assert {mi.family for mi in Target.parse("hip -arch=gfx1100").matrix_instrs} == {"wmma"}


# ---------------------------------------------------------------------------------------------
# the planner


@pytest.mark.parametrize("target, family", [
    ("cuda -arch=sm_80", "mma.sync"), ("cuda -arch=sm_90a", "wgmma"), ("cuda -arch=sm_100a", "mma.sync"),
    ("cuda -arch=sm_120a", "mma.sync"), ("hip -arch=gfx942", "mfma"), ("hip -arch=gfx90a", "mfma"),
    ("hip -arch=gfx1100", "wmma"), ("interpret", "simt"),
])
def test_family_per_target(target, family):
    plan = _plan(target, _gemm(128, 128, 32))
    assert plan.family == family
    assert (plan.kind == "simt") is (family == "simt")
    assert (plan.wgmma is not None) is ("sm_90a" in target)


def test_sm_100a_and_sm_120a_are_not_given_wgmma():
    for arch in ("sm_100a", "sm_120a", "sm_90"):
        plan = plan_gemm(_gemm(128, 128, 32), 128, Target.parse(f"cuda -arch={arch}"), {"tw.enable_wgmma": True})
        assert plan.family == "mma.sync" and plan.wgmma is None
        assert f"{arch} has no wgmma" in plan.reason


NO_WGMMA = {"tl.disable_wgmma": True}


def test_wgmma_is_the_default_and_tl_disable_wgmma_keeps_mma_sync():
    g = _gemm(128, 128, 32)
    plan = _plan("cuda -arch=sm_90a", g, **NO_WGMMA)
    assert plan.family == "mma.sync" and plan.instr.name == "mma.m16n8k16.f16"
    assert (plan.wgmma.instr.name, plan.wgmma.warpgroups_m, plan.wgmma.warpgroups_n) == ("wgmma.m64n128k16.f32.f16", 1, 1)
    assert plan.wgmma.atoms_m == 2 and plan.wgmma.a_source == SMEM_DESC
    assert "tl.disable_wgmma" in plan.reason and "not enabled" in plan.reason
    for options in ({}, {"tw.enable_wgmma": True}, {"tw.enable_wgmma": True, "tl.disable_wgmma": True}):
        chosen = plan_gemm(g, 128, Target.parse("cuda -arch=sm_90a"), options)  # tw.enable_wgmma forces it
        assert chosen.family == "wgmma" and chosen.b_source == SMEM_DESC and chosen.a_source == SMEM_DESC
        assert chosen.instr is plan.wgmma.instr or chosen.instr == plan.wgmma.instr
    off = plan_gemm(g, 128, Target.parse("cuda -arch=sm_90a"), {"tw.enable_wgmma": False})
    assert off.family == "mma.sync" and "tw.enable_wgmma is false" in off.reason


def test_wgmma_operand_sources_and_types():
    sm90 = "cuda -arch=sm_90a"
    assert _plan(sm90, _gemm(64, 64, 64, a_scope="fragment")).wgmma.a_source == REGISTERS
    assert _plan(sm90, _gemm(64, 64, 64, "bfloat16", trans_a=True)).wgmma.a_source == SMEM_DESC
    fp32 = _plan(sm90, _gemm(64, 64, 32, "float32"))
    assert fp32.family == "simt" and fp32.wgmma is None and "does not take float32" in fp32.reason
    # 8-bit types: K-major operands only (B stored N x K), K a multiple of 32
    assert _plan(sm90, _gemm(64, 64, 64, "int8", "int32", trans_b=True)).wgmma.instr.name == "wgmma.m64n64k32.s32.s8"
    assert "K-major" in _plan(sm90, _gemm(64, 64, 64, "int8", "int32")).reason
    fp8 = _plan(sm90, _gemm(64, 64, 64, "float8_e4m3fn", trans_b=True))
    assert fp8.family == "wgmma" and fp8.wgmma.instr.k == 32  # no mma.sync for fp8 here: wgmma only
    assert _plan(sm90, _gemm(64, 64, 64, "float8_e4m3fn", trans_b=True), **NO_WGMMA).family == "simt"
    assert "whole warpgroups" in _plan(sm90, _gemm(48, 64, 32), nthreads=96).reason
    assert "64*i rows" in _plan(sm90, _gemm(32, 64, 32), nthreads=128).reason


@pytest.mark.parametrize("policy, warps, warpgroups", [
    # (wgmma Square: 64 x 256 per warpgroup reads 640 operand rows per K step, 128 x 128 768)
    ("square", (2, 2), (2, 1)), ("fullrow", (4, 1), (2, 1)), ("fullcol", (1, 4), (1, 2)),
])
def test_warp_and_warpgroup_partition_follow_the_policy(policy, warps, warpgroups):
    g = _gemm(128, 256, 32, policy=policy)  # 256 threads: square warpgroup tiles are 128 x 128
    plan = _plan("cuda -arch=sm_90a", g, nthreads=128, **NO_WGMMA)
    assert plan.policy == policy
    assert plan.warps_m * plan.warps_n == 4 and plan.wgmma.warpgroups_m * plan.wgmma.warpgroups_n == 1
    p8 = _plan("cuda -arch=sm_90a", g, nthreads=256)
    wg = p8.wgmma
    assert (wg.warpgroups_m, wg.warpgroups_n) == warpgroups
    assert wg.instr.n == 256 // wg.warpgroups_n and wg.atoms_m * 64 * wg.warpgroups_m == 128
    assert (_plan("cuda -arch=sm_80", _gemm(128, 128, 32, policy=policy)).warps_m,
            _plan("cuda -arch=sm_80", _gemm(128, 128, 32, policy=policy)).warps_n) == warps


def test_tile_the_warps_cannot_split_is_a_compile_error():
    with pytest.raises(CompileError, match="cannot be split over 4 warps"):
        _plan("cuda -arch=sm_80", _gemm(16, 8, 16))


def test_enabling_wgmma_lowers_to_wgmma_mma_async():
    src = _source(zoo.matmul(128, 128, 64, 128, 128, 32, "float16", stages=2), "cuda -arch=sm_90a",
                  **{"tw.enable_wgmma": True})
    assert "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16" in src and "mma.sync" not in src


# ---------------------------------------------------------------------------------------------
# typed plans keyed by stable node ids


def test_every_gemm_and_parallel_loop_has_a_plan():
    f = _tile_passes(zoo.flash_attention(200, 64, 64, 64, True), "cuda -arch=sm_90a", **NO_WGMMA)
    gemms = _nodes(f.body, t.Gemm)
    assert len(gemms) == 2 and all(f.plans.gemms[g].family == "mma.sync" for g in gemms)
    f = _tile_passes(zoo.flash_attention(200, 64, 64, 64, True), "cuda -arch=sm_90a")
    assert all(f.plans.gemms[g].family == "wgmma" for g in _nodes(f.body, t.Gemm))
    pv = [g for g in gemms if g.a.buffer.scope == "fragment"][0]
    assert f.plans.gemms[pv].wgmma.a_source == REGISTERS
    for p in _nodes(f.body, t.ParallelFor):
        assert f.plans.parallel_layouts[p] is not None


def test_plans_survive_a_node_rebuild_and_a_fresh_node_is_an_internal_error():
    f = _tile_passes(zoo.matmul(128, 128, 64, 64, 64, 32, "float16"), "cuda -arch=sm_80")
    g = _nodes(f.body, t.Gemm)[0]
    assert f.plans.gemms[rebuild(g, clear_accum=g.clear_accum)] is f.plans.gemms[g]
    fresh = t.Gemm(g.a, g.b, g.c, g.trans_a, g.trans_b, g.policy, g.clear_accum, g.k_pack, g.loc)
    assert fresh not in f.plans.gemms
    with pytest.raises(InternalError, match="plan_gemms"):
        f.plans.gemms[fresh]
    with pytest.raises(InternalError, match="infer_layouts"):
        f.plans.parallel_layouts[t.ParallelFor((), (), t.SeqStmt([]))]
    with pytest.raises(InternalError, match="infer_layouts"):
        f.plans.fragment_layouts[t.Buffer("stray", (16, 16), "float32", "fragment")]


def test_a_pass_rebuilding_nodes_keeps_their_plans_and_the_code(monkeypatch):
    """A pass after the planners that rebuilds every statement (``map_stmt`` + ``rebuild``) leaves the
    generated code as it was: the plans follow the rebuilt nodes."""
    import tilewright.passes.pipeline as pl

    def rebuild_all(func, ctx):
        func.body = map_stmt(func.body, lambda s: rebuild(s) if dataclasses.is_dataclass(s) else None)
        return func

    make = lambda: zoo.flash_attention(200, 64, 64, 64, True)  # noqa: E731
    want = _source(make(), "cuda -arch=sm_80")
    monkeypatch.setitem(pl.TILE_PASSES, "cuda", pl.TILE_PASSES["cuda"] + [rebuild_all])
    assert _source(make(), "cuda -arch=sm_80") == want


# ---------------------------------------------------------------------------------------------
# the pipelined mainloop: Tile IR says "gemm over ring slots", lower_gemm builds the schedule


def test_tile_ir_holds_no_mma_sync_schedule():
    assert not hasattr(t, "GemmPrefetch") and not hasattr(t, "GemmStep")
    for target, tma in (("cuda -arch=sm_80", False), ("cuda -arch=sm_90a", True), ("hip -arch=gfx942", False)):
        # (sm_90a warp-specializes this loop by default: test_warp_specialize covers that shape)
        f = _tile_passes(zoo.matmul(256, 256, 256, 128, 128, 32, "float16", stages=3), target,
                         **{"tl.disable_warp_specialized": True})
        loop = [x for x in _nodes(f.body, t.For) if x.attrs.get("pipelined")][0]
        body = loop.body.stmts
        g = [s for s in body if isinstance(s, t.Gemm)][0]
        ml = f.plans.mainloops[g]
        assert (ml.stages, ml.tma) == (3, tma)
        for ring in (g.a.buffer, g.b.buffer):
            assert (f.plans.rings[ring].stages, f.plans.rings[ring].tma) == (3, tma)
            assert f.plans.shared_layouts[ring].tma is tma
        assert isinstance(body[-1], th.Barrier) and body[-3] is g  # gemm; wait for the next slot; barrier


def test_prefetching_mainloop_is_built_by_the_lowering():
    src = _source(zoo.matmul(256, 256, 256, 128, 128, 32, "float16", stages=2), "cuda -arch=sm_80")
    assert "operand prefetch" in src and "prefetching mainloop" in src
    plain = _source(zoo.matmul(256, 256, 256, 128, 128, 32, "float16", stages=2), "cuda -arch=sm_80",
                    **{"tw.disable_gemm_prefetch": True})
    assert "prefetching mainloop" not in plain
    # AMD keeps the plain mainloop shape in the lowering (see prefetch_supported)
    assert "prefetching mainloop" not in _source(zoo.matmul(256, 256, 256, 128, 128, 32, "float16", stages=2),
                                                 "hip -arch=gfx942")


@pytest.mark.parametrize("target", ["cuda -arch=sm_80", "cuda -arch=sm_90a"])
def test_prefetching_mainloop_on_the_emulator(target):
    rng = np.random.default_rng(7)
    M, N, K = 96, 128, 160  # ragged M, five K tiles of 32 (two K steps each)
    k = tilewright.compile(zoo.matmul(M, N, K, 64, 64, 32, "float16", stages=3), target=target,
                           execution_backend="emulator", pass_configs={**NO_WGMMA, "tl.disable_warp_specialized": True})
    assert "prefetching mainloop" in k.get_kernel_source()
    a, b = zoo.rand(rng, (M, K), "float16"), zoo.rand(rng, (K, N), "float16")
    bias, c = zoo.rand(rng, (N,)), zoo.poisoned((M, N), "float16")
    k(a, b, bias, c)
    zoo.close(c, zoo.gemm_ref(a, b), *zoo.GEMM_TOL["float16"])


# ---------------------------------------------------------------------------------------------
# generated code does not depend on the plan bookkeeping


ZOO = {
    "gemm_pipelined": lambda: zoo.matmul(256, 256, 256, 128, 128, 32, "float16", stages=3),
    "gemm_tn": lambda: zoo.matmul(100, 72, 40, 64, 64, 32, "bfloat16", trans_a=True, trans_b=True),
    "attention": lambda: zoo.flash_attention(200, 64, 64, 64, True, policy=T.GemmWarpPolicy.FullRow, v_with_k=True),
    "splitk": lambda: zoo.splitk_gemm(90, 80, 128, 64, 64, 32, 2),
}


def _digest(text):
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.mark.parametrize("name", sorted(ZOO))
def test_recorded_wgmma_plan_and_node_ids_do_not_change_the_code(name):
    """Node ids differ from one compile to the next and sm_90a plans record a wgmma partition that
    sm_90a-without-wgmma plans lack; with wgmma (and warp specialization) turned off the source is
    the same either way (the wgmma record is bookkeeping then)."""
    sm90 = Target.parse("cuda -arch=sm_90a")
    no_wgmma = dataclasses.replace(sm90, features=tuple(f for f in sm90.features if f != "wgmma"))
    off = {**NO_WGMMA, "tl.disable_warp_specialized": True}
    f = _tile_passes(ZOO[name](), "cuda -arch=sm_90a", **off)
    assert any(p.wgmma is not None for p in f.plans.gemms.values())
    first, second = _source(ZOO[name](), sm90, **off), _source(ZOO[name](), sm90, **off)
    assert _digest(first) == _digest(second) == _digest(_source(ZOO[name](), no_wgmma))
    assert _digest(_source(ZOO[name](), sm90)) == _digest(_source(ZOO[name](), sm90))  # wgmma: stable too
    for target in ("cuda -arch=sm_80", "hip -arch=gfx942", "hip -arch=gfx1100"):
        assert _digest(_source(ZOO[name](), target)) == _digest(_source(ZOO[name](), target))
