"""A plain Triton GEMM for bench/gemm.py to compare against: ``C = A @ B`` (fp16/bf16, fp32
accumulation), grouped tile order for L2 reuse, a five-configuration autotune per (M, N, K).
``matmul`` is None when triton is not installed (the benchmark then leaves the column out)."""

from __future__ import annotations

try:
    import triton
    import triton.language as tl
except ImportError:  # the benchmark runs without it
    triton = None


def _configs():
    def cfg(bm, bn, bk, group, stages, warps):
        return triton.Config({"BM": bm, "BN": bn, "BK": bk, "GROUP": group}, num_stages=stages, num_warps=warps)

    return [cfg(128, 256, 64, 8, 3, 8), cfg(128, 128, 64, 8, 4, 4), cfg(256, 128, 64, 8, 3, 8),
            cfg(64, 128, 64, 8, 4, 4), cfg(16, 64, 256, 1, 4, 4)]  # the last for decode (M = 16)


if triton is not None:

    @triton.autotune(configs=_configs(), key=["M", "N", "K"])
    @triton.jit
    def _matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                       BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):
        pid = tl.program_id(0)
        tiles_m = tl.cdiv(M, BM)
        tiles_n = tl.cdiv(N, BN)
        per_group = GROUP * tiles_n
        first_m = (pid // per_group) * GROUP
        rows = min(tiles_m - first_m, GROUP)
        tile_m = first_m + (pid % per_group) % rows
        tile_n = (pid % per_group) // rows
        # rows/columns past the edge wrap around (read valid memory, never stored)
        offs_m = (tile_m * BM + tl.arange(0, BM)) % M
        offs_n = (tile_n * BN + tl.arange(0, BN)) % N
        offs_k = tl.arange(0, BK)
        a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
        b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            k_left = K - k
            a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
            acc = tl.dot(a, b, acc)
            a_ptrs += BK * stride_ak
            b_ptrs += BK * stride_bk
        out_m = tile_m * BM + tl.arange(0, BM)
        out_n = tile_n * BN + tl.arange(0, BN)
        c_ptrs = c_ptr + out_m[:, None] * stride_cm + out_n[None, :] * stride_cn
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(out_m[:, None] < M) & (out_n[None, :] < N))

    def matmul(a, b, c):
        """``c = a @ b`` in place (``c`` (M, N) of a's dtype)."""
        M, K = a.shape
        N = b.shape[1]

        def grid(meta):
            return (triton.cdiv(M, meta["BM"]) * triton.cdiv(N, meta["BN"]),)

        _matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                             c.stride(1))
        return c

    def best_config() -> str:
        """The configuration the autotuner chose in the last call."""
        cfg = getattr(_matmul_kernel, "best_config", None)
        if cfg is None:
            return "?"
        kw = cfg.kwargs
        return f"{kw['BM']}x{kw['BN']}x{kw['BK']} s{cfg.num_stages} w{cfg.num_warps}"
else:
    matmul = None

    def best_config() -> str:
        return "-"
