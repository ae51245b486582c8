"""The ops' last-call memo (tests/test_s12_last_key.py) on a GPU: a signature's repeat calls leave
it in the memo, then every call that changes a shape, the strides, a dtype, the start's alignment,
an option or the device (the CPU) is checked against float64 with poisoned outputs, the memo's
signature called again between them.  Skipped without a CUDA GPU."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or getattr(torch.version, "hip", None):
    pytest.skip("needs an NVIDIA GPU with a CUDA build of PyTorch", allow_module_level=True)

from test_s6_host_gpu import _attn_ref, _close, poisoned  # noqa: E402,F401 - poisoned: a fixture (the ops' outputs NaN)

from tilewright import ops  # noqa: E402


def _misaligned(x):
    """A copy of ``x`` (contiguous, on its device) whose start is 2 elements past a 16-byte boundary."""
    flat = torch.empty(x.numel() + 2, dtype=x.dtype, device=x.device)
    return flat[2:].view(x.shape).copy_(x)


def _rms(x, w, eps=1e-6):
    xd = x.double()
    return xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + eps) * w.double()


def _ln(x, w, b, eps=1e-5):
    xd = x.double()
    m = xd.mean(-1, keepdim=True)
    return (xd - m) * torch.rsqrt((xd - m).pow(2).mean(-1, keepdim=True) + eps) * w.double() + b.double()


@pytest.mark.usefixtures("poisoned")
def test_row_ops_and_matmul_memo_on_the_gpu():
    torch.manual_seed(1210)
    dev = "cuda"
    x, w, b = (torch.randn(*s, device=dev).half() for s in ((61, 1024), (1024,), (1024,)))
    a, g = torch.randn(77, 256, device=dev).half(), torch.randn(256, 256, device=dev).half()

    def base():
        _close(ops.softmax(x), torch.softmax(x.double(), -1), 2e-3)
        _close(ops.rms_norm(x, w), _rms(x, w), 2e-2)
        _close(ops.layer_norm(x, w, b), _ln(x, w, b), 2e-2)
        _close(ops.matmul(a, g), a.double() @ g.double(), 2e-2)

    for _ in range(3):
        base()
    xs = torch.randn(61, 2048, device=dev).half()[:, ::2]  # strided, same shape
    x7 = torch.randn(7, 3, 1024, device=dev).half()  # another rank (the same kernels: fewer builds)
    xc, wc, bc, ac, gc = x[:5].float().cpu(), w.float().cpu(), b.float().cpu(), a[:9].cpu(), g[:, :16].cpu()
    for xx, ww, bb, aa, gg in ((xs, w, b, a.t().contiguous().t(), g), (x7, w, b, a[:13], g),
                               (x.bfloat16(), w.bfloat16(), b.bfloat16(), a.bfloat16(), g.bfloat16()),
                               (_misaligned(x), _misaligned(w), b, _misaligned(a), g), (xc, wc, bc, ac, gc)):
        for _ in range(2):
            _close(ops.softmax(xx), torch.softmax(xx.double(), -1), 1e-2)
            _close(ops.rms_norm(xx, ww, eps=1e-3), _rms(xx, ww, 1e-3), 3e-2)
            y, s = ops.rms_norm(xx, ww, residual=xx)
            _close(s, 2 * xx.double(), 1e-2)
            _close(y, _rms(xx + xx, ww), 3e-2)
            _close(ops.layer_norm(xx, ww, bb), _ln(xx, ww, bb), 3e-2)
            _close(ops.matmul(aa, gg, activation="relu"), (aa.double() @ gg.double()).clamp_min(0), 2e-2)
        base()


@pytest.mark.usefixtures("poisoned")
def test_attention_memo_on_the_gpu():
    torch.manual_seed(1211)
    dev = "cuda"  # (the shapes of bench/launch_overhead.py's rows: their kernels are built already)
    q, kv = torch.randn(4, 32, 1, 128, device=dev).half(), torch.randn(4, 8, 512, 128, device=dev).half()

    def base():
        _close(ops.attention(q, kv, kv), _attn_ref(q, kv, kv), 3e-3)

    for _ in range(3):
        base()
    qp, kp = torch.randn(1, 8, 128, 64, device=dev).half(), torch.randn(1, 8, 128, 64, device=dev).half()
    bshd = torch.randn(4, 512, 8, 128, device=dev).half().transpose(1, 2)  # other strides, same shape
    kv301 = torch.randn(4, 8, 301, 128, device=dev).half()  # ragged key blocks
    q1, kv1 = q[:1].clone(), kv[:1].clone()
    qc, kvc = q[:1, :4].cpu(), kv[:1, :1, :40].cpu()  # the CPU (the interpreter)
    for call, want, tol in (
        (lambda: ops.attention(qp, kp, kp, causal=True), _attn_ref(qp, kp, kp, True), 3e-3),
        (lambda: ops.attention(q, bshd, bshd), _attn_ref(q, bshd, bshd), 3e-3),
        (lambda: ops.attention(q1, kv1, kv1), _attn_ref(q1, kv1, kv1), 3e-3),
        (lambda: ops.attention(q, kv301, kv301), _attn_ref(q, kv301, kv301), 3e-3),
        (lambda: ops.attention(q, kv, kv, num_splits=1), _attn_ref(q, kv, kv), 3e-3),
        (lambda: ops.attention(_misaligned(q), kv, kv), _attn_ref(q, kv, kv), 3e-3),
        (lambda: ops.attention(q.bfloat16(), kv.bfloat16(), kv.bfloat16()),
         _attn_ref(q.bfloat16(), kv.bfloat16(), kv.bfloat16()), 2e-2),
        (lambda: ops.attention(qc, kvc, kvc), _attn_ref(qc, kvc, kvc), 3e-3),
    ):
        for _ in range(2):  # the first call leaves the plan, the second is served by it (and the memo)
            _close(call(), want, tol)
        base()
