"""Tensor dimensions written as expressions of symbolic sizes in declarations: ``T.Tensor((n * 4,), ...)``,
``T.Tensor[(m, n * 2), ...]``, ``T.empty((m * 2 + 1,), ...)``.

The frontend keeps such a dimension as the integer expression itself (the IR's buffer shapes hold ints,
``Var``s and expressions alike, so index arithmetic and bounds checks use it directly); the call binds
its sizes or checks it against the argument (``binding.shape_exprs``).  What a dimension may be built
from: integer constants and symbolic sizes (``T.dynamic`` / ``T.symbolic``) with + - * // %, min and max
or scalar parameters (``def f(m: T.int32): B = T.empty((m + 1,), ...)``) with + - * // %, min and
max -- no tensor elements, no floats, no kernel loop variables.
"""

from __future__ import annotations

from ..errors import CompileError
from ..ir import dtype as dt
from ..ir import expr as E
from ..ir.visitor import free_vars, loads_in

_SIZE_KINDS = ("dyn", "param")


def size_expression(e, what: str, dyn: list, loc):
    """``e`` as a declared dimension: an int for a positive constant, else the expression, whose symbolic
    sizes are added to ``dyn`` (the function's symbolic sizes).  CompileError
    naming ``what`` at ``loc`` when ``e`` cannot be a dimension."""
    if isinstance(e, E.Const) and isinstance(e.value, int) and not isinstance(e.value, bool) and e.value > 0:
        return e.value
    hint = ("build sizes from ints and T.dynamic names with + - * // (e.g. T.Tensor((n * 4,), dtype)); "
            "derived sizes that need more can be computed inside the kernel")
    if not dt.is_int(e.dtype) or loads_in(e):
        raise CompileError(f"{what} must be an integer expression of ints and T.dynamic sizes", loc, hint=hint)
    names = sorted(free_vars(e), key=lambda v: v.name)
    if not names:
        raise CompileError(f"{what} is {e}, not a positive size", loc, hint=hint)
    for v in names:
        if v.kind not in _SIZE_KINDS:
            raise CompileError(f"{what} uses {v.name}, which is not a symbolic size (T.dynamic) or a scalar "
                               "parameter", loc, hint=hint)
        if v.kind == "dyn" and all(v is not d for d in dyn):
            dyn.append(v)
    return e
