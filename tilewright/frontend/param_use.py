"""Which tensor parameters a kernel touches at all.

TileLang lets a caller pass ``None`` for a tensor parameter the kernel never reads or writes (an
optional bias compiled out by a Python ``if``: ``kernel(a, b, c, None)``); the launch then passes a
null pointer.  ``mark_param_use`` records ``attrs["used"]`` on each tensor parameter so the argument
binder can accept ``None`` exactly there, and refuse it, naming the parameter, where the kernel uses
the tensor.  A parameter counts as used when any statement mentions the buffer: an element load or
store, a tile region, or the buffer itself (a whole-tensor tile operation).
"""

from __future__ import annotations

import dataclasses

from ..ir import expr as E
from ..ir import tile as t
from ..ir.visitor import walk, walk_expr


def mark_param_use(func: t.PrimFunc) -> None:
    """Sets ``attrs["used"]`` on every tensor parameter of ``func``."""
    seen: set = set()
    walk(func.body, lambda s: _collect_stmt(s, seen))
    for p in func.params:
        if isinstance(p, t.Buffer):
            p.attrs["used"] = id(p) in seen


def _collect_stmt(s, seen: set) -> None:
    if not dataclasses.is_dataclass(s):
        return
    for f in dataclasses.fields(s):
        _collect(getattr(s, f.name, None), seen)


def _collect(v, seen: set) -> None:
    if isinstance(v, t.Stmt):
        return  # visited by walk() on its own
    if isinstance(v, t.Buffer):
        seen.add(id(v))
    elif isinstance(v, E.Expr):
        walk_expr(v, lambda x: seen.add(id(x.buffer)) if isinstance(x, E.Load) else None)
    elif isinstance(v, (list, tuple)):
        for x in v:
            _collect(x, seen)
    elif isinstance(v, dict):
        for k, x in v.items():
            _collect(k, seen)
            _collect(x, seen)
    elif dataclasses.is_dataclass(v) and not isinstance(v, type):
        for f in dataclasses.fields(v):  # a Region and other plain records of a statement
            _collect(getattr(v, f.name, None), seen)


def statements_mention(stmts: list, buf) -> bool:
    """Whether any of ``stmts`` (or a statement nested in them) mentions ``buf``."""
    seen: set = set()
    for s in stmts:
        walk(s, lambda x: _collect_stmt(x, seen))
    return id(buf) in seen
