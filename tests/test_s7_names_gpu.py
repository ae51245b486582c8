"""The programs of test_s7_names_vectorize.py, test_s7_names_views.py and test_s7_names_host.py on an
NVIDIA GPU: compiled for the GPU's own target, called with torch CUDA tensors, against float64
references with poisoned outputs; the vectorized loops are checked to use 16-byte accesses in the
generated code.  Skipped without a CUDA GPU."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or getattr(torch.version, "hip", None):
    pytest.skip("needs an NVIDIA GPU with a CUDA build of PyTorch", allow_module_level=True)

import test_s7_names_host as host_api  # noqa: E402
import test_s7_names_vectorize as vec  # noqa: E402
import test_s7_names_views as views  # noqa: E402

import tilewright as tw  # noqa: E402
import tilewright.language as T  # noqa: E402


def nan_like(shape, dtype=torch.float32):
    return torch.full(shape, float("nan"), device="cuda", dtype=dtype)


@pytest.mark.parametrize("stride_a,stride_b,wide", [(128, 128, "uint4"), (130, 132, "uint2"), (136, 144, "uint4")])
def test_column_major_vectorized_copy(stride_a, stride_b, wide):
    """TileLang's test_vectorize shapes: (128, 128) tensors stored column by column."""
    N, M = 128, 128
    k = tw.compile(vec.column_major_copy(N, M, stride_a, stride_b), target="cuda")
    base_a = torch.randn(M, stride_a, device="cuda")
    base_b = torch.full((M, stride_b), -7.0, device="cuda")
    base_b[:, :N] = float("nan")
    a = torch.as_strided(base_a, (N, M), (1, stride_a))
    b = torch.as_strided(base_b, (N, M), (1, stride_b))
    k(a, b)
    torch.testing.assert_close(b, a, rtol=0, atol=0)
    assert (base_b[:, N:] == -7.0).all()
    assert f"reinterpret_cast<{wide}*>" in k.get_kernel_source()


@pytest.mark.parametrize("M,K", [(128, 2), (128, 4), (384, 6), (896, 14)])
def test_invariant_index(M, K):
    N = 128
    k = tw.compile(vec.invariant_index(N, M, K), target="cuda")
    a, c = torch.randn(N, M, device="cuda"), torch.randn(N, M // K, device="cuda")
    b = nan_like((N, M))
    k(a, b, c)
    want = a.double() * c.double()[:, torch.arange(M, device="cuda") // K]
    torch.testing.assert_close(b.double(), want, rtol=1e-6, atol=1e-6)
    assert "reinterpret_cast<uint4*>" in k.get_kernel_source()


@pytest.mark.parametrize("into_global", [True, False])
def test_accumulate(into_global):
    M, K = 128, 8
    k = tw.compile(vec.accumulate(M, K, into_global), target="cuda")
    a = torch.randn(M, K, device="cuda")
    b = nan_like((M,))
    k(a, b)
    torch.testing.assert_close(b.double(), a.double().sum(1), rtol=1e-5, atol=1e-5)


def test_loop_carried_dependence():
    M, K = 64, 8
    k = tw.compile(vec.prefix_sum(M, K), target="cuda")
    a = torch.randn(M, K, device="cuda")
    b = nan_like((M, K + 1))
    k(a, b)
    want = torch.cat([torch.zeros(M, 1, device="cuda", dtype=torch.float64), a.double().cumsum(1)], 1)
    torch.testing.assert_close(b.double(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n", [4, 8, 6])
def test_uniform_fill(n):
    k = tw.compile(vec.uniform_fill(n), target="cuda")
    a = nan_like((64,))
    k(a)
    torch.testing.assert_close(a[:n].double(), (torch.arange(n, device="cuda") + 1).double() * 0.5)
    assert torch.isnan(a[n:]).all()


def test_flat_gemm_through_data():
    k = tw.compile(views.flat_gemm(), target="cuda")
    a = torch.randn(4, 8, 32, device="cuda", dtype=torch.float16)
    w = torch.randn(2, 16, 64, device="cuda", dtype=torch.float16)
    c = nan_like((2, 16, 64))
    k(a, w, c)
    want = a.double().reshape(32, 32) @ w.double().reshape(32, 64)
    torch.testing.assert_close(c.reshape(32, 64).double(), want, rtol=1e-2, atol=1e-2)


def test_views_merging_dimensions():
    k = tw.compile(views.merged_dims_copy(), target="cuda")
    a = torch.randn(3, 3, 8, 16, device="cuda")
    o = nan_like((2, 3, 4, 16))
    k(a, o)
    got = o.reshape(24, 16)
    torch.testing.assert_close(got[5:21, 4:12], a.reshape(72, 16)[20:36, 8:16], rtol=0, atol=0)
    assert torch.isnan(got[:5]).all() and torch.isnan(got[21:]).all() and torch.isnan(got[5:21, :4]).all()


@pytest.mark.parametrize("annotations,prefer", [({"prefer_instruction": "tma"}, None), (None, "sync")])
def test_copy_annotations(annotations, prefer):
    M, N = 256, 256  # TileLang's tma_1d sizes
    k = tw.compile(host_api.elementwise_add(M, N, 128, 128, annotations, prefer), target="cuda")
    a, b = torch.randn(M, N, device="cuda"), torch.randn(M, N, device="cuda")
    c = nan_like((M, N))
    k(a, b, c)
    torch.testing.assert_close(c, a + b, rtol=1e-6, atol=1e-6)


def test_several_outputs_are_a_list():
    @tw.jit
    def kernel(A):
        m = T.dynamic("m")
        A: T.Tensor[[m], T.float32]
        B = T.empty([m], T.float32)
        C = T.empty([m + 1], T.float32)
        with T.Kernel(1, threads=1):
            for i in T.serial(m):
                B[i] = A[i] + 1.0
            for i in T.serial(m + 1):
                C[i] = T.cast(i, T.float32)
        return B, C

    a = torch.arange(29, dtype=torch.float32, device="cuda")
    outputs = kernel(a)
    assert isinstance(outputs, list) and [tuple(o.shape) for o in outputs] == [(29,), (30,)]
    torch.testing.assert_close(outputs[0], a + 1.0)
    torch.testing.assert_close(outputs[1], torch.arange(30, dtype=torch.float32, device="cuda"))


def test_compile_timeout_leaves_nvrtc_alone(monkeypatch):
    """NVRTC compiles in-process: the HIP compiler's process timeout does not apply to it."""
    monkeypatch.setenv("TILEWRIGHT_COMPILE_TIMEOUT_SECONDS", "0.001")
    monkeypatch.setenv("TILEWRIGHT_DISABLE_CACHE", "1")
    k = tw.compile(vec.uniform_fill(4), target="cuda")
    a = nan_like((64,))
    k(a)
    assert not torch.isnan(a[:4]).any()



def test_im2col_convolution():
    """TileLang's test_nvrtc_im2col_tma_desc sizes, float16."""
    N, C, H, W, F, K, S, D, P = 4, 64, 32, 32, 64, 3, 1, 1, 1
    k = tw.compile(views.conv_im2col(N, C, H, W, F, K, S, D, P, 64, 128, 32, dtype="float16"), out_idx=-1,
                   target="cuda")
    a = torch.randn(N, H, W, C, device="cuda", dtype=torch.float16)
    b = torch.randn(K, K, C, F, device="cuda", dtype=torch.float16)
    out = k(a, b)
    ref = torch.conv2d(a.double().permute(0, 3, 1, 2), b.double().permute(3, 2, 0, 1), stride=S, padding=P,
                       dilation=D).permute(0, 2, 3, 1)
    torch.testing.assert_close(out.double(), ref, rtol=1e-2, atol=5e-2)
