"""Compile generated HIP C++ to an AMDGPU code object, with hiprtc or with any AMDGPU-capable clang.

The result is always a *raw* code object (an ``ET_DYN`` AMDGPU ELF, what ``hipModuleLoadData``
loads), never a clang offload bundle, and comes with the per-kernel resource usage read from its
metadata note (see :mod:`.amdgpu_elf`).

Which compiler (:func:`find_hip_compiler`, first usable one wins, cached):

(a) hiprtc of a ROCm install: ``$ROCM_PATH/lib``, ``$HIP_PATH/lib``, ``/opt/rocm/lib``, ``/opt/rocm-*/lib``
    (newest first);
(b) hiprtc of AMD's ROCm Python packages (``rocm_sdk.find_libraries("hiprtc")``, a versioned
    ``libhiprtc.so.7`` with no unversioned link, loaded by full path);
(c) hiprtc bundled with a ROCm build of PyTorch (``torch/lib/libhiprtc*.so*``, found without
    importing torch);
(d) ROCm's clang (``$ROCM_PATH/llvm/bin/clang``, ``/opt/rocm*/llvm/bin/clang``), then ``hipcc``;
(e) any clang >= 17 with the AMDGPU target and lld (``clang-25`` ... ``clang-17``, ``clang``, and
    ``/usr/lib/llvm-N/bin/clang``), e.g. Debian's ``apt install clang-19 lld-19``.

``TILEWRIGHT_HIP_COMPILER`` = ``hiprtc`` / ``clang`` restricts the search to (a)-(c) / (d)-(e);
a path to a ``libhiprtc.so*`` or to a clang/hipcc executable uses exactly that.

Clang is run as ``clang -x hip --cuda-device-only --offload-arch=ARCH -nogpuinc -nogpulib -O3
-std=c++17 --no-gpu-bundle-output -cuid=ID -c -o OUT SRC``: the driver compiles, then links with lld
(``-shared``) into the loadable code object (checked: ``ET_DYN``, ``EM_AMDGPU``, one ``<kernel>.kd``
kernel descriptor per kernel); ``--no-gpu-bundle-output`` keeps it out of an offload bundle.
``-nogpuinc -nogpulib`` mean no ROCm headers or device libraries are needed, which is why the
generated code starts with :data:`tilewright.codegen.hip_prelude.HIP_PRELUDE`.  ``-cuid=ID`` (a hash of
the source text, arch and flags) makes the code object reproducible: byte-identical whatever folder the
source was compiled in.

Nothing is cached here: the caller keys its cache on the source, the arch, the options and
``HipBinary.toolchain``.
"""

from __future__ import annotations

import ctypes
import glob
import hashlib
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

from ..errors import ToolchainError
from .amdgpu_elf import AmdgpuElfError, extract_code_object, kernel_resources, target_id

__all__ = [
    "ENV_COMPILER",
    "HipBinary",
    "HipCompiler",
    "compile_hip",
    "disassemble",
    "find_hip_compiler",
    "find_llvm_tool",
]

ENV_COMPILER = "TILEWRIGHT_HIP_COMPILER"
# The oldest upstream clang we accept; some targets need newer ones (gfx12: LLVM 18, gfx950: LLVM 20),
# and then the compile error says so.
MIN_CLANG_MAJOR = 17
_NEWEST_CLANG_MAJOR = 25  # versioned names probed downwards from here

# A processor with optional target-id features, e.g. "gfx942" or "gfx90a:sramecc+:xnack-".
_ARCH_RE = re.compile(r"^gfx[0-9a-f]{3,4}(?::[a-z0-9_-]+[+-])*$")

_INSTALL_HELP = (
    "install one of:\n"
    "  * AMD's ROCm Python packages: pip install --index-url <ROCm wheel index of your GPU family> 'rocm[libraries]'\n"
    "    (index URLs: https://github.com/ROCm/TheRock/blob/main/RELEASES.md); this provides hiprtc;\n"
    "  * ROCm itself (https://rocm.docs.amd.com/projects/install-on-linux/en/latest/), which provides\n"
    "    /opt/rocm/lib/libhiprtc.so and /opt/rocm/llvm/bin/clang;\n"
    "  * an LLVM >= 17 clang with lld, e.g. on Debian/Ubuntu: apt install clang-19 lld-19\n"
    f"or point {ENV_COMPILER} at a libhiprtc.so or a clang executable."
)


@dataclass
class HipBinary:
    """A compiled AMDGPU code object plus what the compiler said about it."""

    code_object: bytes  # raw AMDGPU ELF (not an offload bundle)
    arch: str
    log: str
    toolchain: str  # e.g. "clang 19.1.7 (/usr/bin/clang-19)" or "hiprtc 7.0 (/opt/rocm/lib/libhiprtc.so.7)"
    resources: dict = field(default_factory=dict)  # kernel name -> see amdgpu_elf.kernel_resources
    compile_seconds: float = 0.0


@dataclass(frozen=True)
class HipCompiler:
    """A usable HIP device compiler.  ``kind`` is ``"hiprtc"`` (``path`` is the library) or ``"clang"``
    (``path`` is a clang or hipcc executable)."""

    kind: str
    path: str
    version: tuple[int, ...]
    origin: str  # where it was found: "ROCM_PATH", "/opt/rocm", "rocm_sdk", "torch", "PATH", "env"
    rocm: bool = False  # a ROCm (AMD) build of clang

    @property
    def description(self) -> str:
        ver = ".".join(map(str, self.version))
        if self.kind == "hiprtc":
            return f"hiprtc {ver} ({self.path})"
        name = "hipcc" if os.path.basename(self.path).startswith("hipcc") else "clang"
        return f"{'rocm ' if self.rocm else ''}{name} {ver} ({self.path})"

    @property
    def major(self) -> int:
        return self.version[0] if self.version else 0


# ---------------------------------------------------------------- finding compilers
_cache_lock = threading.Lock()
_cache: dict[tuple, HipCompiler] = {}


def find_hip_compiler(*, refresh: bool = False) -> HipCompiler:
    """The HIP compiler :func:`compile_hip` uses (see the module docstring for the search order).

    Cached per value of ``TILEWRIGHT_HIP_COMPILER``, ``ROCM_PATH`` and ``PATH``; ``refresh=True``
    searches again.  Raises :class:`ToolchainError` saying what to install when nothing is usable.
    """
    key = tuple(os.environ.get(v, "") for v in (ENV_COMPILER, "ROCM_PATH", "HIP_PATH", "PATH"))
    with _cache_lock:
        if not refresh and key in _cache:
            return _cache[key]
    forced = os.environ.get(ENV_COMPILER, "").strip()
    rejected: list[str] = []
    found = None
    for probe in _candidate_probes(forced):
        result = probe()
        if isinstance(result, HipCompiler):
            found = result
            break
        if result:
            rejected.append(result)
    if found is None:
        what = f" ({ENV_COMPILER}={forced})" if forced else ""
        details = ("\nnot usable:\n  " + "\n  ".join(rejected)) if rejected else ""
        raise ToolchainError(f"no HIP device compiler found{what}; {_INSTALL_HELP}{details}")
    with _cache_lock:
        _cache[key] = found
    return found


def _candidate_probes(forced: str):
    """Zero-argument callables in search order; each returns a HipCompiler, a rejection reason, or None."""
    if forced and forced not in ("hiprtc", "clang", "auto"):
        path = os.path.expanduser(forced)
        if "hiprtc" in os.path.basename(path) or re.search(r"\.so(\.\d+)*$", path):
            return [lambda: _probe_hiprtc(path, "env")]
        exe = shutil.which(path) or path
        return [lambda: _probe_clang(exe, "env", require_version=False)]
    probes = []
    if forced in ("", "auto", "hiprtc"):
        probes += [lambda p=p, o=o: _probe_hiprtc(p, o) for p, o in _hiprtc_paths()]
        probes.append(_probe_rocm_sdk_hiprtc)
        probes += [lambda p=p: _probe_hiprtc(p, "torch") for p in _torch_lib_files("libhiprtc")]
    if forced in ("", "auto", "clang"):
        probes += [lambda p=p, o=o: _probe_clang(p, o) for p, o in _clang_paths()]
    return probes


def _rocm_roots() -> list[tuple[str, str]]:
    """ROCm install roots, ``(path, origin)``: $ROCM_PATH, $HIP_PATH, /opt/rocm, /opt/rocm-X.Y.Z newest first."""
    roots = []
    for var in ("ROCM_PATH", "HIP_PATH"):
        if os.environ.get(var):
            roots.append((os.environ[var], var))
    roots.append(("/opt/rocm", "/opt/rocm"))
    versioned = glob.glob("/opt/rocm-*")
    versioned.sort(key=lambda p: _version_tuple(os.path.basename(p)), reverse=True)
    roots += [(p, p) for p in versioned]
    seen, out = set(), []
    for path, origin in roots:
        real = os.path.realpath(path)
        if real not in seen and os.path.isdir(path):
            seen.add(real)
            out.append((path, origin))
    return out


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text))


def _hiprtc_paths() -> list[tuple[str, str]]:
    out = []
    for root, origin in _rocm_roots():
        libs = _sorted_libs(glob.glob(os.path.join(root, "lib", "libhiprtc.so*")))
        if libs:
            out.append((libs[0], origin))
    return out


def _sorted_libs(paths: list[str]) -> list[str]:
    """``libX.so``, then versioned names, newest first; never the ``-builtins`` companion library."""
    paths = [p for p in paths if "builtins" not in os.path.basename(p)]
    return sorted(paths, key=lambda p: (not p.endswith(".so"), [-v for v in _version_tuple(os.path.basename(p))]))


def _torch_lib_files(stem: str) -> list[str]:
    """``torch/lib/<stem>*.so*`` of an installed PyTorch, found without importing torch."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.submodule_search_locations:
        return []
    out = []
    for base in spec.submodule_search_locations:
        out += _sorted_libs(glob.glob(os.path.join(base, "lib", stem + "*.so*")))
    return out[:1]


def _rocm_sdk_library(shortname: str) -> str | None:
    """Path of a library of AMD's ``rocm`` Python packages, or None."""
    try:
        if importlib.util.find_spec("rocm_sdk") is None:
            return None
        import rocm_sdk  # type: ignore[import-not-found]

        paths = rocm_sdk.find_libraries(shortname)
    except Exception:  # noqa: BLE001 - a partial rocm install raises all sorts of errors
        return None
    return str(paths[0]) if paths else None


def _probe_rocm_sdk_hiprtc():
    path = _rocm_sdk_library("hiprtc")
    return _probe_hiprtc(path, "rocm_sdk") if path else None


def _clang_paths() -> list[tuple[str, str]]:
    out = []
    for root, origin in _rocm_roots():
        for rel in ("llvm/bin/clang", "lib/llvm/bin/clang", "bin/hipcc"):
            path = os.path.join(root, rel)
            if os.access(path, os.X_OK):
                out.append((path, origin))
    for major in range(_NEWEST_CLANG_MAJOR, MIN_CLANG_MAJOR - 1, -1):
        path = shutil.which(f"clang-{major}")
        if path:
            out.append((path, "PATH"))
        path = f"/usr/lib/llvm-{major}/bin/clang"
        if os.access(path, os.X_OK):
            out.append((path, path))
    path = shutil.which("clang")
    if path:
        out.append((path, "PATH"))
    seen, unique = set(), []
    for path, origin in out:
        real = os.path.realpath(path)
        if real not in seen:
            seen.add(real)
            unique.append((path, origin))
    return unique


# hiprtc libraries loaded so far, by path (ctypes.CDLL objects are never unloaded anyway).
_hiprtc_libs: dict[str, object] = {}


def _load_hiprtc(path: str):
    lib = _hiprtc_libs.get(path)
    if lib is not None:
        return lib
    # hiprtc dlopens libamd_comgr by name at its first program; load the copy next to it first so
    # that a pip or torch install works without LD_LIBRARY_PATH.
    for comgr in _sorted_libs(glob.glob(os.path.join(os.path.dirname(path), "libamd_comgr*.so*"))):
        try:
            ctypes.CDLL(comgr, mode=ctypes.RTLD_GLOBAL)
            break
        except OSError:
            continue
    lib = ctypes.CDLL(path)
    _set_hiprtc_prototypes(lib)
    _hiprtc_libs[path] = lib
    return lib


def _set_hiprtc_prototypes(lib) -> None:
    vp, sz, cp = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p
    protos = {
        "hiprtcVersion": (ctypes.c_int, [ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int)]),
        "hiprtcGetErrorString": (cp, [ctypes.c_int]),
        "hiprtcCreateProgram": (
            ctypes.c_int,
            [ctypes.POINTER(vp), cp, cp, ctypes.c_int, ctypes.POINTER(cp), ctypes.POINTER(cp)],
        ),
        "hiprtcCompileProgram": (ctypes.c_int, [vp, ctypes.c_int, ctypes.POINTER(cp)]),
        "hiprtcGetProgramLogSize": (ctypes.c_int, [vp, ctypes.POINTER(sz)]),
        "hiprtcGetProgramLog": (ctypes.c_int, [vp, ctypes.c_char_p]),
        "hiprtcGetCodeSize": (ctypes.c_int, [vp, ctypes.POINTER(sz)]),
        "hiprtcGetCode": (ctypes.c_int, [vp, ctypes.c_char_p]),
        "hiprtcDestroyProgram": (ctypes.c_int, [ctypes.POINTER(vp)]),
    }
    for name, (restype, argtypes) in protos.items():
        fn = getattr(lib, name)  # AttributeError: not a hiprtc library
        fn.restype = restype
        fn.argtypes = argtypes


def _probe_hiprtc(path: str, origin: str):
    if not path or not os.path.exists(path):
        return f"{path}: does not exist" if origin == "env" else None
    try:
        lib = _load_hiprtc(path)
        major, minor = ctypes.c_int(0), ctypes.c_int(0)
        rc = lib.hiprtcVersion(ctypes.pointer(major), ctypes.pointer(minor))
    except (OSError, AttributeError) as exc:
        return f"hiprtc {path} ({origin}): cannot be loaded: {exc}"
    if rc != 0:
        return f"hiprtc {path} ({origin}): hiprtcVersion failed with error {rc}"
    return HipCompiler("hiprtc", path, (major.value, minor.value), origin, rocm=True)


_CLANG_VERSION_RE = re.compile(r"clang version (\d+)\.(\d+)\.(\d+)")


def _probe_clang(path: str, origin: str, *, require_version: bool = True):
    if not path or not os.access(path, os.X_OK):
        return f"{path}: not an executable" if origin == "env" else None
    try:
        out = subprocess.run([path, "--version"], check=False, capture_output=True, text=True, timeout=60)
        text = out.stdout + out.stderr
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{path}: cannot run: {exc}"
    m = _CLANG_VERSION_RE.search(text)
    if not m:
        return f"{path}: not a clang (--version says {text.strip()[:80]!r})"
    version = tuple(int(x) for x in m.groups())
    rocm = "AMD clang" in text or "roc-" in text or "/rocm" in os.path.realpath(path)
    if require_version and not rocm and version[0] < MIN_CLANG_MAJOR:
        return f"{path}: clang {'.'.join(map(str, version))} is too old (need LLVM >= {MIN_CLANG_MAJOR})"
    if not os.path.basename(path).startswith("hipcc"):
        try:
            probe = subprocess.run([path, "-print-targets"], check=False, capture_output=True, text=True, timeout=60)
            targets = probe.stdout
        except (OSError, subprocess.SubprocessError):
            targets = ""
        if "amdgcn" not in targets:
            return f"{path}: clang {'.'.join(map(str, version))} was built without the AMDGPU target"
        # The HIP driver links the code object with lld, which it looks for next to itself, then on PATH.
        lld_dir = os.path.dirname(os.path.realpath(path))
        if not (os.access(os.path.join(lld_dir, "lld"), os.X_OK) or shutil.which("lld")):
            hint = f" (apt install lld-{version[0]})" if lld_dir.startswith("/usr/lib/llvm-") else ""
            return f"{path}: found clang {version[0]} but not lld, which HIP code objects are linked with{hint}"
    return HipCompiler("clang", path, version, origin, rocm=rocm)


# ---------------------------------------------------------------- helpers
def _normalize_arch(arch: str) -> str:
    text = str(arch).strip()
    text = text.removeprefix("amdgcn-amd-amdhsa--")
    if not _ARCH_RE.match(text):
        raise ToolchainError(
            f"cannot compile HIP for architecture {arch!r}: expected an AMD GPU processor such as 'gfx942' (MI300), "
            "'gfx90a' (MI200), 'gfx1100' (RX 7900) or 'gfx1201' (RX 9070), optionally with target features "
            "('gfx90a:xnack-')"
        )
    return text


def _work_dir() -> str:
    """A fresh temporary folder, in TILEWRIGHT_TMP_DIR when set."""
    from .. import config

    root = config.get("tmp_dir") or None
    if root:
        os.makedirs(root, exist_ok=True)
    return tempfile.mkdtemp(prefix="tilewright-hip-", dir=root)


def _compile_timeout() -> float | None:
    """Seconds a compiler process may run (TILEWRIGHT_COMPILE_TIMEOUT_SECONDS; 0: no limit)."""
    from .. import config

    return config.get("compile_timeout") or None


def _write_source(source: str, directory: str | None, filename: str) -> str:
    directory = directory or _work_dir()
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, filename)
    with open(path, "w", encoding="utf-8") as f:
        f.write(source)
    return path


def _clang_command(compiler: HipCompiler, arch: str, src: str, out: str, options: tuple[str, ...]) -> list[str]:
    cmd = [compiler.path, "-x", "hip", "--cuda-device-only", f"--offload-arch={arch}", "-nogpuinc", "-nogpulib"]
    # -fno-crash-diagnostics: a backend failure must not leave reproducer files in /tmp.
    # -cuid: clang names a symbol (__hip_cuid_<id>) after the compilation unit, by default a hash of the
    # source file's path -- a fresh temporary folder each time, so no two code objects were identical.
    # An id derived from the source text and the flags keeps units apart and the output reproducible.
    cmd += ["-O3", "-std=c++17", "--no-gpu-bundle-output", "-fno-crash-diagnostics"]
    cmd += [f"-cuid={_unit_id(src, arch, options)}", *options, "-c", "-o", out, src]
    return cmd


def _unit_id(src: str, arch: str, options: tuple[str, ...]) -> str:
    """A compilation-unit id that depends on what is compiled (source text, arch, flags), never on where."""
    h = hashlib.sha256()
    with open(src, "rb") as f:
        h.update(f.read())
    h.update("\0".join((arch, *options)).encode())
    return h.hexdigest()[:16]


def _python_repro(path: str, arch: str, options: tuple[str, ...], compiler: HipCompiler) -> str:
    cmd = [sys.executable, "-m", "tilewright.toolchain.hip", path, "--arch", arch, "--compiler", compiler.path]
    if options:
        cmd += ["--", *options]
    return shlex.join(cmd)


def _arch_hint(log: str, arch: str, compiler: HipCompiler) -> str:
    """A sentence for the common failures that are about the architecture, not the code."""
    if re.search(r"invalid target ID|unknown target CPU|unsupported .*processor|not a recognized processor", log):
        need = {"gfx950": " (gfx950 needs LLVM >= 20)", "gfx12": " (gfx12 needs LLVM >= 18)"}
        need = next((v for k, v in need.items() if arch.startswith(k)), "")
        return f" -- {compiler.description} does not know {arch}{need}"
    m = re.search(r"Cannot select: intrinsic %?(llvm\.amdgcn\.[\w.]+)", log)
    if m:
        # clang 19 accepts e.g. the gfx11 WMMA builtins on gfx12 and mfma_i32_16x16x16i8 on gfx942, then the
        # backend has no instruction for them.
        return f" -- {arch} has no instruction for {m.group(1)} (the builtin belongs to another architecture)"
    return ""


# ---------------------------------------------------------------- compiling
def compile_hip(
    source: str,
    arch: str,
    kernel_names: list[str],
    *,
    options: tuple[str, ...] = (),
    dump_dir: str | None = None,
    filename: str = "kernel.hip",
) -> HipBinary:
    """Compile ``source`` (``extern "C" __global__`` kernels) to a code object for ``arch`` (e.g. ``"gfx942"``).

    ``options`` are extra compiler flags (e.g. ``"-munsafe-fp-atomics"``, ``"-mwavefrontsize64"``,
    ``"-DTILE=64"``); they come after ours, so ``-O2`` overrides our ``-O3``.  ``kernel_names`` must
    all be in the code object.  With ``dump_dir`` the source, the code object (``.hsaco``) and the log
    are written there; on failure the source is written there (or to a fresh temporary directory) and
    the :class:`ToolchainError` names it, with the log and a command that reproduces the failure.
    """
    arch = _normalize_arch(arch)
    options = tuple(options)
    compiler = find_hip_compiler()
    src_path = _write_source(source, dump_dir, filename) if dump_dir else ""

    def fail(message: str, log: str = "", repro: str = "") -> ToolchainError:
        path = src_path or _write_source(source, None, filename)
        return ToolchainError(
            f"{compiler.description} failed for {arch}: {message}",
            log=log,
            source_path=path,
            repro=repro or _python_repro(path, arch, options, compiler),
        )

    if compiler.kind == "hiprtc":
        t0 = time.perf_counter()
        ok, log, raw = _hiprtc_compile(_load_hiprtc(compiler.path), source, filename, arch, options)
        seconds = time.perf_counter() - t0
        if not ok:
            raise fail("compilation failed" + _arch_hint(log, arch, compiler), log)
    else:
        workdir = _work_dir()
        path = src_path or _write_source(source, workdir, filename)
        out = os.path.join(workdir, os.path.splitext(filename)[0] + f".{arch.split(':')[0]}.hsaco")
        cmd = _clang_command(compiler, arch, path, out, options)
        t0 = time.perf_counter()
        timeout = _compile_timeout()
        try:
            proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as exc:  # run() has killed the compiler
            src_path = src_path or path  # the temporary folder stays: the repro command needs the source
            log = "\n".join(x if isinstance(x, str) else x.decode(errors="replace")
                            for x in (exc.stdout, exc.stderr) if x)
            raise fail(f"the compiler ran past {timeout:g} seconds and was stopped (TILEWRIGHT_COMPILE_TIMEOUT_SECONDS "
                       "sets the limit; 0: none)", log.strip(), shlex.join(cmd)) from None
        except (OSError, subprocess.SubprocessError) as exc:
            raise fail(f"could not run the compiler: {exc}", repro=shlex.join(cmd)) from exc
        seconds = time.perf_counter() - t0
        log = (proc.stdout + proc.stderr).strip()
        if proc.returncode != 0 or not os.path.exists(out):
            if not src_path:  # keep the temporary directory: the repro command needs the source there
                src_path = path
            else:
                shutil.rmtree(workdir, ignore_errors=True)
            hint = _arch_hint(log, arch, compiler)
            if "lld" in log and ("doesn't exist" in log or "not found" in log):
                hint += f" -- the linker lld is missing (apt install lld-{compiler.major})"
            raise fail(f"exit status {proc.returncode}{hint}", log, shlex.join(cmd))
        with open(out, "rb") as f:
            raw = f.read()
        shutil.rmtree(workdir, ignore_errors=True)  # the source, if wanted, is in dump_dir

    try:
        code_object = extract_code_object(raw, arch)
        resources = kernel_resources(code_object)
    except AmdgpuElfError as exc:
        raise fail(f"the compiler returned something we cannot read: {exc}", log) from exc
    missing = [k for k in kernel_names if k not in resources]
    if missing:
        raise fail(
            f"kernel(s) {', '.join(missing)} not found in the code object (it has: "
            f'{", ".join(sorted(resources)) or "none"}); kernels must be declared extern "C" __global__',
            log,
        )
    if dump_dir:
        stem = os.path.splitext(src_path)[0]
        with open(f"{stem}.{arch.split(':')[0]}.hsaco", "wb") as f:
            f.write(code_object)
        with open(stem + ".log", "w", encoding="utf-8") as f:
            f.write(log)
    return HipBinary(
        code_object=code_object,
        arch=arch,
        log=log,
        toolchain=compiler.description,
        resources=resources,
        compile_seconds=seconds,
    )


def _hiprtc_compile(lib, source: str, name: str, arch: str, options: tuple[str, ...]) -> tuple[bool, str, bytes]:
    """One hiprtc program: ``(success, log, code)``.  Errors of the API itself raise ToolchainError."""

    def check(rc: int, what: str) -> None:
        if rc != 0:
            raise ToolchainError(f"hiprtc: {what} failed: {_hiprtc_error(lib, rc)}")

    prog = ctypes.c_void_p()
    check(
        lib.hiprtcCreateProgram(ctypes.pointer(prog), source.encode(), name.encode(), 0, None, None),
        "hiprtcCreateProgram",
    )
    try:
        # hiprtc's own defaults come first (-O3, -std=c++14, -nogpuinc, -D__HIPCC_RTC__, ...), then ours.
        opts = [f"--offload-arch={arch}", "-O3", "-std=c++17", *options]
        argv = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
        rc = lib.hiprtcCompileProgram(prog, len(opts), argv)
        size = ctypes.c_size_t(0)
        log = ""
        if lib.hiprtcGetProgramLogSize(prog, ctypes.pointer(size)) == 0 and size.value > 1:
            buf = ctypes.create_string_buffer(size.value)
            if lib.hiprtcGetProgramLog(prog, buf) == 0:
                log = buf.raw.rstrip(b"\0").decode("utf-8", "replace")
        if rc != 0:
            return False, (log + f"\n({_hiprtc_error(lib, rc)})").strip(), b""
        check(lib.hiprtcGetCodeSize(prog, ctypes.pointer(size)), "hiprtcGetCodeSize")
        code = ctypes.create_string_buffer(size.value)
        check(lib.hiprtcGetCode(prog, code), "hiprtcGetCode")
        return True, log.strip(), code.raw[: size.value]
    finally:
        lib.hiprtcDestroyProgram(ctypes.pointer(prog))


def _hiprtc_error(lib, rc: int) -> str:
    try:
        text = lib.hiprtcGetErrorString(rc)
        return (text.decode() if isinstance(text, bytes) else str(text)) + f" ({rc})"
    except Exception:  # noqa: BLE001 - only formatting an error message
        return f"error {rc}"


# ---------------------------------------------------------------- disassembly
def find_llvm_tool(name: str) -> str | None:
    """An LLVM tool (``llvm-objdump``, ``llvm-readelf``, ``ld.lld``...), preferring the one next to the HIP
    clang in use, then ROCm's, then the newest versioned one (``name-25`` ... ``name-17``), then plain ``name``
    (which on Debian may be an old LLVM 14 that does not know gfx942)."""
    candidates = []
    try:
        comp = find_hip_compiler()
        if comp.kind == "clang":
            candidates.append(os.path.join(os.path.dirname(os.path.realpath(comp.path)), name))
    except ToolchainError:
        pass
    candidates += [os.path.join(root, "llvm", "bin", name) for root, _ in _rocm_roots()]
    for major in range(_NEWEST_CLANG_MAJOR, MIN_CLANG_MAJOR - 1, -1):
        candidates.append(shutil.which(f"{name}-{major}") or f"/usr/lib/llvm-{major}/bin/{name}")
    candidates.append(shutil.which(name) or "")
    for path in candidates:
        if path and os.access(path, os.X_OK):
            return path
    return None


def disassemble(code_object: bytes) -> str:
    """``llvm-objdump -d`` of a code object (the ISA of every kernel), for the processor it was built for."""
    tool = find_llvm_tool("llvm-objdump")
    if tool is None:
        raise ToolchainError(
            "no llvm-objdump found to disassemble AMDGPU code; install LLVM (e.g. apt install llvm-19) or ROCm"
        )
    code_object = extract_code_object(code_object)
    mcpu = target_id(code_object).rsplit("--", 1)[-1].split(":")[0]
    with tempfile.TemporaryDirectory(prefix="tilewright-hip-") as tmp:
        path = os.path.join(tmp, "kernel.hsaco")
        with open(path, "wb") as f:
            f.write(code_object)
        cmd = [tool, "-d", path] + ([f"--mcpu={mcpu}"] if mcpu else [])
        proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise ToolchainError(f"{tool} failed to disassemble the code object", log=proc.stderr, repro=shlex.join(cmd))
    return proc.stdout


# ---------------------------------------------------------------- command line
def _main(argv: list[str] | None = None) -> int:
    """``python -m tilewright.toolchain.hip FILE --arch gfx942 [--kernel K] [--compiler C] [-S] [-- OPTIONS]``"""
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="python -m tilewright.toolchain.hip", description=_main.__doc__)
    parser.add_argument("file")
    parser.add_argument("--arch", required=True)
    parser.add_argument("--kernel", action="append", default=[])
    parser.add_argument("--compiler", help=f"same values as {ENV_COMPILER}")
    parser.add_argument("-S", "--disassemble", action="store_true")
    parser.add_argument("-o", "--output", help="write the code object here")
    parser.add_argument("options", nargs="*")
    args = parser.parse_args(argv)
    if args.compiler:
        os.environ[ENV_COMPILER] = args.compiler
    with open(args.file, encoding="utf-8") as f:
        source = f.read()
    try:
        binary = compile_hip(source, args.arch, args.kernel, options=tuple(args.options))
    except ToolchainError as exc:
        print(exc, file=sys.stderr)
        return 1
    print(f"# {binary.toolchain}, {binary.compile_seconds:.3f} s, {len(binary.code_object)} bytes")
    if binary.log:
        print(binary.log)
    print(json.dumps(binary.resources, indent=1, sort_keys=True))
    if args.output:
        with open(args.output, "wb") as f:
            f.write(binary.code_object)
    if args.disassemble:
        print(disassemble(binary.code_object))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(_main())
