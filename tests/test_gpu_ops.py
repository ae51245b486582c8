"""tilewright.ops on the GPU: results against float64, CUDA-graph capture and replay, and
torch.compile(fullgraph=True) with the default (inductor) backend.  Skipped without a CUDA GPU."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or getattr(torch.version, "hip", None):
    pytest.skip("needs an NVIDIA GPU with a CUDA build of PyTorch", allow_module_level=True)

from tilewright import ops  # noqa: E402


def _close(got, want, tol):
    err = (got.double() - want).abs().max().item()
    assert err <= tol * max(1.0, want.abs().max().item()), err


@pytest.mark.parametrize("M", [1, 16, 100, 1000])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_matmul_on_gpu(M, dtype):
    g = torch.Generator(device="cuda").manual_seed(M)
    a = torch.randn(M, 512, device="cuda", generator=g).to(dtype)
    w = torch.randn(768, 512, device="cuda", generator=g).to(dtype)
    bias = torch.randn(768, device="cuda", generator=g).to(dtype)
    out = ops.matmul(a, w.t(), bias, "relu")
    _close(out, (a.double() @ w.double().t() + bias.double()).clamp_min(0), 2e-2)


def test_cuda_graph_capture_and_replay():
    a = torch.randn(64, 256, device="cuda").half()
    w = torch.randn(256, 256, device="cuda").half()
    nw = torch.randn(256, device="cuda").half()

    def step():
        return ops.rms_norm(ops.matmul(a, w.t()), nw)

    step()  # compile and load outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    a.copy_(torch.randn_like(a))  # new inputs, same buffers
    graph.replay()
    torch.cuda.synchronize()
    h = a.double() @ w.double().t()
    want = h.half().double() * torch.rsqrt((h.half().double() ** 2).mean(-1, keepdim=True) + 1e-6) * nw.double()
    _close(out, want, 2e-2)


def test_torch_compile_fullgraph_inductor():
    x = torch.randn(32, 512, device="cuda").half()
    w = torch.randn(1024, 512, device="cuda").half()
    nw = torch.randn(512, device="cuda").half()

    def block(x):
        return ops.matmul(ops.rms_norm(x, nw), w.t(), activation="silu") + 1

    compiled = torch.compile(block, fullgraph=True)
    _close(compiled(x), block(x).double(), 1e-2)
