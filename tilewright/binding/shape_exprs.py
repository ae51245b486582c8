"""Tensor dimensions declared as expressions of symbolic sizes: ``T.Tensor((n * 4,), ...)``.

A dimension that is exactly a ``T.dynamic`` name binds that name (``args.check_tensor``).  A
dimension that is an expression (``n * 4``, ``n + 1``, ``m * 2 + 1``) is resolved after every
argument's plain dimensions have been bound, in two steps:

1. a name that no plain dimension binds is solved from the first expression dimension that is an
   affine function ``a * n + b`` of it alone (``a`` non-zero): ``n = (size - b) / a``, which must be a
   non-negative integer;
2. every expression dimension is then evaluated with the bound sizes and must equal the argument's.

So ``x: (m, n * 2)`` with ``y: (m * 2, n)`` binds ``n`` from ``y`` and checks ``x``'s second
dimension against ``2 * n``, whichever argument comes first.  Each refusal is an ``ArgumentError``
naming the kernel, the argument, the dimension, the declared expression and the expected value.
"""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError
from ..ir import tile as t
from ..ir.analysis import affine_coeffs, eval_expr
from ..ir.expr import Expr, Var
from ..ir.visitor import free_vars

_INT32_MAX = 2**31 - 1


def is_shape_expr(dim) -> bool:
    """A dimension that is neither an int nor a single symbolic name."""
    return isinstance(dim, Expr) and not isinstance(dim, Var)


def resolve_shape_exprs(params, values, dyn: dict, kname: str, dim_value) -> None:
    """Bind (in ``dyn``) the sizes only expression dimensions determine, then check every expression
    dimension of the buffer ``params`` against its argument in ``values`` (per parameter, a
    ``TensorArg`` or a scalar parameter's value, which expressions may use too).
    ``dim_value(kname, var, value, where)`` validates a solved size (int32 range, sign)."""
    dims = [(p, ta, d, want) for p, ta in zip(params, values) if isinstance(p, t.Buffer)
            and ta.dtype != "none" for d, want in enumerate(p.shape) if is_shape_expr(want)]
    if not dims:
        return
    scalars = {p: v for p, v in zip(params, values) if isinstance(p, Var)}
    env = {**scalars, **dyn}
    progress = True
    while progress:  # step 1: solve what only an expression fixes (a solved size may make another solvable)
        progress = False
        for p, ta, d, want in dims:
            unbound = [v for v in free_vars(want) if v not in env]
            coeffs = affine_coeffs(want) if len(unbound) == 1 else None
            if coeffs is None or not coeffs.get(unbound[0]):
                continue
            var, a = unbound[0], coeffs[unbound[0]]
            rest = sum(c * (1 if v is None else env[v]) for v, c in coeffs.items() if v is not var)
            got = int(ta.shape[d])
            if (got - rest) % a:
                raise ArgumentError(f"{kname}: argument {p.name} dimension {d} is {got}, but its declaration says "
                                    f"{want}, which is not {got} for any integer {var.name} ({got} - {rest} is not a "
                                    f"multiple of {a})")
            dyn[var] = env[var] = dim_value(kname, var, (got - rest) // a, f"solved from dimension {d} of "
                                            f"argument {p.name} = {want}")
            progress = True
    for p, ta, d, want in dims:  # step 2: every expression dimension equals its argument's
        missing = sorted(v.name for v in free_vars(want) if v not in env)
        if missing:
            raise ArgumentError(f"{kname}: could not infer dynamic dimension(s) {missing} from the arguments: "
                                f"dimension {d} of argument {p.name} is declared {want}, which does not determine "
                                "them")
        expected = int(eval_expr(want, env))
        got = int(ta.shape[d])
        if got > _INT32_MAX and want.dtype != "int64":  # the kernel computes the expression in 32 bits
            raise ArgumentError(f"{kname}: argument {p.name} dimension {d} ({want}) is {got}, which does not fit in "
                                "int32; declare its sizes T.dynamic(name, 'int64') for dimensions of 2**31 or more")
        if expected != got:
            bound = ", ".join(f"{v.name}={env[v]}" for v in sorted(free_vars(want), key=lambda v: v.name))
            raise ArgumentError(f"{kname}: argument {p.name} has shape {tuple(ta.shape)}; dimension {d} is {got}, "
                                f"expected {want} = {expected} (with {bound})")


def shape_value(dim, dyn: dict) -> int:
    """A declared dimension (an int, a symbolic name or an expression of them) for bound sizes ``dyn``."""
    if isinstance(dim, Expr):
        return int(eval_expr(dim, dyn))
    return int(dim)


def sizes_from_inputs(params, args: dict, kname: str) -> dict:
    """The sizes (``Var`` -> int) the given arguments fix -- ``args``: parameter index -> argument, the
    inputs of a call whose outputs are still to be allocated -- with scalar parameters' values too, so
    that output shapes such as ``(m * 2 + 1,)`` can be evaluated.  Packed 4-bit storage counts in
    elements.  Only what allocation needs is checked here; the full binder checks the call after."""
    from .args import _dim_value
    from .packed import is_packed_storage, logical_arg
    from .tensor_args import describe_arg

    env: dict = {}
    described: list = [None] * len(params)
    for i, a in args.items():
        p = params[i]
        if isinstance(p, Var):
            v = a.item() if hasattr(a, "item") and getattr(a, "ndim", None) == 0 else a
            if isinstance(v, (int, float, np.number, np.bool_)):  # T.assume conditions may use any scalar
                env[p] = described[i] = v.item() if isinstance(v, np.generic) else v
            continue
        if a is None or not hasattr(a, "shape") or len(a.shape) != p.ndim:
            continue  # the binder explains it
        try:
            ta = describe_arg(a)
            if is_packed_storage(p.dtype, ta):
                ta = logical_arg(p, ta, kname)
        except ArgumentError:
            continue  # the binder explains it, naming the parameter
        described[i] = ta
        for want, got in zip(p.shape, ta.shape):
            if isinstance(want, Var):
                env.setdefault(want, int(got))
    kept = [(p, v) for p, v in zip(params, described) if v is not None]
    dyn = {v: n for v, n in env.items() if v.kind == "dyn"}
    resolve_shape_exprs([p for p, _ in kept], [v for _, v in kept], dyn, kname, _dim_value)
    env.update(dyn)
    return env
