"""The plans' direct launch (``decode_kernels.DIRECT_LAUNCH``, ``attention_dispatch.DIRECT_LAUNCH``,
``rows.DIRECT_LAUNCH``): a repeat call calls the compiled launcher's C entry (``FixedCudaLaunch._compiled``
or ``.current``) itself instead of going through BoundKernel/RowLaunch -> FixedLaunch.  On the CPU, through
the pointer path of ``test_s6_host_plans`` with a stand-in for the launcher's packed launch that runs the
interpreter from the pointers it gets (results against float64, outputs poisoned with NaN): the direct
call is taken on the owning thread and gives the right answer; another thread, a sync request, a TMA
descriptor whose pointer changed, a C call that launched nothing and the knob off each take the frames'
path, which launches once."""

from __future__ import annotations

import importlib
import threading
from operator import itemgetter

import pytest

torch = pytest.importorskip("torch")

from test_s6_host_plans import (  # noqa: E402,F401
    PointerKernel,
    _attn_ref,
    _close,
    wrap_op_kernels,
)

from tilewright import ops  # noqa: E402

attn = importlib.import_module("tilewright.ops.attention_dispatch")
dk = importlib.import_module("tilewright.ops.decode_kernels")
rows_mod = importlib.import_module("tilewright.ops.rows")
COUNTS = {"direct": 0, "frames": 0, "refused": 0}


class FakeC:
    """The compiled launch's C entries: ``_compiled(stream, ptrs)`` and ``current(ptrs)`` (0: launched)."""

    def __init__(self, fixed):
        self.fixed, self.refuse = fixed, False

    def _compiled(self, stream, ptrs):
        if self.refuse:
            COUNTS["refused"] += 1
            return 1  # (a driver error: nothing launched)
        COUNTS["direct"] += 1
        self.fixed.run(ptrs)
        return 0

    def current(self, ptrs):
        if self.fixed._owner != threading.get_ident():
            return -2  # (as the C call: another thread's, nothing launched)
        return self._compiled(0, ptrs)


class FakeFixed:
    """``launcher.FixedLaunch`` as the plans read it: owner, descriptors, stream lookup, ``launch``."""

    def __init__(self, prepared, values, n_lead):
        self.prepared, self.rest = prepared, list(values[n_lead:])
        self._owner = threading.get_ident()
        self._described = self._last_ptrs = None
        self._direct = True
        self.dev = 0
        self._stream = lambda dev: 0
        self.launch = FakeC(self)

    def run(self, ptrs):
        p = self.prepared
        p.kernel.launch_bound(list(ptrs) + self.rest, p.dyn, 0)

    def __call__(self, ptrs, stream=None, sync=False):  # the frames' path (FixedLaunch.__call__)
        COUNTS["frames"] += 1
        self.run(ptrs)


class FakePrepared:
    reads = ()

    def __init__(self, kernel, dyn):
        self.kernel, self.dyn = kernel, dict(dyn)

    def __call__(self, values, stream=None, sync=False):
        COUNTS["frames"] += 1
        self.kernel.launch_bound(values, self.dyn, 0)

    def fixed(self, values, n_lead):
        return FakeFixed(self, values, n_lead)


class FixedPointerKernel(PointerKernel):
    def prepare(self, values, dyn, dev):
        return FakePrepared(self, dyn)


@pytest.fixture
def fixed_path(monkeypatch):
    for k in COUNTS:
        COUNTS[k] = 0
    yield wrap_op_kernels(monkeypatch, FixedPointerKernel)
    ops.forget_plans()


def _fixed_of(case):
    """The FakeFixed the plan of the last call launches through."""
    if case == "rms_norm":
        (plan,) = [p for p in rows_mod._row_plans.values()]
        return next(iter(plan.launch._prepared.values()))
    return attn._dense_plans.last[1].fwd._fixed if case == "decode" else attn._dense_plans.last[1].plan.fwd._fixed


def _call(case, rng_seed):
    g = torch.Generator().manual_seed(rng_seed)
    if case == "rms_norm":
        x, r = torch.randn(5, 96, generator=g).half(), torch.randn(5, 96, generator=g).half()
        w = _W
        y, s = ops.rms_norm(x, w, residual=r)
        xr = x.double() + r.double()
        _close(s, xr, 1e-3)
        _close(y, xr / (xr.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt() * w.double(), 3e-3)
        return
    s = 16 if case == "prefill" else 1
    q = torch.randn(1, 4, s, 32, generator=g).half()
    _close(ops.attention(q, _KV, _KV, causal=case == "prefill"), _attn_ref(q, _KV, _KV, case == "prefill"), 3e-3)


_W = torch.randn(96, generator=torch.Generator().manual_seed(1)).half()
_KV = torch.randn(1, 2, 128, 32, generator=torch.Generator().manual_seed(2)).half()
CASES = ["decode", "prefill", "rms_norm"]


@pytest.mark.parametrize("case", CASES)
def test_repeat_calls_launch_through_the_c_entry(fixed_path, case):
    for i in range(3):  # bind, leave the plan, pack the FixedLaunch
        _call(case, i)
    before = dict(COUNTS)
    for i in range(4):
        _call(case, 10 + i)
    assert COUNTS["direct"] - before["direct"] == 4 and COUNTS["frames"] == before["frames"]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("why", ["thread", "sync", "descriptor", "refused", "knob"])
def test_each_condition_leaves_it_to_the_frames(fixed_path, case, why, monkeypatch):
    for i in range(3):
        _call(case, i)
    fixed = _fixed_of(case)
    assert isinstance(fixed, FakeFixed)
    if why == "sync":
        monkeypatch.setenv("TILEWRIGHT_SYNC_LAUNCH", "1")
    elif why == "descriptor":  # a TMA descriptor of the first pointer, written for another pointer
        fixed._described, fixed._last_ptrs = itemgetter(0), -16
        fixed._direct = False  # (FixedLaunch: descriptors make it not _direct)
    elif why == "refused":
        fixed.launch.refuse = True
    elif why == "knob":
        for mod in (dk, attn, rows_mod):
            monkeypatch.setattr(mod, "DIRECT_LAUNCH", False)
    before = dict(COUNTS)
    if why == "thread":
        errors = []

        def other():
            try:
                _call(case, 20)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert not errors, errors
    else:
        _call(case, 20)
    # launched once, through the frames (a refused C call launched nothing first)
    assert COUNTS["frames"] - before["frames"] == 1, (why, COUNTS, before)
    assert COUNTS["direct"] == before["direct"]
