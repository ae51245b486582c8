"""The one typed registry of environment variables and options.

Every knob tilewright reads from the environment is declared here with its type, default and
meaning; ``docs/configuration.md`` is generated from this list (``python -m tilewright.config``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Knob:
    env: str
    kind: type
    default: object
    help: str

    def get(self):
        raw = os.environ.get(self.env)
        if raw is None or raw == "":
            return self.default
        if self.kind is bool:
            return raw.strip().lower() in ("1", "true", "yes", "on")
        if self.kind is int:
            return int(raw)
        if self.kind is float:
            try:
                value = float(raw)
            except ValueError:
                value = float("nan")
            if not 0 <= value < float("inf"):
                raise ValueError(f"{self.env}={raw!r}: expected a finite number >= 0")
            return value
        return raw


KNOBS = {
    "cache_dir": Knob("TILEWRIGHT_CACHE_DIR", str, os.path.join(os.path.expanduser("~"), ".cache", "tilewright"),
                      "Folder of the on-disk kernel cache (code objects keyed by IR, target, options, toolchain)."),
    "disable_cache": Knob("TILEWRIGHT_DISABLE_CACHE", bool, False,
                          "Compile every kernel afresh (no memory or disk cache)."),
    "dump_dir": Knob("TILEWRIGHT_DUMP_DIR", str, "",
                     "When set, write the IR after every pass, the generated source and the compiler log here."),
    "target": Knob("TILEWRIGHT_TARGET", str, "",
                   "Overrides target detection for target='auto' (any string Target.parse accepts)."),
    "hip_compiler": Knob("TILEWRIGHT_HIP_COMPILER", str, "",
                         "Force the HIP compiler: 'hiprtc', 'clang' or a path to a clang binary."),
    "verify_launch": Knob("TILEWRIGHT_SYNC_LAUNCH", bool, False,
                          "Synchronize after every launch and raise on a device error (debugging)."),
    "hip_runtime_lib": Knob("TILEWRIGHT_HIP_RUNTIME_LIB", str, "",
                            "Path of libamdhip64 to load (otherwise ROCM_PATH/HIP_PATH, /opt/rocm, the rocm "
                            "packages or a ROCm PyTorch are searched)."),
    "autotune_workers": Knob("TILEWRIGHT_AUTOTUNE_WORKERS", int, 0,
                             "Processes compiling autotuning candidates at once (0: one per CPU core, at most 16)."),
    "autotune_gpus": Knob("TILEWRIGHT_AUTOTUNE_GPUS", int, 0,
                          "GPUs that time autotuning candidates at once (0: every visible GPU of the current one's "
                          "kind; 1: the current GPU only)."),
    "cache_max_mb": Knob("TILEWRIGHT_CACHE_MAX_MB", int, 4096,
                         "Size cap of the on-disk kernel cache in MiB (least recently used go first; 0: no cap)."),
    "tmp_dir": Knob("TILEWRIGHT_TMP_DIR", str, "",
                    "Folder for the compilers' temporary files (the HIP compiler's work folders, the source of a "
                    "failed compile); empty: the system's temporary folder."),
    "compile_timeout": Knob("TILEWRIGHT_COMPILE_TIMEOUT_SECONDS", float, 900.0,
                            "Seconds a HIP compiler process (clang) may run before it is stopped and the compile "
                            "fails with a ToolchainError (0: no limit). NVRTC and hipRTC compile inside this "
                            "process and are not limited."),
    "log": Knob("TILEWRIGHT_LOG", str, "",
                "Log level of the 'tilewright' logger (debug, info, warning); unset: Python's defaults."),
    "decode_kernel": Knob("TILEWRIGHT_DECODE_KERNEL", str, "new",
                          "ops.attention with one query token: 'new' (the flash-decoding kernel, "
                          "ops/decode_kernels.py) or 'old' (the general attention kernel and a combine launch); "
                          "for benchmarking."),
    "decode_config": Knob("TILEWRIGHT_DECODE_CONFIG", str, "",
                          "'block_N,stages[,threads]' of the flash-decoding kernel instead of its default (sweeps: "
                          "bench/decode_splits.py)."),
    "decode_variant": Knob("TILEWRIGHT_DECODE_VARIANT", str, "",
                           "Candidate variants of the flash-decoding kernel, comma-separated names from "
                           "ops/decode_kernels.VARIANTS (each with its meaning there; 'none': the plain kernel); "
                           "unset: ops/decode_kernels.DEFAULT_VARIANT (bench/decode_splits.py)."),
    "typed_launch": Knob("TILEWRIGHT_TYPED_LAUNCH", str, "",
                         "'1' or unset (cuda_driver.TYPED_LAUNCH_DEFAULT, True since the H200 run of 2026-12-02 "
                         "07:49): CUDA launches (runtime/cuda_driver: the ops' packed ones and CudaFunction.launch) "
                         "call cuda-bindings' typed cuLaunchKernel (cuda.bindings._v2.driver.launch_kernel: int "
                         "arguments, raises on an error; a refusal falls to the classic call) where that module "
                         "exists (cuda-bindings 13.5.0 has it, 13.3.1 not); '0': cuda.bindings.driver.cuLaunchKernel "
                         "(bench/launch_overhead.py --paths both times both)."),
    "compiled_launch": Knob("TILEWRIGHT_COMPILED_LAUNCH", str, "",
                            "'1': CUDA launches go through the compiled launcher (runtime/fast_launch.c, built on "
                            "first use with the C compiler (CC, else cc/gcc/clang) against this Python's headers and "
                            "cached under TILEWRIGHT_CACHE_DIR/launcher; the pointer writes and cuLaunchKernel in one "
                            "C call); where it cannot be built or loaded, silently the cuda-bindings launch "
                            "(TILEWRIGHT_TYPED_LAUNCH), as `tilewright doctor` and cuda_driver.launch_path() say. "
                            "'0': never (the cuda-bindings launch). Unset: runtime/compiled_launch."
                            "COMPILED_LAUNCH_DEFAULT, True since the H200 run of 2026-12-02 11:30."),
}


def get(name: str):
    return KNOBS[name].get()


def configure_logging() -> None:
    """Apply ``TILEWRIGHT_LOG``: a level and a stderr handler for the ``tilewright`` logger."""
    import logging

    level = str(get("log")).strip().upper()
    if not level:
        return
    logger = logging.getLogger("tilewright")
    logger.setLevel(getattr(logging, level, logging.INFO))
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("[%(name)s] %(levelname)s %(message)s"))
        logger.addHandler(handler)


def markdown() -> str:
    """The table of docs/configuration.md (defaults under the home folder written with ``~``, so the
    page does not depend on who generated it)."""
    import os

    home = os.path.expanduser("~")
    rows = ["| variable | type | default | meaning |", "|---|---|---|---|"]
    for k in KNOBS.values():
        default = repr(k.default).replace(home + os.sep, "~" + os.sep) if home != "~" else repr(k.default)
        rows.append(f"| `{k.env}` | {k.kind.__name__} | `{default}` | {k.help} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(markdown())
