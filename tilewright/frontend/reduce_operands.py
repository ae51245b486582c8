"""The operands of ``T.reduce_*`` in TileLang's spellings.

TileLang takes the buffer of a subscripted operand: ``T.reduce_sum(x, out[0], dim=0)`` reduces into
the one-element buffer ``out``, and a scalar ``T.alloc_var`` is a destination too (every thread then
holds the result in its own copy).  Subscripts that name a part of a larger buffer are refused: the
reduction writes the whole destination.
"""

from __future__ import annotations

import math

from ..ir import expr as E
from ..ir import tile as t
from ..ir.reducer import combine
from .builder import current, error


def reduce_operand(x, op: str, what: str) -> t.Buffer:
    """The buffer a reduce operand stands for: a buffer, or ``buf[0, ...]`` of a one-element buffer."""
    if isinstance(x, t.Buffer):
        return x
    if isinstance(x, E.Load) and _numel(x.buffer) == 1 and all(E.const_value(i) == 0 for i in x.indices):
        return x.buffer
    if isinstance(x, t.Region) and x.is_full():
        return x.buffer
    if what == "source" and _is_view(x):
        return _view_in_shared(x)
    raise error(f"T.reduce_{op} {what} must be a whole buffer, got {x!r}",
                hint="pass the buffer itself (a one-element buffer may be written out[0]); to reduce into part "
                "of a larger buffer, reduce into a fragment of the result's shape and T.copy it there")


def _is_view(x) -> bool:
    """A ``T.reshape`` / ``T.view`` of a buffer (``language/views.py``)."""
    return isinstance(getattr(x, "base", None), t.Buffer) and hasattr(x, "store_element")


def _view_in_shared(view) -> t.Buffer:
    """The elements of ``view`` (another shape of the same row-major elements) in a shared tile of
    the view's shape, written by a ``T.Parallel`` over the underlying buffer (which reads it in its
    own order, whatever its layout); the reduction then reads that tile."""
    b = current()
    base = view.base
    if base.static_shape() is None or base.scope not in ("fragment", "shared", "local"):
        raise error(f"T.reduce of the view {view.name}: the viewed buffer must be a fragment, shared or local "
                    "buffer of a static shape")
    tmp = t.Buffer(b.fresh(f"{base.name}_reshaped"), tuple(view.shape), base.dtype, "shared", loc=b.loc)
    b.emit(t.Alloc(tmp))
    vs = tuple(E.Var(b.fresh("rv"), "int32", kind="loop") for _ in base.shape)
    flat = E.as_expr(0)
    for v, n in zip(vs, base.shape):
        flat = flat * n + v
    at = []
    for n in reversed(view.shape):
        at.append(flat % n)
        flat = flat // n
    store = t.BufferStore(tmp, tuple(reversed(at)), E.Load(base, vs), loc=b.loc)
    if base.scope == "local":  # per-thread elements: each thread's own copy goes through the tile
        raise error(f"T.reduce of the view {view.name} of a per-thread buffer is not supported",
                    hint=f"reduce {base.name} itself, or copy it to a fragment first")
    b.emit(t.ParallelFor(vs, tuple(base.shape), store, loc=b.loc))
    return tmp


def reduce_into_register(op: str, src: t.Buffer, dst: t.Buffer, dim: int, clear: bool, nan_propagate: bool) -> None:
    """Reduce into a per-thread ``T.alloc_var`` (or one-element ``T.alloc_local``): through a
    one-element fragment that every thread holds after the reduction, copied into each thread's
    register.  ``clear=False`` starts from the register's value (the same in every thread, as a
    reduction's result is)."""
    b = current()
    if _numel(dst) != 1:
        raise error(f"T.reduce_{op} into the per-thread buffer {dst.name}{tuple(dst.shape)}: only a scalar "
                    "(T.alloc_var or a one-element T.alloc_local) can hold a reduction's result per thread",
                    hint="reduce into a T.alloc_fragment buffer of the result's shape instead")
    tmp = t.Buffer(b.fresh(f"{dst.name}_reduced"), tuple(dst.shape), dst.dtype, "fragment", loc=b.loc)
    b.emit(t.Alloc(tmp))
    zero = tuple(E.as_expr(0) for _ in dst.shape)
    if not clear:
        v = E.Var(b.fresh("r"), "int32", kind="loop")
        b.emit(t.ParallelFor((v,), (1,), t.BufferStore(tmp, zero, E.Load(dst, zero), loc=b.loc), loc=b.loc))
    b.emit(t.Reduce(op, src, tmp, dim, clear, nan_propagate=nan_propagate))
    b.emit(t.BufferStore(dst, zero, E.Load(tmp, zero), loc=b.loc))


def reduce_per_thread(op: str, src: t.Buffer, dst: t.Buffer, dim: int, clear: bool, nan_propagate: bool) -> None:
    """Reduce a per-thread array (``T.alloc_local``) into a per-thread destination: each thread folds
    its own elements with a serial loop (no exchange between threads), in index order."""
    import itertools

    from .reducer_epochs import identity

    b = current()
    if dst.scope not in ("local", "var"):
        raise error(f"T.reduce_{op} of the per-thread buffer {src.name} into {dst.name} ({dst.scope}): the result "
                    "of a per-thread reduction is per-thread too",
                    hint="reduce into a T.alloc_local / T.alloc_var buffer (or T.copy the source into a fragment)")
    shape = src.static_shape()
    kept = [n for d, n in enumerate(shape or ()) if d != dim]
    if shape is None or _numel(dst) != (math.prod(kept) if kept else 1):
        raise error(f"T.reduce_{op}: reducing {src.name}{tuple(src.shape)} along dim {dim} does not give the "
                    f"{_numel(dst)} elements of {dst.name}{tuple(dst.shape)}")
    for n_out, at in enumerate(itertools.product(*[range(n) for n in kept])):
        didx = _unravel(n_out, dst.shape) if dst.scope == "local" else (E.as_expr(0),)
        j = E.Var(b.fresh("rk"), "int32", kind="loop")
        idx = list(at)
        idx.insert(dim, j)
        x = E.cast(dst.dtype, E.Load(src, tuple(E.as_expr(i) for i in idx)))
        if op in ("abssum", "absmax"):
            x = E.call("abs", [x])
        if clear:
            b.emit(t.BufferStore(dst, didx, identity({"abssum": "sum", "absmax": "max"}.get(op, op), dst.dtype),
                                 loc=b.loc))
        fold = combine(op, E.Load(dst, didx), x, nan_propagate)
        b.emit(t.For(j, E.as_expr(0), E.as_expr(shape[dim]), t.BufferStore(dst, didx, fold, loc=b.loc), "serial",
                     loc=b.loc))


def _unravel(k: int, shape) -> tuple:
    out = []
    for n in reversed(shape):
        out.append(E.as_expr(k % n))
        k //= n
    return tuple(reversed(out))


def _numel(buf: t.Buffer) -> int | None:
    n = 1
    for d in buf.shape:
        if not isinstance(d, int):
            return None
        n *= d
    return n
