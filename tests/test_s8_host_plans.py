"""Repeat calls of ``tilewright.ops`` after the session-8 host cuts, on the launch path a GPU takes
(run on the CPU through ``test_s6_host_plans.PointerKernel``: the pointers and sizes each launch
sends are turned back into tensors and run by the interpreter, outputs poisoned with NaN):

- decode attention (``ops/decode_kernels._DecodeRun``): a call with another shape, dtype, stride,
  option or cache re-plans (each one's answer matches float64, interleaved with the others);
  without ``return_lse`` the LSE is not allocated (one allocation per call: the output) and with it
  the LSE is right; the split partials and counters come from one workspace per (device, stream);
- row ops (flat keys, pointers read once): a weight or bias of another layout, start or dtype after
  good calls is copied or refused, never misread."""

from __future__ import annotations

import importlib
import math

import pytest

torch = pytest.importorskip("torch")

from test_s6_host_plans import (  # noqa: E402
    PoisonTorch,
    _close,
    _ln_ref,
    _rms_ref,
    device_path,  # noqa: F401 (a fixture)
    wrap_op_kernels,
)

from tilewright import ops  # noqa: E402
from tilewright.errors import ArgumentError  # noqa: E402
from tilewright.ops import decode_kernels as dk  # noqa: E402

attn = importlib.import_module("tilewright.ops.attention_dispatch")
rows_mod = importlib.import_module("tilewright.ops.rows")


def _decode_ref(q, k, v, scale=None, lens=None):
    """(out, lse) in float64 of one query token per sequence (GQA: k/v heads repeated)."""
    g = q.shape[1] // k.shape[1]
    kd, vd = k.double().repeat_interleave(g, 1), v.double().repeat_interleave(g, 1)
    s = q.double() @ kd.transpose(-1, -2) * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
    if lens is not None:
        keep = torch.arange(k.shape[2])[None, :] < lens.long()[:, None]  # (batch, keys)
        s = s.masked_fill(~keep[:, None, None, :], -math.inf)
    return torch.softmax(s, -1) @ vd, torch.logsumexp(s, -1)


def _decode_cases():
    torch.manual_seed(81)
    flat = torch.randn(4 * 32 + 16).half()
    base_kv = torch.randn(1, 2, 64, 32).half()
    return {
        "base": (torch.randn(1, 4, 1, 32).half(), base_kv, base_kv, {}),
        "batch 2": (torch.randn(2, 4, 1, 32).half(), torch.randn(2, 2, 64, 32).half(),
                    torch.randn(2, 2, 64, 32).half(), {}),
        "96 keys": (torch.randn(1, 4, 1, 32).half(), torch.randn(1, 2, 96, 32).half(),
                    torch.randn(1, 2, 96, 32).half(), {}),
        "bf16": (torch.randn(1, 4, 1, 32).bfloat16(), base_kv.bfloat16(), base_kv.bfloat16(), {}),
        "bshd k/v": (torch.randn(1, 4, 1, 32).half(), torch.randn(1, 64, 2, 32).half().transpose(1, 2),
                     torch.randn(1, 64, 2, 32).half().transpose(1, 2), {}),
        "scale": (torch.randn(1, 4, 1, 32).half(), base_kv, base_kv, {"scale": 0.3}),
        "2 splits": (torch.randn(1, 4, 1, 32).half(), base_kv, base_kv, {"num_splits": 2}),
        "MHA": (torch.randn(1, 2, 1, 32).half(), base_kv, base_kv, {}),
        "cache": (torch.randn(2, 4, 1, 32).half(), torch.randn(2, 2, 64, 32).half(),
                  torch.randn(2, 2, 64, 32).half(), {"cache_seqlens": torch.tensor([5, 64], dtype=torch.int32)}),
        "misaligned q": (flat[8 + 1:8 + 1 + 128].view(1, 4, 1, 32), base_kv, base_kv, {}),  # base's key: declined, copied
    }


def test_decode_plans_follow_every_signature_change(device_path):  # noqa: F811
    cases = _decode_cases()
    order = list(cases) * 3  # interleaved: each signature's repeat calls come after the others'
    for i, name in enumerate(order):
        q, k, v, kw = cases[name]
        q = q.clone() if name != "misaligned q" else q  # a fresh q (new pointer) for every call
        want, want_lse = _decode_ref(q, k, v, kw.get("scale"), kw.get("cache_seqlens"))
        if i % 2:
            out, lse = ops.attention(q, k, v, return_lse=True, **kw)
            assert lse.shape == q.shape[:3] and lse.dtype == torch.float32
            finite = torch.isfinite(want_lse)
            assert torch.equal(torch.isfinite(lse), finite)
            assert (lse.double()[finite] - want_lse[finite]).abs().max().item() < 1e-2, name
        else:
            out = ops.attention(q, k, v, **kw)
        assert out.shape == q.shape and out.dtype == q.dtype
        _close(out, want, 1e-2)
    for w in device_path.values():
        assert w.checked_calls == 0
    # every signature but the copied q and the CPU cache lengths (read on the host every call) keeps a plan
    assert len(attn._dense_plans) == len(cases) - 2
    assert all(isinstance(p, dk._DecodeRun) for p in attn._dense_plans.values())


class CountingTorch(PoisonTorch):
    """PoisonTorch counting the allocations the ops make (``empty``/``empty_like``)."""

    made: list = []

    @staticmethod
    def empty(*shape, **kw):
        CountingTorch.made.append("empty")
        return PoisonTorch.empty(*shape, **kw)

    @staticmethod
    def empty_like(*a, **kw):
        CountingTorch.made.append("empty_like")
        return PoisonTorch.empty_like(*a, **kw)


@pytest.mark.parametrize("splits", [1, 2])
def test_decode_repeat_call_allocates_only_what_it_returns(monkeypatch, splits):
    from test_s6_host_plans import PointerKernel

    wrap_op_kernels(monkeypatch, PointerKernel)
    monkeypatch.setattr(attn, "_torch", lambda: CountingTorch())
    try:
        q, kv = torch.randn(1, 4, 1, 32).half(), torch.randn(1, 2, 128, 32).half()
        for _ in range(2):  # the first call binds, the second leaves the plan
            ops.attention(q, kv, kv, num_splits=splits)
        assert isinstance(next(iter(attn._dense_plans.values())), dk._DecodeRun)
        want, want_lse = _decode_ref(q, kv, kv)
        CountingTorch.made.clear()
        _close(ops.attention(q, kv, kv, num_splits=splits), want, 1e-2)
        assert CountingTorch.made == ["empty_like"]  # the output only: no LSE, no partials
        ops.attention(q, kv, kv, num_splits=splits, return_lse=True)  # (the first makes the LSE's template)
        CountingTorch.made.clear()
        out, lse = ops.attention(q, kv, kv, num_splits=splits, return_lse=True)
        assert CountingTorch.made == ["empty_like", "empty_like"]  # the output and the LSE asked for
        _close(out, want, 1e-2)
        _close(lse.view(want_lse.shape), want_lse, 1e-3)
    finally:
        ops.forget_plans()


def test_stream_workspaces_are_apart_per_stream_and_grow():
    cpu = torch.device("cpu")
    saved = (dict(dk._per_stream), dict(dk._partials), dict(dk._counters))
    try:
        a = dk._stream_workspace(cpu, -1, 11, 100, 4)
        assert dk._stream_workspace(cpu, -1, 11, 50, 2) == a  # big enough: the same buffers
        b = dk._stream_workspace(cpu, -1, 12, 100, 4)
        assert b[0] != a[0] and b[2] != a[2]  # another stream (may run at the same time): its own
        c = dk._stream_workspace(cpu, -1, 11, 1000, 4)
        assert c[1] >= 1000 and c[3] >= 4 and dk._partials[(-1, 11)].numel() == c[1]
        d = dk._stream_workspace(cpu, -1, 11, 10, 40)
        assert d[3] >= 40 and d[1] == c[1] and d[0] == c[0]  # more counters: the partials stay
        assert int(dk._counters[(-1, 11)].abs().sum()) == 0  # counters start at zero
    finally:
        for store, old in zip((dk._per_stream, dk._partials, dk._counters), saved):
            store.clear()
            store.update(old)


# ---------------------------------------------------------------- row ops: weight and bias per call
def test_row_weights_of_other_layouts_after_good_calls(device_path):  # noqa: F811
    torch.manual_seed(82)
    x, w, b = torch.randn(6, 64), torch.randn(64), torch.randn(64)
    flat = torch.randn(2 * 64 + 1)
    weights = [w, torch.randn(128)[::2],  # strided (not contiguous): copied
               flat[1:65],  # contiguous, off a 16-byte boundary: copied
               w.clone(), w]
    for _ in range(2):
        for wx in weights:
            _close(ops.rms_norm(x, wx), _rms_ref(x, wx, 1e-6), 1e-4)
            y, s = ops.rms_norm(x, wx, residual=x * 0.5)
            _close(y, _rms_ref(x * 1.5, wx, 1e-6), 1e-4)
            _close(ops.layer_norm(x, wx, b), _ln_ref(x, wx, b, 1e-5), 1e-4)
            _close(ops.layer_norm(x, w, wx), _ln_ref(x, w, wx, 1e-5), 1e-4)  # as the bias
    for wr in device_path.values():
        assert wr.checked_calls == 0
    with pytest.raises(ArgumentError, match="dtype"):
        ops.rms_norm(x, w.half())
    with pytest.raises(ArgumentError, match="weight"):
        ops.rms_norm(x, w[:32])
    with pytest.raises(ArgumentError, match="weight"):
        ops.layer_norm(x, torch.randn(2, 64), b)
    with pytest.raises(ArgumentError, match="torch.Tensor"):
        ops.rms_norm(x, w.numpy())
    with pytest.raises(ArgumentError, match="eps"):
        ops.rms_norm(x, w, eps=[1e-6])  # unhashable: no memo, the check explains
    _close(ops.rms_norm(x, w), _rms_ref(x, w, 1e-6), 1e-4)  # and the good plan still serves


def _split_decode_run():
    """(q, kv, the split decode plan their repeat call is served by)."""
    q, kv = torch.randn(1, 4, 1, 32).half(), torch.randn(1, 2, 128, 32).half()
    for _ in range(2):
        ops.attention(q, kv, kv, num_splits=2)
    run = next(iter(attn._dense_plans.values()))
    assert isinstance(run, dk._DecodeRun) and run.split
    return q, kv, run


def test_the_default_stream_skips_the_capture_query(monkeypatch):
    """A repeat split call on the legacy default stream (0, where no graph can be captured) asks
    no capture query and uses the stream's workspace; on another stream it asks."""
    from test_s6_host_plans import PointerKernel

    wrap_op_kernels(monkeypatch, PointerKernel)
    saved = (dict(dk._per_stream), dict(dk._partials), dict(dk._counters))
    try:
        q, kv, run = _split_decode_run()
        asked = []
        monkeypatch.setattr(run, "capturing", lambda: asked.append(1) or False)
        want, _ = _decode_ref(q, kv, kv)
        for stream, queries in ((0, 0), (5, 1)):
            monkeypatch.setattr(run, "stream_of", lambda dev, s=stream: s)
            _close(ops.attention(q, kv, kv, num_splits=2), want, 1e-2)
            assert len(asked) == queries
            assert (run.dev, stream) in dk._per_stream  # the stream's workspace served the call
    finally:
        ops.forget_plans()
        for store, old in zip((dk._per_stream, dk._partials, dk._counters), saved):
            store.clear()
            store.update(old)


def test_a_graph_capture_gets_partials_and_counters_of_its_own(monkeypatch):
    from test_s6_host_plans import PointerKernel

    wrap_op_kernels(monkeypatch, PointerKernel)
    monkeypatch.setattr(attn, "_torch", lambda: CountingTorch())
    try:
        q, kv, run = _split_decode_run()
        monkeypatch.setattr(run, "dev", 0)  # as on a GPU, whose current stream is capturing:
        monkeypatch.setattr(dk, "_capturing", lambda dev: True)  # (the checked path's query)
        monkeypatch.setattr(run, "capturing", lambda: True)  # (the repeat call's, looked up once)
        monkeypatch.setattr(run, "stream_of", lambda dev: 7)  # (a capture stream: never the default 0)
        workspaces = dict(dk._per_stream)
        CountingTorch.made.clear()
        want, _ = _decode_ref(q, kv, kv)
        _close(ops.attention(q, kv, kv, num_splits=2), want, 1e-2)
        assert dk._per_stream == workspaces  # no stream workspace used or made
        assert CountingTorch.made.count("empty") == 3  # out, lse and the capture's own partials
    finally:
        ops.forget_plans()
