"""Names TileLang programs use on the package (``tilelang.PassConfigKey``, ``TensorSupplyType``,
``disable_cache``) so that they run unchanged but for their imports."""

from __future__ import annotations

import enum
import os


class PassConfigKey(str, enum.Enum):
    """TileLang pass-config keys.  tilewright accepts them in ``pass_configs`` (they become part of the
    cache key) but its own pipeline reads only the ``tw.*`` keys documented in docs/language.md."""

    TL_DISABLE_TMA_LOWER = "tl.disable_tma_lower"
    TL_DISABLE_WARP_SPECIALIZED = "tl.disable_warp_specialized"
    TL_DISABLE_SAFE_MEMORY_ACCESS = "tl.disable_safe_memory_legalize"
    TL_ENABLE_FAST_MATH = "tl.enable_fast_math"
    TL_DISABLE_DYNAMIC_TAIL_SPLIT = "tl.disable_dynamic_tail_split"
    TL_DYNAMIC_ALIGNMENT = "tl.dynamic_alignment"
    TL_CONFIG_INDEX_BITWIDTH = "tl.config_index_bitwidth"
    TW_DISABLE_GEMM_PREFETCH = "tw.disable_gemm_prefetch"
    TW_DISABLE_TMA = "tw.disable_tma"
    TW_ENABLE_WGMMA = "tw.enable_wgmma"
    TW_MIN_BLOCKS_PER_SM = "tw.min_blocks_per_sm"


class TensorSupplyType(enum.Enum):
    """How ``get_profiler`` makes inputs; tilewright always uses fresh random normal values for
    floats (never zeros) and small random integers."""

    Integer = 1
    Uniform = 2
    Normal = 3
    Randn = 4
    Zero = 5
    One = 6
    Auto = 7


def disable_cache() -> None:
    """Compile every kernel afresh from now on (also ``TILEWRIGHT_DISABLE_CACHE=1``)."""
    os.environ["TILEWRIGHT_DISABLE_CACHE"] = "1"


def enable_cache() -> None:
    os.environ.pop("TILEWRIGHT_DISABLE_CACHE", None)
