"""Tile IR verifier: the checks every frontend result must pass before any pass runs.

It explains each problem with the kernel line: unknown or wrongly scoped buffers, tile shapes that
do not match, gemm operands in the wrong memory or of unsupported types, tile operations inside a
``T.Parallel`` body, and loads from buffers in the wrong scope.
"""

from __future__ import annotations

from ..errors import CompileError
from . import dtype as dt
from . import expr as E
from . import tile as t
from . import tile_ops
from .expr import Load
from .visitor import loads_in, walk


def _squeeze(shape) -> tuple:
    return tuple(s for s in shape if not (isinstance(s, int) and s == 1))


def shapes_match(a, b) -> bool:
    return t.same_dims(tuple(a), tuple(b)) or t.same_dims(_squeeze(a), _squeeze(b))


def verify(func: t.PrimFunc) -> None:
    known = {id(p) for p in func.params if isinstance(p, t.Buffer)}

    def visit(s, depth_parallel=0):
        if isinstance(s, t.Alloc):
            known.add(id(s.buffer))
        elif isinstance(s, t.ParallelFor):
            for x in t_children(s):
                visit_all(x, depth_parallel + 1)
            return
        elif depth_parallel and (d := tile_ops.decl_of(s)) is not None and not d.in_parallel:
            raise CompileError(f"T.{d.name} cannot be used inside a T.Parallel loop", s.loc,
                               hint="tile operations act on whole tiles; put them outside the T.Parallel loop")
        check(s)
        for x in t_children(s):
            visit_all(x, depth_parallel)

    def visit_all(s, dp):
        visit(s, dp)

    def check(s):
        for r in regions_of(s):
            if id(r.buffer) not in known:
                raise CompileError(f"buffer {r.buffer.name} is used before it is allocated", s.loc)
        d = tile_ops.decl_of(s)
        if d is not None:
            d.check(s)
        for e in exprs_of(s):
            for ld in loads_in(e):
                if id(ld.buffer) not in known:
                    raise CompileError(f"buffer {ld.buffer.name} is read before it is allocated", s.loc)

    visit(func.body)
    check_thread_sets(func)
    check_per_thread_locals(func)


def check_per_thread_locals(func: t.PrimFunc) -> None:
    """A ``T.alloc_local`` buffer is per-thread and ``T.Parallel`` spreads its iterations over the
    threads, so an element stored at an iteration-dependent index (``loc[i] = ...``) exists only in
    the thread that ran that iteration.  Read outside ``T.Parallel`` (by every thread), such a buffer
    has no single value: refused."""
    from .visitor import free_vars

    spread: dict = {}  # buffer -> the first T.Parallel store that spreads it over the threads

    def find(s, pvars: frozenset):
        if s is None:
            return
        if isinstance(s, t.ParallelFor):
            pvars = pvars | frozenset(s.vars)
        elif isinstance(s, t.BufferStore) and s.buffer.scope == "local" and pvars:
            if any(free_vars(i) & pvars for i in s.indices):
                spread.setdefault(s.buffer, s)
        for c in t_children(s):
            find(c, pvars)

    def outside(s):
        if s is None or isinstance(s, t.ParallelFor):
            return
        for e in exprs_of(s):
            for ld in loads_in(e):
                w = spread.get(ld.buffer)
                if w is not None:
                    line = f" at line {w.loc.lineno}" if w.loc is not None else ""
                    raise CompileError(
                        f"{ld.buffer.name} is per-thread (T.alloc_local), and its store inside T.Parallel{line} "
                        f"spreads its elements over the threads: outside the loop, {ld.buffer.name}[...] holds a "
                        "value only in the thread that stored it", s.loc,
                        hint=f"allocate {ld.buffer.name} with T.alloc_fragment or T.alloc_shared, or read it inside "
                        "a T.Parallel loop over the same range")
        for c in t_children(s):
            outside(c)

    find(func.body, frozenset())
    if spread:
        outside(func.body)


def _first_partition(s):
    if s is None:
        return None
    found = []
    walk(s, lambda x: found.append(x) if isinstance(x, t.ThreadPartition) and not found else None)
    return found[0] if found else None


def check_thread_sets(func: t.PrimFunc) -> None:
    """Every tile operation and barrier has a set of threads that performs it: the block, or a
    ``ThreadPartition`` (a warp-aligned range inside its parent's).  Refused: such a statement under a
    condition (or in a loop whose bounds) differ between the threads of its set."""
    from . import thread as th
    from .uniformity import Uniformity, collective_kind, first_collective, warp_aligned

    u = Uniformity(func)

    def refuse(body, why: str, construct: str):
        what = first_collective(body) or _first_partition(body)  # a partition's threads must all reach it too
        if what is None:
            return
        kind = collective_kind(what) or f"thread partition {what.role}"
        raise CompileError(
            f"{kind} under {construct} that depends on {why}: the threads would not all "
            "perform it together", what.loc,
            hint="make the condition the same for every thread (compute it from block indices, parameters or "
            "shared/global memory), select a warp-aligned range of the thread index (e.g. `if tx < 128:`) or "
            "use `with T.ws(i):`, or move the tile operation / barrier out of the branch")

    def visit(s, region, base, count):
        if s is None or isinstance(s, t.ParallelFor):
            return
        if isinstance(s, t.Kernel):
            visit(s.body, None, 0, s.num_threads)
            return
        if isinstance(s, t.ThreadPartition):
            inside = base <= s.base and s.base + s.count <= base + count
            if not inside or not warp_aligned(s.base, s.count):
                raise CompileError(
                    f"thread partition {s.role} (threads {s.base}..{s.base + s.count - 1}) must be a whole number "
                    f"of warps within threads {base}..{base + count - 1}", s.loc,
                    hint="use warp-aligned ranges (multiples of 32 threads) inside the enclosing thread set")
            visit(s.body, s, s.base, s.count)
            return
        if isinstance(s, th.MbarrierInit) and region is not None:
            raise CompileError("T.alloc_barrier inside a thread partition: mbarriers are initialised once for the "
                               "whole block", s.loc, hint="allocate the barriers before `with T.ws(...)` / the `if` "
                               "on the thread index")
        if isinstance(s, th.SetMaxNReg) and (base % 128 or count % 128):
            raise CompileError(f"T.set_max_nreg is run by threads {base}..{base + count - 1}, not whole warpgroups",
                               s.loc, hint="call it inside `with T.ws(i):` (every warp of a warpgroup runs it)")
        if isinstance(s, t.IfThenElse):
            why = u.reason(s.cond, region)
            if why and not _warp_vote_over_parallel(s):
                refuse(s.then_body, why, "an `if`")
                refuse(s.else_body, why, "an `if`")
        elif isinstance(s, t.For):
            why = u.reason(s.start, region) or u.reason(s.extent, region)
            if why:
                refuse(s.body, why, "a loop whose bounds")
        for c in t_children(s):
            visit(c, region, base, count)

    visit(func.body, None, 0, 0)


def _warp_vote_over_parallel(s) -> bool:
    """An ``if`` on a warp vote (``T.any_sync`` / ``T.all_sync``: the same in every lane of a warp) whose only
    collective statements are ``T.Parallel`` loops: each warp takes the branch whole, and a T.Parallel's
    iterations are each thread's own elements, so no thread waits for one that skipped it (a loop that needs a
    fragment's layout converted through shared memory, between block barriers, is refused by
    ``passes/lower_parallel``, where that is known).  Lets a warp skip work none of its lanes needs
    (attention's output rescale where no row's max moved)."""
    from .uniformity import collective_kind

    c = s.cond
    if not (isinstance(c, E.Call) and c.name in ("warp_vote_any", "warp_vote_all")):
        return False
    kinds: list = []
    for body in (s.then_body, s.else_body):
        if body is not None:
            walk(body, lambda x: kinds.append(collective_kind(x)) if collective_kind(x) else None)
    return all(k == "T.Parallel" for k in kinds)


def t_children(s):
    from .visitor import child_stmts

    return child_stmts(s)


def regions_of(s) -> list:
    """The regions a tile op touches (its declaration in ``ir.tile_ops``); [] for other statements."""
    return tile_ops.regions_of(s)


def exprs_of(s) -> list:
    """Every expression a statement holds directly: its own, then its regions' starts."""
    out = []
    if isinstance(s, t.BufferStore):
        out += list(s.indices) + [s.value]
    elif isinstance(s, t.LetStmt):
        out.append(s.value)
    elif isinstance(s, t.IfThenElse):
        out.append(s.cond)
    elif isinstance(s, t.Alloc) and s.init is not None:
        out.append(s.init)
    out += tile_ops.op_exprs(s)
    for r in regions_of(s):
        out += list(r.starts)
    return out


def check_copy(s: t.Copy) -> None:
    src, dst = s.src, s.dst
    if not shapes_match(src.shape, dst.shape):
        raise CompileError(
            f"T.copy: the source tile {src.buffer.name} has shape {src.shape} but the destination "
            f"{dst.buffer.name} has shape {dst.shape}", s.loc,
            hint="make both sides the same tile shape (slice the larger one, or use the start-point form A[i, j])")
    if src.buffer.scope == "var" or dst.buffer.scope == "var":
        raise CompileError("T.copy does not take T.alloc_var scalars; assign them directly", s.loc)


def check_gemm(s: t.Gemm) -> None:
    a, b, c = s.a, s.b, s.c
    for r, name in ((a, "A"), (b, "B")):
        if r.buffer.scope not in ("shared", "fragment"):
            raise CompileError(f"T.gemm operand {name} ({r.buffer.name}) is in {r.buffer.scope} memory; it must be "
                               "in shared memory or a fragment", s.loc,
                               hint=f"copy it first: T.copy(..., {name}_shared) with T.alloc_shared")
    if c.buffer.scope not in ("fragment", "local"):
        raise CompileError(f"T.gemm accumulator C ({c.buffer.name}) must be a fragment (T.alloc_fragment)", s.loc)
    for r, name in ((a, "A"), (b, "B"), (c, "C")):
        if len(r.shape) != 2:
            raise CompileError(f"T.gemm operand {name} must be a 2-D tile, got shape {r.shape}", s.loc)
    m, ka = a.shape if not s.trans_a else a.shape[::-1]
    kb, n = b.shape if not s.trans_b else b.shape[::-1]
    if ka != kb:
        raise CompileError(f"T.gemm: K of A ({ka}) differs from K of B ({kb}) "
                           f"(transpose_A={s.trans_a}, transpose_B={s.trans_b})", s.loc,
                           hint="check the transpose flags against the tile shapes")
    if not t.same_dims(tuple(c.shape), (m, n)):
        raise CompileError(f"T.gemm: C has shape {tuple(c.shape)} but op(A) @ op(B) is {(m, n)}", s.loc)
    if a.buffer.dtype != b.buffer.dtype:
        raise CompileError(f"T.gemm: A is {a.buffer.dtype} but B is {b.buffer.dtype}; give both the same dtype",
                           s.loc, hint="convert one with a dtype-converting T.copy into a buffer of the other dtype")
    if dt.is_float(a.buffer.dtype) and not dt.is_float(c.buffer.dtype):
        raise CompileError(f"T.gemm: float inputs need a float accumulator, C is {c.buffer.dtype}", s.loc)


def check_reduce(s: t.Reduce) -> None:
    src, dst = s.src, s.dst
    if src.scope not in ("fragment", "shared", "local") or dst.scope not in ("fragment", "shared", "local"):
        raise CompileError(f"T.reduce_{s.op}: source and destination must be fragments (or shared tiles), got "
                           f"{src.scope} -> {dst.scope}", s.loc)
    expected = tuple(x for d, x in enumerate(src.shape) if d != s.dim)
    if not shapes_match(expected or (1,), dst.shape):
        raise CompileError(f"T.reduce_{s.op}: reducing {src.name}{tuple(src.shape)} along dim {s.dim} gives shape "
                           f"{expected}, but {dst.name} has shape {tuple(dst.shape)}", s.loc)


def all_loads(func) -> list:
    out = []

    def f(s):
        for e in exprs_of(s):
            out.extend(ld for ld in loads_in(e) if isinstance(ld, Load))

    walk(func.body, f)
    return out
