"""``JITKernel``: a compiled kernel you call like a function.

Calling it with the input tensors allocates the ``out_idx`` outputs (on the inputs' device, or as
NumPy arrays for the CPU backends), checks every argument against its parameter and runs it on one
of three backends: ``device`` (the GPU: the compiler's ``LaunchSpec`` launched by
``runtime.launcher`` through the vendor's runtime), ``emulator`` (the lowered thread code executed
on the CPU) or ``interpret`` (the tile interpreter).  This is the JIT layer: it sits above the
runtime, the interpreters and the compiler, and none of them imports it.
"""

from __future__ import annotations

import contextlib
import os

import numpy as np

from ..binding.args import bind_arguments
from ..binding.packed import pack, storage_note, unpack_view
from ..binding.shape_exprs import shape_value, sizes_from_inputs
from ..binding.tensor_args import PACKED_STORAGE
from ..errors import ArgumentError
from ..ir import dtype as dt
from ..ir import tile as t
from ..ir.analysis import eval_expr
from ..ir.expr import Var
from ..runtime.launcher import check_dynamic_sizes
from ..target.grid import check_launch_grid


class JITKernel:
    def __init__(self, func: t.PrimFunc, target, out_idx: tuple, options: dict, backend: str, spec=None,
                 thread_kernel=None):
        self.func = func
        self.target = target
        self.out_idx = out_idx
        self.options = options
        self.backend = backend
        self.params = list(func.params)
        self.spec = spec  # runtime.launch_spec.LaunchSpec (GPU targets), None for the interpreter
        self.thread_kernel = thread_kernel  # the lowered kernel (None when served from the disk cache)
        self.compile_seconds = 0.0
        self._launcher = None
        self._out_plan = None  # made on the first call that allocates outputs
        self._makers: dict = {}  # device -> per output (index, its allocation: _output_makers)
        # T.alloc_global workspaces: hidden parameters after the declared ones, allocated by each call
        self.workspace_idx = tuple(i for i, p in enumerate(self.params)
                                 if isinstance(p, t.Buffer) and p.attrs.get("workspace"))
        self._allocated = tuple(out_idx) + self.workspace_idx
        # (declared parameters, inputs): what a call may pass, worked out once (not per call)
        n_declared = len(self.params) - len(self.workspace_idx)
        self._counts = (n_declared, n_declared - len(out_idx))
        self._host_assumes = func.attrs.get("host_assumes", ())
        from ..compiler import kernel_of

        self._interpret_threads = kernel_of(func).num_threads

    # ------------------------------------------------------------------ what was built
    @property
    def source(self) -> str:
        return self.spec.source if self.spec is not None else ""

    @property
    def code_object(self) -> bytes:
        return self.spec.code_object if self.spec is not None else b""

    @property
    def kernel_name(self) -> str:
        return self.spec.kernel_name if self.spec is not None else ""

    @property
    def num_threads(self) -> int:
        return self.spec.num_threads if self.spec is not None else self._interpret_threads

    @property
    def shared_bytes(self) -> int:
        return self.spec.shared_bytes if self.spec is not None else 0

    @property
    def toolchain(self) -> str:
        return self.spec.toolchain if self.spec is not None else ""

    @property
    def resources(self) -> dict:
        return self.spec.resources if self.spec is not None else {}

    @property
    def resource_usage(self) -> dict:
        """Registers, shared memory, local (scratch) bytes and spills of the compiled kernel."""
        return dict(self.resources)

    @property
    def launcher(self):
        """The ``runtime.launcher.Launcher`` of the device backend (made on first use)."""
        if self._launcher is None:
            from ..backends import backend_for
            from ..runtime.launcher import Launcher

            self._launcher = Launcher(self.spec, backend_for(self.target).device_runtime())
        return self._launcher

    @property
    def _tma(self):
        """The TMA descriptor encoder when the kernel loads tiles through TMA, else None."""
        if self.spec is None or not self.spec.tensor_maps:
            return None
        return self.launcher.tensor_maps

    @property
    def _arg_types(self) -> tuple:
        return self.spec.arg_types

    def get_kernel_source(self, kernel_only: bool = True) -> str:
        """The CUDA or HIP source of the kernel (the Tile IR text on the interpreter).  There is no
        separate host source: ``kernel_only`` is TileLang's switch for it and changes nothing."""
        if self.backend == "interpret":
            return self.func.script()
        return self.source

    @property
    def kernel_source(self) -> str:
        return self.get_kernel_source()

    @property
    def host_source(self) -> str:
        return self.get_host_source()

    def show_source(self, which: str = "kernel") -> None:
        """Print the kernel source ("kernel"), the host source ("host": empty, tilewright's launcher
        is Python) or both."""
        if which not in ("kernel", "host", "both"):
            raise ValueError(f"Unknown option for 'which': {which!r}; use 'kernel', 'host' or 'both'")
        if which in ("kernel", "both"):
            print(self.get_kernel_source())
        if which in ("host", "both"):
            print(self.get_host_source())

    def export_sources(self, kernel_path: str | None = None, host_path: str | None = None) -> None:
        """Write the kernel source to ``kernel_path`` and/or the (empty) host source to ``host_path``."""
        import os

        if kernel_path is None and host_path is None:
            raise ValueError("At least one of kernel_path or host_path must be provided.")
        for path, text in ((kernel_path, self.get_kernel_source()), (host_path, self.get_host_source())):
            if path is None:
                continue
            folder = os.path.dirname(path)
            if folder:
                os.makedirs(folder, exist_ok=True)
            with open(path, "w") as f:
                f.write(text)

    def print_source_code(self, which: str = "kernel", file: str | None = None) -> None:
        """TileLang's older spelling: ``export_sources(kernel_path=file)`` or ``show_source(which)``."""
        if file is not None:
            self.export_sources(kernel_path=file)
        else:
            self.show_source(which)

    def run_once(self, func=None):
        """Run the kernel (or ``func``) once on fresh random inputs (``get_profiler().run_once``)."""
        return self.get_profiler().run_once(func)

    @property
    def n_regs(self) -> int | None:
        return self.resources.get("registers")

    @property
    def n_spills(self) -> int | None:
        return self.resources.get("spills")

    @property
    def n_max_threads(self) -> int | None:
        return self.num_threads

    # TileLang's autotuner records on the kernel
    latency = None
    config = None
    ref_latency = None

    def update_tuner_result(self, latency: float, config: dict, ref_latency: float):
        self.latency, self.config, self.ref_latency = latency, config, ref_latency
        return self

    def get_tuner_result(self) -> dict:
        if self.latency is None:
            raise ValueError("Tuning results are not available. Please tune the kernel first.")
        return {"latency": self.latency, "config": self.config, "ref_latency": self.ref_latency}

    def get_code_object(self) -> bytes:
        if not self.spec.code_object and self.backend == "emulator" and self.spec.source:
            from ..compiler import fill_code_object

            fill_code_object(self.spec, self.target)
        return self.spec.code_object

    def get_host_source(self) -> str:
        return ""

    def get_profiler(self, tensor_supply_type=None):
        from ..profiler import Profiler

        return Profiler(self, tensor_supply_type)

    def export(self, path: str) -> str:
        from .export import export_kernel

        return export_kernel(self, path)

    def __repr__(self) -> str:
        return f"<JITKernel {self.func.name} target={self.target} backend={self.backend}>"

    # ------------------------------------------------------------------ calling
    def __call__(self, *args, stream=None):
        n_declared, n_in = self._counts
        fresh = ()  # indices of outputs made here as torch.empty of their static shape (the launcher trusts them)
        if len(args) == n_in and self._allocated:
            full, fresh = self._outputs_and_fresh(args)
        elif len(args) == n_declared and self.workspace_idx:
            full = self._with_outputs_general(args, self.workspace_idx)
        elif len(args) == len(self.params):
            full = list(args)
        else:
            raise ArgumentError(f"{self.func.name} takes {n_in} input(s)" + (
                f" (or all {n_declared} arguments)" if self.out_idx else "") + f"; {len(args)} were given")
        if self._host_assumes:
            self._check_assumes(full)
        if self.backend == "device":
            (self._launcher or self.launcher).launch(full, stream, _sync_after_launch(), fresh)
        elif self.backend == "interpret":
            with _storage_explained(self.func.name, self.params, full):
                self._run_interpret(full)
        else:
            with _storage_explained(self.func.name, self.params, full):
                self._run_emulator(full)
        if not self.out_idx:
            return None
        if len(self.out_idx) == 1:
            return full[self.out_idx[0]]
        return [full[i] for i in self.out_idx]

    def _check_assumes(self, full) -> None:
        """``T.assume`` conditions on sizes and scalar parameters, evaluated for this call's arguments:
        RuntimeError (as TileLang's host check) when one is false."""
        env = sizes_from_inputs(self.params, dict(enumerate(full)), self.func.name)  # sizes of n * 4 dims too
        for cond in self._host_assumes:
            try:
                holds = bool(eval_expr(cond, env))
            except (KeyError, ValueError):
                continue  # a size no argument gives: the binder explains it
            if not holds:
                from ..ir.visitor import free_vars

                bound = ", ".join(f"{v.name}={env[v]}" for v in sorted(free_vars(cond), key=lambda v: v.name))
                raise RuntimeError(f"{self.func.name}: Assume: {cond} does not hold for these arguments ({bound})")

    def _with_outputs(self, inputs) -> list:
        """The full argument list: ``inputs`` and new outputs (and workspaces)."""
        return self._outputs_and_fresh(inputs)[0]

    def _outputs_and_fresh(self, inputs) -> tuple:
        """(the full argument list, the indices of the outputs made as ``torch.empty`` of their
        static shape and dtype on the first input tensor's device, or () for the general path)."""
        plan = self._out_plan
        if plan is None:
            plan = self._out_plan = self._outputs_plan()
        in_params, outputs, like_index = plan
        like = inputs[like_index] if like_index is not None else None
        if outputs and self.backend == "device" and isinstance(like, outputs[0][3].Tensor):
            # the common case: torch inputs and outputs of static shape (prepared once)
            full = [None] * len(self.params)
            for i, a in zip(in_params, inputs):
                full[i] = a
            device = like.device
            makers = self._makers.get(device)
            if makers is None:
                makers = self._output_makers(outputs, device)
            for i, make in makers:
                full[i] = make()
            return full, self._allocated
        return self._with_outputs_general(inputs, self._allocated), ()

    def _output_makers(self, outputs, device) -> list:
        """Per output (its index, a function of no arguments making it on ``device``):
        ``torch.empty_like`` of a template where one is proven (``jit/alloc_template.py``: ~1 us of
        host time less per output than ``torch.empty`` with keywords), else ``torch.empty``;
        remembered per device."""
        from .alloc_template import empty_maker

        makers = [(i, empty_maker(torch, shape, dtype, device)) for i, shape, dtype, torch in outputs]
        if len(self._makers) < 64:
            self._makers[device] = makers
        return makers

    def _outputs_plan(self):
        """(input parameter indices, per output (index, static shape, torch dtype, torch) when every
        output shape is static and torch is imported, the input whose device the outputs take)."""
        import sys

        in_params = [i for i in range(len(self.params)) if i not in self._allocated]
        buffers = [n for n, i in enumerate(in_params) if isinstance(self.params[i], t.Buffer)]
        like_index = buffers[0] if buffers else None
        torch = sys.modules.get("torch")
        outputs = []
        for i in self._allocated:
            p = self.params[i]
            if torch is None or not all(isinstance(s, int) for s in p.shape):
                return in_params, [], like_index
            from ..binding.tensor_args import to_torch_dtype

            outputs.append((i, tuple(p.shape), to_torch_dtype(p.dtype), torch))
        return in_params, outputs, like_index

    def _with_outputs_general(self, inputs, allocated) -> list:
        """The full argument list: ``inputs`` for the parameters not in ``allocated``, new tensors
        (shapes from the inputs' sizes, on their device) for those in it."""
        in_params = [i for i in range(len(self.params)) if i not in allocated]
        full = [None] * len(self.params)
        for i, a in zip(in_params, inputs):
            full[i] = a
        like = next((full[i] for i in in_params if isinstance(self.params[i], t.Buffer) and full[i] is not None),
                    None)
        for i in in_params:
            p, a = self.params[i], full[i]
            if isinstance(p, t.Buffer) and a is not None and not hasattr(a, "shape"):
                raise ArgumentError(f"{self.func.name}: argument {p.name} is not a tensor")
        sizes = sizes_from_inputs(self.params, {i: full[i] for i in in_params}, self.func.name)
        for i in allocated:
            p = self.params[i]
            shape = []
            for s in p.shape:
                try:
                    shape.append(shape_value(s, sizes))
                except KeyError as e:
                    raise ArgumentError(f"{self.func.name}: the size {e.args[0]} of output {p.name} is not given "
                                        "by any input; pass the output tensor explicitly") from None
                if shape[-1] < 0:
                    raise ArgumentError(f"{self.func.name}: output {p.name} would have dimension {len(shape) - 1} "
                                        f"= {s} = {shape[-1]} for these arguments; sizes cannot be negative")
            full[i] = _empty_like(like, tuple(shape), p.dtype, self.backend)
        return full

    def _run_interpret(self, full) -> None:
        from ..interp.tile import run_tile_ir

        arrays, backs = _to_numpy_args(self.params, full)
        run_tile_ir(self.func, arrays)
        _copy_back(backs)

    def _run_emulator(self, full) -> None:
        from ..interp.emulator import run_thread_kernel

        arrays, backs = _to_numpy_args(self.params, full)
        bound = bind_arguments(self.params, self.func.dyn_vars, arrays, kernel_name=self.func.name, device_type="cpu",
                               host_arrays=True)
        check_dynamic_sizes(self.func.name, self.params, bound.dyn)
        static = self.spec.static_grid
        if static is None or 0 in static:  # a static T.Kernel(0) is refused by every call, as in TileLang
            env = dict(bound.dyn)
            env.update((p, v) for p, v in zip(self.params, bound.values) if isinstance(p, Var))
            check_launch_grid([int(eval_expr(g, env)) for g in self.spec.grid], self.func.name,
                              static=static is not None)
        run_thread_kernel(self.thread_kernel, arrays)
        _copy_back(backs)


def _sync_after_launch() -> bool:
    data = getattr(os.environ, "_data", None)  # os.environ's own dict: a lookup of ~0.1 us, where
    if data is not None and _SYNC_KEY is not None:  # os.environ.get encodes the key and raises inside (~1.5 us)
        if _SYNC_KEY not in data:
            return False  # the common case
    elif not os.environ.get(_SYNC_ENV):
        return False
    from .. import config

    return bool(config.get("verify_launch"))


_SYNC_ENV = "TILEWRIGHT_SYNC_LAUNCH"  # config.KNOBS["verify_launch"].env
try:
    _SYNC_KEY = os.environ.encodekey(_SYNC_ENV)  # the key as os.environ stores it (bytes on POSIX)
except AttributeError:
    _SYNC_KEY = None


class _Anything:
    def __contains__(self, key) -> bool:
        return True


# For the ops' launches (ops/bound_kernel.py), per launch: ``_SYNC_KEY in _SYNC_PROBE and
# _sync_after_launch()`` is ``_sync_after_launch()`` without its frame while the variable is unset
# (one dict lookup, ~80 ns less on the CPU stub bench).  _SYNC_PROBE is os.environ's own dict,
# which setting and deleting variables (monkeypatch too) change in place; where there is none,
# anything "is in" it and the function decides.
_SYNC_PROBE = getattr(os.environ, "_data", None) if _SYNC_KEY is not None else None
if _SYNC_PROBE is None:
    _SYNC_PROBE = _Anything()


def _empty_like(like, shape, dtype: str, backend: str):
    mod = type(like).__module__ if like is not None else ""
    if mod.startswith("torch"):
        import torch

        from ..binding.tensor_args import to_torch_dtype

        if dt.is_subbyte(dtype):  # stored two per byte
            shape = _packed_shape(shape, dtype)
        return torch.empty(shape, dtype=to_torch_dtype(dtype), device=like.device)
    if backend == "device":
        torch = _torch_with_gpu()
        if torch is None:
            raise ArgumentError("cannot allocate outputs on the GPU without torch tensors among the inputs; pass the "
                                "outputs explicitly")
        # no tensor among the inputs (scalars only): TileLang allocates on the current device
        return _empty_like(torch.empty(0, device="cuda"), shape, dtype, backend)
    return np.empty(shape, dtype=dt.to_numpy(dtype))


def _torch_with_gpu():
    """torch when it is installed and sees a GPU (CUDA or ROCm, both "cuda" to torch), else None."""
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def _packed_shape(shape, dtype: str) -> tuple:
    shape = tuple(shape)
    if not shape or shape[-1] % 2:
        raise ArgumentError(f"cannot allocate a {dtype} output of shape {shape}: two elements share a byte, so its "
                            "last dimension must be even")
    return (*shape[:-1], shape[-1] // 2)


def _to_numpy_args(params, full):
    """NumPy views of the arguments for the CPU backends (torch CPU tensors are viewed, not copied)."""
    arrays, backs = [], []
    for p, a in zip(params, full):
        if not isinstance(p, t.Buffer):
            arrays.append(a.item() if hasattr(a, "item") and not isinstance(a, (int, float)) else a)
            continue
        mod = type(a).__module__
        if dt.is_subbyte(p.dtype) and _is_byte_storage(a):
            # 4-bit values, two per byte: the CPU backends work on one element per byte (copied back after)
            view = a.detach().view(__import__("torch").uint8).numpy() if mod.startswith("torch") else a
            logical, unpacked, storage = unpack_view(view, p.dtype)  # strided storage keeps its strides
            arrays.append(logical)
            backs.append((unpacked, storage))
            continue
        if mod.startswith("torch"):
            if a.device.type != "cpu":
                raise ArgumentError(f"argument {p.name} is on {a.device}; the CPU backends take CPU tensors or NumPy "
                                    "arrays")
            if a.dtype.is_floating_point and a.element_size() == 2 and str(a.dtype) == "torch.bfloat16":
                view = a.detach().view(dtype=__import__("torch").int16).numpy().view(dt.to_numpy("bfloat16"))
            elif str(a.dtype).startswith("torch.float8"):  # torch has no NumPy conversion for some: via bytes
                name = str(a.dtype).removeprefix("torch.")
                view = a.detach().view(dtype=__import__("torch").uint8).numpy().view(dt.to_numpy(name))
            else:
                view = a.detach().numpy()
            arrays.append(view)
        else:
            arrays.append(a)  # NumPy arrays; anything else is explained by the argument binder
    return arrays, backs


@contextlib.contextmanager
def _storage_explained(kname: str, params, full):
    """The CPU backends check 4-bit byte storage after unpacking it: an error about such an argument says
    that its shape counts elements (as the device binder's does)."""
    try:
        yield
    except ArgumentError as e:
        for p, a in zip(params, full):
            if isinstance(p, t.Buffer) and dt.is_subbyte(p.dtype) and _is_byte_storage(a) \
                    and str(e).startswith(f"{kname}: argument {p.name} "):
                raise ArgumentError(f"{e} {storage_note(p)}") from None
        raise


def _is_byte_storage(a) -> bool:
    mod = type(a).__module__
    if mod.startswith("torch"):
        return a.device.type == "cpu" and str(a.dtype).removeprefix("torch.") in PACKED_STORAGE
    return isinstance(a, np.ndarray) and a.dtype.name in PACKED_STORAGE


def _copy_back(backs) -> None:
    for src, dst in backs:
        if src.dtype != dst.dtype:  # 4-bit values unpacked for the CPU backends: pack them again
            pack(src, dst)
        else:
            dst[...] = src
