"""Thread partitions from TileLang's spellings: ``if`` on the thread index around tile operations.

In TileLang, ``if tx < 128: T.copy(...)`` means that threads 0..127 perform the copy between them
(and only they synchronize afterwards).  ``form_partitions`` turns each ``if`` whose condition
depends on the thread index alone and whose branch holds a tile operation or a barrier into a
``ThreadPartition`` over the threads the branch selects (its ``else`` over the rest), nested
partitions relative to their parent; ``if tx < 128 and flag:`` with ``flag`` the same in every
thread is read as ``if flag: if tx < 128:``.  Other ``if``s are left alone; the verifier refuses tile
operations under any remaining per-thread condition, with the line and what to change.
"""

from __future__ import annotations

from ..errors import CompileError
from ..ir import expr as E
from ..ir import tile as t
from ..ir.uniformity import collective_kind, first_collective, thread_range, warp_aligned
from ..ir.visitor import child_stmts, free_vars, walk


def form_partitions(func: t.PrimFunc) -> t.PrimFunc:
    from .uniform_fragments import uniform_fragments_to_local

    uniform_fragments_to_local(func)  # block-wide tables read outside T.Parallel: before any uniformity question
    kernels = [s for s in _flatten(func.body) if isinstance(s, t.Kernel)]
    uni = _LazyUniformity(func)
    for k in kernels:
        tid = k.attrs.get("thread_var")
        k.body = _form(k.body, tid, uni, 0, k.num_threads)
    return func


class _LazyUniformity:
    """The kernel's uniformity analysis, made on first use (most kernels never ask)."""

    def __init__(self, func):
        self.func, self.u = func, None

    def is_uniform(self, e) -> bool:
        if self.u is None:
            from ..ir.uniformity import Uniformity

            self.u = Uniformity(self.func)
        return self.u.is_uniform(e)



def _flatten(s):
    return s.stmts if isinstance(s, t.SeqStmt) else [s]


def _form(s, tid, uni, base: int, count: int):
    if s is None:
        return None
    if isinstance(s, t.SeqStmt):
        return t.SeqStmt([_form(x, tid, uni, base, count) for x in s.stmts], s.loc)
    if isinstance(s, t.ThreadPartition):
        s.body = _form(s.body, tid, uni, s.base, s.count)
        return s
    if isinstance(s, t.IfThenElse) and tid is not None and _collective_inside(s):
        split = _split_thread_conjuncts(s, tid, uni)
        if split is not None:  # `if tx < 128 and flag:` is `if flag: if tx < 128:`
            return _form(split, tid, uni, base, count)
        rng = thread_range(s.cond, tid, base, count)
        if rng is not None:
            out = []
            for body, r in ((s.then_body, rng), (s.else_body, _complement(s.cond, tid, base, count))):
                if body is None or _first_collective(body) is None:
                    if body is not None:  # per-thread code: keep it under its own condition
                        cond = s.cond if body is s.then_body else E.unary("not", s.cond)
                        out.append(t.IfThenElse(cond, _form(body, tid, uni, base, count), None, s.loc))
                    continue
                out.append(_partition(body, r, tid, uni, base, count, s))
            return t.SeqStmt(out, s.loc) if len(out) != 1 else out[0]
    for name in ("body", "then_body", "else_body"):
        if hasattr(s, name) and getattr(s, name) is not None and not isinstance(s, t.Kernel):
            setattr(s, name, _form(getattr(s, name), tid, uni, base, count))
    return s


def _split_thread_conjuncts(s: t.IfThenElse, tid, uni):
    """``if a and b`` (no else) whose conjuncts are partly on the thread index alone and partly
    not: the other conjuncts, when they are the same in every thread, become an enclosing ``if``
    (fine around a partition), the thread-index ones the partition's.
    None when the condition does not split so."""
    if s.else_body is not None:
        return None
    terms = _conjuncts(s.cond)
    on_tid = [c for c in terms if tid in free_vars(c)]
    rest = [c for c in terms if tid not in free_vars(c)]
    if not on_tid or not rest or not uni.is_uniform(_all(rest)):
        return None  # (a per-thread remainder: the whole condition is refused with the tile op's line)
    inner = t.IfThenElse(_all(on_tid), s.then_body, None, s.loc)
    return t.IfThenElse(_all(rest), inner, None, s.loc)


def _conjuncts(c) -> list:
    if isinstance(c, E.BinOp) and c.op == "and":
        return _conjuncts(c.a) + _conjuncts(c.b)
    return [c]


def _all(terms):
    out = terms[0]
    for c in terms[1:]:
        out = E.binary("and", out, c)
    return out


def _collective_inside(s) -> bool:
    return any(_first_collective(c) is not None for c in child_stmts(s))


def _first_collective(s):
    """The first statement needing a whole thread set, a nested partition included (its threads
    must all reach it: ``if tx < 128: with T.ws(0):`` is that partition inside threads 0..127)."""
    what = first_collective(s)
    if what is None:
        found: list = []
        walk(s, lambda x: found.append(x) if isinstance(x, t.ThreadPartition) and not found else None)
        what = found[0] if found else None
    return what


def _complement(cond, tid, base, count):
    return thread_range(E.unary("not", cond), tid, base, count)


def _partition(body, rng, tid, uni, base, count, node):
    what = _first_collective(body)
    kind = collective_kind(what) or f"thread partition {getattr(what, 'role', '')}"
    if rng is None:
        raise CompileError(
            f"{kind} in the else branch of `if` on the thread index: the threads that take it are not one "
            "contiguous range", what.loc,
            hint="write the condition so that each branch selects one contiguous, warp-aligned range of threads, "
            "e.g. `if tx < 128: ... else: ...`")
    first, n = rng
    if n == 0:
        return t.SeqStmt([])  # no thread takes this branch
    if first == base and n == count:
        return _form(body, tid, uni, base, count)  # every thread of the enclosing set takes it
    if not warp_aligned(first, n):
        raise CompileError(
            f"{kind} under a condition that selects threads {first}..{first + n - 1}, which is not a whole "
            "number of warps: a tile operation or barrier is performed by a set of whole warps together", what.loc,
            hint="select a warp-aligned range of threads (a multiple of 32, e.g. `if tx < 64:`), or move the "
            "tile operation out of the `if`")
    p = t.ThreadPartition(first, n, f"threads {first}..{first + n - 1}", None, node.loc)
    p.body = _form(body, tid, uni, first, n)
    return p
