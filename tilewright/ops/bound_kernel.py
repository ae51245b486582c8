"""``BoundKernel``: a library kernel launched again and again with arguments of one signature.

An ``ops`` call plan (``attention_dispatch._launch_plan``) is made per call signature: shapes,
dtypes, strides and device of every argument are fixed by the plan's key, and the other tensors the
plan passes (outputs, partial results, views) are made by the plan from those.  The launcher's
argument checks (dtype, shape, contiguity, device of each tensor; the range of each scalar) are
then the same every call; what changes is the data pointers.  So the first call binds the
arguments with every check (``Launcher.bind``) and keeps the symbolic sizes and the device; a
repeat call reads each tensor's pointer, checks its 16-byte alignment (a pointer is the one thing
a new tensor of the same signature can change: a misaligned one goes through the checked path) and
launches (``Launcher.launch_bound``).  On the H200 the checks were ~40 of the ~140 us of host time
of a decode attention call (two launches of 22 arguments).

Only for kernels whose every argument the caller's signature fixes; user kernels go through
``JITKernel.__call__``, which checks every call.
"""

from __future__ import annotations

from ..ir import tile as t
from ..jit.kernel import _sync_after_launch


class BoundKernel:
    __slots__ = ("_dev", "_dyn", "_is_tensor", "_launcher", "kernel")

    def __init__(self, kernel):
        self.kernel = kernel
        self._launcher = None
        self._dyn = None
        self._dev = 0
        self._is_tensor = tuple(isinstance(p, t.Buffer) for p in kernel.params)

    def __call__(self, *args) -> None:
        if self._dyn is None:
            return self._first(args)
        values = []
        for is_tensor, a in zip(self._is_tensor, args):
            if is_tensor:
                a = a.data_ptr()
                if a & 15:
                    return self.kernel(*args)  # the checked path explains (or copes)
            values.append(a)
        self._launcher.launch_bound(values, self._dyn, self._dev, None, _sync_after_launch())

    def _first(self, args) -> None:
        kernel = self.kernel
        if kernel.backend != "device" or len(args) != len(self._is_tensor):
            return kernel(*args)  # the interpreter and the emulator: nothing to save
        launcher = kernel.launcher
        values, dyn, dev = launcher.bind(list(args))
        launcher.launch_bound(values, dyn, dev, None, _sync_after_launch())
        self._launcher, self._dyn, self._dev = launcher, dyn, dev
