"""The programs of test_compat_names.py, test_strided_tensor.py and test_multi_kernel.py on an NVIDIA GPU:
compiled for the GPU's own target, called with torch CUDA tensors, against float64 references with
poisoned outputs.  Skipped without a CUDA GPU."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or getattr(torch.version, "hip", None):
    pytest.skip("needs an NVIDIA GPU with a CUDA build of PyTorch", allow_module_level=True)

import test_compat_names as names  # noqa: E402
import test_multi_kernel as multi  # noqa: E402
import test_strided_tensor as strided  # noqa: E402

import tilewright as tw  # noqa: E402
import tilewright.language as T  # noqa: E402
from tilewright.errors import ArgumentError  # noqa: E402


def cuda(x):
    return torch.from_numpy(np.ascontiguousarray(x)).cuda()


def host(x):
    return x.float().cpu().numpy().astype(np.float64) if x.dtype.is_floating_point else x.cpu().numpy()


@pytest.fixture
def rng():
    return np.random.default_rng(2026)


@pytest.mark.parametrize("pitch", [96, 67, 1024 + 8])
def test_strided_copy(rng, pitch):
    M, N = 48, 64
    k = tw.compile(strided.copy_with_stride(M, N, pitch, 16, 32), target="cuda")
    wide = torch.randn(M, pitch, device="cuda", dtype=torch.float16)
    a = wide[:, :N]
    b = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)
    k(a, b)
    torch.testing.assert_close(b, a, rtol=0, atol=0)


def test_strided_copy_symbolic_pitch(rng):
    k = tw.compile(strided.copy_with_stride(1024, 1024, T.dynamic("NN"), 128, 128), out_idx=[1], target="cuda")
    for pitch in (2048, 1031):
        base = torch.randn(1024, pitch, device="cuda", dtype=torch.float16)
        torch.testing.assert_close(k(base[:, :1024]), base[:, :1024], rtol=0, atol=0)


@pytest.mark.parametrize("stride_a,stride_b", [(128, 128), (131, 136)])
def test_column_major_strided(stride_a, stride_b):
    N, M = 128, 128
    k = tw.compile(strided.column_major_copy(N, M, stride_a, stride_b), target="cuda")
    base_a = torch.randn(M, stride_a, device="cuda")
    base_b = torch.full((M, stride_b), -7.0, device="cuda")
    a = torch.as_strided(base_a, (N, M), (1, stride_a))
    b = torch.as_strided(base_b, (N, M), (1, stride_b))
    k(a, b)
    torch.testing.assert_close(b, 2 * a)
    assert (base_b[:, N:] == -7.0).all()


def test_two_kernels_in_order(rng):
    N = 200
    k = tw.compile(multi.two_kernels(N), target="cuda")
    a = torch.randn(N, device="cuda")
    b = torch.full((N,), float("nan"), device="cuda")
    c = torch.full((N,), float("nan"), device="cuda")
    k(a, b, c)
    torch.testing.assert_close(b, a + 1)
    torch.testing.assert_close(c, torch.roll(a + 1, -7) * 2)
    b2, c2 = tw.compile(multi.two_kernels(N), out_idx=[1, 2], target="cuda")(a)
    torch.testing.assert_close(c2, torch.roll(a + 1, -7) * 2)


def test_pdl_pair_on_gpu():
    N = 128
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        k = tw.compile(multi.pdl_pair(N), target="cuda")
    a = torch.randn(N, device="cuda")
    b, c = torch.empty_like(a), torch.full_like(a, float("nan"))
    k(a, b, c)
    torch.testing.assert_close(c, torch.flip(a, [0]) * 3 - 1)


def test_none_for_unused_bias(rng):
    M, N, K = 256, 256, 128
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(N, K, device="cuda", dtype=torch.float16)
    c = torch.full((M, N), float("nan"), device="cuda")
    tw.compile(names.gemm_with_optional_bias(M, N, K, False), target="cuda")(a, b, c, None)
    torch.testing.assert_close(c, (a.double() @ b.double().T).float(), rtol=1e-3, atol=1e-3)
    with pytest.raises(ArgumentError, match="argument Bias is None"):
        tw.compile(names.gemm_with_optional_bias(M, N, K, True), target="cuda")(a, b, c, None)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int32", "int16", "int8"])
def test_thread_allreduce(dtype):
    vals = [3, 8, 5, 2, 7, 6, 4, 6]
    tdt = getattr(torch, dtype)
    a = torch.tensor(vals, device="cuda").to(tdt)
    c = torch.full((8,), -7, device="cuda").to(tdt)
    tw.compile(names.allreduce_kernel(8, dtype, lambda x, y: x + y, 0), target="cuda")(a, c)
    assert (c.cpu() == a.cpu().sum().to(tdt)).all()


def test_thread_allreduce_max_with_condition():
    a = torch.randn(128, device="cuda")
    c = torch.full((128,), float("nan"), device="cuda")
    func = names.allreduce_kernel(128, "float32", lambda x, y: T.max(x, y), -np.inf, with_cond=True)
    tw.compile(func, target="cuda")(a, c)
    keep = torch.arange(128, device="cuda") % 3 != 1
    torch.testing.assert_close(c, torch.full_like(c, a[keep].max().item()))


@pytest.mark.parametrize("shape", [(4, 5, 3), (3, 8, 132)])
def test_persistent(shape):
    MB, NB, sm = shape
    v = torch.zeros(MB, NB, device="cuda", dtype=torch.int32)
    tw.compile(names.persistent_visit(MB, NB, sm), target="cuda")(v)
    want = torch.arange(MB)[:, None] * 100 + torch.arange(NB) + 1
    assert torch.equal(v.cpu(), want.int())


@pytest.mark.parametrize("name", list(names.INJECTIVE))
def test_shared_layout(name):
    k = tw.compile(names.shared_roundtrip(names.INJECTIVE[name]), out_idx=[1], target="cuda")
    a = torch.randint(-1000, 1000, (128,), device="cuda", dtype=torch.int32)
    torch.testing.assert_close(k(a), torch.roll(a, -5))


def test_safe_values():
    a = torch.randn(1024, 1024, device="cuda", dtype=torch.float16)
    b = tw.compile(names.shifted_rows(1024, 1024, 128, 128, 10), out_idx=[1], target="cuda")(a)
    ref = torch.full_like(a, 10)
    ref[10:] = a[:-10]
    torch.testing.assert_close(b, ref, rtol=0, atol=0)
    a = torch.randn(70, 75, device="cuda")
    for pad, dst in ((None, "float32"), (-99, "float16")):
        b = tw.compile(names.padded_tile_copy(70, 75, 96, 96, 32, 32, "float32", dst, pad), out_idx=[1],
                       target="cuda")(a)
        ref = torch.full((96, 96), 0.0 if pad is None else float(pad), device="cuda")
        ref[:70, :75] = a
        torch.testing.assert_close(b.float(), ref, rtol=1e-2, atol=1e-2)
    b = tw.compile(names.padded_element_copy(70, 75, 96, 96, -99), out_idx=[1], target="cuda")(a)
    ref = torch.full((96, 96), -99.0, device="cuda")
    ref[:70, :75] = a
    torch.testing.assert_close(b, ref, rtol=0, atol=0)


def test_cluster_kernel_gemm():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        func = names.cluster_gemm(256, 256, 128)
    a = torch.randn(256, 128, device="cuda", dtype=torch.float16)
    b = torch.randn(128, 256, device="cuda", dtype=torch.float16)
    c = torch.full((256, 256), float("nan"), device="cuda")
    tw.compile(func, target="cuda")(a, b, c)
    torch.testing.assert_close(c, (a.double() @ b.double()).float(), rtol=1e-3, atol=1e-3)
