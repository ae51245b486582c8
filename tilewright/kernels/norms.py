"""Row-wise softmax and RMSNorm, one row block per thread block, one pass over the data."""

from __future__ import annotations

from .. import language as T


def softmax(M, N, block_M=1, dtype="float32", threads=128):
    """``B[i, :] = softmax(A[i, :])`` for an (M, N) input; N is held in registers."""

    @T.prim_func
    def softmax_kernel(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:
            x = T.alloc_fragment((block_M, N), "float32")
            row_max = T.alloc_fragment((block_M,), "float32")
            row_sum = T.alloc_fragment((block_M,), "float32")
            T.copy(A[bx * block_M, 0], x)
            T.reduce_max(x, row_max, dim=1)
            # exp(x - max) as exp2((x - max) * log2 e), and one reciprocal per row instead of a
            # division per element: with 16-bit inputs the per-element arithmetic, not memory,
            # limited the kernel (84% of copy bandwidth on the H200 with expf and division)
            for i, j in T.Parallel(block_M, N):
                x[i, j] = T.exp2((x[i, j] - row_max[i]) * 1.4426950408889634)
            T.reduce_sum(x, row_sum, dim=1)
            for i in T.Parallel(block_M):
                row_sum[i] = 1.0 / row_sum[i]
            for i, j in T.Parallel(block_M, N):
                x[i, j] = x[i, j] * row_sum[i]
            T.copy(x, B[bx * block_M, 0])

    return softmax_kernel


def rms_norm(M, N, block_M=1, dtype="float16", eps=1e-6, threads=128):
    """``B[i, :] = A[i, :] / sqrt(mean(A[i, :]^2) + eps)``."""

    @T.prim_func
    def rms_norm_kernel(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:
            x = T.alloc_fragment((block_M, N), "float32")
            sq = T.alloc_fragment((block_M, N), "float32")
            ss = T.alloc_fragment((block_M,), "float32")
            T.copy(A[bx * block_M, 0], x)
            for i, j in T.Parallel(block_M, N):
                sq[i, j] = x[i, j] * x[i, j]
            T.reduce_sum(sq, ss, dim=1)
            for i, j in T.Parallel(block_M, N):
                x[i, j] = x[i, j] * T.rsqrt(ss[i] / N + eps)
            T.copy(x, B[bx * block_M, 0])

    return rms_norm_kernel
