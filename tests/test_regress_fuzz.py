"""Regression tests for what the differential fuzzer (tilewright/fuzz) found, each against a float64
(or exact integer) reference with poisoned outputs, on the interpreter and on the emulator."""

from __future__ import annotations

import numpy as np
import pytest
from toolchains import needs_nvrtc

import tilewright
import tilewright.language as T
from tilewright.fuzz.runner import run_case
from tilewright.fuzz.templates import TEMPLATES

BACKENDS = [{"target": "interpret"},
            {"target": "cuda -arch=sm_90a", "execution_backend": "emulator"},
            {"target": "hip -arch=gfx942", "execution_backend": "emulator"}]


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b["target"])
@pytest.mark.parametrize("d", [3, -3, -8])
def test_truncdiv_and_truncmod_round_toward_zero(backend, d):
    """T.truncdiv/T.truncmod were ``//`` and ``%`` (rounding toward minus infinity): -7 truncdiv 3
    gave -3 instead of -2 and -7 truncmod 3 gave 2 instead of -1."""
    n = 64

    @T.prim_func
    def k(A: T.Tensor((n,), "int32"), Q: T.Tensor((n,), "int32"), R: T.Tensor((n,), "int32"),
          F: T.Tensor((n,), "int32")):
        with T.Kernel(1, threads=64):
            for i in T.Parallel(n):
                Q[i] = T.truncdiv(A[i], d)
                R[i] = T.truncmod(A[i], d)
                F[i] = T.floordiv(A[i], d) * 100 + T.floormod(A[i], d)

    a = np.random.default_rng(0).integers(-50, 51, n).astype(np.int32)
    a[:4] = (-7, 7, 0, -1)
    q, r, f = (np.full(n, np.iinfo(np.int32).min, np.int32) for _ in range(3))
    tilewright.compile(k, **backend)(a, q, r, f)
    x = a.astype(np.int64)
    want_q = np.trunc(x / d).astype(np.int64)
    np.testing.assert_array_equal(q, want_q)
    np.testing.assert_array_equal(r, x - want_q * d)
    np.testing.assert_array_equal(f, np.floor_divide(x, d) * 100 + np.mod(x, d))


def test_truncdiv_of_constants_folds_toward_zero():
    assert (T.truncdiv(-7, 3), T.truncmod(-7, 3), T.truncdiv(7, -3), T.truncmod(7, -3)) == (-2, -1, -2, 1)


@pytest.mark.parametrize("backend", BACKENDS[:2] + [{"target": "hip -arch=gfx1100", "execution_backend": "emulator"}],
                         ids=lambda b: b["target"])
@pytest.mark.parametrize("threads", [96, 192])
def test_atomics_in_a_parallel_loop_replicated_over_a_non_power_of_two_block(backend, threads):
    """T.Parallel(64) over 96 threads gives 16 threads x 4 positions, held by threads t, t+16, ...,
    t+80: the replica guard was built from thread-index bits only (t ^ 16) and let 3 of the 6
    replicas add, so a histogram came out 3x too large."""
    n = 64

    @T.prim_func
    def k(W: T.Tensor((n,), "float32"), Bin: T.Tensor((n,), "int32"), H: T.Tensor((4,), "float32"),
          S: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=threads):
            s = T.alloc_shared((n,), "float32")
            T.copy(W, s)
            for i in T.Parallel(n):
                T.atomic_add(H[Bin[i]], W[i])
                s[i] = s[i] * 2.0  # an in-place update: done twice if two replicas store
            T.copy(s, S)

    rng = np.random.default_rng(1)
    w = rng.uniform(-1, 1, n).astype(np.float32)
    b = rng.integers(0, 4, n).astype(np.int32)
    h = np.arange(4, dtype=np.float32)
    s = np.full(n, np.nan, np.float32)
    want = np.arange(4, dtype=np.float64)
    np.add.at(want, b, w.astype(np.float64))
    tilewright.compile(k, **backend)(w, b, h, s)
    np.testing.assert_allclose(h, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(s, w.astype(np.float64) * 2, rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS[1:] + [{"target": "cuda -arch=sm_80", "execution_backend": "emulator"}],
                         ids=lambda b: b["target"])
@pytest.mark.parametrize("M, N, K", [(32, 16, 48), (32, 16, 80), (64, 32, 96), (32, 32, 160)])
def test_gemm_operands_whose_rows_are_not_a_power_of_two_of_16_byte_chunks(backend, M, N, K):
    """The ldmatrix swizzle XORed a row's 16-byte chunk index with (row % min(chunks, 8)): with 6,
    10, 12 or 20 chunks a row (K = 48, 80, 96, 160 in float16) it sent chunks into the next row: a
    wrong product for K = 48 (max error 5.5), an out-of-bounds shared write for K = 80."""
    @T.prim_func
    def g(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128):
            As = T.alloc_shared((M, K), "float16")
            Bs = T.alloc_shared((K, N), "float16")
            Cf = T.alloc_fragment((M, N), "float32")
            T.copy(A, As)
            T.copy(B, Bs)
            T.gemm(As, Bs, Cf, clear_accum=True)
            T.copy(Cf, C)

    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (M, K)).astype(np.float16)
    b = rng.uniform(-1, 1, (K, N)).astype(np.float16)
    c = np.full((M, N), np.nan, np.float32)
    tilewright.compile(g, **backend)(a, b, c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("backend", BACKENDS + [{"target": "hip -arch=gfx1100", "execution_backend": "emulator"}],
                         ids=lambda b: b["target"])
@pytest.mark.parametrize("M, N, threads", [(32, 7, 128), (33, 5, 64)])
def test_in_place_update_of_shared_memory_from_a_reduced_fragment(backend, M, N, threads):
    """s[i] = s[i] + r[i] with r a row sum of a (32, 7) fragment over 128 threads: the loop took r's
    layout, in which rows are held by several threads at different registers (no thread guard picks
    one), and the update was applied more than once."""
    @T.prim_func
    def k(X: T.Tensor((M, N), "float32"), S0: T.Tensor((M,), "float32"), O: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=threads):
            x = T.alloc_fragment((M, N), "float32")
            r = T.alloc_fragment((M,), "float32")
            s = T.alloc_shared((M,), "float32")
            T.copy(X, x)
            T.copy(S0, s)
            T.reduce_sum(x, r, dim=1)
            for i in T.Parallel(M):
                s[i] = s[i] + r[i]
            T.copy(s, O)

    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (M, N)).astype(np.float32)
    s0 = rng.uniform(-1, 1, M).astype(np.float32)
    o = np.full(M, np.nan, np.float32)
    tilewright.compile(k, **backend)(x, s0, o)
    np.testing.assert_allclose(o, s0 + x.astype(np.float64).sum(1), rtol=1e-5, atol=1e-5)


def test_in_place_memory_update_with_fragment_writes_in_a_multi_holder_layout_is_refused():
    """The same loop shape that also writes the reduced fragment cannot be re-laid out (the fragment
    lives in its registers): it was applied more than once; now refused at the loop with a hint."""
    M, N = 32, 7

    @T.prim_func
    def k(X: T.Tensor((M, N), "float32"), S0: T.Tensor((M,), "float32"), O: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=128):
            x = T.alloc_fragment((M, N), "float32")
            r = T.alloc_fragment((M,), "float32")
            s = T.alloc_shared((M,), "float32")
            T.copy(X, x)
            T.copy(S0, s)
            T.reduce_sum(x, r, dim=1)
            for i in T.Parallel(M):
                r[i] = r[i] * 2.0
                s[i] = s[i] + r[i]
            T.copy(s, O)

    with pytest.raises(tilewright.errors.CompileError, match="split the loop"):
        tilewright.compile(k, target="cuda -arch=sm_90a", execution_backend="emulator")


@needs_nvrtc
def test_return_prev_in_an_unrolled_parallel_loop_compiles_for_the_gpu():
    """Found by the H200 fuzz (the emulator and interpreter were right): a T.Parallel body is
    emitted once per register group, and the let binding a return_prev value kept one C name, so
    NVRTC saw `const int prev = ...` declared several times in one scope."""
    case = TEMPLATES["atomic"].make({"n": 256, "bins": 2, "block": 256, "threads": 32, "op": "ticket",
                                     "dtype": "int32", "seed": 628678521})
    k = tilewright.compile(case.func, target="cuda -arch=sm_90a")
    assert k.get_code_object()[:4] == b"\x7fELF"
    assert run_case(case, "emulator:sm_90a").status == "ok"


@pytest.mark.parametrize("clear", [True, False])
def test_reductions_of_shared_tiles_agree_on_every_backend(clear):
    """Found by the fuzz helper: T.reduce_* with a shared source ran in the interpreter and was
    refused by every compiled backend.  Shared operands now go through fragments everywhere."""
    @T.prim_func
    def f(A: T.Tensor((64, 48), "float32"), Init: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((64, 48), "float32")
            R = T.alloc_shared((64,), "float32")
            T.copy(A, S)
            T.copy(Init, R)
            T.reduce_max(S, R, dim=1, clear=clear)
            T.copy(R, B)

    rng = np.random.default_rng(3)
    a = rng.standard_normal((64, 48)).astype(np.float32)
    init = rng.standard_normal(64).astype(np.float32) * 3
    want = a.astype(np.float64).max(1) if clear else np.maximum(a.astype(np.float64).max(1), init)
    for kw in BACKENDS + [{"target": "hip -arch=gfx1100", "execution_backend": "emulator"}]:
        b = np.full(64, np.nan, np.float32)
        tilewright.compile(f, **kw)(a, init, b)
        np.testing.assert_allclose(b, want, rtol=1e-6, err_msg=str(kw))
