"""``T.gemm`` on AMD matrix instructions (MFMA, WMMA): operand layouts in LDS and vector operand loads
(part of ``infer_layouts`` and ``lower_to_threads``).

Every MFMA/WMMA lane holds runs of consecutive K values (one row of A, one column of B).  The goal is
that each run is one 64- or 128-bit LDS read, without bank conflicts:

* K-contiguous operand tiles (A ``M x K``, B given transposed ``N x K``) stay row-major, with an
  XOR swizzle of their 16-byte chunks (chunk ^= row bits, ``SwizzledRowsLayout``) sized to the LDS
  width, so the rows one read phase touches fall into different banks; or, on RDNA where the
  swizzle's address math would cost many registers, with padded rows (``PaddedRowsLayout``).
* MN-contiguous tiles (B ``K x N``, A given transposed ``K x M``) take ``KPackedLayout``: each column's
  K values of a group of rows are adjacent (a pack), so a run is again one read.  The global ->
  shared copy fills it a register block at a time (``lower_copy_packed``).
* K pairing: when a lane's run of one instruction is narrower than 16 bytes (MFMA f16/bf16: 4
  values, 8 bytes), ``P`` consecutive K steps are read at once.  K is permuted within the ``P``
  steps — lane group ``h`` of step ``j`` takes K values ``h * P * KL + j * KL + e`` instead of
  ``j * k + h * KL + e`` — identically for A and B, which leaves ``A @ B`` unchanged, and gives each
  lane ``P * KL`` consecutive values: one 128-bit read for ``P`` instructions.  Not used when A is a
  register fragment (its registers hold the instruction's own K order).

Only lanes' element positions change here; the instructions, accumulator layouts and the
``MatrixMultiply`` statements are those of ``lower_gemm``.
"""

from __future__ import annotations

import numpy as np

from ..ir import dtype as dt
from ..ir import expr as E
from ..ir import thread as th
from ..ir import tile as t
from ..ir.layout_packed import KPackedLayout, PaddedRowsLayout, SwizzledRowsLayout, pack_group
from .lower_exprs import Env, numeric
from .lower_gemm import vector_reads
from .lowering_context import LoweringContext


def _lane_runs(instr, index, elems: int) -> bool:
    """Whether every lane's elements are one run of consecutive K values starting at a multiple of
    the run length (``index`` returns (mn, k) for A-style or (k, mn) for B-style; normalized by the
    caller)."""
    for lane in range(instr.group_size):
        ks = [index(lane, e) for e in range(elems)]
        if ks[0] % elems or any(k != ks[0] + e for e, k in enumerate(ks)):
            return False
    return True


def _runs(instr) -> bool:
    return _lane_runs(instr, lambda ln, e: instr.a_index(ln, e)[1], instr.a_elems) and \
        _lane_runs(instr, lambda ln, e: instr.b_index(ln, e)[0], instr.b_elems)


def k_pairing(instr, ksteps: int, a_in_regs: bool) -> int:
    """How many K steps one operand read covers (``P``, see the module docstring)."""
    if a_in_regs or instr.a_elems != instr.b_elems or not _runs(instr):
        return 1
    run_bytes = instr.a_elems * dt.nbytes(instr.a_dtype)
    p = 1
    while 2 * p * run_bytes <= 16 and ksteps % (2 * p) == 0:
        p *= 2
    return p


def _ksteps(s: t.Gemm, instr) -> int:
    return (s.a.shape[0] if s.trans_a else s.a.shape[1]) // instr.k


def operand_layouts(stmts: list, plans: dict, target) -> dict:
    """Shared layouts for the LDS operands of MFMA/WMMA gemms (AMD targets): buffer -> layout.
    ``stmts``: every statement of the kernel.  A tile used by gemms that want different layouts
    keeps the default row-major one.  Tiles stored element by element from registers (a score
    fragment copied to shared memory for the next gemm) take padded rows instead of the XOR
    swizzle, and stay row-major rather than K-packed: their stores would each compute a swizzled
    address, which costs registers where the fragments already fill them.

    Where ``lds_prefers_padding`` (RDNA), a tile whose XOR swizzle would make the reads of one
    gemm compute many distinct addresses (rows of more than 8 chunks; K-packed tiles read in more
    than 4 atoms per wave) is padded instead when the kernel's tiles still fit: measured on
    gfx1100, the swizzled head-dim-128 attention spilled, the padded one did not, while the
    swizzled GEMM tiles (4 chunks, 4 atoms) fit and their padded versions spilled."""
    if target.vendor != "amd":
        return {}
    gemms = [s for s in stmts if isinstance(s, t.Gemm)]
    stored = {s.buffer for s in stmts if isinstance(s, t.BufferStore) and s.buffer.scope == "shared"}
    from ..target.amd import lds_bank_bytes, lds_prefers_padding

    window = lds_bank_bytes(target)
    wants: dict = {}
    cost: dict = {}  # buffer -> distinct swizzled address patterns one gemm's reads compute
    for s in gemms:
        plan = plans[s]
        if plan.kind != "mma" or plan.family not in ("mfma", "wmma"):
            continue
        instr = plan.instr
        p = k_pairing(instr, _ksteps(s, instr), s.a.buffer.scope == "fragment")
        for r, k_rows in ((s.a, bool(s.trans_a)), (s.b, not s.trans_b)):
            b = r.buffer
            if b.scope != "shared" or len(b.shape) < 2:
                continue
            if k_rows:
                g = pack_group(p * instr.a_elems, b.dtype)
                ok = b.shape[-2] % g == 0 and isinstance(b.shape[-1], int) and b not in stored
                want = ("packed", g) if ok and g > 1 else ("rows",)
                mn, warps, atom = (s.c.shape[0], plan.warps_m, instr.m) if r is s.a else \
                    (s.c.shape[1], plan.warps_n, instr.n)
                n_cost = int(mn) // warps // atom if isinstance(mn, int) else 0
                cost[b] = max(cost.get(b, 0), 2 * n_cost)
            else:
                want = ("padded",) if b in stored else ("swizzled",)
                row_bytes = b.shape[-1] * dt.nbytes(b.dtype) if isinstance(b.shape[-1], int) else 0
                cost[b] = max(cost.get(b, 0), row_bytes // 16)
            wants.setdefault(b, set()).add(want)
    chosen = {b: next(iter(ws)) for b, ws in wants.items() if len(ws) == 1}
    padded = set()
    if lds_prefers_padding(target):
        padded = {b for b, w in chosen.items() if w[0] in ("packed", "swizzled") and cost.get(b, 0) > 8}
        if not _padding_fits(stmts, chosen, padded, window, target):
            padded = set()
    out = {}
    for b, w in chosen.items():
        if w[0] == "packed":
            out[b] = KPackedLayout(b.shape, b.dtype, w[1], window, "pad" if b in padded else "xor")
        elif w[0] == "swizzled" and b in padded:
            out[b] = PaddedRowsLayout(b.shape, b.dtype, window)  # may fall back to the swizzle
        elif w[0] == "padded":
            out[b] = PaddedRowsLayout(b.shape, b.dtype)
        elif w[0] == "swizzled":
            out[b] = SwizzledRowsLayout(b.shape, b.dtype, window)
    return out


def _padding_fits(stmts, chosen: dict, padded: set, window: int, target) -> bool:
    """Whether the padded layouts leave the kernel's shared tiles within the LDS (scratch that
    later passes allocate is not known here: ``unpad_operand_layouts`` is the fallback)."""
    total = 0
    for s in stmts:
        if isinstance(s, t.Alloc) and s.buffer.scope == "shared":
            b = s.buffer
            if any(not isinstance(x, int) for x in b.shape):
                return False
            w = chosen.get(b) if b in padded else None
            if w is not None and w[0] == "packed":
                n = KPackedLayout(b.shape, b.dtype, w[1], window, "pad").numel
            elif w is not None:
                n = PaddedRowsLayout(b.shape, b.dtype).numel
            else:
                n = int(np.prod(b.shape))
            total += n * dt.nbytes(b.dtype)
    return total <= target.max_shared_bytes


def unpad_operand_layouts(layouts: dict) -> bool:
    """Replace padded operand layouts (chosen by ``operand_layouts``) with XOR-swizzled ones of no
    extra size, in place; True if any changed.  ``lower_to_threads`` calls it when the kernel's
    shared memory, scratch included, overflowed with the padding."""
    changed = False
    for b, lay in list(layouts.items()):
        if isinstance(lay, KPackedLayout) and lay.mode == "pad":
            layouts[b] = KPackedLayout(lay.shape, lay.dtype, lay.group, lay.period * 16, "xor")
            changed = True
        elif isinstance(lay, PaddedRowsLayout) and lay.swizzle and lay.window:
            layouts[b] = SwizzledRowsLayout(lay.shape, lay.dtype, lay.window)
            changed = True
    return changed


# ---------------------------------------------------------------------------------------------
# lowering


def lower_amd_mma(ctx: LoweringContext, s: t.Gemm, env: Env, g) -> list:
    """The K steps of an MFMA/WMMA gemm (``g``: ``lower_gemm._MmaGemm``), ``P`` steps per operand read."""
    instr, lay = g.instr, g.lay
    P = k_pairing(instr, g.ksteps, g.a_in_regs)
    a_frag = None if g.a_in_regs else ctx.local_buffer(ctx.fresh("afrag"), lay.atoms_m * instr.a_elems * P,
                                                       s.a.buffer.dtype)
    b_frag = ctx.local_buffer(ctx.fresh("bfrag"), lay.atoms_n * instr.b_elems * P, s.b.buffer.dtype)
    out: list = [th.LocalDecl(x) for x in (a_frag, b_frag) if x is not None]
    a_starts, b_starts = g.starts(s.a), g.starts(s.b)
    KL = instr.a_elems

    def k_of(q, j, k_std):
        if P == 1:
            return q * instr.k + k_std
        return q * P * instr.k + (k_std // KL) * (P * KL) + j * KL + k_std % KL

    lane = g.lane
    for q in range(g.ksteps // P):
        if not g.a_in_regs:
            for mi in range(lay.atoms_m):
                m0 = g.wmi * lay.wm + mi * instr.m

                def pos_a(i, m0=m0, q=q):
                    j, e = divmod(i, instr.a_elems)
                    row, kk = instr.a_index(lane, e)
                    k = k_of(q, j, kk)
                    return (k, m0 + row) if s.trans_a else (m0 + row, k)

                out.extend(_vector_gather(ctx, s.a, a_starts, pos_a, instr.a_elems * P, a_frag,
                                          mi * P * instr.a_elems))
        for ni in range(lay.atoms_n):
            n0 = g.wni * lay.wn + ni * instr.n

            def pos_b(i, n0=n0, q=q):
                j, e = divmod(i, instr.b_elems)
                kk, col = instr.b_index(lane, e)
                k = k_of(q, j, kk)
                return (n0 + col, k) if s.trans_b else (k, n0 + col)

            out.extend(_vector_gather(ctx, s.b, b_starts, pos_b, instr.b_elems * P, b_frag, ni * P * instr.b_elems))
        for j in range(P):
            out.extend(_instructions(ctx, s, g, q * P + j, j, P, a_frag, b_frag))
    return out


def _instructions(ctx, s, g, kk: int, j: int, P: int, a_frag, b_frag) -> list:
    lay, instr = g.lay, g.instr
    out = []
    for mi in range(lay.atoms_m):
        for nj in range(lay.atoms_n):
            if g.a_in_regs:
                a_op = (ctx.local_of[s.a.buffer], ctx.layouts[s.a.buffer].reg(mi, kk, 0))
            else:
                a_op = (a_frag, (mi * P + j) * instr.a_elems)
            creg = lay.reg(mi, nj, 0)
            out.append(th.MatrixMultiply(instr, (g.c_local, creg), a_op, (b_frag, (nj * P + j) * instr.b_elems),
                                         (g.c_local, creg), loc=s.loc))
    return out


def _tile_dims(region: t.Region) -> list:
    dims = [d for d in range(region.buffer.ndim) if d not in region.squeezed]
    if len(dims) != 2:
        dims = [d for d in dims if region.extents[d] != 1]
    return dims


def _vector_gather(ctx: LoweringContext, region: t.Region, starts, pos_fn, n: int, dst, dst_off: int) -> list:
    """Load ``n`` elements per lane (element ``i`` at tile position ``pos_fn(i)``) from a shared
    tile into ``dst[dst_off:]``, as vector reads of up to 16 bytes over runs of addresses that are
    consecutive and aligned in every lane.  Runs are found on the offsets within one stage of the
    tile (the other dims' starts set to 0: they add a multiple of the stage size, which the run
    alignment is checked against), so a ring slot chosen at run time does not defeat them."""
    buf = region.buffer
    flat = ctx.shared_flat(buf)
    dims = _tile_dims(region)
    lead = [d for d in range(buf.ndim) if d not in dims]

    def index(st, p):
        idx = list(st)
        for d, x in zip(dims, p):
            idx[d] = st[d] + x
        return tuple(idx)

    zero = tuple(E.as_expr(0) if d in lead else x for d, x in enumerate(starts))
    positions = [pos_fn(i) for i in range(n)]
    offs = [ctx.shared_offset(buf, index(starts, p)) for p in positions]
    nums = [numeric(ctx, ctx.shared_offset(buf, index(zero, p))) for p in positions]
    # what a step of each other dim (a ring slot) adds to the offset: reads must stay aligned to it
    ctx.shared_flat(buf)
    lay = ctx.shared_layouts[buf]
    lead_steps = [int(lay.offset(tuple(1 if k == d else 0 for k in range(buf.ndim)))) for d in lead]
    max_run = max(16 // dt.nbytes(buf.dtype), 1)
    return vector_reads(flat, offs, nums, dst, dst_off, max_run, align_base=dst_off, lead_steps=lead_steps)
