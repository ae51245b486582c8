"""Prepared launches and the allocations cut from a repeat call, on a GPU: row ops alternating row
counts (one prepared launch each: a wrong one launches the wrong number of rows), matmul's
pointer launches of transposed operands, attention without the LSE (written to the scratch buffer)
alternating with calls that return it, and a kernel's out_idx outputs; every output the ops
allocate poisoned (NaN) first, against float64.  Skipped without a CUDA GPU."""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or getattr(torch.version, "hip", None):
    pytest.skip("needs an NVIDIA GPU with a CUDA build of PyTorch", allow_module_level=True)

from test_s6_host_gpu import _attn_ref, _close, poisoned  # noqa: E402,F401 (poisoned: a fixture)

import tilewright  # noqa: E402
import tilewright.language as T  # noqa: E402
from tilewright import ops  # noqa: E402

dispatch = importlib.import_module("tilewright.ops.dispatch")
attn = importlib.import_module("tilewright.ops.attention_dispatch")


def test_row_ops_alternating_row_counts(poisoned):  # noqa: F811
    w, b = torch.randn(1024, device="cuda").half(), torch.randn(1024, device="cuda").half()
    for n_rows in (64, 64, 7, 64, 7, 1, 300, 7, 64):
        x, r = torch.randn(n_rows, 1024, device="cuda").half(), torch.randn(n_rows, 1024, device="cuda").half()
        xd = x.double()
        _close(ops.softmax(x), torch.softmax(xd, -1), 2e-3)
        ref = xd / (xd.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt() * w.double()
        _close(ops.rms_norm(x, w), ref, 1e-2)
        y, s = ops.rms_norm(x, w, residual=r)
        sd = s.double()
        _close(s, xd + r.double(), 1e-2)
        _close(y, sd / (sd.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt() * w.double(), 2e-2)
        m = xd.mean(-1, keepdim=True)
        _close(ops.layer_norm(x, w, b), (xd - m) / ((xd - m).pow(2).mean(-1, keepdim=True) + 1e-5).sqrt()
               * w.double() + b.double(), 1e-2)


def test_matmul_pointer_launches_of_transposed_operands(poisoned):  # noqa: F811
    bias = torch.randn(256, device="cuda").half()
    for a_t, b_t, with_bias in ((False, False, False), (True, False, True), (False, True, True), (True, True, False)):
        for _ in range(4):
            a = torch.randn(256, 256, device="cuda").half()
            b = torch.randn(256, 256, device="cuda").half()
            a, b = (a.t() if a_t else a), (b.t() if b_t else b)
            want = a.double() @ b.double() + (bias.double() if with_bias else 0)
            _close(ops.matmul(a, b, bias=bias if with_bias else None), want, 2e-2)


@pytest.mark.parametrize("case", ["decode", "prefill"])
def test_attention_lse_scratch_and_returned_lse(poisoned, case):  # noqa: F811
    kv = torch.randn(4, 8, 512, 128, device="cuda").half()
    causal = case == "prefill"
    for i in range(6):
        q = torch.randn(4, 32, 128 if causal else 1, 128, device="cuda").half()
        want = _attn_ref(q, kv, kv, causal)
        if i % 2:
            out, lse = ops.attention(q, kv, kv, causal=causal, return_lse=True)
            assert not lse.isnan().any() and lse.isfinite().all()
        else:
            out = ops.attention(q, kv, kv, causal=causal)
        _close(out, want, 5e-3)
    torch.cuda.synchronize()


def test_out_idx_outputs_on_the_gpu():
    @T.prim_func
    def add(A: T.Tensor((1024,), "float32"), B: T.Tensor((1024,), "float32"), C: T.Tensor((1024,), "float32")):
        with T.Kernel(8, threads=128) as bx:
            for i in T.Parallel(128):
                C[bx * 128 + i] = A[bx * 128 + i] + B[bx * 128 + i]

    k = tilewright.compile(add, target="cuda", out_idx=[2])
    for _ in range(3):
        a, b = torch.randn(1024, device="cuda"), torch.randn(1024, device="cuda")
        want = a.double() + b.double()  # (fresh inputs: stale memory under a new output cannot match)
        c = k(a, b)
        assert (c.double() - want).abs().max().item() <= 1e-6 * want.abs().max().item()
    with pytest.raises(tilewright.errors.ArgumentError):
        k(a, b, torch.empty(512, device="cuda"))  # a passed output is still checked
