"""Target descriptions: one frozen record of facts per GPU architecture.

Everything a pass or printer needs to know about a GPU lives here (wave size, shared memory,
register file, matrix instructions, async-copy kinds), so that no other module hard-codes a
vendor constant.  ``Target.parse`` turns the user's ``target=`` argument into a record;
``Target.current()`` detects the local GPU (see ``detect.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from ..errors import TargetError
from .matrix import MatrixInstr


@dataclass(frozen=True)
class Target:
    """Facts about one compile target.

    ``kind`` is ``"cuda"``, ``"hip"`` or ``"interpret"``; ``arch`` is e.g. ``"sm_90a"`` or ``"gfx942"``.
    """

    kind: str
    arch: str
    vendor: str  # "nvidia", "amd" or "cpu"
    warp_size: int = 32
    max_threads_per_block: int = 1024
    max_shared_bytes: int = 48 * 1024  # per block, dynamic shared memory / LDS included
    registers_per_thread: int = 255  # architectural VGPR/register limit per thread
    register_file_per_sm: int = 65536  # 32-bit registers per SM / CU
    num_simds: int = 4  # schedulers per SM / SIMDs per CU
    matrix_instrs: tuple[MatrixInstr, ...] = field(default=(), compare=False)
    async_copy: tuple[str, ...] = ()  # e.g. ("cp.async",) or ("cp.async", "tma")
    features: tuple[str, ...] = ()  # free-form flags: "wgmma", "mfma", "wmma", "fp8", ...
    options: tuple[tuple[str, str], ...] = ()  # extra user options from the target string

    # ------------------------------------------------------------------ queries
    @property
    def is_cuda(self) -> bool:
        return self.kind == "cuda"

    @property
    def is_hip(self) -> bool:
        return self.kind == "hip"

    @property
    def is_interpret(self) -> bool:
        return self.kind == "interpret"

    def has(self, feature: str) -> bool:
        return feature in self.features

    def matrix_instr_for(self, a_dtype: str, b_dtype: str, acc_dtype: str) -> list[MatrixInstr]:
        """Warp-level matrix instructions (operands in registers: mma.sync, MFMA, WMMA) taking these
        operand types, preferred first.  Warpgroup instructions: ``wgmma_instrs``."""
        return [
            mi
            for mi in self.matrix_instrs
            if mi.a_dtype == a_dtype and mi.b_dtype == b_dtype and mi.acc_dtype == acc_dtype
        ]

    def wgmma_instrs(self, a_dtype: str, b_dtype: str, acc_dtype: str) -> tuple[MatrixInstr, ...]:
        """The wgmma N-family for these operand types (largest N first), on targets with wgmma."""
        from .matrix import wgmma_instrs

        if not self.has("wgmma") or a_dtype != b_dtype:
            return ()
        return tuple(mi for mi in wgmma_instrs(a_dtype) if mi.acc_dtype == acc_dtype)

    def key(self) -> str:
        """A stable string for cache keys."""
        opts = ",".join(f"{k}={v}" for k, v in self.options)
        return f"{self.kind}:{self.arch}:{opts}"

    def __str__(self) -> str:
        if self.kind == "interpret":
            return "interpret"
        return f"{self.kind} -arch={self.arch}"

    def with_options(self, **opts: str) -> Target:
        merged = dict(self.options)
        merged.update({k: str(v) for k, v in opts.items()})
        return replace(self, options=tuple(sorted(merged.items())))

    # ------------------------------------------------------------------ construction
    @staticmethod
    def parse(spec) -> Target:
        """Parse ``"auto"``, ``"cuda"``, ``"cuda -arch=sm_90a"``, ``"hip -arch=gfx942"``, ``"rocm"``,
        ``"interpret"``, a dict ``{"kind": "hip", "arch": "gfx942"}`` or a ``Target``."""
        if isinstance(spec, Target):
            return spec
        if spec is None:
            spec = "auto"
        if isinstance(spec, dict):
            d = dict(spec)
            kind = d.pop("kind", None) or d.pop("target", None)
            arch = d.pop("arch", None) or d.pop("mcpu", None)
            if kind is None:
                raise TargetError(f"target dict {spec!r} needs a 'kind' key ('cuda', 'hip' or 'interpret')")
            return _build(str(kind), arch, {k: str(v) for k, v in d.items()}, spec)
        if not isinstance(spec, str):
            raise TargetError(f"target must be a string, dict or Target, got {type(spec).__name__}")
        words = spec.strip().split()
        if not words:
            raise TargetError("target string is empty; use 'auto', 'cuda', 'hip' or 'interpret'")
        kind, arch, opts = words[0], None, {}
        for w in words[1:]:
            m = re.fullmatch(r"-{1,2}(arch|mcpu|march)=(\S+)", w)
            if m:
                arch = m.group(2)
                continue
            m = re.fullmatch(r"-{1,2}([A-Za-z_][\w-]*)(?:=(\S+))?", w)
            if not m:
                raise TargetError(f"cannot read target option {w!r} in {spec!r}; write options as -name=value")
            opts[m.group(1)] = m.group(2) or "1"
        return _build(kind, arch, opts, spec)

    @staticmethod
    def current() -> Target:
        """The target of the local GPU, or the CPU interpreter when there is none."""
        from .detect import detect_target

        return detect_target()


def _build(kind: str, arch, opts: dict, spec) -> Target:
    from . import amd, nvidia

    kind = kind.lower()
    if kind == "auto":
        t = Target.current()
        return t.with_options(**opts) if opts else t
    if kind in ("interpret", "cpu", "interpreter"):
        return Target(kind="interpret", arch="cpu", vendor="cpu", warp_size=32)
    if kind in ("cuda", "nvidia", "sm"):
        if arch is None:
            from .detect import detect_cuda_arch

            arch = detect_cuda_arch() or "sm_90a"
        t = nvidia.nvidia_target(arch)
    elif kind in ("hip", "rocm", "amd"):
        if arch is None:
            from .detect import detect_amd_arch

            arch = detect_amd_arch()
            if arch is None:
                raise TargetError(
                    f"target {spec!r} names no AMD architecture and none was detected on this machine; "
                    "write e.g. 'hip -arch=gfx942' (MI300), 'hip -arch=gfx90a' (MI200) or 'hip -arch=gfx1100'"
                )
        t = amd.amd_target(arch)
    else:
        raise TargetError(f"unknown target kind {kind!r} in {spec!r}; use 'auto', 'cuda', 'hip'/'rocm' or 'interpret'")
    return t.with_options(**opts) if opts else t
