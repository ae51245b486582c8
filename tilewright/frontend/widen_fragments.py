"""Fragments that ``T.Parallel`` loops index past their declared shape are widened to the loops' extents.

TileLang's attention-sink examples declare ``sinks = T.alloc_fragment([heads], dtype)`` and then fill
and read it as ``sinks[i]`` in ``T.Parallel(block_M)`` loops (``block_M`` > ``heads``).  TileLang keeps
a fragment in the registers its layout gives each thread, and that layout follows the loop: thread
``t`` keeps ``sinks[i]`` for its own ``i`` whatever the declared extent, so the program computes as if
the fragment had ``block_M`` elements.  Here such a fragment is given that shape (with a warning that
names it): every access is an element access inside ``T.Parallel`` loops, at an index that is a loop
variable or a constant, so the widened fragment holds exactly what each index wrote.

Only fragments whose every use is such an element access are widened; one with a ``T.Fragment`` layout
or used by a tile operation
(``T.copy``, ``T.fill``, ``T.reduce_*``, ``T.gemm``...), read or written outside ``T.Parallel``, or
indexed by another expression keeps its shape, and an index past it stays an error.
"""

from __future__ import annotations

import warnings

from ..errors import TilewrightWarning
from ..ir import expr as E
from ..ir import tile as t
from ..ir import tile_ops
from ..ir.verifier import exprs_of
from ..ir.visitor import child_stmts, loads_in


def widen_fragments(func: t.PrimFunc) -> None:
    need: dict = {}  # fragment -> per-dimension extent its accesses reach (None: disqualified)

    def note(buf, indices, ranges):
        if buf.scope != "fragment" or need.get(buf, 0) is None or buf.static_shape() is None:
            return
        if "user_fragment" in buf.attrs:  # its T.Fragment layout is for the declared shape
            need[buf] = None
            return
        reach = []
        for x in indices:
            if isinstance(x, E.Const) and isinstance(x.value, int):
                reach.append(x.value + 1)
            elif isinstance(x, E.Var) and x in ranges:
                reach.append(ranges[x])
            else:
                need[buf] = None
                return
        old = need.get(buf) or [0] * len(reach)
        need[buf] = [max(a, b) for a, b in zip(old, reach)]

    def disqualify(buf):
        if buf.scope == "fragment":
            need[buf] = None

    def visit(s, ranges):
        if isinstance(s, t.ParallelFor):
            if all(isinstance(n, int) for n in s.extents):
                ranges = {**ranges, **dict(zip(s.vars, s.extents))}
            else:
                ranges = None  # a loop sized at run time: nothing inside is widened
        if tile_ops.decl_of(s) is not None:
            for r in tile_ops.regions_of(s):
                disqualify(r.buffer)
        if isinstance(s, t.BufferStore):
            (note(s.buffer, s.indices, ranges) if ranges is not None else disqualify(s.buffer))
        for e in exprs_of(s):
            for ld in loads_in(e):
                (note(ld.buffer, ld.indices, ranges) if ranges is not None else disqualify(ld.buffer))
        for c in child_stmts(s):
            visit(c, ranges)

    _visit_outside(func.body, visit, disqualify)
    for buf, reach in need.items():
        if reach is None or all(r <= n for r, n in zip(reach, buf.shape)):
            continue
        new = tuple(max(r, n) for r, n in zip(reach, buf.shape))
        msg = (f"fragment {buf.name} is declared with shape {tuple(buf.shape)}, but T.Parallel loops index it up "
               f"to {tuple(r - 1 for r in reach)}: it is given shape {new}, as TileLang's registers follow the loops")
        if buf.loc is not None:  # reported at the allocation's line in the kernel source
            warnings.warn_explicit(msg, TilewrightWarning, buf.loc.filename, buf.loc.lineno)
        else:
            warnings.warn(msg, TilewrightWarning, stacklevel=2)
        buf.shape = new
        buf.strides = t.row_major_strides(new)


def _visit_outside(body, visit, disqualify) -> None:
    """Walk the kernel: accesses outside ``T.Parallel`` loops disqualify (``ranges`` None), inside
    they are noted with the loops' extents."""
    def walk_out(s):
        if isinstance(s, t.ParallelFor):
            visit(s, {})
            return
        if tile_ops.decl_of(s) is not None:
            for r in tile_ops.regions_of(s):
                disqualify(r.buffer)
        if isinstance(s, t.BufferStore):
            disqualify(s.buffer)
        for e in exprs_of(s):
            for ld in loads_in(e):
                disqualify(ld.buffer)
        for c in child_stmts(s):
            walk_out(c)

    walk_out(body)
