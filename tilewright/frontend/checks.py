"""Checks on a freshly translated prim_func that every backend must refuse in the same way.

Needs: the Tile IR straight from the parser (before any pass).
Guarantees, each refusal a ``CompileError`` at the offending kernel line with what to do instead:

* grid extents known at compile time are within the launch limits of a GPU (x < 2**31, y and z at
  most 65535: CUDA's limits, applied to every backend so that a program means the same everywhere),
  and a block has at most 1024 threads;
* every index (element loads and stores, tile region starts, atomics) and every loop bound is an
  integer expression -- a float index would otherwise reach the C++ compiler as invalid code --
  and a constant index lies inside its (static) dimension (a negative one does not count from the
  end as in Python); grid extents are integers of at least 1;
* no store inside ``T.Parallel`` reads and writes one element from many iterations (a
  read-modify-write such as ``acc[0] = acc[0] + x[i]``), and none stores values that differ between
  iterations to one element: the iterations run on different threads at once, so the result would
  depend on timing.  A location is "one element for many iterations" when its indices do not
  depend on some variable of the enclosing ``T.Parallel`` nest (directly, or through ``let``
  names), unless the store sits under an ``if`` that fixes that variable (``if i == 0:``), which
  selects a single iteration.  Buffers allocated inside the loop body are private to an iteration.
  A per-thread (local/var) buffer from outside the nest may serve as each iteration's scratch when
  the iteration writes it (unconditionally) before it updates it; a read-modify-write of a value
  left by other iterations is refused, as it would depend on which iterations a thread runs.
"""

from __future__ import annotations

from ..errors import CompileError
from ..ir import dtype as dt
from ..ir import expr as E
from ..ir import tile as t
from ..ir.verifier import exprs_of, regions_of
from ..ir.visitor import child_stmts, expr_children, walk, walk_expr
from ..passes.check_target_limits import GRID_HINT, grid_limit_error


def check_prim_func(func: t.PrimFunc) -> None:
    from .dynamic_shared import check_dynamic_shared
    from .tma_copy_checks import check_tma_copy_barriers

    walk(func.body, _check_static_grid)
    check_dynamic_shared(func)
    check_tma_copy_barriers(func)
    _check_indices(func.body)
    _RaceCheck().stmt(func.body, frozenset(), frozenset())
    mark_written_params(func)


def mark_written_params(func: t.PrimFunc) -> None:
    """Sets ``attrs["written"]`` on each tensor parameter: whether the kernel may write it (the
    argument binder refuses a read-only array for such a parameter)."""
    written: set = set()

    def f(s):
        if isinstance(s, t.BufferStore):
            written.add(s.buffer)
        for name in ("dst", "c"):
            d = getattr(s, name, None)
            if isinstance(d, t.Region):
                written.add(d.buffer)
            elif isinstance(d, t.Buffer):
                written.add(d)

    walk(func.body, f)
    for p in func.params:
        if isinstance(p, t.Buffer):
            p.attrs["written"] = p in written


MAX_THREADS_PER_BLOCK = 1024  # every GPU target's limit; targets check their own stricter rules later


def _check_static_grid(s) -> None:
    if not isinstance(s, t.Kernel):
        return
    if s.num_threads > MAX_THREADS_PER_BLOCK:
        raise CompileError(f"T.Kernel asks for {s.num_threads} threads; GPUs allow at most {MAX_THREADS_PER_BLOCK} "
                           "per block", s.loc, hint="use fewer threads and let each handle more elements")
    for axis, g in enumerate(s.grid):
        if isinstance(g, E.Expr) and not dt.is_int(g.dtype):
            raise CompileError(f"grid dimension {'xyz'[axis]} of T.Kernel is the {g.dtype} value {g}; grid extents "
                               "must be integers", s.loc, hint="use T.ceildiv(n, block) or // to count blocks")
        v = E.const_value(g) if isinstance(g, E.Const) else None
        if isinstance(v, int):
            if v < 0:
                raise CompileError(f"grid dimension {'xyz'[axis]} of T.Kernel is {v}: the kernel would run no block",
                                   s.loc, hint="give every grid dimension at least 1 block")
            msg = grid_limit_error(axis, v)
            if msg:
                raise CompileError(msg, s.loc, hint=GRID_HINT)


def _bad_index_error(buf: t.Buffer, d: int, idx, loc, guarded: bool) -> CompileError | None:
    """Why index ``idx`` of dimension ``d`` of ``buf`` cannot be right, as an error (None if it may
    be).  A constant index outside the buffer is an error only where nothing may guard it (``guarded``:
    under an ``if``, a ``T.if_then_else`` branch or the right side of ``and``/``or``)."""
    if not isinstance(idx, E.Expr):
        return None
    if dt.is_float(idx.dtype):
        return CompileError(
            f"an index of {buf.name} is the {idx.dtype} expression {idx}; indices must be integers", loc,
            hint="use integer arithmetic (// for division) or convert explicitly with T.cast(..., 'int32')")
    if idx.dtype == "bool":
        return CompileError(
            f"an index of {buf.name} is the condition {idx}; indices must be integers (there is no mask indexing)",
            loc, hint="guard the access with an `if` (or T.if_then_else) instead")
    v = E.const_value(idx) if isinstance(idx, E.Const) else None
    n = buf.shape[d] if d < len(buf.shape) else None
    if not guarded and isinstance(v, int) and isinstance(n, int) and buf.scope != "var" and not 0 <= v < n:
        hint = ("negative indices do not count from the end in kernel code; write the index out (e.g. n - 1)"
                if v < 0 else "check the index against the buffer's shape")
        return CompileError(f"index {v} is outside dimension {d} of {buf.name}, which has extent {n}", loc, hint=hint)
    return None


def _check_indices(s, guarded: bool = False) -> None:
    """Indices and loop bounds of ``s`` and the statements inside it (see the module docstring)."""
    loc = getattr(s, "loc", None)

    def check(buf, indices, g):
        for d, i in enumerate(indices):
            err = _bad_index_error(buf, d, i, loc, g)
            if err is not None:
                raise err

    def expr(e, g):
        if not isinstance(e, E.Expr):
            return
        if isinstance(e, E.Load):
            check(e.buffer, e.indices, g)
        if isinstance(e, E.Select):
            expr(e.cond, g)
            expr(e.a, True)
            expr(e.b, True)
            return
        if isinstance(e, E.BinOp) and e.op in ("and", "or"):
            expr(e.a, g)
            expr(e.b, True)
            return
        for ch in expr_children(e):
            expr(ch, g)

    if isinstance(s, t.BufferStore):
        check(s.buffer, s.indices, guarded)
    for r in regions_of(s):
        for i in r.starts:
            if isinstance(i, E.Expr) and not dt.is_int(i.dtype):
                check(r.buffer, (i,), True)
    for e in exprs_of(s):
        expr(e, guarded)
    if isinstance(s, t.For):
        for e in (s.start, s.extent):
            expr(e, guarded)
            if isinstance(e, E.Expr) and not dt.is_int(e.dtype):
                raise CompileError(f"the bounds of a kernel loop must be integers, got the {e.dtype} value {e}", loc,
                                   hint="use integer arithmetic (// for division) or T.cast(..., 'int32')")
    inner = guarded or isinstance(s, t.IfThenElse)
    for ch in child_stmts(s):
        _check_indices(ch, inner)


class _RaceCheck:
    """Walks the statements with the variables of the enclosing T.Parallel nest in scope."""

    def __init__(self):
        self.deps: dict = {}  # let Var -> the T.Parallel variables its value depends on
        self.private: set = set()  # buffers allocated inside a T.Parallel body
        # per-thread buffers from outside the T.Parallel nest that its body has written (unconditionally)
        # so far: the iteration's own value, which a later read-modify-write may use
        self.defined: set = set()
        self.cond_depth = 0

    def par_deps(self, e, pvars) -> set:
        out: set = set()

        def f(x):
            if isinstance(x, E.Var):
                if x in pvars:
                    out.add(x)
                elif x in self.deps:
                    out.update(self.deps[x])

        walk_expr(e, f)
        return out

    def pinned(self, cond, pvars) -> set:
        """The loop variables ``cond`` fixes to one value: conjuncts ``v == e`` with ``e`` free of ``v``."""
        if isinstance(cond, E.BinOp) and cond.op == "and":
            return self.pinned(cond.a, pvars) | self.pinned(cond.b, pvars)
        if isinstance(cond, E.BinOp) and cond.op == "==":
            for v, other in ((cond.a, cond.b), (cond.b, cond.a)):
                if isinstance(v, E.Var) and v in pvars and v not in self.par_deps(other, pvars):
                    return {v}
        return set()

    def stmt(self, s, pvars: frozenset, guarded: frozenset) -> None:
        if s is None:
            return
        if isinstance(s, t.ParallelFor):
            if not pvars:
                self.defined = set()
            # a variable of extent 1 has one iteration: nothing to race with
            inner = pvars | frozenset(v for v, n in zip(s.vars, s.extents) if not (isinstance(n, int) and n == 1))
            self.stmt(s.body, inner, guarded)
            return
        if pvars:
            if isinstance(s, t.Alloc):
                self.private.add(s.buffer)
            elif isinstance(s, t.LetStmt):
                self.deps[s.var] = self.par_deps(s.value, pvars)
            elif isinstance(s, t.IfThenElse):
                pinned = frozenset(self.pinned(s.cond, pvars))
                self.cond_depth += 1
                try:
                    self.stmt(s.then_body, pvars, guarded | pinned)
                    self.stmt(s.else_body, pvars, guarded)
                finally:
                    self.cond_depth -= 1
                return
            elif isinstance(s, t.BufferStore):
                self.store(s, pvars, guarded)
        for ch in child_stmts(s):
            self.stmt(ch, pvars, guarded)

    def store(self, s: t.BufferStore, pvars, guarded) -> None:
        buf = s.buffer
        if buf in self.private:
            return
        at = set()
        for i in s.indices:
            at |= self.par_deps(i, pvars)
        missing = set(pvars) - at - set(guarded)
        if not missing:
            return
        reads_itself = []
        walk_expr(s.value, lambda x: reads_itself.append(x) if isinstance(x, E.Load) and x.buffer is buf else None)
        names = ", ".join(sorted(v.name for v in missing))
        if buf.scope in ("local", "var"):
            if not reads_itself or buf in self.defined:
                if not reads_itself and not self.cond_depth:
                    self.defined.add(buf)
                return  # each iteration writes the buffer before using it: its own scratch
            raise CompileError(
                f"{buf.name} is one per thread, but the T.Parallel loop over {names} spreads its iterations over "
                f"the threads and each of them {'updates' if reads_itself else 'overwrites'} the same element: "
                "the result would depend on which iterations a thread runs", s.loc,
                hint=f"allocate {buf.name} inside the T.Parallel body to get one per iteration; to combine values "
                "across iterations use T.reduce_* on a fragment or T.atomic_* on shared/global memory")
        if not reads_itself and not (self.par_deps(s.value, pvars) & missing):
            return  # every iteration stores the same value
        if not reads_itself:
            raise CompileError(
                f"every iteration of the T.Parallel loop over {names} stores a different value to the same "
                f"element of {buf.name}: the iterations run on different threads at once, so which value "
                "remains is a matter of timing", s.loc,
                hint="index the destination by the loop variable, or combine the values with T.atomic_* or "
                "T.reduce_*")
        raise CompileError(
            f"{buf.name} is read and written at the same element by every iteration of the T.Parallel loop over "
            f"{names}: the iterations run on different threads at once, so updates would be lost", s.loc,
            hint="sum (or max/min) into one place with T.atomic_add / T.atomic_max / T.atomic_min, or store the "
            "values into a fragment and combine them with T.reduce_sum / T.reduce_max / T.reduce_min")
