"""Fragment -> shared tile copies as ``stmatrix`` (part of ``lower_parallel``; sm_90).

``T.copy(C_local, C_shared)`` of a matrix accumulator into a 16-bit shared tile (the staged GEMM
epilogue) is a ``T.Parallel`` loop ``C_shared[i, j] = cast(C_local[i, j])`` after ``expand_tile_ops``.
Lowered element-wise, each thread stores the two columns it holds per 8-column block as one 4-byte
store (64 st.shared per thread for a 128x256 tile over 256 threads).  The accumulator layouts of
mma.sync and wgmma are, per warp, 8x8 blocks whose lane ``l`` holds row ``l // 4``, columns
``2 (l % 4) + {0, 1}`` in two consecutive registers: exactly the fragment ``stmatrix`` stores.  So
when the fragment layout has that shape (checked on its ownership table: every even register pair of
every warp is such a block, whose origin is an affine function of the warp index), the loop becomes
one ``StoreMatrix`` of four blocks per eight registers (16-byte rows, one instruction per 8x8x4),
the values converted to the tile's dtype in registers first.  The destination's shared layout must
keep 8-element rows contiguous and 16-byte aligned (row-major, the XOR swizzles and the TMA layout
do).  Anything else returns None: the caller lowers the loop element-wise as before.

A column window of the accumulator, ``C_shared[i, j] = cast(C_local[i, j + c0])`` with a constant
``c0`` (a multiple of 8) and ``C_shared`` as many rows as ``C_local`` and fewer columns (the sub-tiled
epilogue of ``kernels/gemm.py``: the tile leaves in column chunks through one small shared buffer), is
stored the same way from the register pairs whose 8x8 blocks lie inside the window, for every warp
(a pair inside the window for some warps and outside for others: None).
"""

from __future__ import annotations

import numpy as np

from ..ir import dtype as dt
from ..ir import expr as E
from ..ir import thread as th
from ..ir import tile as t
from ..ir.analysis import affine_coeffs
from .lower_exprs import Env
from .lowering_context import LoweringContext

WARP = 32


def try_store_matrix(ctx: LoweringContext, p: t.ParallelFor, env: Env) -> list | None:
    if ctx.target.vendor != "nvidia" or not ctx.target.has("tma"):  # stmatrix: sm_90 and newer
        return None
    if ctx.options.get("optimize_level", 2) < 2 or ctx.options.get("tw.disable_stmatrix"):
        return None
    match = _match(p)
    if match is None:
        return None
    frag, dst, c0 = match
    lay = ctx.layouts.get(frag)
    if lay is None or frag in env.frag_redirect or env.replica_guard is not None or lay.num_threads != ctx.nthreads:
        return None
    if ctx.nthreads % WARP or frag not in ctx.local_of:
        return None
    slay = ctx.shared_layouts.get(dst)
    if slay is None or getattr(slay, "packed", False) or not _rows_contiguous(slay, dst.shape):
        return None
    plan = _plan(lay, tuple(int(x) for x in dst.shape), ctx.nthreads, c0)
    if plan is None:
        return None
    regs = ctx.local_of[frag]
    flat = ctx.shared_flat(dst)
    warp = ctx.tid // WARP
    lane = ctx.tid % WARP
    q = lane // 8  # the matrix whose row this lane addresses
    out: list = [th.Comment(f"copy {frag.name} -> {dst.name} (stmatrix, {len(plan)} x {WARP} lanes)")]
    for first, blocks in plan:
        n = len(blocks)
        tmp = ctx.local_buffer(ctx.fresh("stm"), 2 * n, dst.dtype)
        out.append(th.LocalDecl(tmp, loc=p.loc))
        for k in range(2 * n):
            value = E.cast(dst.dtype, E.Load(regs, (E.as_expr(first + k),)))
            out.append(t.BufferStore(tmp, (E.as_expr(k),), value, loc=p.loc))
        row = _pick(q, [b[0] for b in blocks], warp) + lane % 8
        col = _pick(q, [b[1] for b in blocks], warp)
        out.append(th.StoreMatrix(flat, ctx.shared_offset(dst, (row, col)), tmp, 0, n, loc=p.loc))
    return out


def _match(p: t.ParallelFor):
    """(fragment, shared tile, c0) of ``tile[i, j] = cast(fragment[i, j + c0])`` over the whole 2-D tile
    (``c0`` 0: the whole fragment; else a multiple of 8, the window inside the fragment's columns)."""
    body = p.body
    if len(p.vars) != 2 or not isinstance(body, t.BufferStore):
        return None
    dst = body.buffer
    if dst.scope != "shared" or dst.ndim != 2 or dt.nbytes(dst.dtype) != 2 or dst.static_shape() is None:
        return None
    if tuple(int(x) for x in dst.shape) != tuple(p.extents):
        return None
    value = body.value
    if isinstance(value, E.Cast):
        if value.dtype != dst.dtype:
            return None
        value = value.a
    if not isinstance(value, E.Load) or value.buffer.scope != "fragment" or value.buffer.ndim != 2:
        return None
    if value.buffer.static_shape() is None or not dt.is_float(value.buffer.dtype):
        return None
    rows, cols = (int(x) for x in value.buffer.shape)
    if rows != int(dst.shape[0]) or len(value.indices) != 2:
        return None
    if len(body.indices) != 2 or any(affine_coeffs(x) != {v: 1, None: 0} for x, v in zip(body.indices, p.vars)):
        return None
    i, j = p.vars
    col = affine_coeffs(value.indices[1])
    if affine_coeffs(value.indices[0]) != {i: 1, None: 0} or col is None or set(col) != {j, None} or col[j] != 1:
        return None
    c0 = col[None]
    if c0 % 8 or c0 < 0 or c0 + int(dst.shape[1]) > cols:
        return None
    return value.buffer, dst, c0


def _rows_contiguous(slay, shape) -> bool:
    """Every 8-element run starting at a multiple of 8 columns is contiguous and 16-byte aligned."""
    rows, cols = (int(x) for x in shape)
    if cols % 8:
        return False
    r, c = np.meshgrid(np.arange(rows), np.arange(0, cols, 8), indexing="ij")
    base = np.asarray(slay.offset((r, c)))
    if (base % 8).any():
        return False
    return all((np.asarray(slay.offset((r, c + k))) == base + k).all() for k in range(1, 8))


def _plan(lay, shape, nthreads: int, first_col: int = 0):
    """``[(first register, [(row origin per warp, col origin per warp), ...]), ...]``: groups of up
    to four 8x8 blocks in consecutive register pairs, or None when the layout is not made of them.
    ``shape`` is the destination's: the fragment's, or (with ``c0``) a window of its columns
    ``first_col .. first_col + shape[1]``, the origins then relative to the window."""
    if lay.num_regs % 2 or len(lay.shape) != 2 or lay.shape[0] != shape[0]:
        return None
    table = np.asarray(lay.table)
    if table.shape != (nthreads, lay.num_regs) or (table < 0).any():
        return None
    cols = int(lay.shape[1])
    rows_t, cols_t = table // cols, table % cols
    lanes = np.arange(nthreads) % WARP
    nwarps = nthreads // WARP
    pairs = []
    for r in range(0, lay.num_regs, 2):
        r0 = rows_t[:, r] - lanes // 4
        c0 = cols_t[:, r] - 2 * (lanes % 4)
        if not ((rows_t[:, r + 1] == rows_t[:, r]).all() and (cols_t[:, r + 1] == cols_t[:, r] + 1).all()):
            return None
        r0w, c0w = r0.reshape(nwarps, WARP), c0.reshape(nwarps, WARP)
        if (r0w != r0w[:, :1]).any() or (c0w != c0w[:, :1]).any() or (c0w % 8).any():
            return None
        inside = (c0w[:, 0] >= first_col) & (c0w[:, 0] < first_col + shape[1])
        if inside.any() != inside.all():
            return None
        pairs.append((r0w[:, 0], c0w[:, 0] - first_col) if inside.all() else None)
    groups = []
    for g in range(0, len(pairs), 4):
        # (runs of consecutive pairs inside the window: all of them for the whole fragment)
        run = []
        for k, b in enumerate(pairs[g:g + 4] + [None]):
            if b is not None:
                run.append(b)
                continue
            first = 2 * (g + k - len(run))
            if len(run) == 3:  # x1, x2 or x4 only
                groups.append((first, run[:2]))
                groups.append((first + 4, run[2:]))
            elif run:
                groups.append((first, run))
            run = []
    if sum(len(b) for _, b in groups) * 64 * nwarps != shape[0] * shape[1]:
        return None  # the window's blocks do not cover the destination
    for _, blocks in groups:
        for dim in (0, 1):
            if _affine_in_warp([b[dim] for b in blocks], nwarps) is None:
                return None
    return groups


def _affine_in_warp(origins: list, nwarps: int):
    """Coefficients ``(a_q, b, c, k)`` with origin_q(w) = a_q + b * (w % k) + c * (w // k) for every
    warp w and block q of a group (one ``k``, ``b`` and ``c`` for the group), or None."""
    w = np.arange(nwarps)
    base = np.asarray(origins[0])
    if any(((np.asarray(o) - base) != (np.asarray(o) - base)[0]).any() for o in origins):
        return None  # the blocks of one instruction sit at fixed offsets from each other
    k = 1
    while k <= nwarps:
        lo, hi = w % k, w // k
        b = int(base[1] - base[0]) if k > 1 else 0
        c = int(base[k] - base[0]) if k < nwarps else 0
        if (base == base[0] + b * lo + c * hi).all():
            return [int(np.asarray(o)[0]) for o in origins], b, c, k
        k *= 2
    return None


def _pick(q, origins: list, warp):
    """The origin (row or column) of block ``q`` of a group, for the executing warp: an expression."""
    offs, b, c, k = _affine_in_warp(origins, len(np.asarray(origins[0])))
    e = E.as_expr(offs[0])
    if k > 1 and b:
        e = e + (warp % k) * b
    if c:
        e = e + (warp // k if k > 1 else warp) * c
    deltas = [o - offs[0] for o in offs]
    if any(deltas):
        sel = E.as_expr(deltas[-1])
        for i in range(len(deltas) - 2, -1, -1):
            sel = E.select(q == i, E.as_expr(deltas[i]), sel)
        e = e + sel
    return e
