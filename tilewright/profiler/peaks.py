"""The device roof: peak arithmetic rate (dense, no sparsity) per operand type and peak DRAM
bandwidth of the GPUs tilewright targets, from the vendors' data sheets.

Sources (the figures are the "dense" ones; data sheets often headline the 2:4-sparsity figure,
twice as large):

* H200 SXM (sm_90): NVIDIA H200 Tensor Core GPU data sheet (nvidia.com/en-us/data-center/h200):
  FP16/BF16 tensor 1,979 TFLOPS and FP8 3,958 TFLOPS *with sparsity*, TF32 989, FP32 67; HBM3e
  4.8 TB/s.
* H100 SXM5 (sm_90): NVIDIA H100 Tensor Core GPU data sheet (nvidia.com/en-us/data-center/h100):
  same compute as the H200 (both GH100 at the same clocks); HBM3 3.35 TB/s.  (H100 PCIe: 756 dense
  FP16 TFLOPS, 2.0 TB/s; it reports the same architecture, so it is matched by name.)
* A100 SXM4 80 GB (sm_80): NVIDIA A100 data sheet (nvidia.com/en-us/data-center/a100): FP16/BF16
  tensor 312 TFLOPS dense, TF32 156, FP32 19.5; HBM2e 2,039 GB/s (the 40 GB part: 1,555 GB/s).
* MI300X (gfx942): AMD Instinct MI300X data sheet (amd.com/en/products/accelerators/instinct/
  mi300/mi300x.html): FP16/BF16 matrix 1,307.4 TFLOPS dense, FP8 2,614.9, FP32 vector 163.4;
  HBM3 5.3 TB/s.
* MI250X (gfx90a): AMD Instinct MI250X data sheet (amd.com/en/products/accelerators/instinct/
  mi200/mi250x.html): FP16/BF16 matrix 383 TFLOPS, FP32 vector 47.9; HBM2e 3.2768 TB/s.  The
  package is two GCDs and HIP shows each GCD as its own device, so the per-device roof is half.
* Radeon RX 7900 XTX (gfx1100): AMD product specifications (amd.com/en/products/graphics/desktops/
  radeon/7000-series/amd-radeon-rx-7900xtx.html): peak half precision 122.8 TFLOPS, single
  precision 61.4 TFLOPS; 960 GB/s GDDR6.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceRoof:
    name: str
    arch: str
    tflops: dict  # operand type class ("fp16", "fp8", "fp32") -> dense peak TFLOP/s
    bandwidth_gbs: float  # peak DRAM bandwidth, GB/s (10^9 bytes per second)

    def peak_tflops(self, dtype: str) -> float:
        return self.tflops[dtype_class(dtype) if dtype_class(dtype) in self.tflops else "fp16"]

    def ridge(self, dtype: str) -> float:
        """Arithmetic intensity (FLOP per byte) where the memory roof meets the compute roof."""
        return self.peak_tflops(dtype) * 1e12 / (self.bandwidth_gbs * 1e9)


_GH100 = {"fp16": 989.4, "fp8": 1978.9, "fp32": 66.9}
ROOFS: dict[str, DeviceRoof] = {
    "H200": DeviceRoof("NVIDIA H200 SXM", "sm_90", _GH100, 4800.0),
    "H100": DeviceRoof("NVIDIA H100 SXM5", "sm_90", _GH100, 3350.0),
    "H100 PCIe": DeviceRoof("NVIDIA H100 PCIe", "sm_90", {"fp16": 756.0, "fp8": 1513.0, "fp32": 51.2}, 2000.0),
    "A100": DeviceRoof("NVIDIA A100 SXM4 80GB", "sm_80", {"fp16": 312.0, "fp32": 19.5}, 2039.0),
    "MI300X": DeviceRoof("AMD Instinct MI300X", "gfx942", {"fp16": 1307.4, "fp8": 2614.9, "fp32": 163.4}, 5300.0),
    "MI250X": DeviceRoof("AMD Instinct MI250X (one GCD)", "gfx90a", {"fp16": 191.5, "fp32": 23.95}, 1638.4),
    "RX 7900 XTX": DeviceRoof("AMD Radeon RX 7900 XTX", "gfx1100", {"fp16": 122.8, "fp32": 61.4}, 960.0),
}
# the part assumed when only the architecture is known
_BY_ARCH = {"sm_90": "H100", "sm_90a": "H100", "sm_80": "A100", "gfx942": "MI300X", "gfx90a": "MI250X",
            "gfx1100": "RX 7900 XTX"}


def dtype_class(dtype: str) -> str:
    d = str(dtype)
    if d.startswith("float8"):
        return "fp8"
    if d in ("float32", "float64"):
        return "fp32"
    return "fp16"


def roof_for(device_name: str | None = None, arch: str | None = None) -> DeviceRoof | None:
    """The roof of a device by its name (``"NVIDIA H200"``, ``"AMD Instinct MI300X"``, or a key of
    ``ROOFS``), else by architecture; None when neither is known."""
    if device_name:
        name = device_name.upper()
        for key in sorted(ROOFS, key=len, reverse=True):  # "H100 PCIe" before "H100"
            words = key.upper().split()
            if all(w in name for w in words):
                return ROOFS[key]
    if arch:
        key = _BY_ARCH.get(arch.split(":")[0])
        return ROOFS[key] if key else None
    return None
