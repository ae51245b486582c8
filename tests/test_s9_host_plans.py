"""Repeat calls of ``tilewright.ops`` after the session-9 host cuts, on the launch path a GPU takes
(``test_s6_host_plans.PointerKernel``: each launch's pointers and sizes turned back into tensors
and run by the interpreter; every allocation poisoned with NaN):

- ``rms_norm`` with a residual: the plan's key holds the residual's type, dtype and device, its
  whole shape is compared with x's every call, its layout and start read per call; a residual of
  another shape, dtype, layout, start or type after good calls is copied or refused, never misread;
- ``return_lse``: the LSE comes from ``empty_like`` of the plan's template (``jit/alloc_template``):
  a new tensor per call of the plan's LSE shape, right after calls of other batch sizes, with and
  without the LSE, prefill and decode, split and not."""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")

from test_s6_host_plans import _attn_ref, _close, _rms_ref, device_path  # noqa: E402, F401
from test_s7_host_plans import _attn_ref_lse  # noqa: E402

from tilewright import ops  # noqa: E402
from tilewright.errors import ArgumentError  # noqa: E402
from tilewright.ops import decode_kernels as dk  # noqa: E402

attn = importlib.import_module("tilewright.ops.attention_dispatch")


# ---------------------------------------------------------------- rms_norm with a residual
def test_residuals_of_every_kind_after_good_calls(device_path):  # noqa: F811
    torch.manual_seed(91)
    x, w = torch.randn(6, 64), torch.randn(64)
    flat = torch.randn(6 * 64 + 1)
    residuals = [torch.randn(6, 64),
                 torch.randn(6, 128)[:, ::2],  # strided: copied
                 torch.randn(64, 6).t(),  # transposed: copied
                 flat[1:].view(6, 64),  # contiguous, off a 16-byte start: copied
                 torch.randn(6, 64)]
    for _ in range(2):  # interleaved: each kind's repeat call comes after the others'
        for r in residuals:
            y, s = ops.rms_norm(x, w, residual=r)
            _close(s, x.double() + r.double(), 1e-6)
            _close(y, _rms_ref(x + r, w, 1e-6), 1e-4)
            _close(ops.rms_norm(x, w), _rms_ref(x, w, 1e-6), 1e-4)  # the plan without a residual between
    for wr in device_path.values():
        assert wr.checked_calls == 0
    # the same key (type, dtype, device; rank and last dimension of x) with another residual shape
    with pytest.raises(ArgumentError, match="residual has shape"):
        ops.rms_norm(x, w, residual=torch.randn(5, 64))
    with pytest.raises(ArgumentError, match="residual has shape"):
        ops.rms_norm(x, w, residual=torch.randn(6, 32))
    with pytest.raises(ArgumentError, match="residual has shape"):
        ops.rms_norm(x, w, residual=torch.randn(2, 3, 64))
    with pytest.raises(ArgumentError, match="dtype"):
        ops.rms_norm(x, w, residual=torch.randn(6, 64).half())
    with pytest.raises(ArgumentError, match="residual"):
        ops.rms_norm(x, w, residual=torch.randn(6, 64).numpy())
    with pytest.raises(ArgumentError, match="residual"):
        ops.rms_norm(x, w, residual=[[0.0] * 64] * 6)
    # x of another row count with a residual of that shape: the same plan, the new rows
    x3, r3 = torch.randn(3, 64), torch.randn(3, 64)
    y, s = ops.rms_norm(x3, w, residual=r3)
    _close(s, x3.double() + r3.double(), 1e-6)
    _close(y, _rms_ref(x3 + r3, w, 1e-6), 1e-4)
    y, s = ops.rms_norm(x, w, residual=residuals[0])  # and the first plan still serves
    _close(y, _rms_ref(x + residuals[0], w, 1e-6), 1e-4)


def test_residual_outputs_are_new_tensors_per_call(device_path):  # noqa: F811
    torch.manual_seed(92)
    x, w, r = torch.randn(4, 64), torch.randn(64), torch.randn(4, 64)
    kept = [ops.rms_norm(x, w, residual=r) for _ in range(3)]
    ptrs = {t.data_ptr() for pair in kept for t in pair}
    assert len(ptrs) == 6  # two outputs per call, none shared
    for y, s in kept:
        _close(y, _rms_ref(x + r, w, 1e-6), 1e-4)
        _close(s, x.double() + r.double(), 1e-6)


# ---------------------------------------------------------------- the LSE from the plan's template
@pytest.mark.parametrize("decode", ["new", "old"])
@pytest.mark.parametrize("case", ["decode", "decode_split", "prefill"])
def test_lse_follows_each_plans_shape(device_path, decode, case, monkeypatch):  # noqa: F811
    monkeypatch.setattr(dk, "KERNEL", decode)
    torch.manual_seed(93)
    splits, causal = (2 if case == "decode_split" else 1), case == "prefill"
    seq = 16 if causal else 1
    kvs = {b: torch.randn(b, 2, 128, 32).half() for b in (1, 2, 3)}
    kept = []
    for i in range(12):  # batches interleaved; with and without the LSE
        b = (1, 2, 3)[i % 3]
        q, kv = torch.randn(b, 4, seq, 32).half(), kvs[b]
        want, want_lse = _attn_ref_lse(q, kv, kv, causal)
        if i % 2:
            out, lse = ops.attention(q, kv, kv, causal=causal, num_splits=splits, return_lse=True)
            assert lse.shape == (b, 4, seq) and lse.dtype == torch.float32 and lse.is_contiguous()
            _close(lse, want_lse, 1e-3)
            kept.append(lse)
        else:
            out = ops.attention(q, kv, kv, causal=causal, num_splits=splits)
        _close(out, want, 3e-3)
    assert len({t.data_ptr() for t in kept}) == len(kept)  # a new LSE per call
    assert len(attn._dense_plans) == 3  # one plan per batch size
    for w in device_path.values():
        assert w.checked_calls == 0
