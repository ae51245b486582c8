"""The Tile IR interpreter against float64 NumPy references.

Kernels are written as TileLang users write them: builder functions whose arguments become closure
constants of a ``@T.prim_func``.  The workloads (copies, GEMMs, softmax, norms, attention, ...) and
their references come from ``zoo.py``, shared with the emulator and HIP tests; the kernels that probe
one interpreter behaviour are here.  Outputs are poisoned with NaN before each run, so an element the
kernel forgets to write fails the comparison.
"""


import numpy as np
import pytest
import zoo
from zoo import GEMM_TOL, close, f64, poisoned, rand

import tilewright.language as T
from tilewright.errors import ArgumentError, CompileError, TilewrightError
from tilewright.interp.tile import InterpError, OutOfBoundsError, run_tile_ir
from tilewright.kernels import softmax


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


# --------------------------------------------------------------------------------------------
# elementwise and copies


def test_elementwise_add_ragged(rng):
    f = zoo.elementwise(1000, 128)
    a, b = rand(rng, 1000), rand(rng, 1000)
    c = poisoned(1000)
    run_tile_ir(f, [a, b, c])
    close(c, f64(a) + f64(b), rtol=1e-6)


@pytest.mark.parametrize("via", ["shared", "fragment"])
def test_tiled_copy_ragged(rng, via):
    f = zoo.tiled_copy(1000, 500, 128, 64, via=via)
    a = rand(rng, (1000, 500))
    b = poisoned((1000, 500))
    run_tile_ir(f, [a, b])
    np.testing.assert_array_equal(b, a)


def test_transpose_via_shared(rng):
    f = zoo.transpose(300, 200, 64, 32)
    a = rand(rng, (300, 200), "float16")
    b = poisoned((200, 300), "float16")
    run_tile_ir(f, [a, b])
    np.testing.assert_array_equal(b, a.T)


def test_dtype_converting_copy(rng):
    f = zoo.convert_copy(130, 70, 64, 32)
    x = rand(rng, (130, 70), lo=-70000.0, hi=70000.0)
    with np.errstate(over="ignore"):
        want = x.astype(np.float16)
    y, z = poisoned((130, 70), "float16"), poisoned((130, 70), "float16")
    run_tile_ir(f, [x, y, z])
    np.testing.assert_array_equal(y, want)  # includes overflow to +-inf
    np.testing.assert_array_equal(z, want)


# --------------------------------------------------------------------------------------------
# GEMM


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("trans_a,trans_b", [(False, False), (False, True), (True, False), (True, True)])
def test_gemm_ragged(rng, dtype, trans_a, trans_b):
    M, N, K = 100, 72, 40
    f = zoo.matmul(M, N, K, 64, 64, 32, dtype, trans_a=trans_a, trans_b=trans_b)
    a = rand(rng, (K, M) if trans_a else (M, K), dtype)
    b = rand(rng, (N, K) if trans_b else (K, N), dtype)
    bias = rand(rng, N)
    c = poisoned((M, N), dtype)
    run_tile_ir(f, [a, b, bias, c])
    rtol, atol = GEMM_TOL[dtype]
    close(c, zoo.gemm_ref(a, b, trans_a, trans_b), rtol=rtol, atol=atol)


def test_gemm_bias_relu_epilogue(rng):
    M, N, K = 100, 72, 40
    f = zoo.matmul(M, N, K, 64, 64, 32, "float16", epilogue="bias_relu")
    a, b, bias = rand(rng, (M, K), "float16"), rand(rng, (K, N), "float16"), rand(rng, N)
    c = poisoned((M, N), "float16")
    run_tile_ir(f, [a, b, bias, c])
    close(c, zoo.gemm_ref(a, b, bias=bias, epilogue="bias_relu"), rtol=1e-2, atol=2e-2)
    assert (f64(c) == 0).any() and (f64(c) > 0).any()


def test_pipelined_gemm_512(rng):
    M = N = K = 512
    f = zoo.matmul(M, N, K, 128, 128, 32, "float16", stages=3)
    a, b, bias = rand(rng, (M, K), "float16"), rand(rng, (K, N), "float16"), rand(rng, N)
    c = poisoned((M, N), "float16")
    run_tile_ir(f, [a, b, bias, c])
    close(c, f64(a) @ f64(b), rtol=1e-2, atol=5e-2)


def test_int8_gemm_exact(rng):
    M, N, K = 70, 50, 96
    f = zoo.int8_gemm(M, N, K, 64, 32, 32)
    a = rng.integers(-128, 128, (M, K)).astype(np.int8)
    b = rng.integers(-128, 128, (N, K)).astype(np.int8)
    c = np.full((M, N), -7, np.int32)
    run_tile_ir(f, [a, b, c])
    np.testing.assert_array_equal(c, a.astype(np.int64) @ b.astype(np.int64).T)


def test_split_k_gemm_tile_atomic_add(rng):
    M, N, K = 90, 80, 128
    f = zoo.splitk_gemm(M, N, K, 64, 64, 32, 2)
    a, b = rand(rng, (M, K), "float16"), rand(rng, (K, N), "float16")
    c = np.zeros((M, N), np.float32)
    run_tile_ir(f, [a, b, c])
    close(c, f64(a) @ f64(b), rtol=1e-4, atol=1e-4)


# --------------------------------------------------------------------------------------------
# reductions and normalisations


def test_row_softmax_64x1024(rng):
    f = softmax(64, 1024, 4)
    x = rand(rng, (64, 1024), lo=-5, hi=5)
    y = poisoned((64, 1024))
    run_tile_ir(f, [x, y])
    close(y, zoo.softmax_ref(x), rtol=1e-5, atol=1e-7)


def test_online_softmax_running_max(rng):
    f = zoo.online_softmax(50, 300, 16, 64)
    x = rand(rng, (50, 300), "float16", lo=-8, hi=8)
    y = poisoned((50, 300), "float16")
    run_tile_ir(f, [x, y])
    close(y, zoo.softmax_ref(x), rtol=1e-2, atol=1e-4)


def test_flash_attention_online_softmax(rng):
    S, D = 200, 64
    f = zoo.flash_attention(S, D, 64, 64)
    q, k, v = (rand(rng, (S, D), "float16") for _ in range(3))
    o = poisoned((S, D), "float16")
    run_tile_ir(f, [q, k, v, o])
    close(o, zoo.attention_ref(q, k, v), rtol=2e-2, atol=5e-3)


def test_rmsnorm(rng):
    M, N = 37, 256
    f = zoo.rmsnorm(M, N, 8)
    x, w = rand(rng, (M, N), "float16"), rand(rng, N, "float16")
    y = poisoned((M, N), "float16")
    run_tile_ir(f, [x, w, y])
    close(y, zoo.rmsnorm_ref(x, w), rtol=1e-2, atol=1e-2)


def test_layernorm(rng):
    M, N = 45, 192
    f = zoo.layernorm(M, N, 16)
    x, g, b = rand(rng, (M, N), lo=-3, hi=5), rand(rng, N), rand(rng, N)
    y = poisoned((M, N))
    run_tile_ir(f, [x, g, b, y])
    close(y, zoo.layernorm_ref(x, g, b), rtol=1e-4, atol=1e-4)


def test_column_reduction_dim0(rng):
    M, N = 333, 100
    f = zoo.column_sum(M, N, 64, 32)
    x = rand(rng, (M, N))
    s = poisoned(N)
    run_tile_ir(f, [x, s])
    close(s, f64(x).sum(axis=0), rtol=1e-5, atol=1e-4)


def test_reduce_ops_and_clear_false(rng):
    M, N = 8, 16
    f = zoo.row_reductions(M, N, (("min", 1), ("absmax", 1), ("abssum", -1), ("max", 1, 100.0)))  # the last folds 100 in
    x = rand(rng, (M, N), lo=-3, hi=3)
    r, tot = poisoned((4, M)), poisoned(1)
    run_tile_ir(f, [x, r, tot])
    x64 = f64(x)
    close(r[0], x64.min(axis=1))
    close(r[1], np.abs(x64).max(axis=1))
    close(r[2], np.abs(x64).sum(axis=1))
    close(r[3], np.full(M, 100.0))
    close(tot, [x64[0].sum()])


# --------------------------------------------------------------------------------------------
# scalars, dynamic shapes, variables, atomics, control flow, threads


def scaled_add(N, block):
    @T.prim_func
    def axpy(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32"), alpha: T.float32, shift: T.int32):
        with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
            for i in T.Parallel(block):
                g = bx * block + i
                if g < N:
                    B[g] = alpha * A[g] + T.cast(shift, "float32")

    return axpy


def test_scalar_parameters(rng):
    f = scaled_add(300, 128)
    a = rand(rng, 300)
    b = poisoned(300)
    run_tile_ir(f, [a, b, 2.5, -3])
    close(b, 2.5 * f64(a) - 3, rtol=1e-6)


def test_dynamic_m_two_sizes(rng):
    f = zoo.dynamic_rows(48, 16)
    assert [v.name for v in f.dyn_vars] == ["m"]
    for m in (100, 37):
        x = rand(rng, (m, 48))
        y = poisoned((m, 48))
        run_tile_ir(f, [x, y])
        close(y, f64(x) * 2 + m, rtol=1e-6)
    # explicit binding, by name or by Var, must agree with the shapes
    x, y = rand(rng, (20, 48)), poisoned((20, 48))
    run_tile_ir(f, [x, y], dyn={"m": 20})
    run_tile_ir(f, [x, y], dyn={f.dyn_vars[0]: 20})
    with pytest.raises(ArgumentError):
        run_tile_ir(f, [x, poisoned((21, 48))])
    with pytest.raises(ArgumentError):
        run_tile_ir(f, [x, y], dyn={"m": 19})
    with pytest.raises(ArgumentError):
        run_tile_ir(f, [x.astype(np.float64), y])


def var_accumulation(N, block):
    @T.prim_func
    def dot(A: T.Tensor((N,), "float32"), Out: T.Tensor((T.ceildiv(N, block),), "float32"),
            Cnt: T.Tensor((T.ceildiv(N, block),), "int32")):
        with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
            a = T.alloc_shared((block,), "float32")
            acc = T.alloc_var("float32", 0.0)
            cnt = T.alloc_var("int32", 0)
            T.copy(A[bx * block], a)
            for k in T.serial(block):
                acc = acc + a[k] * a[k]
                if a[k] > 0:
                    cnt = cnt + 1
            Out[bx] = acc
            Cnt[bx] = cnt

    return dot


def test_alloc_var_accumulations(rng):
    N, block = 500, 64
    f = var_accumulation(N, block)
    a = rand(rng, N)
    out = poisoned(8)
    cnt = np.full(8, -1, np.int32)
    run_tile_ir(f, [a, out, cnt])
    pad = np.zeros(8 * block)
    pad[:N] = f64(a)
    close(out, (pad.reshape(8, block) ** 2).sum(axis=1), rtol=1e-5)
    np.testing.assert_array_equal(cnt, (pad.reshape(8, block) > 0).sum(axis=1))


def test_atomic_add_scalar_in_parallel(rng):
    N = 1000
    f = zoo.atomic_sum(N, 128, with_max=True)
    a = rand(rng, N)
    tot = np.array([0.0, -np.inf], np.float32)
    hist = np.zeros(4, np.int32)
    run_tile_ir(f, [a, tot, hist])
    close(tot, [f64(a).sum(), f64(a).max()], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(hist, [250, 250, 250, 250])


def branches(N, block, clamp, negate):
    @T.prim_func
    def kern(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32"), Flag: T.Tensor((1,), "int32")):
        with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
            x = T.alloc_fragment((block,), "float32")
            T.copy(A[bx * block], x)
            for i in T.Parallel(block):
                if clamp:  # a closure constant: decided while the kernel is read
                    x[i] = T.if_then_else(x[i] > 0.5, 0.5, x[i])
                if x[i] < 0:  # a kernel value: masks lanes
                    if negate:
                        x[i] = -x[i]
                    else:
                        x[i] = 0.0
                else:
                    x[i] = x[i] * 10.0
            if bx == 0:  # a block-uniform kernel value
                Flag[0] = 7
            T.copy(x, B[bx * block])

    return kern


@pytest.mark.parametrize("clamp,negate", [(True, False), (False, True)])
def test_python_if_on_constant_and_kernel_value(rng, clamp, negate):
    N = 300
    f = branches(N, 128, clamp, negate)
    a = rand(rng, N)
    b = poisoned(N)
    flag = np.zeros(1, np.int32)
    run_tile_ir(f, [a, b, flag])
    x = f64(a)
    if clamp:
        x = np.where(x > 0.5, 0.5, x)
    x = np.where(x < 0, -x if negate else 0.0, x * 10)
    close(b, x, rtol=1e-6)
    assert flag[0] == 7


def guarded_gather(N):
    @T.prim_func
    def shift(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=128):
            for i in T.Parallel(N):
                # the guard keeps lane 0 from reading A[-1]: masked lanes never read memory
                B[i] = T.if_then_else(i > 0 and A[i - 1] > 0, A[i - 1], T.float32(-1))

    return shift


def test_if_then_else_masks_out_of_bounds_lanes(rng):
    f = guarded_gather(50)
    a = rand(rng, 50)
    b = poisoned(50)
    run_tile_ir(f, [a, b])
    want = np.full(50, -1.0)
    prev = f64(a)[:-1]
    want[1:] = np.where(prev > 0, prev, -1.0)
    close(b, want)


def thread_kernel(N, nthreads, per):
    chunk = nthreads * per

    @T.prim_func
    def kern(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32"),
             P: T.Tensor((T.ceildiv(N, chunk),), "float32")):
        with T.Kernel(T.ceildiv(N, chunk), threads=nthreads) as bx:
            tx = T.get_thread_binding()
            vals = T.alloc_local((per,), "float32")
            partial = T.alloc_shared((nthreads,), "float32")
            mine = T.alloc_var("float32", 0.0)
            total = T.alloc_var("float32", 0.0)
            for k in T.serial(per):
                idx = bx * chunk + k * nthreads + tx
                vals[k] = T.if_then_else(idx < N, A[idx], 0.0)
            for k in T.serial(per):
                mine = mine + vals[k]
                idx = bx * chunk + k * nthreads + tx
                if idx < N:
                    B[idx] = vals[k] * 2.0
            partial[tx] = mine
            if tx == 0:
                for k in T.serial(nthreads):
                    total = total + partial[k]
                P[bx] = total

    return kern


def test_thread_binding(rng):
    N, nthreads, per = 1000, 64, 4
    f = thread_kernel(N, nthreads, per)
    a = rand(rng, N)
    b, p = poisoned(N), poisoned(4)
    run_tile_ir(f, [a, b, p])
    close(b, 2 * f64(a), rtol=1e-6)
    pad = np.zeros(4 * nthreads * per)
    pad[:N] = f64(a)
    close(p, pad.reshape(4, -1).sum(axis=1), rtol=1e-5, atol=1e-5)


def thread_atomics(nthreads):
    @T.prim_func
    def kern(Out: T.Tensor((3,), "float32")):
        with T.Kernel(2, threads=nthreads):
            tx = T.get_thread_binding()
            if tx < 3:
                T.atomic_add(Out[0], 1.0)  # under a per-thread guard: once per active thread
            T.atomic_add(Out[1], 1.0)  # uniform: once per block
            T.atomic_add(Out[2], T.cast(tx, "float32"))  # per-thread value: every thread

    return kern


def test_thread_mode_atomics():
    out = np.zeros(3, np.float32)
    run_tile_ir(thread_atomics(32), [out])
    np.testing.assert_array_equal(out, [6.0, 2.0, 2 * sum(range(32))])


# --------------------------------------------------------------------------------------------
# what the interpreter refuses, and uninitialised memory


def test_uninitialised_fragment_is_visible(rng):
    @T.prim_func
    def forgot_clear(A: T.Tensor((16, 16), "float16"), C: T.Tensor((16, 16), "float32")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((16, 16), "float16")
            C_f = T.alloc_fragment((16, 16), "float32")
            T.copy(A, A_s)
            T.gemm(A_s, A_s, C_f)
            T.copy(C_f, C)

    c = np.zeros((16, 16), np.float32)
    run_tile_ir(forgot_clear, [rand(rng, (16, 16), "float16"), c])
    assert np.isnan(c).all()


def oob_reader(N):
    @T.prim_func
    def kern(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, 64), threads=128) as bx:
            for i in T.Parallel(64):
                B[bx * 64 + i] = A[bx * 64 + i]  # no guard: the last block reads past N

    return kern


def test_out_of_bounds_read_is_an_error(rng):
    with pytest.raises(OutOfBoundsError, match=r"A \(global\) is read out of bounds: index 100\.\.127") as info:
        run_tile_ir(oob_reader(100), [rand(rng, 100), poisoned(100)])
    assert isinstance(info.value, IndexError) and isinstance(info.value, TilewrightError)
    assert "B[bx * 64 + i] = A[bx * 64 + i]" in str(info.value)


def test_thread_index_inside_parallel_is_an_error():
    @T.prim_func
    def kern(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            tx = T.get_thread_binding()
            for i in T.Parallel(128):
                A[i] = T.cast(tx, "float32")

    with pytest.raises(InterpError, match="thread index"):
        run_tile_ir(kern, [poisoned(128)])


def test_racy_store_is_an_error(rng):
    # refused when the kernel is read (tests/test_regress_frontend.py has the variants)
    with pytest.raises(CompileError, match="stores a different value to the same element of B"):
        @T.prim_func
        def kern(A: T.Tensor((64,), "float32"), B: T.Tensor((1,), "float32")):
            with T.Kernel(1, threads=128):
                for i in T.Parallel(64):
                    B[0] = A[i]


def test_argument_checks(rng):
    f = zoo.elementwise(100, 64)
    with pytest.raises(ArgumentError):
        run_tile_ir(f, [rand(rng, 100), rand(rng, 100)])
    with pytest.raises(ArgumentError):
        run_tile_ir(f, [rand(rng, 100), rand(rng, 100), poisoned(99)])
    with pytest.raises(ArgumentError):
        run_tile_ir(f, [rand(rng, 100), rand(rng, 100), [0.0] * 100])
