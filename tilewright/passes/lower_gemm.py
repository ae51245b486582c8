"""``T.gemm`` lowering (part of ``lower_to_threads``).

Matrix-instruction path (mma.sync, MFMA, WMMA alike): warps sit on the plan's ``warps_m x
warps_n`` grid; for each ``instr.k`` slice of K every warp loads its A operand atoms (rows of its
block) and B operand atoms (columns of its block) into registers, then issues one instruction per
(A atom, B atom) pair into the accumulator registers of the ``MmaAccumLayout``.

Operand loads from shared memory use ``ldmatrix`` where the target has it and the operand is 16-bit
(four 8x8 matrices per instruction; ``.trans`` for K-major layouts), and otherwise a gather driven by
the instruction's lane layout, with runs of consecutive elements fetched as one vector.  A fragment
A operand (``MmaOperandLayout``) is used in place.

SIMT path (no matrix instruction for the types): thread (ti, tj) of a ``tm x tn`` grid accumulates its
strided rows/columns with scalar multiply-adds, reading A and B from shared memory.
"""

from __future__ import annotations

import numpy as np

from ..ir import dtype as dt
from ..ir import expr as E
from ..ir import thread as th
from ..ir import tile as t
from .lower_exprs import Env, lower_expr, numeric
from .lowering_context import LoweringContext


def _tile_index(region: t.Region, starts, pos):
    """Buffer index of tile position ``pos`` (2-D) within a region whose lowered starts are ``starts``."""
    dims = [d for d in range(region.buffer.ndim) if d not in region.squeezed]
    if len(dims) != len(pos):
        dims = [d for d in dims if region.extents[d] != 1]
    idx = list(starts)
    for d, p in zip(dims, pos):
        idx[d] = starts[d] + p
    return tuple(idx)


def lower_gemm(ctx: LoweringContext, s: t.Gemm, env: Env) -> list:
    plan = ctx.gemm_plans[id(s)]
    out: list = [th.Comment(f"gemm {s.a.buffer.name} x {s.b.buffer.name} -> {s.c.buffer.name} ({plan.kind})")]
    c_local = ctx.local_of[s.c.buffer]
    lay = ctx.layouts[s.c.buffer]
    if s.clear_accum:
        for r in range(lay.num_regs):
            out.append(t.BufferStore(c_local, (E.as_expr(r),), E.Const(0, c_local.dtype)))
    a_starts = tuple(lower_expr(ctx, x, env) for x in s.a.starts)
    b_starts = tuple(lower_expr(ctx, x, env) for x in s.b.starts)
    if plan.kind == "simt":
        out.extend(_simt(ctx, s, plan, lay, c_local, a_starts, b_starts))
        return out
    instr = plan.instr
    gs = instr.group_size
    lane = ctx.tid % gs
    warp = ctx.tid // gs
    wmi, wni = warp // plan.warps_n, warp % plan.warps_n
    k_total = s.a.shape[0] if s.trans_a else s.a.shape[1]
    ksteps = k_total // instr.k
    a_frag_in_regs = s.a.buffer.scope == "fragment"
    a_frag = None
    if not a_frag_in_regs:
        a_frag = ctx.local_buffer(ctx.fresh("afrag"), lay.atoms_m * instr.a_elems, s.a.buffer.dtype)
        out.append(th.LocalDecl(a_frag))
    b_frag = ctx.local_buffer(ctx.fresh("bfrag"), lay.atoms_n * instr.b_elems, s.b.buffer.dtype)
    out.append(th.LocalDecl(b_frag))
    use_ldmatrix = ctx.target.has("ldmatrix") and dt.bits(s.a.buffer.dtype) == 16 and instr.m == 16 \
        and instr.k == 16 and instr.n == 8
    for kk in range(ksteps):
        k0 = kk * instr.k
        # A operands
        if not a_frag_in_regs:
            for mi in range(lay.atoms_m):
                m0 = wmi * lay.wm + mi * instr.m
                dst_off = mi * instr.a_elems
                if use_ldmatrix:
                    out.append(_ldmatrix_a(ctx, s, a_starts, lane, m0, k0, a_frag, dst_off))
                else:
                    def pos_a(e, m0=m0):
                        row, col = instr.a_index(lane, e)
                        return (k0 + col, m0 + row) if s.trans_a else (m0 + row, k0 + col)

                    out.extend(_gather(ctx, s.a, a_starts, pos_a, instr.a_elems, a_frag, dst_off))
        # B operands
        ni = 0
        while ni < lay.atoms_n:
            n0 = wni * lay.wn + ni * instr.n
            if use_ldmatrix:
                pair = ni + 1 < lay.atoms_n
                out.append(_ldmatrix_b(ctx, s, b_starts, lane, n0, k0, b_frag, ni * instr.b_elems, pair))
                ni += 2 if pair else 1
            else:
                def pos_b(e, n0=n0):
                    kr, col = instr.b_index(lane, e)
                    return (n0 + col, k0 + kr) if s.trans_b else (k0 + kr, n0 + col)

                out.extend(_gather(ctx, s.b, b_starts, pos_b, instr.b_elems, b_frag, ni * instr.b_elems))
                ni += 1
        for mi in range(lay.atoms_m):
            if a_frag_in_regs:
                a_op = (ctx.local_of[s.a.buffer], ctx.layouts[s.a.buffer].reg(mi, kk, 0))
            else:
                a_op = (a_frag, mi * instr.a_elems)
            for nj in range(lay.atoms_n):
                creg = lay.reg(mi, nj, 0)
                out.append(th.MatrixMultiply(instr, (c_local, creg), a_op, (b_frag, nj * instr.b_elems),
                                             (c_local, creg), loc=s.loc))
    return out


def _ldmatrix_a(ctx, s, starts, lane, m0, k0, dst, dst_off):
    q = lane // 8
    r8 = lane % 8
    if s.trans_a:  # A stored K x M: transposing loads
        pos = (k0 + r8 + 8 * (q // 2), m0 + 8 * (q % 2))
    else:
        pos = (m0 + r8 + 8 * (q % 2), k0 + 8 * (q // 2))
    buf = s.a.buffer
    off = ctx.shared_offset(buf, _tile_index(s.a, starts, pos))
    return th.LoadMatrix(dst, dst_off, ctx.shared_flat(buf), off, 4, bool(s.trans_a), loc=s.loc)


def _ldmatrix_b(ctx, s, starts, lane, n0, k0, dst, dst_off, pair):
    q = (lane // 8) % (4 if pair else 2)
    r8 = lane % 8
    if s.trans_b:  # B stored N x K: rows of B^T are columns of B, no transpose needed
        pos = (n0 + 8 * (q // 2) + r8, k0 + 8 * (q % 2))
    else:
        pos = (k0 + 8 * (q % 2) + r8, n0 + 8 * (q // 2))
    buf = s.b.buffer
    off = ctx.shared_offset(buf, _tile_index(s.b, starts, pos))
    return th.LoadMatrix(dst, dst_off, ctx.shared_flat(buf), off, 4 if pair else 2, not s.trans_b, loc=s.loc)


def _gather(ctx, region, starts, pos_fn, n, dst, dst_off) -> list:
    """Load n operand elements per lane from a shared (or local) tile into ``dst[dst_off:]``,
    fusing runs of consecutive, aligned addresses into vector reads."""
    buf = region.buffer
    if buf.scope != "shared":
        raise NotImplementedError("gemm operands must be in shared memory here")
    flat = ctx.shared_flat(buf)
    offs = [ctx.shared_offset(buf, _tile_index(region, starts, pos_fn(e))) for e in range(n)]
    nums = [numeric(ctx, o) for o in offs]
    out = []
    e = 0
    max_run = max(16 // dt.nbytes(buf.dtype), 1)
    while e < n:
        run = 1
        if nums[e] is not None:
            while run * 2 <= max_run and e + run * 2 <= n and e % (run * 2) == 0:
                cand = run * 2
                ok = all(nums[e + j] is not None and np.array_equal(nums[e + j], nums[e] + j) for j in range(cand))
                ok = ok and bool(np.all(nums[e] % cand == 0))
                if not ok:
                    break
                run = cand
        if run > 1:
            out.append(th.VecCopy(dst, E.as_expr(dst_off + e), flat, offs[e], run))
        else:
            out.append(t.BufferStore(dst, (E.as_expr(dst_off + e),), E.Load(flat, (offs[e],))))
        e += run
    return out


def _simt(ctx, s, plan, lay, c_local, a_starts, b_starts) -> list:
    tm, tn = plan.tm, plan.tn
    ti, tj = ctx.tid // tn, ctx.tid % tn
    k_total = s.a.shape[0] if s.trans_a else s.a.shape[1]
    acc = c_local.dtype
    kv = E.Var(ctx.fresh("kk"), "int32", kind="loop")
    a_vals = ctx.local_buffer(ctx.fresh("av"), lay.per_m, acc)
    b_vals = ctx.local_buffer(ctx.fresh("bv"), lay.per_n, acc)
    body = []

    def read(region, starts, pos):
        buf = region.buffer
        idx = _tile_index(region, starts, pos)
        if buf.scope == "shared":
            return E.Load(ctx.shared_flat(buf), (ctx.shared_offset(buf, idx),))
        raise NotImplementedError("SIMT gemm operands must be in shared memory")

    for a in range(lay.per_m):
        m = ti + tm * a
        pos = (kv, m) if s.trans_a else (m, kv)
        body.append(t.BufferStore(a_vals, (E.as_expr(a),), E.cast(acc, read(s.a, a_starts, pos))))
    for b in range(lay.per_n):
        n = tj + tn * b
        pos = (n, kv) if s.trans_b else (kv, n)
        body.append(t.BufferStore(b_vals, (E.as_expr(b),), E.cast(acc, read(s.b, b_starts, pos))))
    for a in range(lay.per_m):
        for b in range(lay.per_n):
            r = a * lay.per_n + b
            cur = E.Load(c_local, (E.as_expr(r),))
            prod = E.Load(a_vals, (E.as_expr(a),)) * E.Load(b_vals, (E.as_expr(b),))
            body.append(t.BufferStore(c_local, (E.as_expr(r),), cur + prod))
    kind = "unroll" if k_total <= 32 else "serial"
    return [th.LocalDecl(a_vals), th.LocalDecl(b_vals),
            t.For(kv, E.as_expr(0), E.as_expr(k_total), t.SeqStmt(body), kind, loc=s.loc)]
