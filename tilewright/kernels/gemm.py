"""Tiled GEMM: C = op(A) @ op(B) (+ optional ReLU), fp32 accumulation, pipelined copies."""

from __future__ import annotations

from .. import language as T


def matmul(M, N, K, block_M=128, block_N=128, block_K=32, dtype="float16", out_dtype=None, accum_dtype="float32",
           trans_A=False, trans_B=False, num_stages=3, threads=128, relu=False, swizzle_panel=8):
    """``C[M, N] = op(A) @ op(B)``; A is (K, M) when ``trans_A``, B is (N, K) when ``trans_B``.
    M may be a ``T.dynamic`` size."""
    out_dtype = out_dtype or dtype
    a_shape = (K, M) if trans_A else (M, K)
    b_shape = (N, K) if trans_B else (K, N)
    a_tile = (block_K, block_M) if trans_A else (block_M, block_K)
    b_tile = (block_N, block_K) if trans_B else (block_K, block_N)

    @T.prim_func
    def gemm(A: T.Tensor(a_shape, dtype), B: T.Tensor(b_shape, dtype), C: T.Tensor((M, N), out_dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_shared = T.alloc_shared(a_tile, dtype)
            B_shared = T.alloc_shared(b_tile, dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            if swizzle_panel:
                T.use_swizzle(panel_size=swizzle_panel)
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                if trans_A:
                    T.copy(A[k * block_K, by * block_M], A_shared)
                else:
                    T.copy(A[by * block_M, k * block_K], A_shared)
                if trans_B:
                    T.copy(B[bx * block_N, k * block_K], B_shared)
                else:
                    T.copy(B[k * block_K, bx * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local, transpose_A=trans_A, transpose_B=trans_B)
            if relu:
                for i, j in T.Parallel(block_M, block_N):
                    C_local[i, j] = T.max(C_local[i, j], 0)
            T.copy(C_local, C[by * block_M, bx * block_N])

    return gemm
