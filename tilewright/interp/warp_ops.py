"""Warp shuffles (``warp_shfl_<kind>(value, lane, width)`` calls, see language/warp.py) and the
``warp_size()`` call, evaluated over the lanes of a warp.

``source_threads`` is shared by the tile interpreter (warps of 32) and the emulator (the target's
warp size): the thread each thread reads, with CUDA's segment rules.
"""

from __future__ import annotations

import numpy as np

from ..ir import thread as th

SHUFFLES = {"warp_shfl_xor", "warp_shfl_down", "warp_shfl_up", "warp_shfl_idx"}
# ``warp_uniform(x)``: a compiler-made promise (no language spelling) that every lane of the warp holds the
# same ``x``; its value is ``x``.  CUDA prints it as a broadcast from lane 0, so that ptxas, which cannot
# prove the promise itself, keeps ``x`` and what is computed from it in uniform registers; the emulator
# checks the promise (a lane that differs is an error), the tile interpreter takes ``x``.
UNIFORM = th.WARP_UNIFORM
WARP_CALLS = SHUFFLES | {"warp_size", UNIFORM} | {"warp_vote_any", "warp_vote_all", "warp_vote_ballot",
                                         "warp_vote_activemask"}
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


VOTES = {"warp_vote_any", "warp_vote_all", "warp_vote_ballot", "warp_vote_activemask"}


def vote(kind: str, warp_of, lane_of, pred, active, mask: int):
    """Per-lane result of a warp vote.  ``warp_of``: a warp key per lane (lanes of one warp share
    it), ``lane_of``: the lane within the warp, ``active``: which lanes execute, ``mask``: the lane
    mask of the call.  ballot / activemask are uint64 bit sets, any / all bools."""
    lane_of = np.asarray(lane_of, np.uint64)
    part = np.asarray(active, bool) & ((np.uint64(mask) >> lane_of) & np.uint64(1)).astype(bool)
    keys, inv = np.unique(np.asarray(warp_of), return_inverse=True)
    bits = np.left_shift(np.uint64(1), lane_of)
    if kind == "warp_vote_activemask":
        on = np.asarray(active, bool)
    else:
        on = part & np.asarray(pred, bool)
    acc = np.zeros(len(keys), np.uint64)
    np.bitwise_or.at(acc, inv, np.where(on, bits, np.uint64(0)))
    if kind in ("warp_vote_ballot", "warp_vote_activemask"):
        return acc[inv]
    if kind == "warp_vote_any":
        return acc[inv] != 0
    taking = np.zeros(len(keys), np.uint64)
    np.bitwise_or.at(taking, inv, np.where(part, bits, np.uint64(0)))
    return acc[inv] == taking[inv]
