"""The operands of ``T.reduce_*`` in TileLang's spellings.

TileLang takes the buffer of a subscripted operand: ``T.reduce_sum(x, out[0], dim=0)`` reduces into
the one-element buffer ``out``, and a scalar ``T.alloc_var`` is a destination too (every thread then
holds the result in its own copy).  Subscripts that name a part of a larger buffer are refused: the
reduction writes the whole destination.
"""

from __future__ import annotations

from ..ir import expr as E
from ..ir import tile as t
from .builder import current, error


def reduce_operand(x, op: str, what: str) -> t.Buffer:
    """The buffer a reduce operand stands for: a buffer, or ``buf[0, ...]`` of a one-element buffer."""
    if isinstance(x, t.Buffer):
        return x
    if isinstance(x, E.Load) and _numel(x.buffer) == 1 and all(E.const_value(i) == 0 for i in x.indices):
        return x.buffer
    if isinstance(x, t.Region) and x.is_full():
        return x.buffer
    raise error(f"T.reduce_{op} {what} must be a whole buffer, got {x!r}",
                hint="pass the buffer itself (a one-element buffer may be written out[0]); to reduce into part "
                "of a larger buffer, reduce into a fragment of the result's shape and T.copy it there")


def reduce_into_register(op: str, src: t.Buffer, dst: t.Buffer, dim: int, clear: bool) -> None:
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
    b.emit(t.Reduce(op, src, tmp, dim, clear))
    b.emit(t.BufferStore(dst, zero, E.Load(tmp, zero), loc=b.loc))


def _numel(buf: t.Buffer) -> int | None:
    n = 1
    for d in buf.shape:
        if not isinstance(d, int):
            return None
        n *= d
    return n
