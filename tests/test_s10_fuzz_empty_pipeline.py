"""Fuzz finding (session 10, template ``splitk_user``): a ``T.Pipelined(lo, hi)`` GEMM mainloop whose
range is empty at run time (a user split-K where the last split gets no K block) hung on sm_90a.
With TMA the pipeline's prologue issues its copies under ``if (0 < trip count)``, but the wait for
slot 0 before the loop was unconditional: an mbarrier phase nobody fills (the emulator reports the
hang; the GPU would spin forever).  passes/pipeline_loops.py now guards that wait the same way.

Without the fix the sm_90a cases without warp specialization fail (8 of the 20 split-K cases and
2 of the 4 round cases below: the emulator's hang report); the warp-specialized kernel (the consumers wait inside the loop), cp.async
(sm_80) and the AMD targets never waited on an mbarrier there."""

from __future__ import annotations

import numpy as np
import pytest

import tilewright
import tilewright.language as T


def _splitk(M, N, K, bm, bn, bk, splits, stages, threads):
    kb = -(-K // bk)
    per = -(-kb // splits)  # K blocks per split: the last splits may get none

    @T.prim_func
    def part(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((splits, M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), splits, threads=threads) as (bx, by, bz):
            As = T.alloc_shared((bm, bk), "float16")
            Bs = T.alloc_shared((bk, bn), "float16")
            Cf = T.alloc_fragment((bm, bn), "float32")
            T.clear(Cf)
            for kk in T.Pipelined(bz * per, T.min((bz + 1) * per, kb), num_stages=stages):
                T.copy(A[by * bm, kk * bk], As)
                T.copy(B[kk * bk, bx * bn], Bs)
                T.gemm(As, Bs, Cf)
            T.copy(Cf, C[bz, by * bm, bx * bn])

    return part, per


TARGETS = [("cuda -arch=sm_90a", {"tw.warp_specialize": False}),  # TMA + mbarriers, wgmma
           ("cuda -arch=sm_90a", {"tw.warp_specialize": False, "tw.enable_wgmma": False}),  # TMA, mma.sync
           ("cuda -arch=sm_90a", None),  # the default: warp-specialized (the producer's loop is empty too)
           ("cuda -arch=sm_80", None), ("hip -arch=gfx942", None)]


@pytest.mark.parametrize("target, configs", TARGETS)
@pytest.mark.parametrize("stages", [2, 3])
@pytest.mark.parametrize("splits", [5, 3])
def test_a_split_with_no_k_blocks(target, configs, stages, splits):
    M, N, K, bk = 33, 40, 64, 16  # 4 K blocks: 5 splits of 1 (the 5th empty), 3 splits of 2 (the 3rd empty)
    func, per = _splitk(M, N, K, 32, 32, bk, splits, stages, 128)
    rng = np.random.default_rng(splits * 10 + stages)
    a = rng.uniform(-1, 1, (M, K)).astype(np.float16)
    b = rng.uniform(-1, 1, (K, N)).astype(np.float16)
    c = np.full((splits, M, N), np.nan, np.float32)
    kernel = tilewright.compile(func, target=target, execution_backend="emulator", pass_configs=configs)
    if configs:
        assert "cp.async.bulk.tensor" in kernel.get_kernel_source() and "setmaxnreg" not in kernel.get_kernel_source()
    kernel(a, b, c)
    fa, fb = a.astype(np.float64), b.astype(np.float64)
    for s in range(splits):
        lo, hi = min(s * per, 4) * bk, min((s + 1) * per, 4) * bk
        want = fa[:, lo:hi] @ fb[lo:hi]  # (an empty split: its cleared accumulator, zeros)
        np.testing.assert_allclose(c[s], want, rtol=1e-2, atol=1e-2)
    assert np.all(c[-1] == 0)


@pytest.mark.parametrize("target, configs", TARGETS[:2] + TARGETS[3:])
def test_a_pipelined_loop_whose_trip_count_changes_each_round(target, configs):
    """An outer T.serial round re-runs the pipeline (its prologue re-arms the mbarriers) with
    (block + round) % 5 K blocks: 0 in some rounds, up to all 4 in others."""
    nb, rounds, K, bm, bn, bk = 3, 5, 128, 64, 64, 32
    kb = K // bk

    @T.prim_func
    def rounds_of_gemms(A: T.Tensor((bm, K), "float16"), B: T.Tensor((K, bn), "float16"),
                        C: T.Tensor((nb, rounds, bm, bn), "float32")):
        with T.Kernel(nb, threads=128) as bx:
            As = T.alloc_shared((bm, bk), "float16")
            Bs = T.alloc_shared((bk, bn), "float16")
            Cf = T.alloc_fragment((bm, bn), "float32")
            for r in T.serial(rounds):
                T.clear(Cf)
                for kk in T.Pipelined((bx + r) % (kb + 1), num_stages=3):
                    T.copy(A[0, kk * bk], As)
                    T.copy(B[kk * bk, 0], Bs)
                    T.gemm(As, Bs, Cf)
                T.copy(Cf, C[bx, r, 0, 0])

    rng = np.random.default_rng(11)
    a = rng.uniform(-1, 1, (bm, K)).astype(np.float16)
    b = rng.uniform(-1, 1, (K, bn)).astype(np.float16)
    c = np.full((nb, rounds, bm, bn), np.nan, np.float32)
    kernel = tilewright.compile(rounds_of_gemms, target=target, execution_backend="emulator", pass_configs=configs)
    kernel(a, b, c)
    for x in range(nb):
        for r in range(rounds):
            n = (x + r) % (kb + 1) * bk
            want = a[:, :n].astype(np.float64) @ b[:n].astype(np.float64)
            np.testing.assert_allclose(c[x, r], want, rtol=1e-3, atol=1e-3)
