"""The row ops' per-call layout handling (rows.py ``_dense``: the plan's key holds no strides and
no start) through the pointer path of ``test_s6_host_plans`` (results against float64, outputs
poisoned): after good calls made the plans, every combination of an x, weight, bias or residual
that is a strided view or starts off a 16-byte boundary is copied, never read in place with the
wrong layout.  (Session 12 tried the test inline, without ``_dense``'s frame: no gain above the
CPU stub's noise in three alternating runs, so rows.py keeps the frame.)"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from test_s6_host_plans import (  # noqa: E402,F401 (device_path: a fixture)
    _close,
    _ln_ref,
    _rms_ref,
    _softmax_ref,
    device_path,
)

from tilewright import ops  # noqa: E402


def _views(shape, rng):
    """Fresh random tensors of ``shape`` as the op may get them: contiguous, a strided view (every
    other element of the last dimension) and contiguous from a start 4 bytes past a 16-byte boundary."""
    n = shape[-1]
    dense = torch.randn(*shape, generator=rng)
    strided = torch.randn(*shape[:-1], 2 * n, generator=rng)[..., ::2]
    flat = torch.randn(int(torch.tensor(shape).prod()) + 1, generator=rng)
    off = flat[1:].view(*shape)
    assert not strided.is_contiguous() and off.is_contiguous() and off.data_ptr() % 16
    return [("dense", dense), ("strided", strided), ("offset", off)]


@pytest.mark.parametrize("rows", [5, 3])  # (ragged: no multiple of anything)
def test_row_ops_copy_strided_and_misaligned_arguments_on_repeat_calls(device_path, rows):  # noqa: F811
    rng = torch.Generator().manual_seed(120 + rows)
    x0, w0, b0 = torch.randn(rows, 96, generator=rng), torch.randn(96, generator=rng), torch.randn(96, generator=rng)
    for _ in range(2):  # plans made (and bound), then served from pointers
        ops.softmax(x0), ops.rms_norm(x0, w0), ops.rms_norm(x0, w0, residual=x0), ops.layer_norm(x0, w0, b0)
    for xn, x in _views((rows, 96), rng):
        for wn, w in _views((96,), rng):
            for rn, r in _views((rows, 96), rng):
                where = (xn, wn, rn)
                _close(ops.softmax(x), _softmax_ref(x), 1e-5)
                _close(ops.rms_norm(x, w), _rms_ref(x, w, 1e-6), 1e-4)
                y, s = ops.rms_norm(x, w, residual=r)
                assert y.is_contiguous() and s.is_contiguous(), where
                _close(s, x.double() + r.double(), 1e-6)
                _close(y, _rms_ref(x + r, w, 1e-6), 1e-4)
                _close(ops.layer_norm(x, w, r[0]), _ln_ref(x, w, r[0], 1e-5), 1e-4)
