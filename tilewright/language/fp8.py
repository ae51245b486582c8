"""TileLang's ``tilelang.language.fp8``: the 8-bit float dtype of the current platform.

NVIDIA (and AMD gfx950, which has the OCP formats) use ``float8_e4m3fn`` / ``float8_e5m2``;
other AMD GPUs (gfx942's MFMA) the ``fnuz`` variants.  The platform is the detected target
(``TILEWRIGHT_TARGET`` or the local GPU; the CPU counts as NVIDIA's formats)."""

from __future__ import annotations


def determine_fp8_type(fp8_format: str = "e4m3") -> str:
    from ..target.detect import detect_target

    if fp8_format not in ("e4m3", "e5m2"):
        raise ValueError(f"Unsupported FP8 format: {fp8_format}")
    tgt = detect_target()
    fnuz = tgt.kind == "hip" and not str(tgt.arch).startswith("gfx950")
    name = "float8_e4m3fn" if fp8_format == "e4m3" else "float8_e5m2"
    if fnuz:
        name = "float8_e4m3fnuz" if fp8_format == "e4m3" else "float8_e5m2fnuz"
    from . import dtype

    return dtype(name)


def determine_torch_fp8_type(fp8_format: str = "e4m3"):
    import torch

    name = str(determine_fp8_type(fp8_format))
    dt = getattr(torch, name, None)
    if dt is None:
        raise RuntimeError(f"PyTorch does not expose dtype {name}")
    return dt
