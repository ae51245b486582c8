"""``T.gemm`` lowering (part of ``lower_to_threads``).

Matrix-instruction path (mma.sync, MFMA, WMMA alike): warps sit on the plan's ``warps_m x
warps_n`` grid; for each ``instr.k`` slice of K every warp loads its A operand atoms (rows of its
block) and B operand atoms (columns of its block) into registers, then issues one instruction per
(A atom, B atom) pair into the accumulator registers of the ``MmaAccumLayout``.

Operand loads from shared memory use ``ldmatrix`` where the target has it and the operand is 16-bit
(four 8x8 matrices per instruction; ``.trans`` for K-major layouts), and otherwise a gather driven by
the instruction's lane layout, with runs of consecutive elements fetched as one vector.  A fragment
A operand (``MmaOperandLayout``) is used in place.

Pipelined mainloops (``plans.mainloops``, recorded by ``pipeline_loops``): the loop body ends with
``gemm; wait for the next ring slot; barrier``.  For mma.sync, when the double-buffered operands fit
in registers (``prefetch_supported``), the schedule is: before the loop, declare two sets of operand
fragments and load K step 0 from the first slot; in each iteration K steps alternate between the
two sets — while step kk computes, step kk+1 loads — and the last step waits for the next slot,
synchronizes (which also frees the slot just read for the copies of the next iteration) and loads
the next iteration's first step before issuing its own instructions.  Otherwise the gemm is lowered
as usual, followed by the wait and the barrier.

wgmma plans (``tw.enable_wgmma``, sm_90a): each warpgroup of the plan's grid issues, per K step,
one ``wgmma.mma_async`` per 64-row atom of its tile, B (and A unless it is a fragment) read
through shared-memory matrix descriptors of the TMA-swizzled operand layouts; the gemm is fenced
before, committed and waited for after: ``wait_group n`` with ``n = plans.wgmma_in_flight[gemm]``
(0 unless ``warp_specialize`` made the gemm a consumer that releases its ring slot one iteration
late, leaving this iteration's group in flight while the next one is issued).

MFMA/WMMA plans (AMD) are lowered by ``lower_gemm_amd.lower_amd_mma``: vector operand reads from
the operand layouts ``infer_layouts`` chose there, with two K steps per read where that makes the
reads 128 bits wide.

SIMT path (no matrix instruction for the types): thread (ti, tj) of a ``tm x tn`` grid accumulates its
strided rows/columns with scalar multiply-adds, reading A and B from shared memory.
"""

from __future__ import annotations

import numpy as np

from ..errors import InternalError
from ..ir import dtype as dt
from ..ir import expr as E
from ..ir import thread as th
from ..ir import tile as t
from .index_algebra import linear_terms
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


class _MmaGemm:
    """The pieces of one matrix-instruction gemm: operand loads for a K step into given fragment
    buffers, and the instructions of a K step.  Used whole by ``lower_gemm`` and split across loop
    iterations by ``lower_mainloop``."""

    def __init__(self, ctx: LoweringContext, s: t.Gemm, env: Env):
        self.ctx, self.s = ctx, s
        self.plan = plan = ctx.gemm_plans[s]
        self.instr = instr = plan.instr
        self.lay = ctx.layouts[s.c.buffer]
        self.c_local = ctx.local_of[s.c.buffer]
        self.lane = ctx.tid % instr.group_size
        warp = ctx.tid // instr.group_size
        self.wmi, self.wni = warp // plan.warps_n, warp % plan.warps_n
        k_total = s.a.shape[0] if s.trans_a else s.a.shape[1]
        self.ksteps = k_total // instr.k
        self.a_in_regs = s.a.buffer.scope == "fragment"
        self.use_ldmatrix = ctx.target.has("ldmatrix") and dt.bits(s.a.buffer.dtype) == 16 and instr.m == 16 \
            and instr.k == 16 and instr.n == 8
        self.env = env

    def starts(self, region, slot=None):
        starts = tuple(lower_expr(self.ctx, x, self.env) for x in region.starts)
        if slot is not None:
            starts = (slot,) + starts[1:]
        return starts

    def new_frags(self) -> tuple:
        ctx, lay, instr, s = self.ctx, self.lay, self.instr, self.s
        a = None if self.a_in_regs else ctx.local_buffer(ctx.fresh("afrag"), lay.atoms_m * instr.a_elems,
                                                         s.a.buffer.dtype)
        b = ctx.local_buffer(ctx.fresh("bfrag"), lay.atoms_n * instr.b_elems, s.b.buffer.dtype)
        decls = [th.LocalDecl(x) for x in (a, b) if x is not None]
        return a, b, decls

    def load(self, kk: int, a_frag, b_frag, a_starts, b_starts) -> list:
        ctx, s, lay, instr, lane = self.ctx, self.s, self.lay, self.instr, self.lane
        out: list = []
        k0 = kk * instr.k
        if not self.a_in_regs:
            for mi in range(lay.atoms_m):
                m0 = self.wmi * lay.wm + mi * instr.m
                dst_off = mi * instr.a_elems
                if self.use_ldmatrix:
                    out.append(_ldmatrix_a(ctx, s, a_starts, lane, m0, k0, a_frag, dst_off))
                else:
                    def pos_a(e, m0=m0):
                        row, col = instr.a_index(lane, e)
                        return (k0 + col, m0 + row) if s.trans_a else (m0 + row, k0 + col)

                    out.extend(_gather(ctx, s.a, a_starts, pos_a, instr.a_elems, a_frag, dst_off))
        ni = 0
        while ni < lay.atoms_n:
            n0 = self.wni * lay.wn + ni * instr.n
            if self.use_ldmatrix:
                pair = ni + 1 < lay.atoms_n
                out.append(_ldmatrix_b(ctx, s, b_starts, lane, n0, k0, b_frag, ni * instr.b_elems, pair))
                ni += 2 if pair else 1
            else:
                def pos_b(e, n0=n0):
                    kr, col = instr.b_index(lane, e)
                    return (n0 + col, k0 + kr) if s.trans_b else (k0 + kr, n0 + col)

                out.extend(_gather(ctx, s.b, b_starts, pos_b, instr.b_elems, b_frag, ni * instr.b_elems))
                ni += 1
        return out

    def mma(self, kk: int, a_frag, b_frag) -> list:
        lay, instr, s = self.lay, self.instr, self.s
        out = []
        pairs = [(mi, nj) for mi in range(lay.atoms_m) for nj in range(lay.atoms_n)]
        if (self.ctx.options or {}).get("tw.mma_order") == "serpentine":
            # walk B atoms back and forth so consecutive instructions share an operand either way
            pairs = [(mi, nj if mi % 2 == 0 else lay.atoms_n - 1 - nj) for mi, nj in pairs]
        elif (self.ctx.options or {}).get("tw.mma_order") == "n_outer":
            pairs = [(mi, nj) for nj in range(lay.atoms_n) for mi in range(lay.atoms_m)]
        for mi, nj in pairs:
            if self.a_in_regs:
                a_op = (self.ctx.local_of[s.a.buffer], self.ctx.layouts[s.a.buffer].reg(mi, kk, 0))
            else:
                a_op = (a_frag, mi * instr.a_elems)
            creg = lay.reg(mi, nj, 0)
            out.append(th.MatrixMultiply(instr, (self.c_local, creg), a_op, (b_frag, nj * instr.b_elems),
                                         (self.c_local, creg), loc=s.loc))
        return out


def _clear(s, lay, c_local) -> list:
    if not s.clear_accum:
        return []
    return [t.BufferStore(c_local, (E.as_expr(r),), E.Const(0, c_local.dtype)) for r in range(lay.num_regs)]


def _wgmma_operand(ctx: LoweringContext, region: t.Region, starts, k_major: bool, mn0: int, k0: int):
    """The descriptor operand of the instruction atom whose first M/N index is ``mn0`` and first K
    index ``k0``, in a shared tile laid out by the TMA layout (``infer_layouts``): ``W``-byte
    swizzled rows (``W`` = the row, or a 128-byte column block of it), 8-row groups ``8 W`` apart,
    column blocks one after the other (``rows * W`` apart)."""
    buf = region.buffer
    ctx.shared_flat(buf)
    lay = ctx.shared_layouts[buf]
    swizzle = lay.tma_swizzle
    if not lay.tma or swizzle not in (32, 64, 128):
        raise InternalError(f"wgmma operand {buf.name} has layout {lay}, which no descriptor describes",
                            "infer_layouts", buf.loc)
    pos = (mn0, k0) if k_major else (k0, mn0)
    index = ctx.shared_offset(buf, _tile_index(region, starts, pos))
    rows = buf.shape[-2]
    lbo = 16 if k_major else rows * swizzle  # K-major swizzled layouts do not use LBO
    base, step = None, 0
    if ctx.options.get("tw.wgmma_desc_fold"):
        base = ctx.shared_offset(buf, _tile_index(region, starts, (0, 0)))
        step = _byte_step(index, base, dt.nbytes(buf.dtype))
        base = base if step else None
    return th.WgmmaOperand(ctx.shared_flat(buf), index, "k" if k_major else "mn", swizzle, lbo, 8 * swizzle, base, step)


def _byte_step(index, base, nbytes: int) -> int:
    """(``index`` - ``base``) in 16-byte units where the two differ by a constant multiple of 16 bytes
    (the same terms, compared structurally, and constants apart), else 0."""
    ti, ci = linear_terms(index)
    tb, cb = linear_terms(base)
    if len(ti) != len(tb) or ci <= cb or (ci - cb) * nbytes % 16:
        return 0
    left = list(tb)
    for coef, atom in ti:
        hit = next((j for j, (c, a) in enumerate(left) if c == coef and _same_expr(a, atom)), None)
        if hit is None:
            return 0
        left.pop(hit)
    return (ci - cb) * nbytes // 16


def _same_expr(a, b) -> bool:
    """Structural equality of two index expressions (variables by identity)."""
    if a is b:
        return True
    if type(a) is not type(b) or not isinstance(a, E.Expr):
        return isinstance(a, (int, float, str)) and a == b
    if isinstance(a, E.Var):
        return False
    if isinstance(a, E.Const):
        return a.value == b.value and a.dtype == b.dtype
    slots = [n for k in type(a).__mro__ for n in getattr(k, "__slots__", ())]
    for n in slots:
        x, y = getattr(a, n), getattr(b, n)
        if isinstance(x, (list, tuple)):
            if not isinstance(y, (list, tuple)) or len(x) != len(y) or not all(map(_same_expr, x, y)):
                return False
        elif not _same_expr(x, y):
            return False
    return True


def _check_atom_starts(region: t.Region, mn_major: bool, starts, width: int) -> None:
    """An instruction may start inside a swizzle atom of an MN-major operand only if it stays in it
    (the hardware moves to the next atom by the leading byte offset only from an atom's start:
    ``plan_gemms._mn_major_start_ok``); checked here too, so a planner change cannot silently
    produce wrong values."""
    buf = region.buffer
    if not mn_major:
        return
    atom = min(int(buf.shape[-1]) * dt.nbytes(buf.dtype), 128) // dt.nbytes(buf.dtype)
    bad = [x for x in starts if x % atom and x % atom + width > atom]
    if bad:
        raise InternalError(f"wgmma operand {buf.name}: instructions of {width} columns starting at {bad} cross a "
                            f"{atom}-column swizzle atom from inside it", "plan_gemms", buf.loc)


def _lower_wgmma(ctx: LoweringContext, s: t.Gemm, plan, lay, c_local, env: Env) -> list:
    """fence; per K step, one wgmma per (64-row atom, N atom) of the warpgroup's tile; commit; wait
    until at most ``plans.wgmma_in_flight[s]`` groups are in flight (0: the accumulator is complete
    when the gemm statement ends; 1: a later ``WgmmaWait`` completes it).  ``clear_accum`` is the first
    K step's scale-d = 0.  Operands not filled by TMA are first handed from the generic proxy to the
    async proxy (wgmma's operand reads): proxy fence, then barrier."""
    instr = plan.instr
    wg = ctx.tid // instr.group_size
    wmi, wni = wg // plan.warps_n, wg % plan.warps_n
    k_total = s.a.shape[0] if s.trans_a else s.a.shape[1]
    a_starts = tuple(lower_expr(ctx, x, env) for x in s.a.starts)
    b_starts = tuple(lower_expr(ctx, x, env) for x in s.b.starts)
    a_in_regs = s.a.buffer.scope == "fragment"
    _check_atom_starts(s.b, not s.trans_b, [w * lay.wn + ni * instr.n for w in range(plan.warps_n)
                                            for ni in range(lay.atoms_n)], instr.n)
    if not a_in_regs:
        _check_atom_starts(s.a, s.trans_a, [w * lay.wm + mi * instr.m for w in range(plan.warps_m)
                                            for mi in range(lay.atoms_m)], instr.m)
    fenced = (c_local,) + ((ctx.local_of[s.a.buffer],) if a_in_regs else ())
    out: list = []
    rings = ctx.plans.rings
    if any(r.buffer.scope == "shared" and not (r.buffer in rings and rings[r.buffer].tma) for r in (s.a, s.b)):
        # an operand written by ordinary stores or cp.async (the generic proxy): every thread orders
        # its own writes before the async proxy's reads (the proxy fence), then the barrier hands
        # them to the issuing warpgroups (a named barrier inside a thread partition); TMA-filled
        # rings are written by the async proxy and need neither
        out += [th.FenceProxyAsync(loc=s.loc), th.Barrier(loc=s.loc)]
    out.append(th.WgmmaFence(fenced, loc=s.loc))
    for kk in range(k_total // instr.k):
        k0 = kk * instr.k
        b_ops = [_wgmma_operand(ctx, s.b, b_starts, bool(s.trans_b), wni * lay.wn + ni * instr.n, k0)
                 for ni in range(lay.atoms_n)]
        for mi in range(lay.atoms_m):
            if a_in_regs:
                a_op = (ctx.local_of[s.a.buffer], ctx.layouts[s.a.buffer].reg(mi, kk, 0))
            else:
                a_op = _wgmma_operand(ctx, s.a, a_starts, not s.trans_a, wmi * lay.wm + mi * instr.m, k0)
            for ni, b_op in enumerate(b_ops):
                scale_d = 0 if s.clear_accum and kk == 0 else 1
                out.append(th.Wgmma(instr, (c_local, lay.reg(mi, ni, 0)), a_op, b_op, scale_d, loc=s.loc))
    out += [th.WgmmaCommit(loc=s.loc), th.WgmmaWait(ctx.plans.wgmma_in_flight.get(s, 0), fenced, loc=s.loc)]
    return out


def lower_gemm(ctx: LoweringContext, s: t.Gemm, env: Env) -> list:
    plan = ctx.gemm_plans[s]
    out: list = [th.Comment(f"gemm {s.a.buffer.name} x {s.b.buffer.name} -> {s.c.buffer.name} ({plan.kind})")]
    c_local = ctx.local_of[s.c.buffer]
    lay = ctx.layouts[s.c.buffer]
    if plan.family == "wgmma":
        return out + _lower_wgmma(ctx, s, plan, lay, c_local, env)
    out.extend(_clear(s, lay, c_local))
    if plan.kind == "simt":
        a_starts = tuple(lower_expr(ctx, x, env) for x in s.a.starts)
        b_starts = tuple(lower_expr(ctx, x, env) for x in s.b.starts)
        staged = {}
        if s.a.buffer.scope == "fragment":
            # no matrix instruction takes this A from registers (float32 on NVIDIA): each thread needs
            # whole rows of A, which other threads hold, so A is written row-major to a shared scratch
            # (between barriers, as a layout conversion) and the multiply-adds read it there
            from .lower_parallel import convert_through_shared

            inner = env.child()
            inner.frag_redirect = dict(env.frag_redirect)
            out.extend(convert_through_shared(ctx, s.a.buffer, inner, s.loc))
            staged = inner.frag_redirect
        out.extend(_simt(ctx, s, plan, lay, c_local, a_starts, b_starts, staged))
        return out
    g = _MmaGemm(ctx, s, env)
    if plan.family in ("mfma", "wmma"):  # AMD: vector operand reads, K pairing (lower_gemm_amd.py)
        from .lower_gemm_amd import lower_amd_mma

        return out + lower_amd_mma(ctx, s, env, g)
    a_frag, b_frag, decls = g.new_frags()
    out.extend(decls)
    a_starts, b_starts = g.starts(s.a), g.starts(s.b)
    for kk in range(g.ksteps):
        out.extend(g.load(kk, a_frag, b_frag, a_starts, b_starts))
        out.extend(g.mma(kk, a_frag, b_frag))
    return out


def prefetch_supported(ctx: LoweringContext, s: t.Gemm) -> bool:
    plan = ctx.gemm_plans.get(s)
    if plan is None or plan.family != "mma.sync" or s.a.buffer.scope != "shared" or s.clear_accum:
        return False
    if ctx.target.vendor != "nvidia":
        # on CDNA the double-buffered loop made the compiler shuttle accumulators between AGPRs and
        # VGPRs inside the loop (seen in the disassembly); keep AMD on the plain mainloop
        return False
    k_total = s.a.shape[0] if s.trans_a else s.a.shape[1]
    if (k_total // plan.instr.k) % 2:
        return False
    # double-buffered operands must fit next to the accumulators without spilling
    lay, instr = ctx.layouts[s.c.buffer], plan.instr
    acc = lay.num_regs * dt.bits(s.c.buffer.dtype) // 32
    frags = (lay.atoms_m * instr.a_elems * dt.bits(instr.a_dtype) + lay.atoms_n * instr.b_elems
             * dt.bits(instr.b_dtype)) // 32
    budget = ctx.target.registers_per_thread
    min_blocks = ctx.options.get("tw.min_blocks_per_sm") if ctx.options else None
    if min_blocks:  # an occupancy request caps the registers of each thread
        budget = min(budget, ctx.target.register_file_per_sm // (ctx.kernel.num_threads * int(min_blocks)))
    # ~48 registers of addresses and loop state, a few more per unrolled K step (seen: 128x128x64 with
    # 4 K steps spilled at 255 registers while 128x128x32 fit)
    return acc + 2 * frags + 48 + 4 * (k_total // plan.instr.k) <= budget


def mainloop_gemm(ctx: LoweringContext, loop: t.For):
    """The gemm of ``loop``'s body that ``pipeline_loops`` recorded as a pipelined mainloop, or None."""
    body = loop.body.stmts if isinstance(loop.body, t.SeqStmt) else [loop.body]
    for s in body:
        if isinstance(s, t.Gemm) and s in ctx.plans.mainloops:
            return s
    return None


def lower_mainloop_prefetch(ctx: LoweringContext, s: t.Gemm, env: Env) -> list:
    """Before a prefetching mainloop: declare double-buffered operand fragments and load the first
    K step from the first ring slot (the statements before the loop have already waited for it and
    synchronized).  Nothing when the gemm is not prefetched."""
    if not prefetch_supported(ctx, s):
        return []
    ml = ctx.plans.mainloops[s]
    g = _MmaGemm(ctx, s, env)
    a0, b0, d0 = g.new_frags()
    a1, b1, d1 = g.new_frags()
    ctx.prefetch_frags[s.uid] = ((a0, b0), (a1, b1))
    slot = lower_expr(ctx, ml.first_slot, env)
    return [th.Comment(f"gemm {s.a.buffer.name} x {s.b.buffer.name}: operand prefetch"), *d0, *d1,
            *g.load(0, a0, b0, g.starts(s.a, slot), g.starts(s.b, slot))]


def lower_mainloop_body(ctx: LoweringContext, body, s: t.Gemm, env: Env, lower_stmts) -> list:
    """The body of a pipelined mainloop: ``[..., s, wait for the next slot, barrier, ...]``; the
    statements other than these three are lowered by ``lower_stmts(stmt, env)``."""
    stmts = body.stmts if isinstance(body, t.SeqStmt) else [body]
    i = next(k for k, x in enumerate(stmts) if x is s)
    if i + 2 >= len(stmts) or not isinstance(stmts[i + 2], th.Barrier):
        raise InternalError(f"the mainloop gemm {s.a.buffer.name} x {s.b.buffer.name} is not followed by a wait "
                            "and a barrier", "pipeline_loops", s.loc)
    out: list = []
    for x in stmts[:i]:
        out.extend(lower_stmts(x, env))
    # register-prefetched copies (targets or copies without cp.async) must land in shared memory
    # before the closing barrier, which the next iteration's reads rely on
    flushed: list = []
    if ctx.deferred:
        flushed, ctx.deferred[:] = list(ctx.deferred), []
    wait = lower_stmts(stmts[i + 1], env)
    if prefetch_supported(ctx, s):
        out.extend(_prefetching_step(ctx, s, env, flushed, wait, stmts[i + 2]))
    else:
        out.extend(lower_gemm(ctx, s, env) + flushed + wait + [stmts[i + 2]])
    for x in stmts[i + 3:]:
        out.extend(lower_stmts(x, env))
    return out


def _prefetching_step(ctx: LoweringContext, s: t.Gemm, env: Env, before_barrier, wait, barrier) -> list:
    """One iteration of a prefetching mainloop: K steps alternate between the two fragment buffers;
    while step kk computes, step kk+1 loads; the last step waits for the next ring slot (``wait``,
    lowered), synchronizes (which also frees the slot read in this iteration for the copies of the
    next one) and loads the next iteration's first step."""
    ml = ctx.plans.mainloops[s]
    g = _MmaGemm(ctx, s, env)
    bufs = ctx.prefetch_frags[s.uid]
    cur = (g.starts(s.a), g.starts(s.b))
    nxt_slot = lower_expr(ctx, ml.next_slot, env)
    nxt = (g.starts(s.a, nxt_slot), g.starts(s.b, nxt_slot))
    out: list = [th.Comment(f"gemm {s.a.buffer.name} x {s.b.buffer.name} (prefetching mainloop)")]
    for kk in range(g.ksteps):
        fa, fb = bufs[kk % 2]
        na, nb = bufs[(kk + 1) % 2]
        if kk + 1 < g.ksteps:
            out.extend(g.load(kk + 1, na, nb, *cur))
        else:
            out.extend(before_barrier)
            out.extend(wait)
            out.append(barrier)
            out.extend(g.load(0, na, nb, *nxt))
        out.extend(g.mma(kk, fa, fb))
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
    return vector_reads(flat, offs, nums, dst, dst_off, max(16 // dt.nbytes(buf.dtype), 1))


def vector_reads(flat, offs, nums, dst, dst_off: int, max_run: int, align_base: int = 0, lead_steps=()) -> list:
    """``dst[dst_off + e] = flat[offs[e]]`` for every ``e``, fused into vector reads (``VecCopy``) of
    up to ``max_run`` elements over runs whose offsets (``nums``: per-lane values, None when not
    known) are consecutive in every lane and aligned to the run, as are ``align_base + e`` and each
    of ``lead_steps`` (what another dim's step adds to the offsets)."""
    out = []
    e, n = 0, len(offs)
    while e < n:
        run = 1
        if nums[e] is not None:
            while run * 2 <= max_run and e + run * 2 <= n and (align_base + e) % (run * 2) == 0:
                cand = run * 2
                ok = all(nums[e + j] is not None and np.array_equal(nums[e + j], nums[e] + j) for j in range(cand))
                ok = ok and bool(np.all(nums[e] % cand == 0)) and all(x % cand == 0 for x in lead_steps)
                if not ok:
                    break
                run = cand
        if run > 1:
            out.append(th.VecCopy(dst, E.as_expr(dst_off + e), flat, offs[e], run))
        else:
            out.append(t.BufferStore(dst, (E.as_expr(dst_off + e),), E.Load(flat, (offs[e],))))
        e += run
    return out


def _simt(ctx, s, plan, lay, c_local, a_starts, b_starts, staged=None) -> list:
    """Scalar multiply-adds over K; operands in shared memory (``staged``: fragments -> the shared
    scratch holding them row-major)."""
    tm, tn = plan.tm, plan.tn
    ti, tj = ctx.tid // tn, ctx.tid % tn
    k_total = s.a.shape[0] if s.trans_a else s.a.shape[1]
    acc = c_local.dtype
    # A 16-bit (or narrower) float accumulator is summed in float32 over the whole gemm and rounded
    # into C once: rounding after every multiply-add loses ~log2(K) bits (one fp16 rounding per
    # product leaves >10% of a K=768 result off by >1%), while tensor cores with f16 accumulators
    # round once per instruction and the interpreter once per gemm — this matches the interpreter.
    narrow = dt.is_float(acc) and dt.bits(acc) < 32
    work = "float32" if narrow else acc
    kv = E.Var(ctx.fresh("kk"), "int32", kind="loop")
    a_vals = ctx.local_buffer(ctx.fresh("av"), lay.per_m, work)
    b_vals = ctx.local_buffer(ctx.fresh("bv"), lay.per_n, work)
    body = []

    def read(region, starts, pos):
        buf = region.buffer
        idx = _tile_index(region, starts, pos)
        if buf.scope == "shared":
            return E.Load(ctx.shared_flat(buf), (ctx.shared_offset(buf, idx),))
        if staged and buf in staged:
            return E.Load(staged[buf], (ctx.strided_offset(buf, idx),))
        raise InternalError(f"SIMT gemm operand {buf.name} is in {buf.scope} memory, not shared", "lower_gemm")

    for a in range(lay.per_m):
        m = ti + tm * a
        pos = (kv, m) if s.trans_a else (m, kv)
        body.append(t.BufferStore(a_vals, (E.as_expr(a),), E.cast(work, read(s.a, a_starts, pos))))
    for b in range(lay.per_n):
        n = tj + tn * b
        pos = (n, kv) if s.trans_b else (kv, n)
        body.append(t.BufferStore(b_vals, (E.as_expr(b),), E.cast(work, read(s.b, b_starts, pos))))
    n_acc = lay.per_m * lay.per_n
    sums = ctx.local_buffer(ctx.fresh("acc32"), n_acc, "float32") if narrow else c_local
    for a in range(lay.per_m):
        for b in range(lay.per_n):
            r = a * lay.per_n + b
            cur = E.Load(sums, (E.as_expr(r),))
            prod = E.Load(a_vals, (E.as_expr(a),)) * E.Load(b_vals, (E.as_expr(b),))
            body.append(t.BufferStore(sums, (E.as_expr(r),), cur + prod))
    kind = "unroll" if k_total <= 32 else "serial"
    loop = t.For(kv, E.as_expr(0), E.as_expr(k_total), t.SeqStmt(body), kind, loc=s.loc)
    if not narrow:
        return [th.LocalDecl(a_vals), th.LocalDecl(b_vals), loop]
    init = [t.BufferStore(sums, (E.as_expr(r),), E.cast("float32", E.Load(c_local, (E.as_expr(r),))))
            for r in range(n_acc)]
    back = [t.BufferStore(c_local, (E.as_expr(r),), E.cast(acc, E.Load(sums, (E.as_expr(r),))))
            for r in range(n_acc)]
    return [th.LocalDecl(a_vals), th.LocalDecl(b_vals), th.LocalDecl(sums), *init, loop, *back]
