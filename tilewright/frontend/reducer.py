"""TileLang's reducer calls as the kernel source writes them: ``T.alloc_reducer``,
``T.reducer_init``, ``T.reducer_update`` and ``T.finalize_reducer``.

They emit markers (``InitMark``, ``UpdateMark``, ``FinalizeMark``) that ``frontend/reducer_epochs``
turns into the reducer's Tile IR once the whole function is read (the legacy spelling -- ``T.clear``
/ ``T.fill``, ``acc[i] += v``, an in-place ``T.finalize_reducer(acc)`` -- can only be recognised then).
What can be checked where the call is written is checked here.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from typing import Any

from ..errors import CompileError
from ..ir import dtype as dt
from ..ir import expr as E
from ..ir import tile as t
from ..ir.reducer import REDUCER_OPS
from .builder import current, error

_BITWISE = ("bitand", "bitor", "bitxor")


@dataclass
class ReducerInfo:
    """What ``T.alloc_reducer`` said about a reducer (kept in ``buffer.attrs["reducer"]``)."""

    op: str
    legacy: bool  # allocated with replication= (TileLang's v1 reducer)
    partials: t.Buffer  # the per-thread partials (flat local buffer)


@dataclass(eq=False)
class InitMark(t.Stmt):
    reducer: t.Buffer
    value: Any = None
    loc: Any = None


@dataclass(eq=False)
class UpdateMark(t.Stmt):
    reducer: t.Buffer
    indices: tuple
    value: Any
    loc: Any = None


@dataclass(eq=False)
class FinalizeMark(t.Stmt):
    reducer: t.Buffer
    dst: t.Buffer | None
    batch: int = 1
    loc: Any = None


MARKS = (InitMark, UpdateMark, FinalizeMark)


class BatchError(CompileError, ValueError):
    """``T.finalize_reducer(batch=)`` that is not a positive int (a ValueError too, as in TileLang)."""


def reducer_info(buf) -> ReducerInfo | None:
    return buf.attrs.get("reducer") if isinstance(buf, t.Buffer) else None


def alloc_reducer(shape, dtype, op="sum", replication=None) -> t.Buffer:
    b = current()
    if b.kernel is None:
        raise error("T.alloc_reducer must be called inside `with T.Kernel(...)`")
    if op not in REDUCER_OPS:
        raise error(f"T.alloc_reducer(op={op!r}): the op is one of {', '.join(map(repr, REDUCER_OPS))}")
    dtype = dt.canon(dtype)
    if op in _BITWISE and not dt.is_int(dtype):
        raise error(f"bitwise reducer op {op!r} requires an integer dtype, got {dtype}",
                    hint="use an int32/int64 (or other integer) reducer for bitand/bitor/bitxor")
    if replication not in (None, "all", "none"):
        raise error(f"T.alloc_reducer(replication={replication!r}) must be 'all', 'none' or left out")
    if replication is not None and op in _BITWISE:
        raise error("the legacy reducer (replication=...) supports op sum/max/min only",
                    hint="leave out replication= and use T.reducer_init / T.reducer_update / T.finalize_reducer")
    if isinstance(shape, builtins.int) or isinstance(shape, E.Const):
        shape = (shape,)
    shape = tuple(E.const_value(x) if isinstance(x, E.Expr) else x for x in shape)
    if not shape or not all(isinstance(x, builtins.int) and not isinstance(x, builtins.bool) and x > 0
                            for x in shape):
        raise error(f"T.alloc_reducer: the shape must be positive compile-time ints, got {shape}")
    numel = 1
    for x in shape:
        numel *= x
    buf = t.Buffer(b.fresh("reducer"), shape, dtype, "fragment", loc=b.loc)
    buf.attrs["auto_name"] = True
    partials = t.Buffer(b.fresh("reducer_partials"), (numel,), dtype, "local", loc=b.loc)
    buf.attrs["reducer"] = ReducerInfo(op, replication is not None, partials)
    b.emit(t.Alloc(buf))
    return buf


def _reducer_arg(x, call: str) -> t.Buffer:
    if reducer_info(x) is None:
        raise error(f"{call} takes a buffer from T.alloc_reducer, got {x!r}",
                    hint="allocate the reducer with T.alloc_reducer(shape, dtype, op=...)")
    return x


def reducer_init(reducer, init=None) -> None:
    b = current()
    acc = _reducer_arg(reducer, "T.reducer_init")
    value = None
    if init is not None:
        if isinstance(init, (builtins.int, builtins.float)) and not isinstance(init, builtins.bool):
            value = E.Const(init, acc.dtype)
        elif isinstance(init, E.Expr):
            if init.dtype != acc.dtype:
                raise error(f"the T.reducer_init value's dtype {init.dtype} does not match reducer {acc.name} "
                            f"of {acc.dtype}", hint=f"cast it: T.cast(value, {acc.dtype!r})")
            value = init
        else:
            raise error(f"T.reducer_init(init=...) takes a scalar value, got {init!r}")
    b.emit(InitMark(acc, value))


def reducer_update(target, value) -> None:
    b = current()
    if not isinstance(target, E.Load) or reducer_info(target.buffer) is None:
        raise error(f"T.reducer_update expects `acc[indices]` of a T.alloc_reducer buffer as its first argument, "
                    f"got {target!r}")
    if not b.parallel_depth:
        raise error(f"T.reducer_update of {target.buffer.name} outside any T.Parallel loop: which thread "
                    "contributes is defined by the iterations of a T.Parallel loop",
                    hint="put the update inside `for ... in T.Parallel(...)`")
    acc = target.buffer
    b.emit(UpdateMark(acc, tuple(target.indices), E.cast(acc.dtype, value)))


def finalize_reducer(reducer, dst=None, batch=1, annotations=None) -> None:
    b = current()
    acc = _reducer_arg(reducer, "T.finalize_reducer")
    if not isinstance(batch, builtins.int) or isinstance(batch, builtins.bool) or batch < 1:
        raise BatchError(f"finalize_reducer: batch must be >= 1, got {batch!r}", b.loc,
                         hint="batch= is how many results share one exchange; leave it at 1")
    numel = reducer_info(acc).partials.shape[0]
    if batch > numel:
        raise error(f"finalize_reducer: batch={batch} exceeds total output elements ({numel}) of {acc.name}")
    if numel % batch:
        raise error(f"finalize_reducer: batch={batch} must evenly divide the {numel} output elements of {acc.name}")
    if dst is not None:
        if not isinstance(dst, t.Buffer) or dst.scope != "fragment" or reducer_info(dst) is not None:
            raise error(f"T.finalize_reducer({acc.name}, dst): dst must be a T.alloc_fragment buffer, got {dst!r}")
        if tuple(dst.shape) != tuple(acc.shape) or dst.dtype != acc.dtype:
            raise error(f"T.finalize_reducer: dst {dst.name}{tuple(dst.shape)} of {dst.dtype} must have the "
                        f"reducer's shape {tuple(acc.shape)} and dtype {acc.dtype}")
    b.emit(FinalizeMark(acc, dst, batch))
