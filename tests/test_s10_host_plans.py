"""Session 10's cheaper plan keys and allocations keep every check (run on the CPU through the
pointer path of ``test_s6_host_plans``: results against float64, outputs poisoned).

- ``rms_norm``/``layer_norm`` key weight and bias by their whole shape (in place of rank and last
  dimension) and read x's shape once: after good calls, a weight or bias of another shape, rank,
  dtype, device or storage offset is planned (or refused) again, never launched on the old plan;
  a residual of another shape is still compared per call.
- ``ops.matmul``'s repeat output comes from an ``empty_like`` template: a new contiguous tensor of
  the plan's shape, dtype and device per call (poisoned here, so every element must be written)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from test_s6_host_plans import (  # noqa: E402,F401 (device_path: a fixture)
    OnDevice,
    _close,
    _ln_ref,
    _rms_ref,
    device_path,
    dispatch,
    rows_mod,
)

from tilewright import ops  # noqa: E402
from tilewright.errors import ArgumentError  # noqa: E402


def test_row_plans_keep_weight_and_bias_checks(device_path):  # noqa: F811
    torch.manual_seed(101)
    x, w, b = torch.randn(5, 64), torch.randn(64), torch.randn(64)
    for _ in range(2):  # plans made, then served
        _close(ops.rms_norm(x, w), _rms_ref(x, w, 1e-6), 1e-4)
        y, s = ops.rms_norm(x, w, residual=x * 2)
        _close(y, _rms_ref(x * 3, w, 1e-6), 1e-4)
        _close(ops.layer_norm(x, w, b), _ln_ref(x, w, b, 1e-5), 1e-4)
    planned = len(rows_mod._row_plans)
    # another shape of the same last dimension or rank: refused, not launched with the 64-wide plan
    for bad in (torch.randn(1, 64), torch.randn(2, 32)):
        with pytest.raises(ArgumentError, match="weight"):
            ops.rms_norm(x, bad)
        with pytest.raises(ArgumentError, match="weight"):
            ops.rms_norm(x, bad, residual=x)
        with pytest.raises(ArgumentError, match="weight"):
            ops.layer_norm(x, bad, b)
        with pytest.raises(ArgumentError, match="bias"):
            ops.layer_norm(x, w, bad)
    for fn in (lambda wx: ops.rms_norm(x, wx), lambda wx: ops.layer_norm(x, w, wx)):
        with pytest.raises(ArgumentError, match="dtype"):
            fn(w.half())
        with pytest.raises(ArgumentError, match="one device"):
            fn(w.as_subclass(OnDevice))
    with pytest.raises(ArgumentError, match="residual has shape"):
        ops.rms_norm(x, w, residual=torch.randn(5, 1, 64))
    assert len(rows_mod._row_plans) == planned  # nothing refused was remembered
    # a weight at a storage offset (a view into a larger tensor): same key, its own pointer
    big = torch.randn(3 * 64)
    for start in (64, 128, 4):  # 4: off a 16-byte boundary (copied)
        wx = big[start:start + 64]
        _close(ops.rms_norm(x, wx), _rms_ref(x, wx, 1e-6), 1e-4)
        _close(ops.layer_norm(x, w, wx), _ln_ref(x, w, wx, 1e-5), 1e-4)
    for wr in device_path.values():
        assert wr.checked_calls == 0


def test_row_plans_follow_the_rank_and_width_of_x(device_path):  # noqa: F811
    torch.manual_seed(102)
    w = torch.randn(64)
    for x in (torch.randn(4, 64), torch.randn(2, 2, 64), torch.randn(64), torch.randn(4, 64)):
        _close(ops.rms_norm(x, w), _rms_ref(x, w, 1e-6), 1e-4)
        y, s = ops.rms_norm(x, w, residual=x)
        _close(y, _rms_ref(2 * x, w, 1e-6), 1e-4)
    with pytest.raises(ArgumentError, match="weight"):
        ops.rms_norm(torch.randn(4, 32), w)  # another width: planned again, refused
    with pytest.raises(ArgumentError, match="residual has shape"):
        ops.rms_norm(torch.randn(2, 2, 64), w, residual=torch.randn(4, 64))


def test_matmul_repeat_outputs_are_new_tensors_of_the_plan(device_path):  # noqa: F811
    torch.manual_seed(103)
    b = torch.randn(64, 48).half()
    outs = []
    for out_dtype in (None, torch.float32, None, torch.float32):
        a = torch.randn(32, 64).half()
        got = ops.matmul(a, b, out_dtype=out_dtype)
        assert got.shape == (32, 48) and got.is_contiguous() and got.device == a.device
        assert got.dtype == (out_dtype or torch.float16)
        _close(got, a.double() @ b.double(), 1e-2)
        outs.append(got)
    assert len({o.data_ptr() for o in outs}) == len(outs)  # each call its own output
    assert len(dispatch._matmul_plans) == 2  # one per output dtype
    for run in dispatch._matmul_plans.values():
        made = run.make_out()
        assert made.shape == (run.M, run.N) and made.dtype == run.dtype and made.is_contiguous()
