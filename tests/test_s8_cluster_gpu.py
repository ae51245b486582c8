"""Thread-block clusters on an NVIDIA sm_90 GPU: the cluster features (rank, cluster barrier, remote
mbarrier arrivals), the TMA-multicast GEMM (kernels.gemm.matmul with clusters of two along x and y,
ragged shapes, fp16 and bf16) and every cluster candidate of ``ops.matmul`` against float64 torch
references with NaN-poisoned outputs, and a launch on a grid of partial clusters refused.  Skipped
without an sm_90+ GPU."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or getattr(torch.version, "hip", None) or torch.cuda.get_device_capability()[0] < 9:
    pytest.skip("needs an NVIDIA sm_90+ GPU with a CUDA build of PyTorch", allow_module_level=True)

import test_s8_cluster_basics as basics  # noqa: E402

import tilewright  # noqa: E402
import tilewright.language as T  # noqa: E402
from tilewright.errors import ArgumentError  # noqa: E402
from tilewright.kernels.gemm import matmul  # noqa: E402
from tilewright.ops import dispatch, gemm_configs  # noqa: E402

TORCH = {"float16": torch.float16, "bfloat16": torch.bfloat16}


@pytest.mark.parametrize("grid, cluster", [((4, 1), (2, 1)), ((2, 4), (1, 2)), ((4, 2), (2, 2))])
def test_cluster_rank_barrier_and_remote_arrive(grid, cluster):
    k = tilewright.compile(basics.ring_kernel(grid, cluster), target="cuda")
    a = torch.randn(grid[1], grid[0], 128, device="cuda")
    b = torch.full_like(a, float("nan"))
    k(a, b)
    torch.testing.assert_close(b.double().cpu(), torch.from_numpy(basics._want(a.cpu().numpy(), cluster)))


@pytest.mark.parametrize("M, N, K, bm, bn, bk, stages, threads, cluster, dtype", [
    (1000, 1000, 1000, 128, 128, 64, 4, 256, (2, 1), "float16"),
    (1000, 1000, 1000, 128, 128, 64, 4, 256, (1, 2), "bfloat16"),
    (2048, 2048, 2048, 128, 256, 64, 3, 256, (2, 1), "bfloat16"),
    (2048, 2048, 2048, 256, 128, 64, 4, 256, (1, 2), "float16"),
    (136, 8192, 1032, 128, 64, 64, 8, 256, (2, 1), "float16"),
])
def test_multicast_gemm(M, N, K, bm, bn, bk, stages, threads, cluster, dtype):
    f = matmul(M, N, K, bm, bn, bk, dtype=dtype, out_dtype="float32", num_stages=stages, threads=threads,
               cluster=cluster)
    k = tilewright.compile(f, target="cuda")
    assert ".multicast::cluster" in k.get_kernel_source()
    a = torch.randn(M, K, device="cuda", dtype=TORCH[dtype])
    b = torch.randn(K, N, device="cuda", dtype=TORCH[dtype])
    c = torch.full((M, N), float("nan"), device="cuda")
    k(a, b, c)
    want = a.double() @ b.double()
    torch.testing.assert_close(c.double(), want, rtol=1e-3, atol=1e-3 * K ** 0.5)


def _candidates():
    out = []
    for shape in [(4096, 4096, 4096), (2000, 3000, 1000), (128, 8192, 8192)]:
        for c in gemm_configs.candidates(*shape, "float16", "sm_90", 132):
            if c.cluster != (1, 1):
                out.append((shape, c))
    return out


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("shape, cfg", _candidates(), ids=lambda x: x.short().replace(" ", "-")
                         if isinstance(x, gemm_configs.GemmConfig) else "x".join(map(str, x)))
def test_ops_matmul_cluster_candidates(shape, cfg, dtype):
    M, N, K = shape
    a = torch.randn(M, K, device="cuda", dtype=TORCH[dtype])
    b = torch.randn(K, N, device="cuda", dtype=TORCH[dtype])
    out = torch.full((M, N), float("nan"), device="cuda", dtype=TORCH[dtype])
    dispatch.matmul_impl(a, b, None, "none", None, config=cfg, out=out)
    want = (a.double() @ b.double())
    scale = want.abs().max().item()
    err = (out.double() - want).abs().max().item()
    assert err <= 2e-3 * scale + (2 ** -8 if dtype == "bfloat16" else 2 ** -11) * scale, (cfg.short(), err, scale)


def test_launch_on_partial_clusters_is_refused():
    n = T.dynamic("n")

    @T.prim_func
    def copy(A: T.Tensor((n, 64), "float32"), B: T.Tensor((n, 64), "float32")):
        with T.Kernel(n, threads=64, cluster_dims=(2, 1, 1)) as bx:
            for i in T.Parallel(64):
                B[bx, i] = A[bx, i]

    k = tilewright.compile(copy, target="cuda")
    a = torch.randn(4, 64, device="cuda")
    b = torch.full_like(a, float("nan"))
    k(a, b)
    torch.testing.assert_close(b, a)
    with pytest.raises(ArgumentError, match=r"not a multiple of the kernel's thread-block cluster"):
        k(a[:3], b[:3])
    assert np.isfinite(b.cpu().numpy()).all()
