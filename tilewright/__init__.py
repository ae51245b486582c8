"""tilewright: a tile-level GPU kernel language and compiler for NVIDIA (CUDA) and AMD (ROCm/HIP)."""

from . import language  # noqa: F401
from .errors import ArgumentError, CompileError, InternalError, TilewrightError, ToolchainError  # noqa: F401

__version__ = "0.1.0"
