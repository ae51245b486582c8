"""The kernels behind ``tilewright.ops``, in tilewright's own language.

Row counts are symbolic (``T.dynamic``): one compiled kernel serves every batch size, which is
what a model needs (the number of tokens changes from call to call); column counts and the
reduction length are static, so rows live in registers and loops are fully known.
"""

from __future__ import annotations

from .. import language as T
from ..kernels.gemm import (  # noqa: F401
    ACTIVATIONS,
    activate,
    alloc_staging,
    check_pdl,
    cluster_grid,
    cluster_kernel_args,
    epilogue_chunks,
    matmul_persistent,
    matmul_splitk,
    matmul_streamk,
    splitk_reduce,
    store_staged,
    streamk_fixup,
)


def linear(N, K, dtype, out_dtype, trans_a, trans_b, has_bias, activation, block_M, block_N, block_K, stages,
           threads, staged_epilogue=False, cluster=(1, 1), pdl=""):
    """``C[m, N] = act(op(A) @ op(B) + bias)``; A is (K, m) when ``trans_a``, B is (N, K) when ``trans_b``.
    ``staged_epilogue``: C leaves through a shared tile (a TMA store on sm_90: ``passes/plan_tma_stores``),
    or an int: in column chunks of that width through a smaller one (``kernels.gemm.epilogue_chunks``).
    ``cluster`` (2, 1) / (1, 2): clusters of two blocks whose shared A / B tile is multicast
    (``kernels.gemm.cluster_kernel_args``); the grid is rounded up to whole clusters.  ``pdl``: programmatic
    dependent launch (``kernels.gemm.PDL_MODES``): the block waits for the previous kernel (``T.pdl_sync``)
    before it touches global memory; "late" also lets the next kernel start once the mainloop is done, "early"
    right after the wait."""
    check_pdl(pdl)
    M = T.dynamic("m")
    width, chunks = epilogue_chunks(block_N, staged_epilogue) if staged_epilogue else (block_N, (0,))
    cluster_dims, order = cluster_kernel_args(cluster)
    gx, gy = cluster_grid(N, M, block_M, block_N, cluster)
    a_shape = (K, M) if trans_a else (M, K)
    b_shape = (N, K) if trans_b else (K, N)
    a_tile = (block_K, block_M) if trans_a else (block_M, block_K)
    b_tile = (block_N, block_K) if trans_b else (block_K, block_N)
    bias_len = N if has_bias else 1

    @T.prim_func
    def linear_kernel(A: T.Tensor(a_shape, dtype), B: T.Tensor(b_shape, dtype), Bias: T.Tensor((bias_len,), dtype),
                      C: T.Tensor((M, N), out_dtype)):
        with T.Kernel(gx, gy, threads=threads, cluster_dims=cluster_dims) as (bx, by):
            if pdl:
                T.pdl_sync()  # (first: A, B and Bias may be what the previous kernel writes, C what it reads)
                if pdl == "early":
                    T.pdl_trigger()
            A_s = T.alloc_shared(a_tile, dtype)
            B_s = T.alloc_shared(b_tile, dtype)
            acc = T.alloc_fragment((block_M, block_N), "float32")
            if staged_epilogue:
                C_s = alloc_staging(block_M, width, out_dtype, staged_epilogue)
            T.use_swizzle(panel_size=8, order=order)
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=stages):
                if trans_a:
                    T.copy(A[k * block_K, by * block_M], A_s)
                else:
                    T.copy(A[by * block_M, k * block_K], A_s)
                if trans_b:
                    T.copy(B[bx * block_N, k * block_K], B_s)
                else:
                    T.copy(B[k * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, acc, transpose_A=trans_a, transpose_B=trans_b)
            if pdl == "late":
                T.pdl_trigger()  # (every operand tile of this block read: the next kernel may place its blocks)
            if has_bias or activation != "none":
                for i, j in T.Parallel(block_M, block_N):
                    v = acc[i, j]
                    if has_bias:
                        v = v + T.cast(Bias[T.min(bx * block_N + j, N - 1)], "float32")
                    acc[i, j] = activate(v, activation)
            if staged_epilogue:
                store_staged(acc, C_s, C, by * block_M, bx * block_N, chunks)
            else:
                T.copy(acc, C[by * block_M, bx * block_N])

    return linear_kernel


def linear_splitk(N, K, dtype, trans_a, trans_b, block_M, block_N, block_K, stages, threads, splits, atomic):
    """First pass of a split-K ``op(A) @ op(B)`` (``kernels.gemm.matmul_splitk``) over a symbolic
    number of rows: fp32 partial products of ``splits`` slices of K into a workspace."""
    return matmul_splitk(T.dynamic("m"), N, K, block_M, block_N, block_K, splits, dtype, trans_a, trans_b, stages,
                         threads, atomic)


def splitk_epilogue(N, slices, out_dtype, bias_dtype, activation):
    """Second pass: ``C = act(sum of the workspace slices + bias)`` in ``out_dtype``."""
    return splitk_reduce(T.dynamic("m"), N, slices, out_dtype, bias_dtype, activation, block_M=16, block_N=256,
                         threads=128)


def linear_persistent(N, K, dtype, out_dtype, trans_a, trans_b, has_bias, activation, block_M, block_N, block_K,
                      stages, threads, num_blocks, group_M, staged_epilogue=False, cluster=1, pdl=""):
    """``C = act(op(A) @ op(B) + bias)`` by ``num_blocks`` persistent blocks looping over the tiles
    (``staged_epilogue``: tile i's C stored by TMA while tile i + 1's mainloop runs, on sm_90;
    ``cluster=2``: clusters of two blocks taking pairs of N tiles, A multicast; ``pdl``: programmatic dependent
    launch: ``matmul_persistent``)."""
    return matmul_persistent(T.dynamic("m"), N, K, block_M, block_N, block_K, dtype, out_dtype, trans_a, trans_b,
                             stages, threads, num_blocks, group_M, dtype if has_bias else None, activation,
                             staged_epilogue, cluster, pdl)


def linear_streamk(N, K, dtype, out_dtype, trans_a, trans_b, has_bias, activation, block_M, block_N, block_K,
                   stages, threads, num_blocks, splits):
    """Data-parallel + stream-K ``C = act(op(A) @ op(B) + bias)`` (``kernels.gemm.matmul_streamk``):
    whole tiles for the full waves, K slices of the left-over tiles into the workspace."""
    return matmul_streamk(T.dynamic("m"), N, K, block_M, block_N, block_K, splits, dtype, out_dtype, trans_a,
                          trans_b, stages, threads, num_blocks, 0, dtype if has_bias else None, activation)


def streamk_epilogue(N, block_M, block_N, splits, num_blocks, out_dtype, bias_dtype, activation):
    """Second kernel of ``linear_streamk``: the left-over tiles' slices added in order, bias, activation."""
    return streamk_fixup(T.dynamic("m"), N, block_M, block_N, splits, num_blocks, 0, out_dtype, bias_dtype,
                         activation)


def softmax(N, dtype, block_M, threads):
    """The library's row softmax (kernels/norms.py) over a symbolic number of rows."""
    from ..kernels import softmax as softmax_rows

    return softmax_rows(T.dynamic("m"), N, block_M, dtype, threads)


def rms_norm(N, dtype, eps, block_M, threads, has_residual):
    """``Y = X / sqrt(mean(X^2) + eps) * W``; with a residual, ``X`` is ``X + R`` and the sum is
    also written to ``Rout`` (the fused residual-add + RMSNorm of transformer blocks)."""
    M = T.dynamic("m")

    @T.prim_func
    def rms_norm_kernel(X: T.Tensor((M, N), dtype), R: T.Tensor((M, N), dtype), W: T.Tensor((N,), dtype),
                        Y: T.Tensor((M, N), dtype), Rout: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:
            x = T.alloc_fragment((block_M, N), "float32")
            sq = T.alloc_fragment((block_M, N), "float32")
            ss = T.alloc_fragment((block_M,), "float32")
            T.copy(X[bx * block_M, 0], x)
            if has_residual:
                r = T.alloc_fragment((block_M, N), "float32")
                T.copy(R[bx * block_M, 0], r)
                for i, j in T.Parallel(block_M, N):
                    x[i, j] = x[i, j] + r[i, j]
                T.copy(x, Rout[bx * block_M, 0])
            for i, j in T.Parallel(block_M, N):
                sq[i, j] = x[i, j] * x[i, j]
            T.reduce_sum(sq, ss, dim=1)
            for i, j in T.Parallel(block_M, N):
                x[i, j] = x[i, j] * T.rsqrt(ss[i] / N + eps) * T.cast(W[j], "float32")
            T.copy(x, Y[bx * block_M, 0])

    return rms_norm_kernel


def layer_norm(N, dtype, eps, block_M, threads):
    """``Y = (X - mean) / sqrt(var + eps) * W + B`` over the last dimension."""
    M = T.dynamic("m")

    @T.prim_func
    def layer_norm_kernel(X: T.Tensor((M, N), dtype), W: T.Tensor((N,), dtype), Bv: T.Tensor((N,), dtype),
                          Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:
            x = T.alloc_fragment((block_M, N), "float32")
            d = T.alloc_fragment((block_M, N), "float32")
            mean = T.alloc_fragment((block_M,), "float32")
            var = T.alloc_fragment((block_M,), "float32")
            T.copy(X[bx * block_M, 0], x)
            T.reduce_sum(x, mean, dim=1)
            for i, j in T.Parallel(block_M, N):
                d[i, j] = (x[i, j] - mean[i] / N) * (x[i, j] - mean[i] / N)
            T.reduce_sum(d, var, dim=1)
            for i, j in T.Parallel(block_M, N):
                x[i, j] = (x[i, j] - mean[i] / N) * T.rsqrt(var[i] / N + eps) * T.cast(W[j], "float32") + \
                    T.cast(Bv[j], "float32")
            T.copy(x, Y[bx * block_M, 0])

    return layer_norm_kernel
