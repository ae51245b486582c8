"""``tilewright doctor``: what this machine has for tilewright, and the exact command for each
missing piece.

Each check prints one line — ``ok``, ``missing`` or ``note`` — with what was found (versions,
paths, GPUs) and, where something is missing, the command that fixes it.  The exit status is 0
when the local GPU can be used (a GPU is present and its vendor's compiler and runtime work), 1
otherwise (kernels then run in the CPU interpreter / emulator only).
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import sys
from dataclasses import dataclass

_PIP = f"{os.path.basename(sys.executable)} -m pip install"


@dataclass
class Check:
    name: str
    state: str  # "ok", "missing", "note"
    detail: str
    fix: str = ""


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def check_nvidia() -> tuple[list[Check], bool]:
    checks, gpu = [], False
    from ..runtime import cuda_driver

    bindings = _version("cuda-bindings")
    if bindings is None:
        checks.append(Check("CUDA driver bindings", "missing", "cuda-bindings is not installed",
                            f"{_PIP} cuda-bindings"))
    else:
        checks.append(Check("CUDA driver bindings", "ok", f"cuda-bindings {bindings}"))
    try:
        n = cuda_driver.device_count()
    except Exception as e:  # noqa: BLE001 - a broken driver is a finding, not a crash
        n = 0
        checks.append(Check("NVIDIA driver", "note", f"not usable: {_first_line(e)}"))
    if n:
        names = []
        for i in range(n):
            major, minor = cuda_driver.device_compute_capability(i)
            names.append(f"{i}: {cuda_driver.device_name(i)} (sm_{major}{minor})")
        checks.append(Check("NVIDIA GPUs", "ok", "; ".join(names)))
    elif bindings is not None:
        checks.append(Check("NVIDIA GPUs", "note", "none found (no driver or no device)"))
    if bindings is not None:
        checks.append(_compiled_launcher_check(cuda_driver))
    try:
        from ..toolchain.nvrtc import cuda_include_dirs, nvrtc_version

        checks.append(Check("NVRTC", "ok", f"{nvrtc_version()} (pip wheel)"))
        inc = cuda_include_dirs()
        if inc:
            checks.append(Check("CUDA headers", "ok", ", ".join(inc)))
        else:
            checks.append(Check("CUDA headers", "missing", "cuda_fp16.h not found", f"{_PIP} nvidia-cuda-runtime"))
        gpu = n > 0 and bindings is not None
    except Exception as e:  # noqa: BLE001
        checks.append(Check("NVRTC", "missing", _first_line(e), f"{_PIP} nvidia-cuda-nvrtc nvidia-cuda-runtime"))
    return checks, gpu


def _compiled_launcher_check(cuda_driver) -> Check:
    """Which call CUDA launches go through, and why not the compiled launcher where it is asked for
    but could not be built or loaded (TILEWRIGHT_COMPILED_LAUNCH)."""
    from ..runtime import compiled_launch

    try:
        status, path = compiled_launch.status(), cuda_driver.launch_path()
    except Exception as e:  # noqa: BLE001 - a finding, not a crash
        return Check("compiled launcher", "note", f"not usable: {_first_line(e)}")
    if path == "compiled" or not compiled_launch.enabled():
        return Check("compiled launcher", "ok" if path == "compiled" else "note", f"{status}; launches: {path}")
    return Check("compiled launcher", "note", f"{status}; launches: {path}", _launcher_fix(status))


def _launcher_fix(status: str) -> str:
    """What makes the compiled launcher build, by the reason ``compiled_launch.status()`` gives; ''
    where there is nothing to install (no CUDA driver: nothing launches on an NVIDIA GPU here)."""
    if "no C compiler" in status:
        return "install a C compiler (apt-get install gcc, as root), or set CC"
    if "no Python.h" in status:
        return (f"install this Python's headers (apt-get install python{sys.version_info[0]}."
                f"{sys.version_info[1]}-dev on Debian/Ubuntu, as root)")
    if "libcuda" in status:
        return ""
    return "the reason above; TILEWRIGHT_COMPILED_LAUNCH=0 keeps the cuda-bindings launch without trying"


def check_amd() -> tuple[list[Check], bool]:
    checks, compiler_ok = [], False
    from ..target.detect import detect_amd_arch

    arch = detect_amd_arch()
    checks.append(Check("AMD GPUs", "ok" if arch else "note", arch or "none found (no /dev/kfd or no device)"))
    try:
        from ..toolchain.hip import find_hip_compiler

        c = find_hip_compiler()
        checks.append(Check("HIP compiler", "ok", c.description))
        compiler_ok = True
    except Exception as e:  # noqa: BLE001
        fix = ("apt-get install clang-19 lld-19 (Debian/Ubuntu, as root), or install ROCm"
               if shutil.which("apt-get") else "install ROCm, or clang >= 17 with the AMDGPU target and lld")
        checks.append(Check("HIP compiler", "missing", _first_line(e), fix))
    runtime_ok = False
    if arch:
        try:
            from ..runtime.hip_runtime import get_runtime

            rt = get_runtime()
            checks.append(Check("HIP runtime", "ok", f"{getattr(rt, 'path', 'libamdhip64')}"))
            runtime_ok = True
        except Exception as e:  # noqa: BLE001
            checks.append(Check("HIP runtime", "missing", _first_line(e),
                                "install ROCm (libamdhip64), or a ROCm build of PyTorch"))
    return checks, bool(arch) and compiler_ok and runtime_ok


def check_python_side() -> list[Check]:
    from .. import config

    checks = []
    torch_version = _version("torch")
    if torch_version is None:
        checks.append(Check("PyTorch", "note", "not installed (kernels take NumPy arrays on the CPU backends)",
                            f"{_PIP} torch"))
    else:
        try:
            import torch

            build = f"ROCm {torch.version.hip}" if getattr(torch.version, "hip", None) else \
                f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU only"
            checks.append(Check("PyTorch", "ok", f"{torch.__version__} ({build})"))
        except Exception as e:  # noqa: BLE001
            checks.append(Check("PyTorch", "missing", f"installed but fails to import: {_first_line(e)}",
                                f"{_PIP} --force-reinstall torch"))
    folder = config.get("cache_dir")
    size, files = _folder_size(folder)
    writable = os.access(folder if os.path.isdir(folder) else os.path.dirname(folder) or ".", os.W_OK)
    checks.append(Check("kernel cache", "ok" if writable else "missing",
                        f"{folder} ({files} files, {size / 2**20:.1f} MiB)" + ("" if writable else ", not writable"),
                        "" if writable else "export TILEWRIGHT_CACHE_DIR=/a/writable/folder"))
    return checks


def _folder_size(folder: str) -> tuple[int, int]:
    total = count = 0
    for dirpath, _, names in os.walk(folder):
        for n in names:
            try:
                total += os.path.getsize(os.path.join(dirpath, n))
                count += 1
            except OSError:
                pass
    return total, count


def run_doctor(out=None) -> int:
    out = out or sys.stdout
    import tilewright

    from ..target.base import Target

    print(f"tilewright {tilewright.__version__} at {os.path.dirname(tilewright.__file__)}", file=out)
    print(f"Python {sys.version.split()[0]} ({sys.executable})", file=out)
    nv, nv_gpu = check_nvidia()
    amd, amd_gpu = check_amd()
    checks = nv + amd + check_python_side()
    width = max(len(c.name) for c in checks)
    for c in checks:
        print(f"  [{c.state:7}] {c.name:{width}}  {c.detail}", file=out)
        if c.fix:
            print(f"  {'':9} {'':{width}}  fix: {c.fix}", file=out)
    try:
        target = str(Target.current())
    except Exception as e:  # noqa: BLE001
        target = f"none ({_first_line(e)})"
    print(f"target='auto' means: {target}", file=out)
    if nv_gpu or amd_gpu:
        print("the local GPU can be used", file=out)
        return 0
    print("no usable GPU: kernels run on the CPU (target='interpret', or execution_backend='emulator' for the "
          "lowered code of any target); code objects for any target can still be built", file=out)
    return 1
