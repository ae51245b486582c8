"""The persistent attention forward (``attention_fwd(persistent=n)``, ``attention_dispatch.PERSISTENT``)
on the sm_90a path, run by the cooperative emulator (which checks the mbarrier protocol: parities,
arrival counts, slot reuse, wgmma reads) against float64 with poisoned outputs: every mode of
``ops.attention`` with a grid of a few blocks, so that blocks run different numbers of work items
(the item count is never a multiple of the grid here), the producer loading the next item's Q, K
and V while the consumers finish this one."""

from __future__ import annotations

import importlib

import pytest
from toolchains import needs_nvrtc

torch = pytest.importorskip("torch")

from shared_attention_emulator import BLOCKS, SM90A, check_dense, check_packed, check_split_kv, persistent_on_cpu  # noqa: E402
from shared_attention_emulator import check_varlen as check_varlen  # noqa: E402 - re-exported: later tests import it here
from shared_attention_emulator import items as _items  # noqa: E402
from shared_attention_emulator import persistent_kernel as _persistent_kernel  # noqa: E402
from test_ops_attention import _close, _close_lse, _PoisonedTorch, _rand, reference  # noqa: E402

import tilewright  # noqa: E402
from tilewright import ops  # noqa: E402

dispatch = importlib.import_module("tilewright.ops.attention_dispatch")
@pytest.fixture
def persistent(monkeypatch):
    yield from persistent_on_cpu(monkeypatch)


@pytest.mark.parametrize("B, H, Hkv, Sq, Sk, D, causal, dtype", [
    (1, 2, 1, 400, 333, 128, True, torch.float16),     # GQA, causal aligned to the end, ragged: 8 items
    (1, 1, 1, 520, 130, 128, True, torch.bfloat16),    # more queries than keys: first rows see nothing; 5 items
    (2, 2, 2, 129, 77, 64, False, torch.float16),      # one key tile, ragged, d = 64: 8 items
    (1, 5, 1, 256, 256, 64, True, torch.bfloat16),     # MQA, whole tiles: only the diagonal masked; 10 items
    (1, 2, 2, 200, 300, 128, False, torch.float16),    # several key tiles, non-causal: 4 items
])
def test_dense_persistent(persistent, B, H, Hkv, Sq, Sk, D, causal, dtype):
    assert _items(B, H, Sq) % BLOCKS  # blocks run different numbers of items
    check_dense(persistent, B, H, Hkv, Sq, Sk, D, causal, dtype, Sq + Sk + D)


@pytest.mark.parametrize("causal", [False, True])
def test_varlen_persistent(persistent, causal):
    """Packed sequences, one of them empty: items whose key loops have 0, 1 and 2 steps follow one
    another in a block (the ring position is a running count)."""
    check_packed(persistent, 40 + causal, causal)


def test_kv_cache_and_split_kv_persistent(persistent):
    """A padded KV cache (per-batch key counts read by both roles) and two split-KV ranges per
    (batch, head, query block): 2 * 2 * 1 * 2 = 8 items, partial outputs merged by the combine."""
    check_split_kv(persistent, 41)


def test_flash_attn_layout_persistent(persistent):
    """(batch, seq, heads, dim) tensors read in place through ``transpose(1, 2)``."""
    g = torch.Generator().manual_seed(42)
    q, k, v = (_rand(g, 1, 300, 2, 64).transpose(1, 2) for _ in range(3))
    _close(ops.attention(q, k, v, causal=True), reference(q, k, v, True)[0])
    _persistent_kernel(persistent)


def test_head_dim_256_persistent(persistent):
    """d = 256 (blocks 128 x 64; the dispatch's shared-memory fit leaves one K/V stage)."""
    g = torch.Generator().manual_seed(43)
    q, k, v = _rand(g, 1, 2, 200, 256, dtype=torch.bfloat16), _rand(g, 1, 1, 150, 256, dtype=torch.bfloat16), \
        _rand(g, 1, 1, 150, 256, dtype=torch.bfloat16)
    out, lse = ops.attention(q, k, v, causal=True, return_lse=True)
    want, want_lse = reference(q, k, v, True)
    _close(out, want, tol=1e-2)
    _close_lse(lse, want_lse)
    _persistent_kernel(persistent)


def test_q_gets_one_slot_where_two_do_not_fit():
    """d = 256 with two K/V stages: a second Q tile (64 KiB) would not fit beside the rings, so Q
    has one slot (the producer loads the next item's Q once the consumers are done with this one);
    at d = 128 it has two."""
    from tilewright.ops import attention_kernels as ak

    for dim, bn, slots in ((256, 64, 1), (128, 128, 2)):
        fn = ak.attention_fwd(2, 1, dim, "bfloat16", "bfloat16", True, False, False, 1, False, False, False, False,
                              128, bn, 2, 256, stage_out=dim <= 128, persistent=132)
        k = tilewright.compile(fn, target=SM90A, pass_configs={"tw.enable_wgmma": True, "tw.warp_specialize": True})
        src = k.get_kernel_source()
        assert k.num_threads == 384 and "&Q_s_empty[0]" in src
        assert ("&Q_s_full[1]" in src) == (slots == 2)
        assert k.spec.shared_bytes <= 232448  # (the launch spec: also there on a disk-cache hit)


@pytest.mark.parametrize("configs", [{"tw.pingpong": False, "tw.attention_overlap": False},
                                     {"tw.pingpong": True, "tw.attention_overlap": False},
                                     {"tw.pingpong": False, "tw.attention_overlap": True},
                                     {"tw.pingpong": True, "tw.attention_overlap": True}])
def test_schedules_persistent(persistent, monkeypatch, configs):
    """Every consumer schedule in the persistent form (ping-pong's turns opened and closed per item,
    the overlap's rotated key loop inside the tile loop); d = 128 with two Q slots."""
    monkeypatch.setattr(dispatch, "HOPPER_CONFIGS", {**dispatch.HOPPER_CONFIGS, **configs})
    monkeypatch.setattr(dispatch, "HOPPER_SHORT_CAUSAL_OVERRIDES", None)  # (its default sets both schedules)
    g = torch.Generator().manual_seed(44)
    q, k, v = _rand(g, 1, 2, 300, 128), _rand(g, 1, 1, 333, 128), _rand(g, 1, 1, 333, 128)
    out, lse = ops.attention(q, k, v, causal=True, return_lse=True)
    want, want_lse = reference(q, k, v, True)
    _close(out, want)
    _close_lse(lse, want_lse)
    src = _persistent_kernel(persistent).get_kernel_source()
    assert "&Q_s_full[1]" in src
    assert ("bar.arrive" in src) == configs["tw.pingpong"]
    assert ("wgmma.wait_group.sync.aligned 1" in src) == configs["tw.attention_overlap"]


# ---------------------------------------------------------------- the pass on small kernels
def _two_gemm_tiles(D=64, bm=128, bn=64, blocks=3, items=5, outside=False, init_inside=False):
    """A persistent two-gemm loop of attention's shape (Q per item, K and V per key step:
    O = (Q K^T) V without the softmax) over ``items`` items, item ``i`` of ``i % 3`` key blocks (0, 1
    or 2: the ring position must be a running count, and items without key steps let the producer
    run ahead).  ``outside``: a statement at the top level outside the tile loop; ``init_inside``: a
    scalar with an initial value declared inside it.  Both must be declined (the kernel left as
    written)."""
    import tilewright.language as T

    @T.prim_func
    def two_gemm(Q: T.Tensor((items * bm, D), "float16"), K: T.Tensor((items * 2 * bn, D), "float16"),
                 V: T.Tensor((items * 2 * bn, D), "float16"), O: T.Tensor((items * bm, D), "float32"),
                 Base: T.Tensor((1,), "int32")):
        with T.Kernel(blocks, threads=256) as bid:
            Q_s = T.alloc_shared((bm, D), "float16")
            K_s = T.alloc_shared((bn, D), "float16")
            V_s = T.alloc_shared((bn, D), "float16")
            S = T.alloc_fragment((bm, bn), "float32")
            P = T.alloc_fragment((bm, bn), "float16")
            acc = T.alloc_fragment((bm, D), "float32")
            if outside:
                T.clear(acc)
            for r in T.serial(T.ceildiv(items - bid, blocks)):
                item = r * blocks + bid
                if init_inside:
                    row = T.alloc_var("int32", 0)
                else:
                    row = T.alloc_var("int32")
                row = item * 2 * bn
                T.copy(Q[item * bm, 0], Q_s)
                T.clear(acc)
                for kb in T.Pipelined(item % 3, num_stages=2):
                    T.copy(K[row + kb * bn, 0], K_s)
                    T.gemm(Q_s, K_s, S, transpose_B=True, clear_accum=True)
                    T.copy(S, P)
                    T.copy(V[row + kb * bn, 0], V_s)
                    T.gemm(P, V_s, acc)
                T.copy(acc, O[item * bm, 0])

    return two_gemm


def _run_two_gemm(k, D=64, bm=128, bn=64, items=5, seed=0):
    import numpy as np

    rng = np.random.default_rng(seed)
    q = rng.uniform(-0.5, 0.5, (items * bm, D)).astype(np.float16)
    kk = rng.uniform(-0.5, 0.5, (items * 2 * bn, D)).astype(np.float16)
    v = rng.uniform(-0.5, 0.5, (items * 2 * bn, D)).astype(np.float16)
    o = np.full((items * bm, D), np.nan, np.float32)
    k(q, kk, v, o, np.zeros(1, np.int32))
    for i in range(items):
        qi = q[i * bm:(i + 1) * bm].astype(np.float64)
        want = np.zeros((bm, D))
        for j in range(i % 3):
            rows = slice((2 * i + j) * bn, (2 * i + j + 1) * bn)
            p = (qi @ kk[rows].astype(np.float64).T).astype(np.float16).astype(np.float64)
            want = want + p @ v[rows].astype(np.float64)
        np.testing.assert_allclose(o[i * bm:(i + 1) * bm], want, rtol=1e-2, atol=1e-2)


WS = {"tw.warp_specialize": True, "tw.enable_wgmma": True}


def test_the_pass_takes_a_persistent_two_gemm_loop():
    k = tilewright.compile(_two_gemm_tiles(), target=SM90A, execution_backend="emulator", pass_configs=WS)
    assert k.num_threads == 384 and "Q_s_empty" in k.get_kernel_source()
    _run_two_gemm(k)


@pytest.mark.parametrize("variant", ["outside", "init_inside"])
def test_the_pass_declines_what_it_cannot_split(variant):
    k = tilewright.compile(_two_gemm_tiles(**{variant: True}), target=SM90A, execution_backend="emulator",
                           pass_configs=WS)
    assert k.num_threads == 256 and "Q_s_empty" not in k.get_kernel_source()
    _run_two_gemm(k, seed=1)


# ---------------------------------------------------------------- seeded faults
def _inject(monkeypatch, fault):
    """A pass after warp_specialize_loop that breaks the persistent protocol as ``fault`` says
    (uncached: the faulty kernels must neither come from nor go into the compile caches)."""
    import dataclasses

    import tilewright.passes.pipeline as pl
    from tilewright.ir import thread as th
    from tilewright.ir import tile as t
    from tilewright.ir.visitor import map_stmt

    monkeypatch.setenv("TILEWRIGHT_DISABLE_CACHE", "1")

    def inject(func, ctx):
        def in_role(role, f):
            def g(s):
                if isinstance(s, t.ThreadPartition) and s.role == role:
                    return dataclasses.replace(s, body=map_stmt(s.body, f))
                return None
            return g

        def drop(s):
            if fault == "producer_ignores_q_empty" and isinstance(s, th.MbarrierWait) and s.bar.name == "Q_s_empty":
                return t.SeqStmt([])
            if fault == "consumers_forget_earlier_steps" and isinstance(s, t.BufferStore) \
                    and s.buffer.name.endswith("_steps") and not isinstance(s.value, type(s.indices[0])):
                return t.SeqStmt([])
            return None

        role = "producer" if fault == "producer_ignores_q_empty" else "consumer"
        func.body = map_stmt(func.body, in_role(role, drop))
        return func

    passes = list(pl.TILE_PASSES["cuda"])
    passes.insert(passes.index(pl.warp_specialize_loop) + 1, inject)
    monkeypatch.setitem(pl.TILE_PASSES, "cuda", passes)


@pytest.mark.parametrize("fault, message", [("producer_ignores_q_empty", "(?i)Q_s.*nothing ordering"),
                                            ("consumers_forget_earlier_steps", "(?i)wrong-parity")])
def test_seeded_protocol_faults_are_caught(monkeypatch, fault, message):
    from tilewright.interp.emulator import EmulatorError

    _inject(monkeypatch, fault)
    k = tilewright.compile(_two_gemm_tiles(blocks=1, items=6), target=SM90A, execution_backend="emulator",
                           pass_configs=WS)
    assert k.num_threads == 384
    with pytest.raises(EmulatorError, match=message):
        _run_two_gemm(k, items=6, seed=2)


# ---------------------------------------------------------------- NVRTC
@needs_nvrtc
@pytest.mark.parametrize("dim, dtype, causal, schedule", [
    (64, "float16", True, {}), (128, "bfloat16", False, {}),
    (128, "float16", True, {"tw.pingpong": True, "tw.attention_overlap": True}),
    (64, "bfloat16", False, {"tw.pingpong": True, "tw.attention_overlap": True})])
def test_persistent_kernel_builds_without_spills(dim, dtype, causal, schedule):
    """The H200 kernels (132 blocks, blocks 128 x 128, two stages, the staged output tile) with the
    shipped configs and with ping-pong and the overlap: no spills, shared memory within the limit."""
    from tilewright.codegen.cuda import print_cuda
    from tilewright.ops import attention_kernels as ak
    from tilewright.passes.pipeline import PassContext, run_pipeline
    from tilewright.target import Target
    from tilewright.toolchain import nvrtc

    configs = {**dispatch.HOPPER_CONFIGS, **(dispatch.HOPPER_D64_OVERRIDES if dim <= 64 else {}), **schedule}
    f = ak.attention_fwd(16, 16, dim, dtype, dtype, causal, False, False, 1, False, False, False, False, 128, 128, 2,
                         256, stage_out=True, persistent=132)
    k = run_pipeline(f, PassContext(Target.parse(SM90A), {"optimize_level": 2, **configs}))
    src = print_cuda(k)
    assert k.num_threads == 384 and "Q_s_empty" in src and "setmaxnreg" in src
    assert k.shared_bytes <= 232448
    res = nvrtc.compile_cuda(src, "sm_90a", [k.name]).resources[k.name]
    assert res["spills"] == 0 and res["local_bytes"] == 0, res


# ---------------------------------------------------------------- other targets
@pytest.mark.parametrize("target", ["interpret", "cuda -arch=sm_80"])
def test_persistent_kernel_is_correct_without_warp_specialization(monkeypatch, target):
    """Where the pass does not apply (no TMA) the persistent kernel is a plain tile loop around the
    pipelined key loop (cp.async on sm_80, run by the emulator; the tile interpreter): still right."""
    def compile_for(key, build, _target, pass_configs=None):
        backend = {} if target == "interpret" else {"execution_backend": "emulator"}
        return tilewright.compile(build(), target=target, pass_configs=pass_configs, **backend)

    monkeypatch.setattr(dispatch, "_torch", lambda: _PoisonedTorch())
    monkeypatch.setattr(dispatch, "_kernel", compile_for)
    monkeypatch.setattr(dispatch, "_is_hopper", lambda t: True)
    monkeypatch.setattr(dispatch, "_shared_bytes", lambda t: 232448)
    monkeypatch.setattr(dispatch, "_sm_count", lambda t: BLOCKS)
    monkeypatch.setattr(dispatch, "PERSISTENT", True)
    dispatch.forget_plans()
    try:
        g = torch.Generator().manual_seed(45)
        q, k, v = _rand(g, 1, 2, 300, 64), _rand(g, 1, 1, 200, 64), _rand(g, 1, 1, 200, 64)
        out, lse = ops.attention(q, k, v, causal=True, return_lse=True)
        want, want_lse = reference(q, k, v, True)
        _close(out, want)
        _close_lse(lse, want_lse)
    finally:
        dispatch.forget_plans()


def test_one_prologue_slot_on_the_emulator(monkeypatch):
    """With one Q slot (where a second does not fit) the producer waits for the consumers' release
    at the end of each item before loading the next Q; items of 0, 1 and 2 key steps."""
    import tilewright.passes.warp_specialize_loop as wsl

    monkeypatch.setenv("TILEWRIGHT_DISABLE_CACHE", "1")
    monkeypatch.setattr(wsl, "prologue_slots", lambda *args: 1)
    k = tilewright.compile(_two_gemm_tiles(blocks=2, items=7), target=SM90A, execution_backend="emulator",
                           pass_configs=WS)
    src = k.get_kernel_source()
    assert k.num_threads == 384 and "&Q_s_empty[0]" in src and "&Q_s_full[1]" not in src
    _run_two_gemm(k, items=7, seed=3)
