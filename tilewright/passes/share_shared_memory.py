"""Pass ``share_shared_memory``: let shared buffers whose lifetimes do not overlap share memory, when
the kernel's shared buffers one after another would not fit the target (TileLang reuses shared memory
the same way; flash-attention backward kernels keep their dK / dV staging tiles in the memory the
main loop's tiles used).

Needs: Tile IR after ``infer_layouts`` and ``insert_barriers`` (shared layouts decided, barriers
placed); a target.
Guarantees: nothing changes when the buffers fit one after another (each at the next 128-byte, or
1 KiB for TMA layouts, boundary, as ``LoweringContext`` places them).  Otherwise, when the kernel is
a plain block or a warp-specialized one (one consumer partition beside producers, at the top level),
and has no shared buffer sized at launch:

* the timeline is the top-level statements of the ``T.Kernel`` body, the consumer partition's
  statements in its place; a buffer's lifetime is the range of timeline statements that touch it (a
  loop is one statement: a buffer used in it lives through all its iterations).  What a producer
  touches lives from the start of the kernel (its copies may land any time before the consumer's
  last wait for them) to its last use in the timeline; mbarrier words, sources of TMA stores (read
  asynchronously until a later wait) live from their first use to the end of the kernel (a staged
  GEMM epilogue's C tile may take the memory of the operand ring its mainloop is done with); buffers
  used nowhere in the timeline live through the whole kernel;
* offsets are assigned largest buffer first, each at the lowest aligned offset free of the buffers
  whose lifetimes overlap its own (``func.attrs["tw.shared_offsets"]``, which ``LoweringContext``
  uses instead of placing buffers one after another);
* a block barrier is inserted before the top-level statement where a buffer starts to live in memory
  that an earlier, now dead, buffer used: every thread is done with the old contents before any
  writes the new ones (asynchronous copies into a buffer are issued after that statement starts);
* when even sharing does not fit, nothing changes, and the lowering's shared-memory error stands.

``packed_bytes`` is the same computation on the declared buffers, for ``check_target_limits``.
"""

from __future__ import annotations

import dataclasses

from ..ir import dtype as dt
from ..ir import expr as E
from ..ir import thread as th
from ..ir import tile as t
from ..ir.layout import SharedLayout
from ..ir.visitor import rebuild, walk, walk_expr

OFFSETS_ATTR = "tw.shared_offsets"


def share_shared_memory(func: t.PrimFunc, ctx) -> t.PrimFunc:
    kernels = []
    walk(func.body, lambda s: kernels.append(s) if isinstance(s, t.Kernel) else None)
    if len(kernels) != 1:
        return func
    kernel = kernels[0]
    limit = ctx.target.max_shared_bytes
    layouts = func.plans.shared_layouts

    def size(buf):
        lay = layouts.get(buf) or SharedLayout(buf.shape, buf.dtype)
        return lay.numel * dt.nbytes(buf.dtype), 1024 if lay.tma else 128

    plan = _plan(kernel, size, limit)
    if plan is None:
        return func
    offsets, barrier_before, timeline = plan
    func.attrs[OFFSETS_ATTR] = offsets
    if barrier_before:
        kernel.body = _with_barriers(kernel.body, timeline, barrier_before)
    return func


def packed_bytes(kernel: t.Kernel, size) -> int | None:
    """The shared bytes of ``kernel``'s buffers placed by lifetime (``size(buf)`` -> (bytes, alignment)),
    or None when they are not placed that way (nested thread partitions, a buffer sized at launch)."""
    plan = _plan(kernel, size, None)
    if plan is None:
        return None
    offsets, _, _ = plan
    return max((off + size(b)[0] for b, off in offsets.items()), default=0)


def _timeline(kernel: t.Kernel):
    """(statements in program order, where each stands (None: the kernel body, else the partition
    holding it), the statements of concurrent partitions), or None when the kernel's partitions are
    not a consumer beside producers at the top level.  A warp-specialized kernel's consumer partition
    is the timeline (its statements in place of it); its producers run beside it."""
    top = _top_level(kernel.body)
    parts = [s for s in top if isinstance(s, t.ThreadPartition)]
    nested = []
    for s in top:
        if not isinstance(s, t.ThreadPartition):
            walk(s, lambda x: nested.append(x) if isinstance(x, t.ThreadPartition) else None)
    if nested:
        return None
    if not parts:
        return top, [None] * len(top), []
    consumers = [p for p in parts if p.role == "consumer"]
    if len(consumers) != 1:
        return None
    main = consumers[0]
    walk(main.body, lambda x: nested.append(x) if isinstance(x, t.ThreadPartition) else None)
    if nested:
        return None
    stmts, where = [], []
    for s in top:
        if s is main:
            inner = _top_level(main.body)
            stmts += inner
            where += [main] * len(inner)
        elif not isinstance(s, t.ThreadPartition):
            stmts.append(s)
            where.append(None)
    return stmts, where, [p for p in parts if p is not main]


def _plan(kernel: t.Kernel, size, limit):
    """(offsets, timeline indices needing a barrier, the timeline), or None: nothing to share, not
    shareable, or (with ``limit``) fits without sharing / does not fit even with it."""
    allocs = []
    walk(kernel.body, lambda s: allocs.append(s.buffer) if isinstance(s, t.Alloc) and s.buffer.scope == "shared"
         else None)
    if not allocs or any(b.static_shape() is None for b in allocs):
        return None
    if limit is not None:
        top = 0
        for b in allocs:
            n, align = size(b)
            top = (top + align - 1) // align * align + n
        if top <= limit:
            return None
    found = _timeline(kernel)
    if found is None:
        return None
    stmts, where, concurrent = found
    last = len(stmts) - 1
    span: dict = {}
    whole: set = set()
    for i, s in enumerate(stmts):
        for buf, pinned in _shared_touched(s):
            lo, hi = span.get(buf, (i, i))
            span[buf] = (min(lo, i), max(hi, i))
            if pinned:
                whole.add(buf)
    # producers run beside the timeline: what they touch lives from the start (their writes may come
    # any time before the consumer's last wait for them) to its last use in the timeline
    for p in concurrent:
        for buf, pinned in _shared_touched(p.body):
            span[buf] = (0, span[buf][1]) if buf in span and not pinned else (0, last)
    for b in allocs:
        if b not in span or b.dtype == "uint64":  # mbarriers, unknown uses: the whole kernel
            span[b] = (0, last)
        elif b in whole:  # a TMA store's source: from its first use to the end (the last wait is there)
            span[b] = (span[b][0], last)
    order = sorted(allocs, key=lambda b: (-size(b)[0], allocs.index(b)))
    offsets: dict = {}
    for b in order:
        n, align = size(b)
        lo, hi = span[b]
        busy = sorted((offsets[o], offsets[o] + size(o)[0]) for o in offsets
                      if not (span[o][1] < lo or hi < span[o][0]))
        off = 0
        for start, end in busy:
            if off + n <= start:
                break
            off = max(off, (end + align - 1) // align * align)
        offsets[b] = off
    total = max(offsets[b] + size(b)[0] for b in offsets)
    if limit is not None and total > limit:
        return None
    barrier_before = set()
    for b in allocs:
        lo = span[b][0]
        for o in allocs:
            if span[o][1] < lo and _overlap(offsets[b], size(b)[0], offsets[o], size(o)[0]):
                barrier_before.add(lo)
    return offsets, barrier_before, (stmts, where)


def _with_barriers(body, timeline, barrier_before: set):
    """``body`` with a barrier before each timeline statement listed (one in a consumer partition
    synchronizes that partition's threads: ``lower_to_threads`` makes it a named barrier)."""
    stmts, where = timeline
    before = {id(stmts[i]) for i in barrier_before}

    def spliced(seq):
        out = []
        for s in seq:
            if id(s) in before:
                out.append(th.Barrier())
            out.append(s)
        return out

    out = []
    for s in _top_level(body):
        if isinstance(s, t.ThreadPartition) and s in where:
            s = rebuild(s, body=t.SeqStmt(spliced(_top_level(s.body))))
            out.append(s)
        else:
            out.extend(spliced([s]))
    return t.SeqStmt(out)


def _overlap(a, na, b, nb) -> bool:
    return a < b + nb and b < a + na


def _top_level(body) -> list:
    if isinstance(body, t.SeqStmt):
        out = []
        for x in body.stmts:
            out.extend(_top_level(x))
        return out
    return [body]


def _shared_touched(stmt) -> list:
    """(shared buffer, lives to the end) for every shared buffer a statement (and what it holds) names;
    a TMA store's source is read asynchronously after the statement, until a later wait."""
    out: list = []

    def add_expr(e):
        walk_expr(e, lambda x: out.append((x.buffer, False))
                  if isinstance(x, E.Load) and x.buffer.scope == "shared" else None)

    def add(v, pinned=False):
        if isinstance(v, t.Buffer):
            if v.scope == "shared":
                out.append((v, pinned))
        elif isinstance(v, t.Region):
            add(v.buffer, pinned)
            for x in v.starts:
                add_expr(x)
        elif isinstance(v, E.Expr):
            add_expr(v)
        elif isinstance(v, (tuple, list, frozenset, set)):
            for x in v:
                add(x, pinned)

    def visit(s):
        if isinstance(s, t.Alloc) and s.init is None:
            return  # a declaration: the buffer's place, not a use of its contents
        pinned = isinstance(s, t.Copy) and s.mode == "tma_store"
        if dataclasses.is_dataclass(s):
            for f in dataclasses.fields(s):
                v = getattr(s, f.name)
                if f.name in ("body", "then_body", "else_body", "stmts"):
                    continue
                add(v, pinned and f.name == "src")
        for v in getattr(s, "attrs", {}).values() if isinstance(getattr(s, "attrs", None), dict) else ():
            add(v)

    walk(stmt, visit)
    return out
