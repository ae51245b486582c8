"""wgmma on sm_90a (pass config ``tw.enable_wgmma``): descriptors and swizzles, the lowering run by
the emulator against float64, NVRTC compiles without spills, HGMMA in the SASS where nvdisasm is
available, and HIP refusing warpgroup instructions."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
from toolchains import needs_nvrtc

import tilewright.language as T
from tilewright.compiler import _verify
from tilewright.errors import CompileError
from tilewright.interp.emulator import run_thread_kernel
from tilewright.interp.emulator.errors import EmulatorError
from tilewright.ir import thread as th
from tilewright.ir import tile as t
from tilewright.ir.layout import SharedLayout
from tilewright.ir.visitor import walk
from tilewright.kernels import matmul
from tilewright.passes.pipeline import PassContext, run_pipeline
from tilewright.target import Target
from tilewright.target.matrix import (
    decode_wgmma_descriptor,
    swizzle_address,
    wgmma_descriptor,
    wgmma_operand_addresses,
)

SM90A = "cuda -arch=sm_90a"
WGMMA = {"tw.enable_wgmma": True}
NP = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def lower_wgmma(func, target=SM90A, **options):
    _verify(func)
    return run_pipeline(func, PassContext(Target.parse(target), {"optimize_level": 2, **WGMMA, **options}))


def nodes(kernel, cls) -> list:
    out = []
    walk(kernel.body, lambda s: out.append(s) if isinstance(s, cls) else None)
    return out


# ---------------------------------------------------------------------------------------------
# descriptors and swizzles


def test_descriptor_fields_round_trip():
    for addr, lbo, sbo, sw in [(0, 16, 1024, 128), (4096 + 96, 8192, 512, 64), (227 * 1024 - 16, 16, 256, 32)]:
        d = wgmma_descriptor(addr, lbo, sbo, sw)
        assert decode_wgmma_descriptor(d) == (addr, lbo, sbo, sw)
        assert d >> 62 == {128: 1, 64: 2, 32: 3}[sw]
    with pytest.raises(ValueError):
        wgmma_descriptor(8, 16, 1024, 128)


@pytest.mark.parametrize("rows, cols, dtype", [(64, 64, "float16"), (128, 32, "bfloat16"), (64, 16, "float16"),
                                                (64, 128, "float16"), (32, 256, "bfloat16"), (64, 64, "int8")])
def test_descriptor_addresses_agree_with_the_tma_layout(rows, cols, dtype):
    """Every instruction atom read through the descriptor the lowering builds lands on the element
    the shared layout (the one TMA writes) puts there — two independent formulas."""
    lay = SharedLayout((rows, cols), dtype, tma=True)
    eb = lay.elem_bytes
    sw = lay.tma_swizzle
    base = 2048  # a 1 KiB-aligned buffer start
    k = 32 // eb  # the instruction's K: 16 (16-bit), 32 (8-bit)
    # K-major: rows are M/N, columns K; atoms of 8 rows x k at every (row0, k0)
    for r0 in range(0, rows, 8):
        for k0 in range(0, cols, k):
            start = base + int(lay.offset((r0, k0))) * eb
            got = wgmma_operand_addresses(wgmma_descriptor(start, 16, 8 * sw, sw), "k", 8, k, eb)
            want = base + np.array([[int(lay.offset((r0 + r, k0 + c))) * eb for c in range(k)] for r in range(8)])
            np.testing.assert_array_equal(got, want)
    # M/N-major (16-bit only): rows are K, columns M/N; an atom covers 16 K rows x the whole row
    if eb == 2 and rows % 16 == 0:
        for k0 in range(0, rows, 16):
            start = base + int(lay.offset((k0, 0))) * eb
            got = wgmma_operand_addresses(wgmma_descriptor(start, rows * sw, 8 * sw, sw), "mn", cols, 16, eb)
            want = base + np.array([[int(lay.offset((k0 + c, n))) * eb for c in range(16)] for n in range(cols)])
            np.testing.assert_array_equal(got, want)


def test_swizzle_is_an_xor_of_address_bits():
    a = np.arange(0, 4096, 16)
    for sw, bits in ((32, 1), (64, 2), (128, 3)):
        s = swizzle_address(a, sw)
        assert sorted(s.tolist()) == a.tolist()  # a permutation within every period
        np.testing.assert_array_equal(s ^ a, ((a >> 7) & ((1 << bits) - 1)) << 4)


# ---------------------------------------------------------------------------------------------
# the lowering, run by the emulator


def _run_gemm(M, N, K, bm, bn, bk, dtype="float16", threads=128, trans_B=False, relu=False, stages=2, seed=0,
              **options):
    f = matmul(M, N, K, bm, bn, bk, dtype=dtype, out_dtype="float32", trans_B=trans_B, num_stages=stages,
               threads=threads, relu=relu)
    k = lower_wgmma(f, **options)
    mm = nodes(k, th.Wgmma)
    assert mm and not nodes(k, th.MatrixMultiply) and not nodes(k, th.LoadMatrix)
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, (M, K)).astype(NP[dtype])
    b = rng.uniform(-1, 1, (N, K) if trans_B else (K, N)).astype(NP[dtype])
    c = np.full((M, N), np.nan, np.float32)
    run_thread_kernel(k, [a, b, c], check_races=True)
    ref = a.astype(np.float64) @ (b.T if trans_B else b).astype(np.float64)
    if relu:
        ref = np.maximum(ref, 0)
    assert not np.isnan(c).any()
    err = np.abs(c.astype(np.float64) - ref).max() / np.abs(ref).max()
    assert err < 2e-3, err
    return k, mm


GEMMS = [
    # M, N, K, bm, bn, bk, dtype, threads, trans_B
    (128, 128, 64, 64, 64, 32, "float16", 128, False),
    (128, 128, 64, 64, 64, 32, "bfloat16", 128, True),
    (128, 128, 128, 128, 128, 64, "bfloat16", 128, False),
    (128, 128, 128, 128, 128, 32, "float16", 256, True),
    (256, 256, 128, 128, 256, 64, "float16", 256, True),
    (128, 256, 96, 128, 256, 32, "bfloat16", 256, False),
    (100, 72, 80, 64, 64, 32, "float16", 256, False),  # ragged M, N, K; 2 warpgroups side by side on N
    (200, 136, 88, 128, 128, 64, "bfloat16", 256, True),  # ragged, 128-byte column blocks of A and B
    (130, 260, 72, 128, 256, 32, "float16", 128, False),  # one warpgroup with two 64-row atoms, N = 256
]


@pytest.mark.parametrize("M, N, K, bm, bn, bk, dtype, threads, trans_B", GEMMS)
def test_wgmma_gemm_matches_float64(M, N, K, bm, bn, bk, dtype, threads, trans_B):
    k, mm = _run_gemm(M, N, K, bm, bn, bk, dtype, threads, trans_B)
    assert {x.b.major for x in mm} == {"k" if trans_B else "mn"} and {x.a.major for x in mm} == {"k"}
    assert all(x.b.swizzle == min(128, (bk if trans_B else bn) * 2) for x in mm)


def test_wgmma_gemm_fp8_k_major():
    """8-bit inputs: K = 32 per instruction, both operands K-major (B transposed), no transpose bits."""
    M = N = K = 128
    f = matmul(M, N, K, 64, 64, 64, dtype="float8_e4m3fn", out_dtype="float32", trans_B=True, num_stages=2)
    k = lower_wgmma(f)
    mm = nodes(k, th.Wgmma)
    assert {x.instr.name for x in mm} == {"wgmma.m64n64k32.f32.e4m3"} and len(mm) == 64 // 32
    rng = np.random.default_rng(2)
    a = rng.uniform(-1, 1, (M, K)).astype(ml_dtypes.float8_e4m3fn)
    b = rng.uniform(-1, 1, (N, K)).astype(ml_dtypes.float8_e4m3fn)
    c = np.full((M, N), np.nan, np.float32)
    run_thread_kernel(k, [a, b, c], check_races=True)
    ref = a.astype(np.float64) @ b.astype(np.float64).T
    assert np.abs(c - ref).max() / np.abs(ref).max() < 1e-5


def test_a_gemm_off_the_warpgroup_boundary_is_not_planned_as_wgmma():
    from test_gemm_planner import _gemm

    from tilewright.passes.plan_gemms import plan_gemm

    plan = plan_gemm(_gemm(64, 64, 32), 128, Target.parse(SM90A), WGMMA, first_thread=32)
    assert plan.family == "mma.sync" and "warpgroup boundary" in plan.reason


@pytest.mark.parametrize("trans_B", [False, True])
def test_wgmma_gemm_fed_by_cp_async(trans_B):
    """Without TMA the operands are written by cp.async (the generic proxy): each thread fences
    them to the async proxy and a barrier hands them over before the wgmmas."""
    k, _ = _run_gemm(200, 136, 96, 128, 128, 32, "bfloat16", 256, trans_B, stages=3, **{"tw.disable_tma": True})
    assert not k.tensor_maps and nodes(k, th.AsyncCopy) and nodes(k, th.FenceProxyAsync)


def test_wgmma_gemm_with_relu_epilogue():
    _run_gemm(128, 256, 64, 128, 256, 32, "float16", 256, relu=True, seed=3)


def test_wgmma_partition_of_two_warpgroups():
    """128 x 256 with 256 threads (the TileLang config on which mma.sync runs out of registers): two
    consumer warpgroups, each issuing per K step one m64n256 instruction for its 64 x 256 tile (the
    Square policy under wgmma: the fewest operand bytes read from shared memory), 128 accumulator
    registers per thread."""
    f = matmul(256, 256, 64, 128, 256, 64, out_dtype="float32", threads=256)
    k = lower_wgmma(f)
    mm = nodes(k, th.Wgmma)
    assert {x.instr.name for x in mm} == {"wgmma.m64n256k16.f32.f16"}
    assert len(mm) == 64 // 16  # K steps x 64-row atoms of one warpgroup's tile
    assert {x.d[0].shape[0] for x in mm} == {128 * 256 // 256}
    # warp-specialized by default: one group stays in flight per K loop iteration, drained after it
    seq = nodes(k, (th.WgmmaFence, th.WgmmaCommit, th.WgmmaWait))
    assert [type(x) for x in seq] == [th.WgmmaFence, th.WgmmaCommit, th.WgmmaWait, th.WgmmaWait]
    assert [x.pending for x in seq[2:]] == [1, 0]
    plain = lower_wgmma(f, **{"tl.disable_warp_specialized": True})
    seq = nodes(plain, (th.WgmmaFence, th.WgmmaCommit, th.WgmmaWait))
    assert [type(x) for x in seq] == [th.WgmmaFence, th.WgmmaCommit, th.WgmmaWait] and seq[2].pending == 0


def _gemm_serial(M, N, K, bm, bn, bk, threads, a_in_registers=True):
    """A gemm over a plain serial K loop (no TMA), A staged in a fragment or in shared memory."""

    @T.prim_func
    def gemm(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            if a_in_registers:
                A_local = T.alloc_fragment((bm, bk), "float16")
            else:
                A_local = T.alloc_shared((bm, bk), "float16")
            B_shared = T.alloc_shared((bk, bn), "float16")
            C_local = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_local)
            for ko in T.serial(T.ceildiv(K, bk)):
                T.copy(A[by * bm, ko * bk], A_local)
                T.copy(B[ko * bk, bx * bn], B_shared)
                T.gemm(A_local, B_shared, C_local)
            T.copy(C_local, C[by * bm, bx * bn])

    return gemm


def test_wgmma_with_a_from_registers():
    M, N, K = 128, 128, 96
    k = lower_wgmma(_gemm_serial(M, N, K, 128, 128, 32, 256))
    mm = nodes(k, th.Wgmma)
    assert mm and all(isinstance(x.a, tuple) for x in mm)
    rng = np.random.default_rng(5)
    a = rng.uniform(-1, 1, (M, K)).astype(np.float16)
    b = rng.uniform(-1, 1, (K, N)).astype(np.float16)
    c = np.full((M, N), np.nan, np.float32)
    run_thread_kernel(k, [a, b, c], check_races=True)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert np.abs(c - ref).max() / np.abs(ref).max() < 2e-3


def test_a_wrong_descriptor_gives_a_wrong_answer_or_an_error():
    """The emulator reads operands through the descriptor, not through the layout: a descriptor
    with another swizzle mode reads other elements (so a descriptor bug cannot pass unseen)."""
    import dataclasses

    M = N = K = 64
    f = matmul(M, N, K, 64, 64, 64, out_dtype="float32", num_stages=1)
    k = lower_wgmma(f)
    for x in nodes(k, th.Wgmma):
        x.b = dataclasses.replace(x.b, swizzle=64, sbo=512)
    rng = np.random.default_rng(1)
    a = rng.uniform(-1, 1, (M, K)).astype(np.float16)
    b = rng.uniform(-1, 1, (K, N)).astype(np.float16)
    c = np.full((M, N), np.nan, np.float32)
    try:
        run_thread_kernel(k, [a, b, c])
    except EmulatorError:
        return
    assert np.abs(c - a.astype(np.float64) @ b.astype(np.float64)).max() > 1e-1


@pytest.mark.parametrize("M, N, K, bm, bn, bk, threads, trans_B", [
    (256, 256, 256, 128, 256, 64, 256, False), (200, 136, 200, 128, 128, 64, 128, True)])
def test_wgmma_under_warp_specialization(M, N, K, bm, bn, bk, threads, trans_B):
    """With tw.warp_specialize too: a TMA producer warpgroup and consumer warpgroups issuing wgmma,
    run warp by warp by the emulator (each warp computes its 16 rows of every atom)."""
    f = matmul(M, N, K, bm, bn, bk, out_dtype="float32", num_stages=3, threads=threads, trans_B=trans_B)
    k = lower_wgmma(f, **{"tw.warp_specialize": True})
    assert k.num_threads == threads + 128 and nodes(k, th.Wgmma)
    rng = np.random.default_rng(6)
    a = rng.uniform(-1, 1, (M, K)).astype(np.float16)
    b = rng.uniform(-1, 1, (N, K) if trans_B else (K, N)).astype(np.float16)
    c = np.full((M, N), np.nan, np.float32)
    run_thread_kernel(k, [a, b, c], check_races=True)
    ref = a.astype(np.float64) @ (b.T if trans_B else b).astype(np.float64)
    assert np.abs(c - ref).max() / np.abs(ref).max() < 2e-3


# ---------------------------------------------------------------------------------------------
# the default sm_90a GEMM: warp-specialized, one wgmma group in flight per consumer


def _ws_run(k, M, N, K, dtype, trans_A, trans_B, seed):
    rng = np.random.default_rng(seed)
    nd = NP[dtype]
    a = rng.uniform(-1, 1, (K, M) if trans_A else (M, K)).astype(nd)
    b = rng.uniform(-1, 1, (N, K) if trans_B else (K, N)).astype(nd)
    c = np.full((M, N), np.nan, np.float32)
    run_thread_kernel(k, [a, b, c], check_races=True)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return c, (a64.T if trans_A else a64) @ (b64.T if trans_B else b64)


@pytest.mark.parametrize("M, N, K, bm, bn, bk, stages, threads, dtype, trans_A, trans_B", [
    (200, 136, 200, 128, 128, 64, 3, 128, "float16", False, False),   # ragged M, N and K
    (136, 72, 264, 64, 64, 64, 2, 128, "bfloat16", False, True),      # B stored N x K
    (72, 200, 136, 64, 128, 32, 4, 128, "float16", True, False),      # A stored K x M
    (128, 256, 328, 128, 256, 64, 4, 256, "bfloat16", True, True),    # two consumer warpgroups
    (96, 64, 72, 64, 64, 32, 5, 128, "float16", False, False),        # more stages than K tiles
])
def test_default_sm90a_gemm_is_warp_specialized_wgmma_and_right(M, N, K, bm, bn, bk, stages, threads, dtype,
                                                                  trans_A, trans_B):
    """No pass configs: a producer warpgroup, consumers on wgmma that keep one group in flight and
    release a ring slot one iteration late; float64 reference, NaN-poisoned output, races checked."""
    f = matmul(M, N, K, bm, bn, bk, dtype, out_dtype="float32", num_stages=stages, threads=threads,
               trans_A=trans_A, trans_B=trans_B)
    _verify(f)
    k = run_pipeline(f, PassContext(Target.parse(SM90A), {"optimize_level": 2}))
    assert k.num_threads == threads + 128 and nodes(k, th.Wgmma)
    assert [w.pending for w in nodes(k, th.WgmmaWait)] == [1, 0]
    c, ref = _ws_run(k, M, N, K, dtype, trans_A, trans_B, seed=M + K)
    assert np.abs(c - ref).max() / np.abs(ref).max() < 2e-3


@pytest.mark.parametrize("stages", [2, 3])
def test_releasing_a_slot_while_its_wgmma_is_in_flight_is_caught(stages, monkeypatch):
    """A wrong wait count (wait_group(2) before releasing the previous slot, whose wgmma may then still
    be reading it) is a race the emulator reports, although the numbers would come out right."""
    import tilewright.passes.warp_specialize as ws

    f = matmul(128, 64, 384, 64, 64, 64, "float16", out_dtype="float32", num_stages=stages)
    monkeypatch.setattr(ws, "WGMMA_GROUPS_IN_FLIGHT", 2)
    k = run_pipeline(f, PassContext(Target.parse(SM90A), {"optimize_level": 2}))
    assert [w.pending for w in nodes(k, th.WgmmaWait)] == [2, 0]
    with pytest.raises(EmulatorError, match="wgmma|may still read"):
        _ws_run(k, 128, 64, 384, "float16", False, False, seed=3)


def test_the_consumers_drain_retires_the_last_wgmma_group():
    """Without the wait_group(0) after the consumer loop the epilogue would read poison."""
    f = matmul(128, 64, 256, 64, 64, 64, "float16", out_dtype="float32", num_stages=2)
    k = run_pipeline(f, PassContext(Target.parse(SM90A), {"optimize_level": 2}))
    nodes(k, th.WgmmaWait)[-1].pending = 1
    c, _ = _ws_run(k, 128, 64, 256, "float16", False, False, seed=5)
    assert np.isnan(c).all()


@pytest.mark.parametrize("consumers", [128, 256, 384, 512, 640, 768, 896])
@pytest.mark.parametrize("min_blocks", [None, 1, 2, 3])
def test_setmaxnreg_split_fits_the_registers_the_launch_gives(consumers, min_blocks):
    """(producer, consumer) registers per thread: multiples of 8 in 24..256, the sum over the block
    within what the launch gives it, a real gain for the consumers, None where there is none."""
    from tilewright.passes.warp_specialize import register_split

    tgt = Target.parse(SM90A)
    split = register_split(consumers, tgt, {"tw.min_blocks_per_sm": min_blocks})
    total = consumers + 128
    launch = min(65536 // (total * (min_blocks or 1)), 255) // 8 * 8
    if split is None:
        assert launch >= 248 or (65536 // (total * (min_blocks or 1)) - 40) * total // consumers // 8 * 8 <= launch \
            or launch <= 40
        return
    producer, consumer = split
    assert all(24 <= r <= 256 and r % 8 == 0 for r in split)
    assert 128 * producer + consumers * consumer <= launch * total <= 65536 // (min_blocks or 1)
    assert producer < launch < consumer
    if consumers == 256 and not min_blocks or min_blocks == 1 and consumers == 256:
        assert split == (40, 232)  # two consumer warpgroups: the CUTLASS-style split


def test_two_consumer_warpgroups_rebalance_registers_one_does_not():
    """setmaxnreg: the producer warpgroup gives registers up first thing, the consumer warpgroups
    take them (2 consumer warpgroups); with one the launch already allows 255 and nothing moves."""
    k = run_pipeline(matmul(256, 256, 128, 128, 256, 64, out_dtype="float32", num_stages=3, threads=256),
                     PassContext(Target.parse(SM90A), {"optimize_level": 2}))
    assert [(x.count, x.increase) for x in nodes(k, th.SetMaxNReg)] == [(40, False), (232, True)]
    assert len(nodes(k, th.Barrier)) == 1  # (after the mbarrier set-up: the epilogue never waits for the producer)
    mma = run_pipeline(matmul(256, 256, 128, 128, 256, 64, out_dtype="float32", num_stages=3, threads=256),
                       PassContext(Target.parse(SM90A), {"optimize_level": 2, "tl.disable_wgmma": True}))
    assert mma.num_threads == 384 and not nodes(mma, th.SetMaxNReg)  # ptxas ignores it for mma.sync consumers
    k1 = run_pipeline(matmul(256, 256, 128, 128, 128, 64, out_dtype="float32", num_stages=3),
                      PassContext(Target.parse(SM90A), {"optimize_level": 2}))
    assert not nodes(k1, th.SetMaxNReg) and k1.num_threads == 256
    k80 = run_pipeline(matmul(256, 256, 128, 128, 256, 64, out_dtype="float32", num_stages=3, threads=256),
                       PassContext(Target.parse("cuda -arch=sm_90"), {"optimize_level": 2, "tw.warp_specialize": True}))
    assert k80.num_threads == 384 and not nodes(k80, th.SetMaxNReg)  # sm_90 without the a: no setmaxnreg


def test_a_register_split_over_the_pool_hangs_in_the_emulator():
    """setmaxnreg.inc waits until the pool holds the registers: consumers asking for 256 each with
    two warpgroups (40 * 128 + 256 * 256 > 168 * 384) never get them — a deadlock the emulator names."""
    from tilewright.interp.emulator.errors import DeadlockError

    M, N, K = 128, 256, 128

    def lowered():  # a fresh kernel each time (the emulator caches the program of a kernel)
        return run_pipeline(matmul(M, N, K, 128, 256, 64, out_dtype="float32", num_stages=2, threads=256),
                            PassContext(Target.parse(SM90A), {"optimize_level": 2}))

    c, ref = _ws_run(lowered(), M, N, K, "float16", False, False, seed=11)  # the right split runs
    assert np.abs(c - ref).max() / np.abs(ref).max() < 2e-3
    k = lowered()
    inc = [x for x in nodes(k, th.SetMaxNReg) if x.increase][0]
    inc.count = 256
    with pytest.raises(DeadlockError, match="setmaxnreg.inc 256"):
        _ws_run(k, M, N, K, "float16", False, False, seed=11)


@needs_nvrtc
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_default_128x256x64_gemm_sass_has_hgmma_setmaxnreg_and_no_spills(dtype, tmp_path):
    """The H200 config (128x256x64 tiles, 4 stages, 256 consumer threads + the producer): HGMMA,
    the register rebalancing, one wgmma group left in flight per K tile, nothing in local memory."""
    from tilewright.codegen.cuda import print_cuda
    from tilewright.toolchain import nvrtc

    f = matmul(4096, 4096, 4096, 128, 256, 64, dtype, num_stages=4, threads=256)
    _verify(f)
    k = run_pipeline(f, PassContext(Target.parse(SM90A), {"optimize_level": 2}))
    binary = nvrtc.compile_cuda(print_cuda(k), "sm_90a", [k.name])
    res = binary.resources[k.name]
    # with setmaxnreg the device compiler gives every thread the launch budget: 65536 / 384 -> 168
    assert res["spills"] == 0 and res["local_bytes"] == 0 and res["registers"] == 168, res
    sass = sass_of(binary, tmp_path)
    assert "HGMMA.64x256x16.F32" in sass and "LDL" not in sass and "STL" not in sass
    assert "USETMAXREG.DEALLOC" in sass and "USETMAXREG.TRY_ALLOC" in sass
    assert "WARPGROUP.DEPBAR.LE gsb0, 0x1" in sass and "WARPGROUP.DEPBAR.LE gsb0, 0x0" in sass


def test_kernels_the_producer_would_not_fit_keep_the_plain_pipelined_loop():
    """Warp specialization is an optimization: a block that would pass 1024 threads, or shared
    memory the producer's mbarriers would overflow, keeps the block-wide pipelined loop (and compiles)."""
    import copy
    import dataclasses

    from tilewright.ir.plans import Plans
    from tilewright.passes.warp_specialize import warp_specialize

    big = run_pipeline(matmul(256, 256, 64, 256, 256, 32, out_dtype="float32", num_stages=2, threads=1024),
                       PassContext(Target.parse(SM90A), {"optimize_level": 2}))
    assert big.num_threads == 1024 and nodes(big, th.TmaLoad) and not nodes(big, th.SetMaxNReg)

    def specialized(max_shared):
        f = matmul(256, 256, 128, 128, 128, 64, out_dtype="float32", num_stages=3)
        work = copy.copy(f)
        work.plans = Plans()
        tgt = dataclasses.replace(Target.parse(SM90A), max_shared_bytes=max_shared)
        out = warp_specialize(work, PassContext(tgt, {"optimize_level": 2}))
        return nodes(out, t.ThreadPartition) != []

    ring = 3 * (128 * 64 + 64 * 128) * 2  # A and B slots, float16
    assert specialized(ring + 128 + 24)  # full[3] and empty[3] fit, each 128-byte aligned
    assert not specialized(ring + 128 + 23)


def test_the_accumulator_is_poison_until_wait_group_retires_the_wgmma():
    """The emulator writes a wgmma's result at the wait_group that retires it: a wait that leaves
    the last group in flight lets the epilogue read poison (NaN), which a test would see."""
    M = N = K = 64
    plain = {"tl.disable_warp_specialized": True}
    k = lower_wgmma(matmul(M, N, K, 64, 64, 32, out_dtype="float32", num_stages=2), **plain)
    waits = nodes(k, th.WgmmaWait)
    assert [w.pending for w in waits] == [0]
    rng = np.random.default_rng(4)
    a = rng.uniform(-1, 1, (M, K)).astype(np.float16)
    b = rng.uniform(-1, 1, (K, N)).astype(np.float16)
    c = np.full((M, N), np.nan, np.float32)
    run_thread_kernel(k, [a, b, c])
    assert np.abs(c - a.astype(np.float64) @ b.astype(np.float64)).max() < 1e-2
    k = lower_wgmma(matmul(M, N, K, 64, 64, 32, out_dtype="float32", num_stages=2), **plain)  # (cached programs)
    nodes(k, th.WgmmaWait)[0].pending = 1
    c[:] = 0
    run_thread_kernel(k, [a, b, c])
    assert np.isnan(c).all()


def test_wgmma_is_the_default_and_tl_disable_wgmma_keeps_mma_sync():
    f = matmul(128, 128, 64, 128, 128, 32, out_dtype="float32")
    _verify(f)
    k = run_pipeline(f, PassContext(Target.parse(SM90A), {"optimize_level": 2}))
    assert nodes(k, th.Wgmma) and not nodes(k, th.MatrixMultiply)
    k = run_pipeline(f, PassContext(Target.parse(SM90A), {"optimize_level": 2, "tl.disable_wgmma": True}))
    assert not nodes(k, th.Wgmma) and nodes(k, th.MatrixMultiply)


def test_tiles_no_descriptor_describes_stay_on_mma_sync():
    # B rows of 16 bytes (N = 8 halves) have no swizzled layout: mma.sync, with the reason recorded
    f = matmul(64, 8, 64, 64, 8, 32, out_dtype="float32")
    k = lower_wgmma(f)
    assert not nodes(k, th.Wgmma) and nodes(k, th.MatrixMultiply)


def test_hip_printer_refuses_wgmma():
    from tilewright.codegen.hip import print_hip

    k = lower_wgmma(_gemm_serial(64, 64, 64, 64, 64, 32, 128, a_in_registers=False))
    assert nodes(k, th.Wgmma)
    with pytest.raises(CompileError, match="wgmma is an NVIDIA sm_90a instruction"):
        print_hip(k)


# ---------------------------------------------------------------------------------------------
# the device compiler


def _nvdisasm():
    """nvdisasm from PATH, $TW_NVDISASM or a pip-installed nvidia-cuda-nvdisasm, or None."""
    cands = [os.environ.get("TW_NVDISASM"), shutil.which("nvdisasm")]
    for site in sys.path:
        cands += glob.glob(os.path.join(site, "nvidia", "*", "bin", "nvdisasm"))
    return next((c for c in cands if c and os.access(c, os.X_OK)), None)


def sass_of(binary, tmp_path, why="compiled without spills; no nvdisasm here to look into the SASS"):
    """The SASS of an NVRTC ``binary`` (its cubin written under ``tmp_path``, read by nvdisasm); the test
    skipped with ``why`` where there is no nvdisasm."""
    tool = _nvdisasm()
    if tool is None:
        pytest.skip(why)
    path = tmp_path / "k.cubin"
    path.write_bytes(binary.cubin)
    return subprocess.run([tool, "-c", str(path)], capture_output=True, text=True, check=True).stdout


NVRTC_GEMMS = [
    (1024, 1024, 1024, 64, 64, 32, "float16", 128, False),
    (1024, 1024, 1024, 128, 128, 64, "bfloat16", 128, True),
    (1024, 1024, 1024, 128, 256, 64, "float16", 256, True),
    (1024, 1024, 1024, 128, 256, 64, "bfloat16", 256, False),
    (1000, 1000, 1000, 128, 128, 32, "float16", 256, False),
    (1024, 1024, 1024, 128, 128, 64, "float8_e4m3fn", 128, True),
]


@needs_nvrtc
@pytest.mark.parametrize("M, N, K, bm, bn, bk, dtype, threads, trans_B, ws", [
    g + (False,) for g in NVRTC_GEMMS] + [(1024, 1024, 1024, 128, 256, 64, "bfloat16", 256, False, True)])
def test_wgmma_gemm_compiles_for_sm_90a_without_spills(M, N, K, bm, bn, bk, dtype, threads, trans_B, ws, tmp_path):
    from tilewright.codegen.cuda import print_cuda
    from tilewright.toolchain import nvrtc

    out = "float16" if dtype.startswith("float8") else dtype
    f = matmul(M, N, K, bm, bn, bk, dtype=dtype, out_dtype=out, trans_B=trans_B, num_stages=3, threads=threads)
    k = lower_wgmma(f, **({"tw.warp_specialize": True} if ws else {"tl.disable_warp_specialized": True}))
    assert k.num_threads == threads + (128 if ws else 0)
    src = print_cuda(k)
    assert "wgmma.mma_async.sync.aligned" in src and "mma.sync" not in src
    binary = nvrtc.compile_cuda(src, "sm_90a", [k.name])
    res = binary.resources[k.name]
    assert res["spills"] == 0 and res["local_bytes"] == 0, res
    sass = sass_of(binary, tmp_path, "compiled without spills; no nvdisasm here to look for HGMMA in the SASS")
    assert ("QGMMA." if dtype.startswith("float8") else "HGMMA.") in sass  # the tensor-core warpgroup MMA


@needs_nvrtc
@pytest.mark.parametrize("variant", ["a_in_registers", "cp_async"])
def test_other_wgmma_variants_compile_without_spills(variant, tmp_path):
    from tilewright.codegen.cuda import print_cuda
    from tilewright.toolchain import nvrtc

    if variant == "a_in_registers":
        k = lower_wgmma(_gemm_serial(1024, 1024, 1024, 128, 128, 32, 256))
    else:
        k = lower_wgmma(matmul(1000, 1000, 1000, 128, 256, 32, out_dtype="float32", num_stages=3, threads=256),
                        **{"tw.disable_tma": True})
    binary = nvrtc.compile_cuda(print_cuda(k), "sm_90a", [k.name])
    res = binary.resources[k.name]
    assert res["spills"] == 0 and res["local_bytes"] == 0, res
    assert "HGMMA." in sass_of(binary, tmp_path, "compiled without spills; no nvdisasm here to look for HGMMA in the SASS")


# ---------------------------------------------------------------------------------------------
# instructions that start inside a swizzle atom of an MN-major operand (a fuzz finding)


def test_a_warpgroup_starting_inside_a_swizzle_atom_reads_the_right_columns():
    """64 x 192 over two warpgroups side by side: the second starts at column 96 of B (not
    transposed: N is contiguous, 64-column swizzle atoms).  One m64n96 instruction from there
    crosses the atom's end from inside it, which the hardware reads as the next rows of the same
    atom (the fuzz found 4,001 wrong elements on the emulator and the H200).  The planner now takes
    m64n32 instructions, each inside one atom or starting on one."""
    for dtype in ("bfloat16", "float16"):
        k, mm = _run_gemm(128, 200, 72, 64, 192, 32, dtype, threads=256, seed=5)
        assert {x.instr.n for x in mm} == {32}


@pytest.mark.parametrize("atom, start, width, ok", [
    (0, 96, 96, True),     # K-major: any start
    (64, 0, 96, True),     # on an atom: the leading byte offset takes it to the next one
    (64, 96, 32, True),    # inside one atom
    (64, 96, 96, False),   # crosses the atom's end from inside it
    (64, 32, 32, True),
    (64, 32, 64, False),
])
def test_mn_major_instruction_starts(atom, start, width, ok):
    from tilewright.passes.plan_gemms import _mn_major_start_ok

    assert _mn_major_start_ok(atom, start, width) is ok
