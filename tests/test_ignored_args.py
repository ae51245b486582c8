"""Nothing silently ignored: every TileLang argument tilewright accepts either takes effect or is
refused / warned about, naming the argument and what to do.

Arguments that take effect are checked for the effect itself (in the thread IR or the generated
source) and for correct results on the tile interpreter and on the emulator of the lowered code for
sm_90a and gfx942, against float64 references, outputs poisoned (NaN / -1) before each run.
Arguments that are pure performance hints tilewright does not act on must warn
(``TilewrightWarning``, once per kernel) and still compute the right answer; values that would
change the meaning are a ``CompileError`` at the kernel line.
"""

import warnings

import numpy as np
import pytest
from zoo import GEMM_TOL, close, f64, poisoned, rand

import tilewright
import tilewright.language as T
from tilewright.errors import ArgumentError, CompileError, TilewrightWarning
from tilewright.ir import thread as th
from tilewright.ir.visitor import walk

CUDA, GFX942 = "cuda -arch=sm_90a", "hip -arch=gfx942"
BACKENDS = [("interpret", None), (CUDA, "emulator"), (GFX942, "emulator")]
BACKEND_IDS = ["interpret", "emulator-sm_90a", "emulator-gfx942"]


@pytest.fixture
def rng():
    return np.random.default_rng(7)


def build(func, target, backend, **kw):
    return tilewright.compile(func, target=target, execution_backend=backend, **kw)


def thread_stmts(kernel, kind) -> list:
    out = []
    walk(kernel.thread_kernel.body, lambda s: out.append(s) if isinstance(s, kind) else None)
    return out


def no_warnings():
    """A context in which any TilewrightWarning fails the test."""
    ctx = warnings.catch_warnings()
    ctx.__enter__()
    warnings.simplefilter("error", TilewrightWarning)
    return ctx


# ============================================================================================
# a pipelined GEMM carrying the arguments under test


def gemm_kernel(M, N, K, bm, bn, bk, stages=2, copy_kw=None, gemm_kw=None, pipe_kw=None, kernel_kw=None):
    copy_kw, gemm_kw, pipe_kw, kernel_kw = copy_kw or {}, gemm_kw or {}, pipe_kw or {}, kernel_kw or {}

    @T.prim_func
    def gemm(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128, **kernel_kw) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn), "float16")
            C_f = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=stages, **pipe_kw):
                T.copy(A[by * bm, k * bk], A_s, **copy_kw)
                T.copy(B[k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_f, **gemm_kw)
            T.copy(C_f, C[by * bm, bx * bn])

    return gemm


def check_gemm(kernel, rng, M, N, K):
    a, b = rand(rng, (M, K), "float16"), rand(rng, (K, N), "float16")
    c = poisoned((M, N))
    kernel(a, b, c)
    close(c, f64(a) @ f64(b), *GEMM_TOL["float16"])


# ============================================================================================
# T.copy(disable_tma=True): that copy (and so its pipelined loop) leaves the TMA path


@pytest.mark.parametrize("disable", [False, True])
def test_copy_disable_tma_forces_the_non_tma_path(rng, disable):
    M, N, K = 128, 64, 96
    k = build(gemm_kernel(M, N, K, 64, 64, 32, copy_kw={"disable_tma": disable}), CUDA, "emulator")
    tma_loads = thread_stmts(k, th.TmaLoad)
    async_copies = thread_stmts(k, th.AsyncCopy)
    if disable:
        assert not tma_loads and not k.thread_kernel.tensor_maps, "disable_tma=True must keep the copy off TMA"
        assert async_copies, "the copies should use cp.async instead"
    else:
        assert tma_loads and k.thread_kernel.tensor_maps, "sm_90a pipelines load through TMA by default"
    check_gemm(k, rng, M, N, K)


def test_copy_disable_tma_on_the_interpreter(rng):
    M, N, K = 64, 64, 64
    check_gemm(build(gemm_kernel(M, N, K, 64, 64, 32, copy_kw={"disable_tma": True}), "interpret", None), rng, M, N, K)


# ============================================================================================
# coalesced_width bounds the elements per vector access (T.copy and T.Parallel)


def scaled_copy(M, N, width, via_parallel):
    @T.prim_func
    def kern(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((M, N), "float32")
            T.copy(A, A_s, coalesced_width=width)
            if via_parallel:
                for i, j in T.Parallel(M, N, coalesced_width=width):
                    B[i, j] = A_s[i, j] * 3.0
            else:
                T.copy(A_s, B, coalesced_width=width)

    return kern


def widest_vector(k) -> int:
    lanes = [s.lanes for s in thread_stmts(k, th.VecCopy)]
    lanes += [s.nbytes // 4 for s in thread_stmts(k, th.AsyncCopy)]
    return max(lanes, default=1)


@pytest.mark.parametrize("via_parallel", [False, True], ids=["copy", "parallel"])
@pytest.mark.parametrize("target,backend", BACKENDS, ids=BACKEND_IDS)
def test_coalesced_width_bounds_the_vector_width(rng, target, backend, via_parallel):
    M, N = 32, 64
    a = rand(rng, (M, N))
    want = f64(a) * (3.0 if via_parallel else 1.0)
    for width in (None, 2, 1):
        k = build(scaled_copy(M, N, width, via_parallel), target, backend)
        if backend is not None:
            got = widest_vector(k)
            if width is None:
                assert got == 4, "float32 copies are 16-byte vectors by default"
            else:
                assert got <= width, f"coalesced_width={width} but a {got}-element vector access was made"
        b = poisoned((M, N))
        k(a, b)
        close(b, want)


def test_coalesced_width_must_be_a_power_of_two():
    with pytest.raises(CompileError, match=r"coalesced_width.*power of two"):
        scaled_copy(32, 64, 3, False)


# ============================================================================================
# atomics: return_prev returns the previous value, memory_order is carried to the code


def atomics_kernel(N, threads=128, order=None):
    @T.prim_func
    def kern(X: T.Tensor((N,), "float32"), Cnt: T.Tensor((1,), "int32"), P: T.Tensor((N,), "float32"),
             Q: T.Tensor((N,), "int32")):
        with T.Kernel(1, threads=threads):
            for i in T.Parallel(N):
                P[i] = T.atomic_add(X[i], 1.5, memory_order=order, return_prev=True)
                Q[i] = T.atomic_add(Cnt[0], 1, memory_order=order, return_prev=True)

    return kern


@pytest.mark.parametrize("target,backend", BACKENDS, ids=BACKEND_IDS)
def test_atomic_return_prev_returns_the_previous_value(rng, target, backend):
    N = 512
    k = build(atomics_kernel(N), target, backend)
    x = rand(rng, (N,))
    x0 = x.copy()
    start = int(rng.integers(3, 50))
    cnt = np.array([start], np.int32)
    p, q = poisoned((N,)), np.full(N, -1, np.int32)
    k(x, cnt, p, q)
    close(p, f64(x0), 0, 0)  # each element's own old value
    close(x, f64(x0) + 1.5)
    assert cnt[0] == start + N
    # every iteration took a distinct ticket: the counter's previous values are start .. start+N-1
    assert sorted(q.tolist()) == list(range(start, start + N))


@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("target,backend", BACKENDS, ids=BACKEND_IDS)
def test_atomic_max_min_return_prev(rng, target, backend, op):
    N = 256
    fn = T.atomic_max if op == "max" else T.atomic_min

    @T.prim_func
    def kern(X: T.Tensor((N,), "float32"), V: T.Tensor((N,), "float32"), P: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=64):
            for i in T.Parallel(N):
                P[i] = fn(X[i], V[i], return_prev=True)

    k = build(kern, target, backend)
    x, v = rand(rng, (N,)), rand(rng, (N,))
    x0, p = x.copy(), poisoned((N,))
    k(x, v, p)
    close(p, f64(x0), 0, 0)
    close(x, np.maximum(f64(x0), f64(v)) if op == "max" else np.minimum(f64(x0), f64(v)), 0, 0)


@pytest.mark.parametrize("target,backend", BACKENDS, ids=BACKEND_IDS)
def test_atomic_return_prev_block_uniform_is_seen_by_every_thread(rng, target, backend):
    """A block-level atomic happens once (thread 0); its previous value reaches every thread."""
    blocks, N = 6, 128

    @T.prim_func
    def kern(Cnt: T.Tensor((1,), "int32"), Out: T.Tensor((blocks, N), "int32")):
        with T.Kernel(blocks, threads=128) as bx:
            ticket = T.atomic_add(Cnt[0], 10, return_prev=True)
            for i in T.Parallel(N):
                Out[bx, i] = ticket + i

    k = build(kern, target, backend)
    start = int(rng.integers(0, 100))
    cnt, out = np.array([start], np.int32), np.full((blocks, N), -1, np.int32)
    k(cnt, out)
    assert cnt[0] == start + 10 * blocks
    tickets = sorted(out[:, 0].tolist())
    assert tickets == [start + 10 * b for b in range(blocks)]
    np.testing.assert_array_equal(out - out[:, :1], np.broadcast_to(np.arange(N), (blocks, N)))


@pytest.mark.parametrize("target,backend", BACKENDS, ids=BACKEND_IDS)
def test_atomic_return_prev_under_a_thread_condition(rng, target, backend):
    N = 64

    @T.prim_func
    def kern(X: T.Tensor((N,), "float32"), P: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=128):
            tx = T.get_thread_binding()
            if tx < N:
                P[tx] = T.atomic_add(X[tx], 2.0, return_prev=True) * 2.0

    k = build(kern, target, backend)
    x = rand(rng, (N,))
    x0, p = x.copy(), poisoned((N,))
    k(x, p)
    close(p, 2 * f64(x0))
    close(x, f64(x0) + 2.0)


def test_atomic_return_prev_of_a_tile_is_refused():
    with pytest.raises(CompileError, match=r"return_prev=True\) needs an element destination"):
        @T.prim_func
        def kern(X: T.Tensor((64,), "float32"), Y: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64):
                T.atomic_add(X, Y, return_prev=True)


def test_atomic_return_prev_on_positions_fewer_than_threads(rng):
    """64 positions over 128 threads: each position is iterated by one thread (the rest idle), so
    every previous value reaches the thread that stores it (TileLang accepts this loop)."""
    @T.prim_func
    def kern(X: T.Tensor((64,), "float32"), P: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=128):
            for i in T.Parallel(64):
                P[i] = T.atomic_add(X[i], 1.0, return_prev=True)

    x, p = rand(rng, (64,)), poisoned((64,))
    x0 = x.copy()
    build(kern, CUDA, "emulator")(x, p)
    close(p, f64(x0), 0, 0)
    close(x, f64(x0) + 1.0, 1e-6, 1e-6)


@pytest.mark.parametrize("order", ["relaxed", "acquire", "release", "acq_rel", "seq_cst", "consume"])
def test_atomic_memory_order_reaches_the_code(rng, order):
    N = 512
    expect = "acquire" if order == "consume" else order
    cuda = build(atomics_kernel(N, order=order), CUDA, "emulator")
    atomics = thread_stmts(cuda, th.AtomicRMW)
    assert atomics and all(a.order == expect and a.scope == "gpu" for a in atomics)
    fences = cuda.source.count("__threadfence();")
    assert fences == (0 if expect == "relaxed" else len(atomics) * (2 if expect in ("acq_rel", "seq_cst") else 1))
    hip = build(atomics_kernel(N, order=order), GFX942, "emulator")
    hip_order = {"relaxed": "__ATOMIC_RELAXED", "acquire": "__ATOMIC_ACQUIRE", "release": "__ATOMIC_RELEASE",
                 "acq_rel": "__ATOMIC_ACQ_REL", "seq_cst": "__ATOMIC_SEQ_CST"}[expect]
    body = hip.source[hip.source.index("__global__"):]
    assert f"__hip_atomic_fetch_add(&Cnt[0], (int)(1), {hip_order}, __HIP_MEMORY_SCOPE_AGENT)" in body
    test = hip  # the ordered atomics still compute the right answer
    x, cnt, p, q = rand(rng, (N,)), np.array([0], np.int32), poisoned((N,)), np.full(N, -1, np.int32)
    x0 = x.copy()
    test(x, cnt, p, q)
    close(p, f64(x0), 0, 0)
    assert sorted(q.tolist()) == list(range(N))


def test_atomic_on_shared_memory_has_block_scope():
    @T.prim_func
    def kern(X: T.Tensor((64,), "float32"), Y: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=64):
            S = T.alloc_shared((1,), "float32")
            T.fill(S, 0)
            for i in T.Parallel(64):
                T.atomic_add(S[0], X[i], memory_order="release")
            T.copy(S, Y)

    k = build(kern, CUDA, "emulator")
    atomics = thread_stmts(k, th.AtomicRMW)
    assert atomics and all(a.scope == "cta" for a in atomics)
    assert "__threadfence_block();" in k.source
    x, y = rand(np.random.default_rng(1), (64,)), poisoned((1,))
    k(x, y)
    close(y, [f64(x).sum()], 1e-5, 1e-5)


def test_atomic_memory_order_must_be_known():
    with pytest.raises(CompileError, match=r"(?s)memory_order='strong'.*relaxed") as e:
        atomics_kernel(64, order="strong")
    assert "T.atomic_add" in str(e.value)


# ============================================================================================
# T.Tensor(strides=): the tensor is addressed with those strides and arguments must have them


def strided_kernel(M, N):
    S = T.dynamic("S")

    @T.prim_func
    def kern(A: T.Tensor((M, N), "float32", strides=(1, M)), B: T.Tensor((M, N), "float32", strides=(S, 1)),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((M, N), "float32")
            T.copy(A, A_s)
            for i, j in T.Parallel(M, N):
                C[i, j] = A_s[i, j] * 2.0 + B[i, j]

    return kern


@pytest.mark.parametrize("target,backend", BACKENDS, ids=BACKEND_IDS)
def test_tensor_strides_address_memory(rng, target, backend):
    M, N = 64, 48
    k = build(strided_kernel(M, N), target, backend)
    for pad in (3, 17):  # one compiled kernel, the symbolic stride read from each argument
        a = np.asfortranarray(rand(rng, (M, N)))  # column-major: strides (1, M)
        wide = rand(rng, (M, N + pad))
        b = wide[:, 1:1 + N]  # rows of N + pad elements
        c = poisoned((M, N))
        k(a, b, c)
        close(c, 2 * f64(a) + f64(b))


@pytest.mark.parametrize("target,backend", BACKENDS, ids=BACKEND_IDS)
def test_tensor_strides_are_checked(rng, target, backend):
    M, N = 64, 48
    k = build(strided_kernel(M, N), target, backend)
    a = np.asfortranarray(rand(rng, (M, N)))
    b, c = rand(rng, (M, N + 5))[:, :N], poisoned((M, N))
    with pytest.raises(ArgumentError, match=r"argument A has strides \(48, 1\).*expects \(1, 64\)"):
        k(np.ascontiguousarray(a), b, c)


def test_tensor_strides_in_the_source_and_cache_key():
    M, N = 64, 48
    plain_src = "def kern(A: T.Tensor((64, 48), 'float32'), "
    strided = strided_kernel(M, N)
    assert "strides=(1, 64)" in strided.script() and plain_src not in strided.script()
    k = tilewright.compile(strided, target=CUDA)
    assert "int S" in k.source  # the symbolic stride is a kernel parameter


def test_tensor_strides_must_fit_the_shape():
    with pytest.raises(CompileError, match=r"2 strides for 1 dimensions"):
        T.Tensor((64,), "float32", strides=(1, 64))
    with pytest.raises(CompileError, match=r"strides=.*positive"):
        T.Tensor((64, 2), "float32", strides=(0, 1))


# ============================================================================================
# performance hints without effect: a warning naming the argument, the same results


def test_pipelined_schedule_arguments_warn(rng):
    M, N, K = 64, 64, 96
    with pytest.warns(TilewrightWarning) as rec:
        func = gemm_kernel(M, N, K, 64, 64, 32, pipe_kw={"order": [0, 1, 2], "stage": [0, 0, 1],
                                                           "group": [[0], [1], [2]]})
    text = [str(w.message) for w in rec]
    for arg in ("order", "stage", "group"):
        hits = [m for m in text if f"T.Pipelined({arg}=...)" in m]
        assert len(hits) == 1, f"one warning for {arg}= per kernel, got {hits}"
        assert "has no effect" in hits[0] and f"remove {arg}=" in hits[0] and "num_stages" in hits[0]
    assert all(w.filename.endswith("test_ignored_args.py") for w in rec), "the warning points at the kernel"
    for target, backend in BACKENDS:
        check_gemm(build(func, target, backend), rng, M, N, K)


@pytest.mark.parametrize("kw,arg", [({"use_wgmma": True}, "use_wgmma=True"), ({"wg_wait": -1}, "wg_wait=..."),
                                    ({"k_pack": 2}, "k_pack=2")])
def test_gemm_hints_warn(rng, kw, arg):
    M, N, K = 64, 64, 64
    with pytest.warns(TilewrightWarning, match=rf"T\.gemm\({arg}\) has no effect.*remove"):
        func = gemm_kernel(M, N, K, 64, 64, 32, gemm_kw=kw)
    for target, backend in BACKENDS:
        check_gemm(build(func, target, backend), rng, M, N, K)


def test_gemm_defaults_do_not_warn():
    ctx = no_warnings()
    try:
        gemm_kernel(64, 64, 64, 64, 64, 32, gemm_kw={"use_wgmma": False, "wg_wait": 0, "k_pack": 1})
    finally:
        ctx.__exit__(None, None, None)


@pytest.mark.parametrize("k_pack", [3, 0, 1.5])
def test_gemm_k_pack_out_of_range_is_refused(k_pack):
    with pytest.raises(CompileError, match=rf"T\.gemm\(k_pack={k_pack}\) is not supported") as e:
        gemm_kernel(64, 64, 64, 64, 64, 32, gemm_kw={"k_pack": k_pack})
    assert "hint: leave k_pack at 1" in str(e.value)


def test_kernel_cluster_dims(rng):
    M, N, K = 64, 128, 64
    func = gemm_kernel(M, N, K, 64, 64, 32, kernel_kw={"cluster_dims": (2, 1, 1)})
    with pytest.warns(TilewrightWarning, match=r"T\.Kernel\(cluster_dims=\(2, 1, 1\)\) has no effect.*remove "
                                               r"cluster_dims"):
        k = build(func, "cuda -arch=sm_80", "emulator")  # no clusters before sm_90: independent blocks
    check_gemm(k, rng, M, N, K)
    check_gemm(build(func, CUDA, "emulator"), rng, M, N, K)  # sm_90a: a real cluster of 2
    ctx = no_warnings()
    try:
        gemm_kernel(M, N, K, 64, 64, 32, kernel_kw={"cluster_dims": 1})
        gemm_kernel(M, N, K, 64, 64, 32, kernel_kw={"cluster_dims": (1, 1, 1)})
    finally:
        ctx.__exit__(None, None, None)
    with pytest.raises(CompileError, match=r"cluster_dims"):
        gemm_kernel(M, N, K, 64, 64, 32, kernel_kw={"cluster_dims": (0, 1)})


def test_kernel_prelude_is_refused():
    with pytest.raises(CompileError, match=r"T\.Kernel\(prelude=\.\.\.\).*not supported"):
        gemm_kernel(64, 64, 64, 64, 64, 32, kernel_kw={"prelude": "#include <foo.h>"})


def test_copy_eviction_policy_warns():
    with pytest.warns(TilewrightWarning, match=r"T\.copy\(eviction_policy=\.\.\.\) has no effect"):
        gemm_kernel(64, 64, 64, 64, 64, 32, copy_kw={"eviction_policy": "evict_first"})
    with pytest.raises(CompileError, match=r"eviction_policy"):
        gemm_kernel(64, 64, 64, 64, 64, 32, copy_kw={"eviction_policy": "keep"})


# ============================================================================================
# pass_configs: unknown keys are refused with the close matches; TileLang keys without effect warn


def small_copy():
    return scaled_copy(32, 64, None, True)


def test_unknown_pass_config_key_is_refused():
    with pytest.raises(CompileError, match=r"unknown pass_configs key 'tw.disable_tmaa'") as e:
        tilewright.compile(small_copy(), target=CUDA, execution_backend="emulator",
                           pass_configs={"tw.disable_tmaa": True})
    msg = str(e.value)
    assert "did you mean 'tw.disable_tma'" in msg
    assert "tw.disable_gemm_prefetch" in msg and "tl.disable_warp_specialized" in msg  # the known keys


def test_tilelang_pass_config_without_effect_warns(rng):
    # (tl.enable_fast_math has an effect since session 12: tests/test_fast_math.py)
    with pytest.warns(TilewrightWarning, match=r"'tl.disable_safe_memory_legalize' has no effect in tilewright"):
        k = tilewright.compile(small_copy(), target=CUDA, execution_backend="emulator",
                               pass_configs={"tl.disable_safe_memory_legalize": True})
    a, b = rand(rng, (32, 64)), poisoned((32, 64))
    k(a, b)
    close(b, 3 * f64(a))


def test_honoured_pass_configs_do_not_warn():
    ctx = no_warnings()
    try:
        tilewright.compile(small_copy(), target=CUDA, execution_backend="emulator",
                           pass_configs={"tw.disable_tma": True, tilewright.PassConfigKey.TL_DISABLE_TMA_LOWER: True,
                                         "tw.disable_gemm_prefetch": True})
    finally:
        ctx.__exit__(None, None, None)


def test_jit_arguments_without_effect_warn():
    with pytest.warns(TilewrightWarning, match=r"argument debug_root_path= has no effect"):
        tilewright.jit(out_idx=[-1], debug_root_path="/tmp/x")


def test_alloc_scope_other_than_the_calls_own_is_refused(rng):
    with pytest.raises(CompileError, match=r"T\.alloc_shared\(scope='local'\) is not supported"):
        @T.prim_func
        def kern(X: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64):
                T.alloc_shared((64,), "float32", scope="local")

    @T.prim_func
    def fine(X: T.Tensor((64,), "float32"), Y: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64):
            S = T.alloc_shared((64,), "float32", scope="shared")
            T.copy(X, S)
            T.copy(S, Y)

    x, y = rand(rng, (64,)), poisoned((64,))
    build(fine, "interpret", None)(x, y)
    close(y, f64(x), 0, 0)


def test_compile_target_host_warns():
    with pytest.warns(TilewrightWarning, match=r"argument target_host= has no effect"):
        tilewright.compile(small_copy(), target=CUDA, execution_backend="emulator", target_host="llvm")


@pytest.mark.parametrize("target,backend", BACKENDS, ids=BACKEND_IDS)
def test_tile_atomic_memory_order(rng, target, backend):
    M, N = 64, 32

    @T.prim_func
    def kern(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(2, threads=128):
            X_f = T.alloc_fragment((M, N), "float32")
            T.copy(X, X_f)
            T.atomic_add(Y, X_f, memory_order="release")

    k = build(kern, target, backend)
    if backend is not None:
        atomics = thread_stmts(k, th.AtomicRMW)
        assert atomics and all(a.order == "release" for a in atomics)
    x, y = rand(rng, (M, N)), rand(rng, (M, N))
    y0 = y.copy()
    k(x, y)
    close(y, f64(y0) + 2 * f64(x))
