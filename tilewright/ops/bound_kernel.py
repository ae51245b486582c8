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

``RowLaunch``: the same for a row-wise kernel whose only symbolic size is the row count ``m``
(``ops.softmax``, ``rms_norm``, ``layer_norm``): the caller passes contiguous tensors of the
plan's signature and the row count; a repeat call reads their pointers, with no reshape to the
kernel's 2-D shape (a view is a torch call, ~1 us of host time each on the H200's host).
"""

from __future__ import annotations

from ..ir import tile as t
from ..jit.kernel import _SYNC_KEY, _SYNC_PROBE, _sync_after_launch

_MAX_ROWS = 2**31  # the launcher's bound on a symbolic size (launcher.check_dynamic_sizes)


class BoundKernel:
    __slots__ = ("_dev", "_dyn", "_fixed", "_fixed_scalars", "_is_tensor", "_launcher", "_prepared", "kernel")

    def __init__(self, kernel):
        self.kernel = kernel
        self._fixed = self._fixed_scalars = None  # launch_pointers: the FixedLaunch and the scalars it holds
        self._launcher = None
        self._prepared = None  # the launcher's PreparedLaunch of the first call (None: launch_bound)
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
        self.launch_values(values)

    @property
    def bound(self) -> bool:
        """Has a first call bound the arguments (so that ``launch_values`` may be used)?"""
        return self._dyn is not None

    def launch_values(self, values: list, stream=None) -> None:
        """Launch with ``values`` made by the caller as a repeat call of ``__call__`` would make them
        (a pointer per tensor, 16-byte aligned, of a tensor of the bound signature; the scalars):
        for a caller that knows the pointers without making the views.  Only once ``bound``.
        ``stream``: the current stream of the bound device when the caller has looked it up
        (None: looked up here)."""
        prepared = self._prepared
        if prepared is not None and (not prepared.reads or prepared.matches(values)):
            prepared(values, stream, _sync_after_launch())
        else:  # other scalars for the grid (or a launcher without prepare): worked out per call
            self._launcher.launch_bound(values, self._dyn, self._dev, stream, _sync_after_launch())

    def launch_pointers(self, ptrs: list, scalars: tuple, stream=None) -> None:
        """``launch_values(ptrs + list(scalars), stream)`` for a caller that passes the same
        ``scalars`` object every call (a plan's tuple of the arguments after the pointers): the
        first call packs the whole argument buffer once (``PreparedLaunch.fixed``), later calls
        write only ``ptrs``.  Another ``scalars`` object makes a new buffer.  Only once ``bound``."""
        fixed = self._fixed
        if fixed is None or scalars is not self._fixed_scalars:
            prepared = self._prepared
            values = ptrs + list(scalars)
            make = None
            if prepared is not None and (not prepared.reads or prepared.matches(values)):
                make = getattr(prepared, "fixed", None)
            # False: no buffer for these scalars (other grid scalars, a runtime without fixed launches)
            fixed = (make(values, len(ptrs)) if make is not None else None) or False
            self._fixed, self._fixed_scalars = fixed, scalars
            if fixed is False:
                return self.launch_values(values, stream)
        elif fixed is False:
            return self.launch_values(ptrs + list(scalars), stream)
        fixed(ptrs, stream, _SYNC_KEY in _SYNC_PROBE and _sync_after_launch())
        return None

    def _first(self, args) -> None:
        kernel = self.kernel
        if kernel.backend != "device" or len(args) != len(self._is_tensor):
            return kernel(*args)  # the interpreter and the emulator: nothing to save
        launcher = kernel.launcher
        values, dyn, dev = launcher.bind(list(args))
        prepare = getattr(launcher, "prepare", None)
        self._prepared = prepare(values, dyn, dev) if prepare is not None else None
        launcher.launch_bound(values, dyn, dev, None, _sync_after_launch())
        self._launcher, self._dyn, self._dev = launcher, dyn, dev


class RowLaunch:
    """A row-wise kernel launched from pointers: parameters are (m, N) buffers (``is_row``) and
    buffers of static shape, the row count ``m`` the one symbolic size.  Made per call signature
    of an op (tensor types, dtypes, last dimension, device, options), so every check the launcher
    makes of a repeat call is fixed by that signature except the pointers (alignment checked here)
    and the row count (its range checked here, once per row count: each row count keeps its
    ``PreparedLaunch``, with the grid worked out)."""

    __slots__ = ("_dev", "_launcher", "_prepared", "_var", "is_row", "kernel", "n")

    def __init__(self, kernel, n: int, is_row: tuple):
        self.kernel = kernel
        self.n = n
        self.is_row = is_row
        self._launcher = self._var = None
        self._prepared: dict = {}  # row count -> PreparedLaunch (or a launch_bound stand-in)
        self._dev = 0

    def __call__(self, tensors: tuple, rows: int) -> None:
        """Launch over ``tensors`` (one per parameter, each contiguous: ``rows`` x N elements for a
        row parameter, the parameter's shape otherwise) with ``rows`` > 0."""
        prepared = self._prepared.get(rows)
        if prepared is None:
            return self._first(tensors, rows)
        values = [x.data_ptr() for x in tensors]
        for p in values:
            if p & 15:
                return self._checked(tensors, rows)  # the launcher's checked path explains
        prepared(values, None, _SYNC_KEY in _SYNC_PROBE and _sync_after_launch())

    def pointers(self, values: list, rows: int, tensors: tuple) -> None:
        """``self(tensors, rows)`` for a caller that has read the pointers (``values``, one per
        tensor, each 16-byte aligned: the caller checked them or allocated the tensor)."""
        prepared = self._prepared.get(rows)
        if prepared is None:
            return self._first(tensors, rows)
        prepared(values, None, _SYNC_KEY in _SYNC_PROBE and _sync_after_launch())

    def _checked(self, tensors, rows) -> None:
        n = self.n
        self.kernel(*[x.view(rows, n) if r else x for x, r in zip(tensors, self.is_row)])

    def _first(self, tensors, rows) -> None:
        """The first call of the signature (every check, through ``Launcher.bind``) or of a row count."""
        kernel = self.kernel
        if kernel.backend != "device" or len(tensors) != len(self.is_row):
            return self._checked(tensors, rows)  # the interpreter and the emulator: nothing to save
        launcher = self._launcher
        if launcher is None:
            n = self.n
            args = [x.view(rows, n) if r else x for x, r in zip(tensors, self.is_row)]
            launcher = kernel.launcher
            values, dyn, dev = launcher.bind(args)  # every check, errors naming the parameter
            launcher.launch_bound(values, dyn, dev, None, _sync_after_launch())
            if len(dyn) == 1 and next(iter(dyn.values())) == rows:
                self._launcher, self._var, self._dev = launcher, next(iter(dyn)), dev
                self._keep(rows, values, dyn)
            return None
        values = [x.data_ptr() for x in tensors]
        if not rows < _MAX_ROWS or any(p & 15 for p in values):
            return self._checked(tensors, rows)  # the checked path explains
        self._keep(rows, values, {self._var: rows})(values, None, _sync_after_launch())
        return None

    def _keep(self, rows: int, values: list, dyn: dict):
        """The prepared launch of ``rows`` rows, remembered (up to 4096 row counts)."""
        launcher = self._launcher
        prepare = getattr(launcher, "prepare", None)
        if prepare is not None:
            prepared = prepare(values, dyn, self._dev)
            fixed = getattr(prepared, "fixed", None)  # every value a pointer: the buffer packed once
            prepared = (fixed(values, len(values)) if fixed is not None else None) or prepared
        else:  # a launcher without prepare (a test's stand-in): launch_bound with these sizes
            dev = self._dev

            def prepared(vals, stream=None, sync=False):
                launcher.launch_bound(vals, dyn, dev, stream, sync)

        if len(self._prepared) < 4096:
            self._prepared[rows] = prepared
        return prepared
