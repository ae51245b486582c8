"""Loop layouts that follow a fragment a ``T.Parallel`` loop stores to, for ``infer_layouts``.

A loop iterates by one layout: each thread runs the positions that layout gives it.  A fragment the
loop *reads* at positions a thread does not hold is read through shared memory
(``lower_parallel.convert_through_shared``); a fragment it *stores to* has to be written by the
threads that hold each element.  TileLang programs store to fragments at positions other than the
loop's own: a transpose (``dst_t[j, i] = src[i, j]``), a part of an accumulator
(``T.clear(C_local[:M, :K])``), a reshaped view of one (``s_reshaped[a, b, c]`` is ``s[a, b * H + c]``).

``store_driven_layout`` finds, for such a loop, the layout that iterates by the stored fragment: the
index of the store, evaluated at every loop position, maps positions one-to-one onto elements of the
fragment; thread ``t``'s register ``r`` runs the position whose element it holds there.  That table
becomes a ``UserFragmentLayout`` over the loop's extents (positions whose element no thread of the
loop writes are guarded off).  The loop's reads of other fragments then go through shared memory
where needed, as before.
"""

from __future__ import annotations

import numpy as np

from ..ir import tile as t
from ..ir.layout_user import LayoutFitError, UserFragmentLayout
from ..ir.visitor import walk
from .analysis import eval_expr


def store_driven_layout(p: t.ParallelFor, layouts: dict, drive, nthreads: int):
    """A layout for loop ``p`` under which every thread holds the fragment elements it stores, when
    ``drive`` (the layout chosen otherwise) does not give that and the store's index allows one;
    None to keep ``drive``."""
    if not all(isinstance(x, int) for x in p.extents):
        return None
    stores = _fragment_stores(p, layouts)
    if all(layouts[buf] is drive and _aligned(p, idx) for buf, idx in stores):
        return None  # (the usual loop: it stores to the fragment it iterates by, at its own positions)
    domain = np.indices(tuple(p.extents)).reshape(len(p.extents), -1)
    env = {v: domain[k] for k, v in enumerate(p.vars)}
    npos = domain.shape[1]
    mapped = []
    for buf, idx in stores:
        f = _flat_positions(buf, idx, env, npos)
        if f is None:
            return None  # a store whose positions cannot be told at compile time: keep the loop's layout
        mapped.append((buf, f))
    if all(_held(drive, layouts[buf], f) for buf, f in mapped):
        return None
    for buf, f in mapped:
        lay = layouts[buf]
        if lay.num_threads != nthreads or len(np.unique(f)) != npos:
            continue
        inv = np.full(int(np.prod(buf.shape)), -1, dtype=np.int64)
        inv[f] = np.arange(npos)
        tab = lay.table
        loop_tab = np.where(tab >= 0, inv[np.maximum(tab, 0)], -1)
        if not (loop_tab >= 0).any():
            continue
        try:
            cand = UserFragmentLayout(tuple(p.extents), loop_tab, f"stores to {buf.name}")
        except LayoutFitError:
            continue
        if all(_held(cand, layouts[b], g) for b, g in mapped) and _covers_domain(cand, npos):
            return cand
    return None


def _fragment_stores(p, layouts) -> list:
    out = []

    def f(s):
        if isinstance(s, t.BufferStore) and s.buffer.scope == "fragment" and s.buffer in layouts:
            out.append((s.buffer, s.indices))

    walk(p.body, f)
    return out


def _flat_positions(buf, idx, env, npos):
    """Flat element of ``buf`` the store writes at each loop position (None: not known, or outside)."""
    try:
        vals = [np.broadcast_to(np.asarray(eval_expr(x, env), dtype=np.int64), (npos,)) for x in idx]
    except Exception:  # noqa: BLE001 - any value not known at compile time (a let, a block index)
        return None
    if len(vals) != len(buf.shape) or not all(isinstance(n, int) for n in buf.shape):
        return None
    flat = np.zeros(npos, dtype=np.int64)
    for v, n in zip(vals, buf.shape):
        if (v < 0).any() or (v >= n).any():
            return None
        flat = flat * n + v
    return flat


def _aligned(p, idx) -> bool:
    return len(idx) == len(p.vars) and all(i is v for i, v in zip(idx, p.vars))


def _held(drive, blay, f) -> bool:
    """Under loop layout ``drive``, each thread holds, at one register for all threads, the element of
    ``blay``'s fragment it stores at each of its positions."""
    if drive is None:
        return False
    dtab, btab = drive.table, blay.table
    if dtab.shape[0] != btab.shape[0]:
        return False
    for r in range(dtab.shape[1]):
        ts = np.nonzero(dtab[:, r] >= 0)[0]
        if not len(ts):
            continue
        want = f[dtab[ts, r]]
        hit = np.nonzero(btab[ts[0]] == want[0])[0]
        if not len(hit) or not (btab[ts, hit[0]] == want).all():
            return False
    return True


def _covers_domain(lay, npos) -> bool:
    """Every loop position is run by some thread (else an iteration would be lost)."""
    held = np.zeros(npos, dtype=bool)
    tab = lay.table
    held[tab[tab >= 0]] = True
    return bool(held.all())
