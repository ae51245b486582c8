"""The ops' last-call memo (``ops/plan_dict.PlanDict``: ``attention_dispatch._dense_plans``,
``dispatch._matmul_plans``, ``rows._row_plans``): a repeat call compares its plan key with the last
call's before the dict lookup.

Through the pointer path of ``test_s6_host_plans`` (results against float64, outputs poisoned):
right after a signature's repeat calls left it in the memo, every call that changes a shape, the
strides, a dtype, the start's alignment or an option gets its own plan (or the checks' error), and
the memo's signature called again is still right; the memo holds only keys the dict holds, each
with its own plan; a signature repeated makes no dict lookup; ``forget_plans`` empties the memos;
every change of a ``PlanDict`` but a store forgets its last key."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from test_s6_host_plans import (  # noqa: E402,F401 (device_path: a fixture)
    OnDevice,
    _attn_ref,
    _close,
    _ln_ref,
    _rms_ref,
    _softmax_ref,
    attn,
    device_path,
    dispatch,
    rows_mod,
)

from tilewright import ops  # noqa: E402
from tilewright.errors import ArgumentError  # noqa: E402
from tilewright.ops.plan_dict import PlanDict  # noqa: E402


class CountingDict(PlanDict):
    """A plan dict that counts its lookups."""

    gets = 0

    def get(self, key, default=None):
        self.gets += 1
        return super().get(key, default)


def _misaligned(x):
    """A copy of ``x`` (contiguous) whose start is 2 elements past a 16-byte boundary."""
    flat = torch.empty(x.numel() + 2, dtype=x.dtype)
    out = flat[2:].view(x.shape).copy_(x)
    assert out.data_ptr() % 16
    return out


def _memo_in_dict(plans):
    """The memo holds a key of the dict with the dict's plan (or nothing)."""
    key, plan, stamp = plans.last
    assert key is None and plan is None or dict.__getitem__(plans, key) is plan and stamp is plans.stamp


def test_row_memo_misses_every_changed_signature(device_path):  # noqa: F811
    rng = torch.Generator().manual_seed(1201)
    x, w, b = torch.randn(5, 96, generator=rng), torch.randn(96, generator=rng), torch.randn(96, generator=rng)

    def base():  # the signature the memo holds between the changes
        _close(ops.softmax(x), _softmax_ref(x), 1e-5)
        _close(ops.rms_norm(x, w), _rms_ref(x, w, 1e-6), 1e-4)
        y, s = ops.rms_norm(x, w, residual=x)
        _close(y, _rms_ref(x + x, w, 1e-6), 1e-4)
        _close(ops.layer_norm(x, w, b), _ln_ref(x, w, b, 1e-5), 1e-4)

    base(), base()
    _memo_in_dict(rows_mod._row_plans)
    assert rows_mod._row_plans.last[0][0] == "layer_norm"
    x7 = torch.randn(7, 3, 96, generator=rng)  # another rank and row count
    x64 = torch.randn(5, 64, generator=rng)  # another width
    w64, b64 = torch.randn(64, generator=rng), torch.randn(64, generator=rng)
    for xc, wc, bc, eps in ((x7, w, b, None), (x64, w64, b64, None), (x.half(), w.half(), b.half(), None),
                            (x.t().contiguous().t(), w, b, None), (_misaligned(x), _misaligned(w), b, None),
                            (x, w, b, 1e-3)):
        e = 1e-6 if eps is None else eps
        tol = 1e-2 if xc.dtype == torch.float16 else 1e-4
        _close(ops.softmax(xc), _softmax_ref(xc), tol)
        _close(ops.rms_norm(xc, wc, eps=e), _rms_ref(xc, wc, e), tol)
        y, s = ops.rms_norm(xc, wc, eps=e, residual=xc)
        _close(s, 2 * xc.double(), 1e-6)
        _close(y, _rms_ref(xc + xc, wc, e), tol)
        _close(ops.layer_norm(xc, wc, bc, eps=1e-5 if eps is None else eps),
               _ln_ref(xc, wc, bc, 1e-5 if eps is None else eps), tol)
        _memo_in_dict(rows_mod._row_plans)
        base()
    # the checks' errors right after the memo's signature
    with pytest.raises(ArgumentError, match="dtype"):
        ops.softmax(x.to(torch.int32))
    with pytest.raises(ArgumentError, match="eps"):
        ops.rms_norm(x, w, eps=-1.0)
    with pytest.raises(ArgumentError, match="one device"):
        ops.layer_norm(x, w, b.as_subclass(OnDevice))
    with pytest.raises(ArgumentError, match="residual has shape"):
        ops.rms_norm(x, w, residual=x7)
    base()


def test_matmul_memo_misses_every_changed_signature(device_path):  # noqa: F811
    rng = torch.Generator().manual_seed(1202)
    a, b = torch.randn(33, 64, generator=rng).half(), torch.randn(64, 40, generator=rng).half()

    def base():
        _close(ops.matmul(a, b), a.double() @ b.double(), 1e-2)

    base(), base()
    _memo_in_dict(dispatch._matmul_plans)
    bias = torch.randn(40, generator=rng).half()
    for got, want in (
        (lambda: ops.matmul(a[:17], b), a[:17].double() @ b.double()),  # another row count (ragged)
        (lambda: ops.matmul(a, b.t().contiguous().t()), a.double() @ b.double()),  # B transposed in place
        (lambda: ops.matmul(a.bfloat16(), b.bfloat16()), a.bfloat16().double() @ b.bfloat16().double()),
        (lambda: ops.matmul(_misaligned(a), b), a.double() @ b.double()),  # a start off 16 bytes
        (lambda: ops.matmul(a, b, bias=bias), a.double() @ b.double() + bias.double()),
        (lambda: ops.matmul(a, b, activation="relu"), (a.double() @ b.double()).clamp_min(0)),
        (lambda: ops.matmul(a, b, out_dtype=torch.float32), a.double() @ b.double()),
    ):
        out = got()
        _close(out, want, 1e-2)
        _memo_in_dict(dispatch._matmul_plans)
        base()
    assert ops.matmul(a, b, out_dtype=torch.float32).dtype == torch.float32
    with pytest.raises(ArgumentError, match="one dtype"):
        ops.matmul(a, b.bfloat16())
    with pytest.raises(ArgumentError, match="activation"):
        ops.matmul(a, b, activation="tanh")
    with pytest.raises(ArgumentError, match="one device"):
        ops.matmul(a, b.as_subclass(OnDevice))
    base()


@pytest.mark.parametrize("kv_len", [64, 50])  # 50: ragged key blocks
def test_attention_memo_misses_every_changed_signature(device_path, kv_len):  # noqa: F811
    rng = torch.Generator().manual_seed(1203 + kv_len)
    q = torch.randn(1, 4, 1, 32, generator=rng).half()
    kv = torch.randn(1, 2, kv_len, 32, generator=rng).half()

    def base():
        _close(ops.attention(q, kv, kv), _attn_ref(q, kv, kv), 3e-3)

    base(), base(), base()
    _memo_in_dict(attn._dense_plans)
    assert attn._dense_plans.last[0] is not None
    qp = torch.randn(1, 4, 13, 32, generator=rng).half()  # prefill, ragged rows
    kv2 = torch.randn(2, 2, kv_len, 32, generator=rng).half()
    q2 = torch.randn(2, 4, 1, 32, generator=rng).half()
    bshd = torch.randn(1, kv_len, 2, 32, generator=rng).half().transpose(1, 2)  # other strides, same shape
    for got, want in (
        (lambda: ops.attention(qp, kv, kv, causal=True), _attn_ref(qp, kv, kv, True)),
        (lambda: ops.attention(q2, kv2, kv2), _attn_ref(q2, kv2, kv2)),
        (lambda: ops.attention(q, bshd, bshd), _attn_ref(q, bshd, bshd)),
        (lambda: ops.attention(q, kv, kv, num_splits=2), _attn_ref(q, kv, kv)),
        (lambda: ops.attention(_misaligned(q), kv, kv), _attn_ref(q, kv, kv)),
        (lambda: ops.attention(q.bfloat16(), kv.bfloat16(), kv.bfloat16()),
         _attn_ref(q.bfloat16(), kv.bfloat16(), kv.bfloat16())),
    ):
        for _ in range(2):  # the first call leaves the plan, the second is served by it (and the memo)
            _close(got(), want, 3e-3)
            _memo_in_dict(attn._dense_plans)
        base()
    out = ops.attention(q, kv, kv, scale=0.5)
    ref = torch.softmax(q.double() @ kv.double().repeat_interleave(2, 1).transpose(-1, -2) * 0.5, -1)
    _close(out, ref @ kv.double().repeat_interleave(2, 1), 3e-3)
    with pytest.raises(ArgumentError, match="scale"):
        ops.attention(q, kv, kv, scale=-1.0)
    with pytest.raises(ArgumentError, match="causal"):
        ops.attention(q, kv, kv, causal=1)
    with pytest.raises(ArgumentError, match="dtype"):
        ops.attention(q, kv.float(), kv.float())
    with pytest.raises(ArgumentError, match="one device"):
        ops.attention(q, kv, kv.as_subclass(OnDevice))
    base()


def test_a_repeated_signature_makes_no_dict_lookup(device_path, monkeypatch):  # noqa: F811
    rng = torch.Generator().manual_seed(1204)
    x, w = torch.randn(5, 96, generator=rng), torch.randn(96, generator=rng)
    a, b = torch.randn(33, 64, generator=rng).half(), torch.randn(64, 40, generator=rng).half()
    q, kv = torch.randn(1, 4, 1, 32, generator=rng).half(), torch.randn(1, 2, 64, 32, generator=rng).half()
    calls = {"rows": lambda: ops.rms_norm(x, w), "matmul": lambda: ops.matmul(a, b),
             "attention": lambda: ops.attention(q, kv, kv)}
    x64, w64 = torch.randn(3, 64, generator=rng), torch.randn(64, generator=rng)  # (a row count is no signature)
    others = {"rows": lambda: ops.rms_norm(x64, w64), "matmul": lambda: ops.matmul(a[:3], b),
              "attention": lambda: ops.attention(q, kv[:, :, :40], kv[:, :, :40])}
    dicts = {"rows": (rows_mod, "_row_plans"), "matmul": (dispatch, "_matmul_plans"),
             "attention": (attn, "_dense_plans")}
    for name, call in calls.items():
        mod, attr = dicts[name]
        counting = CountingDict(getattr(mod, attr))
        monkeypatch.setattr(mod, attr, counting)
        for _ in range(3):  # plans made (a first call binds, a second leaves attention's dense plan)
            call(), others[name]()
        call()
        before = counting.gets
        for _ in range(4):
            call()
        assert counting.gets == before, name  # the memo served them
        for _ in range(2):  # alternating signatures: each call looks up, and its result stays right
            others[name]()
            call()
        assert counting.gets == before + 4, name
    _close(ops.rms_norm(x64, w64), _rms_ref(x64, w64, 1e-6), 1e-4)
    _close(ops.matmul(a[:3], b), a[:3].double() @ b.double(), 1e-2)
    _close(ops.attention(q, kv, kv), _attn_ref(q, kv, kv), 3e-3)


def test_forget_plans_empties_the_memos(device_path):  # noqa: F811
    x, w = torch.randn(4, 64), torch.randn(64)
    a, b = torch.randn(32, 64).half(), torch.randn(64, 48).half()
    q, kv = torch.randn(1, 4, 1, 32).half(), torch.randn(1, 2, 64, 32).half()
    plans = (rows_mod._row_plans, dispatch._matmul_plans, attn._dense_plans)
    for _ in range(3):
        ops.softmax(x), ops.rms_norm(x, w), ops.matmul(a, b), ops.attention(q, kv, kv)
    assert all(p.last[0] is not None for p in plans)
    ops.forget_plans()
    assert all(p.last[0] is None and p.find(p.last[0]) is None and not p for p in plans)


def test_plan_dict_finds_what_get_finds_and_forgets_on_every_other_change():
    d = PlanDict()
    assert d.find(None) is None and d.find(("a", 1)) is None and d.last[0] is None
    d[("a", 1)] = "A"
    assert d.last[:2] == (("a", 1), "A") and d.find(("a", 1)) == "A"
    d[("b", 2)] = "B"
    assert d.find(("a", 1)) == "A" and d.last[:2] == (("a", 1), "A")  # a lookup hit becomes the last
    assert d.find(("a", 1.0)) == "A"  # equal keys (as the dict: equal values hash equal)
    assert d.find(("a", 2)) is None and d.last[:2] == (("a", 1), "A")  # a miss leaves it
    with pytest.raises(TypeError):
        d.find(("a", [1]))  # an unhashable key raises as get does (the callers' checked path)
    d[("a", 1)] = "A2"  # a new plan for the key: the last one
    assert d.find(("a", 1)) == "A2"
    for change in (lambda: d.pop(("b", 2)), lambda: d.__delitem__(("a", 1)), lambda: d.popitem(),
                   lambda: d.update({("a", 1): "A3"}), lambda: d.setdefault(("a", 1), "A4"),
                   lambda: d.__ior__({("a", 1): "A5"}), d.clear):
        d[("a", 1)], d[("b", 2)] = "A", "B"
        d.find(("a", 1))
        stamp = d.stamp
        change()
        assert d.last[0] is None and d.stamp is not stamp
        assert d.find(("a", 1)) == d.get(("a", 1))


class ClearedDuringLookup(PlanDict):
    """Another thread's ``clear`` between ``find``'s lookup and its write of ``last``."""

    def get(self, key, default=None):
        plan = super().get(key, default)
        self.clear()
        return plan


def test_a_plan_found_while_the_dict_is_cleared_is_not_served_after_the_clear():
    d = ClearedDuringLookup()
    d[("a", 1)] = "A"
    d.last = (None, None, None)  # (the lookup's path, not the memo's)
    assert d.find(("a", 1)) == "A"  # found before the clear: this call may use it
    assert not d and d.last[0] == ("a", 1)  # its write came after the clear, with the stamp read before it
    assert d.find(("a", 1)) is None  # not served again: the lookup finds nothing
