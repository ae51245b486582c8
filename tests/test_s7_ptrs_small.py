"""Small TileLang forms that were refused (issue 12 item 3): ``1 << i`` on a kernel variable (deepseek_v32
topk_selector), ``T.dynamic("a, b")`` naming several sizes (deepseek_v32 sparse_mla_fwd_pipelined), and
``T.copy`` of a smaller source tile into a larger destination region (test_tilelang_copy_shape_mismatched)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from zoo import close, f64, poisoned

import tilewright as tw
import tilewright.language as T
from tilewright.errors import CompileError, TilewrightWarning

BACKENDS = [("interpret", None), ("cuda -arch=sm_90a", "emulator"), ("hip -arch=gfx942", "emulator")]


def shifts(n, threads):
    @T.prim_func
    def main(x: T.Tensor((n,), "int32"), out: T.Tensor((n,), "int32")):
        with T.Kernel(1, threads=threads):
            for i in T.serial(n):
                out[i] = (1 << i) + (x[i] >> i) + (3 << (i % 4)) - (1024 >> (i % 8))

    return main


@pytest.mark.parametrize("target,backend", BACKENDS)
def test_int_shifted_by_a_kernel_variable(target, backend):
    n = 12
    x = np.random.default_rng(4).integers(0, 1 << 20, size=n).astype(np.int32)
    out = np.full(n, -1, np.int32)
    threads = 64 if target.startswith("hip") else 32
    tw.compile(shifts(n, threads), target=target, execution_backend=backend)(x, out)
    i = np.arange(n)
    np.testing.assert_array_equal(out, (1 << i) + (x >> i) + (3 << (i % 4)) - (1024 >> (i % 8)))


def test_dynamic_with_several_names_gives_a_tuple():
    batch, seq_len = T.dynamic("batch, seq_len")
    assert (batch.name, seq_len.name) == ("batch", "seq_len") and T.dynamic("m").name == "m"

    @tw.jit(target="interpret")
    def scale(Q, heads, dim):
        b, s = T.dynamic("b s")
        q_shape = [b, s, heads, dim]
        Q: T.Tensor(q_shape, T.float32)  # noqa: F821 - the eager style declares the tensor here
        Out = T.empty([b, s, heads, dim], T.float32)
        with T.Kernel(s, b, threads=32) as (bx, by):
            for h, d in T.Parallel(heads, dim):
                Out[by, bx, h, d] = Q[by, bx, h, d] * 2
        return Out

    torch = pytest.importorskip("torch")
    for shape in ((2, 3, 4, 8), (1, 5, 4, 8)):
        q = torch.randn(*shape)
        close(scale(q, 4, 8).numpy(), 2 * f64(q.numpy()))


def copy_smaller_source(M, N, threads):
    @T.prim_func
    def main(A: T.Tensor((M, N), "float16"), B: T.Tensor((M, N), "float16")):
        with T.Kernel(1, threads=threads):
            T.copy(A[:, :2], B[:, :3])

    return main


@pytest.mark.parametrize("target,backend", BACKENDS)
def test_copy_of_a_smaller_source_fills_the_start_of_the_destination(target, backend):
    M, N = 128, 8
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TilewrightWarning)  # checked below (a kernel is read once per source)
        func = copy_smaller_source(M, N, 64 if target.startswith("hip") else 128)
    a = np.random.default_rng(9).standard_normal((M, N)).astype(np.float16)
    b = poisoned((M, N), "float16")
    tw.compile(func, target=target, execution_backend=backend)(a, b)
    close(b[:, :2], f64(a[:, :2]), 0, 0)
    assert np.isnan(b[:, 2:].astype(np.float32)).all()  # the rest of the region is left alone


def test_copy_of_a_smaller_source_warns():
    with pytest.warns(TilewrightWarning, match=r"smaller than the destination region of B \(40, 3\)"):
        copy_smaller_source(40, 5, 32)


def test_copy_of_a_larger_source_is_still_refused():
    with pytest.raises(CompileError, match=r"the source tile A has shape \(128,\) but the destination B_shared has "
                                           r"shape \(64,\)"):
        @T.prim_func
        def main(A: T.Tensor((128,), "float32"), B: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=128):
                B_shared = T.alloc_shared((64,), "float32")
                T.copy(A[0:128], B_shared[0:64])
                T.copy(B_shared, B)

        tw.compile(main, target="interpret")


def scalar_before_tma_tensor(M, N, K):
    """A scalar parameter before the tensor a TMA descriptor describes (block_causal_attention_varlen's
    ``max_seqlen: T.int32`` before ``Output``): the descriptor names the right parameter."""

    @T.prim_func
    def main(scale: T.float32, A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(N // 64, M // 64, threads=128) as (bx, by):
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((32, 64), "float16")
            acc = T.alloc_fragment((64, 64), "float32")
            T.clear(acc)
            for k in T.Pipelined(K // 32, num_stages=2):
                T.copy(A[by * 64, k * 32], A_s)
                T.copy(B[k * 32, bx * 64], B_s)
                T.gemm(A_s, B_s, acc)
            for i, j in T.Parallel(64, 64):
                acc[i, j] = acc[i, j] * scale
            T.copy(acc, C[by * 64, bx * 64])

    return main


def test_tensor_map_of_a_parameter_after_a_scalar():
    M, N, K = 128, 128, 64
    func = scalar_before_tma_tensor(M, N, K)
    kern = tw.compile(func, target="cuda -arch=sm_90a", execution_backend="emulator")
    assert kern.spec.tensor_maps and {m.param_index for m in kern.spec.tensor_maps} <= {1, 2}
    rng = np.random.default_rng(12)
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = poisoned((M, N))
    kern(0.5, a, b, c)
    close(c, 0.5 * f64(a) @ f64(b), 1e-3, 1e-3)
