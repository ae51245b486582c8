"""Intra-warpgroup pipelining of the Hopper attention loop (``tw.attention_overlap``,
passes/attention_overlap.py): P V of key block j-1 is issued right after Q K^T of block j, both
asynchronous; ``wait_group(1)`` retires Q K^T and leaves P V running through the softmax of block j.
Checked: the structure (prologue, steady loop, epilogue; the groups each gemm leaves in flight; the
S accumulator and the P registers the in-flight P V reads are different registers, P rewritten only
after ``wait_group(0)``), the CPU emulator against float64 with NaN-poisoned outputs (the TileLang
program and ``ops.attention``: causal and not, ragged, fp16/bf16, d 64/128, GQA, varlen, KV cache),
the emulator's wgmma hazard checks on seeded faults, the loops the pass declines, NVRTC (no
spills, no wgmma serialization), and on an sm_90 GPU (skipped elsewhere)."""

from __future__ import annotations

import copy
import importlib
import math

import ml_dtypes
import numpy as np
import pytest
from toolchains import needs_nvrtc

torch = pytest.importorskip("torch")

import tilewright  # noqa: E402
from tilewright.compiler import _verify  # noqa: E402
from tilewright.ir import expr as E  # noqa: E402
from tilewright.ir import thread as th  # noqa: E402
from tilewright.ir import tile as t  # noqa: E402
from tilewright.ir.plans import Plans  # noqa: E402
from tilewright.ir.visitor import substitute, walk  # noqa: E402
from tilewright.kernels import flash_attention  # noqa: E402
from tilewright.passes.pipeline import TILE_PASSES, PassContext, run_pipeline  # noqa: E402
from tilewright.target import Target  # noqa: E402

SM90A = "cuda -arch=sm_90a"
WS = {"tw.enable_wgmma": True, "tw.warp_specialize": True}
OVERLAP = {**WS, "tw.attention_overlap": True}
NP = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def _nodes(root, cls) -> list:
    out = []
    walk(root, lambda s: out.append(s) if isinstance(s, cls) else None)
    return out


def _tile_passes(func, options):
    ctx = PassContext(Target.parse(SM90A), dict(options))
    work = copy.copy(func)
    work.attrs, work.plans = dict(func.attrs), Plans()
    for p in TILE_PASSES[ctx.target.kind]:
        work = p(work, ctx)
    return work


def _thread_kernel(func, options):
    _verify(func)
    return run_pipeline(func, PassContext(Target.parse(SM90A), {"optimize_level": 2, **options}))


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
# structure


def _consumer_loop(f):
    consumer = next(p for p in _nodes(f.body, t.ThreadPartition) if p.role == "consumer")
    loops = [s for s in _nodes(consumer.body, t.For) if len([g for g in _nodes(s.body, t.Gemm)]) == 2]
    assert len(loops) == 1
    return consumer, loops[0]


@pytest.mark.parametrize("causal, dim", [(True, 128), (False, 64)])
def test_the_loop_is_rotated_with_p_v_one_block_behind(causal, dim):
    f = _tile_passes(flash_attention(1, 2, 512, dim, causal, 128, 128, 2, 256), OVERLAP)
    consumer, loop = _consumer_loop(f)
    gemms = _nodes(consumer.body, t.Gemm)
    names = [g.b.buffer.name for g in gemms]
    # prologue Q K^T of the first block, the loop's Q K^T(k) and P V(k-1), the epilogue's last P V
    assert names == ["K_shared", "K_shared", "V_shared", "V_shared"]
    qk, pv = _nodes(loop.body, t.Gemm)
    assert [f.plans.wgmma_in_flight.get(g, 0) for g in gemms] == [0, 1, 2, 0]
    # at k = 3, Q K^T reads K's slot 1 and P V reads V's slot 0 (block 2's)
    at3 = {loop.var: E.as_expr(3)}
    assert [E.const_value(substitute(x.starts[0], at3)) for x in (qk.b, pv.b)] == [1, 0]
    S, P, O = qk.c.buffer, pv.a.buffer, pv.c.buffer
    assert S.scope == P.scope == O.scope == "fragment" and len({S, P, O}) == 3  # S and the P that P V reads
    seq = list(loop.body.stmts)
    kinds = []
    for s in seq:
        if isinstance(s, t.Gemm):
            kinds.append("gemm " + s.b.buffer.name)
        elif isinstance(s, th.WgmmaWait):
            kinds.append(f"wait {s.pending}")
        elif isinstance(s, th.MbarrierArrive):
            kinds.append("release " + s.bar.name)
        elif isinstance(s, th.MbarrierWait):
            kinds.append("wait for " + s.bar.name)
    assert kinds == ["wait for K_shared_full", "gemm K_shared", "wait for V_shared_full", "gemm V_shared", "wait 1",
                     "release K_shared_empty", "wait 0", "release V_shared_empty"]
    # the statements after wait_group(0) write P (the cast of the new scores); none before it touches P or O
    w0 = next(i for i, s in enumerate(seq) if isinstance(s, th.WgmmaWait) and s.pending == 0)
    g2 = seq.index(pv)
    assert all(P in _written(s) for s in seq[w0 + 2:])
    for s in seq[g2 + 1:w0]:
        assert not (_touched(s) & {P, O}), s
    # the whole pipeline runs only when the loop has an iteration (the prologue issues the first block)
    top = [s for s in _opened(consumer.body.stmts) if _nodes(s, t.Gemm)]
    assert len(top) == 1 and isinstance(top[0], t.IfThenElse)


def _opened(stmts):
    """Statements, nested sequences opened (the TMA-store epilogue wraps the consumer's body)."""
    for s in stmts:
        if isinstance(s, t.SeqStmt):
            yield from _opened(s.stmts)
        else:
            yield s


def _touched(s) -> set:
    from tilewright.passes.pipeline_loops import _buffers_touched_shallow

    out: set = set()
    walk(s, lambda x: out.update(b for b, _ in _buffers_touched_shallow(x)))
    return out


def _written(s) -> set:
    from tilewright.passes.pipeline_loops import _buffers_touched_shallow

    out: set = set()
    walk(s, lambda x: out.update(b for b, w in _buffers_touched_shallow(x) if w))
    return out


def test_the_lowered_loop_keeps_one_wgmma_group_in_flight():
    """Thread IR of the steady loop: commit Q K^T (wait_group 1: nothing retired), commit P V
    (wait_group 2: nothing retired), wait_group(1) (retires Q K^T, P V stays in flight), the softmax,
    wait_group(0); the registers
    P V reads (the cast scores) are written only after that."""
    k = _thread_kernel(flash_attention(1, 2, 512, 128, True, 128, 128, 2, 256), OVERLAP)
    loops = [s for s in _nodes(k.body, t.For) if _nodes(s.body, th.Wgmma) and s.kind == "serial"]
    loop = next(x for x in loops if len({id(w.b.buffer) for w in _nodes(x.body, th.Wgmma)}) == 2)
    flat = []
    walk(loop.body, lambda s: flat.append(s) if isinstance(s, (th.Wgmma, th.WgmmaCommit, th.WgmmaWait,
                                                                t.BufferStore)) else None)
    syncs = [f"wait {s.pending}" if isinstance(s, th.WgmmaWait) else "commit" for s in flat
             if isinstance(s, (th.WgmmaCommit, th.WgmmaWait))]
    assert syncs == ["commit", "wait 1", "commit", "wait 2", "wait 1", "wait 0"]
    pv = [w for w in flat if isinstance(w, th.Wgmma) and isinstance(w.a, tuple)]
    qk = [w for w in flat if isinstance(w, th.Wgmma) and not isinstance(w.a, tuple)]
    assert len(pv) == 8 and len(qk) == 8  # 8 K steps each (block_N = 128, d = 128)
    p_regs, s_regs, o_regs = pv[0].a[0], qk[0].d[0], pv[0].d[0]
    assert len({p_regs, s_regs, o_regs}) == 3  # two score tiles live: S (float32) and P (16-bit)
    last_wait = max(i for i, s in enumerate(flat) if isinstance(s, th.WgmmaWait))
    first_pv = flat.index(pv[0])
    for i, s in enumerate(flat):
        if isinstance(s, t.BufferStore) and s.buffer is p_regs:
            assert i > last_wait
        if isinstance(s, t.BufferStore) and s.buffer is o_regs:
            assert i < first_pv  # O's rescale: before P V is issued
    src = tilewright.compile(flash_attention(1, 2, 512, 128, True, 128, 128, 2, 256), target=SM90A,
                             execution_backend="emulator", pass_configs=OVERLAP).get_kernel_source()
    assert [src.count(f"wgmma.wait_group.sync.aligned {n};") for n in (0, 1, 2)] == [3, 2, 1]


# ---------------------------------------------------------------------------------------------
# the emulator against float64


EMU_CASES = [
    # B, H, S, D, causal, block_N, dtype
    (1, 1, 520, 128, True, 128, "float16"),  # 5 key tiles: ring slots reused, diagonal masked
    (1, 2, 300, 128, False, 64, "bfloat16"),  # ragged last tile
    (2, 1, 200, 64, True, 64, "float16"),
    (1, 1, 136, 64, False, 128, "bfloat16"),  # two key tiles: prologue, one steady iteration, epilogue
    (1, 1, 100, 64, True, 128, "float16"),  # one key tile: prologue and epilogue only
]


@pytest.mark.parametrize("B, H, S, D, causal, bn, dtype", EMU_CASES)
def test_user_program_on_the_emulator(B, H, S, D, causal, bn, dtype):
    rng = np.random.default_rng(S + D + bn)
    q, k, v = (rng.standard_normal((B, S, H, D)).astype(NP[dtype]) for _ in range(3))
    o = np.full_like(q, np.nan)  # poisoned: every element must be written
    kern = tilewright.compile(flash_attention(B, H, S, D, causal, 128, bn, 2, 256, dtype), target=SM90A,
                              execution_backend="emulator", pass_configs=OVERLAP)
    assert kern.get_kernel_source().count("wgmma.wait_group.sync.aligned 2;") == 1
    kern(q, k, v, o)
    ref = attention_ref(q, k, v, causal)
    assert not np.isnan(o.astype(np.float32)).any()
    err = np.abs(o.astype(np.float64) - ref).max()
    assert err < (3e-3 if dtype == "float16" else 2e-2), err


dispatch = importlib.import_module("tilewright.ops.attention_dispatch")
OPS_OVERLAP = {**dispatch.HOPPER_CONFIGS, "tw.attention_overlap": True}


@pytest.fixture
def hopper_overlap(monkeypatch):
    """ops.attention as on an H200 with the overlap switched on, its kernels compiled for sm_90a
    and run by the emulator on CPU tensors allocated NaN-poisoned; the kernels used are recorded."""
    from test_ops_attention import _PoisonedTorch

    used = []

    def compile_for_emulator(key, build, _target, pass_configs=None):
        k = tilewright.compile(build(), target=SM90A, execution_backend="emulator", pass_configs=pass_configs)
        used.append((key, pass_configs, k))
        return k

    monkeypatch.setattr(dispatch, "HOPPER_CONFIGS", OPS_OVERLAP)
    monkeypatch.setattr(dispatch, "_torch", lambda: _PoisonedTorch())
    monkeypatch.setattr(dispatch, "_kernel", compile_for_emulator)
    monkeypatch.setattr(dispatch, "_is_hopper", lambda t: True)
    monkeypatch.setattr(dispatch, "_shared_bytes", lambda t: 232448)
    return used


def _overlapped(used):
    # (the shipped defaults may add ping-pong over these configs: d 64, short causal and non-causal calls)
    ks = [k for key, cfg, k in used if key[0] == "attention" and cfg and OPS_OVERLAP.items() <= cfg.items()]
    assert ks, "the sm_90a path was not taken"
    src = ks[-1].get_kernel_source()
    assert "setmaxnreg.inc" in src and src.count("wgmma.wait_group.sync.aligned 2;") == 1
    return ks[-1]


@pytest.mark.parametrize("B, H, Hkv, Sq, Sk, D, causal, dtype", [
    (1, 2, 1, 130, 200, 128, True, "float16"),     # GQA, causal aligned to the end, ragged
    (1, 1, 1, 200, 130, 128, True, "bfloat16"),    # more queries than keys: blocks with no key tile at all
    (2, 2, 2, 129, 77, 64, False, "float16"),      # one key tile, ragged, d = 64
    (1, 4, 2, 140, 300, 64, False, "bfloat16"),    # GQA, three key tiles
])
def test_ops_attention_on_the_emulator(hopper_overlap, B, H, Hkv, Sq, Sk, D, causal, dtype):
    from test_ops_attention import _close, _close_lse, _rand, reference

    tdt = getattr(torch, dtype)
    g = torch.Generator().manual_seed(Sq + Sk + D + 1)
    q, k, v = _rand(g, B, H, Sq, D, dtype=tdt), _rand(g, B, Hkv, Sk, D, dtype=tdt), _rand(g, B, Hkv, Sk, D, dtype=tdt)
    out, lse = ops_attention(q, k, v, causal=causal, return_lse=True)
    want, want_lse = reference(q, k, v, causal)
    _close(out, want, tol=3e-3 if dtype == "float16" else 1e-2)
    _close_lse(lse, want_lse)
    _overlapped(hopper_overlap)


def ops_attention(*args, **kwargs):
    from tilewright import ops

    return ops.attention(*args, **kwargs)


def test_ops_attention_varlen_and_kv_cache_on_the_emulator(hopper_overlap):
    from test_ops_attention import _close, _close_lse, _rand, _varlen_case, reference

    g = torch.Generator().manual_seed(41)
    lens_q, lens_k = [70, 0, 140], [90, 30, 300]
    q, k, v, cu_q, cu_k = _varlen_case(g, lens_q, lens_k, 2, 1, 64)
    out = ops_attention(q, k, v, causal=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    for b in range(len(lens_q)):
        qs, ks = slice(int(cu_q[b]), int(cu_q[b + 1])), slice(int(cu_k[b]), int(cu_k[b + 1]))
        if lens_q[b]:
            want, _ = reference(q[qs].transpose(0, 1)[None], k[ks].transpose(0, 1)[None],
                                v[ks].transpose(0, 1)[None], True)
            _close(out[qs], want[0].transpose(0, 1))
    _overlapped(hopper_overlap)
    # a padded KV cache, prefill of 130 queries, split in two key ranges
    q, k, v = _rand(g, 1, 2, 130, 64), _rand(g, 1, 1, 400, 64), _rand(g, 1, 1, 400, 64)
    lens = torch.tensor([333], dtype=torch.int32)
    out, lse = ops_attention(q, k, v, causal=True, return_lse=True, cache_seqlens=lens, num_splits=2)
    want, want_lse = reference(q, k, v, True, kv_len=lens.tolist())
    _close(out, want)
    _close_lse(lse, want_lse)
    _overlapped(hopper_overlap)


PINGPONG = {**OVERLAP, "tw.pingpong": True}


@pytest.mark.parametrize("S, D, causal, bn, dtype", [(520, 128, True, 128, "float16"), (300, 64, False, 64, "bfloat16"),
                                                     (100, 64, True, 128, "float16")])
def test_with_pingpong_on_the_emulator(S, D, causal, bn, dtype):
    """Both: one turn per iteration from Q K^T(k) through P V(k-1), plus the prologue's and the
    epilogue's; run cooperatively (warps advance until they block on a named barrier)."""
    rng = np.random.default_rng(S + D + 3)
    q, k, v = (rng.standard_normal((1, S, 2, D)).astype(NP[dtype]) for _ in range(3))
    o = np.full_like(q, np.nan)
    kern = tilewright.compile(flash_attention(1, 2, S, D, causal, 128, bn, 2, 256, dtype), target=SM90A,
                              execution_backend="emulator", pass_configs=PINGPONG)
    src = kern.get_kernel_source()
    # turns handed over: warpgroup 1's start, the prologue's, the loop's, the epilogue's
    assert src.count("bar.arrive") == 4 and src.count("wgmma.wait_group.sync.aligned 2;") == 1
    loop = [s for s in _nodes(kern.thread_kernel.body, t.For) if len(_nodes(s.body, th.NamedBarrier)) == 2]
    assert len(loop) == 1  # the steady loop: one bar.sync and one bar.arrive per iteration
    kern(q, k, v, o)
    ref = attention_ref(q, k, v, causal)
    assert not np.isnan(o.astype(np.float32)).any()
    err = np.abs(o.astype(np.float64) - ref).max()
    assert err < (3e-3 if dtype == "float16" else 2e-2), err


# ---------------------------------------------------------------------------------------------
# the emulator's hazard checks: seeded faults in the pipelined loop


def _faulty(monkeypatch, fault):
    """Compile with a pass after warp_specialize_loop that breaks the pipelined loop as ``fault``
    says (uncached: the faulty kernels must neither come from nor go into the compile caches)."""
    import tilewright.passes.pipeline as pl
    from tilewright.ir.visitor import map_stmt

    monkeypatch.setenv("TILEWRIGHT_DISABLE_CACHE", "1")

    def inject(func, ctx):
        def f(s):
            if not (isinstance(s, t.For) and any(isinstance(x, th.WgmmaWait) for x in _flat(s.body))):
                return None
            stmts = list(s.body.stmts)
            waits = [x for x in stmts if isinstance(x, th.WgmmaWait)]
            if fault == "cast_before_wait":  # P rewritten while P V still reads it
                cast = stmts[-1]
                stmts.remove(cast)
                stmts.insert(stmts.index(waits[1]), cast)
            elif fault == "rescale_after_issue":  # O rescaled while P V accumulates into it
                gemms = [x for x in stmts if isinstance(x, t.Gemm)]
                rescale = next(x for x in stmts[stmts.index(gemms[0]):stmts.index(gemms[1])]
                               if isinstance(x, t.ParallelFor))
                stmts.remove(rescale)
                stmts.insert(stmts.index(gemms[1]) + 1, rescale)
            else:  # "no_wait_for_scores": the softmax reads S before the group writing it retires
                stmts = [x for x in stmts if x is not waits[0]]
            return t.For(s.var, s.start, s.extent, t.SeqStmt(stmts), s.kind, s.num_stages, s.loc, dict(s.attrs))

        func.body = map_stmt(func.body, f)
        return func

    passes = list(pl.TILE_PASSES["cuda"])
    passes.insert(passes.index(pl.warp_specialize_loop) + 1, inject)
    monkeypatch.setitem(pl.TILE_PASSES, "cuda", passes)


def _flat(s) -> list:
    return list(s.stmts) if isinstance(s, t.SeqStmt) else [s]


@pytest.mark.parametrize("fault, message", [("cast_before_wait", "register A register acc_s_cast"),
                                            ("rescale_after_issue", "accumulator register acc_o"),
                                            ("no_wait_for_scores", "accumulator register acc_s\\[")])
def test_seeded_hazards_are_reported(monkeypatch, fault, message):
    from tilewright.interp.emulator.errors import EmulatorError

    _faulty(monkeypatch, fault)
    S, D = 300, 64
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((1, S, 1, D)).astype(np.float16) for _ in range(3))
    o = np.full_like(q, np.nan)
    kern = tilewright.compile(flash_attention(1, 1, S, D, False, 128, 64, 2, 256), target=SM90A,
                              execution_backend="emulator", pass_configs=OVERLAP)
    with pytest.raises(EmulatorError, match=message):
        kern(q, k, v, o)


# ---------------------------------------------------------------------------------------------
# what the pass leaves alone


def _source(func, options):
    return tilewright.compile(func, target=SM90A, execution_backend="emulator", pass_configs=options
                              ).get_kernel_source()


def test_off_and_mma_sync_leave_the_loop_alone():
    prog = flash_attention(1, 2, 512, 64, True, 128, 64, 2, 256)
    plain = _source(prog, {**WS, "tw.attention_overlap": False, "tw.pingpong": False})
    assert _source(prog, {**WS, "tw.attention_overlap": False}) == plain
    assert "wait_group.sync.aligned 1" not in plain
    # gemms on mma.sync are synchronous: nothing to overlap
    mma = {"tw.enable_wgmma": False, "tw.warp_specialize": True}
    assert _source(prog, {**mma, "tw.attention_overlap": True}) == _source(prog, mma)


def test_tiles_too_large_for_the_registers_are_left_alone():
    """d = 256 at block 128 x 64: S, P and O live together through the softmax would spill (ptxas
    measured 36-100 bytes); d = 256 at block 128 x 32 fits and is pipelined."""
    from tilewright.ops import attention_kernels as ak

    def build(bn):
        return ak.attention_fwd(2, 1, 256, "float16", "float16", True, False, False, 1, False, False, False, False,
                                128, bn, 2, 256)

    assert _source(build(64), OVERLAP) == _source(build(64), WS)
    assert "wgmma.wait_group.sync.aligned 2;" in _source(build(32), OVERLAP)


def test_a_loop_of_one_gemm_is_left_alone():
    """The GEMM-shaped loop (copies and one gemm) is warp_specialize's, with its own K-step overlap."""
    from tilewright.kernels import matmul

    prog = matmul(256, 256, 256, 128, 128, 64, num_stages=2, threads=256)
    assert "wgmma.mma_async" in _source(prog, WS)
    assert _source(prog, {**WS, "tw.attention_overlap": True}) == _source(prog, WS)


# ---------------------------------------------------------------------------------------------
# NVRTC: registers and the wgmma pipeline


@needs_nvrtc
@pytest.mark.parametrize("dim, causal", [(128, True), (64, False)])
def test_compiles_without_spills_or_wgmma_serialization(dim, causal):
    from tilewright.codegen.cuda import print_cuda
    from tilewright.ops import attention_kernels as ak
    from tilewright.toolchain import nvrtc

    f = ak.attention_fwd(16, 16, dim, "bfloat16", "bfloat16", causal, False, False, 1, False, False, False, False,
                         128, 128, 2, 256)
    k = _thread_kernel(f, OPS_OVERLAP)
    src = print_cuda(k)
    assert src.count("wgmma.wait_group.sync.aligned 2;") == 1
    binary = nvrtc.compile_cuda(src, "sm_90a", [k.name])
    res = binary.resources[k.name]
    assert res["spills"] == 0 and res["local_bytes"] == 0, res
    # ptxas says "wgmma.mma_async instructions are serialized" (C7510/C7515) when it cannot prove the
    # registers of an in-flight wgmma untouched, and then waits after every one
    assert "serialized" not in binary.log, binary.log


# ---------------------------------------------------------------------------------------------
# on an sm_90 GPU


def _hopper_gpu() -> bool:
    return (torch.cuda.is_available() and not torch.version.hip and torch.cuda.get_device_capability() == (9, 0))


gpu = pytest.mark.skipif(not _hopper_gpu(), reason="needs an sm_90 (Hopper) CUDA GPU")


@gpu
@pytest.mark.parametrize("B, H, S, D, bn", [(2, 4, 1024, 128, 128), (1, 4, 1000, 128, 64), (2, 4, 777, 64, 128)])
@pytest.mark.parametrize("causal", [False, True])
def test_user_program_on_the_gpu(B, H, S, D, bn, causal):
    torch.manual_seed(S + D + bn)
    q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.float16) for _ in range(3))
    kern = tilewright.compile(flash_attention(B, H, S, D, causal, 128, bn, 2, 256), target="cuda",
                              pass_configs=OVERLAP)
    assert kern.get_kernel_source().count("wgmma.wait_group.sync.aligned 2;") == 1
    o = torch.full_like(q, math.nan)
    kern(q, k, v, o)
    torch.cuda.synchronize()
    assert not o.isnan().any()
    want = attention_ref(*(x.cpu().numpy() for x in (q, k, v)), causal)
    err = np.abs(o.cpu().double().numpy() - want).max() / np.abs(want).max()
    assert err < 3e-3, err
    assert kern.resource_usage["spills"] == 0


@gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("B, H, Hkv, S, D, causal", [(2, 16, 16, 1024, 128, True), (2, 16, 4, 1500, 64, False),
                                                     (1, 8, 8, 4096, 128, False)])
def test_ops_attention_with_the_overlap_on_the_gpu(monkeypatch, B, H, Hkv, S, D, causal, dtype):
    from tilewright import ops

    kernel_cache = importlib.import_module("tilewright.ops.dispatch")._kernels
    monkeypatch.setattr(dispatch, "HOPPER_CONFIGS", OPS_OVERLAP)
    tdt = getattr(torch, dtype)
    torch.manual_seed(B + H + S + D)
    q = torch.randn(B, H, S, D, device="cuda", dtype=tdt)
    k, v = (torch.randn(B, Hkv, S, D, device="cuda", dtype=tdt) for _ in range(2))
    kernel_cache.clear()
    out = ops.attention(q, k, v, causal=causal)
    torch.cuda.synchronize()
    assert any(key[0] == "attention" and ("tw.attention_overlap", True) in key[7] for key, *_ in kernel_cache)
    g = H // Hkv
    kk, vv = k.repeat_interleave(g, 1).double(), v.repeat_interleave(g, 1).double()
    s = q.double() @ kk.transpose(-1, -2) / math.sqrt(D)
    if causal:
        s = s.masked_fill(torch.ones(S, S, dtype=torch.bool, device="cuda").triu(1), -math.inf)
    want = torch.softmax(s, -1) @ vv
    assert not out.isnan().any()
    err = ((out.double() - want).abs().max() / want.abs().max()).item()
    assert err < (3e-3 if dtype == "float16" else 1e-2), err


def test_by_default_two_consumer_warpgroups_take_ping_pong_with_the_overlap():
    """Neither option given: ping-pong and the overlap together where the overlap applies (measured
    faster on every shape), neither where it declines (ping-pong alone was slower)."""
    prog = flash_attention(1, 2, 512, 128, False, 128, 128, 2, 256)
    both = {**WS, "tw.attention_overlap": True, "tw.pingpong": True}
    assert _source(prog, WS) == _source(prog, both)
    from tilewright.ops import attention_kernels as ak

    declined = ak.attention_fwd(2, 1, 256, "float16", "float16", True, False, False, 1, False, False, False, False,
                                128, 64, 2, 256)
    assert _source(declined, WS) == _source(declined, {**WS, "tw.attention_overlap": False, "tw.pingpong": False})
