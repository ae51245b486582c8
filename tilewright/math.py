"""TileLang's ``tilelang.math``: host-side integer helpers used to size tiles."""

from __future__ import annotations

from .compat import cdiv

__all__ = ["cdiv", "next_power_of_2"]


def next_power_of_2(x: int) -> int:
    """The smallest power of two >= ``x`` (1 for ``x <= 1``)."""
    x = int(x)
    return 1 if x <= 1 else 1 << (x - 1).bit_length()
