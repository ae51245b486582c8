"""Warp shuffles (``warp_shfl_<kind>(value, lane, width)`` calls, see language/warp.py) and the
``warp_size()`` call, evaluated over the lanes of a warp.

``source_threads`` is shared by the tile interpreter (warps of 32) and the emulator (the target's
warp size): the thread each thread reads, with CUDA's segment rules.
"""

from __future__ import annotations

import numpy as np

SHUFFLES = {"warp_shfl_xor", "warp_shfl_down", "warp_shfl_up", "warp_shfl_idx"}
WARP_CALLS = SHUFFLES | {"warp_size"}
INTERPRETER_WARP = 32


def source_threads(kind: str, tid, arg, width: int, warp: int):
    """Thread index each of ``tid`` reads (its own where the source leaves its segment).
    ``kind`` is the call name; ``width`` 0 is the whole warp."""
    w = warp if width <= 0 or width > warp else width
    tid = np.asarray(tid, np.int64)
    arg = np.asarray(arg, np.int64)
    lane = tid % warp
    seg = lane - lane % w
    if kind == "warp_shfl_xor":
        src = lane ^ arg
        src = np.where((src >= seg + w) | (src >= warp), lane, src)
    elif kind == "warp_shfl_down":
        src = np.where(lane - seg + arg >= w, lane, lane + arg)
    elif kind == "warp_shfl_up":
        src = np.where(lane - seg - arg < 0, lane, lane - arg)
    else:
        src = seg + arg % w
    return tid - lane + src
