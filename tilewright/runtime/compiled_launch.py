"""The compiled launcher: ``fast_launch.c`` built on first use into a CPython extension module, so
that the last step of a CUDA launch (the new pointers written into the packed buffer, the call
into libcuda) is one C call that makes no Python object.

Contract: ``module()`` returns the loaded module (see the C file's header for its functions), or
None, never raising: ``TILEWRIGHT_COMPILED_LAUNCH`` is off, there is no C compiler (``CC``, else
``cc``/``gcc``/``clang`` on PATH), the running interpreter has no headers (``Python.h`` under
``sysconfig``'s include path), the build failed, or libcuda cannot be loaded.  ``status()`` says
which, for ``tilewright doctor`` and ``cuda_driver.launch_path()``.  One build is tried per process;
a failed build never breaks a launch (the caller then launches through cuda-bindings).

The built module is cached in ``TILEWRIGHT_CACHE_DIR/launcher/<key>/``, the key hashing the C
source, the interpreter's ABI (``EXT_SUFFIX``, ``cache_tag``, version) and the compiler command, so
another Python, another source or another compiler builds its own.  The build writes into a
temporary folder and renames it into place: concurrent processes each build and one wins.  A
failed build leaves ``<key>.failed`` (its reason) beside the folder, so that later processes do
not compile again for the same source, interpreter and compiler; delete it to try again.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fast_launch.c")
MODULE_NAME = "tilewright_fast_launch"  # (the C file's PyInit_ name)
DRIVER_LIBRARY = "libcuda.so.1"
BUILD_TIMEOUT_S = 120
FAILED_SUFFIX = ".failed"  # beside a key's folder: why its build failed (the next processes skip it)
# TILEWRIGHT_COMPILED_LAUNCH unset: on.  H200 2026-12-02 11:30 (bench/launch_overhead.py --paths
# compiled, typed and compiled in the same 15 pinned rounds): compiled lower in the median on all 17
# rows that launch through tilewright (by 0.10-0.25x of torch.add's 9.0 us: ops.rms_norm 11.9 -> 10.5
# us, decode 17.3 -> 16.3) and in >= 10 of 15 rounds on every one (>= 13 on 14 of them); matmul,
# layer_norm and decode with one split came under 1.5x with it.  Confirmed at 12:05 with it the
# default: lower in the median on all 14 ops rows, in 10-14 of 15 rounds each
COMPILED_LAUNCH_DEFAULT = True

_lock = threading.Lock()
_state: dict = {"tried": False, "module": None, "status": "not tried yet", "has_launch_ex": False}


def enabled() -> bool:
    """Does ``TILEWRIGHT_COMPILED_LAUNCH`` (unset: ``COMPILED_LAUNCH_DEFAULT``) ask for it?"""
    from .. import config

    setting = str(config.get("compiled_launch")).strip().lower()
    if not setting:
        return COMPILED_LAUNCH_DEFAULT
    return setting not in ("0", "no", "off", "false")


def module():
    """The compiled launcher module where it is on and built (bound to libcuda), else None."""
    if _state["tried"]:
        return _state["module"] if enabled() else None
    if not enabled():
        return None
    return load()


def load():
    """Build (or find in the cache) and load the module whatever the knob says; None where that
    fails (``status()`` says why).  Tried once per process."""
    with _lock:
        if not _state["tried"]:
            mod, why = _build_and_load()
            _state["module"], _state["status"], _state["tried"] = mod, why, True
        return _state["module"]


def has_launch_ex() -> bool:
    """Can the loaded module launch programmatically (the driver has ``cuLaunchKernelEx``)?"""
    return _state["has_launch_ex"]


def status() -> str:
    """A line saying whether the compiled launcher is in use and, if not, why (and, where it is off
    but a bench or test loaded it, how that went)."""
    if not enabled():
        off = "off (TILEWRIGHT_COMPILED_LAUNCH=0" + (" or unset" if not COMPILED_LAUNCH_DEFAULT else "") + ")"
        return off + (f"; loaded on request: {_state['status']}" if _state["tried"] else "")
    mod = module()
    return f"in use ({_state['status']})" if mod is not None else _state["status"]


def reset_for_tests() -> None:
    """Forget the process's attempt (a test that builds with another compiler or cache folder)."""
    with _lock:
        _state.update(tried=False, module=None, status="not tried yet", has_launch_ex=False)


# ------------------------------------------------------------------ building
def compiler() -> list[str] | None:
    """The C compiler command: ``CC`` (split like a shell would) where set, else the first of
    cc, gcc, clang on PATH; None where there is none (a ``CC`` naming a missing program too)."""
    cc = os.environ.get("CC", "").strip()
    if cc:
        cmd = shlex.split(cc)
        return cmd if shutil.which(cmd[0]) else None
    for name in ("cc", "gcc", "clang"):
        path = shutil.which(name)
        if path:
            return [path]
    return None


def python_include() -> str | None:
    """The running interpreter's header folder, where it has ``Python.h``."""
    inc = sysconfig.get_paths().get("include")
    return inc if inc and os.path.isfile(os.path.join(inc, "Python.h")) else None


def cache_key(cc: list[str], source: bytes) -> str:
    h = hashlib.sha256(source)
    for part in (sysconfig.get_config_var("EXT_SUFFIX") or "", sys.implementation.cache_tag or "", sys.version,
                 sysconfig.get_platform(), " ".join(cc)):
        h.update(b"\0" + part.encode())
    return h.hexdigest()[:32]


def built_path(key: str) -> str:
    from .. import config

    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    return os.path.join(config.get("cache_dir"), "launcher", key, MODULE_NAME + suffix)


def _build_and_load():
    """(module or None, status line)."""
    cc = compiler()
    if cc is None:
        return None, "not built: no C compiler (set CC, or install cc/gcc/clang)"
    inc = python_include()
    if inc is None:
        return None, f"not built: no Python.h for this interpreter ({sysconfig.get_paths().get('include')})"
    try:
        with open(SOURCE, "rb") as f:
            source = f.read()
    except OSError as exc:
        return None, f"not built: the C source is missing ({exc})"
    path = built_path(cache_key(cc, source))
    failed = os.path.dirname(path) + FAILED_SUFFIX
    how = "cached"
    if not os.path.isfile(path):
        try:
            with open(failed, encoding="utf-8") as f:  # (an earlier process's build of this key failed)
                return None, f"not built: {f.read().strip()} (an earlier build; delete {failed} to try again)"
        except OSError:
            pass
        why = _build(cc, inc, path)
        if why:
            try:  # remembered, so that every process does not spend a compile on failing again
                with open(failed, "w", encoding="utf-8") as f:
                    f.write(why)
            except OSError:
                pass
            return None, "not built: " + why
        how = "built"
    try:
        spec = importlib.util.spec_from_loader(MODULE_NAME, importlib.machinery.ExtensionFileLoader(MODULE_NAME, path))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        _state["has_launch_ex"] = bool(mod.bind_driver(DRIVER_LIBRARY))
    except Exception as exc:  # noqa: BLE001 - any failure: the launches stay on cuda-bindings
        return None, f"not loaded: {type(exc).__name__}: {exc}"
    ex = "" if _state["has_launch_ex"] else "; no cuLaunchKernelEx in the driver (programmatic launches: bindings)"
    return mod, f"{how}: {path}{ex}"


def _build(cc: list[str], inc: str, path: str) -> str:
    """Compile into a temporary folder beside ``path``'s and rename it into place; '' on success,
    else what went wrong."""
    final_dir = os.path.dirname(path)
    try:
        os.makedirs(os.path.dirname(final_dir), exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=".build-", dir=os.path.dirname(final_dir))
    except OSError as exc:
        return f"cannot write the cache folder ({exc})"
    try:
        out = os.path.join(tmp, os.path.basename(path))
        cmd = [*cc, "-O2", "-shared", "-fPIC", "-w", "-I", inc, "-o", out, SOURCE, "-ldl"]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        except (OSError, subprocess.SubprocessError) as exc:
            return f"{' '.join(cc)} did not run ({exc})"
        if proc.returncode != 0 or not os.path.isfile(out):
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            return f"{' '.join(cc)} failed ({proc.returncode}): " + " | ".join(tail)
        try:
            os.rename(tmp, final_dir)
        except OSError:
            if not os.path.isfile(path):  # (another process's build got there first: use that one)
                return f"cannot move the build into {final_dir}"
        return ""
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
