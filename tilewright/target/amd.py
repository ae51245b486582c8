"""AMD architectures: CDNA2 (gfx90a, MI200), CDNA3 (gfx942, MI300), CDNA4 (gfx950, MI350), RDNA3
(gfx1100/1101/1102, RX 7000) and RDNA4 (gfx1200/1201, RX 9000).

``amd_target(arch)`` returns the frozen ``Target`` record for one of them.  Sources for the numbers
(all in llvm/llvm-project unless stated otherwise):

* LDS per workgroup: ``llvm/lib/Target/AMDGPU/AMDGPU.td``: ``FeatureISAVersion9_0_Common`` and
  ``FeatureISAVersion9_4_2`` carry ``FeatureAddressableLocalMemorySize65536``,
  ``FeatureISAVersion9_5_Common`` (gfx950) ``...163840``, ``FeatureGFX11`` and
  ``FeatureISAVersion12`` ``...65536``.  (An RDNA WGP has 128 KiB, but one workgroup addresses 64 KiB.)
* VGPRs: ``llvm/lib/Target/AMDGPU/Utils/AMDGPUBaseInfo.cpp``: ``getTotalNumVGPRs`` is 512 per
  lane on gfx90a+ (arch VGPRs and AGPRs share one file; ``getAddressableNumVGPRs`` is 512 there), and
  on gfx10+ wave32 1024, or 1536 with ``Feature1_5xVGPRs``; ``getAddressableNumArchVGPRs`` is 256.
  ``AMDGPU.td`` gives ``Feature1_5xVGPRs`` to gfx1100, gfx1101 and all of gfx12, not to gfx1102.
* Global->LDS loads: ``FeatureMemToLDSLoad`` is in ``FeatureGFX9`` (and GFX10) but not in
  ``FeatureGFX11``/``FeatureGFX12``; ``GCNSubtarget.h``: ``hasLDSLoadB96_B128() { return
  hasGFX950Insts(); }``, so gfx90a/gfx942 move 1, 2 or 4 bytes per lane and gfx950 also 12 or 16.
* Wave size: CDNA runs wave64 only; RDNA runs both and tilewright defaults to wave32 (the WMMA
  records are the ``_w32`` builtins).
* SIMDs: 4 SIMD16 (wave64) per CDNA CU; 2 SIMD32 per RDNA CU (4 per WGP).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import TargetError
from . import matrix_amd
from .base import Target

_KIB = 1024


@dataclass(frozen=True)
class _Facts:
    family: str  # "cdna2", "cdna3", "cdna4", "rdna3", "rdna4"
    product: str
    warp_size: int
    lds_bytes: int
    vgprs_per_lane: int  # addressable by one thread
    vgpr_file_per_simd: int  # getTotalNumVGPRs: per-lane VGPR slots of one SIMD, shared by its waves
    num_simds: int  # per CU
    lds_dma_bytes: tuple[int, ...]  # widths (bytes per lane) of global_load_lds; () when absent
    features: tuple[str, ...]
    min_llvm: str


_CDNA_COMMON = ("mfma", "bf16", "packed_fp32", "fp64_mfma", "unified_agpr")
_RDNA_COMMON = ("wmma", "bf16", "wave32", "wave64_capable")


def _cdna(family, product, lds_bytes, lds_dma_bytes, features, min_llvm) -> _Facts:
    return _Facts(
        family,
        product,
        warp_size=64,
        lds_bytes=lds_bytes,
        vgprs_per_lane=512,
        vgpr_file_per_simd=512,
        num_simds=4,
        lds_dma_bytes=lds_dma_bytes,
        features=_CDNA_COMMON + features,
        min_llvm=min_llvm,
    )


def _rdna(family, product, vgpr_file_per_simd, features, min_llvm) -> _Facts:
    return _Facts(
        family,
        product,
        warp_size=32,
        lds_bytes=64 * _KIB,
        vgprs_per_lane=256,
        vgpr_file_per_simd=vgpr_file_per_simd,
        num_simds=2,
        lds_dma_bytes=(),
        features=_RDNA_COMMON + features,
        min_llvm=min_llvm,
    )


_GFX11 = ("wmma_ab_replicated",)
_GFX12 = ("fp8", "fp8_ocp")

_ARCHS: dict[str, _Facts] = {
    "gfx90a": _cdna("cdna2", "Instinct MI210/MI250/MI250X", 64 * _KIB, (1, 2, 4), ("global_load_lds",), "13"),
    # xf32 MFMAs exist only on gfx942 (AMDGPU.td: FeatureXF32Insts in FeatureISAVersion9_4_2 only)
    "gfx942": _cdna(
        "cdna3",
        "Instinct MI300A/MI300X/MI325X",
        64 * _KIB,
        (1, 2, 4),
        ("global_load_lds", "fp8", "fp8_fnuz", "xf32"),
        "17",
    ),
    # ds_read_tr: __builtin_amdgcn_ds_read_tr16_b64_* are "gfx950-insts" in BuiltinsAMDGPU.def
    "gfx950": _cdna(
        "cdna4",
        "Instinct MI350X/MI355X",
        160 * _KIB,
        (1, 2, 4, 12, 16),
        ("global_load_lds", "global_load_lds_b128", "fp8", "fp8_ocp", "mfma_double_rate", "ds_read_tr"),
        "20",
    ),
    "gfx1100": _rdna("rdna3", "Radeon RX 7900 XTX/XT, PRO W7900", 1536, _GFX11, "16"),
    "gfx1101": _rdna("rdna3", "Radeon RX 7800 XT/7700 XT", 1536, _GFX11, "16"),
    "gfx1102": _rdna("rdna3", "Radeon RX 7600/7600 XT", 1024, _GFX11, "16"),  # no Feature1_5xVGPRs
    "gfx1200": _rdna("rdna4", "Radeon RX 9060/9060 XT", 1536, _GFX12, "18"),
    "gfx1201": _rdna("rdna4", "Radeon RX 9070/9070 XT", 1536, _GFX12, "18"),
}

_MATRIX = {
    "cdna2": matrix_amd.cdna2_matrix_instrs,
    "cdna3": matrix_amd.cdna3_matrix_instrs,
    "cdna4": matrix_amd.cdna4_matrix_instrs,
    "rdna3": matrix_amd.rdna3_matrix_instrs,
    "rdna4": matrix_amd.rdna4_matrix_instrs,
}

# Names people write that are not (or no longer) separate targets, with what to write instead.
_HINTS = {
    "gfx940": "gfx940 and gfx941 were pre-production MI300 parts and are gone from LLVM; use gfx942",
    "gfx941": "gfx940 and gfx941 were pre-production MI300 parts and are gone from LLVM; use gfx942",
    "gfx908": "gfx908 (MI100, CDNA1) is not supported: its bf16 MFMAs lack the '_1k' forms; use gfx90a or newer",
    "gfx1103": "gfx1103 (Phoenix APU) is not in tilewright's list; gfx1102 is the closest RDNA3 record",
}

SUPPORTED_AMD_ARCHS: tuple[str, ...] = tuple(_ARCHS)


def _split_target_id(arch: str) -> tuple[str, str]:
    """``"gfx90a:sramecc+:xnack-"`` -> ``("gfx90a", "sramecc+:xnack-")`` (the clang target-ID form)."""
    name, _, feats = str(arch).strip().partition(":")
    return name.lower(), feats


def amd_target(arch: str) -> Target:
    """The ``Target`` for an AMD ``gfx`` architecture; raises ``TargetError`` for unknown ones."""
    name, target_features = _split_target_id(arch)
    facts = _ARCHS.get(name)
    if facts is None:
        supported = ", ".join(f"{a} ({f.product})" for a, f in _ARCHS.items())
        hint = _HINTS.get(name)
        msg = f"unknown AMD architecture {arch!r}; supported: {supported}"
        raise TargetError(f"{msg}. {hint}" if hint else msg)
    options = [("min_llvm", facts.min_llvm)]
    if target_features:
        # keep xnack/sramecc settings so the printer can pass --offload-arch=gfx90a:xnack- through
        options.append(("target_features", target_features))
    return Target(
        kind="hip",
        arch=name,
        vendor="amd",
        warp_size=facts.warp_size,
        max_threads_per_block=1024,
        max_shared_bytes=facts.lds_bytes,
        registers_per_thread=facts.vgprs_per_lane,
        # Unit: 32-bit registers per CU = per-lane VGPR slots of one SIMD x wave size x SIMDs per CU
        # (gfx90a/942/950: 512 x 64 x 4 = 131072 = 512 KiB; gfx1100: 1536 x 32 x 2 = 98304 = 384 KiB).
        register_file_per_sm=facts.vgpr_file_per_simd * facts.warp_size * facts.num_simds,
        num_simds=facts.num_simds,
        matrix_instrs=_MATRIX[facts.family](),
        async_copy=("global_load_lds",) if facts.lds_dma_bytes else (),
        features=(facts.family,) + facts.features,
        options=tuple(sorted(options)),
    )


def lds_dma_widths(target: Target) -> tuple[int, ...]:
    """Bytes per lane one ``global_load_lds`` may move on this target; ``()`` where there is none."""
    name, _ = _split_target_id(target.arch)
    facts = _ARCHS.get(name)
    return facts.lds_dma_bytes if facts is not None else ()


def lds_bank_bytes(target: Target) -> int:
    """Bytes the LDS serves per clock without a bank conflict: 32 banks x 4 bytes on CDNA2/CDNA3
    (ROCm CK-Tile documentation, "Understanding AMD GPU LDS and Bank Conflicts"), 64 banks x 4
    bytes on CDNA4 (160 KiB LDS) and on RDNA in WGP mode (RDNA3 ISA guide, LDS chapter).  Shared
    operand layouts size their XOR swizzle to it."""
    fam = next((f for f in target.features if f in ("cdna2", "cdna3", "cdna4", "rdna3", "rdna4")), "cdna3")
    return 128 if fam in ("cdna2", "cdna3") else 256


def lds_prefers_padding(target: Target) -> bool:
    """Whether matrix operand tiles in LDS should avoid bank conflicts by padding rather than by an
    XOR swizzle, space permitting.  RDNA: a lane addresses 256 VGPRs (wave32), and the per-access
    XOR address math of swizzled tiles measurably pushed attention kernels into spills, while its
    read phases are consecutive lanes, which padding serves conflict-free.  CDNA: 512 registers per
    lane, and ``ds_read_b128`` is served in non-contiguous lane groups that only the XOR swizzle
    keeps conflict-free."""
    return "wmma" in target.features


def min_llvm_version(target: Target) -> int:
    """Oldest LLVM major version that knows this architecture (and the builtins we emit for it)."""
    return int(dict(target.options).get("min_llvm", "0"))
