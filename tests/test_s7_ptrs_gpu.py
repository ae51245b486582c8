"""The s7 kernels (pointer tables, device asserts, zero grids, thread bindings) on an NVIDIA GPU, with the
same float64 references and poisoned outputs as their CPU tests.  Skipped without a CUDA GPU."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or getattr(torch.version, "hip", None):
    pytest.skip("needs an NVIDIA GPU with a CUDA build of PyTorch", allow_module_level=True)

import test_s7_ptrs_grid as grid  # noqa: E402

import tilewright as tw  # noqa: E402
from tilewright.errors import ArgumentError  # noqa: E402


def test_static_zero_grid_is_refused_by_the_device_launcher():
    kern = tw.compile(grid.static_zero_grid(32), target="cuda")
    out = torch.randn(4, device="cuda")
    before = out.clone()
    with pytest.raises(ArgumentError, match="grid dimension x of T.Kernel is 0: the kernel would run no block"):
        kern(out)
    torch.cuda.synchronize()
    assert torch.equal(out, before)


def test_passing_device_assert_on_the_gpu():
    """Only the passing case: a failing assert traps, which leaves the CUDA context unusable for later tests."""
    import test_s7_ptrs_assert as asserts

    kern = tw.compile(asserts.finite_scores(), target="cuda")
    s = torch.randn(16, device="cuda")
    out = torch.full((16,), float("nan"), device="cuda")
    kern(s, out)
    torch.cuda.synchronize()
    torch.testing.assert_close(out.double(), 3 * s.double(), rtol=1e-6, atol=1e-6)


def test_pointer_tables_on_the_gpu():
    """TileLang's way: the tables hold the GPU tensors' data_ptr()."""
    import math

    import test_s7_ptrs_tables as tables

    G, N = 3, 64
    srcs = [torch.randn(N, device="cuda", dtype=torch.float16) for _ in range(G)]
    table = torch.tensor([s.data_ptr() for s in srcs], device="cuda", dtype=torch.int64)
    out = torch.full((G, N), float("nan"), device="cuda", dtype=torch.float16)
    tw.compile(tables.multi_copy(G, N), target="cuda")(table, out)
    torch.cuda.synchronize()
    assert torch.equal(out, 2 * torch.stack(srcs))

    sizes, N, K, bm = [8, 12, 17], 32, 48, 16
    offsets = torch.tensor([0, 1, 2], device="cuda", dtype=torch.int32)
    assert offsets.tolist() == [sum(math.ceil(s / bm) for s in sizes[:i]) for i in range(3)]
    a = [torch.randn(s, K, device="cuda", dtype=torch.float16) for s in sizes]
    b = [torch.randn(K, N, device="cuda", dtype=torch.float16) for _ in sizes]
    A = [torch.zeros(max(sizes), K, device="cuda", dtype=torch.float16) for _ in sizes]
    for x, y in zip(A, a):
        x[:len(y)] = y
    C = [torch.full((max(sizes), N), float("nan"), device="cuda", dtype=torch.float16) for _ in sizes]
    ptrs = [torch.tensor([x.data_ptr() for x in xs], device="cuda", dtype=torch.int64) for xs in (A, b, C)]
    tw.compile(tables.grouped_matmul(sizes, N, K, bm, 16, 16, 32), target="cuda")(*ptrs, offsets)
    torch.cuda.synchronize()
    for c, x, y in zip(C, a, b):
        torch.testing.assert_close(c[:len(x)].double(), x.double() @ y.double(), rtol=2e-2, atol=2e-2)
