"""Tile IR of TileLang's reducers (``T.alloc_reducer`` / ``T.reducer_update`` / ``T.finalize_reducer``).

A reducer is a deferred reduction: the iterations of ``T.Parallel`` loops contribute values to its
elements (several iterations to one element), and ``T.finalize_reducer`` combines them.  The
frontend (``frontend/reducer_epochs``) gives each reducer a per-thread array of partials
(``partials``: a flat ``local`` buffer holding one partial per reducer element, in every thread),
so that contributing needs no communication; the threads' partials are combined once, at the
finalize.  Two tile operations remain for the backends:

* ``ReducerUpdate``: inside a ``T.Parallel`` body, ``partials[index] = op(partials[index], value)``
  done once per loop iteration -- by one thread where the loop's layout gives an iteration to
  several threads (replicas), so that replication never multiplies a contribution;
* ``ReducerFinalize``: combine the partials of every thread of the block, combine the starting
  value (``seed``, a per-thread scalar captured at ``T.reducer_init``) once, and write the results
  into the fragment ``dst`` (of the reducer's shape).

The interpreter applies updates to one logical array (every thread's copy alike) and the
finalize then only folds in the seed; ``passes/lower_reducer`` gives them per-thread code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import tile as t
from .expr import Expr
from .tile_ops import TileOpDecl, declare

# combine ops of a reducer (TileLang's alloc_reducer ops)
REDUCER_OPS = ("sum", "max", "min", "bitand", "bitor", "bitxor")


@dataclass(eq=False)
class ReducerUpdate(t.Stmt):
    """One contribution of a ``T.Parallel`` iteration: ``partials[index] op= value``."""

    partials: t.Buffer  # flat local buffer, one partial per reducer element
    index: Expr  # flat (row-major) element index of the reducer
    value: Expr  # the contribution, of the partials' dtype
    op: str
    reducer: str = ""  # the reducer's name, for messages
    loc: Any = None


@dataclass(eq=False)
class ReducerFinalize(t.Stmt):
    """``dst = seed op (op over the block's threads of partials)``, elementwise."""

    partials: t.Buffer
    dst: t.Buffer  # a fragment of the reducer's shape and dtype
    op: str
    seed: t.Buffer | None = None  # a var holding the starting value, or None (the identity)
    batch: int = 1  # TileLang's results per exchange: scheduling only
    reducer: str = ""
    loc: Any = None


def _elem(s: ReducerUpdate) -> t.Region:
    return t.Region(s.partials, (s.index,), (1,), (0,))


def _update_rebuild(s: ReducerUpdate, rf, ef):
    from .visitor import rebuild

    r = rf(_elem(s))
    index, value = r.starts[0], ef(s.value)
    if r.buffer is s.partials and index is s.index and value is s.value:
        return s
    return rebuild(s, partials=r.buffer, index=index, value=value)


def _finalize_regions(s: ReducerFinalize) -> list:
    out = [(t.Region.full(s.partials), "r"), (t.Region.full(s.dst), "w")]
    if s.seed is not None:
        out.append((t.Region.full(s.seed), "r"))
    return out


def _finalize_rebuild(s: ReducerFinalize, rf, ef):
    from .visitor import rebuild

    p, d = rf(t.Region.full(s.partials)).buffer, rf(t.Region.full(s.dst)).buffer
    seed = rf(t.Region.full(s.seed)).buffer if s.seed is not None else None
    if p is s.partials and d is s.dst and seed is s.seed:
        return s
    return rebuild(s, partials=p, dst=d, seed=seed)


def _update_text(s: ReducerUpdate) -> str:
    from .printer import expr_str

    return (f"T.reducer_update({s.partials.name}[{expr_str(s.index)}], {expr_str(s.value)}, op={s.op!r})"
            f"  # {s.reducer}")


declare(ReducerUpdate, TileOpDecl(
    "reducer_update", regions=lambda s: [(_elem(s), "rw")], exprs=lambda s: [s.value],
    rebuild=_update_rebuild, text=_update_text, collective=lambda s: None, in_parallel=True))

declare(ReducerFinalize, TileOpDecl(
    "finalize_reducer", regions=_finalize_regions, rebuild=_finalize_rebuild,
    text=lambda s: f"T.finalize_reducer({s.partials.name}, {s.dst.name}, op={s.op!r}, "
    f"seed={s.seed.name if s.seed is not None else None})  # {s.reducer}"))


def combine(op: str, a, b, nan_propagate: bool = False):
    """``a op b`` for a reduction's fold (``abssum``/``absmax`` fold as sum/max: ``abs`` is applied to
    the elements before).  Max and min drop a NaN operand (``fmaxf``), as TileLang's reductions do;
    with ``nan_propagate`` a NaN operand wins."""
    from . import expr as E

    op = {"abssum": "sum", "absmax": "max"}.get(op, op)
    if op in _BITWISE_C:
        return E.binary(_BITWISE_C[op], a, b)
    if op == "sum":
        return a + b
    m = E.emax(a, b) if op == "max" else E.emin(a, b)
    if nan_propagate and a.dtype.startswith(("float", "bfloat")):
        return E.select(E.call("isnan", [a]), a, E.select(E.call("isnan", [b]), b, m))
    return m


_BITWISE_C = {"bitand": "&", "bitor": "|", "bitxor": "^"}
