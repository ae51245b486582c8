"""TileLang's reducers (issue 12): ``T.alloc_reducer`` with ``T.reducer_init`` /
``T.reducer_update`` / ``T.finalize_reducer(acc, dst)``, and the legacy spelling (``T.clear``,
``acc[i] += v``, in-place ``T.finalize_reducer(acc)``), in the tile interpreter and on the emulator
of the lowered code for sm_90a and gfx942, against float64 NumPy references on fresh random inputs
with poisoned (NaN) outputs.  Each contribution of a ``T.Parallel`` iteration counts once, however
the loop is replicated over the threads.  ``test_reducer_gpu.py`` runs the same kernels on a GPU."""

from __future__ import annotations

import numpy as np
import pytest
from toolchains import needs_hip_compiler, needs_nvrtc
from zoo import poisoned, rand

import tilewright as tw
import tilewright.language as T
from tilewright.errors import CompileError

TARGETS = ["interpret", "cuda -arch=sm_90a", "hip -arch=gfx942"]


@pytest.fixture
def rng():
    return np.random.default_rng()  # fresh inputs on every run


def run(func, target, *args):
    backend = None if target == "interpret" else "emulator"
    tw.compile(func, target=target, execution_backend=backend)(*args)


# --------------------------------------------------------------------------------------------
# kernels (shared with test_reducer_gpu.py)


def row_reduce(M, K, threads, op, dtype="float32", seed=None):
    @T.prim_func
    def kernel(A: T.Tensor((M, K), dtype), B: T.Tensor((M,), dtype)):
        with T.Kernel(1, threads=threads):
            a = T.alloc_fragment((M, K), dtype)
            T.copy(A, a)
            acc = T.alloc_reducer((M,), dtype, op=op)
            if seed is None:
                T.reducer_init(acc)
            else:
                T.reducer_init(acc, seed)
            for i, k in T.Parallel(M, K):
                T.reducer_update(acc[i], a[i, k])
            res = T.alloc_fragment((M,), dtype)
            T.finalize_reducer(acc, res)
            T.copy(res, B)

    return kernel


def replicated_scalar_sum(extent, threads):
    """T.Parallel(8) over 128 threads: each iteration is held by 16 threads."""
    @T.prim_func
    def kernel(A: T.Tensor((extent,), "float32"), B: T.Tensor((2,), "float32")):
        with T.Kernel(1, threads=threads):
            a = T.alloc_fragment((extent,), "float32")
            b = T.alloc_fragment((2 * extent,), "float32")
            T.copy(A, a)
            for i in T.Parallel(2 * extent):
                b[i] = A[i % extent] * 2.0
            acc = T.alloc_reducer((1,), "float32", op="sum")
            T.reducer_init(acc)
            for i in T.Parallel(extent):
                T.reducer_update(acc[0], a[i])
            for j in T.Parallel(2 * extent):
                T.reducer_update(acc[0], b[j])
            res = T.alloc_fragment((1,), "float32")
            T.finalize_reducer(acc, res)
            total = T.alloc_reducer((1,), "float32", replication="all")
            T.clear(total)
            for i in T.Parallel(extent):
                total[0] += a[i]
            T.finalize_reducer(total)
            if T.get_thread_binding() == 0:
                B[0] = res[0]
                B[1] = total[0]

    return kernel


def deferred_tiles(M, K, BK, threads, pipelined):
    @T.prim_func
    def kernel(A: T.Tensor((M, K), "float32"), B: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=threads):
            acc = T.alloc_reducer((M,), "float32", op="sum")
            T.reducer_init(acc)
            s = T.alloc_shared((M, BK), "float32")
            if pipelined:
                for kt in T.Pipelined(K // BK, num_stages=2):
                    T.copy(A[0, kt * BK], s)
                    for i, k in T.Parallel(M, BK):
                        T.reducer_update(acc[i], s[i, k] * s[i, k])
            else:
                for kt in T.serial(K // BK):
                    T.copy(A[0, kt * BK], s)
                    for i, k in T.Parallel(M, BK):
                        T.reducer_update(acc[i], s[i, k] * s[i, k])
            res = T.alloc_fragment((M,), "float32")
            T.finalize_reducer(acc, res)
            T.copy(res, B)

    return kernel


def outer_product(K, threads):
    """acc[i, j] with serial i, j and T.Parallel(K): the update index is fixed in each loop (the
    operands in shared memory: a fragment is not indexed by a serial loop's variable here)."""
    @T.prim_func
    def kernel(A: T.Tensor((4, K), "float32"), A2: T.Tensor((4, K), "float32"), B: T.Tensor((4, 4), "float32")):
        with T.Kernel(1, threads=threads):
            a = T.alloc_shared((4, K), "float32")
            a2 = T.alloc_shared((4, K), "float32")
            T.copy(A, a)
            T.copy(A2, a2)
            acc = T.alloc_reducer((4, 4), "float32", op="sum")
            T.reducer_init(acc)
            for i in T.serial(4):
                for j in T.serial(4):
                    for k in T.Parallel(K):
                        T.reducer_update(acc[i, j], a[i, k] * a2[j, k])
            res = T.alloc_fragment((4, 4), "float32")
            T.finalize_reducer(acc, res)
            T.copy(res, B)

    return kernel


def transposed(M, N, threads):
    @T.prim_func
    def kernel(A: T.Tensor((M, N), "float32"), B: T.Tensor((N, M), "float32")):
        with T.Kernel(1, threads=threads):
            a = T.alloc_fragment((M, N), "float32")
            T.copy(A, a)
            acc = T.alloc_reducer((N, M), "float32", op="max")
            T.reducer_init(acc, 0.25)
            for i, j in T.Parallel(M, N):
                T.reducer_update(acc[j, i], a[i, j])
            res = T.alloc_fragment((N, M), "float32")
            T.finalize_reducer(acc, res)
            T.copy(res, B)

    return kernel


def logsumexp(K, BK, threads):
    """A whole epoch per serial tile, seeded from the running maximum (online softmax)."""
    @T.prim_func
    def kernel(A: T.Tensor((K,), "float32"), B: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=threads):
            a = T.alloc_fragment((BK,), "float32")
            run_max = T.alloc_fragment((1,), "float32")
            run_sum = T.alloc_fragment((1,), "float32")
            run_max[0] = -T.infinity("float32")
            run_sum[0] = 0.0
            for kt in T.serial(K // BK):
                T.copy(A[kt * BK], a)
                mx = T.alloc_reducer((1,), "float32", op="max")
                T.reducer_init(mx, run_max[0])
                for i in T.Parallel(BK):
                    T.reducer_update(mx[0], a[i])
                m = T.alloc_fragment((1,), "float32")
                T.finalize_reducer(mx, m)
                sm = T.alloc_reducer((1,), "float32", op="sum", replication="all")
                T.clear(sm)
                for i in T.Parallel(BK):
                    sm[0] += T.exp(a[i] - m[0])
                T.finalize_reducer(sm)
                run_sum[0] = T.exp(run_max[0] - m[0]) * run_sum[0] + sm[0]
                run_max[0] = m[0]
            if T.get_thread_binding() == 0:
                B[0] = T.log(run_sum[0]) + run_max[0]

    return kernel


def legacy_rowdot(BLOCK, K, threads, op):
    """The legacy spelling: T.fill / T.clear opens the epoch, the reducer is read after its finalize."""
    @T.prim_func
    def kernel(G: T.Tensor((BLOCK, K), "float32"), Y: T.Tensor((BLOCK, K), "float32"),
               O: T.Tensor((BLOCK, K), "float32")):
        with T.Kernel(1, threads=threads):
            g = T.alloc_fragment((BLOCK, K), "float32")
            y = T.alloc_fragment((BLOCK, K), "float32")
            o = T.alloc_fragment((BLOCK, K), "float32")
            if op == "sum":  # the default allocation used with the legacy spelling only: legacy too
                r = T.alloc_reducer((BLOCK,), "float32")
            else:
                r = T.alloc_reducer((BLOCK,), "float32", op=op, replication="all")
            T.copy(G, g)
            T.copy(Y, y)
            if op == "sum":
                T.clear(r)
            else:
                T.fill(r, 0.5)
            for i, j in T.Parallel(BLOCK, K):
                if op == "sum":
                    r[i] += g[i, j] * y[i, j]
                else:
                    r[i] = T.max(r[i], g[i, j] * y[i, j])
            T.finalize_reducer(r)
            for i, j in T.Parallel(BLOCK, K):
                o[i, j] = g[i, j] - r[i]
            T.copy(o, O)

    return kernel


def int_reduce(M, K, threads, op, dtype="int32"):
    @T.prim_func
    def kernel(A: T.Tensor((M, K), dtype), B: T.Tensor((M,), dtype)):
        with T.Kernel(1, threads=threads):
            a = T.alloc_fragment((M, K), dtype)
            T.copy(A, a)
            acc = T.alloc_reducer((M,), dtype, op=op)
            T.reducer_init(acc)
            for i, k in T.Parallel(M, K):
                T.reducer_update(acc[i], a[i, k])
            res = T.alloc_fragment((M,), dtype)
            T.finalize_reducer(acc, res)
            T.copy(res, B)

    return kernel


def guarded_finalize(extent, threads):
    """The finalize inside a block-uniform branch of the init's scope."""
    @T.prim_func
    def kernel(A: T.Tensor((extent,), "float32"), S: T.Tensor((2,), "int32"), B: T.Tensor((2,), "float32")):
        with T.Kernel(2, threads=threads) as bx:
            a = T.alloc_fragment((extent,), "float32")
            T.copy(A, a)
            acc = T.alloc_reducer((1,), "float32", op="sum")
            T.reducer_init(acc)
            if S[bx] < 0:
                if T.get_thread_binding() == 0:
                    B[bx] = 0.0
            else:
                for i in T.Parallel(extent):
                    T.reducer_update(acc[0], a[i])
                res = T.alloc_fragment((1,), "float32")
                T.finalize_reducer(acc, res)
                if T.get_thread_binding() == 0:
                    B[bx] = res[0]

    return kernel


# --------------------------------------------------------------------------------------------
# references and cases: (kernel, make_args(rng), check(args))


def _f64(x):
    return np.asarray(x, dtype=np.float64)


def _close(got, want, tol=1e-4):
    np.testing.assert_allclose(_f64(got), want, rtol=tol, atol=tol)


def case_row(op, threads, seed=None, M=16, K=64):
    def make(rng):
        return [rand(rng, (M, K)), poisoned((M,))]

    def check(a):
        x = _f64(a[0])
        want = {"sum": x.sum(1), "max": x.max(1), "min": x.min(1)}[op]
        if seed is not None:
            want = want + seed if op == "sum" else (np.maximum if op == "max" else np.minimum)(want, seed)
        _close(a[1], want)

    return row_reduce(M, K, threads, op, seed=seed), make, check


def case_replicated():
    def make(rng):
        return [rng.integers(-50, 50, 8).astype(np.float32), poisoned((2,))]

    def check(a):
        x = _f64(a[0])
        np.testing.assert_array_equal(_f64(a[1]), [5 * x.sum(), x.sum()])  # integers: exact

    return replicated_scalar_sum(8, 128), make, check


def case_deferred(pipelined):
    def make(rng):
        return [rand(rng, (32, 256)), poisoned((32,))]

    def check(a):
        _close(a[1], (_f64(a[0]) ** 2).sum(1))

    return deferred_tiles(32, 256, 64, 128, pipelined), make, check


def case_outer():
    def make(rng):
        return [rand(rng, (4, 256)), rand(rng, (4, 256)), poisoned((4, 4))]

    def check(a):
        _close(a[2], _f64(a[0]) @ _f64(a[1]).T)

    return outer_product(256, 128), make, check


def case_transposed():
    def make(rng):
        return [rand(rng, (8, 16)), poisoned((16, 8))]

    def check(a):
        _close(a[1], np.maximum(_f64(a[0]).T, 0.25))

    return transposed(8, 16, 128), make, check


def case_logsumexp():
    def make(rng):
        return [rand(rng, (512,), lo=-3, hi=3), poisoned((1,))]

    def check(a):
        x = _f64(a[0])
        _close(a[1], [np.log(np.exp(x - x.max()).sum()) + x.max()])

    return logsumexp(512, 128, 128), make, check


def case_legacy(op):
    def make(rng):
        return [rand(rng, (64, 8)), rand(rng, (64, 8)), poisoned((64, 8))]

    def check(a):
        p = _f64(a[0]) * _f64(a[1])
        r = p.sum(1) if op == "sum" else np.maximum(p.max(1), 0.5)
        _close(a[2], _f64(a[0]) - r[:, None])

    return legacy_rowdot(64, 8, 128, op), make, check


def case_int(op, dtype="int32"):
    npdt = np.dtype(dtype)
    info = np.iinfo(npdt)

    def make(rng):
        lo, hi = (-1000, 1000) if op == "sum" and dtype == "int32" else (0 if op.startswith("bit") else info.min,
                                                                         info.max)
        return [rng.integers(lo, hi, (16, 64)).astype(npdt), np.full((16,), 7, npdt)]

    def check(a):
        x = a[0].astype(np.int64)
        fn = {"sum": np.sum, "bitand": np.bitwise_and.reduce, "bitor": np.bitwise_or.reduce,
              "bitxor": np.bitwise_xor.reduce, "max": np.max, "min": np.min}[op]
        np.testing.assert_array_equal(a[1], fn(x, axis=1).astype(npdt))  # a sum wraps as the dtype does

    return int_reduce(16, 64, 128, op, dtype), make, check


def case_guarded():
    def make(rng):
        return [rand(rng, (8,)), np.array([-1, 1], np.int32), poisoned((2,))]

    def check(a):
        _close(a[2], [0.0, _f64(a[0]).sum()])

    return guarded_finalize(8, 128), make, check


CASES = {
    "row_sum_seed": lambda: case_row("sum", 128, seed=2.5),
    "row_max": lambda: case_row("max", 128),
    "row_min_seed": lambda: case_row("min", 64, seed=-0.5),
    "row_sum_192_threads": lambda: case_row("sum", 192, M=12, K=40),
    "row_max_48_threads": lambda: case_row("max", 48, M=6, K=40),  # not whole warps: a shared exchange
    "replicated_iterations_count_once": case_replicated,
    "deferred_serial": lambda: case_deferred(False),
    "deferred_pipelined": lambda: case_deferred(True),
    "outer_product": case_outer,
    "transposed_max_seed": case_transposed,
    "logsumexp_epochs_in_loop": case_logsumexp,
    "legacy_sum": lambda: case_legacy("sum"),
    "legacy_max_fill_seed": lambda: case_legacy("max"),
    "int_sum": lambda: case_int("sum"),
    "int_bitand": lambda: case_int("bitand"),
    "int_bitor": lambda: case_int("bitor"),
    "int_bitxor": lambda: case_int("bitxor"),
    "int8_sum_wraps": lambda: case_int("sum", "int8"),
    "int8_max": lambda: case_int("max", "int8"),
    "int16_min": lambda: case_int("min", "int16"),
    "finalize_in_uniform_branch": case_guarded,
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_reducer(name, target, rng):
    if name == "row_max_48_threads" and target.startswith("hip"):
        pytest.skip("AMD blocks are whole waves of 64")
    kernel, make, check = CASES[name]()
    args = make(rng)
    run(kernel, target, *args)
    check(args)


def test_max_reducer_drops_nan_contributions(rng):
    """As TileLang's reducers (fmaxf) do on a GPU: a NaN contribution does not win."""
    for target in TARGETS:
        a = rand(rng, (16, 64))
        a[3, 5] = np.nan
        b = poisoned((16,))
        run(row_reduce(16, 64, 128, "max"), target, a, b)
        _close(b, np.nanmax(_f64(a), axis=1))


# --------------------------------------------------------------------------------------------
# what is refused


def _scalar_epoch(body: str):
    """A kernel whose reducer epoch is written by ``body`` (lines of Python, indented 12)."""
    src = (
        "@T.prim_func\n"
        "def kernel(A: T.Tensor((8,), 'float32'), B: T.Tensor((1,), 'float32')):\n"
        "    with T.Kernel(1, threads=128):\n"
        "        src = T.alloc_fragment((8,), 'float32')\n"
        "        T.copy(A, src)\n"
        "        res = T.alloc_fragment((1,), 'float32')\n"
        f"{body}"
        "        if T.get_thread_binding() == 0:\n"
        "            B[0] = res[0]\n")
    return src


REFUSED = {
    "update before init": ("        acc = T.alloc_reducer((1,), 'float32')\n"
                           "        for i in T.Parallel(8):\n"
                           "            T.reducer_update(acc[0], src[i])\n"
                           "        T.finalize_reducer(acc, res)\n", "before T.reducer_init"),
    "double init": ("        acc = T.alloc_reducer((1,), 'float32')\n"
                    "        T.reducer_init(acc)\n"
                    "        T.reducer_init(acc)\n"
                    "        for i in T.Parallel(8):\n"
                    "            T.reducer_update(acc[0], src[i])\n"
                    "        T.finalize_reducer(acc, res)\n", "double T.reducer_init"),
    "never finalized": ("        acc = T.alloc_reducer((1,), 'float32')\n"
                        "        T.reducer_init(acc)\n"
                        "        for i in T.Parallel(8):\n"
                        "            T.reducer_update(acc[0], src[i])\n", "never finalized"),
    "read of partials": ("        acc = T.alloc_reducer((1,), 'float32')\n"
                         "        T.reducer_init(acc)\n"
                         "        for i in T.Parallel(8):\n"
                         "            T.reducer_update(acc[0], src[i])\n"
                         "        res[0] = acc[0]\n"
                         "        T.finalize_reducer(acc, res)\n", "illegal read of reducer"),
    "plain store": ("        acc = T.alloc_reducer((1,), 'float32')\n"
                    "        T.reducer_init(acc)\n"
                    "        for i in T.Parallel(8):\n"
                    "            acc[0] += src[i]\n"
                    "        T.finalize_reducer(acc, res)\n", "illegal store to reducer"),
    "finalize in a loop of its own": ("        acc = T.alloc_reducer((1,), 'float32')\n"
                                      "        T.reducer_init(acc)\n"
                                      "        for _ in T.serial(2):\n"
                                      "            for i in T.Parallel(8):\n"
                                      "                T.reducer_update(acc[0], src[i])\n"
                                      "            T.finalize_reducer(acc, res)\n", "not in the scope"),
    "legacy sum filled with 1": ("        acc = T.alloc_reducer((1,), 'float32', replication='all')\n"
                                 "        T.fill(acc, 1.0)\n"
                                 "        for i in T.Parallel(8):\n"
                                 "            acc[0] += src[i]\n"
                                 "        T.finalize_reducer(acc)\n"
                                 "        T.copy(acc, res)\n", "only the identity"),
    "legacy read before finalize": ("        acc = T.alloc_reducer((1,), 'float32', replication='all')\n"
                                    "        T.clear(acc)\n"
                                    "        for i in T.Parallel(8):\n"
                                    "            acc[0] += src[i]\n"
                                    "        res[0] = acc[0]\n"
                                    "        T.finalize_reducer(acc)\n", "before T.finalize_reducer"),
    "init value of another dtype": ("        acc = T.alloc_reducer((1,), 'float32')\n"
                                    "        T.reducer_init(acc, T.float16(1.0))\n"
                                    "        for i in T.Parallel(8):\n"
                                    "            T.reducer_update(acc[0], src[i])\n"
                                    "        T.finalize_reducer(acc, res)\n", "does not match reducer"),
    "bitwise float reducer": ("        acc = T.alloc_reducer((1,), 'float32', op='bitand')\n", "integer dtype"),
    "batch that does not divide": ("        acc = T.alloc_reducer((6,), 'float32', replication='all')\n"
                                   "        T.clear(acc)\n"
                                   "        T.finalize_reducer(acc, batch=4)\n", "must evenly divide"),
}


@pytest.mark.parametrize("what", sorted(REFUSED))
def test_refused(what, tmp_path):
    body, needle = REFUSED[what]
    path = tmp_path / "kernel_src.py"
    path.write_text("import tilewright.language as T\n" + _scalar_epoch(body))
    with pytest.raises(CompileError, match=needle) as ei:
        exec(compile(path.read_text(), str(path), "exec"), {})  # noqa: S102 - the kernel source under test
    assert "kernel_src.py" in str(ei.value)  # names the kernel line


# --------------------------------------------------------------------------------------------
# the generated code compiles (NVRTC for sm_90a, clang for gfx942)

TOOLCHAIN_CASES = ["row_sum_seed", "row_max_48_threads", "legacy_max_fill_seed", "int_bitxor", "int8_max",
                   "logsumexp_epochs_in_loop"]


@needs_nvrtc
@pytest.mark.parametrize("name", TOOLCHAIN_CASES)
def test_reducer_code_compiles_with_nvrtc(name, tmp_path, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path))
    kernel = CASES[name]()[0]
    assert tw.compile(kernel, target="cuda -arch=sm_90a").get_code_object()[:4] == b"\x7fELF"


@needs_hip_compiler
@pytest.mark.parametrize("name", [n for n in TOOLCHAIN_CASES if n != "row_max_48_threads"])
def test_reducer_code_compiles_for_gfx942(name, tmp_path, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path))
    kernel = CASES[name]()[0]
    assert tw.compile(kernel, target="hip -arch=gfx942").get_code_object()[:4] == b"\x7fELF"
