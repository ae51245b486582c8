"""tilewright.ops on CPU tensors (the tile interpreter runs the same kernels the GPU runs):
results against float64, argument errors, torch.compile capture without graph breaks, autograd."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import tilewright  # noqa: E402
from tilewright import ops  # noqa: E402


def _close(got, want, tol):
    err = (got.double() - want).abs().max().item()
    assert err <= tol * max(1.0, want.abs().max().item()), err


@pytest.mark.parametrize("M, N, K", [(1, 40, 24), (37, 48, 64), (130, 33, 70)])
@pytest.mark.parametrize("activation", ["none", "relu", "gelu_tanh", "silu"])
def test_matmul(M, N, K, activation):
    g = torch.Generator().manual_seed(M * N + K)
    a = torch.randn(M, K, generator=g).half()
    w = torch.randn(N, K, generator=g).half()  # a linear layer's weight: b = w.t(), read in place
    bias = torch.randn(N, generator=g).half()
    ref = a.double() @ w.double().t() + bias.double()
    ref = {"none": ref, "relu": ref.clamp_min(0), "silu": ref * torch.sigmoid(ref),
           "gelu_tanh": torch.nn.functional.gelu(ref, approximate="tanh")}[activation]
    _close(ops.matmul(a, w.t(), bias, activation), ref, 4e-3)


def test_matmul_bf16_transposed_a_and_fp32_out():
    g = torch.Generator().manual_seed(3)
    at = torch.randn(64, 50, generator=g).bfloat16()  # a = at.t(): transposed in place
    b = torch.randn(64, 30, generator=g).bfloat16()
    c = ops.matmul(at.t(), b, out_dtype=torch.float32)
    assert c.dtype == torch.float32 and c.shape == (50, 30)
    _close(c, at.double().t() @ b.double(), 1e-2)


def test_norms_and_softmax():
    g = torch.Generator().manual_seed(4)
    x = torch.randn(3, 5, 96, generator=g).half()
    w = torch.randn(96, generator=g).half()
    b = torch.randn(96, generator=g).half()
    r = torch.randn(3, 5, 96, generator=g).half()
    y, s = ops.rms_norm(x, w, 1e-6, residual=r)
    xs = x.double() + r.double()
    _close(s, xs, 2e-3)
    _close(y, xs * torch.rsqrt((xs * xs).mean(-1, keepdim=True) + 1e-6) * w.double(), 4e-3)
    _close(ops.rms_norm(x, w), x.double() * torch.rsqrt((x.double() ** 2).mean(-1, keepdim=True) + 1e-6) *
           w.double(), 4e-3)
    _close(ops.layer_norm(x, w, b), torch.nn.functional.layer_norm(x.double(), (96,), w.double(), b.double()), 4e-3)
    xf = torch.randn(7, 129, generator=g)
    _close(ops.softmax(xf), torch.softmax(xf.double(), -1), 1e-5)


@pytest.mark.parametrize("call, message", [
    (lambda: ops.matmul(torch.randn(4, 8).half(), torch.randn(9, 4).half()), "columns must equal b's rows"),
    (lambda: ops.matmul(torch.randn(4, 8).half(), torch.randn(8, 4).bfloat16()), "one dtype"),
    (lambda: ops.matmul(torch.randn(4, 8), torch.randn(8, 4)), "a has dtype torch.float32"),
    (lambda: ops.matmul(torch.randn(4, 8).half(), torch.randn(8, 4).half(), activation="tanh"), "activation"),
    (lambda: ops.matmul(torch.randn(4, 8).half(), torch.randn(8, 4).half(), torch.randn(5).half()), "bias has 5"),
    (lambda: ops.rms_norm(torch.randn(4, 8).half(), torch.randn(7).half()), "weight has 7"),
    (lambda: ops.softmax(torch.randn(4, 8), dim=0), "last dimension"),
    (lambda: ops.layer_norm(torch.randn(4, 8), torch.randn(8), torch.randn(8), eps=0.0), "eps must be positive"),
])
def test_argument_errors_name_the_argument(call, message):
    with pytest.raises(tilewright.ArgumentError, match=message):
        call()


def test_torch_compile_captures_the_ops_without_graph_breaks():
    g = torch.Generator().manual_seed(5)
    x = torch.randn(6, 64, generator=g).half()
    w1 = torch.randn(64, 64, generator=g).half()
    nw = torch.randn(64, generator=g).half()

    def block(x):
        h = ops.rms_norm(x, nw)
        return ops.softmax(ops.matmul(h, w1.t(), activation="silu").float()) * 2

    compiled = torch.compile(block, fullgraph=True, backend="aot_eager")  # fullgraph: a break would raise
    _close(compiled(x), block(x).double(), 1e-6)
    explanation = torch._dynamo.explain(block)(x)
    assert explanation.graph_break_count == 0 and explanation.graph_count == 1


def test_matmul_autograd():
    g = torch.Generator().manual_seed(6)
    a = torch.randn(20, 32, generator=g).half().requires_grad_()
    w = torch.randn(24, 32, generator=g).half().requires_grad_()
    bias = torch.randn(24, generator=g).half().requires_grad_()
    out = ops.matmul(a, w.t(), bias)
    grad = torch.randn(20, 24, generator=g).half()
    out.backward(grad)
    _close(a.grad, grad.double() @ w.double(), 4e-3)
    _close(w.grad, grad.double().t() @ a.double(), 4e-3)
    _close(bias.grad, grad.double().sum(0), 4e-3)
    with pytest.raises(NotImplementedError, match="no backward for activation"):
        ops.matmul(a, w.t(), activation="relu").sum().backward()
