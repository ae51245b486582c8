"""One record per GPU vendor: how its thread IR is printed, compiled, and launched.

The vendor is chosen here, once, from the target's kind; everything after that asks the record
instead of testing ``is_cuda`` / ``is_hip``.  Each record names its pieces by module so that
choosing AMD never imports a CUDA module (NVRTC, the driver bindings) and the other way round.
Adding a vendor is adding a record: a printer (``codegen/``), a toolchain (``toolchain/``) and a
device runtime (``runtime/``, providing ``load_function``, ``current_stream`` and ``synchronize``).
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Backend:
    vendor: str  # "cuda" or "hip"; the target kind it serves
    source_name: str  # file name of the generated source in dumps and exports
    printer: tuple  # (module, function): ThreadKernel -> source text
    compiler: tuple  # (module, function): (source, arch, kernel_names, dump_dir=) -> binary
    compiler_version: tuple  # (module, function): () -> a string identifying the toolchain
    device_runtime_module: str  # module with load_function / current_stream / synchronize
    tensor_maps: bool  # whether kernels may take TMA descriptors (encoded by the CUDA driver)

    def print_source(self, thread_kernel) -> str:
        return _resolve(self.printer)(thread_kernel)

    def compile(self, source: str, arch: str, kernel_names: list, dump_dir=None):
        return _resolve(self.compiler)(source, arch, kernel_names, dump_dir=dump_dir)

    def toolchain_version(self) -> str:
        return _toolchain_version(self.compiler_version)

    def device_runtime(self):
        return importlib.import_module(self.device_runtime_module)


def _hip_compiler_version() -> str:
    from .toolchain.hip import find_hip_compiler

    c = find_hip_compiler()
    return f"{c.kind}:{getattr(c, 'version', '')}"


BACKENDS = {
    "cuda": Backend("cuda", "kernel.cu", ("tilewright.codegen.cuda", "print_cuda"),
                    ("tilewright.toolchain.nvrtc", "compile_cuda"), ("tilewright.toolchain.nvrtc", "nvrtc_version"),
                    "tilewright.runtime.cuda_driver", tensor_maps=True),
    "hip": Backend("hip", "kernel.hip", ("tilewright.codegen.hip", "print_hip"),
                   ("tilewright.toolchain.hip", "compile_hip"), ("tilewright.backends", "_hip_compiler_version"),
                   "tilewright.runtime.hip_runtime", tensor_maps=False),
}


def backend_for(target) -> Backend:
    """The record of ``target``'s vendor (a GPU target; the interpreter has none)."""
    try:
        return BACKENDS[target.kind]
    except KeyError:
        raise ValueError(f"target {target} has no GPU backend") from None


def _resolve(ref: tuple):
    module, name = ref
    return getattr(importlib.import_module(module), name)


@functools.cache
def _toolchain_version(ref: tuple) -> str:
    return _resolve(ref)()
