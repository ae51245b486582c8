"""The per-signature plans of ``tilewright.ops`` on a GPU: repeat calls (the pointer launches of
``ops/rows.py``, the matmul memo's ``BoundKernel``s, the dense attention plan) against float64 with
every output the ops allocate poisoned (NaN) first; CUDA-graph capture of calls already on those
paths, replayed on new data; a second GPU gets its own plans.  Skipped without a CUDA GPU."""

from __future__ import annotations

import importlib
import math

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or getattr(torch.version, "hip", None):
    pytest.skip("needs an NVIDIA GPU with a CUDA build of PyTorch", allow_module_level=True)

from test_s6_host_plans import PoisonTorch  # noqa: E402

from tilewright import ops  # noqa: E402

dispatch = importlib.import_module("tilewright.ops.dispatch")
rows_mod = importlib.import_module("tilewright.ops.rows")
attn = importlib.import_module("tilewright.ops.attention_dispatch")


@pytest.fixture
def poisoned(monkeypatch):
    for mod in (dispatch, rows_mod, attn):
        monkeypatch.setattr(mod, "_torch", lambda: PoisonTorch())
    ops.forget_plans()
    yield
    ops.forget_plans()


def _close(got, want, tol):
    assert not got.isnan().any(), "an output element was not written"
    err = (got.double() - want).abs().max().item()
    assert err <= tol * max(1.0, want.abs().max().item()), err


def _attn_ref(q, k, v, causal=False):
    g = q.shape[1] // k.shape[1]
    k, v = k.double().repeat_interleave(g, 1), v.double().repeat_interleave(g, 1)
    s = q.double() @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        sq, sk = s.shape[-2], s.shape[-1]
        s = s.masked_fill(~torch.ones(sq, sk, dtype=torch.bool, device=s.device).tril(sk - sq), -math.inf)
    return torch.softmax(s, -1) @ v


def test_repeat_calls_of_every_op(poisoned):
    dev = "cuda"
    w, b = torch.randn(1024, device=dev).half(), torch.randn(1024, device=dev).half()
    g = torch.randn(256, 256, device=dev).half()
    kv = torch.randn(4, 8, 512, 128, device=dev).half()
    kp = torch.randn(1, 8, 128, 64, device=dev).half()
    for n_rows in (64, 64, 64, 64, 33):
        x, r = torch.randn(n_rows, 1024, device=dev).half(), torch.randn(n_rows, 1024, device=dev).half()
        xd = x.double()
        _close(ops.softmax(x), torch.softmax(xd, -1), 2e-3)
        _close(ops.rms_norm(x, w), xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6) * w.double(), 2e-2)
        y, s = ops.rms_norm(x, w, residual=r)
        sd = s.double()
        _close(s, xd + r.double(), 2e-3)
        _close(y, sd * torch.rsqrt(sd.pow(2).mean(-1, keepdim=True) + 1e-6) * w.double(), 2e-2)
        m = xd.mean(-1, keepdim=True)
        want = (xd - m) * torch.rsqrt((xd - m).pow(2).mean(-1, keepdim=True) + 1e-5) * w.double() + b.double()
        _close(ops.layer_norm(x, w, b), want, 2e-2)
        a = torch.randn(n_rows, 256, device=dev).half()
        _close(ops.matmul(a, g), a.double() @ g.double(), 2e-2)
        _close(ops.matmul(a, g.t()), a.double() @ g.double().t(), 2e-2)
        q = torch.randn(4, 32, 1, 128, device=dev).half()
        _close(ops.attention(q, kv, kv), _attn_ref(q, kv, kv), 3e-3)
        qp = torch.randn(1, 8, 128, 64, device=dev).half()
        _close(ops.attention(qp, kp, kp, causal=True), _attn_ref(qp, kp, kp, True), 3e-3)
    assert attn._dense_plans and rows_mod._row_plans and dispatch._matmul_plans


def test_graph_capture_of_calls_on_the_pointer_paths():
    x = torch.randn(64, 1024, device="cuda").half()
    w = torch.randn(1024, device="cuda").half()
    q = torch.randn(4, 32, 1, 128, device="cuda").half()
    kv = torch.randn(4, 8, 512, 128, device="cuda").half()

    def step():
        return ops.softmax(x), ops.rms_norm(x, w), ops.attention(q, kv, kv)

    for _ in range(3):  # the plans exist and are bound before the capture
        step()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        sm, rn, at = step()
    x.copy_(torch.randn_like(x))
    q.copy_(torch.randn_like(q))
    graph.replay()
    torch.cuda.synchronize()
    xd = x.double()
    _close(sm, torch.softmax(xd, -1), 2e-3)
    _close(rn, xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6) * w.double(), 2e-2)
    _close(at, _attn_ref(q, kv, kv), 3e-3)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_a_second_gpu_gets_its_own_plans(poisoned):
    for dev in ("cuda:0", "cuda:1", "cuda:0", "cuda:1"):
        x = torch.randn(16, 512, device=dev).half()
        _close(ops.softmax(x), torch.softmax(x.double(), -1), 2e-3)
        q, kv = torch.randn(1, 4, 1, 64, device=dev).half(), torch.randn(1, 2, 256, 64, device=dev).half()
        _close(ops.attention(q, kv, kv), _attn_ref(q, kv, kv), 3e-3)
