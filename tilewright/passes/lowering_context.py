"""State shared by the pieces of the ``lower_to_threads`` pass: the buffer mapping from Tile IR
to thread IR, address computation, fragment register lookup, fresh names, and the thread set
being lowered (``base``, ``nthreads``, a thread index ``tid`` numbering that set from 0).

Fragment lookups are table-driven: for an access ``frag[idx]`` at a point where every thread
evaluates ``idx`` to known values (loop variables bound to layout positions), the index is
evaluated for all threads at once with NumPy and the register holding it is read from the
layout's ownership table.  The register must be the same in every thread (it is a constant in the
generated code) and every thread must hold its element; otherwise the kernel is refused with an
explanation rather than compiled into something wrong.
"""

from __future__ import annotations

import contextlib
import itertools

import numpy as np

from ..errors import CompileError, InternalError
from ..ir import dtype as dt
from ..ir import expr as E
from ..ir import thread as th
from ..ir import tile as t
from ..ir.layout import SharedLayout
from ..ir.uniformity import Uniformity
from ..ir.visitor import free_vars, rewrite_expr, walk
from .analysis import eval_expr
from .share_shared_memory import OFFSETS_ATTR as SHARED_OFFSETS_ATTR

_MAX_UNIFORM_POINTS = 4096  # most values of the serial loop variables in a fragment index that are tried


# the accurate float32 math calls and their fast spellings (language/math.py: the same function, the
# hardware's approximation on the GPU), taken under fast math
FAST_MATH = {"exp": "__exp", "exp2": "__exp2", "exp10": "__exp10", "log": "__log", "log2": "__log2",
             "log10": "__log10", "sin": "__sin", "cos": "__cos", "tan": "__tan"}


def fast_math_enabled(options) -> bool:
    return bool(options.get("tl.enable_fast_math") or options.get("tw.fast_math"))


class LoweringContext:
    def __init__(self, func: t.PrimFunc, kernel: t.Kernel, target, options):
        self.func = func
        self.kernel = kernel
        self.target = target
        self.options = options
        self.fast_math = FAST_MATH if fast_math_enabled(options or {}) else {}  # accurate -> fast call names
        # the thread set being lowered: threads base .. base+nthreads-1 of the block (the whole block,
        # or a ThreadPartition); ``tid`` numbers them from 0 (inside a partition a let-bound
        # ``block_tid - base``), so copies, layouts, gemms and reductions plan for that set alone
        self.base = 0
        self.nthreads = kernel.num_threads
        self.block_tid = kernel.attrs["thread_var"]
        self.tid = self.block_tid
        self.named_barriers: dict = {}  # (base, count) -> hardware barrier id
        # ids the tile passes placed themselves (ping-pong turns: 15, 14), which partitions must not take
        self.fixed_barriers = _fixed_barrier_ids(kernel.body)
        self.region = None  # the ThreadPartition being lowered (None: the whole block)
        self.uniformity = Uniformity(func)
        self.plans = func.plans
        self.layouts = func.plans.fragment_layouts
        self.shared_layouts: dict = func.plans.shared_layouts
        self.gemm_plans = func.plans.gemms
        self.parallel_layouts = func.plans.parallel_layouts
        self.local_of: dict = {}  # Tile IR buffer (fragment/local/var) -> flat local Buffer
        self.shared_of: dict = {}  # Tile IR shared buffer -> flat shared Buffer
        self.shared_offsets: dict = {}  # flat shared Buffer -> byte offset
        self.shared_top = 0
        self.dynamic_shared = None  # (Tile IR buffer, flat buffer, its SharedDecls) of the one sized at launch
        self.dynamic_shared_base = 0  # its byte offset, set by finish_shared
        self.counter = itertools.count()
        self.prefetch_frags: dict = {}  # gemm uid -> double-buffered operand fragments
        self.deferred: list | None = None  # statements to run at the end of the enclosing loop body
        self.loop_prelude: list | None = None  # declarations for the start of the enclosing loop body
        self.deferrable: frozenset = frozenset()  # the enclosing pipelined loop's ring buffers (see lower_copy)
        self.frag_regs: int | None = None
        self.prefetch_regs = 0
        self.tensor_maps: list = []  # th.TensorMap, in kernel-parameter order
        self.scratch_cursor = 0
        self.scratch_top = 0
        self.scratch_offsets: dict = {}
        self.scratch_decls: list = []
        self.tid_np = np.arange(self.nthreads)
        self._loop_ranges: dict | None = None  # serial loop variable -> (start, extent), see loop_range

    @contextlib.contextmanager
    def thread_set(self, base: int, count: int, local_tid, region=None):
        """Lower the enclosed statements for threads ``base .. base+count-1`` numbered by ``local_tid``
        (``region``: the ThreadPartition they run)."""
        saved = self.base, self.nthreads, self.tid, self.tid_np, self.region
        self.base, self.nthreads, self.tid, self.region = base, count, local_tid, region
        self.tid_np = np.arange(count)
        try:
            yield
        finally:
            self.base, self.nthreads, self.tid, self.tid_np, self.region = saved

    def thread_values(self) -> dict:
        """Per-thread NumPy values of the thread indices, for evaluating index expressions of the set."""
        env = {self.tid: self.tid_np}
        if self.block_tid is not self.tid:
            env[self.block_tid] = self.tid_np + self.base
        return env

    def named_barrier_id(self, base: int, count: int, loc=None) -> int:
        """The hardware barrier (1..15; 0 is the block's) that synchronizes threads base..base+count-1."""
        key = (base, count)
        if key not in self.named_barriers:
            taken = set(self.named_barriers.values()) | self.fixed_barriers
            free = [i for i in range(1, 16) if i not in taken]
            if not free:
                fixed = f" ({len(self.fixed_barriers)} taken by the compiler's ping-pong turns)" \
                    if self.fixed_barriers else ""
                raise CompileError(f"the kernel synchronizes more thread partitions than the GPU has named barriers: "
                                   f"15 besides the block's{fixed}", loc, hint="use fewer distinct thread ranges")
            self.named_barriers[key] = free[0]
        return self.named_barriers[key]

    # ---------------------------------------------------------------- names and buffers
    def fresh(self, base: str) -> str:
        return f"{base}_{next(self.counter)}"

    def local_buffer(self, name: str, n: int, dtype: str) -> t.Buffer:
        return t.Buffer(name, (n,), dtype, "local")

    def alloc_shared(self, name: str, numel: int, dtype: str, align: int = 128) -> t.Buffer:
        from ..ir import dtype as dt

        buf = t.Buffer(name, (numel,), dtype, "shared")
        off = (self.shared_top + align - 1) // align * align
        self.shared_offsets[buf] = off
        self.shared_top = off + numel * dt.nbytes(dtype)
        return buf

    def defers_stores(self, copy, buffer, nbytes: int) -> bool:
        """Whether a register-staged pipelined copy into ``buffer`` writes shared memory at the end of
        the loop body (register prefetch: the loads' latency overlaps the iteration's compute, and the
        pipeline's barrier at the next iteration orders the stores).  Only the copies a pipelined loop
        issues in its own body, into its own rings: its prologue, which stands in an enclosing loop's
        body, must store before the loop starts.  Only when the ``nbytes`` of registers per thread fit
        beside the fragments (else the compiler spills); a yes reserves them."""
        return (copy.mode == "async" and self.deferred is not None and buffer in self.deferrable
                and self.prefetch_fits(nbytes))

    def prefetch_fits(self, nbytes: int) -> bool:
        """Whether ``nbytes`` more of prefetch registers per thread fit beside the fragments within
        a conservative share of the register file (the rest is the compiler's working space)."""
        from ..ir import dtype as dt

        if self.frag_regs is None:
            self.frag_regs = sum(lay.num_regs * max(dt.bits(b.dtype), 32) // 32 for b, lay in self.layouts.items())
        need = self.frag_regs + self.prefetch_regs + (nbytes + 3) // 4
        if need > 0.4 * self.target.registers_per_thread:
            return False
        self.prefetch_regs += (nbytes + 3) // 4
        return True

    def alloc_scratch(self, name: str, numel: int, dtype: str) -> t.Buffer:
        """Shared scratch for one exchange (reductions across warps, layout conversions).  Every
        user starts with a barrier and is done by the next user's barrier, so all users share one
        pool placed after the named shared buffers; ``begin_scratch`` starts a new user."""
        from ..ir import dtype as dt

        buf = t.Buffer(name, (numel,), dtype, "shared")
        off = (self.scratch_cursor + 15) // 16 * 16
        self.scratch_cursor = off + numel * dt.nbytes(dtype)
        self.scratch_top = max(self.scratch_top, self.scratch_cursor)
        self.scratch_offsets[buf] = off
        return buf

    def begin_scratch(self) -> None:
        self.scratch_cursor = 0

    def scratch_decl(self, buf):
        from ..ir import thread as th

        decl = th.SharedDecl(buf, self.scratch_offsets[buf])
        self.scratch_decls.append(decl)  # offsets are rebased onto the pool once its place is known
        return decl

    def finish_shared(self) -> int:
        """Place the scratch pool after the named buffers; returns the total shared bytes."""
        base = (self.shared_top + 127) // 128 * 128
        top = self.shared_top
        if self.scratch_top:
            for d in self.scratch_decls:
                d.offset = base + self.scratch_offsets[d.buffer]
            top = base + self.scratch_top
        if self.dynamic_shared is not None:  # the buffer sized at launch goes last, over the rest
            from ..ir import dtype as dt

            buf, flat, decls = self.dynamic_shared
            start = (top + 127) // 128 * 128
            flat.shape = (max(1, (self.target.max_shared_bytes - start) // dt.nbytes(buf.dtype)),)
            self.shared_offsets[flat] = start
            for d in decls:
                d.offset = start
            self.dynamic_shared_base = start
            return start + flat.shape[0] * dt.nbytes(buf.dtype)
        return top

    def shared_flat(self, buf: t.Buffer) -> t.Buffer:
        if buf not in self.shared_of and buf.static_shape() is None:
            return self._dynamic_shared_flat(buf)
        if buf not in self.shared_of:
            lay = self.shared_layouts.get(buf) or SharedLayout(buf.shape, buf.dtype)
            self.shared_layouts[buf] = lay
            # TMA swizzles by shared-address bits: a tile starts on the pattern's 1 KiB period
            planned = self.func.attrs.get(SHARED_OFFSETS_ATTR)
            if planned and buf in planned:  # placed by lifetime (share_shared_memory)
                flat = t.Buffer(buf.name, (lay.numel,), buf.dtype, "shared")
                self.shared_offsets[flat] = planned[buf]
                self.shared_top = max(self.shared_top, planned[buf] + lay.numel * dt.nbytes(buf.dtype))
                self.shared_of[buf] = flat
            else:
                self.shared_of[buf] = self.alloc_shared(buf.name, lay.numel, buf.dtype, 1024 if lay.tma else 128)
        return self.shared_of[buf]

    def _dynamic_shared_flat(self, buf: t.Buffer) -> t.Buffer:
        """The one shared buffer sized at launch (frontend/dynamic_shared.py): row-major, placed after
        everything else once ``finish_shared`` knows where that is; its flat buffer spans the rest of
        the target's shared memory (the launcher asks for what a call's sizes need)."""
        flat = t.Buffer(buf.name, (1,), buf.dtype, "shared")
        self.shared_of[buf] = flat
        self.shared_offsets[flat] = 0  # placed by finish_shared
        self.dynamic_shared = (buf, flat, [])
        return flat

    def dynamic_shared_decl(self, flat: t.Buffer, loc=None):
        from ..ir import thread as th

        decl = th.SharedDecl(flat, 0, loc=loc)
        self.dynamic_shared[2].append(decl)
        return decl

    def shared_at_launch(self):
        """``ir.analysis.shared_at_launch`` of the buffer sized at launch (None: there is none)."""
        from ..ir.analysis import shared_at_launch

        return None if self.dynamic_shared is None else shared_at_launch(self.dynamic_shared[0],
                                                                         self.dynamic_shared_base)

    def tensor_map(self, param: t.Buffer, box: tuple, swizzle: int):
        """The kernel's TMA descriptor for boxes ``box`` of global ``param`` (one per distinct use)."""
        from ..ir import thread as th

        tm = th.TensorMap(param, tuple(box), swizzle)
        if tm not in self.tensor_maps:
            self.tensor_maps.append(tm)
        return tm

    # ---------------------------------------------------------------- addresses
    @staticmethod
    def strided_offset(buf: t.Buffer, idx) -> E.Expr:
        """Element offset of ``buf[idx]`` from the buffer's strides (row-major unless given): global
        buffers, per-thread arrays, and fragments or tiles laid out row-major in a shared scratch."""
        off = E.as_expr(0)
        for x, s in zip(idx, buf.strides):
            off = off + x * s
        return off

    global_offset = strided_offset
    local_offset = strided_offset

    def shared_offset(self, buf: t.Buffer, idx) -> E.Expr:
        if buf.static_shape() is None:
            return self.strided_offset(buf, idx)  # sized at launch: row-major
        lay = self.shared_layouts.get(buf)
        if lay is None:
            self.shared_flat(buf)
            lay = self.shared_layouts[buf]
        return E.as_expr(lay.offset(tuple(idx)))

    def flat_access(self, buf: t.Buffer, idx):
        """(thread IR buffer, flat index expression) for a non-fragment access."""
        if buf.scope == "global":
            return buf, self.global_offset(buf, idx)
        if buf.scope == "shared":
            return self.shared_flat(buf), self.shared_offset(buf, idx)
        if buf.scope in ("local", "var"):
            return self.local_of[buf], self.local_offset(buf, idx) if buf.scope == "local" else E.as_expr(0)
        raise InternalError(f"flat access to {buf.scope} buffer {buf.name}", "lower_to_threads")

    # ---------------------------------------------------------------- fragments
    def frag_register(self, buf: t.Buffer, idx, np_env: dict, loc=None, active=None):
        """The register (same in every thread) holding ``buf[idx]`` where ``np_env`` binds the
        variables of ``idx`` to per-thread NumPy values; ``active`` (a bool per thread) leaves out
        threads that do not execute the access (padding positions of a layout).

        An index may also hold serial loop variables (``src[i, k]`` in a ``T.Parallel(K)`` inside
        ``for i in T.serial(4)``), the same in every thread: TileLang reads each thread's own element
        there.  Every value of those variables is tried; when each thread holds its elements, in a
        register that is the same in every thread and affine in the variables, the register is that
        expression (an int when it is constant), else the kernel is refused (a thread-distributed
        fragment read along a serial loop)."""
        lay = self.layouts[buf]
        if lay.num_threads != self.nthreads:
            raise CompileError(f"fragment {buf.name} is laid out over {lay.num_threads} threads but used by a set of "
                               f"{self.nthreads} threads", loc, hint="use one fragment per thread partition and "
                               "exchange data through shared memory")
        np_env = {**self.thread_values(), **np_env}
        uniform = sorted({v for x in idx for v in free_vars(x) if v not in np_env}, key=lambda v: v.name)
        if not uniform:
            return self._register_at(buf, lay, idx, np_env, loc, active)
        ranges = [self.loop_range(v) for v in uniform]
        combos = int(np.prod([n for _, n in ranges])) if all(r is not None for r in ranges) else None
        if combos is None or combos > _MAX_UNIFORM_POINTS:
            what = ", ".join(v.name for v, r in zip(uniform, ranges) if r is None) or "their values"
            # (the words "does not hold" let a T.Parallel loop read the fragment through shared memory)
            raise CompileError(
                f"fragment {buf.name} is indexed by {', '.join(str(x) for x in idx)}, which depends on a value "
                f"other than the T.Parallel loop variables ({what}): a thread-distributed fragment, and a thread "
                "does not hold every element such an index may name", loc,
                hint="index fragments by the loop variables of the enclosing T.Parallel, constants or serial loop "
                "variables of constant range; a fragment's elements live in registers of fixed threads")
        regs = {}
        for point in itertools.product(*(range(s, s + n) for s, n in ranges)):
            env = {**np_env, **dict(zip(uniform, point))}
            try:
                regs[point] = self._register_at(buf, lay, idx, env, loc, active)
            except CompileError as e:
                inner = [v for v in uniform if v in self.loop_ranges_in_parallel()]
                if not inner or not _instruction_layout(lay) or ("does not hold" not in e.message
                                                                 and "different registers" not in e.message):
                    raise  # the T.Parallel loop reads the fragment through shared memory instead
                at = ", ".join(f"{v.name} = {x}" for v, x in zip(uniform, point))
                where = ", ".join(str(x) for x in idx)
                raise CompileError(
                    f"{buf.name} is a thread-distributed fragment: at {at} its element {buf.name}[{where}] is not "
                    "held, at one register in all threads, by the threads that read it", loc,
                    hint="reduce a fragment along a dimension with T.reduce_sum / T.reduce_max (not a T.serial "
                    "loop over its elements), or copy it to shared memory (T.alloc_shared + T.copy) and read it "
                    "there") from None
        return _affine_register(buf, uniform, ranges, regs, loc)

    def loop_range(self, var) -> tuple | None:
        """(start, extent) of every value serial loop variable ``var`` takes in the kernel (None: not
        a loop variable of constant bounds)."""
        if self._loop_ranges is None:
            self._loop_ranges, self._inner_loop_vars = _constant_loop_ranges(self.func.body)
        return self._loop_ranges.get(var)

    def loop_ranges_in_parallel(self) -> set:
        """The variables of serial loops inside a T.Parallel body (a thread's own loop over elements)."""
        self.loop_range(None)
        return self._inner_loop_vars

    def _register_at(self, buf: t.Buffer, lay, idx, np_env: dict, loc, active) -> int:
        try:
            vals = [np.broadcast_to(np.asarray(eval_expr(x, np_env), dtype=np.int64), (self.nthreads,))
                    for x in idx]
        except (KeyError, ValueError) as e:
            raise CompileError(
                f"fragment {buf.name} is indexed by {', '.join(str(x) for x in idx)}, which depends on a value "
                f"other than the T.Parallel loop variables ({e})", loc,
                hint="index fragments by the loop variables of the enclosing T.Parallel (or constants); "
                "a fragment's elements live in registers of fixed threads") from None
        act = np.ones(self.nthreads, dtype=bool) if active is None else np.asarray(active, dtype=bool)
        if not act.any():
            return 0
        flat = np.zeros(self.nthreads, dtype=np.int64)
        for v, n, s in zip(vals, buf.shape, buf.strides):
            if np.any(((v < 0) | (v >= n)) & act):
                raise CompileError(f"fragment {buf.name} index out of range (dimension size {n})", loc)
            flat = flat + np.where(act, v, 0) * s
        regs = np.where(act, lay.reg_of[self.tid_np, flat], -2)
        first = int(np.nonzero(act)[0][0])
        if np.any(regs == -1):
            bad = int(np.nonzero(regs == -1)[0][0])
            raise CompileError(
                f"fragment {buf.name} element {tuple(int(v[bad]) for v in vals)} is needed by thread {bad}, which "
                f"does not hold it in layout {lay}", loc,
                hint="fragments used together in one T.Parallel loop must be laid out alike; copy one of them "
                "through shared memory (T.alloc_shared + T.copy) to change its layout")
        if np.any((regs != regs[first]) & act):
            raise CompileError(
                f"fragment {buf.name} is accessed at a position held in different registers by different "
                f"threads (layout {lay})", loc,
                hint="index the fragment by the T.Parallel loop variables in the same order as its other uses, "
                "or copy it through shared memory")
        return int(regs[first])

    def substitute_vars(self, e, env: dict):
        return rewrite_expr(e, lambda x: env.get(x) if isinstance(x, E.Var) else None)


def _constant_loop_ranges(body) -> tuple:
    """(var -> (start, extent) of the serial loops of constant bounds, a variable of several loops
    getting the range covering all of them; the variables of loops inside a T.Parallel body)."""
    out: dict = {}
    inner: set = set()

    def in_parallel(s):
        if isinstance(s, t.For):
            inner.add(s.var)

    def f(s):
        if isinstance(s, t.ParallelFor):
            walk(s.body, in_parallel)
        if isinstance(s, t.For) and isinstance(s.start, E.Const) and isinstance(s.extent, E.Const):
            lo, n = int(s.start.value), int(s.extent.value)
            if n <= 0:
                return
            if s.var in out:
                lo0, n0 = out[s.var]
                hi = max(lo0 + n0, lo + n)
                lo = min(lo0, lo)
                n = hi - lo
            out[s.var] = (lo, n)

    walk(body, f)
    return out, inner


def _instruction_layout(lay) -> bool:
    """Whether a fragment's layout is a matrix instruction's (a T.gemm accumulator or operand), which
    no other use can change: TileLang refuses a serial loop inside T.Parallel over such a fragment's
    elements (issue 2393)."""
    from ..ir.layout import MmaAccumLayout, MmaOperandLayout, SimtAccumLayout

    return isinstance(lay, (MmaAccumLayout, MmaOperandLayout, SimtAccumLayout))


def _affine_register(buf, uniform: list, ranges: list, regs: dict, loc):
    """The register expression ``r0 + sum(c_k * v_k)`` that gives ``regs[point]`` at every point of the
    loop ranges (an int when no variable moves it); refused when the registers are not affine."""
    start = tuple(s for s, _ in ranges)
    r0 = regs[start]
    coeffs = []
    for k, (s, n) in enumerate(ranges):
        nxt = start[:k] + (s + 1,) + start[k + 1:]
        coeffs.append(regs[nxt] - r0 if n > 1 else 0)
    for point, r in regs.items():
        if r != r0 + sum(c * (x - s) for c, x, s in zip(coeffs, point, start)):
            raise CompileError(
                f"{buf.name} is a thread-distributed fragment whose registers along "
                f"{', '.join(v.name for v in uniform)} follow no linear pattern", loc,
                hint=f"index {buf.name} by the T.Parallel loop variables, or copy it to shared memory and read it "
                "there")
    out = E.as_expr(r0 - sum(c * s for c, s in zip(coeffs, start)))
    for c, v in zip(coeffs, uniform):
        if c:
            out = out + v * c
    return int(out.value) if isinstance(out, E.Const) else out


def _fixed_barrier_ids(body) -> set:
    """Named barrier ids already in the tile IR (constants placed by a pass, not by the lowering)."""
    found: set = set()
    walk(body, lambda s: found.add(s.barrier_id) if isinstance(s, th.NamedBarrier) and isinstance(s.barrier_id, int)
         else None)
    return found
