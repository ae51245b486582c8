"""The kernels of test_s6_wrong_results.py on an NVIDIA GPU (issue 12: TileLang's tests on the H200
found these wrong or hanging), with the same float64 / exact references and poisoned outputs, plus
TileLang's test_rand_1d kernel for the three generators against the emulator's bits.  Skipped
without a CUDA GPU."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or getattr(torch.version, "hip", None):
    pytest.skip("needs an NVIDIA GPU with a CUDA build of PyTorch", allow_module_level=True)

import test_s6_wrong_results as cpu  # noqa: E402
from zoo import poisoned, rand  # noqa: E402

import tilewright as tw  # noqa: E402
import tilewright.language as T  # noqa: E402


@pytest.fixture
def rng():
    return np.random.default_rng()


def to_torch(a):
    if a.dtype == cpu.NP["bfloat16"]:
        return torch.from_numpy(a.view(np.uint16).astype(np.int16)).view(torch.bfloat16).cuda()
    return torch.from_numpy(a).cuda()


def from_torch(t, like):
    if like.dtype == cpu.NP["bfloat16"]:
        return t.cpu().view(torch.int16).numpy().astype(np.uint16).view(like.dtype)
    return t.cpu().numpy()


def run_on_gpu(func, args, **kw):
    """Arguments go over as tensors; results come back into the same arrays."""
    dev = [to_torch(a) for a in args]
    tw.compile(func, target="cuda", **kw)(*dev)
    torch.cuda.synchronize()
    for a, d in zip(args, dev):
        a[...] = from_torch(d, a)


@pytest.mark.parametrize("warps", [1, 4])
@pytest.mark.parametrize(("op", "dtype", "clear"), cpu.NAN_CASES)
def test_nan_wins_a_warp_reduction_on_gpu(op, dtype, clear, warps, rng):
    for where in list(rng.choice(64, 3, replace=False)) + [None]:
        a = rand(rng, (64,), dtype, -50, 50)
        if where is not None:
            a[int(where)] = np.nan
        old = np.asarray([rng.uniform(-60, 60)], cpu.NP[dtype])
        b = poisoned((1,), dtype)
        run_on_gpu(cpu.warp_nan_reduce(op, 64, dtype, clear, 32 * warps), [a, old, b])
        want = cpu.nan_reference(op, a, float(old[0]), clear)
        assert np.isnan(float(b[0])) == np.isnan(want), (where, float(b[0]), want)
        if not np.isnan(want):
            assert float(b[0]) == want


@pytest.mark.parametrize(("n", "threads"), [(8, 128), (16, 64), (6, 128)])
def test_every_thread_holds_the_whole_table_on_gpu(n, threads, rng):
    mask = rng.integers(-1000, 1000, size=n).astype(np.int32)
    out = np.full((threads, n), -(2**31), np.int32)
    run_on_gpu(cpu.table_broadcast(n, threads), [mask, out])
    np.testing.assert_array_equal(out, np.broadcast_to(mask, (threads, n)))


@pytest.mark.parametrize("warp_specialized", [True, False])
def test_blocksparse_copy_through_a_table_on_gpu(warp_specialized, rng):
    M, N, bm, bn = 1024, 1024, 128, 128  # TileLang's sizes
    configs = {} if warp_specialized else {"tl.disable_warp_specialized": True}
    a = rand(rng, (M, N), "float16")
    mask = rng.integers(0, (M - bm) // bm + 1, size=(M // bm, N // bn)).astype(np.int32) * bm
    mask[2, 5] = -1
    b = poisoned((M, N), "float16")
    run_on_gpu(cpu.blocksparse_copy(M, N, bm, bn), [a, b, mask], pass_configs=configs)
    np.testing.assert_array_equal(np.asarray(b, np.float64), cpu.blocksparse_reference(a, mask, bm, bn))


def test_allreduce_product_in_tvm_order_on_gpu():
    bf16 = cpu.NP["bfloat16"]
    a = np.array([3, 8, 5, 2, 7, 6, 4, 6], bf16)
    c = poisoned((8,), "bfloat16")
    run_on_gpu(cpu.thread_allreduce(8, "bfloat16", lambda x, y: x * y, 1), [a, c])
    assert (np.asarray(c, np.float64) == 241664.0).all()


@pytest.mark.parametrize("threads", [64, 96, 128])
def test_allreduce_sum_over_the_block_on_gpu(threads, rng):
    a = rand(rng, (threads,), "float32")
    c = poisoned((threads,))
    run_on_gpu(cpu.thread_allreduce(threads, "float32", lambda x, y: x + y, 0), [a, c])
    assert (c == cpu.tree_reference(a, lambda x, y: x + y, np.float32)).all()


def tilelang_rand_1d(M, seed, generator):
    """TileLang's test_rand_1d kernel (one thread per block, 128 draws of each kind per thread)."""
    per = 128

    @T.prim_func
    def main(A: T.Tensor((M,), "uint32"), B: T.Tensor((M,), "float32"), C: T.Tensor((M,), "float64"),
             D: T.Tensor((M,), "float32"), E: T.Tensor((M,), "float64")):
        with T.Kernel(T.ceildiv(M, per), threads=1) as bx:
            tx = T.get_thread_binding()
            T.rng_init(seed, 0, bx * per + tx * per, generator=generator)
            for _i, j in T.Parallel(1, per):
                A[bx * per + j] = T.rng_rand()
            for _i, j in T.Parallel(1, per):
                B[bx * per + j] = T.rng_rand_float()
            for _i, j in T.Parallel(1, per):
                C[bx * per + j] = T.rng_rand_float(bit=64)
            for _i, j in T.Parallel(1, per):
                D[bx * per + j] = T.rng_rand_float(dist="normal")
            for _i, j in T.Parallel(1, per):
                E[bx * per + j] = T.rng_rand_float(bit=64, dist="normal")

    return main


@pytest.mark.parametrize(("M", "seed", "generator"), [(1024, 42, "curandStateMRG32k3a_t"),
                                                      (512, 123, "curandStatePhilox4_32_10_t"),
                                                      (128, 0, "curandStateXORWOW_t")])
def test_tilelang_rand_1d_on_gpu(M, seed, generator):
    """Compiled and run on the GPU (it timed out compiling on the H200), bit for bit with the emulator
    for the integers and uniform floats, to rounding for the normal ones (the GPU's logf/sinf/cosf are
    not the emulator's)."""
    def buffers():
        return [np.zeros(M, np.uint32), poisoned((M,)), poisoned((M,), "float64"), poisoned((M,)),
                poisoned((M,), "float64")]

    got, want = buffers(), buffers()
    run_on_gpu(tilelang_rand_1d(M, seed, generator), got)
    tw.compile(tilelang_rand_1d(M, seed, generator), target="cuda -arch=sm_90a", execution_backend="emulator")(*want)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])  # uniform draws: exact products
    np.testing.assert_array_equal(got[2], want[2])
    np.testing.assert_allclose(got[3], want[3], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[4], want[4], rtol=1e-12, atol=1e-12)
