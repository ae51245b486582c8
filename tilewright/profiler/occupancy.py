"""Theoretical occupancy of a compiled kernel: how many of its blocks fit on one multiprocessor (SM,
or CU on AMD) at once, and what limits that number (threads/waves, registers, shared memory/LDS,
the per-SM block limit).

The per-architecture limits that ``target.Target`` does not carry are in the tables below, with
where each number comes from:

* NVIDIA: the CUDA C++ Programming Guide, "Compute Capabilities", table "Technical Specifications
  per Compute Capability" (maximum resident blocks and warps per SM, shared memory per SM, the
  1 KiB of shared memory the driver reserves per block) and the CUDA Occupancy Calculator's
  allocation granularities (registers in units of 256 per warp, shared memory in units of 128 B).
* AMD: LLVM ``llvm/lib/Target/AMDGPU/Utils/AMDGPUBaseInfo.cpp``: ``getMaxWavesPerEU`` (8 waves per
  SIMD on gfx90a and later CDNA, 16 on gfx10.3+/gfx11/gfx12), ``getVGPRAllocGranule`` (8 on
  gfx90a+, 24 for wave32 with ``Feature1_5xVGPRs`` (gfx1100/1101, gfx12), 16 otherwise on
  gfx10.3+), ``getMaxWorkGroupsPerCU`` (at most 16 workgroups of more than one wave per CU, 32 in
  WGP mode), ``getWavesPerEUForWorkGroup`` (a workgroup's waves are spread over the SIMDs of the
  CU).  The VGPR file per SIMD and the LDS size are the target record's (see ``target/amd.py``).

RDNA is counted per CU (two SIMD32s and half of a WGP's 128 KiB LDS), the unit the target record
describes; a workgroup in WGP mode sees twice both, so the fraction is the same.  SGPRs are not
modelled (on the CDNA/RDNA parts here they never limit before VGPRs do for our kernels).
"""

from __future__ import annotations

from dataclasses import dataclass

_KIB = 1024

# compute capability -> (max resident blocks per SM, max resident warps per SM, shared memory per SM)
_NVIDIA_SM = {
    80: (32, 64, 164 * _KIB),
    86: (16, 48, 100 * _KIB),
    87: (16, 48, 164 * _KIB),
    89: (24, 48, 100 * _KIB),
    90: (32, 64, 228 * _KIB),
    100: (32, 64, 228 * _KIB),
    120: (32, 48, 100 * _KIB),
}
_NVIDIA_REG_UNIT = 256  # registers are allocated per warp in units of 256
_NVIDIA_SMEM_UNIT = 128
_NVIDIA_SMEM_RESERVED_PER_BLOCK = 1 * _KIB


@dataclass(frozen=True)
class Occupancy:
    blocks_per_sm: int  # resident blocks per SM / CU (0: the kernel cannot launch)
    warps_per_sm: int  # resident warps (waves) per SM / CU
    max_warps_per_sm: int
    limited_by: str  # "threads", "registers", "shared memory", "blocks per SM", or why it cannot run
    limits: dict  # each limiter's own blocks-per-SM figure

    @property
    def fraction(self) -> float:
        """Resident warps over the most the SM can hold (the usual "theoretical occupancy")."""
        return self.warps_per_sm / self.max_warps_per_sm if self.max_warps_per_sm else 0.0


def occupancy(target, num_threads: int, resources: dict) -> Occupancy | None:
    """The theoretical occupancy of a kernel of ``num_threads`` threads per block with ``resources``
    (``registers``: per thread, unified VGPRs on AMD; ``shared_bytes``: static + dynamic per block)
    on ``target``; None for the CPU interpreter, which has no such limits."""
    if target.vendor == "nvidia":
        return _nvidia(target, num_threads, resources)
    if target.vendor == "amd":
        return _amd(target, num_threads, resources)
    return None


def _result(limits: dict, warps_per_block: int, max_warps: int) -> Occupancy:
    name, blocks = min(limits.items(), key=lambda kv: kv[1])
    if blocks <= 0:
        why = {"registers": "registers x threads exceed the register file",
               "shared memory": "shared memory exceeds what one SM has"}.get(name, f"{name} allow no block")
        return Occupancy(0, 0, max_warps, f"cannot run: {why}", limits)
    return Occupancy(blocks, blocks * warps_per_block, max_warps, name, limits)


def _nvidia(target, num_threads: int, res: dict) -> Occupancy:
    cc = int("".join(ch for ch in target.arch.removeprefix("sm_") if ch.isdigit()))
    max_blocks, max_warps, smem_per_sm = _NVIDIA_SM.get(cc, _NVIDIA_SM[80])
    warps = -(-num_threads // target.warp_size)
    regs = int(res.get("registers", 0) or 0)
    smem = int(res.get("shared_bytes", 0) or 0)
    limits = {"blocks per SM": max_blocks, "threads": max_warps // max(warps, 1)}
    if regs:
        per_warp = -(-regs * target.warp_size // _NVIDIA_REG_UNIT) * _NVIDIA_REG_UNIT
        limits["registers"] = target.register_file_per_sm // (per_warp * warps) if regs <= 255 else 0
    if smem:
        per_block = -(-(smem + _NVIDIA_SMEM_RESERVED_PER_BLOCK) // _NVIDIA_SMEM_UNIT) * _NVIDIA_SMEM_UNIT
        limits["shared memory"] = smem_per_sm // per_block if smem <= target.max_shared_bytes else 0
    return _result(limits, warps, max_warps)


def _amd(target, num_threads: int, res: dict) -> Occupancy:
    rdna = target.has("rdna3") or target.has("rdna4")
    waves_per_simd = 16 if rdna else 8
    simds = target.num_simds
    waves = -(-num_threads // target.warp_size)
    waves_per_simd_per_block = -(-waves // simds)  # the block's waves spread over the CU's SIMDs
    limits = {"blocks per SM": 32 if rdna else 16, "threads": waves_per_simd // waves_per_simd_per_block}
    if waves == 1:
        limits["blocks per SM"] = waves_per_simd * simds  # single-wave workgroups use no barrier slot
    vgprs = int(res.get("registers", res.get("vgpr", 0)) or 0)
    if vgprs:
        vgpr_file = target.register_file_per_sm // (target.warp_size * simds)  # per-lane slots of one SIMD
        granule = 24 if rdna and vgpr_file >= 1536 else 16 if rdna else 8
        rounded = -(-vgprs // granule) * granule
        fit = min(vgpr_file // rounded, waves_per_simd) if vgprs <= target.registers_per_thread else 0
        limits["registers"] = fit // waves_per_simd_per_block
    smem = int(res.get("shared_bytes", 0) or 0)
    if smem:
        limits["shared memory"] = target.max_shared_bytes // smem if smem <= target.max_shared_bytes else 0
    return _result(limits, waves, waves_per_simd * simds)
