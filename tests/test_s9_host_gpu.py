"""The session-9 host cuts on a CUDA GPU, against float64 with the ops' allocations poisoned (NaN)
where the ops make them: LSEs from the plans' templates (prefill and decode, batch sizes
interleaved, back to back), rms_norm with residuals of every layout, and JITKernel launches from
one argument buffer (out_idx outputs from a template; new inputs and outputs each call, checked
each call).  Skipped without a CUDA GPU."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or getattr(torch.version, "hip", None):
    pytest.skip("needs an NVIDIA GPU with a CUDA build of PyTorch", allow_module_level=True)

from test_s6_host_gpu import _close, poisoned  # noqa: E402,F401 (poisoned: a fixture)

import tilewright  # noqa: E402
import tilewright.language as T  # noqa: E402
from tilewright import ops  # noqa: E402
from tilewright.errors import ArgumentError  # noqa: E402


def _ref_lse(q, k, v, causal):
    g = q.shape[1] // k.shape[1]
    k, v = k.double().repeat_interleave(g, 1), v.double().repeat_interleave(g, 1)
    s = q.double() @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        sq, sk = s.shape[-2], s.shape[-1]
        s = s.masked_fill(~torch.ones(sq, sk, dtype=torch.bool, device=s.device).tril(sk - sq), -math.inf)
    return torch.softmax(s, -1) @ v, torch.logsumexp(s, -1)


@pytest.mark.parametrize("case", ["decode", "decode one split", "prefill"])
def test_lse_from_templates_back_to_back(poisoned, case):  # noqa: F811
    torch.manual_seed(95)
    seq, causal = (128, True) if case == "prefill" else (1, False)
    splits = 1 if case == "decode one split" else None
    kvs = {b: torch.randn(b, 8, 512, 128, device="cuda").half() for b in (1, 3)}
    runs = []
    for i in range(8):  # back to back, no synchronize between: every LSE a tensor of its own
        b = (1, 3)[i % 2]
        q = torch.randn(b, 32, seq, 128, device="cuda").half()
        runs.append((q, kvs[b], ops.attention(q, kvs[b], kvs[b], causal=causal, num_splits=splits, return_lse=True)))
    for q, kv, (out, lse) in runs:
        want, want_lse = _ref_lse(q, kv, kv, causal)
        assert lse.shape == q.shape[:3] and lse.dtype == torch.float32 and lse.is_contiguous()
        _close(out, want, 5e-3)
        _close(lse, want_lse, 1e-3)


def test_residuals_of_every_layout(poisoned):  # noqa: F811
    torch.manual_seed(96)
    x, w = torch.randn(64, 1024, device="cuda").half(), torch.randn(1024, device="cuda").half()
    flat = torch.randn(64 * 1024 + 8, device="cuda").half()
    for r in (torch.randn(64, 1024, device="cuda").half(), torch.randn(1024, 64, device="cuda").half().t(),
              flat[1:1 + 64 * 1024].view(64, 1024), x) * 2:
        y, s = ops.rms_norm(x, w, residual=r)
        xs = x.double() + r.double()
        _close(s, xs, 1e-3)
        _close(y, xs / (xs.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt() * w.double(), 2e-2)
    with pytest.raises(ArgumentError, match="residual has shape"):
        ops.rms_norm(x, w, residual=torch.randn(32, 1024, device="cuda").half())


def test_jit_kernel_buffer_and_out_idx():
    @T.prim_func
    def add(A: T.Tensor((4096,), "float32"), B: T.Tensor((4096,), "float32"), C: T.Tensor((4096,), "float32")):
        with T.Kernel(32, threads=128) as bx:
            for i in T.Parallel(128):
                C[bx * 128 + i] = A[bx * 128 + i] + B[bx * 128 + i]

    k = tilewright.compile(add, target="cuda")
    k2 = tilewright.compile(add, out_idx=[-1], target="cuda")
    torch.manual_seed(97)
    runs = []
    for _ in range(6):
        a, b = torch.randn(4096, device="cuda"), torch.randn(4096, device="cuda")
        c = torch.full((4096,), float("nan"), device="cuda")
        k(a, b, c)
        runs.append((a, b, c, k2(a, b)))
    for a, b, c, c2 in runs:
        want = a.double() + b.double()
        _close(c, want, 1e-6)
        _close(c2, want, 1e-6)
    assert len({r[3].data_ptr() for r in runs}) == len(runs)
    with pytest.raises(ArgumentError, match="C"):
        k(a, b, torch.empty(4095, device="cuda"))
    with pytest.raises(ArgumentError, match="A"):
        k2(a.double(), b)
    with pytest.raises(ArgumentError):
        k(a.cpu(), b, c)
