"""``ops.attention``'s in-frame repeat path (``attention_dispatch.attention``: a dense call whose key
equals the last call's is served without ``_attention``'s frames), through the pointer path of
``test_s6_host_plans`` (results against float64 on fresh random inputs, outputs poisoned with NaN).
A repeat call skips ``_attention``; every change of what the key holds -- shape, dtype, strides,
device, tensor class, an option's value or type, a cache_seqlens tensor, autograd, a forgotten
plan -- goes back through it (its checks and plan lookup) and gets the right answer or the right
error, never a stale plan."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from test_s6_host_plans import (  # noqa: E402,F401 (device_path: a fixture)
    OnDevice,
    _attn_ref,
    _close,
    device_path,
)

from tilewright import ops  # noqa: E402
from tilewright.errors import ArgumentError  # noqa: E402

attn = importlib.import_module("tilewright.ops.attention_dispatch")


@pytest.fixture
def counted(monkeypatch):
    """Calls of ``_attention`` (the path every call took before the in-frame repeat path)."""
    calls = []
    real = attn._attention

    def spy(*a):
        calls.append(a)
        return real(*a)

    monkeypatch.setattr(attn, "_attention", spy)
    return calls


def _q(b=1, h=4, s=1, d=32, dtype=torch.float16):
    return torch.randn(b, h, s, d).to(dtype)


@pytest.mark.parametrize("case", ["decode", "decode_split", "prefill"])
def test_repeat_calls_skip_the_general_entry_and_stay_right(device_path, counted, case):  # noqa: F811
    torch.manual_seed(41)
    kv = torch.randn(1, 2, 128, 32).half()
    splits, causal, s = (2 if case == "decode_split" else 1), case == "prefill", 16 if case == "prefill" else 1
    for _ in range(6):
        q = _q(s=s)  # fresh inputs: a launch left out would leave the poisoned (NaN) output
        out, lse = ops.attention(q, kv, kv, causal=causal, num_splits=splits, return_lse=True)
        _close(out, _attn_ref(q, kv, kv, causal), 3e-3)
        assert not lse.isnan().any()
        _close(ops.attention(q, kv, kv, causal=causal, num_splits=splits), _attn_ref(q, kv, kv, causal), 3e-3)
    # the first calls bind and leave the plan; from then on the in-frame path serves every call
    assert 0 < len(counted) <= 4
    n = len(counted)
    for _ in range(3):
        q = _q(s=s)
        _close(ops.attention(q, kv, kv, causal=causal, num_splits=splits), _attn_ref(q, kv, kv, causal), 3e-3)
    assert len(counted) == n


def _changes(kv):
    """(name, q, k, v, options, error text or None) of calls that differ from the warm-up's in one thing."""
    wide = torch.randn(1, 2, 128, 64).half()
    return [
        ("batch", _q(b=2), torch.randn(2, 2, 128, 32).half(), None, {}, None),
        ("keys", _q(), torch.randn(1, 2, 64, 32).half(), None, {}, None),
        ("heads", _q(h=2), kv, None, {}, None),
        ("dtype", _q(dtype=torch.bfloat16), kv.bfloat16(), None, {}, None),
        ("dtype of k only", _q(), kv.bfloat16(), None, {}, "dtype"),
        ("strides of k", _q(), wide[..., :32], None, {}, None),  # same shape, other strides
        ("strides of q", torch.randn(1, 1, 4, 32).half().transpose(1, 2), kv, None, {}, None),
        ("device", _q(), kv, kv.as_subclass(OnDevice), {}, "one device"),
        ("meta device", _q().to("meta"), kv.to("meta"), None, {}, "meta"),
        ("scale value", _q(), kv, None, {"scale": 0.5}, None),
        ("scale type", _q(), kv, None, {"scale": np.float64(0.25)}, None),
        ("bad scale", _q(), kv, None, {"scale": -1.0}, "scale"),
        ("causal", _q(), kv, None, {"causal": True}, None),
        ("causal type", _q(), kv, None, {"causal": 1}, "causal"),
        ("num_splits", _q(), kv, None, {"num_splits": 2}, None),
        ("num_splits type", _q(), kv, None, {"num_splits": [2]}, "num_splits"),
        ("cache_seqlens", _q(), kv, None, {"cache_seqlens": torch.tensor([100], dtype=torch.int32)}, None),
    ]


def _ref(q, k, v, opts):
    k, v = k.float(), v.float()
    if "cache_seqlens" in opts:
        n = int(opts["cache_seqlens"][0])
        k, v = k[:, :, :n], v[:, :, :n]
    scale = float(opts.get("scale", 1 / q.shape[-1] ** 0.5))
    g = q.shape[1] // k.shape[1]
    k, v = k.double().repeat_interleave(g, 1), v.double().repeat_interleave(g, 1)
    s = q.double() @ k.transpose(-1, -2) * scale
    if opts.get("causal"):
        sq, sk = s.shape[-2], s.shape[-1]
        s = s.masked_fill(~torch.ones(sq, sk, dtype=torch.bool).tril(sk - sq), float("-inf"))
    return torch.softmax(s, -1) @ v


@pytest.mark.parametrize("index", range(17))
def test_every_change_goes_back_through_the_checks(device_path, counted, index):  # noqa: F811
    torch.manual_seed(42 + index)
    kv = torch.randn(1, 2, 128, 32).half()
    for _ in range(4):  # the plan of (1, 4, 1, 32) x (1, 2, 128, 32) and its in-frame repeats
        q = _q()
        _close(ops.attention(q, kv, kv), _attn_ref(q, kv, kv), 3e-3)
    before = len(counted)
    name, q, k, v, opts, error = _changes(kv)[index]
    v = k if v is None else v
    if error:
        with pytest.raises(ArgumentError, match=error):
            ops.attention(q, k, v, **opts)
    else:
        _close(ops.attention(q, k, v, **opts), _ref(q, k, v, opts), 3e-3)
    assert len(counted) == before + 1, name  # the changed call took the checked entry
    q = _q()  # and the warm-up's signature is still served right afterwards
    _close(ops.attention(q, kv, kv), _attn_ref(q, kv, kv), 3e-3)


def test_autograd_forget_and_the_knob_take_the_general_entry(device_path, counted, monkeypatch):  # noqa: F811
    torch.manual_seed(43)
    kv = torch.randn(1, 2, 128, 32).half()
    for _ in range(4):
        ops.attention(_q(), kv, kv)
    n = len(counted)
    q = _q().requires_grad_()  # the custom op (which says there is no backward), not the plan
    _close(ops.attention(q, kv, kv).detach(), _attn_ref(q.detach(), kv, kv), 3e-3)
    assert len(counted) == n + 1
    with torch.no_grad():  # no autograd: the plan again
        ops.attention(q, kv, kv)
    assert len(counted) == n + 1
    ops.forget_plans()
    ops.attention(_q(), kv, kv)
    assert len(counted) == n + 2
    monkeypatch.setattr(attn, "FAST_ENTRY", False)
    for _ in range(3):
        q = _q()
        _close(ops.attention(q, kv, kv), _attn_ref(q, kv, kv), 3e-3)
    assert len(counted) == n + 5


def test_torch_compile_traces_no_memo_after_a_plan_exists(device_path):  # noqa: F811
    torch.manual_seed(44)
    kv = torch.randn(1, 2, 128, 32).half()
    for _ in range(4):  # a plan, and the memo's last key, exist before tracing
        ops.attention(_q(), kv, kv)
    assert attn._dense_plans.last[1] is not None

    def block(q):
        return ops.attention(q, kv, kv) * 2

    q = _q()
    compiled = torch.compile(block, fullgraph=True, backend="aot_eager")  # fullgraph: a break would raise
    _close(compiled(q), 2 * _attn_ref(q, kv, kv), 6e-3)
    explanation = torch._dynamo.explain(block)(q)
    assert explanation.graph_break_count == 0 and explanation.graph_count == 1


# ---------------------------------------------------------------- rms_norm's in-frame repeat path
@pytest.fixture
def counted_rows(monkeypatch):
    """Calls of ``rows.rms_norm_impl`` (the lookup every rms_norm call took before the in-frame path)."""
    rows_mod = importlib.import_module("tilewright.ops.rows")
    calls = []
    real = rows_mod.rms_norm_impl

    def spy(*a):
        calls.append(a)
        return real(*a)

    monkeypatch.setattr(rows_mod, "rms_norm_impl", spy)
    return calls


def _rms(x, w, eps=1e-6, r=None):
    x = x.double() + (0 if r is None else r.double())
    return x / (x.pow(2).mean(-1, keepdim=True) + eps).sqrt() * w.double()


@pytest.mark.parametrize("with_residual", [False, True])
def test_rms_norm_repeat_calls_skip_the_lookup_and_stay_right(device_path, counted_rows, with_residual):  # noqa: F811
    torch.manual_seed(45)
    w = torch.randn(96).half()
    for i in range(5):
        x = torch.randn(3 + i % 2, 96).half()  # row counts vary: not in the key
        r = torch.randn_like(x) if with_residual else None
        if with_residual:
            y, s = ops.rms_norm(x, w, residual=r)
            _close(s, (x.double() + r.double()), 1e-3)
            assert s.data_ptr() != y.data_ptr()
        else:
            y = ops.rms_norm(x, w)
        _close(y, _rms(x, w, r=r), 3e-3)
    assert len(counted_rows) == 1  # the first call; then the in-frame path


def _row_changes():
    w = torch.randn(96).half()
    return [
        ("dtype", torch.randn(4, 96), w.float(), 1e-6, None, None),
        ("dtype of x only", torch.randn(4, 96), w, 1e-6, None, "dtype"),
        ("width", torch.randn(4, 64).half(), torch.randn(64).half(), 1e-6, None, None),
        ("rank", torch.randn(2, 2, 96).half(), w, 1e-6, None, None),
        ("weight length", torch.randn(4, 96).half(), torch.randn(95).half(), 1e-6, None, "elements"),
        ("device", torch.randn(4, 96).half().as_subclass(OnDevice), w, 1e-6, None, "one device|device"),
        ("eps value", torch.randn(4, 96).half(), w, 1e-2, None, None),
        ("eps type", torch.randn(4, 96).half(), w, np.float64(1e-2), None, None),
        ("bad eps", torch.randn(4, 96).half(), w, -1.0, None, "eps"),
        ("residual", torch.randn(4, 96).half(), w, 1e-6, torch.randn(4, 96).half(), None),
        ("residual shape", torch.randn(4, 96).half(), w, 1e-6, torch.randn(2, 96).half(), "residual"),
        ("strided x", torch.randn(4, 192).half()[:, ::2], w, 1e-6, None, None),
    ]


@pytest.mark.parametrize("index", range(12))
def test_rms_norm_changes_go_back_through_the_checks(device_path, counted_rows, index):  # noqa: F811
    torch.manual_seed(46 + index)
    w = torch.randn(96).half()
    for _ in range(3):
        x = torch.randn(4, 96).half()
        _close(ops.rms_norm(x, w), _rms(x, w), 3e-3)
    before = len(counted_rows)
    name, x, w2, eps, r, error = _row_changes()[index]
    if error:
        with pytest.raises(ArgumentError, match=error):
            ops.rms_norm(x, w2, eps, residual=r)
    else:
        got = ops.rms_norm(x, w2, eps, residual=r)
        _close(got[0] if r is not None else got, _rms(x, w2, float(eps), r), 3e-3)
    if name != "strided x":  # (strides are not in the row key: _dense copies per call, in either path)
        assert len(counted_rows) == before + 1, name
    x = torch.randn(4, 96).half()  # and the warm-up's signature is still served right afterwards
    _close(ops.rms_norm(x, w), _rms(x, w), 3e-3)


def test_rms_norm_under_torch_compile_after_a_plan(device_path):  # noqa: F811
    torch.manual_seed(47)
    w = torch.randn(96).half()
    for _ in range(3):
        ops.rms_norm(torch.randn(4, 96).half(), w)

    def block(x):
        return ops.rms_norm(x, w) * 2

    x = torch.randn(4, 96).half()
    compiled = torch.compile(block, fullgraph=True, backend="aot_eager")
    _close(compiled(x), 2 * _rms(x, w), 6e-3)
    explanation = torch._dynamo.explain(block)(x)
    assert explanation.graph_break_count == 0 and explanation.graph_count == 1
