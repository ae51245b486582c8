"""GPU tests on tensors of more than 2^31 elements (> 4 GiB): element offsets past int32 must be
computed in 64 bits (issue 11, item 5).  Each kernel runs on the whole tensor; its output is
poisoned with NaN first, checked for unwritten elements everywhere and against a float64
reference at the start, around element 2^31 and at the end, plus a random sample.

Skipped cleanly when there is no CUDA GPU (or no PyTorch with CUDA), or less than 24 GiB free."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or getattr(torch.version, "hip", None):
    pytest.skip("needs an NVIDIA GPU with a CUDA build of PyTorch", allow_module_level=True)
if torch.cuda.mem_get_info()[0] < 24 * 2**30:
    pytest.skip("needs 24 GiB of free GPU memory", allow_module_level=True)

import tilewright  # noqa: E402
import tilewright.language as T  # noqa: E402
from tilewright.kernels import matmul  # noqa: E402

BIG = 2**31 + 2**20


@pytest.fixture(autouse=True)
def _free_memory():
    yield
    torch.cuda.empty_cache()


def _windows(n: int, width: int = 1 << 16, count: int = 16, seed: int = 0):
    """(lo, hi) ranges checked exactly: the start, both sides of element 2^31, the end and ``count``
    random places.  Slices, not index tensors: PyTorch's own gather is not to be trusted past 2^31."""
    g = torch.Generator().manual_seed(seed)
    starts = [0, 2**31 - width // 2, n - width] + torch.randint(0, n - width, (count,), generator=g).tolist()
    return [(lo, lo + width) for lo in starts]


def axpb(n, block):
    """``C = 2 A + B`` (float16), one element per lane, guarded by ``< n``."""

    @T.prim_func
    def axpb_kernel(A: T.Tensor((n,), "float16"), B: T.Tensor((n,), "float16"), C: T.Tensor((n,), "float16")):
        with T.Kernel(T.ceildiv(n, block), threads=128) as bx:
            for i in T.Parallel(block):
                if bx * block + i < n:
                    C[bx * block + i] = T.cast(T.cast(A[bx * block + i], "float32") * 2.0 + B[bx * block + i], "float16")

    return axpb_kernel


@pytest.mark.parametrize("n", [BIG, BIG + 5])  # the second has a ragged last block: the bound is 64-bit too
def test_elementwise_past_2_31_elements(n):
    k = tilewright.compile(axpb(n, 1024), target="cuda")
    assert "long long" in k.source
    a = torch.randn(n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, device="cuda", dtype=torch.float16)
    c = torch.full((n,), float("nan"), device="cuda", dtype=torch.float16)
    k(a, b, c)
    assert not torch.isnan(c).any(), "elements left unwritten"
    for lo, hi in _windows(n):
        ref = 2.0 * a[lo:hi].double() + b[lo:hi].double()
        torch.testing.assert_close(c[lo:hi].double(), ref, rtol=2e-3, atol=2e-3)


def scale_rows(N, bm):
    """``Y = 2 X + 1`` over a (m, N) float16 X with a dynamic row count m, through a fragment."""
    M = T.dynamic("m")

    @T.prim_func
    def scale(X: T.Tensor((M, N), "float16"), Y: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(M, bm), threads=128) as bx:
            x = T.alloc_fragment((bm, N), "float32")
            T.copy(X[bx * bm, 0], x)
            for i, j in T.Parallel(bm, N):
                x[i, j] = x[i, j] * 2.0 + 1.0
            T.copy(x, Y[bx * bm, 0])

    return scale


def test_dynamic_rows_past_2_31_elements():
    N = 1024
    m = BIG // N + 3  # ragged in the block of 16 rows
    k = tilewright.compile(scale_rows(N, 16), target="cuda")
    x = torch.randn(m, N, device="cuda", dtype=torch.float16)
    y = torch.full((m, N), float("nan"), device="cuda", dtype=torch.float16)
    k(x, y)
    y, x = y.view(-1), x.view(-1)
    assert not torch.isnan(y).any(), "elements left unwritten"
    for lo, hi in _windows(m * N, seed=1):
        torch.testing.assert_close(y[lo:hi].double(), 2.0 * x[lo:hi].double() + 1.0, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("stages", [3, 0])  # TMA pipelined on sm_90; synchronous copies
def test_gemm_with_operand_past_2_31_elements(stages):
    M, N, K = 2**17 + 64, 64, 16384  # A has 2^31 + 2^20 elements
    k = tilewright.compile(matmul(M, N, K, 128, 64, 32, num_stages=stages), target="cuda")
    g = torch.Generator(device="cuda").manual_seed(stages)
    a = torch.randn(M, K, device="cuda", generator=g).to(torch.float16)
    b = torch.randn(K, N, device="cuda", generator=g).to(torch.float16)
    c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)
    k(a, b, c)
    assert not torch.isnan(c).any(), "elements left unwritten"
    for lo, hi in ((0, 128), (2**31 // K - 128, 2**31 // K + 128), (M - 256, M)):
        ref = a[lo:hi].double() @ b.double()
        torch.testing.assert_close(c[lo:hi].double(), ref, rtol=2e-2, atol=2e-2 * K**0.5)
