"""Found by the fuzzer's op-level cases on the H200 (``ops_matmul``, change "offset"): ``ops.matmul`` on
an operand whose data starts off a 16-byte boundary (a slice, a storage offset) raised the launcher's
ArgumentError ("not 16-byte aligned": the kernels load vectors), where torch.matmul gives the product.
Such an operand (and bias) is now passed as an aligned copy, on the first call and on repeat calls of a
plan made for aligned tensors (the plan's key has the strides, not the alignment), and the other way
round.  The launcher's check exists on a GPU only; here every op kernel is wrapped to make the same
check on the CPU (test_s6_host_plans.PointerKernel: the bound path too), results against float64 on
poisoned outputs.  ops.attention and the row ops are checked the same way."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from test_s6_host_plans import PointerKernel, wrap_op_kernels  # noqa: E402

from tilewright import ops  # noqa: E402
from tilewright.ir import tile as t  # noqa: E402


class AlignedKernel(PointerKernel):
    """The checked call makes the GPU launcher's alignment check too."""

    def __call__(self, *args, stream=None):
        for p, a in zip(self.params, args):
            if isinstance(p, t.Buffer) and a.numel():
                assert a.data_ptr() % 16 == 0, f"{p.name}: start {a.data_ptr():#x} is not 16-byte aligned"
        return super().__call__(*args, stream=stream)


@pytest.fixture
def aligned_path(monkeypatch):
    yield wrap_op_kernels(monkeypatch, AlignedKernel)
    ops.forget_plans()


def _offset(x, k=1):
    """``x``'s values at a storage offset of ``k`` elements (same shape and strides)."""
    big = torch.empty(x.numel() + k, dtype=x.dtype)
    big[k:] = x.reshape(-1) if x.is_contiguous() else x.t().contiguous().reshape(-1)
    flat = big[k:]
    return flat.view(x.shape) if x.is_contiguous() else flat.view(x.t().shape).t()


def _close(out, want, tol=2e-2):
    assert not out.isnan().any()
    err = (out.double() - want).abs().max().item()
    assert err <= tol * max(1.0, want.abs().max().item()), err


@pytest.mark.parametrize("trans_b", [False, True])
def test_matmul_on_unaligned_operands(aligned_path, trans_b):
    g = torch.Generator().manual_seed(7)
    a = torch.randn(37, 40, generator=g).half()
    w = torch.randn(24, 40, generator=g).half()
    b = w.t() if trans_b else w.t().contiguous()
    bias = torch.randn(24, generator=g).half()
    want = torch.relu(a.double() @ b.double() + bias.double())
    # aligned twice (a plan, then a repeat call), then unaligned operands through that plan, then the reverse
    for x, y, c in [(a, b, bias), (a, b, bias), (_offset(a), _offset(b), _offset(bias)), (_offset(a), b, bias),
                    (a, _offset(b, 3), _offset(bias, 2))]:
        _close(ops.matmul(x, y, c, activation="relu"), want)
    ops.forget_plans()
    for x in (_offset(a), _offset(a), a):  # a plan made on an unaligned operand first
        _close(ops.matmul(x, b), a.double() @ b.double())


def test_attention_and_row_ops_on_unaligned_inputs(aligned_path):
    g = torch.Generator().manual_seed(8)
    q, k, v = (torch.randn(1, 2, 33, 64, generator=g).half() for _ in range(3))
    want = torch.softmax((q.double() @ k.double().transpose(-1, -2)) / 8, -1) @ v.double()
    for args in [(q, k, v), (_offset(q), _offset(k), _offset(v)), (q, k, v)]:
        _close(ops.attention(*args), want, 5e-3)
    x = torch.randn(5, 64, generator=g)
    for xx in (x, _offset(x), _offset(x)):
        _close(ops.softmax(xx), torch.softmax(x.double(), -1), 1e-5)
