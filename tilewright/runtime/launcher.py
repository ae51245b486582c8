"""``Launcher``: binds a call's arguments to a ``LaunchSpec`` and launches it on a GPU.

The vendor is chosen once, by whoever makes the launcher: it receives the vendor's runtime module
(``cuda_driver`` or ``hip_runtime``), which provides ``load_function(code_object, name, device)``,
``current_stream(device)`` and ``synchronize(device)``.  Nothing here imports either runtime, so
the AMD path never loads a CUDA library and the other way round.

Two argument paths: a fast one for the common case (GPU torch tensors of exactly the expected dtype
and shape, contiguous, aligned, on one device: a few attribute reads per tensor) and the general
checked one (``args.bind_arguments``), which explains what is wrong with an argument and names it.
"""

from __future__ import annotations

import sys
from operator import itemgetter as _itemgetter
from threading import get_ident as _get_ident

from ..binding.args import bind_arguments
from ..errors import ArgumentError
from ..ir import dtype as dt
from ..ir import tile as t
from ..ir.analysis import eval_expr
from ..ir.expr import Var
from ..ir.visitor import free_vars
from ..target.grid import check_launch_grid
from .launch_spec import LaunchSpec


class Launcher:
    def __init__(self, spec: LaunchSpec, device_runtime):
        self.spec = spec
        self.runtime = device_runtime
        self.arg_types = spec.arg_types
        self._static_grid = spec.static_grid
        if self._static_grid is not None and 0 in self._static_grid:
            self._static_grid = None  # T.Kernel(0): every call is refused by _grid (check_launch_grid), as in TileLang
        self._functions: dict = {}  # device index -> loaded function
        self._fast_spec = None
        self._fast_specs_allocated: dict = {}  # ``allocated`` indices -> fast spec that trusts them
        self._grid_reads = None  # (Var, parameter index or None) read by a symbolic grid
        self._grid_memo: dict = {}
        self._reads = None  # indices of the scalar parameters a grid or shared size reads (prepare)
        self._block = (spec.num_threads, 1, 1)
        self.tensor_maps = None
        if spec.tensor_maps:
            from .tensor_maps import TensorMapEncoder

            self.tensor_maps = TensorMapEncoder(list(spec.tensor_maps), list(spec.params), spec.func_name)
        # a kernel whose every parameter is a tensor of static shape: a checked call's values are
        # its pointers and nothing else of the launch changes, so each device keeps one argument
        # buffer packed once (``FixedLaunch``) and a launch writes the pointers into it
        self._all_static = not spec.dyn_vars and all(isinstance(p, t.Buffer) for p in spec.params)
        self._fixed: dict = {}  # device index -> FixedLaunch, or False where the runtime has none

    def launch(self, args: list, stream=None, sync: bool = False, allocated: tuple = ()) -> None:
        """Check ``args`` (one per parameter), evaluate the grid and launch on ``stream`` (default:
        torch's current stream of the arguments' device).  ``allocated``: indices of arguments the
        caller has just made as ``torch.empty`` of the parameter's static shape and dtype on the
        device of the first tensor argument (``JITKernel``'s ``out_idx`` outputs): the fast path
        takes their pointers without checking them again (the checked path checks everything)."""
        fast = self._fast_torch_bind(args, allocated)
        if fast is None:
            values, dyn, dev = self._checked_bind(args)
        else:
            values, dyn, dev = fast
            if dyn is _NO_DYN and self._all_static:  # (every value a checked, aligned pointer)
                fixed = self._fixed.get(dev)
                if fixed is None:
                    fixed = self._fixed_launch(values, dev)
                if fixed is not False:
                    fixed(values, stream, sync)
                    return
        self._launch_values(values, dyn, dev, stream, sync)

    def _fixed_launch(self, values: list, dev: int):
        """The ``FixedLaunch`` of device ``dev`` for a kernel of static tensor parameters only
        (``values``: one call's pointers), or False where there is none (a runtime without fixed
        launches, a layout ``FixedArgs`` does not take); remembered per device."""
        fixed = self.prepare(values, _NO_DYN, dev).fixed(values, len(values)) or False
        self._fixed[dev] = fixed
        return fixed

    def bind(self, args: list) -> tuple:
        """(argument values: pointers and scalars, symbolic sizes, device index) of ``args``, every
        argument checked (the errors name the parameter)."""
        fast = self._fast_torch_bind(args)
        return fast if fast is not None else self._checked_bind(args)

    def launch_bound(self, values: list, dyn: dict, dev: int, stream=None, sync: bool = False) -> None:
        """Launch with the values ``bind`` returned — or values made the same way (``ops`` does for
        a repeat call whose argument shapes, dtypes, strides and device its call signature fixes,
        reading only the new pointers; see ``ops.bound_kernel.BoundKernel``)."""
        self._launch_values(list(values), dyn, dev, stream, sync)

    def prepare(self, values: list, dyn: dict, dev: int):
        """A ``PreparedLaunch`` for repeat launches with the symbolic sizes ``dyn`` on device ``dev``
        and, where the grid or the shared memory size reads scalar parameters, the scalars of
        ``values`` (values as ``bind`` returns them): grid, dynamic shared bytes, the sizes passed
        after the parameters and the loaded function are worked out here once, so that a launch
        packs the new pointers and calls the driver.  Evaluating them per call (``launch_bound``)
        was ~3 us of a row op's host time on the CPU stub bench."""
        values = list(values)
        grid = self._static_grid or self._grid(values, dyn)
        shared = self.spec.shared_bytes if self.spec.shared_at_launch is None else self._shared_bytes(values, dyn)
        reads = self._scalar_reads()
        return PreparedLaunch(self, grid, shared, [dyn[v] for v in self.spec.dyn_vars], dyn, dev,
                              tuple((i, values[i]) for i in reads))

    def _scalar_reads(self) -> tuple:
        """Indices of the scalar parameters the grid or the launch-sized shared memory reads."""
        reads = self._reads
        if reads is None:
            used = set().union(*(free_vars(g) for g in self.spec.grid)) if self.spec.grid else set()
            scalars = [i for i, p in enumerate(self.spec.params) if isinstance(p, Var)]
            if self.spec.shared_at_launch is not None:
                reads = tuple(scalars)  # (whatever the size expression reads: all of them, to be safe)
            else:
                reads = tuple(i for i in scalars if self.spec.params[i] in used)
            self._reads = reads
        return reads

    def _launch_values(self, values: list, dyn: dict, dev: int, stream, sync: bool) -> None:
        """``launch_bound`` on a list of values it may extend."""
        spec = self.spec
        grid = self._static_grid or self._grid(values, dyn)
        if spec.dyn_vars:
            values += [dyn[v] for v in spec.dyn_vars]
        if self.tensor_maps is not None:
            values += self.tensor_maps.encode(values, dyn)
        fn = self._functions.get(dev) or self.function(dev)
        if stream is None:
            stream = self.runtime.current_stream(dev)
        shared = spec.shared_bytes if spec.shared_at_launch is None else self._shared_bytes(values, dyn)
        fn.launch(grid, self._block, shared, stream, self.arg_types, tuple(values))
        if sync:
            self.runtime.synchronize(dev)

    def function(self, dev: int):
        """The kernel loaded on device ``dev`` (loaded once per device)."""
        fn = self._functions.get(dev)
        if fn is None:
            fn = self.runtime.load_function(self.spec.code_object, self.spec.kernel_name, dev)
            if self.spec.shared_bytes > 48 * 1024:
                fn.set_max_dynamic_shared(self.spec.shared_bytes)
            if getattr(self.spec, "programmatic", False):  # (a spec pickled before the field: False)
                fn.launch_programmatic()
            self._functions[dev] = fn
        return fn

    def _shared_bytes(self, values, dyn) -> int:
        """The dynamic shared memory of this call: a shared buffer is sized by its arguments."""
        from ..ir.analysis import shared_bytes_at_launch

        env = dict(dyn)
        for p, v in zip(self.spec.params, values):
            if isinstance(p, Var):
                env[p] = v
        return shared_bytes_at_launch(self.spec.shared_at_launch, env, self.spec.shared_bytes, self.spec.func_name)

    # ------------------------------------------------------------------ grid
    def _grid(self, values, dyn) -> tuple:
        """The grid of a call with symbolic sizes, remembered per value of the sizes and scalars it
        reads (evaluating the expressions was a fifth of an ops call's host time)."""
        if self._static_grid is not None:
            return self._static_grid
        reads = self._grid_reads
        if reads is None:
            reads = self._grid_reads = self._grid_inputs()
        key = tuple(dyn[v] if i is None else values[i] for v, i in reads)
        hit = self._grid_memo.get(key)
        if hit is not None:
            return hit
        env = dict(dyn)
        for p, v in zip(self.spec.params, values):
            if isinstance(p, Var):
                env[p] = v
        grid = [int(eval_expr(g, env)) for g in self.spec.grid]
        check_launch_grid(grid, self.spec.func_name, static=not reads)  # a zero dimension is an error, as in TileLang
        if self.spec.cluster_dims is not None:
            _check_whole_clusters(grid, self.spec.cluster_dims, self.spec.func_name)
        grid = tuple(grid) + (1,) * (3 - len(grid))
        if len(self._grid_memo) < _GRID_MEMO_SIZE:
            self._grid_memo[key] = grid
        return grid

    def _grid_inputs(self) -> list:
        """(Var, parameter index or None for a symbolic size) of every variable the grid reads."""
        index = {p: i for i, p in enumerate(self.spec.params) if isinstance(p, Var)}
        used = set().union(*(free_vars(g) for g in self.spec.grid)) if self.spec.grid else set()
        return sorted(((v, index.get(v)) for v in used), key=lambda x: x[0].name)

    # ------------------------------------------------------------------ arguments
    def _checked_bind(self, args):
        """The general path: every argument described and checked, errors naming the parameter."""
        spec = self.spec
        bound = bind_arguments(list(spec.params), list(spec.dyn_vars), args, kernel_name=spec.func_name,
                               device_type="gpu")
        dev = None
        for ta in bound.tensors:
            if ta is not None and ta.device_type != "none":  # "none": a None for a tensor the kernel never touches
                if ta.device_type == "cpu":
                    raise ArgumentError(f"{spec.func_name}: argument tensors are on the CPU; this kernel runs on the "
                                        f"GPU ({spec.vendor} {spec.arch}). Move them with .cuda(), or compile with "
                                        "target='interpret' to run on the CPU")
                dev = ta.device_index
                break
        check_dynamic_sizes(spec.func_name, spec.params, bound.dyn)
        values = [v.ptr if not isinstance(p, Var) else v for p, v in zip(spec.params, bound.values)]
        return values, bound.dyn, 0 if dev is None else dev

    def _fast_torch_bind(self, args, allocated: tuple = ()):
        """The common case in a few attribute reads per tensor; anything else returns None and goes
        through ``_checked_bind``, which explains what is wrong.

        Every check that keeps a launch from reading the wrong memory stays here, per call: dtype,
        shape, device, contiguity and 16-byte alignment of each tensor, the range of each scalar;
        what does not depend on the call (the expected dtypes and shapes) is prepared once."""
        fast = self._fast_spec if not allocated else self._fast_specs_allocated.get(allocated)
        if fast is None:
            if sys.modules.get("torch") is None:
                return None
            fast = _fast_spec(self.spec.params)
            if not allocated:
                self._fast_spec = fast
            else:  # the caller's new outputs of static shape: their pointers, unchecked
                fast = [(_ALLOCATED, None, None) if i in allocated and f[0] is _STATIC else f
                        for i, f in enumerate(fast)]
                self._fast_specs_allocated[allocated] = fast
        if len(args) != len(fast):
            return None
        values, dyn, dev = [], None, -1
        for (kind, want_dtype, dims), a in zip(fast, args):
            if kind is _STATIC or kind is _DYNAMIC:
                try:
                    if a.dtype is not want_dtype or not a.is_cuda:
                        return None
                    shape = a.shape
                except AttributeError:
                    return None  # not a tensor
                if kind is _STATIC:
                    if shape != dims:
                        return None
                else:
                    if len(shape) != len(dims):
                        return None
                    for want, got in zip(dims, shape):
                        if want.__class__ is int:
                            if want != got:
                                return None
                        elif dyn is None:
                            dyn = {want: got}
                        elif dyn.setdefault(want, got) != got:
                            return None
                ptr = a.data_ptr()
                if ptr & 15 or not a.is_contiguous():
                    return None
                d = a.get_device()
                if d != dev:
                    if dev != -1 or d < 0:
                        return None  # two devices (or a CPU tensor that says is_cuda): the checked path explains
                    dev = d
                values.append(ptr)
                continue
            if kind is _ALLOCATED:
                values.append(a.data_ptr())
                continue
            cls = a.__class__
            if kind is _INT:
                if cls is not int or not dims[0] <= a <= dims[1]:
                    return None  # the checked path says what is wrong
                values.append(a)
            elif kind is _FLOAT and (cls is float or cls is int):
                values.append(float(a))
            else:
                return None
        if dyn is None:
            return values, _NO_DYN, max(dev, 0)
        for v in dyn.values():
            if not 0 < v < 2**31:
                return None
        return values, dyn, max(dev, 0)


class PreparedLaunch:
    """``Launcher.launch_bound`` with the sizes, device and grid-read scalars of one call fixed
    (``Launcher.prepare``).  Call it with the values of a call that ``bind`` would give the same
    sizes, device and grid-read scalars (``matches`` checks the scalars): pointers of tensors of
    the bound signature, 16-byte aligned.  What depends on the pointers (TMA descriptors) is still
    made per call."""

    __slots__ = ("arg_types", "block", "dev", "dyn", "dyn_items", "fn", "grid", "reads", "runtime", "shared",
                 "tail", "tensor_maps")

    def __init__(self, launcher: Launcher, grid, shared: int, tail: list, dyn: dict, dev: int, reads: tuple):
        self.fn = launcher._functions.get(dev) or launcher.function(dev)
        self.grid, self.block, self.shared = grid, launcher._block, shared
        self.arg_types = launcher.arg_types
        self.tail = tail  # the symbolic sizes' values, passed after the parameters
        self.tensor_maps = launcher.tensor_maps
        self.dyn, self.dev, self.reads = dyn, dev, reads
        self.dyn_items = tuple(dyn.items())  # (the descriptors' cache key, made once)
        self.runtime = launcher.runtime

    def matches(self, values) -> bool:
        """Do ``values`` carry the scalars the grid (or the shared size) was worked out for?"""
        for i, v in self.reads:
            if values[i] != v or values[i].__class__ is not v.__class__:
                return False
        return True

    def fixed(self, values: list, n_lead: int):
        """A ``FixedLaunch`` of ``values`` (as for ``__call__``) for a caller whose later launches
        change only the ``n_lead`` leading values, all pointers (an ops plan: its scalars are fixed
        by its key); None where the runtime or the layout does not allow it (then ``__call__``)."""
        make = getattr(self.fn, "fixed_launch", None)
        maps = self.tensor_maps
        if make is None or (maps is not None and any(sp.param_index >= n_lead for sp in maps.specs)):
            return None
        full = list(values) + list(self.tail)
        if maps is not None:
            full += maps.encode(full, self.dyn, self.dyn_items)
        launch = make(self.grid, self.block, self.shared, self.arg_types, full, n_lead)
        return None if launch is None else FixedLaunch(self, launch, list(values[n_lead:]), len(values))

    def __call__(self, values: list, stream=None, sync: bool = False) -> None:
        """Launch with ``values`` (a list this call may extend)."""
        if self.tail:
            values += self.tail
        if self.tensor_maps is not None:
            values += self.tensor_maps.encode(values, self.dyn, self.dyn_items)
        if stream is None:
            stream = self.runtime.current_stream(self.dev)
        self.fn.launch(self.grid, self.block, self.shared, stream, self.arg_types, values)
        if sync:
            self.runtime.synchronize(self.dev)


class FixedLaunch:
    """A ``PreparedLaunch`` whose argument buffer is packed once (the runtime's fixed launch, e.g.
    ``cuda_driver.FixedCudaLaunch``): a launch writes the leading pointers, the TMA descriptors
    when the pointers they describe changed, and calls the driver.  Call it with the pointers only
    (``__call__(ptrs, stream, sync)``, as ``PreparedLaunch``'s with the scalars left out).  The
    buffer belongs to the thread that made it; another thread's launch takes ``PreparedLaunch``'s
    path (its per-thread buffer), so concurrent launches never send each other's pointers."""

    __slots__ = ("_described", "_direct", "_fast", "_last_maps", "_last_ptrs", "_map_index", "_map_params", "_owner",
                 "_rest", "_stream", "dev", "dyn", "dyn_items", "launch", "prepared", "runtime", "tensor_maps")

    def __init__(self, prepared: PreparedLaunch, launch, rest: list, n_params: int):
        self.prepared, self.launch, self._rest = prepared, launch, rest
        self.dev, self.runtime = prepared.dev, prepared.runtime
        self.dyn, self.dyn_items, self.tensor_maps = prepared.dyn, prepared.dyn_items, prepared.tensor_maps
        # the descriptors follow the parameters and the size arguments, in the encoder's order
        first = n_params + len(prepared.tail)
        self._map_index = tuple(range(first, first + len(self.tensor_maps.specs))) if self.tensor_maps else ()
        self._map_params = tuple(sp.param_index for sp in self.tensor_maps.specs) if self.tensor_maps else ()
        # the pointers the descriptors describe, picked in C (a list comprehension was a frame per launch)
        self._described = _itemgetter(*self._map_params) if self._map_params else None
        self._last_maps = self._last_ptrs = None
        self._owner = _get_ident()
        # the runtime's cheapest current-stream lookup once it has settled (cuda_driver: torch's raw one)
        settled = getattr(self.runtime, "current_stream_function", None)
        self._stream = (settled() if settled is not None else None) or self.runtime.current_stream
        # the runtime's launch may take the stream lookup and the launch in one call (cuda_driver's
        # compiled one: ``launch.current``, which checks the thread too): with no descriptors to
        # update (``_direct``) that is the whole call, else it follows their update
        self._fast = hasattr(launch, "set_stream_lookup")
        self._direct = self._fast and self.tensor_maps is None
        if self._fast:
            launch.set_stream_lookup(self._stream, self.dev, self._owner)

    def __call__(self, ptrs: list, stream=None, sync: bool = False) -> None:
        if self._direct and stream is None and not sync:  # (the common case inline: no frame)
            current = self.launch.current
            if current is not None:
                try:
                    if not current(ptrs):  # (0: launched; -2: another thread's call; else refused)
                        return None
                except Exception:  # noqa: BLE001 - (nothing was launched) the path below explains
                    pass
        if _get_ident() != self._owner:
            return self.prepared(list(ptrs) + self._rest, stream, sync)
        if self.tensor_maps is not None:
            described = self._described(ptrs)  # (one pointer, or a tuple of them: the same form every call)
            if described != self._last_ptrs:  # (the same pointers: the descriptors in the buffer are theirs)
                maps = self.tensor_maps.encode(ptrs, self.dyn, self.dyn_items)  # (cached per pointers)
                last = self._last_maps
                if maps is not last:
                    args = self.launch.args
                    for n, (i, raw) in enumerate(zip(self._map_index, maps)):
                        if last is None or raw != last[n]:  # (only those whose pointer changed: 128-byte copies)
                            args.write(i, raw)
                    self._last_maps = maps
                self._last_ptrs = described
            if self._fast and stream is None and not sync and self._current(ptrs):
                return None
        if stream is None:
            stream = self._stream(self.dev)
        self.launch(ptrs, stream)
        if sync:
            self.runtime.synchronize(self.dev)
        return None

    def _current(self, ptrs) -> bool:
        """Launch through the runtime's one-call launch where it has one now (``launch.current``: the
        bench switches it); True when launched, False when there is none or it launched nothing
        (another thread's call, a refusal: the caller's path then launches or explains).  (The
        same as ``__call__``'s first lines, which keep it inline for the calls without descriptors.)"""
        current = self.launch.current
        if current is None:
            return False
        try:
            return not current(ptrs)  # (0: launched; -2: another thread's call; else refused)
        except Exception:  # noqa: BLE001 - (nothing was launched)
            return False


_GRID_MEMO_SIZE = 4096  # distinct size combinations remembered per kernel (then evaluated per call)
_STATIC, _DYNAMIC, _INT, _FLOAT, _OTHER = "static", "dynamic", "int", "float", "other"
_ALLOCATED = "allocated"  # an output the caller has just allocated (Launcher.launch's ``allocated``)
_NO_DYN: dict = {}  # shared, never written: the sizes of a call without symbolic shapes


def _fast_spec(params) -> list:
    """Per parameter: (kind, torch dtype or None, shape: a tuple of ints for a static shape, with
    Vars for symbolic sizes; (min, max) for an integer scalar)."""
    from ..binding.tensor_args import to_torch_dtype

    out = []
    for p in params:
        if isinstance(p, t.Buffer):
            if p.attrs.get("explicit_strides") or dt.is_subbyte(p.dtype):
                # declared strides, or 4-bit elements two per byte (storage shape != shape): the general path
                out.append((_OTHER, None, None))
                continue
            shape = tuple(p.shape)
            if not all(isinstance(s, (int, Var)) for s in shape):
                # a dimension declared as an expression of sizes (n * 4): the general path solves the
                # sizes from it and checks it (binding/shape_exprs.py); here it would bind the
                # expression itself as a size
                out.append((_OTHER, None, None))
                continue
            static = all(isinstance(s, int) for s in shape)
            out.append((_STATIC if static else _DYNAMIC, to_torch_dtype(p.dtype), shape))
        elif p.dtype in ("int32", "int64"):
            out.append((_INT, None, (dt.min_value(p.dtype), dt.max_value(p.dtype))))
        elif p.dtype in ("float32", "float64"):
            out.append((_FLOAT, None, None))
        else:
            out.append((_OTHER, None, None))  # checked on the general path
    return out


def check_dynamic_sizes(func_name: str, params, dyn: dict) -> None:
    """Refuse a dynamic size the compiled code cannot address: sizes are passed as 32-bit ``int``
    parameters and the code's index arithmetic is proven against sizes in [0, 2^31 - 1] (see
    ``passes/offset_width.py``); a size declared ``T.dynamic(name, "int64")`` is a 64-bit parameter
    and the arithmetic is proven against [0, 2^63 - 1].  Static shapes need no check: the argument
    must match them."""
    for var, value in dyn.items():
        if 0 <= value <= (2**63 - 1 if var.dtype == "int64" else 2**31 - 1):
            continue
        where = next((f"dimension {d} of argument {p.name}" for p in params if isinstance(p, t.Buffer)
                      for d, s in enumerate(p.shape) if s is var), "a dynamic size")
        raise ArgumentError(f"{func_name}: {where} is {value}; the dynamic size {var.name} must lie in "
                            f"0..{2**31 - 1} for the compiled code (declare a static size to go beyond)")


def _check_whole_clusters(grid, cluster_dims, name: str) -> None:
    """A kernel declared with ``__cluster_dims__`` launches only on a grid of whole clusters."""
    for axis, (g, c) in enumerate(zip(grid, cluster_dims)):
        if g % c:
            raise ArgumentError(f"{name}: the grid's {'xyz'[axis]} size {g} (from these arguments) is not a multiple "
                                f"of the kernel's thread-block cluster {tuple(cluster_dims)}: a cluster launch needs "
                                "whole clusters; pass sizes that give whole clusters, or compile the kernel without "
                                "cluster_dims")
