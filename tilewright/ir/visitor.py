"""Generic traversal and rewriting of IR trees (Tile IR and thread IR alike).

Statement nodes are dataclasses; their children are found by field type, so a new node type needs
no change here.  ``rewrite_expr`` rebuilds an expression bottom-up through a callback;
``substitute`` replaces variables; ``walk`` visits every statement.  Rewrites keep a statement's
``uid`` (its key in ``ir.plans.Plans``): ``map_stmt`` does so for the containers it rebuilds, and a
pass that rebuilds a node itself uses ``rebuild``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from .expr import BinOp, Call, Cast, Const, Expr, Load, Select, Shuffle, UnOp, Var, binary, call, select, unary


def expr_children(e: Expr) -> tuple:
    if isinstance(e, BinOp):
        return (e.a, e.b)
    if isinstance(e, UnOp):
        return (e.a,)
    if isinstance(e, Call):
        return e.args
    if isinstance(e, Cast):
        return (e.a,)
    if isinstance(e, Select):
        return (e.cond, e.a, e.b)
    if isinstance(e, Load):
        return e.indices
    if isinstance(e, Shuffle):
        return (e.value,)
    return ()


def walk_expr(e, fn: Callable[[Expr], None]) -> None:
    """Pre-order visit of an expression tree."""
    if not isinstance(e, Expr):
        return
    stack = [e]
    while stack:
        x = stack.pop()
        fn(x)
        stack.extend(expr_children(x))


def rewrite_expr(e, fn: Callable[[Expr], Expr | None]):
    """Bottom-up rewrite: ``fn`` sees each node after its children were rewritten; it returns a
    replacement or None to keep the (rebuilt) node.  Rebuilding goes through the folding
    constructors, so substituting constants simplifies."""
    if not isinstance(e, Expr):
        return e
    if isinstance(e, (Var, Const)):
        r = fn(e)
        return e if r is None else r
    if isinstance(e, BinOp):
        a, b = rewrite_expr(e.a, fn), rewrite_expr(e.b, fn)
        new = e if (a is e.a and b is e.b) else binary(e.op, a, b)
    elif isinstance(e, UnOp):
        a = rewrite_expr(e.a, fn)
        new = e if a is e.a else unary(e.op, a)
    elif isinstance(e, Call):
        args = tuple(rewrite_expr(x, fn) for x in e.args)
        new = e if all(x is y for x, y in zip(args, e.args)) else call(e.name, args, e.dtype)
    elif isinstance(e, Cast):
        a = rewrite_expr(e.a, fn)
        new = e if a is e.a else _recast(e.dtype, a)
    elif isinstance(e, Select):
        c, a, b = rewrite_expr(e.cond, fn), rewrite_expr(e.a, fn), rewrite_expr(e.b, fn)
        new = e if (c is e.cond and a is e.a and b is e.b) else select(c, a, b)
    elif isinstance(e, Load):
        idx = tuple(rewrite_expr(x, fn) for x in e.indices)
        new = e if all(x is y for x, y in zip(idx, e.indices)) else Load(e.buffer, idx)
    elif isinstance(e, Shuffle):
        v = rewrite_expr(e.value, fn)
        new = e if v is e.value else Shuffle(v, e.mask, e.width)
    else:
        new = e
    r = fn(new)
    return new if r is None else r


def _recast(dtype, a):
    from .expr import cast

    return cast(dtype, a)


def substitute(e, mapping: dict):
    """Replace ``Var``s (keys, by identity) with expressions."""
    if not mapping:
        return e
    return rewrite_expr(e, lambda x: mapping.get(x) if isinstance(x, Var) else None)


def free_vars(e) -> set:
    out: set = set()
    walk_expr(e, lambda x: out.add(x) if isinstance(x, Var) else None)
    return out


def loads_in(e) -> list:
    out: list = []
    walk_expr(e, lambda x: out.append(x) if isinstance(x, Load) else None)
    return out


# --------------------------------------------------------------------------------------------
# statements


def stmt_fields(s) -> list:
    return [f.name for f in dataclasses.fields(s)] if dataclasses.is_dataclass(s) else []


def child_stmts(s) -> list:
    """Direct child statements of ``s`` (bodies, branches, sequence elements)."""
    out = []
    for name in stmt_fields(s):
        v = getattr(s, name)
        if _is_stmt(v):
            out.append(v)
        elif isinstance(v, list):
            out.extend(x for x in v if _is_stmt(x))
    return out


def _is_stmt(v) -> bool:
    from .tile import Stmt

    return isinstance(v, Stmt)


def walk(s, fn: Callable) -> None:
    """Pre-order visit of every statement."""
    if s is None:
        return
    stack = [s]
    while stack:
        x = stack.pop()
        fn(x)
        stack.extend(reversed(child_stmts(x)))


def rebuild(node, **changes):
    """A copy of statement ``node`` with some fields changed, keeping its ``uid`` (so the plans
    recorded for ``node`` apply to the copy)."""
    new = dataclasses.replace(node, **changes)
    if hasattr(node, "uid"):
        new.uid = node.uid
    return new


def map_stmt(s, fn: Callable):
    """Post-order statement rewrite: children first, then ``fn(node)`` returns a replacement
    (a statement, a list of statements to splice, or None to keep)."""
    if s is None:
        return None
    if not dataclasses.is_dataclass(s):
        return s
    changes = {}
    for name in stmt_fields(s):
        v = getattr(s, name)
        if _is_stmt(v):
            nv = map_stmt(v, fn)
            if isinstance(nv, list):
                from .tile import SeqStmt

                nv = SeqStmt(nv)
            if nv is not v:
                changes[name] = nv
        elif isinstance(v, list) and any(_is_stmt(x) for x in v):
            nl = []
            changed = False
            for x in v:
                nx = map_stmt(x, fn) if _is_stmt(x) else x
                if isinstance(nx, list):
                    nl.extend(nx)
                    changed = True
                elif nx is not None:
                    nl.append(nx)
                    changed = changed or nx is not x
                else:
                    changed = True
            if changed:
                changes[name] = nl
    node = rebuild(s, **changes) if changes else s
    r = fn(node)
    return node if r is None else r
