"""Compile generated CUDA C++ to a cubin in-process with NVRTC.

We go straight to SASS (``nvrtcGetCUBIN``) for one exact architecture so that the driver never
JIT-compiles PTX at load time and so that the resource usage (registers, spills, shared memory)
is known right after compiling, which the autotuner uses to prune configurations.

Nothing is cached here: the caller keys its cache on the source, the architecture, the options
and :func:`nvrtc_version`.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import shlex
import sys
import tempfile
import time
from dataclasses import dataclass, field

from ..errors import ToolchainError
from .cubin import CubinFormatError, list_cubin_kernels, read_cubin_resources

__all__ = ["CudaBinary", "compile_cuda", "cuda_include_dirs", "nvrtc_version", "supported_archs"]

# Options we always pass.  ``-default-device`` lets generated helpers omit ``__device__``;
# ``--ptxas-options=-v`` makes ptxas print registers, stack frame and spills into the log.
_BASE_OPTIONS = ("-std=c++17", "--ptxas-options=-v", "-default-device")

_ARCH_RE = re.compile(r"^(?:sm_?)?(\d{2,3})([af]?)$")


@dataclass
class CudaBinary:
    """A compiled cubin plus what the compiler said about it."""

    cubin: bytes
    arch: str
    log: str
    toolchain: str  # e.g. "nvrtc 13.5"
    resources: dict = field(default_factory=dict)  # kernel name -> see cubin.RESOURCE_KEYS
    compile_seconds: float = 0.0


# ---------------------------------------------------------------- loading NVRTC
def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError as exc:  # pragma: no cover - depends on the machine
        raise ToolchainError(
            "NVRTC is not available: install the CUDA Python bindings and NVRTC, e.g. "
            "`pip install cuda-bindings nvidia-cuda-nvrtc nvidia-cuda-runtime`",
            log=str(exc),
        ) from exc
    return nvrtc


def _check(nvrtc, result, what: str):
    """Unpack a cuda-bindings ``(nvrtcResult, *values)`` tuple, raising on failure."""
    err = result[0]
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise ToolchainError(f"{what} failed: {_error_string(nvrtc, err)}")
    return result[1] if len(result) == 2 else result[1:]


def _error_string(nvrtc, err) -> str:
    try:
        msg = nvrtc.nvrtcGetErrorString(err)[1]
        return msg.decode() if isinstance(msg, bytes) else str(msg)
    except Exception:  # noqa: BLE001 - only formatting an error message
        return str(err)


@functools.cache
def nvrtc_version() -> str:
    """``"nvrtc MAJOR.MINOR"`` of the NVRTC library that :func:`compile_cuda` uses."""
    nvrtc = _nvrtc()
    try:
        major, minor = _check(nvrtc, nvrtc.nvrtcVersion(), "nvrtcVersion")
    except RuntimeError as exc:  # the bindings raise this when libnvrtc cannot be loaded
        raise ToolchainError("NVRTC library could not be loaded", log=str(exc)) from exc
    return f"nvrtc {major}.{minor}"


@functools.cache
def supported_archs() -> tuple[int, ...]:
    """SM numbers (e.g. 80, 90, 100) this NVRTC can generate SASS for."""
    nvrtc = _nvrtc()
    return tuple(int(a) for a in _check(nvrtc, nvrtc.nvrtcGetSupportedArchs(), "nvrtcGetSupportedArchs"))


# ---------------------------------------------------------------- include paths
def _nvidia_package_dirs() -> list[str]:
    """Every ``nvidia/`` namespace directory of the pip wheels (site-packages, user site, venv)."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    if spec is None or spec.submodule_search_locations is None:
        return []
    return [str(p) for p in spec.submodule_search_locations]


@functools.cache
def cuda_include_dirs() -> list[str]:
    """Directories holding the CUDA headers (``cuda_fp16.h``, ``cuda_bf16.h``...) for NVRTC.

    Wheel headers come first because they match the NVRTC wheel that cuda-bindings loads:
    CUDA 13 wheels put them in ``nvidia/cu13/include``, CUDA 12 wheels in
    ``nvidia/cuda_runtime/include`` (and ``nvidia/cuda_nvrtc/include``).  Then ``$CUDA_HOME``,
    ``$CUDA_PATH`` and ``/usr/local/cuda``.
    """
    wheel: list[tuple[int, str]] = []
    for base in _nvidia_package_dirs():
        try:
            names = sorted(os.listdir(base))
        except OSError:
            continue
        for name in names:
            m = re.fullmatch(r"cu(\d+)", name)
            if m:  # CUDA 13+ layout: nvidia/cu13/include
                wheel.append((int(m.group(1)), os.path.join(base, name, "include")))
        for name in ("cuda_runtime", "cuda_nvrtc"):  # CUDA 12 layout
            wheel.append((12, os.path.join(base, name, "include")))
    major = _nvrtc_major()
    # Headers of the same major version as the loaded NVRTC first, then newest first.
    wheel.sort(key=lambda mv: (mv[0] != major, -mv[0]))
    candidates = [path for _, path in wheel]
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(var)
        if root:
            candidates.append(os.path.join(root, "include"))
    candidates.append("/usr/local/cuda/include")

    out: list[str] = []
    seen: set[str] = set()
    for path in candidates:
        if not os.path.isfile(os.path.join(path, "cuda_fp16.h")) and not os.path.isfile(
            os.path.join(path, "cuda_runtime_api.h")
        ):
            continue
        real = os.path.realpath(path)
        if real not in seen:
            seen.add(real)
            out.append(path)
    return out


def _nvrtc_major() -> int:
    try:
        return int(nvrtc_version().split()[1].split(".")[0])
    except (ToolchainError, ValueError, IndexError):
        return -1


# ---------------------------------------------------------------- helpers
def _normalize_arch(arch: str) -> str:
    """``"sm_90a"``, ``"sm90a"`` or ``"90a"`` -> ``"sm_90a"``; anything else is a ToolchainError."""
    m = _ARCH_RE.match(str(arch).strip().lower())
    if not m:
        raise ToolchainError(
            f"cannot compile for architecture {arch!r}: NVRTC needs a real GPU architecture such as "
            "'sm_80', 'sm_90a' or 'sm_100a' (a cubin cannot be built for a virtual 'compute_XX' one)"
        )
    number = int(m.group(1))
    try:
        archs = supported_archs()
    except ToolchainError:
        archs = ()
    if archs and number not in archs:
        raise ToolchainError(
            f"{nvrtc_version()} cannot generate code for sm_{number}{m.group(2)}; it supports "
            + ", ".join(f"sm_{a}" for a in archs)
        )
    return f"sm_{number}{m.group(2)}"


def _merge_options(arch: str, includes: list[str], user: tuple[str, ...]) -> list[str]:
    user = tuple(user)
    opts = []
    if not any(o.startswith(("--gpu-architecture", "-arch")) for o in user):
        opts.append(f"--gpu-architecture={arch}")
    for o in _BASE_OPTIONS:
        if o.startswith("-std=") and any(u.startswith(("-std=", "--std=")) for u in user):
            continue
        if o not in user:
            opts.append(o)
    opts.extend(f"--include-path={d}" for d in includes)
    opts.extend(user)
    return opts


def _repro_command(path: str, arch: str, includes: list[str], user: tuple[str, ...]) -> str:
    """An nvcc line and a python line that redo the failing compile."""
    nvcc = ["nvcc", "-cubin", f"-arch={arch}", "-std=c++17", "-Xptxas", "-v"]
    nvcc += [f"-I{d}" for d in includes]
    # NVRTC-only flags have no nvcc spelling; everything else is passed through.
    nvcc += [o for o in user if o not in ("-default-device", "--device-as-default-execution-space")]
    nvcc += [path, "-o", os.path.splitext(path)[0] + ".cubin"]
    # JSON string literals are valid Python and use double quotes, so the shell quoting stays readable.
    opts = "(" + "".join(json.dumps(o) + ", " for o in user) + ")"
    py = (
        "from tilewright.toolchain.nvrtc import compile_cuda; "
        f"compile_cuda(open({json.dumps(path)}).read(), {json.dumps(arch)}, [], options={opts})"
    )
    return f"{shlex.join(nvcc)}\n  or: {shlex.quote(sys.executable)} -c {shlex.quote(py)}"


def _write_source(source: str, dump_dir: str | None, filename: str) -> str:
    directory = dump_dir or tempfile.mkdtemp(prefix="tilewright-nvrtc-")
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, filename)
    with open(path, "w", encoding="utf-8") as f:
        f.write(source)
    return path


def _program_log(nvrtc, prog) -> str:
    size = _check(nvrtc, nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
    if size <= 1:
        return ""
    buf = bytearray(size)  # the bindings fill a writable buffer in place
    _check(nvrtc, nvrtc.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
    return bytes(buf).rstrip(b"\0").decode("utf-8", "replace")


# ---------------------------------------------------------------- main entry
def compile_cuda(
    source: str,
    arch: str,
    kernel_names: list[str],
    *,
    options: tuple[str, ...] = (),
    dump_dir: str | None = None,
    filename: str = "kernel.cu",
) -> CudaBinary:
    """Compile ``source`` (with ``extern "C" __global__`` kernels) to a cubin for ``arch``.

    ``kernel_names`` are checked to be in the cubin and get an entry in ``resources``.  With
    ``dump_dir`` the source, the cubin and the log are written there; on failure the source is
    written there (or to a fresh temporary directory) and a :class:`ToolchainError` names it.
    """
    arch = _normalize_arch(arch)
    nvrtc = _nvrtc()
    toolchain = nvrtc_version()
    includes = cuda_include_dirs()
    opts = _merge_options(arch, includes, tuple(options))
    src_path = _write_source(source, dump_dir, filename) if dump_dir else ""

    def fail(message: str, log: str = "") -> ToolchainError:
        path = src_path or _write_source(source, None, filename)
        return ToolchainError(
            f"{toolchain} could not compile the generated CUDA source for {arch}: {message}",
            log=log,
            source_path=path,
            repro=_repro_command(path, arch, includes, tuple(options)),
        )

    t0 = time.perf_counter()
    err, prog = nvrtc.nvrtcCreateProgram(source.encode("utf-8"), filename.encode("utf-8"), 0, [], [])
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise fail(f"nvrtcCreateProgram: {_error_string(nvrtc, err)}")
    try:
        encoded = [o.encode("utf-8") for o in opts]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(encoded), encoded)
        log = _program_log(nvrtc, prog)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise fail(_error_string(nvrtc, err), log)
        size = _check(nvrtc, nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
        if size == 0:
            raise fail("NVRTC produced no cubin (was a virtual compute_XX architecture requested?)", log)
        buf = bytearray(size)  # filled in place by nvrtcGetCUBIN
        _check(nvrtc, nvrtc.nvrtcGetCUBIN(prog, buf), "nvrtcGetCUBIN")
        cubin = bytes(buf)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    seconds = time.perf_counter() - t0

    try:
        present = set(list_cubin_kernels(cubin))
    except CubinFormatError as exc:
        raise fail(f"NVRTC returned a cubin we cannot read: {exc}", log) from exc
    missing = [k for k in kernel_names if k not in present]
    if missing:
        raise fail(
            f"kernel(s) {', '.join(missing)} not found in the cubin (it has: {', '.join(sorted(present)) or 'none'}); "
            'kernels must be declared extern "C" __global__',
            log,
        )
    resources = {k: read_cubin_resources(cubin, k, log) for k in kernel_names}

    if dump_dir:
        stem = os.path.splitext(src_path)[0]
        with open(stem + ".cubin", "wb") as f:
            f.write(cubin)
        with open(stem + ".log", "w", encoding="utf-8") as f:
            f.write(log)
    return CudaBinary(
        cubin=cubin, arch=arch, log=log, toolchain=toolchain, resources=resources, compile_seconds=seconds
    )
