"""``T.print(obj=None, msg="", warp_group_id=0, warp_id=0)``: TileLang's device print.

* an expression: every thread that executes it prints ``msg``, its block and thread and the value;
* a buffer: one thread (``warp_group_id * 128 + warp_id * 32``) prints every element (a fragment
  through a shared copy, as its elements live in many threads); a global buffer is printed by every
  thread, a local buffer by each thread its own;
* nothing: every executing thread prints ``msg``.

A print is a ``debug_print:<msg>`` intrinsic call bound to an unused ``let`` name (so every layer
that knows let statements carries it to the end): CUDA prints it with ``printf``, the tile
interpreter and the emulator print to standard output.  HIP refuses it with a CompileError: device
printf needs AMD's device libraries, which tilewright does not link.
"""

from __future__ import annotations

import builtins as _builtins
import math as _math

from ..frontend import builder as _b
from ..ir import expr as _e
from ..ir import tile as _t

__all__ = ["print"]

PRINT_PREFIX = "debug_print:"


def _emit_print(value, msg: str) -> None:
    b = _b.current()
    v = _e.as_expr(0 if value is None else value)
    kind = "msg" if value is None else "value"
    call = _e.Call(f"{PRINT_PREFIX}{kind}:{msg}", (v,), "int32")
    b.emit(_t.LetStmt(_e.Var(b.fresh("printed"), "int32", kind="let"), call, loc=b.loc))


def _for_each_element(buf, body) -> None:
    """``body(element)`` for every element of ``buf``, in row-major order, by one serial loop."""
    b = _b.current()
    n = _math.prod(buf.shape)
    i = _e.Var(b.fresh("print_i"), "int32", kind="loop")
    idx, rest = [], i
    for d in reversed(buf.shape):
        idx.append(rest % d)
        rest = rest // d
    b.push()
    body(_e.Load(buf, tuple(reversed(idx))))
    stmts = b.pop()
    b.emit(_t.For(i, _e.as_expr(0), _e.as_expr(n), _t.SeqStmt(stmts), "serial", loc=b.loc))


def print(obj=None, msg: str = "", warp_group_id: int = 0, warp_id: int = 0) -> None:  # noqa: A001
    b = _b.current()
    if b.kernel is None:
        raise _b.error("T.print must be called inside `with T.Kernel(...)`")
    if not isinstance(msg, str):
        raise _b.error(f"T.print(msg=...) must be a string, got {msg!r}")
    if obj is None:
        if not msg:
            raise _b.error("T.print() needs something to print", hint="T.print(x), T.print(buf) or T.print(msg='...')")
        _emit_print(None, msg)
        return
    if isinstance(obj, _t.Buffer):
        label = msg or f"buffer<{obj.name}, {obj.dtype}>"
        buf = obj
        if buf.scope == "fragment":
            from . import alloc_shared, copy

            buf = alloc_shared(obj.shape, obj.dtype)
            copy(obj, buf)
        if buf.scope in ("global", "local", "var"):
            _for_each_element(buf, lambda x: _emit_print(x, label))
            return
        main = _builtins.int(warp_group_id) * 128 + _builtins.int(warp_id) * 32
        b.push()
        _for_each_element(buf, lambda x: _emit_print(x, label))
        body = b.pop()
        b.emit(_t.IfThenElse(b.thread_var == main, _t.SeqStmt(body), None, loc=b.loc))
        return
    value = _e.as_expr(obj)
    _emit_print(value, msg or f"expr<{value}>")
