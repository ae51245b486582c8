"""The work behind the ``tilewright`` subcommands other than ``doctor`` and ``bench``: loading a
user's kernel file, ``compile`` (code object + source + resource report), ``source``, ``profile``
(a timed per-kernel report), ``tune``, ``cache info|clear``."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys

from ..errors import TilewrightError
from ..profiler.report import resource_lines


class UsageError(Exception):
    """A command-line mistake: printed as one line, exit status 2."""


def load_module(path: str):
    if not os.path.isfile(path):
        raise UsageError(f"no such file: {path}")
    spec = importlib.util.spec_from_file_location("tw_user_module", path)
    if spec is None:
        raise UsageError(f"{path} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    try:
        spec.loader.exec_module(module)  # runs the module's top level, not its __main__ block
    finally:
        sys.path.pop(0)
    return module


def parse_value(text: str):
    """Builder arguments from the command line: ints, floats, True/False/None, else strings."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"True": True, "False": False, "None": None}.get(text, text)


def prim_funcs_of(spec: str, args: list[str]) -> list:
    """``FILE.py:BUILDER ARGS...`` -> [PrimFunc]; ``FILE.py`` alone -> its module-level prim_funcs."""
    from ..ir.tile import PrimFunc

    path, _, name = spec.partition(":")
    module = load_module(path)
    if not name:
        found = [v for v in vars(module).values() if isinstance(v, PrimFunc)]
        if not found:
            builders = sorted(k for k, v in vars(module).items() if callable(v) and not k.startswith("_")
                              and getattr(v, "__module__", "") == module.__name__)
            raise UsageError(f"{path} defines no prim_func at module level; name a builder and its arguments, "
                             f"e.g. {path}:BUILDER 1024 1024 (functions here: {', '.join(builders) or 'none'})")
        if args:
            raise UsageError("builder arguments need FILE.py:BUILDER")
        return found
    if not hasattr(module, name):
        raise UsageError(f"{path} has no {name!r}")
    builder = getattr(module, name)
    values = [parse_value(a) for a in args]
    builder = getattr(builder, "builder", builder)  # a @jit or @autotune wrapper: its builder
    try:
        func = builder(*values)
    except TypeError as e:
        raise UsageError(f"calling {name}{tuple(values)}: {e}") from None
    if not isinstance(func, PrimFunc):
        raise UsageError(f"{name}(...) returned {type(func).__name__}, not a @T.prim_func")
    return [func]


def target_string(target: str, arch: str | None) -> str:
    if arch:
        if "-arch" in target:
            raise UsageError("give the architecture once: either --arch or '-arch=' inside --target")
        return f"{target} -arch={arch}"
    return target


def compile_command(spec: str, args: list[str], target: str, arch: str | None, out_dir: str, out=None) -> int:
    import tilewright

    out = out or sys.stdout
    tgt = target_string(target, arch)
    if tgt.strip() in ("interpret", "auto"):
        raise UsageError("compile writes a code object: give a GPU target, e.g. --target cuda --arch sm_90a or "
                         "--target hip --arch gfx942")
    os.makedirs(out_dir, exist_ok=True)
    for func in prim_funcs_of(spec, args):
        kernel = tilewright.compile(func, target=tgt)
        t = kernel.target
        stem = os.path.join(out_dir, f"{func.name}.{t.arch}")
        binary = stem + (".cubin" if t.kind == "cuda" else ".hsaco")
        with open(binary, "wb") as f:
            f.write(kernel.get_code_object())
        with open(stem + (".cu" if t.kind == "cuda" else ".hip"), "w") as f:
            f.write(kernel.get_kernel_source())
        static = kernel.get_profiler().report(run=False)
        report = {"kernel": kernel.kernel_name, "target": str(t), "threads": kernel.num_threads,
                  "dynamic_shared_bytes": kernel.shared_bytes, "resources": kernel.resource_usage,
                  "occupancy": static.to_dict()["occupancy"], "compile_seconds": round(kernel.compile_seconds, 3)}
        with open(stem + ".json", "w") as f:
            json.dump(report, f, indent=1)
        res = kernel.resource_usage
        print(f"{func.name}: {binary} ({len(kernel.get_code_object())} bytes) registers={res.get('registers')} "
              f"shared={res.get('shared_bytes')} B spills={res.get('spills')}", file=out)
        for line in resource_lines(t, kernel.num_threads, res):
            print(f"  {line}", file=out)
    return 0


def source_command(spec: str, args: list[str], target: str, arch: str | None, out=None) -> int:
    import tilewright

    tgt = target_string(target, arch)
    for func in prim_funcs_of(spec, args):
        emulate = None if tgt.startswith("cuda") else "emulator"  # HIP source needs no AMD toolchain
        print(tilewright.compile(func, target=tgt, execution_backend=emulate).get_kernel_source(), file=out)
    return 0


def profile_command(spec: str, args: list[str], target: str, arch: str | None, flops=None, nbytes=None, device=None,
                    rep: float = 100, json_out=None, plot=None, trace=None, out=None) -> int:
    """Compile, run and time each kernel; print its report (resources, occupancy, achieved rates
    against the device roof); optionally a roofline PNG, a trace and JSON."""
    import tilewright

    out = out or sys.stdout
    if rep <= 0:
        raise UsageError(f"--rep must be > 0 (milliseconds); got {rep}")
    if plot:
        from ..profiler.plots import PlotUnavailable, _pyplot

        try:
            _pyplot()
        except PlotUnavailable as e:
            raise UsageError(str(e)) from None
        if not flops:
            raise UsageError("--plot draws a roofline point, which needs --flops (the operations of one call)")
    funcs = prim_funcs_of(spec, args)
    if len(funcs) > 1 and (plot or trace or (json_out and json_out != "-")):
        raise UsageError(f"{spec} has {len(funcs)} kernels; name one builder (FILE.py:BUILDER) for --plot, "
                         "--trace or --json FILE")
    reports = []
    for func in funcs:
        kernel = tilewright.compile(func, target=target_string(target, arch))
        if kernel.backend == "device" and not _torch_sees_a_gpu():
            raise UsageError(f"profile runs the kernel, and no GPU is usable here for {kernel.target} (PyTorch sees "
                             "none); use --target interpret, or 'tilewright compile' for the static resource report")
        report = kernel.get_profiler().report(flops=flops, bytes=nbytes, device=device, rep=rep)
        reports.append(report)
        if json_out != "-":
            print(report, file=out)
        if plot:
            print(f"  wrote {report.plot_roofline(plot)}", file=out if json_out != "-" else sys.stderr)
        if trace:
            print(f"  wrote {report.save_trace(trace)}", file=out if json_out != "-" else sys.stderr)
    if json_out == "-":
        print(json.dumps([r.to_dict() for r in reports], indent=1), file=out)
    elif json_out:
        with open(json_out, "w") as f:
            json.dump(reports[0].to_dict(), f, indent=1)
        print(f"  wrote {json_out}", file=out)
    return 0


def _torch_sees_a_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def tune_command(spec: str, args: list[str], out=None) -> int:
    """``FILE.py:FUNC ARGS...`` where FUNC is decorated with ``@tilewright.autotune``: tune it for
    those arguments and print the per-candidate table (a second run is a tuning-cache lookup)."""
    from ..autotune.decorator import _Autotuned

    out = out or sys.stdout
    path, _, name = spec.partition(":")
    if not name:
        raise UsageError("tune needs FILE.py:FUNC (a function decorated with @tilewright.autotune)")
    module = load_module(path)
    fn = getattr(module, name, None)
    if fn is None:
        raise UsageError(f"{path} has no {name!r}")
    if not isinstance(fn, _Autotuned):
        raise UsageError(f"{name} is not decorated with @tilewright.autotune(configs=...)")
    result = fn.tune(*[parse_value(a) for a in args])
    print(result.table(), file=out)
    cached = " (from the tuning cache)" if result.from_cache else ""
    print(f"best: {result.config} at {result.latency:.4f} ms{cached}; {len(result.rows)} candidates, "
          f"{result.seconds:.1f} s", file=out)
    return 0


def cache_command(action: str, out=None) -> int:
    from .. import config
    from .doctor import _folder_size

    out = out or sys.stdout
    folder = config.get("cache_dir")
    if action == "info":
        size, files = _folder_size(folder)
        tuning = os.path.join(folder, "tuning")
        n_tuned = len([n for n in os.listdir(tuning) if n.endswith(".json")]) if os.path.isdir(tuning) else 0
        print(f"cache folder: {folder}\nfiles: {files}, {size / 2**20:.1f} MiB\ntuning results: {n_tuned}", file=out)
        return 0
    if action == "clear":
        if os.path.isdir(folder):
            shutil.rmtree(folder)
        print(f"cleared {folder}", file=out)
        return 0
    raise UsageError(f"unknown cache action {action!r}; use info or clear")


def user_error_text(e: BaseException) -> str:
    if isinstance(e, TilewrightError):
        return f"{type(e).__name__}: {e}"
    return str(e)
