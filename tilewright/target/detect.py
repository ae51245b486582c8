"""Find the local GPU and turn it into a ``Target``.

Order (first answer wins):

1. the environment variable ``TILEWRIGHT_TARGET`` (anything ``Target.parse`` accepts, except "auto");
2. PyTorch, *if the program already imported it* (we look in ``sys.modules`` and never import it):
   ``torch.version.hip`` -> ``gcnArchName`` of device 0, ``torch.version.cuda`` -> compute capability;
3. AMD through the KFD topology in sysfs (plain file reads, no library is loaded);
4. NVIDIA through ``/proc/driver/nvidia/gpus`` (presence) and ``cuda.bindings.driver``
   (``cuInit`` + ``cuDeviceGetAttribute``) for the compute capability;
5. otherwise the CPU interpreter.

A CUDA library is never loaded on a machine that has the AMD KFD (``/sys/class/kfd`` or
``/dev/kfd``), and no HIP library is ever loaded at all: the AMD path only reads sysfs.  The result
of ``detect_target()`` with default arguments is cached; ``clear_cache()`` forgets it.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Mapping
from pathlib import Path

from ..errors import TargetError
from .base import Target

ENV_VAR = "TILEWRIGHT_TARGET"

# Roots of the files we read; tests pass their own.
DEFAULT_SYS_ROOT = "/sys"
DEFAULT_PROC_ROOT = "/proc"
DEFAULT_DEV_ROOT = "/dev"

_KFD_NODES = "class/kfd/kfd/topology/nodes"

_cache: dict = {}

# What a probe of torch or cuda-python may raise on a machine whose driver, runtime or package is
# missing, too old or half-initialised ("Torch not compiled with CUDA enabled" is an AssertionError).
# Detection must never fail because of them: it falls through to the next probe.
_PROBE_ERRORS = (ImportError, OSError, RuntimeError, AttributeError, AssertionError, TypeError, ValueError)


def clear_cache() -> None:
    """Forget cached detection results (tests, or after changing ``TILEWRIGHT_TARGET``)."""
    _cache.clear()


# ------------------------------------------------------------------------------ AMD (KFD sysfs)


def decode_gfx_target_version(value: int) -> str | None:
    """KFD ``gfx_target_version`` -> ``"gfxNNN"``; ``None`` for 0 (a CPU node) or nonsense.

    The kernel packs major * 10000 + minor * 100 + stepping in *decimal* (linux
    drivers/gpu/drm/amd/amdkfd/kfd_device.c: Aldebaran, IP 9.4.2, is ``gfx_target_version = 90010``,
    Renoir ``90012``), and the ROCm runtimes unpack it the same way (ROCm/rocprofiler-sdk:
    major = v / 10000, minor = (v / 100) % 100, step = v % 100, printed ``gfx{major}{minor}{step:x}``).
    The target name writes minor and stepping as one hex digit each: stepping 10 -> "a" (gfx90a),
    12 -> "c" (gfx90c).
    """
    if value <= 0:
        return None
    major, minor, step = value // 10000, (value // 100) % 100, value % 100
    if minor > 15 or step > 15:
        return None
    return f"gfx{major}{minor:x}{step:x}"


def _kfd_gpu_archs(sys_root: str) -> list[str]:
    """gfx names of the KFD GPU nodes, in node order (node 0 is usually the CPU)."""
    nodes = Path(sys_root, _KFD_NODES)
    try:
        entries = [p for p in nodes.iterdir() if p.name.isdigit()]
    except OSError:
        return []
    archs = []
    for node in sorted(entries, key=lambda p: int(p.name)):
        try:
            text = (node / "properties").read_text()
        except OSError:
            continue
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == "gfx_target_version":
                try:
                    arch = decode_gfx_target_version(int(parts[1]))
                except ValueError:
                    arch = None
                if arch is not None:
                    archs.append(arch)
                break
    return archs


def _is_amd_machine(sys_root: str, dev_root: str) -> bool:
    return Path(sys_root, "class/kfd").exists() or Path(dev_root, "kfd").exists()


# ------------------------------------------------------------------------------ PyTorch (already imported)


def _strip_target_id(name: str) -> str:
    """``"gfx90a:sramecc+:xnack-"`` -> ``"gfx90a"``."""
    return name.split(":", 1)[0].strip()


def device_target(index: int) -> Target:
    """The target of GPU ``index`` as torch sees it (a machine may hold GPUs of different kinds:
    kernels for ``cuda:1`` are built for that device), else the local target (``detect_target``).
    Cached per index, like ``detect_target``."""
    key = ("device", index)
    hit = _cache.get(key)
    if hit is None:
        spec = (os.environ.get(ENV_VAR) or "").strip()
        found = None if spec and spec.lower() != "auto" else _torch_arch(index)  # an explicit choice wins
        hit = _found(*found) if found is not None else detect_target()
        _cache[key] = hit
    return hit  # type: ignore[return-value]


def _torch_arch(index: int = 0) -> tuple[str, str] | None:
    """``("hip", "gfx942")`` / ``("cuda", "sm_90a")`` of GPU ``index`` from an already-imported
    torch, else None."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        version = getattr(torch, "version", None)
        hip = getattr(version, "hip", None)
        cuda_ver = getattr(version, "cuda", None)
        if not (hip or cuda_ver) or not torch.cuda.is_available() or torch.cuda.device_count() <= index:
            return None
        props = torch.cuda.get_device_properties(index)
        if hip:
            name = _strip_target_id(str(getattr(props, "gcnArchName", "") or ""))
            return ("hip", name) if name.startswith("gfx") else None
        return "cuda", cc_to_sm(int(props.major), int(props.minor))
    except _PROBE_ERRORS:
        return None


# ------------------------------------------------------------------------------ NVIDIA


def cc_to_sm(major: int, minor: int) -> str:
    """Compute capability -> arch name.  9.0 gets the ``a`` suffix so that wgmma/TMA are usable."""
    return f"sm_{major}{minor}a" if (major, minor) == (9, 0) else f"sm_{major}{minor}"


def _nvidia_present(proc_root: str) -> bool:
    gpus = Path(proc_root, "driver/nvidia/gpus")
    try:
        return any(gpus.iterdir())
    except OSError:
        return False


def _cuda_driver_cc() -> tuple[int, int] | None:
    """Compute capability of device 0 through cuda-python; None when it is missing or fails."""
    try:
        from cuda.bindings import driver  # cuda-python >= 12.6; loads libcuda.so
    except _PROBE_ERRORS:
        try:
            from cuda import cuda as driver  # older cuda-python spelling of the same API
        except _PROBE_ERRORS:
            return None
    try:
        (err,) = driver.cuInit(0)
        if int(err) != 0:
            return None
        err, dev = driver.cuDeviceGet(0)
        if int(err) != 0:
            return None
        attr = driver.CUdevice_attribute
        err, major = driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
        if int(err) != 0:
            return None
        err, minor = driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
        if int(err) != 0:
            return None
        return int(major), int(minor)
    except _PROBE_ERRORS:
        return None


# ------------------------------------------------------------------------------ public API


def detect_amd_arch(*, sys_root: str | None = None, use_torch: bool = True) -> str | None:
    """The gfx name of the first local AMD GPU, or None.  Reads files only; loads no library."""
    cacheable = sys_root is None and use_torch
    if cacheable and "amd" in _cache:
        return _cache["amd"]  # type: ignore[return-value]
    arch = None
    if use_torch:
        t = _torch_arch()
        if t is not None and t[0] == "hip":
            arch = t[1]
    if arch is None:
        archs = _kfd_gpu_archs(sys_root or DEFAULT_SYS_ROOT)
        arch = archs[0] if archs else None
    if cacheable:
        _cache["amd"] = arch
    return arch


def detect_cuda_arch(
    *,
    sys_root: str | None = None,
    proc_root: str | None = None,
    dev_root: str | None = None,
    use_torch: bool = True,
    load_driver: bool = True,
) -> str | None:
    """``"sm_XY"`` of the first local NVIDIA GPU, or None.

    libcuda is loaded only when the machine shows no sign of the AMD KFD driver.
    """
    cacheable = sys_root is None and proc_root is None and dev_root is None and use_torch and load_driver
    if cacheable and "cuda" in _cache:
        return _cache["cuda"]  # type: ignore[return-value]
    arch = None
    if use_torch:
        t = _torch_arch()
        if t is not None and t[0] == "cuda":
            arch = t[1]
    if arch is None and load_driver and not _is_amd_machine(sys_root or DEFAULT_SYS_ROOT, dev_root or DEFAULT_DEV_ROOT):
        cc = _cuda_driver_cc()
        if cc is not None:
            arch = cc_to_sm(*cc)
    if cacheable:
        _cache["cuda"] = arch
    return arch


def detect_target(
    *,
    env: Mapping[str, str] | None = None,
    sys_root: str | None = None,
    proc_root: str | None = None,
    dev_root: str | None = None,
    use_torch: bool = True,
    load_driver: bool = True,
) -> Target:
    """The ``Target`` of the local GPU (see the module docstring for the order), else "interpret".

    Every argument exists for tests: ``env`` replaces ``os.environ``, the roots replace ``/sys``,
    ``/proc`` and ``/dev``, and ``use_torch``/``load_driver`` switch those probes off.  Only a call
    with all defaults is cached.
    """
    cacheable = (
        env is None and sys_root is None and proc_root is None and dev_root is None and use_torch and load_driver
    )
    if cacheable and "target" in _cache:
        return _cache["target"]  # type: ignore[return-value]
    target = _detect(
        os.environ if env is None else env,
        sys_root or DEFAULT_SYS_ROOT,
        proc_root or DEFAULT_PROC_ROOT,
        dev_root or DEFAULT_DEV_ROOT,
        use_torch,
        load_driver,
    )
    if cacheable:
        _cache["target"] = target
    return target


def _detect(env, sys_root: str, proc_root: str, dev_root: str, use_torch: bool, load_driver: bool) -> Target:
    spec = (env.get(ENV_VAR) or "").strip()
    if spec and spec.lower() != "auto":  # "auto" would send Target.parse straight back here
        try:
            return Target.parse(spec)
        except TargetError as exc:
            raise TargetError(f"{ENV_VAR}={spec!r} is not a usable target: {exc}") from exc

    if use_torch:
        t = _torch_arch()
        if t is not None:
            return _found(*t)

    archs = _kfd_gpu_archs(sys_root)
    if archs:
        return _found("hip", archs[0])

    if not _is_amd_machine(sys_root, dev_root):
        present = _nvidia_present(proc_root)
        cc = _cuda_driver_cc() if load_driver else None
        if cc is not None:
            return _found("cuda", cc_to_sm(*cc))
        if present:
            # The driver is there but we could not ask it for the compute capability (no cuda-python):
            # sm_80 code runs on every GPU tilewright supports, so it is the safe choice.
            return _found("cuda", "sm_80")

    return Target.parse("interpret")


def _found(kind: str, arch: str) -> Target:
    """Target for a detected GPU; a GPU tilewright has no record for falls back to the interpreter.

    Raising here would make ``target="auto"`` unusable on such a machine even for interpreted runs,
    so we warn instead; an explicit ``target=`` still raises.
    """
    try:
        return Target.parse({"kind": kind, "arch": arch})
    except TargetError as exc:
        warnings.warn(f"detected GPU {arch} is not supported ({exc}); using the CPU interpreter", stacklevel=3)
        return Target.parse("interpret")
