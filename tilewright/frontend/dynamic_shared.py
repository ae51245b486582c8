"""Shared buffers whose size is known at launch, and tile copies and fills of a run-time size.

What the language supports (TileLang allows ``T.alloc_shared((n, 64), dtype)`` with ``n`` symbolic):

* a shared buffer's dimensions may be integer expressions of the kernel's scalar arguments and
  ``T.dynamic`` sizes: values every block knows at launch (not block or thread indices, loop
  variables or memory reads);
* at most one such buffer per kernel: it is placed after every other shared buffer, and the
  launcher asks for the dynamic shared memory the call's sizes need (the target's limit is checked
  at each call, the error names the buffer);
* it is read and written element by element (in T.Parallel loops, including loops of a run-time
  extent) and by ``T.copy`` and ``T.fill`` (whole, or slices of any extent: element loops whose
  elements outside the buffer's run-time shape are not read -- they read as zero -- and not
  written, as for global tensors); other tile operations (``T.gemm``, ``T.reduce_*``, ...) need
  compile-time tile shapes and are refused with the line.

``T.copy`` and ``T.fill`` of a run-time size (a dynamic shared buffer, or global slices whose
extent is a symbolic size) are element loops over the chunked T.Parallel of ``dynamic_parallel``,
with the usual bounds rule for global memory: elements outside a global tensor are not read (they
read as zero) and not written.
"""

from __future__ import annotations

from ..errors import CompileError
from ..ir import dtype as dt
from ..ir import expr as E
from ..ir import tile as t
from ..ir.analysis import bounds_condition
from ..ir.verifier import regions_of
from ..ir.visitor import free_vars, loads_in, walk
from .builder import current, error
from .dynamic_parallel import element_loop

LAUNCH_KNOWN = ("param", "dyn")  # kinds of variables whose value is known when the kernel is launched


def is_dynamic_buffer(buf) -> bool:
    return isinstance(buf, t.Buffer) and not all(isinstance(d, int) for d in buf.shape)


def shared_shape(shape) -> tuple:
    """The shape of ``T.alloc_shared``: positive ints, or integer expressions known at launch."""
    if isinstance(shape, (int, E.Expr)):
        shape = (shape,)
    out = []
    for d in tuple(shape):
        if isinstance(d, E.Expr) and E.const_value(d) is not None:
            d = E.const_value(d)
        if isinstance(d, int) and not isinstance(d, bool):
            if d <= 0:
                raise error(f"on-chip buffer shapes must be positive, got {tuple(shape)!r}")
            out.append(d)
            continue
        if not (isinstance(d, E.Expr) and dt.is_int(d.dtype)):
            raise error(f"on-chip buffer shapes must be positive ints or integer sizes known at launch, got {d!r}")
        late = sorted({v.name for v in free_vars(d) if v.kind not in LAUNCH_KNOWN})
        if late or loads_in(d):
            what = ", ".join(late) if late else "a value read from memory"
            raise error(f"the shared buffer size {d} depends on {what}, which is not known when the kernel is "
                        "launched", hint="size a dynamic shared buffer by scalar kernel arguments and T.dynamic "
                        "sizes only (the launcher reserves its memory before any block runs)")
        out.append(d)
    return tuple(out)


def is_dynamic_region(r: t.Region) -> bool:
    """A tile copied or filled element by element: a run-time extent, or a part of a shared buffer
    sized at launch (whose bounds only a run-time check can keep)."""
    return not all(isinstance(x, int) for x in r.extents) or r.buffer.scope == "shared" and is_dynamic_buffer(r.buffer)


def copy_elements(src: t.Region, dst: t.Region, pad=None) -> None:
    """``T.copy`` of a run-time size: an element loop (dtype-converting, global bounds respected;
    out-of-bounds source elements read as ``pad``, zero when not given)."""
    shape, limits = _iteration_shape(src, dst)

    def body(idx):
        store = _copy_store(idx)
        if limits:  # a run-time extent against a compile-time one: the elements both sides have
            cond = None
            for d, n in limits:
                c = idx[d] < n
                cond = c if cond is None else E.binary("and", cond, c)
            store = t.IfThenElse(cond, store, None, loc=current().loc)
        return store

    def _copy_store(idx):
        sidx, didx = _indices(src, idx, shape), _indices(dst, idx, shape)
        value = E.Load(src.buffer, sidx)
        sp = _in_bounds(src.buffer, sidx)
        if sp is not None and pad is not None:  # the load only in bounds (a vectorized select would issue it)
            inside = t.BufferStore(dst.buffer, didx, E.cast(dst.buffer.dtype, value), loc=current().loc)
            outside = t.BufferStore(dst.buffer, didx, E.cast(dst.buffer.dtype, pad), loc=current().loc)
            store = t.IfThenElse(sp, inside, outside, loc=current().loc)
            dp = _in_bounds(dst.buffer, didx)
            return store if dp is None else t.IfThenElse(dp, store, None, loc=store.loc)
        if sp is not None:
            value = E.select(sp, value, E.Const(0, src.buffer.dtype))
        store = t.BufferStore(dst.buffer, didx, E.cast(dst.buffer.dtype, value), loc=current().loc)
        dp = _in_bounds(dst.buffer, didx)
        return store if dp is None else t.IfThenElse(dp, store, None, loc=store.loc)

    _check_operand(src, "T.copy", shape)
    _check_operand(dst, "T.copy", shape)
    _loop(list(shape), body, "T.copy")


def fill_elements(dst: t.Region, value) -> None:
    """``T.fill`` of a run-time size: an element loop."""
    shape = tuple(dst.shape)

    def body(idx):
        didx = _indices(dst, idx, shape)
        store = t.BufferStore(dst.buffer, didx, E.cast(dst.buffer.dtype, value), loc=current().loc)
        dp = _in_bounds(dst.buffer, didx)
        return store if dp is None else t.IfThenElse(dp, store, None, loc=store.loc)

    _check_operand(dst, "T.fill", shape)
    _loop(list(shape), body, "T.fill")


def _loop(shape: list, body_of, what: str) -> None:
    """The element loop: a T.Parallel over a compile-time shape (fragments welcome), else chunked."""
    b = current()
    if all(isinstance(x, int) for x in shape):
        vs = tuple(E.Var(b.fresh("e"), "int32", kind="loop") for _ in shape)
        b.emit(t.ParallelFor(vs, tuple(shape), body_of(vs), loc=b.loc))
        return
    element_loop(b, shape, body_of, what)


def check_dynamic_shared(func: t.PrimFunc) -> None:
    """At most one dynamic shared buffer per kernel, used by element accesses only."""
    found: list = []

    def f(s):
        if isinstance(s, t.Alloc) and s.buffer.scope == "shared" and is_dynamic_buffer(s.buffer):
            if found:
                raise CompileError(f"a second shared buffer of a run-time size ({s.buffer.name}; the first is "
                                   f"{found[0].name}): a kernel may have one", s.loc,
                                   hint="allocate one dynamic shared buffer and slice it, e.g. one buffer of "
                                   "(2 * n, 64) rows for two tiles of n rows")
            found.append(s.buffer)
            return
        if isinstance(s, (t.BufferStore, t.ParallelFor, t.For, t.IfThenElse, t.SeqStmt, t.LetStmt, t.Alloc)):
            return
        for r in regions_of(s):
            buf = r.buffer if isinstance(r, t.Region) else r
            if isinstance(buf, t.Buffer) and buf.scope != "global" and is_dynamic_buffer(buf):
                raise CompileError(f"{type(s).__name__} on {buf.name}{tuple(buf.shape)}, a shared buffer of a "
                                   "run-time size: this tile operation needs a compile-time tile shape",
                                   s.loc, hint="use a buffer of compile-time shape for it (copy the part you "
                                   "need with T.copy), or work on the elements in a T.Parallel loop")

    walk(func.body, f)


def _check_operand(r: t.Region, what: str, shape) -> None:
    if r.buffer.scope in ("fragment", "local", "var") and not all(isinstance(x, int) for x in shape):
        raise error(f"{what} of a run-time size into or out of {r.buffer.name} ({r.buffer.scope}): fragments and "
                    "local buffers have compile-time shapes", hint="copy a compile-time tile (a slice of constant "
                    "extent, bounds are checked for you), or go through shared memory")


def _iteration_shape(src: t.Region, dst: t.Region) -> tuple:
    """(loop shape, [(loop dim, run-time bound)]): the common shape of the two tiles; where one side's
    extent is known only at run time and the other's at compile time (``T.copy(A[0:n], S)`` with
    ``S`` of 1024 elements), TileLang copies the elements both sides have: the loop runs over the
    compile-time extent and an element is copied when it is below the run-time one."""
    a, b = tuple(src.shape), tuple(dst.shape)
    if t.same_dims(a, b):
        return a, []
    a2 = tuple(x for x in a if not (isinstance(x, int) and x == 1))
    b2 = tuple(x for x in b if not (isinstance(x, int) and x == 1))
    if t.same_dims(a2, b2):
        return a2, []
    for x, y in ((a, b), (a2, b2)):
        if len(x) != len(y):
            continue
        shape, limits = [], []
        for d, (p, q) in enumerate(zip(x, y)):
            if t.same_dims((p,), (q,)):
                shape.append(p)
            elif isinstance(p, int) != isinstance(q, int):
                static, dynamic = (p, q) if isinstance(p, int) else (q, p)
                shape.append(static)
                limits.append((d, dynamic))
            else:
                break
        else:
            return tuple(shape), limits
    raise error(f"T.copy between tiles of shapes {a} and {b}, which cannot be shown equal",
                hint="slice both sides with the same sizes (the same T.dynamic names or kernel arguments)")


def _indices(r: t.Region, idx, shape) -> tuple:
    dims = [d for d in range(r.buffer.ndim) if d not in r.squeezed]
    if len(dims) != len(shape):
        dims = [d for d in dims if not (isinstance(r.extents[d], int) and r.extents[d] == 1)]
    out = list(r.starts)
    for v, d in zip(idx, dims):
        out[d] = r.starts[d] + v
    return tuple(out)


def _in_bounds(buf: t.Buffer, idx):
    """Global tensors, and shared buffers sized at launch: elements outside are not read or written."""
    if buf.scope != "global" and not (buf.scope == "shared" and is_dynamic_buffer(buf)):
        return None
    return bounds_condition(buf.shape, idx)
