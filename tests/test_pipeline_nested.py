"""A ``T.Pipelined`` loop nested in another loop or an ``if`` (issue 8 report): its prologue must run
right before the loop on every round, and a barrier must separate the prologue's copies into the
ring from the previous round's reads of it — on every target's copy flavour (TMA on sm_90a,
cp.async on sm_80 and on sm_90a without TMA, register-staged copies on gfx942/gfx1100).  Run on the
emulator (which also reports shared-memory races) against a float64 reference, outputs NaN-poisoned."""

from __future__ import annotations

import numpy as np
import pytest

import tilewright
import tilewright.language as T
from tilewright.kernels import matmul_persistent

# (target, pass configs): every copy flavour of a pipelined loop
TARGETS = {
    "sm_80": ("cuda -arch=sm_80", None),
    "sm_90a": ("cuda -arch=sm_90a", None),
    "sm_90a_cp_async": ("cuda -arch=sm_90a", {"tw.disable_tma": True}),
    "gfx942": ("hip -arch=gfx942", None),
    "gfx1100": ("hip -arch=gfx1100", None),
}


def _compile(f, name):
    target, pc = TARGETS[name]
    return tilewright.compile(f, target=target, execution_backend="emulator", pass_configs=pc)


def _operands(M, N, K, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    return a, b


def _check(got, want, tol=2e-2):
    assert not np.isnan(got).any(), "outputs left unwritten"
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol * np.sqrt(want.shape[-1]))


def _tile_loop_gemm(M, N, K, bm, bn, bk, stages, blocks, sync):
    """A persistent GEMM without tile grouping: block ``b`` takes tiles b, b + blocks, ...; with
    ``sync`` an explicit barrier ends each round (the old workaround)."""
    n_tiles = -(-N // bn)
    tiles = -(-M // bm) * n_tiles

    @T.prim_func
    def tile_loop(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(blocks, threads=128) as bid:
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn), "float16")
            C_l = T.alloc_fragment((bm, bn), "float32")
            for r in T.serial(T.ceildiv(tiles - bid, blocks)):
                tile = r * blocks + bid
                tm = tile // n_tiles
                tn = tile % n_tiles
                T.clear(C_l)
                for k in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                    T.copy(A[tm * bm, k * bk], A_s)
                    T.copy(B[k * bk, tn * bn], B_s)
                    T.gemm(A_s, B_s, C_l)
                for i, j in T.Parallel(bm, bn):
                    C_l[i, j] = C_l[i, j] * 2.0
                T.copy(C_l, C[tm * bm, tn * bn])
                if sync:
                    T.sync_threads()

    return tile_loop


@pytest.mark.parametrize("target", list(TARGETS))
@pytest.mark.parametrize("stages", [1, 2, 3, 4])
@pytest.mark.parametrize("bk", [16, 32])
def test_tile_loop_around_a_pipeline(target, stages, bk):
    """Ragged M, N and K; 3 blocks for 2 x 3 tiles (two rounds each); no barrier after the epilogue.
    With bk=32 and 3 stages the gemm's operand prefetch past the loop's last barrier reads the slot
    the next round's prologue fills first."""
    M, N, K = 40, 72, 88
    a, b = _operands(M, N, K, stages)
    k = _compile(_tile_loop_gemm(M, N, K, 32, 32, bk, stages, 3, sync=False), target)
    c = np.full((M, N), np.nan, np.float32)
    k(a, b, c)
    _check(c, 2.0 * (a.astype(np.float64) @ b.astype(np.float64)))


@pytest.mark.parametrize("target", ["sm_80", "gfx942"])
def test_tile_loop_with_an_explicit_barrier(target):
    M, N, K = 40, 72, 88
    a, b = _operands(M, N, K, 7)
    k = _compile(_tile_loop_gemm(M, N, K, 32, 32, 16, 3, 2, sync=True), target)
    c = np.full((M, N), np.nan, np.float32)
    k(a, b, c)
    _check(c, 2.0 * (a.astype(np.float64) @ b.astype(np.float64)))


@pytest.mark.parametrize("target", list(TARGETS))
@pytest.mark.parametrize("stages", [2, 4])
def test_persistent_kernel(target, stages):
    """``kernels.matmul_persistent`` (grouped tile order, bias + activation) on every copy flavour."""
    M, N, K = 70, 96, 80
    a, b = _operands(M, N, K, 3)
    bias = np.random.default_rng(4).standard_normal(N).astype(np.float16)
    f = matmul_persistent(M, N, K, 32, 32, 16, num_stages=stages, threads=128, num_blocks=4, group_M=2,
                          bias_dtype="float16", activation="relu")
    k = _compile(f, target)
    c = np.full((M, N), np.nan, np.float16)
    k(a, b, bias, c)
    want = np.maximum(a.astype(np.float64) @ b.astype(np.float64) + bias.astype(np.float64), 0)
    _check(c, want)


def _batched(M, N, K, bm, bn, bk, stages):
    """A data-dependent tile loop (``rounds``, a kernel argument) and a pipeline under an ``if``:
    round r of block bx computes C[r] = A[r] @ B for row tile bx, skipped where ``skip[r]`` is set."""

    @T.prim_func
    def batched(A: T.Tensor((3, M, K), "float16"), B: T.Tensor((K, N), "float16"), skip: T.Tensor((3,), "int32"),
                C: T.Tensor((3, M, N), "float32"), rounds: T.int32):
        with T.Kernel(T.ceildiv(M, bm), threads=128) as bx:
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn), "float16")
            C_l = T.alloc_fragment((bm, bn), "float32")
            for r in T.serial(rounds):
                if skip[r] == 0:
                    T.clear(C_l)
                    for k in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                        T.copy(A[r, bx * bm, k * bk], A_s)
                        T.copy(B[k * bk, 0], B_s)
                        T.gemm(A_s, B_s, C_l)
                    T.copy(C_l, C[r, bx * bm, 0])

    return batched


@pytest.mark.parametrize("target", list(TARGETS))
def test_pipeline_in_a_data_dependent_loop_and_an_if(target):
    M, N, K = 48, 32, 72
    rng = np.random.default_rng(5)
    a = rng.standard_normal((3, M, K)).astype(np.float16)
    _, b = _operands(M, N, K, 6)
    skip = np.array([0, 1, 0], np.int32)
    k = _compile(_batched(M, N, K, 32, 32, 16, 3), target)
    c = np.full((3, M, N), np.nan, np.float32)
    k(a, b, skip, c, 3)
    want = np.einsum("rmk,kn->rmn", a.astype(np.float64), b.astype(np.float64))
    _check(c[0], want[0])
    _check(c[2], want[2])
    assert np.isnan(c[1]).all()  # the skipped round writes nothing


@pytest.mark.parametrize("target", list(TARGETS))
def test_persistent_kernel_with_a_run_time_depth(target):
    """K known at run time only: the prologue stages stay under their trip-count guard (one barrier
    before them, hoisted out of the first guard)."""
    M, N, K = 70, 64, 88
    a, b = _operands(M, N, K, 9)
    f = matmul_persistent(M, N, T.dynamic("k"), 32, 32, 16, num_stages=3, threads=128, num_blocks=3, group_M=2,
                          out_dtype="float32")
    k = _compile(f, target)
    c = np.full((M, N), np.nan, np.float32)
    k(a, b, np.zeros(1, np.float32), c)
    _check(c, a.astype(np.float64) @ b.astype(np.float64))


@pytest.mark.parametrize("target, copy", [("sm_80", "(async, 8 x float16 per chunk)"),
                                          ("gfx942", "(K-packed by")])  # CDNA: B's K-packed LDS layout
def test_persistent_tile_columns_copy_in_vectors(target, copy):
    """The persistent kernel's column offset ``(tile % n) // rows * bn`` is a multiple of the chunk
    width even though its range is unknown: whole 16-byte chunks, not element-by-element copies."""
    f = matmul_persistent(256, 256, 256, 64, 64, 32, num_stages=3, threads=128, num_blocks=8, group_M=2)
    src = _compile(f, target).get_kernel_source()
    assert f"copy B -> B_shared {copy}" in src
    assert "1 x float16 per chunk" not in src
