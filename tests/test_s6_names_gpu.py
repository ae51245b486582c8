"""The s6 names on an NVIDIA GPU: T.CUDASourceCodeKernel run, T.Ramp and T.make_tensor kernels against
float64 references with poisoned outputs.  Skipped without a CUDA GPU."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or getattr(torch.version, "hip", None):
    pytest.skip("needs an NVIDIA GPU with a CUDA build of PyTorch", allow_module_level=True)

import test_s6_names_host as host  # noqa: E402
import test_s6_names_pointers as pointers  # noqa: E402
import test_s6_names_vector as vector  # noqa: E402

import tilewright  # noqa: E402


def test_source_kernel_runs():
    kernel = tilewright.compile(host.source_kernel(host.COPY_SOURCE), target="cuda")
    a = torch.randn(1000, device="cuda")
    b = torch.full_like(a, float("nan"))
    kernel(a, b)
    torch.testing.assert_close(b.double(), a.double() * 2.0, rtol=0, atol=0)


def test_ramp_negative_lanes_on_the_gpu():
    n = 1024
    a = torch.randn(n, device="cuda")
    b = torch.full((4, 4), float("nan"), device="cuda")
    tilewright.compile(vector.ramp_load(n), target="cuda")(a, b)
    ah = a.double().cpu().numpy()
    want = np.array([[ah[(t - 2 + k) % n] for k in range(4)] for t in range(4)])
    np.testing.assert_array_equal(b.double().cpu().numpy(), want)


def test_make_tensor_gemm_on_the_gpu():
    M, N, K = 64, 96, 64
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(N, K, device="cuda", dtype=torch.float16)
    c = torch.full((M, N), float("nan"), device="cuda")
    tilewright.compile(pointers.ptr_gemm(M, N, K), target="cuda")(a, b, c, M, N, K)
    ref = a.double() @ b.double().T
    torch.testing.assert_close(c.double(), ref, rtol=1e-3, atol=1e-3)


def test_make_tensor_gemm_with_raw_addresses():
    M, N, K = 64, 96, 64
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(N, K, device="cuda", dtype=torch.float16)
    c = torch.full((M, N), float("nan"), device="cuda")
    kernel = tilewright.compile(pointers.ptr_gemm(M, N, K), target="cuda")
    kernel(a.data_ptr(), b.data_ptr(), c.data_ptr(), M, N, K)
    torch.cuda.synchronize()
    torch.testing.assert_close(c.double(), a.double() @ b.double().T, rtol=1e-3, atol=1e-3)
