"""Warp-specialized GEMMs on the cooperative emulator: one produced by the compiler from a plain
``T.Pipelined`` loop (pass config ``tw.warp_specialize``), one written by hand with TileLang's
explicit spellings (``T.ws``, ``T.alloc_barrier``, ``T.mbarrier_wait_parity``, ``T.mbarrier_arrive``),
both against float64 with poisoned outputs; seeded protocol faults reported with their source line;
NVRTC builds for sm_90a."""

from __future__ import annotations

import numpy as np
import pytest
from toolchains import needs_nvrtc

import tilewright
import tilewright.language as T
from tilewright.interp.emulator import EmulatorError
from tilewright.ir import thread as th
from tilewright.ir import tile as t
from tilewright.ir.visitor import map_stmt, walk
from tilewright.kernels import matmul

WS = {"tw.warp_specialize": True}
SM90 = "cuda -arch=sm_90a"


def _inputs(M, N, K, dtype="float16", seed=0):
    rng = np.random.default_rng(seed)
    nd = tilewright.ir.dtype.to_numpy(dtype)
    return rng.uniform(-1, 1, (M, K)).astype(nd), rng.uniform(-1, 1, (K, N)).astype(nd)


def _check(c, a, b):
    want = a.astype(np.float64) @ b.astype(np.float64)
    assert np.isfinite(c).all(), "some outputs were never written"
    np.testing.assert_allclose(c.astype(np.float64), want, rtol=2e-2, atol=2e-2)


# ---------------------------------------------------------------- produced by the compiler
@pytest.mark.parametrize("M, N, K, bm, bn, bk, stages, threads, dtype", [
    (128, 128, 128, 64, 64, 32, 2, 128, "float16"),
    (200, 136, 104, 64, 64, 32, 3, 128, "bfloat16"),   # ragged in every dimension (rows of 16-byte multiples: TMA)
    (64, 128, 96, 64, 128, 32, 1, 256, "float16"),     # one stage: the producer waits for every release
])
def test_compiler_warp_specializes_a_pipelined_gemm(M, N, K, bm, bn, bk, stages, threads, dtype):
    f = matmul(M, N, K, bm, bn, bk, dtype=dtype, out_dtype="float32", num_stages=stages, threads=threads,
               swizzle_panel=0)
    k = tilewright.compile(f, target=SM90, execution_backend="emulator", pass_configs=WS)
    assert k.num_threads == threads + 128  # a producer warpgroup was added
    src = k.get_kernel_source()
    assert "cp.async.bulk.tensor" in src and "mbarrier.try_wait" in src and "mbarrier.arrive" in src
    a, b = _inputs(M, N, K, dtype)
    c = np.full((M, N), np.nan, np.float32)
    k(a, b, c)
    _check(c, a, b)


def test_kernels_without_the_mainloop_shape_are_left_alone():
    """An epilogue that reads the thread index: renumbering the threads would change it."""
    @T.prim_func
    def g(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16"), C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            tx = T.get_thread_binding()
            As = T.alloc_shared((64, 32), "float16")
            Bs = T.alloc_shared((32, 64), "float16")
            Cf = T.alloc_fragment((64, 64), "float32")
            T.clear(Cf)
            for k in T.Pipelined(2, num_stages=2):
                T.copy(A[0, k * 32], As)
                T.copy(B[k * 32, 0], Bs)
                T.gemm(As, Bs, Cf)
            T.copy(Cf, C)
            C[0, tx % 64] = 1.0

    plain = tilewright.compile(g, target=SM90, execution_backend="emulator")
    ws = tilewright.compile(g, target=SM90, execution_backend="emulator", pass_configs=WS)
    assert ws.num_threads == 128 and ws.get_kernel_source() == plain.get_kernel_source()


@needs_nvrtc
def test_warp_specialized_gemm_builds_for_sm90a():
    k = tilewright.compile(matmul(512, 512, 512, 128, 128, 64, num_stages=3, threads=256), target=SM90,
                           pass_configs=WS)
    assert k.num_threads == 384 and k.resource_usage["spills"] == 0
    assert k.get_code_object()[:4] == b"\x7fELF"


# ---------------------------------------------------------------- written by hand
def ws_gemm(M, N, K, bm=64, bn=64, bk=32, stages=2, fault=None):
    """Producer warpgroup 1 copies tiles into a ring; consumer warpgroup 0 multiplies.  ``fault``
    seeds a protocol error: missing_arrive, wrong_parity, early_reuse."""
    n_k = (K + bk - 1) // bk

    @T.prim_func
    def gemm(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=256) as (bx, by):
            A_s = T.alloc_shared((stages, bm, bk), "float16")
            B_s = T.alloc_shared((stages, bk, bn), "float16")
            C_f = T.alloc_fragment((bm, bn), "float32")
            full = T.alloc_barrier([128] * stages)
            empty = T.alloc_barrier([128] * stages)
            with T.ws(1):
                for k in T.serial(n_k):
                    if fault != "early_reuse":
                        T.mbarrier_wait_parity(empty[k % stages], (k // stages + 1) % 2)
                    T.copy(A[by * bm, k * bk], A_s[k % stages, :, :])
                    T.copy(B[k * bk, bx * bn], B_s[k % stages, :, :])
                    T.mbarrier_arrive(full[k % stages])
            with T.ws(0):
                T.clear(C_f)
                for k in T.serial(n_k):
                    if fault == "wrong_parity":
                        T.mbarrier_wait_parity(full[k % stages], (k // stages + 1) % 2)
                    else:
                        T.mbarrier_wait_parity(full[k % stages], (k // stages) % 2)
                    T.gemm(A_s[k % stages, :, :], B_s[k % stages, :, :], C_f)
                    if fault != "missing_arrive":
                        T.mbarrier_arrive(empty[k % stages])
                T.copy(C_f, C[by * bm, bx * bn])

    return gemm


@pytest.mark.parametrize("target", [SM90, "cuda -arch=sm_80"])
@pytest.mark.parametrize("M, N, K, stages", [(64, 64, 128, 2), (100, 72, 160, 3)])
def test_hand_written_warp_specialized_gemm(target, M, N, K, stages):
    k = tilewright.compile(ws_gemm(M, N, K, stages=stages), target=target, execution_backend="emulator")
    a, b = _inputs(M, N, K, seed=M + K)
    c = np.full((M, N), np.nan, np.float32)
    k(a, b, c)
    _check(c, a, b)


def _line_of(func, text):
    import inspect

    src, first = inspect.getsourcelines(ws_gemm)
    return first + next(i for i, line in enumerate(src) if text in line)


@pytest.mark.parametrize("fault, message, line_text", [
    ("missing_arrive", "deadlock", "T.mbarrier_wait_parity(empty"),
    ("wrong_parity", "wrong-parity", "T.mbarrier_wait_parity(full[k % stages], (k // stages + 1) % 2)"),
    # the overwrite is seen from the consumer's read that nothing ordered after the producer's write
    ("early_reuse", "nothing ordering", "T.gemm(A_s[k % stages, :, :]"),
])
def test_seeded_faults_are_reported_with_the_line(fault, message, line_text):
    k = tilewright.compile(ws_gemm(64, 64, 256, stages=2, fault=fault), target=SM90, execution_backend="emulator")
    a, b = _inputs(64, 64, 256)
    with pytest.raises(EmulatorError) as e:
        k(a, b, np.full((64, 64), np.nan, np.float32))
    text = str(e.value)
    assert message in text.lower(), text
    assert f"line {_line_of(ws_gemm, line_text)}" in text or str(_line_of(ws_gemm, line_text)) in text, text


def test_a_barrier_one_warp_never_reaches_is_a_reported_deadlock():
    """Seeded in the compiler's output: one consumer warp skips the consumers' named barrier."""
    k = tilewright.compile(ws_gemm(64, 64, 64), target=SM90, execution_backend="emulator")
    tk = k.thread_kernel
    named = []
    walk(tk.body, lambda s: named.append(s) if isinstance(s, th.NamedBarrier) else None)
    assert named, "the consumer partition synchronizes with a named barrier"
    victim = named[0]
    skip = tk.thread_var % 128 // 32 != 1  # the second warp of its warpgroup skips it
    tk.body = map_stmt(tk.body, lambda s: t.IfThenElse(skip, s, None, loc=s.loc) if s is victim else None)
    a, b = _inputs(64, 64, 64)
    with pytest.raises(EmulatorError, match="(?i)deadlock|never reach|barrier") as e:
        k(a, b, np.full((64, 64), np.nan, np.float32))
    assert victim.loc is None or str(victim.loc.lineno) in str(e.value)


@needs_nvrtc
def test_hand_written_warp_specialized_gemm_builds_for_sm90a():
    k = tilewright.compile(ws_gemm(256, 256, 256), target=SM90)
    assert k.resource_usage["spills"] == 0 and "mbarrier.try_wait" in k.get_kernel_source()


def ws_gemm_tma(M, N, K, bm=64, bn=64, bk=32, stages=2, fault=None):
    """As ``ws_gemm``, with the producer's tiles moved by ``T.tma_copy`` (each adds its bytes to the
    ring slot's mbarrier; the producer warpgroup's 128 threads then arrive) — TileLang's explicit
    TMA spelling."""
    n_k = (K + bk - 1) // bk

    @T.prim_func
    def gemm(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=256) as (bx, by):
            A_s = T.alloc_shared((stages, bm, bk), "float16")
            B_s = T.alloc_shared((stages, bk, bn), "float16")
            C_f = T.alloc_fragment((bm, bn), "float32")
            full = T.alloc_barrier([1 if fault == "one_arrival" else 128] * stages)  # the producer warpgroup
            empty = T.alloc_barrier([128] * stages)
            with T.ws(1):
                for k in T.serial(n_k):
                    T.mbarrier_wait_parity(empty[k % stages], (k // stages + 1) % 2)
                    T.tma_copy(A[by * bm, k * bk], A_s[k % stages, :, :], barrier=full[k % stages])
                    T.tma_copy(B[k * bk, bx * bn], B_s[k % stages, :, :], barrier=full[k % stages])
                    T.mbarrier_arrive(full[k % stages])
            with T.ws(0):
                T.clear(C_f)
                for k in T.serial(n_k):
                    T.mbarrier_wait_parity(full[k % stages], (k // stages) % 2)
                    T.gemm(A_s[k % stages, :, :], B_s[k % stages, :, :], C_f)
                    T.mbarrier_arrive(empty[k % stages])
                T.copy(C_f, C[by * bm, bx * bn])

    return gemm


@pytest.mark.parametrize("M, N, K, bn, stages", [(64, 64, 128, 64, 2), (100, 136, 200, 128, 3)])
def test_hand_written_tma_copy_gemm(M, N, K, bn, stages):
    """B tiles of 128 fp16 columns are two TMA boxes: still one arrival for the copy."""
    k = tilewright.compile(ws_gemm_tma(M, N, K, bn=bn, stages=stages), target=SM90, execution_backend="emulator")
    src = k.get_kernel_source()
    assert "cp.async.bulk.tensor" in src and "tw_warp_uniform() == 4" in src  # issued by warpgroup 1's first warp
    a, b = _inputs(M, N, K, seed=K)
    c = np.full((M, N), np.nan, np.float32)
    k(a, b, c)
    _check(c, a, b)


def test_tma_copy_arrival_count_mismatch_is_reported():
    k = tilewright.compile(ws_gemm_tma(64, 64, 128, fault="one_arrival"), target=SM90, execution_backend="emulator")
    a, b = _inputs(64, 64, 128)
    with pytest.raises(EmulatorError, match="(?i)arriv"):
        k(a, b, np.full((64, 64), np.nan, np.float32))


def test_tma_copy_is_refused_where_tma_cannot_do_it():
    with pytest.raises(tilewright.CompileError, match="tensor memory accelerator"):
        tilewright.compile(ws_gemm_tma(64, 64, 128), target="cuda -arch=sm_80", execution_backend="emulator")


@needs_nvrtc
def test_tma_copy_gemm_builds_for_sm90a():
    k = tilewright.compile(ws_gemm_tma(256, 256, 256, bn=128), target=SM90)
    assert k.resource_usage["spills"] == 0 and k.get_code_object()[:4] == b"\x7fELF"
