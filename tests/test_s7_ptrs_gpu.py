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
