"""``T.reduce_*`` lowering (part of ``lower_to_threads``).

1. Each thread folds the source registers of each destination register (the ``ReducedLayout``
   groups), applying ``abs`` first for abssum/absmax.
2. Threads holding the same destination element differ in a set of thread-index bits
   (``sharing_masks``).  Bits inside a warp/wave are combined with XOR shuffles; bits across
   warps go through a shared-memory scratch: every thread writes its partials, a barrier, each
   thread folds in the partials of its partners ``tid ^ m`` for every combination of the
   cross-warp bits, and a second barrier before the scratch can be reused.
3. With ``clear=False`` the old destination value is folded in last.
With ``nan_propagate`` the combine is a select on ``isnan`` that names each operand twice: the folds
store every step (a nested expression would double per element), and the partner's value is
shuffled into a register before the select (a shuffle inside ``?:`` runs only in the lanes taking
that side, so a lane holding NaN would skip it and its partner would read an undefined value).
Registers a padded layout does not fill contribute the operation's identity.  When the holders of
one result are not paired by thread-index bits, or the source layout groups its registers
differently in different threads (no ``ReducedLayout``), the source goes through shared memory and
each thread folds the results it holds with a loop.
"""

from __future__ import annotations

import itertools
import math

from ..errors import CompileError
from ..ir import expr as E
from ..ir import thread as th
from ..ir import tile as t
from ..ir.layout import ReducedLayout, sharing_masks
from ..ir.reducer import combine
from .lower_exprs import Env
from .lowering_context import LoweringContext

_BITWISE = {"bitand": "&", "bitor": "|", "bitxor": "^"}  # TileLang's reduce_bitand/bitor/bitxor (integers)


def _identity(op: str, dtype: str):
    if op in _BITWISE:
        return E.Const(-1 if op == "bitand" else 0, dtype)
    if op in ("sum", "abssum"):
        return E.Const(0, dtype)
    if op in ("max", "absmax"):
        return E.Const(-math.inf, dtype) if dtype.startswith(("float", "bfloat")) else E.Const(-(2**31), dtype)
    return E.Const(math.inf, dtype) if dtype.startswith(("float", "bfloat")) else E.Const(2**31 - 1, dtype)


def _combine(op: str, nan_propagate: bool, a, b):
    return combine(op, a, b, nan_propagate)


def lower_reduce(ctx: LoweringContext, s: t.Reduce, env: Env) -> list:
    if s.src.scope != "fragment" or s.dst.scope != "fragment":
        raise CompileError("T.reduce source and destination must be fragments", s.loc,
                           hint="T.copy a shared tile into a T.alloc_fragment buffer first")
    src_l, dst_l = ctx.layouts[s.src], ctx.layouts[s.dst]
    src_local, dst_local = ctx.local_of[s.src], ctx.local_of[s.dst]
    final_dst = None
    natural = isinstance(dst_l, ReducedLayout) and dst_l.src is src_l and dst_l.dim == s.dim
    if not natural and _groups_registers(src_l, s):
        # a destination laid out otherwise (a T.Fragment annotation) whose registers hold what the reduced
        # source layout's would: reduce straight into it
        red = ReducedLayout(src_l, s.dim, s.dst.shape)
        if red.same_as(dst_l):
            dst_l, natural = red, True
    if not natural and not _groups_registers(src_l, s):
        # threads group the source registers of one result differently (a padded layout whose rows
        # straddle rounds differently per thread): fold each result from shared memory, straight into
        # the destination's own layout
        out = [th.Comment(f"reduce_{s.op} {s.src.name} dim={s.dim} -> {s.dst.name}")]
        part = ctx.local_buffer(ctx.fresh("red"), dst_l.num_regs, s.dst.dtype)
        out.append(th.LocalDecl(part))
        out.extend(_reduce_through_shared(ctx, s, src_l, src_local, dst_l, part))
        out.extend(_finish(ctx, s, dst_l, part, dst_local))
        return out
    if not natural:
        # the destination is laid out differently (set by other uses): reduce into a temporary in the
        # natural layout, then move the values over through shared memory
        final_dst = (dst_local, dst_l)
        dst_l = ReducedLayout(src_l, s.dim, s.dst.shape)
        dst_local = ctx.local_buffer(ctx.fresh(f"{s.dst.name}_red"), dst_l.num_regs, s.dst.dtype)
    acc_t = s.dst.dtype
    out: list = [th.Comment(f"reduce_{s.op} {s.src.name} dim={s.dim} -> {s.dst.name}")]
    if final_dst is not None:
        out.append(th.LocalDecl(dst_local))
        if not s.clear:
            out.extend(_move_through_shared(ctx, s.dst, final_dst[0], final_dst[1], dst_local, dst_l))
    part = ctx.local_buffer(ctx.fresh("red"), dst_l.num_regs, acc_t)
    out.append(th.LocalDecl(part))
    valid_np = src_l.table >= 0
    # tw.reduce_tree: each thread's fold as a balanced tree (log2(n) dependent steps instead of n: a
    # softmax's row max and sum at 32 registers a row are chains that wait on each other's latency);
    # max/min give the same result in any order, sums round differently.  Not with nan_propagate
    # (its one-store-a-step fold).
    tree = bool(ctx.options.get("tw.reduce_tree")) and not s.nan_propagate
    for r2, group in enumerate(dst_l.groups):
        acc = None
        leaves = []
        for r in group:
            v = E.cast(acc_t, E.Load(src_local, (E.as_expr(r),)))
            if s.op in ("abssum", "absmax"):
                v = E.call("abs", [v])
            if not valid_np[:, r].all():
                valid = src_l.valid_expr(ctx.tid, r) if hasattr(src_l, "valid_expr") else None
                if valid is None:
                    raise CompileError("internal: partial register without validity predicate", s.loc)
                v = E.select(valid, v, _identity(s.op, acc_t))
            if s.nan_propagate and acc is not None:
                # one store a step: the NaN test names each operand twice, so a nested expression
                # would double in size with every element folded
                out.append(t.BufferStore(part, (E.as_expr(r2),), acc))
                acc = E.Load(part, (E.as_expr(r2),))
            if tree:
                leaves.append(v)
                continue
            acc = v if acc is None else _combine(s.op, s.nan_propagate, acc, v)
        if tree:
            while len(leaves) > 1:  # pairs of neighbours, level by level
                paired = [_combine(s.op, False, a, b) for a, b in zip(leaves[0::2], leaves[1::2])]
                leaves = paired + leaves[len(paired) * 2:]
            acc = leaves[0]
        out.append(t.BufferStore(part, (E.as_expr(r2),), acc))
    from .lower_parallel import replication_bits

    # threads that are replicas of one another in the source hold identical partials: folding
    # them together would count their elements twice
    src_replicas = set(replication_bits(src_l, ctx.nthreads))
    masks = [m for m in sharing_masks(dst_l) if m not in src_replicas]
    tab = dst_l.table
    tids = ctx.tid_np
    if not _xor_structured(dst_l, masks, tab, tids, ctx.nthreads):
        # threads sharing a result are not paired by thread-index bits (e.g. rows of 192 elements
        # over 128 threads): reduce through shared memory instead
        out.extend(_reduce_through_shared(ctx, s, src_l, src_local, dst_l, part))
        out.extend(_finish(ctx, s, dst_l, part, dst_local))
        if final_dst is not None:
            out.extend(_move_through_shared(ctx, s.dst, dst_local, dst_l, final_dst[0], final_dst[1]))
        return out
    ws = ctx.target.warp_size
    inner = [m for m in masks if m < ws]
    cross = [m for m in masks if m >= ws]
    theirs = None
    if s.nan_propagate and inner:
        # the partner's value is shuffled into a register first: the NaN-propagating combine is a
        # select, and a shuffle in one of its arms runs only in the lanes that take that arm (C's ?:),
        # so a lane holding NaN would not take part and its partner would read an undefined value
        theirs = ctx.local_buffer(ctx.fresh("red_peer"), dst_l.num_regs, acc_t)
        out.append(th.LocalDecl(theirs))
    for m in inner:
        for r2 in range(dst_l.num_regs):
            cur = E.Load(part, (E.as_expr(r2),))
            peer = E.Shuffle(cur, m, ws)
            if theirs is not None:
                out.append(t.BufferStore(theirs, (E.as_expr(r2),), peer))
                peer = E.Load(theirs, (E.as_expr(r2),))
            v = _combine(s.op, s.nan_propagate, cur, peer)
            out.append(t.BufferStore(part, (E.as_expr(r2),), v))
    if cross:
        nreg = dst_l.num_regs
        ctx.begin_scratch()
        scratch = ctx.alloc_scratch(ctx.fresh("red_scratch"), ctx.nthreads * nreg, acc_t)
        out.append(ctx.scratch_decl(scratch))
        out.append(th.Barrier())
        for r2 in range(nreg):
            out.append(t.BufferStore(scratch, (ctx.tid * nreg + r2,), E.Load(part, (E.as_expr(r2),))))
        out.append(th.Barrier())
        combos = []
        for k in range(1, len(cross) + 1):
            for sub in itertools.combinations(cross, k):
                x = 0
                for m in sub:
                    x |= m
                combos.append(x)
        # fold the partners' partials in one fixed order (lowest thread first), so that every
        # thread holding the result computes bit-identical values
        all_cross = 0
        for m in cross:
            all_cross |= m
        base = ctx.tid & ~all_cross
        for r2 in range(nreg):
            acc = None
            for x in sorted([0] + combos):
                v = E.Load(scratch, ((base | x) * nreg + r2,))
                if s.nan_propagate and acc is not None:  # one store a step, as in the fold above
                    out.append(t.BufferStore(part, (E.as_expr(r2),), acc))
                    acc = E.Load(part, (E.as_expr(r2),))
                acc = v if acc is None else _combine(s.op, s.nan_propagate, acc, v)
            out.append(t.BufferStore(part, (E.as_expr(r2),), acc))
        out.append(th.Barrier())
    out.extend(_finish(ctx, s, dst_l, part, dst_local))
    if final_dst is not None:
        out.extend(_move_through_shared(ctx, s.dst, dst_local, dst_l, final_dst[0], final_dst[1]))
    return out


def _groups_registers(src_l, s) -> bool:
    """Whether ``ReducedLayout(src_l, dim)`` exists (one register grouping for every thread)."""
    try:
        ReducedLayout(src_l, s.dim, s.dst.shape)
    except ValueError:
        return False
    return True


def _finish(ctx, s, dst_l, part, dst_local) -> list:
    """Store the reduced values, folding in the old destination when ``clear=False``."""
    out = []
    for r2 in range(dst_l.num_regs):
        v = E.Load(part, (E.as_expr(r2),))
        if not s.clear:
            v = _combine(s.op, s.nan_propagate, E.Load(dst_local, (E.as_expr(r2),)), v)
        out.append(t.BufferStore(dst_local, (E.as_expr(r2),), E.cast(s.dst.dtype, v)))
    return out


def _xor_structured(dst_l, masks, tab, tids, nthreads) -> bool:
    """Every set of threads holding one result element is {t ^ combination of masks}, with the
    element in the same register in each (what the shuffle / exchange tree needs)."""
    import numpy as np

    for m in masks:
        # with a thread count that is not a power of two, some threads have no partner tid ^ m
        if m >= nthreads or ((tids ^ m) >= nthreads).any() or not (tab[tids, :] == tab[tids ^ m, :]).all():
            return False
    span = 0
    for m in masks:
        span |= m
    reg_of = dst_l.reg_of
    for f in range(reg_of.shape[1]):
        holders = np.nonzero(reg_of[:, f] >= 0)[0]
        if len(holders) and len({int(h) & ~span for h in holders}) * (1 << len(masks)) != len(holders):
            return False
    return True


def _reduce_through_shared(ctx, s, src_l, src_local, dst_l, part) -> list:
    """General reduction: the whole source tile goes to shared memory (row-major); then each result
    element is folded once, by one thread (result ``q`` by thread ``q % threads``), with a loop over
    the reduced dimension into a second scratch; then every thread reads the results it holds (in
    ``dst_l``, whatever layout that is).

    Folding each result once (not once per register that holds it, in every thread that holds it)
    keeps the code at one loop per ``ceil(results / threads)`` instead of one per register: a
    (32, 127) tile over 128 threads has 32 registers a thread, and 32 loops of 127 that NVRTC
    unrolls took it seconds to compile.  The fold order (index 0 upwards) is the same."""
    from .lower_parallel import _valid_expr

    src = s.src
    acc_t = s.dst.dtype
    numel = 1
    for x in src.shape:
        numel *= x
    extent = src.shape[s.dim]
    nres = numel // extent
    ctx.begin_scratch()
    scratch = ctx.alloc_scratch(ctx.fresh(f"{src.name}_red"), numel, acc_t)
    results = ctx.alloc_scratch(ctx.fresh(f"{src.name}_res"), nres, acc_t)
    out = [th.Comment("reduction through shared memory"), ctx.scratch_decl(scratch), ctx.scratch_decl(results),
           th.Barrier()]

    def flat(idx):
        return ctx.strided_offset(src, idx)

    def result_flat(idx):  # row-major position among the results of a full source index
        off = E.as_expr(0)
        for d, x in enumerate(idx):
            if d != s.dim:
                off = off * src.shape[d] + x
        return off

    for r in range(src_l.num_regs):
        st = t.BufferStore(scratch, (flat(src_l.index(ctx.tid, r)),),
                           E.cast(acc_t, E.Load(src_local, (E.as_expr(r),))))
        valid = _valid_expr(src_l, ctx, r)
        out.append(st if valid is None else t.IfThenElse(valid, st, None))
    out.append(th.Barrier())
    acc = ctx.local_buffer(ctx.fresh("fold"), 1, acc_t)
    out.append(th.LocalDecl(acc))
    zero = E.as_expr(0)
    for k in range(-(-nres // ctx.nthreads)):
        q = ctx.tid + k * ctx.nthreads
        full, rem = [], q
        for d in reversed(range(len(src.shape))):
            if d == s.dim:
                continue
            n = src.shape[d]
            full.append(rem % n if n > 1 else zero)
            rem = rem // n
        full.reverse()
        j = E.Var(ctx.fresh("rj"), "int32", kind="loop")
        full.insert(s.dim, j)
        v = E.Load(scratch, (flat(full),))
        if s.op in ("abssum", "absmax"):
            v = E.call("abs", [v])
        body = t.SeqStmt([
            t.BufferStore(acc, (zero,), _identity(s.op, acc_t)),
            t.For(j, zero, E.as_expr(extent),
                  t.BufferStore(acc, (zero,), _combine(s.op, s.nan_propagate, E.Load(acc, (zero,)), v)),
                  "serial"),
            t.BufferStore(results, (q,), E.Load(acc, (zero,))),
        ])
        last = (k + 1) * ctx.nthreads > nres
        out.append(t.IfThenElse(q < nres, body, None) if last else body)
    out.append(th.Barrier())
    for r2 in range(dst_l.num_regs):
        # the result this register holds, in the destination's own layout (whatever layout that is)
        kept = list(dst_l.index(ctx.tid, r2))[: len(src.shape) - 1]
        at = result_flat(kept[: s.dim] + [zero] + kept[s.dim:])
        st = t.BufferStore(part, (E.as_expr(r2),), E.Load(results, (at,)))
        valid = _valid_expr(dst_l, ctx, r2)
        out.append(st if valid is None else t.IfThenElse(valid, st, None))
    out.append(th.Barrier())
    return out


def _move_through_shared(ctx, buf, src_local, src_l, dst_local, dst_l) -> list:
    """Copy a fragment's values between two register layouts via a row-major shared scratch."""
    numel = 1
    for x in buf.shape:
        numel *= x
    ctx.begin_scratch()
    scratch = ctx.alloc_scratch(ctx.fresh(f"{buf.name}_xchg"), numel, buf.dtype)
    out = [ctx.scratch_decl(scratch), th.Barrier()]

    def flat(idx):
        return ctx.strided_offset(buf, idx)

    valid_src = src_l.table >= 0
    for r in range(src_l.num_regs):
        st = t.BufferStore(scratch, (flat(src_l.index(ctx.tid, r)),), E.Load(src_local, (E.as_expr(r),)))
        if not valid_src[:, r].all():
            v = src_l.valid_np(ctx.tid_np, r)
            st = t.IfThenElse(_tid_in(ctx, v), st, None)
        out.append(st)
    out.append(th.Barrier())
    valid_dst = dst_l.table >= 0
    for r in range(dst_l.num_regs):
        st = t.BufferStore(dst_local, (E.as_expr(r),), E.Load(scratch, (flat(dst_l.index(ctx.tid, r)),)))
        if not valid_dst[:, r].all():
            st = t.IfThenElse(_tid_in(ctx, valid_dst[:, r]), st, None)
        out.append(st)
    out.append(th.Barrier())
    return out


def _tid_in(ctx, mask):
    """A condition true for the threads where ``mask`` is set (a contiguous range is expected)."""
    import numpy as np

    idx = np.nonzero(mask)[0]
    if len(idx) and idx[-1] - idx[0] + 1 == len(idx):
        return E.binary("and", ctx.tid >= int(idx[0]), ctx.tid <= int(idx[-1]))
    raise CompileError("internal: non-contiguous set of threads holding a partial register")
