"""Session 10's host paths on a GPU (the rows' keys, matmul's template output, the TMA launches'
pointer check, the split decode's inline workspace lookup): repeat calls of every op and of a
compiled kernel of static shapes against float64 with poisoned outputs, calls on a side stream and
back, and a CUDA-graph capture replayed on new data.  Skipped without a CUDA GPU."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or getattr(torch.version, "hip", None):
    pytest.skip("needs an NVIDIA GPU with a CUDA build of PyTorch", allow_module_level=True)

from test_s6_host_gpu import _attn_ref, _close, poisoned  # noqa: E402,F401 - poisoned: a fixture (the ops' outputs NaN)

import tilewright  # noqa: E402
import tilewright.language as T  # noqa: E402
from tilewright import ops  # noqa: E402


def _rms(xd, w, eps=1e-6):
    return xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + eps) * w.double()


def _every_op(x, w, b, g, q, kv, qp, kp):
    xd = x.double()
    _close(ops.softmax(x), torch.softmax(xd, -1), 2e-3)
    _close(ops.rms_norm(x, w), _rms(xd, w), 2e-2)
    y, s = ops.rms_norm(x, w, residual=x)
    _close(s, 2 * xd, 2e-3)
    _close(y, _rms(2 * xd, w), 2e-2)
    m = xd.mean(-1, keepdim=True)
    _close(ops.layer_norm(x, w, b),
           (xd - m) * torch.rsqrt((xd - m).pow(2).mean(-1, keepdim=True) + 1e-5) * w.double() + b.double(), 2e-2)
    a = x[:, :256].contiguous()
    _close(ops.matmul(a, g), a.double() @ g.double(), 2e-2)
    out, lse = ops.attention(q, kv, kv, return_lse=True)
    _close(out, _attn_ref(q, kv, kv), 3e-3)
    assert torch.isfinite(lse).all()
    _close(ops.attention(q, kv, kv, num_splits=1), _attn_ref(q, kv, kv), 3e-3)
    _close(ops.attention(qp, kp, kp, causal=True), _attn_ref(qp, kp, kp, True), 3e-3)


def _inputs():
    dev = "cuda"
    w, b = torch.randn(1024, device=dev).half(), torch.randn(1024, device=dev).half()
    g = torch.randn(256, 256, device=dev).half()
    kv = torch.randn(4, 8, 512, 128, device=dev).half()
    kp = torch.randn(1, 8, 128, 64, device=dev).half()
    return w, b, g, kv, kp


def _every_op_on(wheres, w, b, g, kv, kp) -> None:
    """``_every_op`` with fresh x, q and qp per round, each round on the current stream or a side
    stream (``wheres``: "current" / "side")."""
    side = torch.cuda.Stream()
    for where in wheres:
        x = torch.randn(64, 1024, device="cuda").half()
        q = torch.randn(4, 32, 1, 128, device="cuda").half()
        qp = torch.randn(1, 8, 128, 64, device="cuda").half()
        if where == "side":
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                _every_op(x, w, b, g, q, kv, qp, kp)
            torch.cuda.current_stream().wait_stream(side)
        else:
            _every_op(x, w, b, g, q, kv, qp, kp)
    torch.cuda.synchronize()


@pytest.mark.usefixtures("poisoned")
def test_every_op_on_two_streams():
    torch.manual_seed(110)
    _every_op_on(("current", "current", "side", "side", "current"), *_inputs())


def _vector_add():
    """A kernel of static shapes: C = A + B over 1024 floats, one block of 128 threads."""

    @T.prim_func
    def add(A: T.Tensor((1024,), "float32"), B: T.Tensor((1024,), "float32"), C: T.Tensor((1024,), "float32")):
        with T.Kernel(1, threads=128):
            for i in T.Parallel(1024):
                C[i] = A[i] + B[i]

    return add


@pytest.mark.usefixtures("poisoned")
def test_static_kernel_and_graph_capture():
    add = _vector_add()
    k = tilewright.compile(add, target="cuda")
    k2 = tilewright.compile(add, out_idx=[-1], target="cuda")
    for _ in range(3):
        a, b = torch.randn(1024, device="cuda"), torch.randn(1024, device="cuda")
        c = torch.full((1024,), float("nan"), device="cuda")
        k(a, b, c)
        _close(c, a.double() + b.double(), 1e-6)
        _close(k2(a, b), a.double() + b.double(), 1e-6)
    _rows_captured_and_replayed()


def _rows_captured_and_replayed(before_capture=lambda: None) -> None:
    """softmax and rms_norm planned and bound, ``before_capture()``, captured in a CUDA graph,
    replayed on new data and checked against float64."""
    x = torch.randn(64, 1024, device="cuda").half()
    w = torch.randn(1024, device="cuda").half()
    for _ in range(3):  # plans made and bound before the capture
        ops.softmax(x), ops.rms_norm(x, w)
    before_capture()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        sm, rn = ops.softmax(x), ops.rms_norm(x, w)
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    _close(sm, torch.softmax(x.double(), -1), 2e-3)
    _close(rn, _rms(x.double(), w), 2e-2)
