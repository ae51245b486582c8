"""Pass ``lower_to_threads``: Tile IR -> thread IR (``ThreadKernel``).

Needs: Tile IR after ``pipeline_loops``, ``expand_tile_ops``, ``infer_layouts`` and
``insert_barriers``.
Guarantees: a ``ThreadKernel`` whose body is per-thread code: fragments are register arrays,
shared buffers are placed in the block's dynamic shared memory, ``T.Parallel`` loops are unrolled
over each thread's registers (vectorized where contiguous), gemms are matrix instructions (or SIMT
multiply-adds), reductions are register folds plus shuffles / shared-memory exchange, global ->
shared copies are async copies, TMA loads (with the kernel's ``tensor_maps``) or vector
moves.  Scalar statements outside ``T.Parallel`` that do
not depend on the thread index run in every thread for registers, and in thread 0 only for
stores and atomics to shared/global memory (they would otherwise be repeated per thread).
Shared memory over the target's budget is refused with a hint.
A global ``Alloc`` with an address (``T.make_tensor`` on a pointer table entry) becomes a ``GlobalDecl``
where it stands: its accesses address it through its strides like a tensor parameter.
A ``ThreadPartition`` becomes a branch on its thread range whose body is lowered for that thread
set (``LoweringContext.thread_set``: a partition-local thread index, so copies, layouts, gemms
and reductions are spread over those threads only); its barriers become a named barrier over its
threads (NVIDIA), or stay block barriers outside the range guard (AMD, no named barriers).
Which values are per-thread is the ``ir.uniformity`` analysis.
"""

from __future__ import annotations

from ..errors import CompileError, InternalError
from ..ir import dtype as dt
from ..ir import expr as E
from ..ir import thread as th
from ..ir import tile as t
from ..ir.tile_ops import hook, register
from ..ir.visitor import free_vars, loads_in, map_stmt, walk
from . import lower_reducer  # noqa: F401  (registers the reducer ops' lowering)
from .check_clusters import cluster_dims_for
from .check_target_limits import shared_overflow_error
from .lower_copy import lower_copy_g2s, lower_copy_tma
from .lower_copy_tma_store import lower_copy_tma_store, lower_tma_store_wait
from .lower_exprs import Env, lower_expr
from .lower_gemm import lower_gemm, lower_mainloop_body, lower_mainloop_prefetch, mainloop_gemm
from .lower_gemm_amd import unpad_operand_layouts
from .lower_parallel import UNGUARDABLE, lower_parallel
from .lower_reduce import lower_reduce
from .lower_vectorized import lower_vectorized
from .lowering_context import LoweringContext


def lower_to_threads(func: t.PrimFunc, pctx) -> th.ThreadKernel:
    kernels = []
    walk(func.body, lambda s: kernels.append(s) if isinstance(s, t.Kernel) else None)
    kernel = kernels[0]
    ctx = LoweringContext(func, kernel, pctx.target, pctx.options)
    lower = _StmtLowering(ctx)
    prologue, block_vars = _block_remap(kernel)
    body = prologue + lower.stmts(kernel.body, Env())
    ctx.shared_top = ctx.finish_shared()
    at_launch = ctx.shared_at_launch()
    fixed = ctx.shared_top if at_launch is None else at_launch[2]  # what precedes a buffer sized at launch
    over = fixed > pctx.target.max_shared_bytes or (at_launch is not None and fixed >= pctx.target.max_shared_bytes)
    if over and unpad_operand_layouts(func.plans.shared_layouts):
        return lower_to_threads(func, pctx)  # padded AMD operand tiles did not fit: XOR-swizzled ones
    if over:
        sizes = [(b, flat.shape[0] * dt.nbytes(flat.dtype)) for b, flat in ctx.shared_of.items()
                 if b.static_shape() is not None]
        raise shared_overflow_error(kernel, sizes, fixed, pctx.target)
    name = (func.name if func.name.isidentifier() else "tw") + "_kernel"
    return th.ThreadKernel(
        name=name,
        params=list(func.params),
        dyn_vars=list(func.dyn_vars),
        grid=tuple(kernel.grid),
        num_threads=kernel.num_threads,
        shared_bytes=(ctx.shared_top + 15) // 16 * 16,
        body=t.SeqStmt(body),
        thread_var=ctx.tid,
        block_vars=block_vars,
        target=pctx.target,
        # a kernel with setmaxnreg asks for one block per SM (warp_specialize_loop): ptxas needs the
        # register count at entry, which __launch_bounds__(threads, 1) fixes
        attrs={"source_func": func.name,
               "min_blocks_per_sm": pctx.options.get("tw.min_blocks_per_sm") or kernel.attrs.get("min_blocks_per_sm"),
               "shared_at_launch": at_launch,
               "cluster_dims": cluster_dims_for(kernel, pctx.target),
               # codegen/cuda.py: one broadcast per distinct warp_uniform value of a loop or branch body
               **({"warp_uniform": True} if kernel.attrs.get("warp_uniform") else {})},
        tensor_maps=list(ctx.tensor_maps),
    )


def _block_remap(kernel: t.Kernel):
    """Block-index rasterization (``T.use_swizzle``): launched blocks walk a panel of
    ``panel_size`` columns (or rows) before moving on, so neighbours share tiles in L2."""
    swz = None

    def f(s):
        nonlocal swz
        if isinstance(s, t.Annotate) and s.kind == "swizzle":
            swz = s

    walk(kernel.body, f)
    user = kernel.block_vars
    if swz is None or len(kernel.grid) < 2:
        return [], user
    raw = tuple(E.Var(f"{v.name}_launch", "int32", kind="block") for v in user)
    gx, gy = kernel.grid[0], kernel.grid[1]
    panel = swz.attrs["panel_size"]
    if swz.attrs["order"] == "row":
        fast, slow, nfast, nslow = raw[0], raw[1], gx, gy
    else:
        fast, slow, nfast, nslow = raw[1], raw[0], gy, gx
    lin = slow * nfast + fast
    per_panel = nslow * panel
    first = (lin // per_panel) * panel
    width = E.emin(nfast - first, panel)
    in_panel = lin % per_panel
    new_fast = first + in_panel % width
    new_slow = in_panel // width
    if swz.attrs["order"] == "row":
        binds = [(user[0], new_fast), (user[1], new_slow)]
    else:
        binds = [(user[1], new_fast), (user[0], new_slow)]
    pro = [t.LetStmt(v, e) for v, e in binds]
    pro += [t.LetStmt(u, r) for u, r in zip(user[2:], raw[2:])]
    return pro, raw


def _sink_guard(stmts: list, cond, part: t.ThreadPartition, ctx: LoweringContext) -> list:
    """``stmts`` run by the whole block with everything but barriers (and the declarations and
    lets later statements see) guarded by ``cond``.  Loops and branches that hold a barrier stay
    unguarded, so their bounds and conditions must be the same for every thread of the block."""
    out: list = []
    run: list = []

    def flush():
        if run:
            out.append(t.IfThenElse(cond, t.SeqStmt(list(run)) if len(run) > 1 else run[0], None))
            run.clear()

    def block_uniform(e) -> bool:
        return not any(isinstance(v, E.Var) and (v.kind == "thread" or v.name.startswith("ptid"))
                       for v in free_vars(e)) and not any(ld.buffer.scope == "local" for ld in loads_in(e))

    for x in stmts:
        if isinstance(x, t.SeqStmt):
            flush()
            out.extend(_sink_guard(x.stmts, cond, part, ctx))
        elif isinstance(x, (t.LetStmt, th.LocalDecl, th.SharedDecl, th.GlobalDecl, th.Comment)):
            flush()
            out.append(x)
        elif not _has_barrier([x]):
            run.append(x)
        elif isinstance(x, th.Barrier):
            flush()
            out.append(x)
        elif isinstance(x, t.For) and block_uniform(x.start) and block_uniform(x.extent):
            flush()
            out.append(t.For(x.var, x.start, x.extent, t.SeqStmt(_sink_guard([x.body], cond, part, ctx)), x.kind,
                             x.num_stages, x.loc, dict(x.attrs)))
        elif isinstance(x, t.IfThenElse) and block_uniform(x.cond):
            flush()
            els = None if x.else_body is None else t.SeqStmt(_sink_guard([x.else_body], cond, part, ctx))
            out.append(t.IfThenElse(x.cond, t.SeqStmt(_sink_guard([x.then_body], cond, part, ctx)), els, x.loc))
        else:
            raise CompileError(
                f"thread partition {part.role} synchronizes its threads inside control flow that differs between "
                f"threads; {ctx.target} has no named barriers for a subset of the block", part.loc,
                hint="on AMD GPUs let the whole block perform these tile operations (no `if` on the thread index or "
                "T.ws around them)")
    flush()
    return out


def _has_barrier(stmts) -> bool:
    found = []
    for x in stmts:
        walk(x, lambda n: found.append(n) if isinstance(n, th.Barrier) else None)
    return bool(found)


def _thread_dependent(ctx: LoweringContext, e) -> bool:
    """An expression whose value may differ between the threads of the set being lowered (the
    ``ir.uniformity`` analysis: thread index, per-thread vars and locals, fragments)."""
    return not ctx.uniformity.is_uniform(e, ctx.region)


def _uses_thread(ctx: LoweringContext, s) -> bool:
    from ..ir.verifier import exprs_of

    found = []
    walk(s, lambda st: found.extend(e for e in exprs_of(st) if _thread_dependent(ctx, e)))
    return bool(found)


class _StmtLowering:
    def __init__(self, ctx: LoweringContext):
        self.ctx = ctx

    def stmts(self, s, env: Env) -> list:
        if s is None:
            return []
        if isinstance(s, t.SeqStmt):
            out = []
            for x in s.stmts:
                out.extend(self.stmts(x, env))
            return out
        return self.stmt(s, env)

    def block(self, s, env: Env):
        body = self.stmts(s, env)
        return t.SeqStmt(body) if len(body) != 1 else body[0]

    def stmt(self, s, env: Env) -> list:
        ctx = self.ctx
        if isinstance(s, t.Alloc):
            return self.alloc(s, env)
        if isinstance(s, t.LetStmt):
            value = lower_expr(ctx, s.value, env, s.loc)
            if env.in_parallel:  # a T.Parallel body is emitted once per register group: one C name each
                v = E.Var(ctx.fresh(s.var.name), s.var.dtype, kind="let")
                env.sym[s.var] = v
                return [t.LetStmt(v, value, loc=s.loc)]
            return [t.LetStmt(s.var, value, loc=s.loc)]
        if isinstance(s, t.BufferStore):
            return self.store(s, env)
        if isinstance(s, t.IfThenElse):
            cond = lower_expr(ctx, s.cond, env, s.loc)
            inner = env.child()
            inner.thread_dep = env.thread_dep or _thread_dependent(ctx, s.cond)
            then_b = self.block(s.then_body, inner)
            else_b = self.block(s.else_body, inner.child()) if s.else_body is not None else None
            if isinstance(cond, E.Const):
                return [then_b] if cond.value else ([else_b] if else_b is not None else [])
            return [t.IfThenElse(cond, then_b, else_b, loc=s.loc)]
        if isinstance(s, t.ThreadPartition):
            return self.partition(s, env)
        if isinstance(s, t.For) and s.attrs.get("vectorized"):
            vectorized = lower_vectorized(ctx, s, env, lambda st, en: self.stmt(st, en), self.stored_by_thread0)
            if vectorized is not None:
                return vectorized
        if isinstance(s, t.For):
            inner = env.child()
            inner.thread_dep = env.thread_dep or _thread_dependent(ctx, s.start) or _thread_dependent(ctx, s.extent)
            gemm = mainloop_gemm(ctx, s)  # a pipelined gemm mainloop: the gemm lowering schedules it
            pre = lower_mainloop_prefetch(ctx, gemm, env) if gemm is not None else []
            saved = ctx.deferred, ctx.loop_prelude, ctx.deferrable
            ctx.deferred, ctx.loop_prelude = [], []
            ctx.deferrable = s.attrs.get("ring_buffers", frozenset())
            try:
                if gemm is not None:
                    body_stmts = lower_mainloop_body(ctx, s.body, gemm, inner, self.stmts)
                else:
                    body_stmts = self.stmts(s.body, inner)
                body_stmts = ctx.loop_prelude + body_stmts + ctx.deferred
            finally:
                ctx.deferred, ctx.loop_prelude, ctx.deferrable = saved
            body = t.SeqStmt(body_stmts) if len(body_stmts) != 1 else body_stmts[0]
            return pre + [t.For(s.var, lower_expr(ctx, s.start, env), lower_expr(ctx, s.extent, env), body,
                                "unroll" if s.kind == "unroll" else "serial", loc=s.loc, attrs=dict(s.attrs))]
        if isinstance(s, t.ParallelFor):
            e = env.child()
            e.in_parallel = True
            return lower_parallel(ctx, s, e, lambda st, en: self.stmt(st, en))
        lower_op = hook(type(s), "lower")  # tile ops: their lowerings, registered at the end of this file
        if lower_op is not None:
            return lower_op(self, s, env)
        if isinstance(s, (t.Annotate, t.Evaluate)):
            return []
        if isinstance(s, th.SetMaxNReg) and ctx.options.get("tw.setmaxnreg") is False:
            return []  # (T.disable_warp_group_reg_alloc: every warpgroup keeps the launch's register budget)
        if isinstance(s, (th.Barrier, th.AsyncCommit, th.AsyncWait, th.Comment, th.FenceProxyAsync, th.SetMaxNReg,
                          th.NamedBarrier, th.ClusterBarrier, th.GridDependency)):
            return [s]
        if isinstance(s, th.MbarrierArrive):
            return [th.MbarrierArrive(ctx.shared_flat(s.bar), lower_expr(ctx, s.index, env),
                                      s.count, None if s.expect_tx is None else lower_expr(ctx, s.expect_tx, env),
                                      s.elected, loc=s.loc,
                                      cta=None if s.cta is None else lower_expr(ctx, s.cta, env))]
        if isinstance(s, th.PrefetchL2):  # (T.prefetch_l2: the element's offset in the flat global buffer)
            return [th.PrefetchL2(lower_expr(ctx, s.load, env), loc=s.loc)]
        if isinstance(s, th.MbarrierExpectTx):
            return [th.MbarrierExpectTx(ctx.shared_flat(s.bar), lower_expr(ctx, s.index, env),
                                        lower_expr(ctx, s.nbytes, env), loc=s.loc)]
        if isinstance(s, th.WgmmaWait):  # placed in Tile IR by warp_specialize: fenced fragments -> registers
            return [th.WgmmaWait(s.pending, tuple(ctx.local_of.get(b, b) for b in s.fenced), loc=s.loc)]
        if isinstance(s, th.MbarrierInit):
            return [th.MbarrierInit(ctx.shared_flat(s.bar), s.count, loc=s.loc)]
        if isinstance(s, th.TmaStoreWait):  # placed by plan_tma_stores: the thread set's issuing thread waits
            return lower_tma_store_wait(ctx, s)
        if isinstance(s, th.MbarrierWait):
            return [th.MbarrierWait(ctx.shared_flat(s.bar), lower_expr(ctx, s.index, env),
                                    lower_expr(ctx, s.parity, env), loc=s.loc,
                                    phase=None if s.phase is None else lower_expr(ctx, s.phase, env))]
        if isinstance(s, t.Kernel):
            raise CompileError("nested kernels are not supported", s.loc)
        raise CompileError(f"internal: cannot lower {type(s).__name__}", s.loc)

    def partition(self, s: t.ThreadPartition, env: Env) -> list:
        """Threads base..base+count-1 run the body, planned for that set (``ctx.thread_set``); its
        barriers become a named barrier over those threads."""
        ctx = self.ctx
        if s.base == ctx.base and s.count == ctx.nthreads:
            return self.stmts(s.body, env)
        local = E.Var(ctx.fresh("ptid"), "int32", kind="let")
        with ctx.thread_set(s.base, s.count, local, s):
            body = [t.LetStmt(local, ctx.block_tid - s.base, loc=s.loc)] + self.stmts(s.body, env)
        if _has_barrier(body):
            if ctx.target.vendor != "nvidia":
                # no named barriers: every thread of the block runs the partition's barriers (block
                # barriers), only the work between them is guarded by the thread range
                return [th.Comment(f"thread partition {s.role}: threads {s.base}..{s.base + s.count - 1}")] + \
                    _sink_guard(body, s.cond(ctx.block_tid), s, ctx)
            bar_id = ctx.named_barrier_id(s.base, s.count, s.loc)
            body = [map_stmt(x, lambda n: th.NamedBarrier(bar_id, s.count, loc=n.loc)
                             if isinstance(n, th.Barrier) else None) for x in body]
        return [th.Comment(f"thread partition {s.role}: threads {s.base}..{s.base + s.count - 1}"),
                t.IfThenElse(s.cond(ctx.block_tid), t.SeqStmt(body), None, loc=s.loc)]

    def alloc(self, s: t.Alloc, env: Env) -> list:
        ctx, b = self.ctx, s.buffer
        if b.scope == "global":  # T.make_tensor on an address: a pointer declared where the call stands
            return [th.GlobalDecl(b, lower_expr(ctx, s.init, env, s.loc), loc=s.loc)]
        if b.scope == "shared":
            flat = ctx.shared_flat(b)
            if b.static_shape() is None:  # sized at launch: placed once the others are
                return [ctx.dynamic_shared_decl(flat, s.loc)]
            return [th.SharedDecl(flat, ctx.shared_offsets[flat], loc=s.loc)]
        if b.scope == "fragment":
            n = ctx.layouts[b].num_regs
        elif b.scope == "var":
            n = 1
        else:
            n = b.numel()
        local = ctx.local_buffer(b.name, n, b.dtype)
        if b.scope == "var":
            local.attrs["scalar"] = True  # one value, printed as a scalar local (codegen/base.py)
        ctx.local_of[b] = local
        out = [th.LocalDecl(local, loc=s.loc)]
        if s.init is not None:
            out.append(t.BufferStore(local, (E.as_expr(0),), lower_expr(ctx, s.init, env, s.loc), loc=s.loc))
        return out

    def store(self, s: t.BufferStore, env: Env) -> list:
        ctx, b = self.ctx, s.buffer
        value = lower_expr(ctx, s.value, env, s.loc)
        idx = tuple(lower_expr(ctx, i, env, s.loc) for i in s.indices)
        if b.scope == "fragment":
            reg = ctx.frag_register(b, idx, {ctx.tid: ctx.tid_np}, s.loc, env.active)
            return [t.BufferStore(ctx.local_of[b], (E.as_expr(reg),), value, loc=s.loc)]
        fb, off = ctx.flat_access(b, idx)
        st = t.BufferStore(fb, (off,), value, loc=s.loc)
        if self.stored_by_thread0(s, env):
            return [t.IfThenElse(ctx.tid == 0, st, None, loc=s.loc)]
        return [st]

    def stored_by_thread0(self, s: t.BufferStore, env: Env) -> bool:
        """A shared/global store that no thread index reaches (outside T.Parallel): thread 0 does it."""
        return s.buffer.scope in ("shared", "global") and not env.in_parallel and not env.thread_dep \
            and not _uses_thread(self.ctx, s)

    def atomic(self, s: t.Atomic, env: Env) -> list:
        """One ``AtomicRMW`` with the scope of the memory (a shared buffer is the block's) and the
        memory order asked for.  With ``return_prev`` the previous value lands in a register that
        ``s.result`` reads from for the statements that follow; a block-uniform atomic (done by
        thread 0 only) broadcasts that value to every thread through shared memory."""
        ctx = self.ctx
        if isinstance(s.value, t.Region):
            raise InternalError("tile atomic not expanded", "lower_to_threads", s.loc)
        idx = tuple(lower_expr(ctx, i, env, s.loc) for i in s.dst.starts)
        fb, off = ctx.flat_access(s.dst.buffer, idx)
        out: list = []
        result = None
        if s.result is not None:
            prev = ctx.local_buffer(ctx.fresh(s.result.name), 1, s.dst.buffer.dtype)
            out.append(th.LocalDecl(prev, loc=s.loc))
            result = (prev, E.as_expr(0))
        op = th.AtomicRMW(s.op, fb, off, lower_expr(ctx, s.value, env, s.loc), loc=s.loc,
                          scope="cta" if fb.scope == "shared" else "gpu", order=s.order, result=result)
        if env.in_parallel:
            if env.replica_guard is None:
                out.append(op)
            elif env.replica_guard is UNGUARDABLE:
                raise CompileError(
                    f"T.atomic_{s.op} in a T.Parallel loop whose positions are held by several threads each, in a "
                    "pattern no thread-index guard can reduce to one: the update would be applied more than once",
                    s.loc, hint="loop over a tile whose size is a multiple of the thread count, or guard the atomic "
                    "with `if T.get_thread_binding() < n:` outside a T.Parallel loop")
            elif result is not None:
                raise CompileError(
                    f"T.atomic_{s.op}(..., return_prev=True) in a T.Parallel loop whose positions are held by "
                    "several threads each: only one of them performs the update, the others would have no "
                    "previous value", s.loc,
                    hint="give each thread its own positions: a loop of at least threads x vector-width positions, "
                    "T.Parallel(..., coalesced_width=1), or a thread-indexed `if T.get_thread_binding() < n:`")
            else:
                out.append(t.IfThenElse(env.replica_guard, op, None, loc=s.loc))
        elif not env.thread_dep and not _uses_thread(ctx, s):
            # a block-uniform scalar atomic happens once, in thread 0
            if result is None:
                out.append(t.IfThenElse(ctx.tid == 0, op, None, loc=s.loc))
            else:
                out += self._broadcast_from_thread0(op, result[0], s.loc)
        else:
            out.append(op)
        if s.result is not None:
            env.sym[s.result] = E.Load(result[0], (E.as_expr(0),))
        return out

    def _broadcast_from_thread0(self, op: th.AtomicRMW, prev: t.Buffer, loc) -> list:
        """Thread 0 performs ``op`` and every thread receives its previous value (``prev``)."""
        ctx = self.ctx
        ctx.begin_scratch()
        slot = ctx.alloc_scratch(ctx.fresh("prev_bcast"), 1, prev.dtype)
        zero = E.as_expr(0)
        in_thread0 = t.SeqStmt([op, t.BufferStore(slot, (zero,), E.Load(prev, (zero,)), loc=loc)])
        return [ctx.scratch_decl(slot), th.Barrier(loc=loc), t.IfThenElse(ctx.tid == 0, in_thread0, None, loc=loc),
                th.Barrier(loc=loc), t.BufferStore(prev, (zero,), E.Load(slot, (zero,)), loc=loc)]


def _lower_copy(lowering: _StmtLowering, s: t.Copy, env: Env) -> list:
    if s.mode == "tma":
        return lower_copy_tma(lowering.ctx, s, env)
    if s.mode == "tma_store":  # planned by plan_tma_stores
        return lower_copy_tma_store(lowering.ctx, s, env)
    if s.src.buffer.scope == "global" and s.dst.buffer.scope == "shared":
        return lower_copy_g2s(lowering.ctx, s, env)
    raise CompileError("internal: copy not expanded", s.loc)


# the lowering of each tile op (ir.tile_ops): a new op registers its own the same way
register(t.Copy, "lower", _lower_copy)
register(t.Gemm, "lower", lambda lowering, s, env: lower_gemm(lowering.ctx, s, env))
register(t.Reduce, "lower", lambda lowering, s, env: lower_reduce(lowering.ctx, s, env))
register(t.Atomic, "lower", lambda lowering, s, env: lowering.atomic(s, env))
