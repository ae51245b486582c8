"""The host-side entry points: ``tilewright.compile`` and ``@tilewright.jit``.

``compile`` takes a ``PrimFunc`` (or a function written in the T language), runs the pass pipeline
for the target, prints CUDA or HIP source, compiles it with the vendor toolchain and returns a
``JITKernel``.  Results are memoized in memory (by the function object, then by a hash of its
canonical text) and on disk (code objects), so repeating a compile costs well under a millisecond.
"""

from __future__ import annotations

import enum
import functools
import os
import time

from . import config
from .compat import check_pass_configs, resolve_execution_backend
from .errors import CompileError
from .frontend.parser import parse_prim_func
from .ir import tile as t
from .jit.kernel import JITKernel
from .runtime import cache as disk_cache
from .runtime.launch_spec import LaunchSpec
from .target.base import Target

__all__ = ["compile", "jit", "lower", "print_source"]

_memo_by_obj: dict = {}
_memo_by_text: dict = {}


@functools.cache
def _compiler_fingerprint() -> str:
    """A hash of the compiler's own source files, part of every disk-cache key: a changed pass or
    printer must never be answered with code an older compiler made under the same version."""
    import hashlib

    from . import __version__

    root = os.path.dirname(os.path.abspath(__file__))
    h = hashlib.sha256(__version__.encode())
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                h.update(os.path.relpath(path, root).encode())
                with open(path, "rb") as f:
                    h.update(f.read())
    return h.hexdigest()[:16]


def _normalize_out_idx(func: t.PrimFunc, out_idx) -> tuple:
    # the declared parameters: T.alloc_global workspaces come after them and are not outputs
    n = len([p for p in func.params if not (isinstance(p, t.Buffer) and p.attrs.get("workspace"))])
    if out_idx is None:
        return ()
    if isinstance(out_idx, int):
        out_idx = [out_idx]
    out = []
    for i in out_idx:
        if not isinstance(i, int) or not -n <= i < n:
            raise CompileError(f"out_idx entry {i!r} is not a parameter index of {func.name} ({n} parameters)")
        j = i % n
        if not isinstance(func.params[j], t.Buffer):
            raise CompileError(f"out_idx entry {i} names the scalar parameter {func.params[j].name}; outputs must be "
                               "tensors")
        out.append(j)
    if len(set(out)) != len(out):
        raise CompileError(f"out_idx {out_idx!r} names a parameter twice")
    return tuple(out)


def _canonical_text(func: t.PrimFunc) -> str:
    text = func.attrs.get("_script")
    if text is None:
        text = func.script()
        func.attrs["_script"] = text
    return text


def compile(func, out_idx=None, target="auto", pass_configs=None, optimize_level: int = 2,
            execution_backend: str | None = None, target_host=None, verbose: bool = False) -> JITKernel:
    """Compile a prim_func for ``target`` and return a callable ``JITKernel``.

    ``execution_backend``: None (the GPU), or ``"emulator"`` to execute the lowered thread code of
    the target on the CPU (checks the lowering for any target, AMD included); TileLang's names
    ("auto", "tvm_ffi", "cython", "ctypes", "dlpack", "nvrtc", "torch", "cutedsl") mean the GPU.
    """
    if not isinstance(func, t.PrimFunc):
        func = parse_prim_func(func)
    out_idx, pass_configs = _attr_options(func, out_idx, pass_configs)
    if func.attrs.get("kernel_parts"):  # several T.Kernel blocks: compiled one by one, launched in order
        from .jit.sequence import KernelSequence

        return KernelSequence(func, [compile(p, out_idx, target, pass_configs, optimize_level, execution_backend,
                                             target_host, verbose) for p in func.attrs["kernel_parts"]])
    tgt = Target.parse(target)
    if optimize_level not in (0, 1, 2, 3):
        raise CompileError(f"optimize_level must be 0..3, got {optimize_level!r}")
    execution_backend = resolve_execution_backend(execution_backend)  # TileLang's names run on the device
    outs = _normalize_out_idx(func, out_idx)
    opts = _options(pass_configs, optimize_level, execution_backend)
    if target_host is not None:
        _warn_unused("target_host", "the host side is tilewright's own launcher; remove the argument")
    opt_key = repr(sorted((k, repr(v)) for k, v in opts.items()))
    memo_key = (id(func), tgt.key(), outs, opt_key)
    hit = _memo_by_obj.get(memo_key)
    if hit is not None and hit.func is func and not config.get("disable_cache"):
        return hit
    text_key = (_canonical_text(func), tgt.key(), outs, opt_key)
    hit = _memo_by_text.get(text_key)
    if hit is not None and not config.get("disable_cache"):
        _memo_by_obj[memo_key] = hit
        return hit
    _verify(func)
    kernel = _build(func, tgt, outs, opts, verbose)
    if not config.get("disable_cache"):
        _memo_by_obj[memo_key] = kernel
        _memo_by_text[text_key] = kernel
    return kernel


def _attr_options(func: t.PrimFunc, out_idx, pass_configs) -> tuple:
    """``out_idx`` and ``pass_configs`` with those the function carries (language/func_annotations.py,
    frontend/eager.py ``read_lazy_prim_func``): a function whose outputs are its returned ``T.empty``
    tensors takes no other ``out_idx`` (TileLang's ValueError); ``pass_configs`` entries win over
    ``T.annotate_pass_configs`` ones."""
    attr_out = func.attrs.get("tilelang_out_idx")
    if attr_out is not None:
        if out_idx is not None:
            raise ValueError(f"Out index conflict: {func.name} returns its T.empty outputs (out_idx {attr_out}), "
                             f"and out_idx={out_idx!r} is given too; remove the out_idx argument")
        out_idx = list(attr_out)
    from_attrs = dict(func.attrs.get("tilelang_pass_configs") or {})
    if func.attrs.get("tilelang_compile_flags"):
        from_attrs.setdefault("tl.device_compile_flags", list(func.attrs["tilelang_compile_flags"]))
    if from_attrs:
        given = {k.value if isinstance(k, enum.Enum) else str(k): v for k, v in (pass_configs or {}).items()}
        pass_configs = {**from_attrs, **given}
    return out_idx, pass_configs


def _options(pass_configs, optimize_level: int, execution_backend) -> dict:
    opts = {"optimize_level": optimize_level, "backend": execution_backend or "device"}
    for k, v in (pass_configs or {}).items():
        opts[k.value if isinstance(k, enum.Enum) else str(k)] = v  # PassConfigKey members by their value
    if pass_configs:
        check_pass_configs(opts)
    return opts


def kernel_from_spec(func: t.PrimFunc, spec: LaunchSpec, out_idx=None, target="auto", pass_configs=None,
                     optimize_level: int = 2) -> JITKernel:
    """A callable GPU kernel around a ``LaunchSpec`` that another process compiled from the same
    ``func`` and options (the autotuner's compile workers)."""
    tgt = Target.parse(target)
    return JITKernel(func, tgt, _normalize_out_idx(func, out_idx), _options(pass_configs, optimize_level, None),
                     backend="device", spec=spec)


def _verify(func: t.PrimFunc) -> None:
    """The Tile IR checks, also for functions built without the frontend (which runs them itself):
    thread partitions from `if`s on the thread index, then the verifier."""
    if func.attrs.get("_verified"):
        return
    from .frontend.partitions import form_partitions
    from .ir.verifier import verify

    verify(form_partitions(func))
    func.attrs["_verified"] = True


def lower(func, target="auto", optimize_level: int = 2):
    """Run the pass pipeline only; returns the thread-level ``ThreadKernel`` (for inspection)."""
    from .passes.pipeline import PassContext, run_pipeline

    if not isinstance(func, t.PrimFunc):
        func = parse_prim_func(func)
    parts = func.attrs.get("kernel_parts")
    if parts:
        raise CompileError(f"tilewright.lower lowers one kernel; {func.name} has {len(parts)} T.Kernel blocks",
                           func.loc, hint=f"lower each of {func.name}.attrs['kernel_parts'], or compile it "
                           "(tilewright.compile launches them in order)")
    from .language.source_kernel import source_kernel_of

    if source_kernel_of(func) is not None:
        raise CompileError(f"{func.name} is a T.CUDASourceCodeKernel: there is nothing to lower", func.loc,
                           hint="compile it (tilewright.compile(func, target='cuda')); get_kernel_source() "
                           "returns its source")
    _verify(func)
    tgt = Target.parse(target)
    kernel = run_pipeline(func, PassContext(tgt, {"optimize_level": optimize_level}))
    if not tgt.is_interpret:  # TileLang's lower() result carries the generated source
        from .backends import backend_for

        kernel.kernel_source = backend_for(tgt).print_source(kernel)
    return kernel


def _dumper(func_name: str):
    root = config.get("dump_dir")
    if not root:
        return None
    folder = os.path.join(root, func_name)
    os.makedirs(folder, exist_ok=True)

    def dump(name: str, text: str) -> None:
        with open(os.path.join(folder, name), "w") as f:
            f.write(text)

    return dump


def _build(func: t.PrimFunc, tgt: Target, outs: tuple, opts: dict, verbose: bool) -> JITKernel:
    from .language.source_kernel import source_kernel_of

    if source_kernel_of(func) is not None:
        return _build_source_kernel(func, tgt, outs, opts)
    if tgt.is_interpret:
        from .passes.check_clusters import check_clusters
        from .passes.pipeline import PassContext

        check_clusters(func, PassContext(tgt))  # no clusters here: refuse cluster features, warn on cluster_dims
        return JITKernel(func, tgt, outs, opts, backend="interpret")
    from .backends import backend_for
    from .passes.pipeline import PassContext, run_pipeline

    vendor = backend_for(tgt)
    dump = _dumper(func.name)
    backend = "emulator" if opts["backend"] == "emulator" else "device"
    t0 = time.perf_counter()
    toolchain_version = vendor.toolchain_version() if backend == "device" else "none"
    key = disk_cache.cache_key(_canonical_text(func), tgt.key(), repr(sorted(opts.items())), toolchain_version,
                               _compiler_fingerprint())
    if backend == "device":
        entry = disk_cache.load(key)
        if entry is not None:
            try:
                spec = _spec_from_cache(func, tgt, entry)
            except (KeyError, IndexError, TypeError, ValueError):
                disk_cache.discard(key)  # a record the kernel cannot use is a miss: compile it again
            else:
                k = JITKernel(func, tgt, outs, opts, backend=backend, spec=spec)
                k.compile_seconds = time.perf_counter() - t0
                return k
    thread_kernel = run_pipeline(func, PassContext(tgt, opts, dump))
    source = vendor.print_source(thread_kernel)
    if dump is not None:
        dump(vendor.source_name, source)
    spec = _spec_of(func, tgt, thread_kernel, source, opts)
    if backend == "device":
        fill_code_object(spec, tgt, dump_dir=os.path.join(config.get("dump_dir"), "toolchain") if dump else None)
        disk_cache.store(key, _cache_meta(spec), spec.code_object, source)
    k = JITKernel(func, tgt, outs, opts, backend=backend, spec=spec, thread_kernel=thread_kernel)
    k.compile_seconds = time.perf_counter() - t0
    if verbose:
        print(f"[tilewright] compiled {func.name} for {tgt} in {k.compile_seconds:.3f}s")
    return k


def _build_source_kernel(func: t.PrimFunc, tgt: Target, outs: tuple, opts: dict) -> JITKernel:
    """A ``T.CUDASourceCodeKernel``: the user's CUDA source compiled by NVRTC (language/source_kernel.py)."""
    from .language.source_kernel import source_kernel_of

    source, entry = source_kernel_of(func)
    if tgt.kind != "cuda" or opts["backend"] == "emulator":
        where = "the emulator" if opts["backend"] == "emulator" else f"target {tgt}"
        raise CompileError(f"{func.name} is a T.CUDASourceCodeKernel (CUDA source): {where} cannot run it",
                           func.body.loc, hint="compile it for a CUDA target (target='cuda') and run it on an "
                           "NVIDIA GPU")
    kernel = func.body
    spec = _spec(func, tgt, kernel_name=entry, code_object=b"", source=source, num_threads=kernel.num_threads,
                 shared_bytes=0, resources={"shared_bytes": 0})
    fill_code_object(spec, tgt)
    return JITKernel(func, tgt, outs, opts, backend="device", spec=spec)


def print_source(thread_kernel, target) -> str:
    """The CUDA or HIP source of a lowered kernel (``lower``'s result) for ``target``."""
    from .backends import backend_for

    return backend_for(Target.parse(target) if isinstance(target, str) else target).print_source(thread_kernel)


def _spec(func: t.PrimFunc, tgt: Target, **built) -> LaunchSpec:
    """The launch spec of ``func`` for ``tgt``: what the function and target say, plus ``built``
    (what the compile produced, or the disk cache kept of it)."""
    from .passes.check_clusters import cluster_dims_for

    kernel = kernel_of(func)
    return LaunchSpec(vendor=tgt.kind, arch=tgt.arch, func_name=func.name, grid=kernel.grid,
                      params=tuple(func.params), dyn_vars=tuple(func.dyn_vars),
                      cluster_dims=cluster_dims_for(kernel, tgt), programmatic=_programmatic(kernel, tgt), **built)


def _programmatic(kernel: t.Kernel, tgt: Target) -> bool:
    """Is ``kernel`` launched with programmatic stream serialization: it waits for the previous kernel
    itself (``T.pdl_sync``: a ``GridDependency`` wait) on a CUDA target that has it (sm_90 and newer)."""
    from .ir import thread as th
    from .ir.visitor import walk

    if not (tgt.is_cuda and tgt.has("cluster")):
        return False
    found = []
    walk(kernel, lambda s: found.append(s) if isinstance(s, th.GridDependency) and s.action == "wait" else None)
    return bool(found)


def _spec_of(func: t.PrimFunc, tgt: Target, thread_kernel, source: str, opts: dict | None = None) -> LaunchSpec:
    from .runtime.tensor_maps import l2_promotion_of, specs_of

    return _spec(func, tgt, kernel_name=thread_kernel.name, code_object=b"", source=source,
                 num_threads=thread_kernel.num_threads, shared_bytes=thread_kernel.shared_bytes,
                 tensor_maps=tuple(specs_of(thread_kernel, l2_promotion_of(opts or {}))),
                 resources={"shared_bytes": thread_kernel.shared_bytes},
                 shared_at_launch=thread_kernel.attrs.get("shared_at_launch"))


def fill_code_object(spec: LaunchSpec, tgt: Target, dump_dir=None) -> None:
    """Compile ``spec.source`` with the vendor toolchain into ``spec``: code object and resources."""
    from .backends import backend_for

    binary = backend_for(tgt).compile(spec.source, tgt.arch, [spec.kernel_name], dump_dir=dump_dir)
    spec.code_object = getattr(binary, "cubin", None) or binary.code_object
    spec.toolchain = binary.toolchain
    res = dict(binary.resources.get(spec.kernel_name, {}))
    if "registers" not in res and "vgpr" in res:
        res["registers"] = res["vgpr"]
    res["shared_bytes"] = int(res.get("shared_bytes", 0)) + spec.shared_bytes  # static + dynamic
    res.setdefault("local_bytes", res.get("scratch_bytes", 0))
    spec.resources = res


def _cache_meta(spec: LaunchSpec) -> dict:
    meta = {"kernel_name": spec.kernel_name, "num_threads": spec.num_threads, "shared_bytes": spec.shared_bytes,
            "resources": spec.resources, "toolchain": spec.toolchain,
            "tensor_maps": [tm.to_json() for tm in spec.tensor_maps]}
    if spec.shared_at_launch is not None:  # the expression is rebuilt from the function's buffer
        meta["shared_at_launch_base"] = spec.shared_at_launch[2]
    return meta


def _shared_at_launch_of(func: t.PrimFunc, entry: dict):
    """A cached kernel's ``shared_at_launch``: its shared buffer sized at launch, at the kept offset."""
    from .ir.analysis import shared_at_launch
    from .ir.visitor import walk

    base = entry.get("shared_at_launch_base")
    if base is None:
        return None
    found = []
    walk(func.body, lambda s: found.append(s.buffer) if isinstance(s, t.Alloc) and s.buffer.scope == "shared"
         and s.buffer.static_shape() is None else None)
    return shared_at_launch(found[0], int(base)) if found else None


def _spec_from_cache(func: t.PrimFunc, tgt: Target, entry: dict) -> LaunchSpec:
    from .runtime.tensor_maps import TensorMapSpec

    return _spec(func, tgt, kernel_name=entry["kernel_name"], code_object=entry["code_object"],
                 source=entry["source"], num_threads=entry["num_threads"], shared_bytes=entry["shared_bytes"],
                 tensor_maps=tuple(TensorMapSpec.from_json(v) for v in entry.get("tensor_maps", [])),
                 resources=entry["resources"], toolchain=entry["toolchain"],
                 shared_at_launch=_shared_at_launch_of(func, entry))


def kernel_of(func: t.PrimFunc) -> t.Kernel:
    from .ir.visitor import walk

    found = []
    walk(func.body, lambda s: found.append(s) if isinstance(s, t.Kernel) else None)
    if not found:
        raise CompileError(f"{func.name} has no T.Kernel")
    return found[0]


# --------------------------------------------------------------------------------------------


class _JitFunction:
    """``@tilewright.jit``: calling the decorated builder with its arguments returns the compiled
    kernel (memoized per arguments)."""

    def __init__(self, builder, out_idx, target, pass_configs, optimize_level, execution_backend):
        self.builder = builder
        self.kw = dict(out_idx=out_idx, target=target, pass_configs=pass_configs, optimize_level=optimize_level,
                       execution_backend=execution_backend)
        self.cache: dict = {}
        functools.update_wrapper(self, builder)

    def __call__(self, *args, **kwargs):
        key = (args, tuple(sorted(kwargs.items())))
        try:
            hit = self.cache.get(key)
        except TypeError:
            hit, key = None, None
        if hit is not None:
            return hit
        func = self.builder(*args, **kwargs)
        if not isinstance(func, t.PrimFunc):
            raise CompileError(f"@tilewright.jit function {self.builder.__name__} must return a @T.prim_func, "
                               f"got {type(func).__name__}")
        kernel = compile(func, **self.kw)
        if key is not None:
            self.cache[key] = kernel
        return kernel

    def get_tir(self, *args, **kwargs):
        return self.builder(*args, **kwargs)

    def compile(self, *args, **kwargs) -> JITKernel:
        """The kernel for these builder arguments (the same as calling the function)."""
        return self(*args, **kwargs)

    def par_compile(self, configs, num_workers=None, ignore_error: bool = False) -> list:
        """The kernels of many builder configs (tuples of positional arguments or dicts), in order
        (TileLang's ``par_compile``; see ``jit/parallel.py``)."""
        from .jit.parallel import compile_each, config_call

        return compile_each([config_call(self, c) for c in configs], ignore_error)


def _warn_unused(name: str, why: str) -> None:
    import warnings

    from .errors import TilewrightWarning

    warnings.warn(f"argument {name}= has no effect in tilewright: {why}", TilewrightWarning, stacklevel=3)


def jit(func=None, *, out_idx=None, target="auto", pass_configs=None, optimize_level: int = 2,
        execution_backend=None, **ignored):
    """Decorator for a builder function returning a prim_func (see ``_JitFunction``), or for an
    eager-style function that is the kernel itself (see ``jit/eager.py``).  TileLang's
    other ``jit`` arguments (``verbose``, ``debug_root_path``, ``compile_flags``...) are accepted
    with a warning naming them."""
    for name in ignored:
        _warn_unused(name, "tilewright.jit reads out_idx, target, pass_configs, optimize_level and "
                     "execution_backend; remove it")
    def wrap(f):
        from .frontend.eager import is_eager_function

        if is_eager_function(f):  # the function is the kernel (TileLang's eager style): jit/eager.py
            from .jit.eager import EagerJitFunction

            return EagerJitFunction(f, dict(out_idx=out_idx, target=target, pass_configs=pass_configs,
                                            optimize_level=optimize_level,
                                            execution_backend=execution_backend))
        return _JitFunction(f, out_idx, target, pass_configs, optimize_level, execution_backend)

    return wrap(func) if func is not None else wrap
