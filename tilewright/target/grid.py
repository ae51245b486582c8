"""The limits on a launch grid, one rule for every backend.

CUDA's limits on gridDim (x, y, z) are applied everywhere — by the frontend to a static grid, by
every launcher (GPU, emulator, interpreter) to a grid computed from dynamic sizes — so that a
program means the same on every target and backend.
"""

from __future__ import annotations

from ..errors import ArgumentError

GRID_LIMITS = (2**31 - 1, 65535, 65535)
GRID_HINT = ("put the largest extent first (x allows up to 2**31-1 blocks), or let each block handle several "
             "tiles with a T.serial loop")


def grid_limit_error(axis: int, extent: int) -> str | None:
    """The complaint about ``extent`` blocks along grid axis ``axis`` (0, 1, 2), or None if it fits."""
    if extent > GRID_LIMITS[axis]:
        return (f"grid dimension {'xyz'[axis]} of T.Kernel is {extent} blocks; GPUs allow at most "
                f"{GRID_LIMITS[axis]} along {'xyz'[axis]}")
    return None


def check_launch_grid(grid, kernel_name: str, static: bool = False) -> None:
    """At launch, for a grid computed from dynamic sizes: ArgumentError when it is over the limits,
    or when a dimension is zero (as TileLang: a launch of no block is refused, not skipped, so that
    an empty size reaching a grid is noticed).  ``static``: the grid is constant (``T.Kernel(0)``
    compiles, as in TileLang, and every call of it is refused here)."""
    for axis, n in enumerate(grid):
        if int(n) <= 0 and static:
            raise ArgumentError(f"{kernel_name}: grid dimension {'xyz'[axis]} of T.Kernel is {int(n)}: the kernel "
                                "would run no block, so every call is refused; give every grid dimension at least "
                                "1 block")
        if int(n) <= 0:
            raise ArgumentError(f"{kernel_name}: grid dimension {'xyz'[axis]} of T.Kernel is {int(n)} with these "
                                "argument sizes: the kernel would run no block; skip the call for empty inputs")
        msg = grid_limit_error(axis, int(n))
        if msg:
            raise ArgumentError(f"{kernel_name}: {msg} with these argument sizes; {GRID_HINT}")
