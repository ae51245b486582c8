"""The statement builder the ``T.*`` functions append to while a prim_func is being read.

The frontend pushes a ``Builder`` while it translates a function body; ``T.copy`` and friends call
``emit`` on the active one.  Calling a ``T.*`` tile function outside a prim_func is a user error.
"""

from __future__ import annotations

import itertools

from ..errors import CompileError, SourceLocation

_active: list[Builder] = []


class Builder:
    def __init__(self):
        self.blocks: list[list] = [[]]
        self.loc: SourceLocation | None = None
        self.names: dict[str, itertools.count] = {}
        self.kernel = None  # the active Kernel spec, if any
        self.thread_var = None
        self.parallel_depth = 0  # T.Parallel loops around the statement being read

    def emit(self, stmt) -> None:
        if getattr(stmt, "loc", None) is None:
            stmt.loc = self.loc
        self.blocks[-1].append(stmt)

    def push(self) -> None:
        self.blocks.append([])

    def pop(self) -> list:
        return self.blocks.pop()

    def fresh(self, base: str) -> str:
        c = self.names.setdefault(base, itertools.count())
        n = next(c)
        return base if n == 0 else f"{base}_{n}"


def current() -> Builder:
    if not _active:
        raise CompileError(
            "this T.* function builds kernel code and can only be called inside a @T.prim_func body"
        )
    return _active[-1]


def current_or_none() -> Builder | None:
    return _active[-1] if _active else None


def error(message: str, hint: str | None = None) -> CompileError:
    b = current_or_none()
    return CompileError(message, b.loc if b else None, hint)
