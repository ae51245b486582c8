"""A thin ctypes layer over the HIP runtime (``libamdhip64``) for loading code objects and launching kernels.

The counterpart of ``cuda_driver.py`` for AMD GPUs: a code object from :func:`tilewright.toolchain.hip.compile_hip`
is loaded with ``hipModuleLoadData`` and its ``extern "C"`` kernels launched with ``hipModuleLaunchKernel``
(a ``void*`` per argument, in a ``void**`` array).  HIP has one implicit context per device (PyTorch's
ROCm build uses the same runtime), so device pointers and streams from torch can be passed straight in.

Where ``libamdhip64`` comes from, first found wins: ``$TILEWRIGHT_HIP_RUNTIME_LIB``, ``$ROCM_PATH/lib``,
``$HIP_PATH/lib``, ``/opt/rocm/lib``, ``/opt/rocm-*/lib``, AMD's ROCm Python packages
(``rocm_sdk.find_libraries("amdhip64")``), the ``torch/lib`` of a ROCm build of PyTorch, then the
dynamic loader's own search (``libamdhip64.so``).  Importing this module loads nothing; nothing
here imports or loads a CUDA library.

Every entry point goes through a :class:`HipRuntime` bound to a library object, so tests can pass
a fake with the same function names (``hipInit``, ``hipModuleLoadData``, ...).  Out-parameters are
passed as ``ctypes.pointer`` objects (a fake sets ``p[0] = value``) and return codes are ints.

Why ctypes and not hip-python (measured, docs/dependencies.md, ``bench/host_launch_stub.py``):
hip-python's ``hipModuleLaunchKernel`` given our packed ``void**`` takes 0.4-0.8x the host time of
our ctypes call against a stub runtime, but its bindings are generated for one ROCm release (the
PyPI 10.0 wheels for ROCm 10 / HIP 7.15; MI200/MI300 machines commonly run ROCm 6.x), it is 19 MB
for the ~15 calls used here, and no AMD GPU is available to this project to validate a switch of the
launch path.  Revisit on AMD hardware: the launch call alone could move to it.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import importlib.util
import operator
import os
import re
import sys
import threading

from ..errors import ArgumentError, RuntimeLaunchError
from .launch_args import ARG_TYPES, ArgPacker

__all__ = [
    "ARG_TYPES",
    "HipFunction",
    "HipModule",
    "HipRuntime",
    "device_arch",
    "device_count",
    "get_runtime",
    "load_hip_library",
    "set_runtime",
]

ENV_RUNTIME_LIB = "TILEWRIGHT_HIP_RUNTIME_LIB"

# Argument kinds (ARG_TYPES) and their packing are shared with the other vendor: launch_args.py.

# Enum values from hip_runtime_api.h / driver_types.h (ROCm 6.x; stable since ROCm 5).
HIP_SUCCESS = 0
_ERR_NO_DEVICE = 100
_ERR_INVALID_DEVICE = 101
_ERR_INVALID_DEVICE_FUNCTION = 98
_ERR_INVALID_HANDLE = 400
_ERR_INVALID_CONTEXT = 201
_ERR_NO_BINARY_FOR_GPU = 209
_ERR_INVALID_IMAGE = 200
_ERR_LAUNCH_OUT_OF_RESOURCES = 701
_ERR_INVALID_CONFIGURATION = 9
_ERR_INVALID_VALUE = 1
DEVICE_ATTRIBUTES: dict[str, int] = {  # hipDeviceAttribute_t
    "MAX_BLOCK_DIM_X": 26,
    "MAX_GRID_DIM_Y": 30,
    "MAX_THREADS_PER_BLOCK": 56,
    "MULTIPROCESSOR_COUNT": 63,
    "MAX_SHARED_MEMORY_PER_BLOCK": 74,
    "SHARED_MEM_PER_BLOCK_OPTIN": 75,
    "WARP_SIZE": 87,
}
FUNC_ATTRIBUTES: dict[str, int] = {  # hipFunction_attribute
    "MAX_THREADS_PER_BLOCK": 0,
    "SHARED_SIZE_BYTES": 1,
    "LOCAL_SIZE_BYTES": 3,
    "NUM_REGS": 4,
    "MAX_DYNAMIC_SHARED_SIZE_BYTES": 8,
}
_WRONG_DEVICE_ERRORS = (_ERR_INVALID_DEVICE, _ERR_INVALID_HANDLE, _ERR_INVALID_DEVICE_FUNCTION, _ERR_INVALID_CONTEXT)
_MEMCPY_HOST_TO_DEVICE = 1
_MEMCPY_DEVICE_TO_HOST = 2

# hipDeviceProp_tR0600 (ROCm 6+): 1472 bytes on x86-64 with gcnArchName (char[256]) at offset 1160.
# We pass a larger buffer and, should the layout ever move, find the arch string by its shape.
_PROPS_BUFFER_BYTES = 8192
_GCN_ARCH_NAME_OFFSET = 1160
_ARCH_NAME_RE = re.compile(rb"gfx[0-9a-f]{3,4}(?::[a-z0-9_-]+[+-])*")

_INSTALL_HELP = (
    "install the HIP runtime: ROCm (https://rocm.docs.amd.com/projects/install-on-linux/en/latest/), "
    "AMD's ROCm Python packages (pip install 'rocm[libraries]' from the index for your GPU family, "
    "see https://github.com/ROCm/TheRock/blob/main/RELEASES.md) or a ROCm build of PyTorch; "
    f"or set {ENV_RUNTIME_LIB} to the path of libamdhip64.so"
)


# ---------------------------------------------------------------- finding libamdhip64
def _candidate_paths() -> list[str]:
    out: list[str] = []
    env = os.environ.get(ENV_RUNTIME_LIB)
    if env:
        out.append(env)
    roots = [os.environ.get("ROCM_PATH"), os.environ.get("HIP_PATH"), "/opt/rocm"]
    versioned = glob.glob("/opt/rocm-*")
    versioned.sort(key=lambda p: [int(x) for x in re.findall(r"\d+", os.path.basename(p))], reverse=True)
    for root in [r for r in roots if r] + versioned:
        out += _sorted_libs(glob.glob(os.path.join(root, "lib", "libamdhip64.so*")))[:1]
    # A partial rocm_sdk install raises all sorts of errors; it must not stop the search.
    with contextlib.suppress(Exception):
        if importlib.util.find_spec("rocm_sdk") is not None:
            import rocm_sdk  # type: ignore[import-not-found]

            out += [str(p) for p in rocm_sdk.find_libraries("amdhip64")]
    try:
        spec = importlib.util.find_spec("torch")  # finds torch without importing it
    except (ImportError, ValueError):
        spec = None
    for base in (spec.submodule_search_locations or []) if spec else []:
        out += _sorted_libs(glob.glob(os.path.join(base, "lib", "libamdhip64.so*")))[:1]
    out.append("libamdhip64.so")  # LD_LIBRARY_PATH, ld.so.cache
    return out


def _sorted_libs(paths: list[str]) -> list[str]:
    """``libX.so`` first, then versioned names (``libX.so.7.1``), newest first."""

    def key(path: str):
        m = re.search(r"\.so((?:\.\d+)*)$", path)
        return (not path.endswith(".so"), [-int(x) for x in (m.group(1) if m else "").split(".") if x])

    return sorted(paths, key=key)


def load_hip_library():
    """``(ctypes.CDLL, path)`` of the first ``libamdhip64`` that loads; RuntimeLaunchError if none does."""
    errors = []
    for path in _candidate_paths():
        if os.path.sep in path and not os.path.exists(path):
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as exc:
            errors.append(f"{path}: {exc}")
    tried = ("\ntried:\n  " + "\n  ".join(errors)) if errors else ""
    raise RuntimeLaunchError(f"the HIP runtime (libamdhip64) was not found; {_INSTALL_HELP}{tried}")


def _set_prototypes(lib) -> None:
    """Declare argument types so ctypes passes 64-bit handles and sizes correctly."""
    i, u, vp, sz = ctypes.c_int, ctypes.c_uint, ctypes.c_void_p, ctypes.c_size_t
    pi, pvp = ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_void_p)
    protos = {
        "hipInit": [u],
        "hipGetDeviceCount": [pi],
        "hipGetDevice": [pi],
        "hipSetDevice": [i],
        "hipDeviceGetAttribute": [pi, i, i],
        "hipModuleLoadData": [pvp, vp],
        "hipModuleUnload": [vp],
        "hipModuleGetFunction": [pvp, vp, ctypes.c_char_p],
        "hipFuncGetAttribute": [pi, i, vp],
        "hipModuleLaunchKernel": [vp, u, u, u, u, u, u, u, vp, pvp, pvp],
        "hipDeviceSynchronize": [],
        "hipMalloc": [pvp, sz],
        "hipFree": [vp],
        "hipMemcpy": [vp, vp, sz, i],
    }
    for name, argtypes in protos.items():
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.argtypes = argtypes
            fn.restype = ctypes.c_int
    for name in ("hipGetErrorName", "hipGetErrorString"):
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.argtypes = [ctypes.c_int]
            fn.restype = ctypes.c_char_p
    for name in ("hipGetDevicePropertiesR0600", "hipGetDeviceProperties"):
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.argtypes = [vp, i]
            fn.restype = ctypes.c_int


# ---------------------------------------------------------------- the runtime object
class HipRuntime:
    """The HIP runtime API calls we use, bound to one library (a ``ctypes.CDLL`` or a fake)."""

    def __init__(self, lib, path: str = ""):
        self.lib = lib
        self.path = path
        if isinstance(lib, ctypes.CDLL):
            _set_prototypes(lib)
        rc = lib.hipInit(0)
        # hipInit fails with hipErrorNoDevice on a machine without a GPU: device_count() then says 0.
        self.init_error = rc if rc not in (HIP_SUCCESS, _ERR_NO_DEVICE) else None
        self.no_device = rc == _ERR_NO_DEVICE

    # ------------------------------------------------------------ errors
    def describe(self, rc: int) -> str:
        """``"hipErrorX: text (code)"``."""
        parts = []
        for getter in ("hipGetErrorName", "hipGetErrorString"):
            fn = getattr(self.lib, getter, None)
            if fn is None:
                continue
            text = None
            with contextlib.suppress(Exception):  # only formatting an error message
                text = fn(rc)
            if text:
                parts.append(text.decode(errors="replace") if isinstance(text, bytes) else str(text))
        return (": ".join(parts) or "HIP error") + f" ({rc})"

    def check(self, rc: int, call: str, hint: str = "") -> None:
        if rc != HIP_SUCCESS:
            raise RuntimeLaunchError(f"{call} failed: {self.describe(rc)}" + (f"\n{hint}" if hint else ""))

    # ------------------------------------------------------------ devices
    def device_count(self) -> int:
        if self.no_device or self.init_error is not None:
            return 0
        n = ctypes.c_int(0)
        return int(n.value) if self.lib.hipGetDeviceCount(ctypes.pointer(n)) == HIP_SUCCESS else 0

    def _valid_device(self, index: int) -> int:
        if self.init_error is not None:
            self.check(self.init_error, "hipInit", hint=f"(HIP runtime {self.path or self.lib!r})")
        n = self.device_count()
        if not 0 <= int(index) < n:
            raise RuntimeLaunchError(f"HIP device {index} does not exist (this machine has {n} HIP device(s))")
        return int(index)

    def get_device(self) -> int:
        d = ctypes.c_int(0)
        self.check(self.lib.hipGetDevice(ctypes.pointer(d)), "hipGetDevice")
        return int(d.value)

    def set_device(self, index: int) -> None:
        self.check(self.lib.hipSetDevice(int(index)), f"hipSetDevice({index})")

    def device_attribute(self, index: int, name: str | int) -> int:
        """A ``hipDeviceAttribute_t`` value by number or by a name of :data:`DEVICE_ATTRIBUTES`."""
        attr = DEVICE_ATTRIBUTES.get(str(name).upper()) if isinstance(name, str) else int(name)
        if attr is None:
            raise ArgumentError(f"unknown HIP device attribute {name!r}; known: {', '.join(DEVICE_ATTRIBUTES)}")
        v = ctypes.c_int(0)
        self.check(
            self.lib.hipDeviceGetAttribute(ctypes.pointer(v), attr, self._valid_device(index)),
            f"hipDeviceGetAttribute({name})",
        )
        return int(v.value)

    def device_target_id(self, index: int) -> str:
        """``gcnArchName``, e.g. ``"gfx942:sramecc+:xnack-"``."""
        index = self._valid_device(index)
        fn = getattr(self.lib, "hipGetDevicePropertiesR0600", None) or self.lib.hipGetDeviceProperties
        buf = ctypes.create_string_buffer(_PROPS_BUFFER_BYTES)
        self.check(fn(buf, index), "hipGetDeviceProperties")
        raw = buf.raw
        m = _ARCH_NAME_RE.match(raw, _GCN_ARCH_NAME_OFFSET)
        if m is None:  # a layout we do not know: the arch name is the only string of this shape
            m = _ARCH_NAME_RE.search(raw)
        if m is None:
            raise RuntimeLaunchError(f"could not find the architecture name of HIP device {index} in its properties")
        return m.group(0).decode()

    # ------------------------------------------------------------ memory (tests, benchmarks)
    def malloc(self, nbytes: int) -> int:
        p = ctypes.c_void_p(0)
        self.check(self.lib.hipMalloc(ctypes.pointer(p), max(int(nbytes), 1)), f"hipMalloc({nbytes})")
        return int(p.value or 0)

    def free(self, ptr: int) -> None:
        self.check(self.lib.hipFree(ctypes.c_void_p(ptr)), "hipFree")

    def memcpy_htod(self, dst: int, src) -> None:
        """Copy a host buffer (e.g. a contiguous NumPy array) to device memory, synchronously."""
        view = memoryview(src).cast("B")
        host = (ctypes.c_char * view.nbytes).from_buffer_copy(view)
        self.check(
            self.lib.hipMemcpy(ctypes.c_void_p(dst), host, view.nbytes, _MEMCPY_HOST_TO_DEVICE), "hipMemcpy(HtoD)"
        )

    def memcpy_dtoh(self, dst, src: int) -> None:
        """Copy device memory into a writable host buffer, synchronously."""
        view = memoryview(dst).cast("B")
        host = (ctypes.c_char * view.nbytes).from_buffer(view)
        self.check(
            self.lib.hipMemcpy(host, ctypes.c_void_p(src), view.nbytes, _MEMCPY_DEVICE_TO_HOST), "hipMemcpy(DtoH)"
        )

    def synchronize(self) -> None:
        """Wait for the current device; raises RuntimeLaunchError on a kernel fault."""
        self.check(self.lib.hipDeviceSynchronize(), "hipDeviceSynchronize")


_lock = threading.Lock()
_state: dict = {"runtime": None, "error": None}


def get_runtime() -> HipRuntime:
    """The process-wide :class:`HipRuntime` (loads libamdhip64 on first use)."""
    rt = _state["runtime"]
    if rt is not None:
        return rt
    with _lock:
        if _state["runtime"] is None:
            if _state["error"] is not None:
                raise RuntimeLaunchError(_state["error"])
            try:
                lib, path = load_hip_library()
                _state["runtime"] = HipRuntime(lib, path)
            except RuntimeLaunchError as exc:
                _state["error"] = str(exc)
                raise
        return _state["runtime"]


def set_runtime(runtime: HipRuntime | None) -> None:
    """Replace the process-wide runtime (tests pass one over a fake library; ``None`` forgets it)."""
    with _lock:
        _state["runtime"] = runtime
        _state["error"] = None


def device_count() -> int:
    """Number of HIP devices; 0 when there is no HIP runtime or no GPU."""
    try:
        return get_runtime().device_count()
    except RuntimeLaunchError:
        return 0


def device_arch(index: int = 0) -> str:
    """The processor of device ``index`` without target features, e.g. ``"gfx942"``."""
    return get_runtime().device_target_id(index).split(":")[0]


# ---------------------------------------------------------------- modules and functions
class HipModule:
    """A loaded code object (``hipModuleLoadData``) on one device; unloaded by :meth:`close` or when collected."""

    def __init__(self, code_object: bytes, device_index: int = 0, *, runtime: HipRuntime | None = None):
        self.runtime = rt = runtime or get_runtime()
        self.device_index = rt._valid_device(device_index)
        self._functions: dict[str, HipFunction] = {}
        self._handle = None
        data = bytes(code_object)
        # Kept alive with the module: the runtime may read the image lazily.
        self._image = (ctypes.c_char * len(data)).from_buffer_copy(data)
        handle = ctypes.c_void_p(0)
        with _on_device(rt, self.device_index):
            rc = rt.lib.hipModuleLoadData(ctypes.pointer(handle), ctypes.cast(self._image, ctypes.c_void_p))
        if rc != HIP_SUCCESS:
            hint = ""
            if rc in (_ERR_NO_BINARY_FOR_GPU, _ERR_INVALID_IMAGE, _ERR_INVALID_DEVICE_FUNCTION):
                hint = (
                    f"(the code object must be built for this GPU: device {self.device_index} is "
                    f"{_safe_target_id(rt, self.device_index)}; a raw AMDGPU ELF is expected, not an offload bundle)"
                )
            rt.check(rc, "hipModuleLoadData", hint)
        self._handle = handle

    @property
    def handle(self):
        return self._handle

    def function(self, name: str) -> HipFunction:
        fn = self._functions.get(name)
        if fn is None:
            if self._handle is None:
                raise RuntimeLaunchError(f"cannot get kernel {name!r}: the module was closed")
            handle = ctypes.c_void_p(0)
            rc = self.runtime.lib.hipModuleGetFunction(ctypes.pointer(handle), self._handle, name.encode())
            self.runtime.check(
                rc,
                f"hipModuleGetFunction({name!r})",
                hint='(kernels must be extern "C" __global__ so that their names are not mangled)',
            )
            fn = HipFunction(self, name, handle)
            self._functions[name] = fn
        return fn

    def close(self) -> None:
        handle, self._handle = self._handle, None
        self._functions.clear()
        if handle is None:
            return
        with _on_device(self.runtime, self.device_index):
            self.runtime.check(self.runtime.lib.hipModuleUnload(handle), "hipModuleUnload")

    def __del__(self):
        # At interpreter exit the runtime may already be torn down; a module leaked then is harmless.
        if getattr(self, "_handle", None) is None or sys.is_finalizing():
            return
        with contextlib.suppress(Exception):  # never raise from a finalizer
            self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class _on_device:  # lower case: used like a function
    """Make ``index`` the current device for a block, restoring the previous one afterwards."""

    __slots__ = ("index", "previous", "rt")

    def __init__(self, rt: HipRuntime, index: int):
        self.rt, self.index, self.previous = rt, index, None

    def __enter__(self):
        current = self.rt.get_device()
        if current != self.index:
            self.rt.set_device(self.index)
            self.previous = current

    def __exit__(self, *exc):
        if self.previous is not None:
            self.rt.set_device(self.previous)


def _safe_target_id(rt: HipRuntime, index: int) -> str:
    try:
        return rt.device_target_id(index)
    except Exception:  # noqa: BLE001 - only used to word an error message
        return "of unknown architecture"


class _ArgPacker(ArgPacker):
    """The shared packer (``launch_args``); ``pack`` returns what this runtime's launch call takes."""

    __slots__ = ()
    pack = ArgPacker.pack_array


def _dims(value, what: str) -> tuple[int, int, int]:
    """``value`` (an int or 1 to 3 ints, NumPy ints included) as an ``(x, y, z)`` of positive ints."""
    try:
        dims = (operator.index(value),) if not hasattr(value, "__len__") else tuple(map(operator.index, value))
    except TypeError:
        dims = ()
    if not 1 <= len(dims) <= 3 or min(dims) < 1:
        raise ArgumentError(f"{what} must be 1 to 3 positive ints, got {value!r}")
    return (*dims, *(1,) * (3 - len(dims)))  # type: ignore[return-value]


class HipFunction:
    """One kernel of a :class:`HipModule`."""

    def __init__(self, module: HipModule, name: str, handle):
        self.module = module  # keeps the module loaded while the function is in use
        self.name = name
        self.handle = handle
        self._rt = module.runtime
        self._packers: dict[tuple, _ArgPacker] = {}
        self._max_dynamic_shared: int | None = None

    def attribute(self, name: str | int) -> int:
        """A ``hipFunction_attribute`` value, e.g. ``attribute("NUM_REGS")`` (VGPRs per thread)."""
        attr = FUNC_ATTRIBUTES.get(str(name).upper()) if isinstance(name, str) else int(name)
        if attr is None:
            raise ArgumentError(f"unknown HIP function attribute {name!r}; known: {', '.join(FUNC_ATTRIBUTES)}")
        v = ctypes.c_int(0)
        self._rt.check(
            self._rt.lib.hipFuncGetAttribute(ctypes.pointer(v), attr, self.handle), f"hipFuncGetAttribute({name})"
        )
        return int(v.value)

    def set_max_dynamic_shared(self, nbytes: int) -> None:
        """Check that ``nbytes`` of dynamic LDS fit next to the kernel's static LDS.

        AMD GPUs need no opt-in (unlike CUDA above 48 KiB: ``hipFuncSetAttribute`` only works on
        kernels registered by hipcc, not on module functions), so this only validates early, with a
        clear message, what the launch would otherwise reject.
        """
        nbytes = int(nbytes)
        if self._max_dynamic_shared is not None and nbytes <= self._max_dynamic_shared:
            return
        rt = self._rt
        limit = rt.device_attribute(self.module.device_index, "MAX_SHARED_MEMORY_PER_BLOCK")
        try:
            static = self.attribute("SHARED_SIZE_BYTES")
        except RuntimeLaunchError:
            static = 0
        if nbytes < 0 or nbytes + static > limit:
            raise RuntimeLaunchError(
                f"kernel {self.name!r} cannot have {nbytes} bytes of dynamic LDS: device {self.module.device_index} "
                f"allows {limit} bytes per block in all and the kernel already uses {static} bytes of static LDS"
            )
        self._max_dynamic_shared = nbytes

    def launch(self, grid, block, shared_bytes: int, stream, arg_types, arg_values) -> None:
        """Launch on ``stream`` (a raw ``hipStream_t`` as an int, e.g. torch's ``.cuda_stream``; 0 or None is
        the null stream of the current device)."""
        arg_types = tuple(arg_types)
        packer = self._packers.get(arg_types)
        if packer is None:
            packer = self._packers[arg_types] = _ArgPacker(arg_types)
        params = packer.pack(tuple(arg_values)) if packer.offsets else None
        gx, gy, gz = _dims(grid, "grid")
        bx, by, bz = _dims(block, "block")
        shared_bytes = int(shared_bytes)
        if shared_bytes and (self._max_dynamic_shared is None or shared_bytes > self._max_dynamic_shared):
            self.set_max_dynamic_shared(shared_bytes)
        stream = int(stream or 0)
        lib = self._rt.lib
        args = (self.handle, gx, gy, gz, bx, by, bz, shared_bytes, ctypes.c_void_p(stream), params, None)
        try:
            rc = lib.hipModuleLaunchKernel(*args)
        except (TypeError, OverflowError, ctypes.ArgumentError) as exc:
            raise ArgumentError(
                f"bad launch configuration for kernel {self.name!r}: grid={grid}, block={block}, "
                f"shared_bytes={shared_bytes}, stream={stream!r}: {exc}"
            ) from None
        # Another device may be current (the function belongs to the module's device): retry there.
        # Checking up front would cost every launch a runtime call.
        if rc in _WRONG_DEVICE_ERRORS and self._rt.get_device() != self.module.device_index:
            with _on_device(self._rt, self.module.device_index):
                rc = lib.hipModuleLaunchKernel(*args)
        if rc != HIP_SUCCESS:
            raise RuntimeLaunchError(self._launch_error_message(rc, (gx, gy, gz), (bx, by, bz), shared_bytes, stream))

    def _launch_error_message(self, rc, grid, block, shared_bytes, stream) -> str:
        msg = (
            f"hipModuleLaunchKernel failed for kernel {self.name!r} (grid={grid}, block={block}, "
            f"shared_bytes={shared_bytes}, stream={stream:#x}): {self._rt.describe(rc)}"
        )
        threads = block[0] * block[1] * block[2]
        if rc == _ERR_LAUNCH_OUT_OF_RESOURCES:
            msg += (
                f"\nhint: {threads} threads per block need more registers or LDS than a compute unit has; "
                "use fewer threads per block or give the kernel __launch_bounds__ so the compiler limits registers"
            )
        elif rc in (_ERR_INVALID_VALUE, _ERR_INVALID_CONFIGURATION):
            msg += (
                f"\nhint: the block has {threads} threads; it must not exceed the kernel's launch bounds "
                "(1024 by default, less with __launch_bounds__), and dynamic LDS + static LDS must fit the device"
            )
        return msg


# ---------------------------------------------------------------- what runtime.launcher needs of a vendor
def load_function(code_object: bytes, name: str, device_index: int) -> HipFunction:
    """Load ``code_object`` on device ``device_index`` and return its kernel ``name``."""
    module = HipModule(code_object, device_index)
    fn = module.function(name)
    fn._module_ref = module  # the module lives as long as the function
    return fn


def current_stream(device_index: int) -> int:
    """PyTorch's current stream on a ROCm build of torch (which calls its devices "cuda"), else 0."""
    torch = sys.modules.get("torch")
    if torch is None or not getattr(torch.version, "hip", None):
        return 0
    try:
        return int(torch.cuda.current_stream(device_index).cuda_stream)
    except Exception:  # noqa: BLE001 - a broken torch install must not break launching
        return 0


def synchronize(device_index: int = 0) -> None:
    rt = get_runtime()
    with _on_device(rt, device_index):
        rt.synchronize()
