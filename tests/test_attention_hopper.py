"""The Hopper attention loop (issue 9, item 1): the ordinary TileLang flash-attention program on sm_90a
with ``tw.enable_wgmma`` runs Q K^T on wgmma from shared memory and P V on wgmma with P from
registers — the first wgmma's accumulator, cast to 16 bits, is the second one's A fragment register
for register (no shuffle, no shared-memory round trip).  Checked three ways: the layout ownership
tables (against the PTX fragment formulas written out here), the CPU emulator against float64
(which reads register A through the instruction's lane layout, so a layout mismatch is a wrong
answer), and NVRTC + nvdisasm (HGMMA with a register A, no spills)."""

from __future__ import annotations

import copy

import ml_dtypes
import numpy as np
import pytest
from test_wgmma import sass_of
from toolchains import needs_nvrtc

import tilewright
from tilewright.compiler import _verify
from tilewright.ir import expr as E
from tilewright.ir import thread as th
from tilewright.ir import tile as t
from tilewright.ir.plans import Plans
from tilewright.ir.visitor import walk, walk_expr
from tilewright.kernels import flash_attention
from tilewright.passes.pipeline import TILE_PASSES, PassContext, run_pipeline
from tilewright.target import Target
from tilewright.target.matrix import REGISTERS, SMEM_DESC

SM90A = "cuda -arch=sm_90a"
# the plain loops (the default adds ping-pong with the intra-warpgroup overlap where it applies:
# tests/test_attention_overlap.py)
WGMMA = {"tw.enable_wgmma": True, "tw.attention_overlap": False}
NP = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def _nodes(root, cls) -> list:
    out = []
    walk(root, lambda s: out.append(s) if isinstance(s, cls) else None)
    return out


def _tile_passes(func, **options):
    ctx = PassContext(Target.parse(SM90A), {**WGMMA, **options})
    work = copy.copy(func)
    work.attrs, work.plans = dict(func.attrs), Plans()
    for p in TILE_PASSES[ctx.target.kind]:
        work = p(work, ctx)
    return work


def attention_ref(q, k, v, causal):
    """float64 softmax(q k^T / sqrt(d)) v over (B, S, H, D) arrays; causal: key j <= query i."""
    qd, kd, vd = (x.astype(np.float64) for x in (q, k, v))
    s = np.einsum("bqhd,bkhd->bhqk", qd, kd) / np.sqrt(q.shape[-1])
    if causal:
        S = q.shape[1]
        s = s + np.triu(np.full((S, S), -np.inf), 1)
    p = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("bhqk,bkhd->bqhd", p / p.sum(-1, keepdims=True), vd)


# ---------------------------------------------------------------------------------------------
# plans and the ownership tables


def _wgmma_c_cell(lane, e):
    """PTX ISA, wgmma m64nNk16 accumulator: lane ``lane`` (0..127) of a warpgroup, register ``e``."""
    return 16 * (lane // 32) + (lane % 32) // 4 + 8 * ((e // 2) % 2), 8 * (e // 4) + 2 * (lane % 4) + e % 2


def _wgmma_a_cell(lane, e):
    """PTX ISA, wgmma m64nNk16 16-bit A in registers: register ``e`` (0..7) of one K step."""
    return 16 * (lane // 32) + (lane % 32) // 4 + 8 * ((e // 2) % 2), 2 * (lane % 4) + e % 2 + 8 * (e // 4)


@pytest.mark.parametrize("bm, bn, dim, threads", [(128, 128, 128, 256), (128, 64, 128, 256), (64, 64, 64, 128)])
def test_both_gemms_on_wgmma_and_the_cast_scores_are_the_a_fragment(bm, bn, dim, threads):
    f = _tile_passes(flash_attention(1, 2, 512, dim, False, bm, bn, 2, threads))
    gemms = _nodes(f.body, t.Gemm)
    qk = next(g for g in gemms if g.a.buffer.scope == "shared")
    pv = next(g for g in gemms if g.a.buffer.scope == "fragment")
    for g, a_source in ((qk, SMEM_DESC), (pv, REGISTERS)):
        plan = f.plans.gemms[g]
        assert plan.family == "wgmma" and plan.a_source == a_source, plan
        assert (plan.warps_m, plan.warps_n) == (threads // 128, 1)  # FullRow: each warpgroup 64 whole rows
    s_lay = f.plans.fragment_layouts[qk.c.buffer]
    p_lay = f.plans.fragment_layouts[pv.a.buffer]
    assert s_lay.same_as(p_lay)  # the cast copy keeps every element in its thread and register
    # ... and both are the hardware's layouts: warpgroup w owns rows 64w..64w+63, registers in
    # instruction order (the accumulator's N atoms of 8 columns are the A fragment's K halves)
    for tid in range(threads):
        wg, lane = divmod(tid, 128)
        for r in range(s_lay.num_regs):
            row, col = _wgmma_c_cell(lane, r)
            assert s_lay.index(tid, r) == (64 * wg + row, col)
            kk, e = divmod(r, 8)
            arow, acol = _wgmma_a_cell(lane, e)
            assert p_lay.index(tid, r) == (64 * wg + arow, 16 * kk + acol)


def test_the_cast_copy_is_register_to_register():
    k = run_pipeline(_verified(flash_attention(1, 1, 256, 128, False, 128, 128, 2, 256)),
                     PassContext(Target.parse(SM90A), {"optimize_level": 2, **WGMMA}))
    mm = _nodes(k, th.Wgmma)
    from_regs = [x for x in mm if isinstance(x.a, tuple)]
    assert len(mm) == 16 and len(from_regs) == 8  # 8 K steps of Q K^T (d = 128), 8 of P V (block_N = 128)
    p_regs = from_regs[0].a[0]
    stores = [s for s in _nodes(k, t.BufferStore) if s.buffer is p_regs]
    assert len(stores) == 64  # one register each: acc_s_cast[r] = half(acc_s[r]), no shuffle
    for s in stores:
        loads = _loads(s.value)
        assert len(loads) == 1 and loads[0].buffer.name == "acc_s"
        reg = [E.const_value(i) for i in s.indices]
        assert None not in reg and [E.const_value(i) for i in loads[0].indices] == reg


def _verified(f):
    _verify(f)
    return f


def _loads(e):
    out = []
    walk_expr(e, lambda x: out.append(x) if isinstance(x, E.Load) else None)
    return out


# ---------------------------------------------------------------------------------------------
# the emulator against float64


EMU_CASES = [
    # B, H, S, D, causal, block_M, block_N, threads, dtype
    (1, 1, 200, 128, True, 128, 128, 256, "float16"),  # ragged S, diagonal and ragged tiles
    (1, 2, 200, 128, False, 128, 128, 256, "bfloat16"),
    (1, 1, 300, 128, True, 128, 64, 256, "float16"),
    (2, 1, 136, 64, False, 128, 64, 256, "bfloat16"),
    (1, 1, 136, 64, True, 64, 64, 128, "float16"),
]


@pytest.mark.parametrize("B, H, S, D, causal, bm, bn, threads, dtype", EMU_CASES)
def test_wgmma_attention_on_the_emulator(B, H, S, D, causal, bm, bn, threads, dtype):
    rng = np.random.default_rng(S + D)
    q, k, v = (rng.standard_normal((B, S, H, D)).astype(NP[dtype]) for _ in range(3))
    o = np.full_like(q, np.nan)  # poisoned: every element must be written
    kern = tilewright.compile(flash_attention(B, H, S, D, causal, bm, bn, 2, threads, dtype), target=SM90A,
                              execution_backend="emulator", pass_configs=WGMMA)
    src = kern.get_kernel_source()
    assert "wgmma.mma_async" in src and "mma.sync" not in src
    kern(q, k, v, o)
    ref = attention_ref(q, k, v, causal)
    assert not np.isnan(o.astype(np.float32)).any()
    err = np.abs(o.astype(np.float64) - ref).max()
    assert err < (3e-3 if dtype == "float16" else 2e-2), err


# ---------------------------------------------------------------------------------------------
# NVRTC and the SASS


@needs_nvrtc
@pytest.mark.parametrize("bm, bn, dim, threads, causal", [(128, 128, 128, 256, False), (128, 64, 128, 256, True),
                                                          (128, 128, 64, 256, True)])
def test_attention_compiles_to_hgmma_without_spills(bm, bn, dim, threads, causal, tmp_path):
    from tilewright.codegen.cuda import print_cuda
    from tilewright.toolchain import nvrtc

    k = run_pipeline(_verified(flash_attention(4, 16, 4096, dim, causal, bm, bn, 2, threads)),
                     PassContext(Target.parse(SM90A), {"optimize_level": 2, **WGMMA}))
    src = print_cuda(k)
    assert "mma.sync" not in src
    binary = nvrtc.compile_cuda(src, "sm_90a", [k.name])
    res = binary.resources[k.name]
    assert res["spills"] == 0 and res["local_bytes"] == 0, res
    sass = sass_of(binary, tmp_path, "compiled without spills; no nvdisasm here to read the SASS")
    hgmma = [line.split("*/")[-1].strip() for line in sass.splitlines() if "HGMMA." in line]
    shared_a = [x for x in hgmma if x.split(",")[1].strip().startswith("gdesc")]
    register_a = [x for x in hgmma if x.split(",")[1].strip().startswith("R")]
    assert len(shared_a) == dim // 16 and len(register_a) == bn // 16, hgmma


# ---------------------------------------------------------------------------------------------
# warp specialization of the attention loop (warp_specialize_loop)


WS = {**WGMMA, "tw.warp_specialize": True}


def _partitions(k):
    parts = {p.role: p for p in _nodes(k, t.ThreadPartition)}
    return parts["producer"], parts["consumer"]


def test_the_loop_becomes_a_tma_producer_and_two_consumer_warpgroups():
    f = _tile_passes(flash_attention(1, 2, 512, 128, True, 128, 128, 2, 256), **{"tw.warp_specialize": True})
    k = _nodes(f.body, t.Kernel)[0]
    assert k.num_threads == 384
    producer, consumer = _partitions(k)
    assert (producer.base, producer.count, consumer.base, consumer.count) == (0, 128, 128, 256)
    # the producer: setmaxnreg.dec, Q once, then per iteration wait for a free slot and load K, then V
    pstmts = _nodes(producer.body, (th.SetMaxNReg, th.MbarrierWait, t.Copy))
    assert [type(s).__name__ for s in pstmts] == ["SetMaxNReg", "Copy", "MbarrierWait", "Copy", "MbarrierWait", "Copy"]
    assert (pstmts[0].count, pstmts[0].increase) == (40, False)
    assert [c.dst.buffer.name for c in pstmts if isinstance(c, t.Copy)] == ["Q_shared", "K_shared", "V_shared"]
    assert all(c.mode == "tma" for c in pstmts if isinstance(c, t.Copy))
    assert not _nodes(producer.body, t.Gemm)
    # the consumers: no global -> shared copy of Q, K or V; waits where the loads were; K's slot
    # released right after Q K^T, V's right after P V
    assert not [c for c in _nodes(consumer.body, t.Copy) if c.src.buffer.scope == "global"]
    loop = [s for s in _nodes(consumer.body, t.For) if _nodes(s.body, t.Gemm)][0]
    seq = [s for s in loop.body.stmts]
    names = []
    for s in seq:
        if isinstance(s, (th.MbarrierWait, th.MbarrierArrive)):
            names.append(f"{type(s).__name__[8:]} {s.bar.name}")
        elif _nodes(s, t.Gemm):
            names.append("gemm " + _nodes(s, t.Gemm)[0].b.buffer.name)
    assert names == ["Wait K_shared_full", "gemm K_shared", "Arrive K_shared_empty", "Wait V_shared_full",
                     "gemm V_shared", "Arrive V_shared_empty"]
    regs = _nodes(consumer.body, th.SetMaxNReg)
    assert [(r.count, r.increase) for r in regs] == [(232, True)]


WS_CASES = [
    # B, H, S, D, causal, block_M, block_N, threads, dtype
    (1, 1, 520, 128, True, 128, 128, 256, "float16"),  # 5 key tiles: both ring slots reused twice
    (1, 2, 300, 128, False, 128, 64, 256, "bfloat16"),
    (2, 1, 200, 64, True, 128, 64, 256, "float16"),
    (1, 1, 136, 64, False, 64, 64, 128, "float16"),  # one consumer warpgroup: no register split
]


@pytest.mark.parametrize("B, H, S, D, causal, bm, bn, threads, dtype", WS_CASES)
def test_warp_specialized_attention_on_the_emulator(B, H, S, D, causal, bm, bn, threads, dtype):
    """Run cooperatively (warps advance until they block on an mbarrier or a named barrier), with
    the emulator checking the ring protocol and shared-memory races."""
    rng = np.random.default_rng(S + D + 1)
    q, k, v = (rng.standard_normal((B, S, H, D)).astype(NP[dtype]) for _ in range(3))
    o = np.full_like(q, np.nan)
    kern = tilewright.compile(flash_attention(B, H, S, D, causal, bm, bn, 2, threads, dtype), target=SM90A,
                              execution_backend="emulator", pass_configs=WS)
    assert kern.num_threads == threads + 128
    assert ("setmaxnreg" in kern.get_kernel_source()) == (threads >= 256)
    kern(q, k, v, o)
    ref = attention_ref(q, k, v, causal)
    assert not np.isnan(o.astype(np.float32)).any()
    err = np.abs(o.astype(np.float64) - ref).max()
    assert err < (3e-3 if dtype == "float16" else 2e-2), err


def _faulty(monkeypatch, fault):
    """Compile with a pass after warp_specialize_loop that breaks the protocol as ``fault`` says
    (uncached: the faulty kernels must neither come from nor go into the compile caches)."""
    import tilewright.passes.pipeline as pl
    from tilewright.ir.visitor import map_stmt

    monkeypatch.setenv("TILEWRIGHT_DISABLE_CACHE", "1")

    def inject(func, ctx):
        def f(s):
            if isinstance(s, t.SeqStmt) and any(isinstance(x, th.MbarrierWait) and x.bar.name == "K_shared_full"
                                                for x in s.stmts):
                stmts = list(s.stmts)
                if fault == "no_wait_for_v":
                    stmts = [x for x in stmts if not (isinstance(x, th.MbarrierWait) and x.bar.name == "V_shared_full")]
                else:  # "early_release": K's slot released before Q K^T reads it
                    arrive = next(x for x in stmts if isinstance(x, th.MbarrierArrive) and x.bar.name == "K_shared_empty")
                    stmts.remove(arrive)
                    stmts.insert(1, arrive)
                return t.SeqStmt(stmts)
            return None

        func.body = map_stmt(func.body, f)
        return func

    passes = list(pl.TILE_PASSES["cuda"])
    passes.insert(passes.index(pl.warp_specialize_loop) + 1, inject)
    monkeypatch.setitem(pl.TILE_PASSES, "cuda", passes)


@pytest.mark.parametrize("fault, message", [("no_wait_for_v", "V_shared_full"), ("early_release", "K_shared")])
def test_seeded_protocol_faults_are_reported(monkeypatch, fault, message):
    from tilewright.interp.emulator.errors import EmulatorError

    _faulty(monkeypatch, fault)
    S, D = 520, 64
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((1, S, 1, D)).astype(np.float16) for _ in range(3))
    o = np.full_like(q, np.nan)
    kern = tilewright.compile(flash_attention(1, 1, S, D, False, 128, 64, 2, 256), target=SM90A,
                              execution_backend="emulator", pass_configs=WS)
    with pytest.raises(EmulatorError, match=message):
        kern(q, k, v, o)


def test_loops_the_pass_cannot_take_are_left_alone():
    """A shared tile the loop loads and the epilogue reads (not only the consumers' ring), and a
    kernel reading its thread index: compiled as without the option."""
    import tilewright.language as T

    def program(read_outside: bool, read_tid: bool):
        @T.prim_func
        def f(A: T.Tensor((256, 64), "float16"), C: T.Tensor((64, 64), "float32")):
            with T.Kernel(1, threads=128):
                tx = T.get_thread_binding()
                As = T.alloc_shared((64, 64), "float16")
                acc = T.alloc_fragment((64, 64), "float32")
                T.clear(acc)
                for k in T.Pipelined(4, num_stages=2):
                    T.copy(A[k * 64, 0], As)
                    for i, j in T.Parallel(64, 64):
                        acc[i, j] += As[i, j]
                if read_outside:
                    for i, j in T.Parallel(64, 64):
                        acc[i, j] += As[i, j]
                T.copy(acc, C)
                if read_tid:
                    C[0, tx % 64] = 1.0

        return f

    ws = tilewright.compile(program(False, False), target=SM90A, execution_backend="emulator", pass_configs=WS)
    assert ws.num_threads == 256  # the plain shape is taken (a loop of a load and elementwise work)
    for case in ((True, False), (False, True)):
        plain = tilewright.compile(program(*case), target=SM90A, execution_backend="emulator")
        ws = tilewright.compile(program(*case), target=SM90A, execution_backend="emulator", pass_configs=WS)
        assert ws.num_threads == 128 and ws.get_kernel_source() == plain.get_kernel_source()


@pytest.mark.parametrize("stages", [1, 2, 3])
def test_elementwise_loop_warp_specialized_matches(stages):
    """The pass is not attention-specific: a loop of a TMA load and elementwise work on it, with
    rings of one to three slots."""
    import tilewright.language as T

    @T.prim_func
    def f(A: T.Tensor((300, 64), "float16"), C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            As = T.alloc_shared((64, 64), "float16")
            acc = T.alloc_fragment((64, 64), "float32")
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(300, 64), num_stages=stages):
                T.copy(A[k * 64, 0], As)
                for i, j in T.Parallel(64, 64):
                    acc[i, j] += T.cast(As[i, j], "float32") * (k + 1)
            T.copy(acc, C)

    rng = np.random.default_rng(stages)
    a = rng.standard_normal((300, 64)).astype(np.float16)
    c = np.full((64, 64), np.nan, np.float32)
    kern = tilewright.compile(f, target=SM90A, execution_backend="emulator", pass_configs=WS)
    assert kern.num_threads == 256
    kern(a, c)
    pad = np.zeros((320, 64))
    pad[:300] = a
    ref = sum(pad[64 * k:64 * (k + 1)] * (k + 1) for k in range(5))
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-4)


@needs_nvrtc
@pytest.mark.parametrize("bm, bn, dim, causal", [(128, 128, 128, False), (128, 64, 128, True), (128, 128, 64, True),
                                                 (128, 64, 64, False)])
def test_warp_specialized_attention_compiles_without_spills(bm, bn, dim, causal, tmp_path):
    from tilewright.codegen.cuda import print_cuda
    from tilewright.toolchain import nvrtc

    k = run_pipeline(_verified(flash_attention(4, 16, 4096, dim, causal, bm, bn, 2, 256)),
                     PassContext(Target.parse(SM90A), {"optimize_level": 2, **WS}))
    assert k.num_threads == 384
    src = print_cuda(k)
    assert "setmaxnreg.dec.sync.aligned.u32 40" in src and "setmaxnreg.inc.sync.aligned.u32 232" in src
    assert "__launch_bounds__(384, 1)" in src  # ptxas honours setmaxnreg only with the entry register count known
    binary = nvrtc.compile_cuda(src, "sm_90a", [k.name])
    res = binary.resources[k.name]
    assert res["spills"] == 0 and res["local_bytes"] == 0, res
    sass = sass_of(binary, tmp_path, "compiled without spills; no nvdisasm here to read the SASS")
    hgmma = [line.split("*/")[-1].strip() for line in sass.splitlines() if "HGMMA." in line]
    assert len([x for x in hgmma if x.split(",")[1].strip().startswith("R")]) == bn // 16
    assert len([x for x in hgmma if x.split(",")[1].strip().startswith("gdesc")]) == dim // 16
    assert "USETMAXREG" in sass


# ---------------------------------------------------------------------------------------------
# ping-pong of the two consumer warpgroups (tw.pingpong)


PINGPONG = {**WS, "tw.pingpong": True}


@pytest.mark.parametrize("S, D, causal, bn, dtype", [(520, 128, True, 128, "float16"), (300, 64, False, 64, "bfloat16"),
                                                     (100, 64, True, 128, "float16")])
def test_pingpong_attention_on_the_emulator(S, D, causal, bn, dtype):
    rng = np.random.default_rng(S + D + 2)
    q, k, v = (rng.standard_normal((1, S, 2, D)).astype(NP[dtype]) for _ in range(3))
    o = np.full_like(q, np.nan)
    kern = tilewright.compile(flash_attention(1, 2, S, D, causal, 128, bn, 2, 256, dtype), target=SM90A,
                              execution_backend="emulator", pass_configs=PINGPONG)
    barriers = [s for s in _nodes(kern.thread_kernel, th.NamedBarrier)]
    # per gemm a wait for the own turn and a hand-over; the opening hand-over and the closing wait
    assert sum(1 for b in barriers if b.arrive_only) == 3 and sum(1 for b in barriers if not b.arrive_only) >= 3
    kern(q, k, v, o)
    ref = attention_ref(q, k, v, causal)
    assert not np.isnan(o.astype(np.float32)).any()
    assert np.abs(o.astype(np.float64) - ref).max() < (3e-3 if dtype == "float16" else 2e-2)


def test_pingpong_without_its_opening_hand_over_is_a_reported_deadlock(monkeypatch):
    from tilewright.interp.emulator.errors import EmulatorError
    from tilewright.passes import warp_specialize_loop as wsl

    monkeypatch.setenv("TILEWRIGHT_DISABLE_CACHE", "1")
    real = wsl._take_turns
    monkeypatch.setattr(wsl, "_take_turns", lambda *a: (real(*a)[0], [], real(*a)[2]))
    S, D = 300, 64
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((1, S, 1, D)).astype(np.float16) for _ in range(3))
    kern = tilewright.compile(flash_attention(1, 1, S, D, False, 128, 64, 2, 256), target=SM90A,
                              execution_backend="emulator", pass_configs=PINGPONG)
    with pytest.raises(EmulatorError, match="(?i)deadlock|never"):
        kern(q, k, v, np.full_like(q, np.nan))


@needs_nvrtc
def test_pingpong_attention_compiles_without_spills():
    from tilewright.codegen.cuda import print_cuda
    from tilewright.toolchain import nvrtc

    k = run_pipeline(_verified(flash_attention(4, 16, 4096, 128, True, 128, 128, 2, 256)),
                     PassContext(Target.parse(SM90A), {"optimize_level": 2, **PINGPONG}))
    src = print_cuda(k)
    assert src.count("bar.arrive") == 3
    res = nvrtc.compile_cuda(src, "sm_90a", [k.name]).resources[k.name]
    assert res["spills"] == 0 and res["local_bytes"] == 0, res


def test_a_load_before_a_scalar_assignment_stays_with_the_consumers():
    """The producer computes the prelude scalars before its loads: a tile loaded while a scalar
    still holds its initial value is loaded by the consumers themselves, as written."""
    import tilewright.language as T

    @T.prim_func
    def f(A: T.Tensor((128, 64), "float16"), B: T.Tensor((256, 64), "float16"), C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            row = T.alloc_var("int32", 0)
            As = T.alloc_shared((64, 64), "float16")
            Bs = T.alloc_shared((64, 64), "float16")
            acc = T.alloc_fragment((64, 64), "float32")
            T.copy(A[row * 64, 0], As)  # row is still 0 here
            row = 1
            T.clear(acc)
            for k in T.Pipelined(4, num_stages=2):
                T.copy(B[k * 64, 0], Bs)
                for i, j in T.Parallel(64, 64):
                    acc[i, j] += T.cast(As[i, j], "float32") * T.cast(Bs[i, j], "float32") * row
            T.copy(acc, C)

    rng = np.random.default_rng(8)
    a = rng.standard_normal((128, 64)).astype(np.float16)
    b = rng.standard_normal((256, 64)).astype(np.float16)
    c = np.full((64, 64), np.nan, np.float32)
    kern = tilewright.compile(f, target=SM90A, execution_backend="emulator", pass_configs=WS)
    assert kern.num_threads == 256
    kern(a, b, c)
    ref = a[:64].astype(np.float64) * sum(b[64 * k:64 * (k + 1)].astype(np.float64) for k in range(4))
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-4)
