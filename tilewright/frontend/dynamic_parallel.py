"""``T.Parallel`` over an extent known only at launch (a kernel argument, a ``T.dynamic`` size).

A T.Parallel loop is spread over the block's threads by a layout computed at compile time, which
needs compile-time extents.  TileLang also accepts ``for i in T.Parallel(n)`` with ``n`` a run-time
value; it means the same loop: every iteration once, in any order.  Such a loop is read here as a
serial loop over chunks of a compile-time-sized T.Parallel::

    for i, j in T.Parallel(n, 64):          for c in T.serial(ceildiv(n, R)):
        body                         ->         for r, j in T.Parallel(R, 64):
                                                    if c * R + r < n:
                                                        body  (with i = c * R + r)

The leading dimensions up to the last run-time extent are flattened into one run-time count; the
trailing compile-time ones stay as they are (they keep their vector accesses); ``R`` makes one chunk
about eight elements per thread.  The body may read and write shared and global memory and read
scalars; fragments (whose layout follows compile-time shapes) are refused with the line.  Tile
copies and fills of a run-time size (``frontend/dynamic_shared.py``) are element loops of this kind.
"""

from __future__ import annotations

from ..errors import CompileError
from ..ir import expr as E
from ..ir import tile as t
from ..ir.verifier import exprs_of
from ..ir.visitor import free_vars, loads_in, walk


class _Chunked:
    """The loop variables and guard of the chunked form of a T.Parallel over ``extents``."""

    def __init__(self, b, kernel, extents: list, names: list):
        self.extents = extents
        split = max(d for d, x in enumerate(extents) if not isinstance(x, int)) + 1
        lead, self.trail = extents[:split], extents[split:]
        inner = 1
        for x in self.trail:
            inner *= x
        # rows of the trailing tile per chunk: about 8 elements per thread (two 16-byte vectors of float32)
        self.per_chunk = max(1, -(-kernel.num_threads * 8 // inner))
        self.count = E.as_expr(lead[0])
        for x in lead[1:]:
            self.count = self.count * x
        self.chunk = E.Var(b.fresh(f"{names[0]}_chunk"), "int32", kind="loop")
        self.row = E.Var(b.fresh(f"{names[0]}_row"), "int32", kind="loop")
        self.trail_vars = tuple(E.Var(b.fresh(n), "int32", kind="loop") for n in names[split:])
        self.flat = self.chunk * self.per_chunk + self.row
        self.indices = tuple(_unflatten(self.flat, lead)) + self.trail_vars

    def loop(self, body, loc, coalesced_width=None) -> t.For:
        guarded = t.IfThenElse(self.flat < self.count, body, None, loc=loc)
        par = t.ParallelFor((self.row,) + self.trail_vars, (self.per_chunk,) + tuple(self.trail), guarded, loc=loc,
                            coalesced_width=coalesced_width)
        n = self.per_chunk
        chunks = (self.count + (n - 1)) // n if n > 1 else self.count
        return t.For(self.chunk, E.as_expr(0), chunks, par, "serial", 0, loc=loc)


def _check_extents(kernel, extents, loc, what="T.Parallel") -> None:
    if kernel is None:
        raise CompileError(f"{what} must be inside `with T.Kernel(...)`", loc)
    for x in extents:
        if isinstance(x, E.Expr) and any(v.kind == "thread" for v in free_vars(x)):
            raise CompileError(f"the {what} extent {x} depends on the thread index: the loop is spread over "
                               "all threads of the block, so its extent must be the same in every thread", loc,
                               hint="use a serial loop (T.serial) for a per-thread count")


def dynamic_parallel(tr, names: list, spec, s) -> None:
    """Emit the chunked form of ``for names in spec`` (a T.Parallel with a run-time extent)."""
    loc = tr.loc(s)
    kernel = tr.b.kernel
    if tr.b.parallel_depth:
        raise CompileError("a T.Parallel loop whose extent is known only at run time cannot be nested in another "
                           "T.Parallel loop", loc, hint="make it the outer loop, or give the inner loop a "
                           "compile-time extent")
    _check_extents(kernel, list(spec.extents), loc)
    ch = _Chunked(tr.b, kernel, list(spec.extents), names)

    def make(body):
        _refuse_fragments(body)
        return ch.loop(body, loc, spec.coalesced_width)

    tr.b.parallel_depth += 1
    try:
        tr.run_loop_body(names, ch.indices, s, make)
    finally:
        tr.b.parallel_depth -= 1


def element_loop(b, extents: list, body_of, what: str):
    """Emit a T.Parallel over run-time ``extents`` whose body is ``body_of(indices)`` (tile copies
    and fills of a run-time size); returns nothing."""
    loc = b.loc
    _check_extents(b.kernel, extents, loc, what)
    ch = _Chunked(b, b.kernel, extents, ["i"] * len(extents))
    b.emit(ch.loop(body_of(ch.indices), loc))


def _unflatten(flat, dims: list) -> list:
    """Row-major indices of the flat position ``flat`` in a box of extents ``dims``."""
    out = []
    rest = flat
    for d in reversed(dims[1:]):
        out.append(rest % d)
        rest = rest // d
    out.append(rest)
    return out[::-1]


def _refuse_fragments(body) -> None:
    def f(s):
        bufs = [ld.buffer for e in exprs_of(s) for ld in loads_in(e)]
        if isinstance(s, t.BufferStore):
            bufs.append(s.buffer)
        for b in bufs:
            if b.scope in ("fragment", "local"):
                raise CompileError(
                    f"{b.name} ({'a fragment' if b.scope == 'fragment' else 'a local buffer'}) is used in a "
                    "T.Parallel loop whose extent is known only at run time: which thread holds which element of "
                    "it follows compile-time loop extents", getattr(s, "loc", None),
                    hint="give the loop compile-time extents (a tile size, with a bounds check inside), or "
                    "work on shared or global memory in this loop")

    walk(body, f)
