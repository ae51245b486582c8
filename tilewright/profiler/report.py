"""The per-kernel report: what the compiled kernel uses (registers / VGPRs, shared memory / LDS,
spills), its theoretical occupancy on the target, and -- when it was timed -- the achieved TFLOP/s
and GB/s against the device roof (``peaks.py``), with a roofline PNG and a trace export.

``Profiler.report()`` builds one from a timed run; ``resource_lines()`` is the static part, which
``tilewright compile`` prints for a kernel it cannot run (another architecture).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .occupancy import Occupancy, occupancy
from .peaks import DeviceRoof, dtype_class


def resource_lines(target, num_threads: int, resources: dict) -> list[str]:
    """Registers, shared memory, spills and occupancy as ``name: value`` lines."""
    res = resources or {}
    if "registers" not in res and "vgpr" not in res:  # no code object was built (emulator without toolchain)
        lines = ["registers: not known (no code object: the target's toolchain is not available here)",
                 f"shared memory: {res.get('shared_bytes', 0)} B per block"]
        occ = occupancy(target, num_threads, res)
        if occ is not None:
            lines.append(f"occupancy: {occupancy_text(occ)} (registers not counted)")
        return lines
    if target.vendor == "amd":
        regs = (f"{res.get('vgpr', res.get('registers', '?'))} VGPRs per lane (AGPRs {res.get('agpr', 0)} of them), "
                f"{res.get('sgpr', '?')} SGPRs")
        smem = f"{res.get('shared_bytes', 0)} B LDS per workgroup"
        spills = (f"{res.get('vgpr_spills', 0)} VGPR + {res.get('sgpr_spills', 0)} SGPR spills, "
                  f"{res.get('scratch_bytes', res.get('local_bytes', 0))} B scratch per lane")
    else:
        regs = f"{res.get('registers', '?')} per thread"
        smem = f"{res.get('shared_bytes', 0)} B per block"
        spills = (f"{res.get('spill_stores', 0)} B stores + {res.get('spill_loads', 0)} B loads, "
                  f"{res.get('local_bytes', 0)} B local memory per thread")
    lines = [f"registers: {regs}", f"shared memory: {smem}", f"spills: {spills}"]
    occ = occupancy(target, num_threads, res)
    if occ is not None:
        lines.append(f"occupancy: {occupancy_text(occ)}")
    return lines


def occupancy_text(occ: Occupancy) -> str:
    if occ.blocks_per_sm == 0:
        return occ.limited_by
    return (f"{occ.blocks_per_sm} block(s) per SM/CU, {occ.warps_per_sm} of {occ.max_warps_per_sm} warps "
            f"({occ.fraction:.0%}), limited by {occ.limited_by}")


@dataclass
class KernelReport:
    kernel: str
    target: object  # target.base.Target
    backend: str  # "device", "interpret" or "emulator"
    device: str  # what it ran on, in words
    num_threads: int
    resources: dict
    timing: object = None  # timing.Timing, None when not run
    flops: float | None = None
    bytes: float | None = None
    bytes_source: str = "given"  # or "compulsory": every argument tensor read or written once
    dtype: str = "float16"
    roof: DeviceRoof | None = None
    extra: dict = field(default_factory=dict)

    # ------------------------------------------------------------------ figures
    @property
    def occupancy(self) -> Occupancy | None:
        if self.backend == "interpret":
            return None
        return occupancy(self.target, self.num_threads, self.resources)

    @property
    def ms(self) -> float | None:
        return self.timing.stat("median") if self.timing is not None else None

    @property
    def tflops(self) -> float | None:
        return self.flops / (self.ms * 1e-3) / 1e12 if self.flops and self.ms else None

    @property
    def gbs(self) -> float | None:
        return self.bytes / (self.ms * 1e-3) / 1e9 if self.bytes and self.ms else None

    @property
    def intensity(self) -> float | None:
        return self.flops / self.bytes if self.flops and self.bytes else None

    @property
    def measured_on_gpu(self) -> bool:
        return self.timing is not None and self.timing.method != "cpu"

    def bound(self) -> str | None:
        """"memory" or "compute": which roof is lower at this kernel's arithmetic intensity."""
        if self.roof is None or self.intensity is None:
            return None
        return "memory" if self.intensity < self.roof.ridge(self.dtype) else "compute"

    # ------------------------------------------------------------------ output
    def lines(self) -> list[str]:
        out = [f"kernel {self.kernel}: {self.target}, {self.num_threads} threads, {self.backend} backend "
               f"on {self.device}"]
        if self.backend == "interpret":
            out.append("resources: none measured (the tile interpreter runs tiles with NumPy, not compiled code)")
        else:
            out += resource_lines(self.target, self.num_threads, self.resources)
        t = self.timing
        if t is not None:
            how = {"event": "GPU events", "cudagraph": "CUDA graph replay", "cpu": "CPU clock"}[t.method]
            out.append(f"time: {t.stat('median'):.4f} ms median (mean {t.stat('mean'):.4f}, min {t.stat('min'):.4f}, "
                       f"max {t.stat('max'):.4f}; {len(t.samples)} samples, {how}"
                       f"{', L2 flushed' if t.l2_flushed else ''})")
        if self.flops or self.bytes:
            src = "given" if self.bytes_source == "given" else "every argument tensor once"
            parts = [f"{self.flops:.4g} FLOP" if self.flops else "FLOP not given",
                     f"{self.bytes:.4g} B ({src})" if self.bytes else "bytes not given"]
            if self.intensity:
                parts.append(f"{self.intensity:.3g} FLOP/B")
            out.append("work: " + ", ".join(parts))
        if t is not None:
            out.append("achieved: " + self._achieved_text())
        return out

    def _achieved_text(self) -> str:
        roof = self.roof if self.measured_on_gpu else None
        parts = []
        if self.tflops is not None:
            txt = f"{self.tflops:.4g} TFLOP/s"
            if roof:
                peak = roof.peak_tflops(self.dtype)
                txt += f" ({self.tflops / peak:.1%} of the {peak:g} {dtype_class(self.dtype)} peak)"
            parts.append(txt)
        if self.gbs is not None:
            txt = f"{self.gbs:.4g} GB/s"
            if roof:
                txt += f" ({self.gbs / roof.bandwidth_gbs:.1%} of {roof.bandwidth_gbs:g} GB/s)"
            parts.append(txt)
        if roof is not None and self.bound():
            parts.append(f"{self.bound()}-bound on {roof.name} (ridge at {roof.ridge(self.dtype):.3g} FLOP/B)")
        elif roof is None:
            parts.append("no device roof: " + ("timed with the CPU clock" if self.timing.method == "cpu"
                                               else "device not in the peak table (profiler/peaks.py)"))
        return "; ".join(parts) if parts else "give flops= and/or bytes= for rates"

    def __str__(self) -> str:
        return "\n  ".join(self.lines())

    def to_dict(self) -> dict:
        occ = self.occupancy
        t = self.timing
        return {
            "kernel": self.kernel, "target": str(self.target), "backend": self.backend, "device": self.device,
            "threads": self.num_threads, "resources": dict(self.resources or {}),
            "occupancy": None if occ is None else {"blocks_per_sm": occ.blocks_per_sm, "warps_per_sm": occ.warps_per_sm,
                                                   "max_warps_per_sm": occ.max_warps_per_sm,
                                                   "fraction": occ.fraction, "limited_by": occ.limited_by,
                                                   "limits": dict(occ.limits)},
            "timing": None if t is None else {"median_ms": t.stat("median"), "mean_ms": t.stat("mean"),
                                              "min_ms": t.stat("min"), "max_ms": t.stat("max"),
                                              "samples": len(t.samples), "method": t.method,
                                              "l2_flushed": t.l2_flushed},
            "flops": self.flops, "bytes": self.bytes, "bytes_source": self.bytes_source, "dtype": self.dtype,
            "tflops": self.tflops, "gbs": self.gbs, "intensity": self.intensity,
            "roof": None if self.roof is None or not self.measured_on_gpu else
            {"name": self.roof.name, "peak_tflops": self.roof.peak_tflops(self.dtype),
             "bandwidth_gbs": self.roof.bandwidth_gbs, "bound": self.bound()},
        }

    def plot_roofline(self, path: str) -> str:
        """A roofline PNG with this kernel as a point (needs flops= and bytes=; matplotlib)."""
        from .plots import roofline_png

        if not (self.flops and self.bytes and self.timing is not None):
            raise ValueError("a roofline point needs a timed run and both flops= and bytes= (bytes default to "
                             "every argument tensor once; give flops=)")
        roof = self.roof if self.measured_on_gpu else None
        return roofline_png(path, [(self.kernel, self.intensity, self.tflops)], roof, self.dtype,
                            title=f"{self.kernel} on {self.device}")

    def save_trace(self, path: str) -> str:
        """The timed calls of this report's run as a Chrome/Perfetto trace (JSON)."""
        from .trace import write_trace

        if self.timing is None:
            raise ValueError("the report has no timed run to trace")
        return write_trace(path, [(self.kernel, self.timing, {"target": str(self.target), "device": self.device})])
