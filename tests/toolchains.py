"""Skip markers for tests that need a toolchain which may be missing on a machine."""

from __future__ import annotations

import pytest


def nvrtc_available() -> bool:
    try:
        from tilewright.toolchain.nvrtc import nvrtc_version

        nvrtc_version()
        return True
    except Exception:  # noqa: BLE001 - any failure means: not usable here
        return False


needs_nvrtc = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC wheel not installed")


def hip_compiler_available() -> bool:
    try:
        from tilewright.toolchain.hip import find_hip_compiler

        find_hip_compiler()
        return True
    except Exception:  # noqa: BLE001
        return False


needs_hip_compiler = pytest.mark.skipif(not hip_compiler_available(), reason="no HIP device compiler (clang-19)")
