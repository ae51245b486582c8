"""A thin, fast layer over the CUDA driver API (``cuda.bindings.driver``) for loading cubins and
launching kernels.

Why the driver API: a cubin from NVRTC is loaded with ``cuModuleLoadData`` and launched with
``cuLaunchKernel`` without any runtime-API registration.  We share the device's *primary*
context with PyTorch (and CuPy, and the runtime API in general), so pointers from their
allocators are valid in our launches and streams can be passed straight through.

Importing this module never touches libcuda; the driver is initialised on first use, and on a
machine without an NVIDIA driver only the calls that need one raise (``device_count()``
returns 0).  Nothing here loads any HIP/ROCm library.

The launch path is tuned for Python overhead: the argument buffer layout is computed once per
signature and each launch is a single ``struct.pack_into`` plus one ``cuLaunchKernel`` call.

Why not ``cuda.core`` (measured, docs/dependencies.md, ``bench/host_launch_stub.py``): its
``launch`` is faster only with a prepared ``Stream`` and ``LaunchConfig``; used as this layer must
(torch's raw stream handle and a grid that changes per call, looked up in caches; scalars as numpy
scalars) it costs 1.1-1.7x our host time per launch, with ``Stream.from_handle`` per call 4-7x; it
refuses a 128-byte TMA descriptor passed by value (our ``tmap`` arguments); and ``import cuda.core``
takes 470 ms against 180 ms for ``cuda.bindings.driver``.

Why not libcuda's ``cuLaunchKernelEx`` through ctypes (measured, session 10: every argument made
into a ctypes object once, a ``CUlaunchConfig`` holding grid, block, shared size and stream): on the
CPU stub bench a fixed launch took 0.82 us against 0.96 us here, but on the H200 (bench/results/
2026-12-02-0140-host-overhead-cpu-stub.md, its H200 section) the two took turns in one process with
no gain above the host's noise (ctypes / bindings 0.85-1.36x per op, torch.add alone moving 1.12x
between the rounds), so the launch stays on cuda-bindings (no second way to keep correct).

The compiled launcher (``compiled_launch.py``, ``fast_launch.c``; ``TILEWRIGHT_COMPILED_LAUNCH``)
is a different thing from that ctypes call: a CPython extension built on first use, whose one C
call writes the pointers and calls libcuda with no Python object made (ctypes converts every
argument per call).  ``CudaFunction.compiled`` / ``FixedCudaLaunch.current`` hold it where it is
on and built; every refusal falls back to the cuda-bindings calls here, which retry or explain.
"""

from __future__ import annotations

import gc
import sys
import threading
from contextlib import contextmanager, suppress
from functools import partial

from ..binding import tensor_args as _tensor_args
from ..errors import ArgumentError, RuntimeLaunchError
from .launch_args import ARG_TYPES, ArgPacker, FixedArgs

__all__ = [
    "ARG_TYPES",
    "CudaFunction",
    "CudaModule",
    "current_stream_of_torch",
    "device_attribute",
    "device_compute_capability",
    "device_count",
    "device_name",
    "driver_available",
    "ensure_context",
    "launch_path",
    "mem_alloc",
    "mem_free",
    "memcpy_dtoh",
    "memcpy_htod",
    "pointer_device_index",
    "synchronize",
    "typed_launch_call",
]

# Argument kinds (ARG_TYPES) and their packing are shared with the other vendor: launch_args.py.

_lock = threading.Lock()
_state: dict = {"driver": None, "init_error": None, "initialized": False}
_contexts: dict[int, _DeviceContext] = {}


# ---------------------------------------------------------------- driver loading and errors
def _driver():
    """The ``cuda.bindings.driver`` module, with ``cuInit`` done; raises RuntimeLaunchError if unusable."""
    if _state["initialized"]:
        return _state["driver"]
    with _lock:
        if _state["initialized"]:
            return _state["driver"]
        if _state["init_error"] is not None:
            raise RuntimeLaunchError(_state["init_error"])
        try:
            from cuda.bindings import driver
        except ImportError as exc:
            _state["init_error"] = f"the CUDA driver bindings are not installed (pip install cuda-bindings): {exc}"
            raise RuntimeLaunchError(_state["init_error"]) from exc
        try:
            (err,) = driver.cuInit(0)
        except Exception as exc:
            _state["init_error"] = f"the NVIDIA driver (libcuda) could not be loaded: {exc}"
            raise RuntimeLaunchError(_state["init_error"]) from exc
        if err != driver.CUresult.CUDA_SUCCESS:
            _state["init_error"] = "cuInit failed: " + _describe(driver, err)
            raise RuntimeLaunchError(_state["init_error"])
        _state["driver"] = driver
        _state["initialized"] = True
        return driver


def _describe(driver, err) -> str:
    """``"CUDA_ERROR_X: text"`` for a CUresult."""
    try:
        name = driver.cuGetErrorName(err)[1]
        text = driver.cuGetErrorString(err)[1]
        name = name.decode() if isinstance(name, bytes) else str(name)
        text = text.decode() if isinstance(text, bytes) else str(text)
        return f"{name}: {text}"
    except Exception:  # noqa: BLE001 - only formatting an error message
        return str(err)


def _check(driver, result, call: str, hint: str = ""):
    """Unpack a ``(CUresult, *values)`` tuple from the bindings; raise RuntimeLaunchError on failure."""
    err = result[0]
    if err != driver.CUresult.CUDA_SUCCESS:
        msg = f"{call} failed: {_describe(driver, err)}"
        if hint:
            msg += f"\n{hint}"
        raise RuntimeLaunchError(msg)
    if len(result) == 1:
        return None
    return result[1] if len(result) == 2 else result[1:]


def driver_available() -> bool:
    """True when libcuda loads and ``cuInit`` succeeds (there may still be zero devices)."""
    try:
        _driver()
        return True
    except RuntimeLaunchError:
        return False


# ---------------------------------------------------------------- devices
def device_count() -> int:
    """Number of CUDA devices; 0 when there is no driver or no device."""
    try:
        driver = _driver()
    except RuntimeLaunchError:
        return 0
    err, n = driver.cuDeviceGetCount()
    return int(n) if err == driver.CUresult.CUDA_SUCCESS else 0


def _device(driver, index: int):
    n = device_count()
    if not 0 <= index < n:
        raise RuntimeLaunchError(f"CUDA device {index} does not exist (this machine has {n} CUDA device(s))")
    return _check(driver, driver.cuDeviceGet(index), "cuDeviceGet")


def device_attribute(index: int, name: str) -> int:
    """A ``CU_DEVICE_ATTRIBUTE_*`` value, e.g. ``device_attribute(0, "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN")``."""
    driver = _driver()
    key = name if name.startswith("CU_DEVICE_ATTRIBUTE_") else "CU_DEVICE_ATTRIBUTE_" + name.upper()
    try:
        attr = getattr(driver.CUdevice_attribute, key)
    except AttributeError:
        raise ArgumentError(f"unknown CUDA device attribute {name!r}") from None
    return int(_check(driver, driver.cuDeviceGetAttribute(attr, _device(driver, index)), "cuDeviceGetAttribute"))


def device_compute_capability(index: int) -> tuple[int, int]:
    """``(major, minor)``, e.g. ``(9, 0)`` for an H100/H200."""
    return (device_attribute(index, "COMPUTE_CAPABILITY_MAJOR"), device_attribute(index, "COMPUTE_CAPABILITY_MINOR"))


def device_name(index: int) -> str:
    driver = _driver()
    raw = _check(driver, driver.cuDeviceGetName(256, _device(driver, index)), "cuDeviceGetName")
    return raw.split(b"\0", 1)[0].decode(errors="replace") if isinstance(raw, bytes) else str(raw)


def current_stream_of_torch(device_index: int) -> int:
    """``torch.cuda.current_stream(device).cuda_stream``, or 0 (the legacy default stream) when torch is not
    imported or has not initialised CUDA.  We never import torch ourselves: if the caller has not, no torch
    stream can be current."""
    torch = sys.modules.get("torch")
    if torch is None:
        return 0
    try:
        if getattr(torch.version, "hip", None) or not torch.cuda.is_initialized():
            return 0
        return int(torch.cuda.current_stream(device_index).cuda_stream)
    except Exception:  # noqa: BLE001 - a broken torch install must not break launching
        return 0


# ---------------------------------------------------------------- contexts
class _DeviceContext:
    """The context we load modules into for one device: normally the device's primary context."""

    __slots__ = ("device_index", "handle", "handle_int", "retained")

    def __init__(self, device_index: int, handle, retained: bool):
        self.device_index = device_index
        self.handle = handle
        self.handle_int = int(handle)
        self.retained = retained


def ensure_context(device_index: int = 0) -> _DeviceContext:
    """The context used for ``device_index``.

    If a context of that device is current on this thread (PyTorch's), that one is used; otherwise the
    device's primary context is retained and, if no context at all is current, made current, as the
    runtime API would do.  Cached per device.
    """
    ctx = _contexts.get(device_index)
    if ctx is not None:
        return ctx
    driver = _driver()
    with _lock:
        ctx = _contexts.get(device_index)
        if ctx is not None:
            return ctx
        dev = _device(driver, device_index)
        current = _check(driver, driver.cuCtxGetCurrent(), "cuCtxGetCurrent")
        if int(current) != 0:
            err, cur_dev = driver.cuCtxGetDevice()
            if err == driver.CUresult.CUDA_SUCCESS and int(cur_dev) == device_index:
                ctx = _DeviceContext(device_index, current, retained=False)
        if ctx is None:
            primary = _check(driver, driver.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
            if int(current) == 0:
                _check(driver, driver.cuCtxSetCurrent(primary), "cuCtxSetCurrent")
            ctx = _DeviceContext(device_index, primary, retained=True)
        _contexts[device_index] = ctx
        return ctx


@contextmanager
def _activated(driver, ctx: _DeviceContext):
    """Make ``ctx`` current for the block: set it if none is current, else push it and pop afterwards."""
    current = _check(driver, driver.cuCtxGetCurrent(), "cuCtxGetCurrent")
    cur = int(current)
    if cur == ctx.handle_int:
        yield
    elif cur == 0:
        # Leaving it current afterwards is what the runtime API does on first use in a thread.
        _check(driver, driver.cuCtxSetCurrent(ctx.handle), "cuCtxSetCurrent")
        yield
    else:
        _check(driver, driver.cuCtxPushCurrent(ctx.handle), "cuCtxPushCurrent")
        try:
            yield
        finally:
            driver.cuCtxPopCurrent()


# ---------------------------------------------------------------- modules and functions
class CudaModule:
    """A loaded cubin (``cuModuleLoadData``) on one device; unloaded by :meth:`close` or when collected."""

    def __init__(self, cubin: bytes, device_index: int = 0):
        driver = _driver()
        self._driver = driver
        self.device_index = device_index
        self._ctx = ensure_context(device_index)
        self._handle = None
        self._functions: dict[str, CudaFunction] = {}
        with _activated(driver, self._ctx):
            result = driver.cuModuleLoadData(bytes(cubin))
        if result[0] != driver.CUresult.CUDA_SUCCESS:
            major, minor = _safe_cc(device_index)
            _check(
                driver,
                result,
                "cuModuleLoadData",
                hint=f"(device {device_index} is sm_{major}{minor}; a cubin only loads on the architecture it was "
                "built for, or a later minor version of the same major one)",
            )
        self._handle = result[1]

    @property
    def handle(self):
        return self._handle

    def function(self, name: str) -> CudaFunction:
        fn = self._functions.get(name)
        if fn is None:
            if self._handle is None:
                raise RuntimeLaunchError(f"cannot get kernel {name!r}: the module was closed")
            handle = _check(
                self._driver,
                self._driver.cuModuleGetFunction(self._handle, name.encode()),
                f"cuModuleGetFunction({name!r})",
                hint='(kernels must be extern "C" __global__ so that their names are not mangled)',
            )
            fn = CudaFunction(self, name, handle)
            self._functions[name] = fn
        return fn

    def close(self) -> None:
        handle, self._handle = self._handle, None
        self._functions.clear()
        if handle is None:
            return
        driver = self._driver
        with _activated(driver, self._ctx):
            _check(driver, driver.cuModuleUnload(handle), "cuModuleUnload")

    def __del__(self):
        # At interpreter exit the driver may already be torn down; a module leaked then is harmless.
        if getattr(self, "_handle", None) is None or sys.is_finalizing():
            return
        with suppress(Exception):  # never raise from a finalizer
            self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _safe_cc(index: int) -> tuple[int, int]:
    try:
        return device_compute_capability(index)
    except Exception:  # noqa: BLE001 - only used to word an error message
        return (0, 0)


class _ArgPacker(ArgPacker):
    """The shared packer (``launch_args``); ``pack`` returns what this runtime's launch call takes."""

    __slots__ = ()
    pack = ArgPacker.pack_address


class CudaFunction:
    """One kernel of a :class:`CudaModule`."""

    def __init__(self, module: CudaModule, name: str, handle):
        self.module = module  # keeps the module loaded while the function is in use
        self.name = name
        self.handle = handle
        self._driver = module._driver
        self._ctx_int = module._ctx.handle_int
        self._packers: dict[tuple, _ArgPacker] = {}
        self._last_packer = None  # (argument types tuple, its packer) of the previous launch
        driver = self._driver
        # The default limit is 48 KiB *minus the static shared memory*, so a kernel with 4 KiB of static
        # shared memory already needs the opt-in for 46 KiB of dynamic shared memory: ask, don't assume.
        attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        err, limit = driver.cuFuncGetAttribute(attr, handle)
        self._dynamic_shared_limit = int(limit) if err == driver.CUresult.CUDA_SUCCESS else 0
        self._launch_fn = driver.cuLaunchKernel
        self.typed_launch = _typed_launch_kernel()  # (the typed driver call, or None: _typed_launch_kernel)
        self._typed_handle = int(handle) if self.typed_launch is not None else 0
        self._programmatic = False
        self.compiled = _compiled_launch(False)  # (the compiled launcher module, or None)
        self._handle_int = int(handle)
        self._success = driver.CUresult.CUDA_SUCCESS
        self._wrong_context = {
            driver.CUresult.CUDA_ERROR_INVALID_CONTEXT,
            driver.CUresult.CUDA_ERROR_INVALID_HANDLE,
            driver.CUresult.CUDA_ERROR_CONTEXT_IS_DESTROYED,
        }

    def launch_programmatic(self) -> None:
        """Launch this kernel with programmatic stream serialization from now on (``cuLaunchKernelEx`` with
        ``CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION``): it may start while the previous kernel
        of the stream still runs, once that one's blocks have all run ``griddepcontrol.launch_dependents``
        or exited; the kernel waits for it with ``griddepcontrol.wait`` (``T.pdl_sync``, which makes a
        compiled kernel's ``LaunchSpec.programmatic``).  The same call shape as ``cuLaunchKernel``, so the
        launch paths (``launch``, ``FixedCudaLaunch``) take it unchanged; the typed launch is off."""
        driver = self._driver
        attr = driver.CUlaunchAttribute()
        attr.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        attr.value.programmaticStreamSerializationAllowed = 1
        configs: dict = {}  # (grid, block, shared bytes, stream) -> its CUlaunchConfig, made once
        launch_ex = driver.cuLaunchKernelEx

        def launch(handle, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
            key = (gx, gy, gz, bx, by, bz, shared, stream)
            cfg = configs.get(key)
            if cfg is None:
                if len(configs) > 256:
                    configs.clear()
                cfg = configs[key] = driver.CUlaunchConfig()
                cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = gx, gy, gz
                cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = bx, by, bz
                cfg.sharedMemBytes = shared
                cfg.hStream = driver.CUstream(stream)
                cfg.attrs = [attr]
                cfg.numAttrs = 1
            return launch_ex(cfg, handle, params, extra)

        self._launch_fn = launch
        self.typed_launch = None
        self._typed_handle = 0
        self._programmatic = True
        self.compiled = _compiled_launch(True)

    # ---------------------------------------------------------------- attributes
    def attribute(self, name: str) -> int:
        """A ``CU_FUNC_ATTRIBUTE_*`` value, e.g. ``attribute("NUM_REGS")``."""
        driver = self._driver
        key = name if name.startswith("CU_FUNC_ATTRIBUTE_") else "CU_FUNC_ATTRIBUTE_" + name.upper()
        try:
            attr = getattr(driver.CUfunction_attribute, key)
        except AttributeError:
            raise ArgumentError(f"unknown CUDA function attribute {name!r}") from None
        return int(_check(driver, driver.cuFuncGetAttribute(attr, self.handle), f"cuFuncGetAttribute({key})"))

    def attributes(self) -> dict[str, int]:
        """What the driver says about this kernel: registers, static shared/local/const bytes, thread limit."""
        return {
            "registers": self.attribute("NUM_REGS"),
            "shared_bytes": self.attribute("SHARED_SIZE_BYTES"),
            "local_bytes": self.attribute("LOCAL_SIZE_BYTES"),
            "const_bytes": self.attribute("CONST_SIZE_BYTES"),
            "max_threads_per_block": self.attribute("MAX_THREADS_PER_BLOCK"),
            "max_dynamic_shared_bytes": self.attribute("MAX_DYNAMIC_SHARED_SIZE_BYTES"),
            "binary_version": self.attribute("BINARY_VERSION"),
        }

    def set_max_dynamic_shared(self, nbytes: int) -> None:
        """Opt in to ``nbytes`` of dynamic shared memory per block.

        Calls the driver only when ``nbytes`` exceeds the kernel's current limit (by default 48 KiB less its
        static shared memory), so each larger value is set once and smaller ones cost nothing.
        :meth:`launch` does this by itself.
        """
        nbytes = int(nbytes)
        if nbytes <= self._dynamic_shared_limit:
            return
        driver = self._driver
        attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        result = driver.cuFuncSetAttribute(self.handle, attr, nbytes)
        if result[0] != self._success:
            limit = _safe_attr(self.module.device_index, "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN")
            static = _safe_fn_attr(self, "SHARED_SIZE_BYTES")
            _check(
                driver,
                result,
                f"cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES={nbytes}) for kernel {self.name!r}",
                hint=f"(device {self.module.device_index} allows {limit} bytes of shared memory per block in all; "
                f"this kernel already uses {static} bytes of static shared memory)",
            )
        self._dynamic_shared_limit = nbytes

    def use_typed_launch(self, on: bool) -> bool:
        """From now on launch through the typed call (``typed_launch_call``) or through
        ``driver.cuLaunchKernel``, whatever ``TILEWRIGHT_TYPED_LAUNCH`` said (an A/B bench switching
        the launches of one process: bench/launch_overhead.py ``--paths``); the ``FixedCudaLaunch``
        objects made before keep theirs (each has its own switch).  True when the typed call is in
        use (False where this cuda-bindings has none)."""
        self.typed_launch = typed_launch_call() if on else None
        self._typed_handle = int(self.handle) if self.typed_launch is not None else 0
        return self.typed_launch is not None

    def use_compiled_launch(self, on: bool) -> bool:
        """``use_typed_launch`` for the compiled launcher (``runtime/compiled_launch``: built and
        loaded whatever ``TILEWRIGHT_COMPILED_LAUNCH`` says when ``on``); True when it is in use."""
        self.compiled = _compiled_launch(self._programmatic, force=True) if on else None
        return self.compiled is not None

    # ---------------------------------------------------------------- launching
    def fixed_launch(self, grid, block, shared_bytes: int, arg_types: tuple, values, n_lead: int):
        """A ``FixedCudaLaunch`` of ``values`` (packed once), whose launches change only the
        ``n_lead`` leading pointers; None where the layout does not allow it (``FixedArgs.make``)."""
        packer = self._packers.get(arg_types)
        if packer is None:
            packer = self._packers[arg_types] = _ArgPacker(tuple(arg_types))
        args = FixedArgs.make(packer, values, n_lead)
        if args is None:
            return None
        if shared_bytes > self._dynamic_shared_limit:
            self.set_max_dynamic_shared(shared_bytes)
        return FixedCudaLaunch(self, grid, block, shared_bytes, arg_types, args)

    def launch(
        self,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared_bytes: int,
        stream: int,
        arg_types: tuple[str, ...],
        arg_values: tuple,
    ) -> None:
        """Launch on ``stream`` (a raw ``CUstream`` handle as an int; 0 is the legacy default stream)."""
        last = self._last_packer
        if last is not None and last[0] is arg_types:
            packer = last[1]  # the launcher passes the same tuple every call: no hash of it per launch
        else:
            packer = self._packers.get(arg_types)
            if packer is None:
                packer = self._packers[arg_types] = _ArgPacker(tuple(arg_types))
            self._last_packer = (arg_types, packer)
        if packer.offsets:
            params = packer.pack(arg_values)
        elif arg_values:
            raise ArgumentError(
                f"kernel {self.name!r} was launched with {len(arg_values)} values but no argument types"
            )
        else:
            params = None
        if shared_bytes > self._dynamic_shared_limit:
            self.set_max_dynamic_shared(shared_bytes)
        compiled = self.compiled
        if compiled is not None:  # a refusal (an error code or an exception): the calls below retry or explain
            try:
                if not compiled.launch_kernel(self._handle_int, grid[0], grid[1], grid[2], block[0], block[1],
                                              block[2], shared_bytes, stream, params or 0, self._programmatic):
                    return
            except Exception:  # noqa: BLE001 - (nothing was launched)
                pass
        typed = self.typed_launch
        if typed is not None:  # (the typed call) ints only; any refusal: the call below explains or retries
            try:
                typed(self._typed_handle, grid[0], grid[1], grid[2], block[0], block[1], block[2], shared_bytes,
                      stream, params or 0, 0)
                return
            except Exception:  # noqa: BLE001 - (nothing was launched)
                pass
        try:
            (err,) = self._launch_fn(
                self.handle, grid[0], grid[1], grid[2], block[0], block[1], block[2], shared_bytes, stream, params, 0
            )
        except (TypeError, OverflowError, ValueError) as exc:
            raise ArgumentError(
                f"bad launch configuration for kernel {self.name!r}: grid={grid}, block={block}, "
                f"shared_bytes={shared_bytes}, stream={stream!r}: {exc}"
            ) from None
        if err != self._success:
            if err in self._wrong_context:
                # Another thread, or a framework, left a different (or no) context current: launch
                # again with ours current.  Checking up front would cost every launch a driver call.
                with _activated(self._driver, self.module._ctx):
                    (err,) = self._launch_fn(
                        self.handle, grid[0], grid[1], grid[2], block[0], block[1], block[2], shared_bytes, stream,
                        params, 0,
                    )  # fmt: skip
                if err == self._success:
                    return
            raise RuntimeLaunchError(self._launch_error_message(err, grid, block, shared_bytes, stream))

    def _launch_error_message(self, err, grid, block, shared_bytes, stream) -> str:
        driver = self._driver
        msg = (
            f"cuLaunchKernel failed for kernel {self.name!r} (grid={tuple(grid)}, block={tuple(block)}, "
            f"shared_bytes={shared_bytes}, stream={_stream_text(stream)}): {_describe(driver, err)}"
        )
        R = driver.CUresult
        if err == R.CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES:
            regs = _safe_fn_attr(self, "NUM_REGS")
            threads = block[0] * block[1] * block[2]
            msg += (
                f"\nhint: {threads} threads x {regs} registers = {threads * regs} registers per block; "
                "use fewer threads per block or lower the register use (e.g. __launch_bounds__)"
            )
        elif err == R.CUDA_ERROR_INVALID_VALUE:
            msg += (
                f"\nhint: check the block size (at most {_safe_fn_attr(self, 'MAX_THREADS_PER_BLOCK')} threads for "
                "this kernel), the grid (y and z at most 65535) and the dynamic shared memory size"
            )
        return msg


_typed_call: list = []  # [cuda.bindings._v2.driver.launch_kernel, or None], looked up once


def typed_launch_call():
    """cuda-bindings' typed ``cuLaunchKernel`` (``cuda.bindings._v2.driver.launch_kernel``: the
    handle, stream and parameter array as ints, ``None`` back or an exception on an error), or None
    where this cuda-bindings has none (13.3.1 has none; 13.5.0 has it).  Looked up once."""
    if not _typed_call:
        try:
            from cuda.bindings._v2.driver import launch_kernel
        except ImportError:
            launch_kernel = None
        _typed_call.append(launch_kernel)
    return _typed_call[0]


def _typed_launch_kernel():
    """The typed call (``typed_launch_call``) unless ``TILEWRIGHT_TYPED_LAUNCH`` is "0" (unset:
    ``TYPED_LAUNCH_DEFAULT``) and where it exists, else None (``driver.cuLaunchKernel``, which wraps
    every argument and returns a ``CUresult`` made per call).  Why the default: on the H200
    (2026-12-02 07:49, cuda-bindings 13.5.0, bench/launch_overhead.py ``--paths both``: every row
    both ways in the same 15 interleaved pinned rounds) the bare typed call took 5.7 us of host
    time against 6.3 for ``driver.cuLaunchKernel``, and of the 19 rows that launch through
    tilewright the typed path's ratio to torch.add was lower in the median for 18 (by 0.02-0.09x)
    and lower in at least 10 of the 15 rounds for 17 (``ops.rms_norm`` 1.52x -> 1.42x); on the CPU
    stub 0.17-0.28 us a call against 0.37-0.41.  Where cuda-bindings has no such call (13.3.1) nothing changes; the
    module's leading underscore says it may change, and any refusal of the typed call (an
    exception) is launched again, or explained, by the classic call."""
    from .. import config

    setting = str(config.get("typed_launch")).strip().lower()
    if setting in ("0", "no", "off", "false") or (not setting and not TYPED_LAUNCH_DEFAULT):
        return None
    return typed_launch_call()


def launch_objects() -> list:
    """Every ``CudaFunction`` and ``FixedCudaLaunch`` alive (found through the collector), for a
    bench or test that switches one process's launches (``use_typed_launch`` on each); not for a
    hot path."""
    kinds = {CudaFunction, FixedCudaLaunch}  # (type(): no other object's __class__ is asked)
    return [o for o in gc.get_objects()
            if type(o) in kinds and type(getattr(o, "_fn", o)) is CudaFunction]  # (not a test's stand-in's)


TYPED_LAUNCH_DEFAULT = True  # TILEWRIGHT_TYPED_LAUNCH unset: the typed call where it exists (True) or not


def launch_path() -> str:
    """Which driver call a CUDA launch made now goes through: ``"compiled"`` (the compiled launcher,
    ``runtime/compiled_launch``; its ``status()`` says why not where it is asked for and absent),
    ``"typed"`` or ``"bindings"``."""
    if _compiled_launch(False) is not None:
        return "compiled"
    return "bindings" if _typed_launch_kernel() is None else "typed"


def _compiled_launch(programmatic: bool, force: bool = False):
    """The compiled launcher module for a function (``programmatic``: one that launches through
    cuLaunchKernelEx, which the driver must have) where ``TILEWRIGHT_COMPILED_LAUNCH`` asks for
    it (``force``: whatever it says) and it is built; else None."""
    from . import compiled_launch

    mod = compiled_launch.load() if force else compiled_launch.module()
    if mod is None or (programmatic and not compiled_launch.has_launch_ex()):
        return None
    return mod


class FixedCudaLaunch:
    """``CudaFunction.launch`` of one grid, block, shared size and argument buffer (``FixedArgs``)
    whose leading pointers are written per launch: the write and ``cuLaunchKernel``, nothing else
    (packing every value through ``launch`` was ~1.5 us of a 22-argument launch on the CPU stub
    bench).  A launch the driver refuses is made again through ``launch``, which retries in our
    context and explains the error.  Where the function launches through the typed call
    (``CudaFunction.typed_launch``, from ``_typed_launch_kernel``: the default where cuda-bindings
    has it) that call raises where the other returns an error: the same retry.

    The driver call is a ``functools.partial`` of it with the handle, grid, block and shared size
    (its C call joins them with the per-launch stream and buffer: 240-370 ns a call into the CPU
    stub against 440-470 ns for ``call(*prefix, stream, buffer, 0)``), and the pointer write a
    bound ``Struct.pack_into`` kept with its buffer."""

    __slots__ = ("_address", "_compiled", "_fn", "_go", "_mv", "_pack", "_stream_lookup", "_success", "_typed", "args",
                 "arg_types", "block", "current", "grid", "shared")

    def __init__(self, fn: CudaFunction, grid, block, shared: int, arg_types: tuple, args: FixedArgs):
        self._fn, self.args, self.arg_types = fn, args, arg_types
        self.grid, self.block, self.shared = tuple(grid), tuple(block), shared
        self._pack, self._mv, self._address = args.lead.pack_into, args.mv, args.address
        self._success = fn._success
        self._stream_lookup = None  # (stream function, device, thread) of set_stream_lookup
        self._set_call(getattr(fn, "typed_launch", None))  # (only a function of the real driver has one)
        self._set_compiled(getattr(fn, "compiled", None))

    def _set_call(self, typed) -> None:
        """Launch through ``typed`` (the typed driver call: ints only, raises on an error), or through
        the function's ``driver.cuLaunchKernel`` (returns the error) when None."""
        self._typed = typed
        fn = self._fn
        call, handle = (typed, int(fn.handle)) if typed is not None else (fn._launch_fn, fn.handle)
        self._go = partial(call, handle, *self.grid, *self.block, self.shared)

    def _set_compiled(self, module) -> None:
        """Launch through ``module`` (the compiled launcher: its ``Launch`` writes the pointers and
        calls the driver in one C call), or as ``_set_call`` said when None."""
        self._compiled = self.current = None
        if module is not None:
            fn, args = self._fn, self.args
            launch = module.Launch(fn._handle_int, self.grid, self.block, self.shared, args.data_address,
                                   args.address, args.n_lead, fn._programmatic, args, *(self._stream_lookup or ()))
            self._compiled = launch.go
            if self._stream_lookup is not None:
                self.current = launch.go_current

    def set_stream_lookup(self, stream_fn, device: int, thread: int) -> None:
        """Give the compiled launch the current-stream lookup (``stream_fn(device)``: a raw handle) and
        the one thread (``threading.get_ident()``) that may launch through ``current``
        (``go_current(ptrs)``: the lookup, the pointer writes and the launch in one C call; -2 and
        nothing launched on any other thread; None where the compiled launcher is off)."""
        self._stream_lookup = (stream_fn, device, thread)
        if self._compiled is not None:
            self._set_compiled(_compiled_launch(self._fn._programmatic, force=True))

    def use_typed_launch(self, on: bool) -> bool:
        """``CudaFunction.use_typed_launch`` for this packed launch; True when the typed call is in use."""
        self._set_call(typed_launch_call() if on else None)
        return self._typed is not None

    def use_compiled_launch(self, on: bool) -> bool:
        """``CudaFunction.use_compiled_launch`` for this packed launch; True when it is in use."""
        self._set_compiled(_compiled_launch(self._fn._programmatic, force=True) if on else None)
        return self._compiled is not None

    def __call__(self, ptrs, stream: int) -> None:
        """Launch on ``stream`` with ``ptrs`` as the leading pointers."""
        compiled = self._compiled
        if compiled is not None:
            try:
                if not compiled(stream, ptrs):  # (the CUresult: 0 is launched)
                    return
            except Exception:  # noqa: BLE001 - (nothing was launched) the general path retries or explains
                pass
            values = list(ptrs) + self.args.values[len(ptrs):]
            self._fn.launch(self.grid, self.block, self.shared, stream, self.arg_types, values)
            return
        self._pack(self._mv, 0, *ptrs)
        if self._typed is not None:
            try:
                self._go(stream, self._address, 0)
                return
            except Exception:  # noqa: BLE001 - (nothing was launched) the general path retries or explains
                pass
        elif self._go(stream, self._address, 0)[0] == self._success:  # ((err,): the classic call's result)
            return
        # (nothing was launched) the general path retries or explains
        values = list(ptrs) + self.args.values[len(ptrs):]
        self._fn.launch(self.grid, self.block, self.shared, stream, self.arg_types, values)


def _stream_text(stream) -> str:
    return hex(stream) if isinstance(stream, int) else repr(stream)


def _safe_attr(index: int, name: str):
    try:
        return device_attribute(index, name)
    except Exception:  # noqa: BLE001 - only used to word an error message
        return "?"


def _safe_fn_attr(fn: CudaFunction, name: str):
    try:
        return fn.attribute(name)
    except Exception:  # noqa: BLE001 - only used to word an error message
        return "?"


# ---------------------------------------------------------------- memory helpers (tests, benchmarks)
def mem_alloc(nbytes: int, device_index: int = 0) -> int:
    """``cuMemAlloc`` in our context of ``device_index``; returns the device pointer as an int."""
    driver = _driver()
    with _activated(driver, ensure_context(device_index)):
        return int(_check(driver, driver.cuMemAlloc(max(int(nbytes), 1)), "cuMemAlloc"))


def mem_free(ptr: int, device_index: int = 0) -> None:
    driver = _driver()
    with _activated(driver, ensure_context(device_index)):
        _check(driver, driver.cuMemFree(ptr), "cuMemFree")


def memcpy_htod(dst: int, src, device_index: int = 0) -> None:
    """Copy a host buffer (e.g. a contiguous NumPy array) to device memory, synchronously."""
    driver = _driver()
    view = memoryview(src).cast("B")
    with _activated(driver, ensure_context(device_index)):
        _check(driver, driver.cuMemcpyHtoD(dst, view, view.nbytes), "cuMemcpyHtoD")


def memcpy_dtoh(dst, src: int, device_index: int = 0) -> None:
    """Copy device memory into a writable host buffer (e.g. a contiguous NumPy array), synchronously."""
    driver = _driver()
    view = memoryview(dst).cast("B")
    with _activated(driver, ensure_context(device_index)):
        _check(driver, driver.cuMemcpyDtoH(view, src, view.nbytes), "cuMemcpyDtoH")


def synchronize(device_index: int = 0) -> None:
    """Wait for all work in our context of ``device_index``; raises RuntimeLaunchError on a kernel fault."""
    driver = _driver()
    with _activated(driver, ensure_context(device_index)):
        _check(driver, driver.cuCtxSynchronize(), "cuCtxSynchronize")


def pointer_device_index(ptr: int) -> int | None:
    """Device ordinal of a device pointer, or None when the driver does not know the pointer."""
    try:
        driver = _driver()
    except RuntimeLaunchError:
        return None
    attr = driver.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
    try:
        err, value = driver.cuPointerGetAttribute(attr, ptr)
    except Exception:  # noqa: BLE001 - unknown pointers are an answer, not an error
        return None
    return int(value) if err == driver.CUresult.CUDA_SUCCESS else None


def capture_sequence(stream: int) -> int | None:
    """The id of the graph capture sequence ``stream`` (a raw handle) is capturing into (unique over the
    process's lifetime, shared by the streams a capture forks into), or None: not capturing, or the driver
    did not answer."""
    try:
        driver = _driver()
        got = driver.cuStreamGetCaptureInfo(driver.CUstream(stream))
    except Exception:  # noqa: BLE001 - no answer is an answer: the caller does without the id
        return None
    if got[0] != driver.CUresult.CUDA_SUCCESS or got[1] != driver.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_ACTIVE:
        return None
    return int(got[2])


# ---------------------------------------------------------------- what runtime.launcher needs of a vendor
def load_function(code_object: bytes, name: str, device_index: int) -> CudaFunction:
    """Load ``code_object`` on device ``device_index`` and return its kernel ``name``."""
    module = CudaModule(code_object, device_index)
    fn = module.function(name)
    fn._module_ref = module  # the module lives as long as the function
    return fn


_raw_stream: list = []  # torch._C._cuda_getCurrentRawStream, once torch has initialised CUDA


def current_stream_function():
    """The function ``current_stream`` calls once torch has settled it (torch's raw-stream lookup,
    or the general one on a CPU or ROCm build of torch), for a caller that looks the stream up on
    every launch; None before (then call ``current_stream``)."""
    return _raw_stream[0] if _raw_stream else None


def current_stream(device_index: int) -> int:
    """torch's current stream of ``device_index`` as a raw handle.  Once torch has initialised CUDA
    (which it never undoes) this is one call into torch's C++ (``_cuda_getCurrentRawStream``: no
    ``torch.cuda.Stream`` object is made, measured ~0.1 us against ~2 us); before that, and on torch
    builds without it, ``current_stream_of_torch``."""
    if _raw_stream:
        return _raw_stream[0](device_index)
    torch = sys.modules.get("torch")
    raw = getattr(getattr(torch, "_C", None), "_cuda_getCurrentRawStream", None)
    if raw is None or getattr(torch.version, "hip", None):
        if torch is not None:  # a CPU or ROCm build of torch: the general lookup from now on
            _raw_stream.append(current_stream_of_torch)
        return current_stream_of_torch(device_index)
    if not torch.cuda.is_initialized():
        return 0  # no torch stream can be current yet
    _raw_stream.append(raw)
    return raw(device_index)


_tensor_args.pointer_device_resolvers.append(pointer_device_index)  # CAI arguments: which GPU holds them
