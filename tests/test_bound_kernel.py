"""ops' BoundKernel: the first call binds with every check, a repeat call passes only new pointers;
a misaligned pointer goes back to the checked path."""

from __future__ import annotations

import tilewright.language as T
from tilewright.ir import tile as t
from tilewright.ops.bound_kernel import BoundKernel


class _Tensor:
    def __init__(self, ptr):
        self.ptr = ptr

    def data_ptr(self):
        return self.ptr


class _Launcher:
    def __init__(self):
        self.binds, self.launches = 0, []

    def bind(self, args):
        self.binds += 1
        return [a.ptr if isinstance(a, _Tensor) else a for a in args], {"m": 7}, 0

    def launch_bound(self, values, dyn, dev, stream, sync):
        self.launches.append((list(values), dyn, dev))


class _Kernel:
    backend = "device"

    def __init__(self):
        self.params = [t.Buffer("A", (4,), "float32", "global"), T.dynamic("n")]
        self.launcher = _Launcher()
        self.checked_calls = 0

    def __call__(self, *args):
        self.checked_calls += 1


def test_repeat_calls_pass_new_pointers_without_binding_again():
    k = _Kernel()
    bound = BoundKernel(k)
    bound(_Tensor(256), 3)
    bound(_Tensor(512), 3)
    bound(_Tensor(1024), 5)
    assert k.launcher.binds == 1 and k.checked_calls == 0
    assert [v for v, _, _ in k.launcher.launches] == [[256, 3], [512, 3], [1024, 5]]
    assert all(d == {"m": 7} for _, d, _ in k.launcher.launches)


def test_a_misaligned_pointer_takes_the_checked_path():
    k = _Kernel()
    bound = BoundKernel(k)
    bound(_Tensor(256), 3)
    bound(_Tensor(258), 3)
    assert k.checked_calls == 1 and len(k.launcher.launches) == 1


def test_other_backends_call_the_kernel_every_time():
    k = _Kernel()
    k.backend = "interpret"
    bound = BoundKernel(k)
    bound(_Tensor(256), 3)
    bound(_Tensor(256), 3)
    assert k.checked_calls == 2 and k.launcher.binds == 0


class _Recording:
    """A prepared launch (FixedLaunch's call form) recording the sync flag of each launch."""

    def __init__(self):
        self.syncs = []

    def __call__(self, values, stream=None, sync=False):
        self.syncs.append(sync)

    def fixed(self, values, n_lead):
        return self

    reads = ()


def test_ops_launches_synchronize_exactly_when_the_variable_asks(monkeypatch):
    """BoundKernel.launch_pointers and RowLaunch check TILEWRIGHT_SYNC_LAUNCH inline (no frame
    while it is unset): set, each launch synchronizes; unset or "0", none does."""
    from tilewright.ops.bound_kernel import RowLaunch

    k = _Kernel()
    bound = BoundKernel(k)
    bound(_Tensor(256), 3)
    rec = bound._prepared = _Recording()
    rows = RowLaunch(k, 4, (True,))
    row_rec = rows._prepared[7] = _Recording()
    monkeypatch.delenv("TILEWRIGHT_SYNC_LAUNCH", raising=False)
    want = []
    for value in (None, "1", "0", None, "1"):
        if value is None:
            monkeypatch.delenv("TILEWRIGHT_SYNC_LAUNCH", raising=False)
        else:
            monkeypatch.setenv("TILEWRIGHT_SYNC_LAUNCH", value)
        bound.launch_pointers([512], (3,))
        rows([_Tensor(1024)], 7)
        rows.pointers([2048], 7, None)
        want.append(value == "1")
    assert [bool(s) for s in rec.syncs] == want
    assert [bool(s) for s in row_rec.syncs] == [w for w in want for _ in (0, 1)]
