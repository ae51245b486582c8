"""Small fragments read as block-wide tables become per-thread copies (``local`` buffers).

TileLang lets a program read a small fragment at an index outside any ``T.Parallel`` loop -- a block
mask copied from global memory and read as ``a = mask_f[k]`` in a serial or pipelined loop -- and
steer tile operations with the value (``if a >= 0: T.copy(...)``): its layout inference gives such a
fragment to every thread whole, so the value read is the same in all of them.  Here the fragment
becomes a ``local`` buffer of the same shape: every thread holds all its elements, filled by the
same tile copy.  The uniformity analysis (``ir.uniformity``) then sees what is true: a value read at
a block-uniform index of a buffer every thread wrote alike is block-uniform, and tile operations
under conditions on it are performed by all threads together.

Rewritten only when the fragment is small (``MAX_ELEMENTS``), read somewhere outside ``T.Parallel``,
has no annotated layout, and is written only by ``T.copy`` from global or shared memory, by
``T.fill`` / ``T.clear`` or by element stores outside ``T.Parallel``; any other use (``T.gemm``,
``T.reduce_*``, a store inside ``T.Parallel``, a copy out of it) keeps it a fragment, and the
verifier explains what is wrong if anything is.
"""

from __future__ import annotations

import math

from ..ir import tile as t
from ..ir import tile_ops
from ..ir.verifier import exprs_of
from ..ir.visitor import child_stmts, loads_in

MAX_ELEMENTS = 128  # a per-thread copy of more would cost more registers than a table is worth


def uniform_fragments_to_local(func: t.PrimFunc) -> t.PrimFunc:
    """Contract: in place on ``func``; each fragment that qualifies (module docstring) gets scope
    ``local``; nothing else changes."""
    read_outside: set = set()
    disqualified: set = set()
    fragments: list = []

    def visit(s, in_parallel: bool) -> None:
        if s is None:
            return
        if isinstance(s, t.Alloc) and s.buffer.scope == "fragment":
            fragments.append(s.buffer)
        if isinstance(s, t.ParallelFor):
            for c in child_stmts(s):
                visit(c, True)
            return
        _classify_writes(s, in_parallel, disqualified)
        if not in_parallel:
            for e in exprs_of(s):
                read_outside.update(ld.buffer for ld in loads_in(e) if ld.buffer.scope == "fragment")
        for c in child_stmts(s):
            visit(c, in_parallel)

    visit(func.body, False)
    for buf in fragments:
        small = all(isinstance(n, int) for n in buf.shape) and math.prod(buf.shape) <= MAX_ELEMENTS
        if buf in read_outside and buf not in disqualified and small and not buf.attrs.get("layout"):
            buf.scope = "local"
            buf.attrs["uniform_table"] = True  # infer_layouts: the loops filling it run whole in every thread
    return func


def _classify_writes(s, in_parallel: bool, disqualified: set) -> None:
    """Add to ``disqualified`` the fragments statement ``s`` uses in a way a per-thread copy could
    not stand for."""
    if isinstance(s, t.BufferStore):
        if in_parallel and s.buffer.scope == "fragment":
            disqualified.add(s.buffer)  # each iteration's thread holds its own positions
        return
    regions = tile_ops.regions_of(s)
    if not regions:
        return
    if isinstance(s, t.Copy) and s.src.buffer.scope in ("global", "shared") and s.mode == "sync":
        return  # every thread copies the whole tile alike
    if isinstance(s, t.Fill):
        return
    disqualified.update(r.buffer for r in regions if r.buffer.scope == "fragment")
