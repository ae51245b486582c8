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
from .errors import CompileError
from .frontend.parser import parse_prim_func
from .ir import tile as t
from .runtime import cache as disk_cache
from .runtime.kernel import JITKernel
from .target.base import Target

__all__ = ["compile", "jit", "lower"]

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
    n = len(func.params)
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
    the target on the CPU (checks the lowering for any target, AMD included).
    """
    if not isinstance(func, t.PrimFunc):
        func = parse_prim_func(func)
    tgt = Target.parse(target)
    if optimize_level not in (0, 1, 2, 3):
        raise CompileError(f"optimize_level must be 0..3, got {optimize_level!r}")
    if execution_backend not in (None, "emulator", "interpret"):
        raise CompileError(f"unknown execution_backend {execution_backend!r}; use None or 'emulator'")
    outs = _normalize_out_idx(func, out_idx)
    opts = {"optimize_level": optimize_level, "backend": execution_backend or "device"}
    for k, v in (pass_configs or {}).items():
        opts[k.value if isinstance(k, enum.Enum) else str(k)] = v  # PassConfigKey members by their value
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
    kernel = _build(func, tgt, outs, opts, verbose)
    if not config.get("disable_cache"):
        _memo_by_obj[memo_key] = kernel
        _memo_by_text[text_key] = kernel
    return kernel


def lower(func, target="auto", optimize_level: int = 2):
    """Run the pass pipeline only; returns the thread-level ``ThreadKernel`` (for inspection)."""
    from .passes.pipeline import PassContext, run_pipeline

    if not isinstance(func, t.PrimFunc):
        func = parse_prim_func(func)
    return run_pipeline(func, PassContext(Target.parse(target), {"optimize_level": optimize_level}))


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
    if tgt.is_interpret:
        return JITKernel(func, tgt, outs, opts, backend="interpret")
    from .passes.pipeline import PassContext, run_pipeline

    dump = _dumper(func.name)
    backend = "emulator" if opts["backend"] == "emulator" else "device"
    t0 = time.perf_counter()
    toolchain_version = _toolchain_version(tgt) if backend == "device" else "none"
    key = disk_cache.cache_key(_canonical_text(func), tgt.key(), repr(sorted(opts.items())), toolchain_version,
                               _compiler_fingerprint())
    if backend == "device":
        entry = disk_cache.load(key)
        if entry is not None:
            k = JITKernel(func, tgt, outs, opts, backend=backend)
            try:
                k._adopt_cached(entry)
            except (KeyError, IndexError, TypeError, ValueError):
                disk_cache.discard(key)  # a record the kernel cannot use is a miss: compile it again
            else:
                k.compile_seconds = time.perf_counter() - t0
                return k
    thread_kernel = run_pipeline(func, PassContext(tgt, opts, dump))
    source = _print(thread_kernel, tgt)
    if dump is not None:
        dump("kernel.cu" if tgt.is_cuda else "kernel.hip", source)
    k = JITKernel(func, tgt, outs, opts, backend=backend)
    k.thread_kernel = thread_kernel
    k.source = source
    k.kernel_name = thread_kernel.name
    k.num_threads = thread_kernel.num_threads
    k.shared_bytes = thread_kernel.shared_bytes
    if thread_kernel.tensor_maps:
        from .runtime.tensor_maps import specs_of

        k._use_tensor_maps(specs_of(thread_kernel))
    if backend == "device":
        binary = _toolchain_compile(source, tgt, thread_kernel.name, dump)
        k._adopt_binary(binary)
        disk_cache.store(key, k._cache_meta(), k.code_object, source)
    k.compile_seconds = time.perf_counter() - t0
    if verbose:
        print(f"[tilewright] compiled {func.name} for {tgt} in {k.compile_seconds:.3f}s")
    return k


def _print(thread_kernel, tgt: Target) -> str:
    if tgt.is_cuda:
        from .codegen.cuda import print_cuda

        return print_cuda(thread_kernel)
    from .codegen.hip import print_hip

    return print_hip(thread_kernel)


@functools.cache
def _toolchain_version(tgt: Target) -> str:
    if tgt.is_cuda:
        from .toolchain.nvrtc import nvrtc_version

        return nvrtc_version()
    from .toolchain.hip import find_hip_compiler

    c = find_hip_compiler()
    return f"{c.kind}:{getattr(c, 'version', '')}"


def _toolchain_compile(source: str, tgt: Target, name: str, dump):
    dump_dir = None
    if dump is not None:
        dump_dir = os.path.join(config.get("dump_dir"), "toolchain")
    if tgt.is_cuda:
        from .toolchain.nvrtc import compile_cuda

        return compile_cuda(source, tgt.arch, [name], dump_dir=dump_dir)
    from .toolchain.hip import compile_hip

    return compile_hip(source, tgt.arch, [name], dump_dir=dump_dir)


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


def jit(func=None, *, out_idx=None, target="auto", pass_configs=None, optimize_level: int = 2,
        execution_backend=None, **_ignored):
    """Decorator for a builder function returning a prim_func; see ``_JitFunction``."""
    def wrap(f):
        return _JitFunction(f, out_idx, target, pass_configs, optimize_level, execution_backend)

    return wrap(func) if func is not None else wrap
