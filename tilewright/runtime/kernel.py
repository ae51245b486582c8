"""``JITKernel``: a compiled kernel you call like a function.

Calling it with the input tensors allocates the ``out_idx`` outputs (on the inputs' device, or as
NumPy arrays for the CPU backends), checks every argument against its parameter, evaluates the
grid from the symbolic sizes and launches on PyTorch's current stream (CUDA driver API, or the HIP
runtime on ROCm).  Backends: ``device`` (the GPU), ``emulator`` (the lowered thread code executed on
the CPU), ``interpret`` (the tile interpreter).
"""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError, TilewrightError
from ..ir import dtype as dt
from ..ir import tile as t
from ..ir.expr import Var
from ..passes.analysis import eval_expr
from ..passes.check_target_limits import check_launch_grid
from .args import bind_arguments

_ARG_TYPES = {"float32": "f32", "float64": "f64", "int32": "i32", "int64": "i64", "uint32": "u32", "bool": "i32",
              "int16": "i32", "int8": "i32", "uint8": "i32"}


class JITKernel:
    def __init__(self, func: t.PrimFunc, target, out_idx: tuple, options: dict, backend: str):
        self.func = func
        self.target = target
        self.out_idx = out_idx
        self.options = options
        self.backend = backend
        self.params = list(func.params)
        self.thread_kernel = None
        self.source = ""
        self.code_object = b""
        self.kernel_name = ""
        kernel_node = _kernel_of(func)  # found once: walking the IR on every launch cost ~150 us
        self.num_threads = kernel_node.num_threads
        self._grid = tuple(kernel_node.grid)
        consts = [g.value if hasattr(g, "value") and isinstance(g.value, int) else None for g in self._grid]
        self._static_grid = None if None in consts else tuple(consts) + (1,) * (3 - len(consts))
        self.shared_bytes = 0
        self.resources: dict = {}
        self.toolchain = ""
        self.compile_seconds = 0.0
        self._modules: dict = {}
        self._fast_spec = None
        self._arg_types = tuple("ptr" if isinstance(p, t.Buffer) else _ARG_TYPES.get(p.dtype, "f32")
                                for p in self.params) + tuple("i32" for _ in func.dyn_vars)
        self._tma = None  # TensorMapEncoder when the kernel loads tiles through TMA

    def _use_tensor_maps(self, specs) -> None:
        """The kernel takes TMA descriptors after its arguments: encode them at every launch."""
        from .tensor_maps import TensorMapEncoder

        if specs:
            self._tma = TensorMapEncoder(list(specs), self.params, self.func.name)
            self._arg_types = self._arg_types[:len(self.params) + len(self.func.dyn_vars)] + ("tmap",) * len(specs)

    # ------------------------------------------------------------------ build results
    def _adopt_binary(self, binary) -> None:
        self.code_object = getattr(binary, "cubin", None) or binary.code_object
        self.resources = dict(binary.resources.get(self.kernel_name, {}))
        self.toolchain = binary.toolchain
        if "registers" not in self.resources and "vgpr" in self.resources:
            self.resources["registers"] = self.resources["vgpr"]
        self.resources.setdefault("shared_bytes", 0)
        self.resources["shared_bytes"] = int(self.resources.get("shared_bytes", 0)) + self.shared_bytes
        self.resources.setdefault("local_bytes", self.resources.get("scratch_bytes", 0))

    def _cache_meta(self) -> dict:
        return {"kernel_name": self.kernel_name, "num_threads": self.num_threads, "shared_bytes": self.shared_bytes,
                "resources": self.resources, "toolchain": self.toolchain,
                "tensor_maps": [sp.to_json() for sp in (self._tma.specs if self._tma else [])]}

    def _adopt_cached(self, entry: dict) -> None:
        self.kernel_name = entry["kernel_name"]
        self.num_threads = entry["num_threads"]
        self.shared_bytes = entry["shared_bytes"]
        self.resources = entry["resources"]
        self.toolchain = entry["toolchain"]
        self.code_object = entry["code_object"]
        self.source = entry["source"]
        from .tensor_maps import TensorMapSpec

        self._use_tensor_maps([TensorMapSpec.from_json(v) for v in entry.get("tensor_maps", [])])

    # ------------------------------------------------------------------ inspection
    @property
    def resource_usage(self) -> dict:
        """Registers, shared memory, local (scratch) bytes and spills of the compiled kernel."""
        return dict(self.resources)

    def get_kernel_source(self) -> str:
        if self.backend == "interpret":
            return self.func.script()
        return self.source

    def get_code_object(self) -> bytes:
        if not self.code_object and self.backend == "emulator" and self.source:
            from ..compiler import _toolchain_compile

            self._adopt_binary(_toolchain_compile(self.source, self.target, self.kernel_name, None))
        return self.code_object

    def get_host_source(self) -> str:
        return ""

    def get_profiler(self, tensor_supply_type=None):
        from ..profiler import Profiler

        return Profiler(self)

    def export(self, path: str) -> str:
        from .export import export_kernel

        return export_kernel(self, path)

    def __repr__(self) -> str:
        return f"<JITKernel {self.func.name} target={self.target} backend={self.backend}>"

    # ------------------------------------------------------------------ calling
    def __call__(self, *args, stream=None):
        n_in = len(self.params) - len(self.out_idx)
        if len(args) == n_in and self.out_idx:
            full = self._with_outputs(args)
        elif len(args) == len(self.params):
            full = list(args)
        else:
            raise ArgumentError(f"{self.func.name} takes {n_in} input(s)" + (
                f" (or all {len(self.params)} arguments)" if self.out_idx else "") + f"; {len(args)} were given")
        if self.backend == "interpret":
            self._run_interpret(full)
        elif self.backend == "emulator":
            self._run_emulator(full)
        else:
            self._launch(full, stream)
        outs = [full[i] for i in self.out_idx]
        if not outs:
            return None
        return outs[0] if len(outs) == 1 else outs

    def _with_outputs(self, inputs) -> list:
        in_params = [i for i in range(len(self.params)) if i not in self.out_idx]
        full = [None] * len(self.params)
        for i, a in zip(in_params, inputs):
            full[i] = a
        dyn: dict = {}
        like = None
        for i in in_params:
            p, a = self.params[i], full[i]
            if isinstance(p, t.Buffer):
                shape = tuple(a.shape) if hasattr(a, "shape") else None
                if shape is None:
                    raise ArgumentError(f"{self.func.name}: argument {p.name} is not a tensor")
                if len(shape) == p.ndim:
                    for want, got in zip(p.shape, shape):
                        if isinstance(want, Var):
                            dyn.setdefault(want, int(got))
                like = like if like is not None else a
        for i in self.out_idx:
            p = self.params[i]
            shape = []
            for s in p.shape:
                if isinstance(s, Var):
                    if s not in dyn:
                        raise ArgumentError(f"{self.func.name}: the size {s.name} of output {p.name} is not given "
                                            "by any input; pass the output tensor explicitly")
                    shape.append(dyn[s])
                else:
                    shape.append(s)
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
        if self._static_grid is None:
            env = dict(bound.dyn)
            env.update((p, v) for p, v in zip(self.params, bound.values) if isinstance(p, Var))
            check_launch_grid([int(eval_expr(g, env)) for g in self._grid], self.func.name)
        run_thread_kernel(self.thread_kernel, arrays)
        _copy_back(backs)

    def _launch(self, full, stream) -> None:
        vendor = "hip" if self.target.is_hip else "cuda"
        fast = self._fast_torch_bind(full)
        if fast is not None:
            values, dyn, dev = fast
        else:
            values, dyn, dev = self._checked_bind(full)
        fn = self._function(dev, vendor)
        if self._static_grid is not None:
            grid = self._static_grid
        else:
            env = dict(dyn)
            for p, v in zip(self.params, values):
                if isinstance(p, Var):
                    env[p] = v
            grid = [int(eval_expr(g, env)) for g in self._grid]
            check_launch_grid(grid, self.func.name)
            if any(g <= 0 for g in grid):
                return  # nothing to do (an empty dynamic size)
            grid = tuple(grid) + (1,) * (3 - len(grid))
        if self._tma is not None:
            values = list(values) + [dyn[v] for v in self.func.dyn_vars] + self._tma.encode(values, dyn)
        else:
            values = list(values) + [dyn[v] for v in self.func.dyn_vars]
        if stream is None:
            stream = _current_stream(vendor, dev)
        fn.launch(grid, (self.num_threads, 1, 1), self.shared_bytes, stream, self._arg_types, tuple(values))
        if _sync_after_launch():
            _synchronize(vendor, dev)

    def _checked_bind(self, full):
        """The general path: every argument described and checked, errors naming the parameter."""
        bound = bind_arguments(self.params, self.func.dyn_vars, full, kernel_name=self.func.name, device_type="gpu")
        dev = None
        for ta in bound.tensors:
            if ta is not None:
                if ta.device_type == "cpu":
                    raise ArgumentError(f"{self.func.name}: argument tensors are on the CPU; this kernel runs on the "
                                        f"GPU ({self.target}). Move them with .cuda(), or compile with "
                                        "target='interpret' to run on the CPU")
                dev = ta.device_index
                break
        values = [v.ptr if not isinstance(p, Var) else v for p, v in zip(self.params, bound.values)]
        return values, bound.dyn, 0 if dev is None else dev

    def _fast_torch_bind(self, full):
        """The common case in a few attribute reads per tensor: GPU torch tensors of exactly the
        expected dtype and shape, contiguous and aligned, on one device.  Anything else returns None
        and goes through ``_checked_bind``, which explains what is wrong."""
        import sys

        torch = sys.modules.get("torch")
        if torch is None:
            return None
        spec = self._fast_spec
        if spec is None:
            spec = self._fast_spec = _fast_spec(self.params)
        values, dyn, dev = [], {}, None
        for (kind, want_dtype, dims), a in zip(spec, full):
            if kind == "scalar":
                if not isinstance(a, (int, float)) or isinstance(a, bool):
                    return None
                values.append(a if want_dtype == "int" and isinstance(a, int) else
                              float(a) if want_dtype == "float" else None)
                if values[-1] is None or (dims is not None and not dims[0] <= a <= dims[1]):
                    return None  # the checked path says what is wrong
                continue
            if not isinstance(a, torch.Tensor) or a.dtype is not want_dtype or not a.is_cuda:
                return None
            shape = a.shape
            if len(shape) != len(dims):
                return None
            for want, got in zip(dims, shape):
                if isinstance(want, int):
                    if want != got:
                        return None
                elif dyn.setdefault(want, got) != got:
                    return None
            ptr = a.data_ptr()
            if ptr % 16 or not a.is_contiguous():
                return None
            d = a.device.index
            if dev is None:
                dev = d
            elif d != dev:
                return None
            values.append(ptr)
        if any(not (0 < v < 2**31) for v in dyn.values()):
            return None
        return values, dyn, 0 if dev is None else dev

    def _function(self, dev: int, vendor: str):
        fn = self._modules.get(dev)
        if fn is not None:
            return fn
        if vendor == "cuda":
            from .cuda_driver import CudaModule

            mod = CudaModule(self.code_object, dev)
        else:
            from .hip_runtime import HipModule

            mod = HipModule(self.code_object, dev)
        fn = mod.function(self.kernel_name)
        fn._module_ref = mod  # keep the module alive with the function
        if self.shared_bytes > 48 * 1024:
            fn.set_max_dynamic_shared(self.shared_bytes)
        self._modules[dev] = fn
        return fn


def _sync_after_launch() -> bool:
    from .. import config

    return bool(config.get("verify_launch"))


def _synchronize(vendor: str, dev: int) -> None:
    """TILEWRIGHT_SYNC_LAUNCH=1: wait for the kernel and raise here if it faulted (debugging)."""
    if vendor == "cuda":
        from .cuda_driver import synchronize

        synchronize(dev)
    else:
        from .hip_runtime import get_runtime

        get_runtime().synchronize()


def _fast_spec(params) -> list:
    """Per parameter: ("buffer", torch dtype, dims with Vars for symbolic sizes) or ("scalar", kind)."""
    from .tensor_args import to_torch_dtype

    out = []
    for p in params:
        if isinstance(p, t.Buffer):
            out.append(("buffer", to_torch_dtype(p.dtype), tuple(p.shape)))
        elif p.dtype in ("int32", "int64"):
            out.append(("scalar", "int", (dt.min_value(p.dtype), dt.max_value(p.dtype))))
        elif p.dtype in ("float32", "float64"):
            out.append(("scalar", "float", None))
        else:
            out.append(("scalar", "other", None))  # checked on the general path
    return out


def _kernel_of(func) -> t.Kernel:
    from ..ir.visitor import walk

    found = []
    walk(func.body, lambda s: found.append(s) if isinstance(s, t.Kernel) else None)
    if not found:
        raise TilewrightError(f"{func.name} has no T.Kernel")
    return found[0]


def _current_stream(vendor: str, dev: int) -> int:
    import sys

    torch = sys.modules.get("torch")
    if torch is None:
        return 0
    try:
        return torch.cuda.current_stream(dev).cuda_stream
    except Exception:  # noqa: BLE001 - no usable torch stream: default stream
        return 0


def _empty_like(like, shape, dtype: str, backend: str):
    mod = type(like).__module__ if like is not None else ""
    if mod.startswith("torch"):
        import torch

        from .tensor_args import to_torch_dtype

        return torch.empty(shape, dtype=to_torch_dtype(dtype), device=like.device)
    if backend == "device":
        raise ArgumentError("cannot allocate outputs on the GPU without torch tensors among the inputs; pass the "
                            "outputs explicitly")
    return np.empty(shape, dtype=dt.to_numpy(dtype))


def _to_numpy_args(params, full):
    """NumPy views of the arguments for the CPU backends (torch CPU tensors are viewed, not copied)."""
    arrays, backs = [], []
    for p, a in zip(params, full):
        if not isinstance(p, t.Buffer):
            arrays.append(a.item() if hasattr(a, "item") and not isinstance(a, (int, float)) else a)
            continue
        mod = type(a).__module__
        if mod.startswith("torch"):
            if a.device.type != "cpu":
                raise ArgumentError(f"argument {p.name} is on {a.device}; the CPU backends take CPU tensors or NumPy "
                                    "arrays")
            if a.dtype.is_floating_point and a.element_size() == 2 and str(a.dtype) == "torch.bfloat16":
                view = a.view(dtype=__import__("torch").int16).numpy().view(dt.to_numpy("bfloat16"))
            else:
                view = a.numpy()
            arrays.append(view)
        else:
            arrays.append(a)  # NumPy arrays; anything else is explained by the argument binder
    return arrays, backs


def _copy_back(backs) -> None:
    for src, dst in backs:
        dst[...] = src
