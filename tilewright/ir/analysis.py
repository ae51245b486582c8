"""Small analyses shared by passes: affine forms of integer expressions, value ranges, and
evaluation of expressions on concrete values (NumPy arrays or ints)."""

from __future__ import annotations

import numpy as np

from .expr import PYTHON_OPERATORS, BinOp, Call, Cast, Const, Select, UnOp, Var


def affine_coeffs(e):
    """``{var: coeff, None: constant}`` if ``e`` is an integer affine function of variables, else None."""
    if isinstance(e, (int, np.integer)) and not isinstance(e, bool):
        return {None: int(e)}
    if isinstance(e, Const):
        return {None: int(e.value)} if isinstance(e.value, int) and not isinstance(e.value, bool) else None
    if isinstance(e, Var):
        return {e: 1, None: 0}
    if isinstance(e, Cast) and e.dtype in ("int32", "int64"):
        return affine_coeffs(e.a)
    if isinstance(e, BinOp):
        if e.op in ("+", "-"):
            a, b = affine_coeffs(e.a), affine_coeffs(e.b)
            if a is None or b is None:
                return None
            sign = 1 if e.op == "+" else -1
            out = dict(a)
            for k, v in b.items():
                out[k] = out.get(k, 0) + sign * v
            return out
        if e.op == "*":
            a, b = affine_coeffs(e.a), affine_coeffs(e.b)
            if a is None or b is None:
                return None
            if len(a) == 1:
                a, b = b, a
            if len(b) == 1:
                c = b[None]
                return {k: v * c for k, v in a.items()}
            return None
    if isinstance(e, UnOp) and e.op == "neg":
        a = affine_coeffs(e.a)
        return None if a is None else {k: -v for k, v in a.items()}
    return None


_NUMPY_OPERATORS = {"min": np.minimum, "max": np.maximum, "and": np.logical_and, "or": np.logical_or}


def eval_expr(e, env: dict):
    """Evaluate an index expression with Python ints or NumPy int arrays bound to variables."""
    if isinstance(e, (int, float, np.ndarray, np.integer)):
        return e
    if isinstance(e, Const):
        return e.value
    if isinstance(e, Var):
        if e not in env:
            raise KeyError(e.name)
        return env[e]
    if isinstance(e, BinOp):
        a, b = eval_expr(e.a, env), eval_expr(e.b, env)
        op = e.op
        if op in PYTHON_OPERATORS:
            return PYTHON_OPERATORS[op](a, b)
        if op in _NUMPY_OPERATORS:  # element-wise on arrays, unlike Python's min/max/and/or
            return _NUMPY_OPERATORS[op](a, b)
    if isinstance(e, UnOp):
        a = eval_expr(e.a, env)
        if e.op == "neg":
            return -a
        if e.op == "not":
            return np.logical_not(a)
        return ~a
    if isinstance(e, Cast):
        return eval_expr(e.a, env)
    if isinstance(e, Select):
        return np.where(eval_expr(e.cond, env), eval_expr(e.a, env), eval_expr(e.b, env))
    if isinstance(e, Call) and e.name == "abs":
        return np.abs(eval_expr(e.args[0], env))
    raise ValueError(f"cannot evaluate {e} at compile time")


def bounds_condition(shape, indices):
    """The condition that ``indices`` lie inside ``shape`` (``0 <= i < n`` per dimension, the lower
    bound only where an index may be negative), or None when that always holds."""
    from .expr import binary

    cond = None
    for x, n in zip(indices, shape):
        c = x < n
        if not is_nonnegative(x):
            c = binary("and", c, x >= 0)
        if isinstance(c, Const) and c.value:
            continue
        cond = c if cond is None else binary("and", cond, c)
    return cond


def is_nonnegative(e) -> bool:
    """Conservative: True only when ``e`` is provably >= 0 (loop/block/thread vars, dims, constants)."""
    if isinstance(e, Const):
        return e.value >= 0
    if isinstance(e, Var):
        return e.kind in ("loop", "block", "thread", "dyn", "lane")
    if isinstance(e, BinOp):
        if e.op in ("+", "*", "//", "%", "min", "max", "&", ">>"):
            return is_nonnegative(e.a) and is_nonnegative(e.b)
        return False
    if isinstance(e, Cast):
        return is_nonnegative(e.a)
    return False


def uses_var(e, var) -> bool:
    from .visitor import walk_expr

    found = [False]

    def f(x):
        if x is var:
            found[0] = True

    walk_expr(e, f)
    return found[0]


def shared_bytes_at_launch(at_launch, env: dict, reserved: int, kernel_name: str) -> int:
    """The dynamic shared memory a call needs when a shared buffer is sized at launch.

    ``at_launch`` is ``(bytes expression, buffer name, byte offset)`` (see ``shared_at_launch``),
    evaluated over the scalar parameters and symbolic sizes bound in ``env``; more than ``reserved``
    (what the kernel was compiled to address: the target's limit) is an ``ArgumentError`` naming the
    buffer."""
    from ..errors import ArgumentError

    expr, name = at_launch[0], at_launch[1]
    n = int(eval_expr(expr, env))
    if n > reserved:
        raise ArgumentError(f"{kernel_name}: with these sizes the shared buffer {name} makes the kernel need {n} "
                            f"bytes of shared memory; the target has {reserved} per block. Pass smaller sizes, "
                            "or split the work over more blocks")
    return n


def shared_at_launch(buf, base: int) -> tuple:
    """``(bytes expression, name, base)`` for shared buffer ``buf`` sized at launch and placed at
    byte ``base`` after every other shared buffer: the block's dynamic shared memory, 16-byte rounded."""
    from .dtype import nbytes

    n = Const(1, "int32")
    for d in buf.shape:
        n = n * d
    return ((Const(base, "int32") + n * nbytes(buf.dtype) + 15) // 16 * 16, buf.name, base)
