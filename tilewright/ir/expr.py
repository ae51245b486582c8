"""Scalar expressions, shared by the Tile IR and the thread IR.

Expressions are immutable trees.  Python operators on them build new nodes (with constant folding
when both sides are constants), so kernel code such as ``by * block_M + i`` written in a prim_func
becomes IR directly.  Comparisons build nodes too; identity (``is``) is what the compiler uses to
compare nodes, and ``hash`` is identity-based.
"""

from __future__ import annotations

import math
import operator
from typing import Any

from . import dtype as dt
from . import float8 as _float8

_BIN_SYMBOLS = {
    "+": "add", "-": "sub", "*": "mul", "/": "div", "//": "floordiv", "%": "mod",
    "<": "lt", "<=": "le", ">": "gt", ">=": "ge", "==": "eq", "!=": "ne",
    "and": "and", "or": "or", "&": "bitand", "|": "bitor", "^": "bitxor", "<<": "shl", ">>": "shr",
    "min": "min", "max": "max", "pow": "pow",
}
COMPARISONS = ("<", "<=", ">", ">=", "==", "!=")
LOGICAL = ("and", "or")


class Expr:
    """Base of all scalar expressions.  ``dtype`` is a canonical dtype name."""

    __slots__ = ("dtype",)
    __hash__ = object.__hash__

    def astype(self, dtype) -> Expr:
        """This value converted to ``dtype`` (TileLang's ``A[i].astype(dtype)``)."""
        return cast(str(dtype), self)

    # arithmetic -------------------------------------------------------------------------
    def __add__(self, o):
        return binary("+", self, o)

    def __radd__(self, o):
        return binary("+", o, self)

    def __sub__(self, o):
        return binary("-", self, o)

    def __rsub__(self, o):
        return binary("-", o, self)

    def __mul__(self, o):
        return binary("*", self, o)

    def __rmul__(self, o):
        return binary("*", o, self)

    def __truediv__(self, o):
        return binary("/", self, o)

    def __rtruediv__(self, o):
        return binary("/", o, self)

    def __floordiv__(self, o):
        return binary("//", self, o)

    def __rfloordiv__(self, o):
        return binary("//", o, self)

    def __mod__(self, o):
        return binary("%", self, o)

    def __rmod__(self, o):
        return binary("%", o, self)

    def __pow__(self, o):
        return binary("pow", self, o)

    def __rpow__(self, o):
        return binary("pow", o, self)

    def __neg__(self):
        return unary("neg", self)

    def __pos__(self):
        return self

    def __abs__(self):
        return call("abs", [self], self.dtype)

    def __invert__(self):
        return unary("not" if self.dtype == "bool" else "bitnot", self)

    def __and__(self, o):
        return binary("and" if _both_bool(self, o) else "&", self, o)

    def __rand__(self, o):
        return binary("and" if _both_bool(self, o) else "&", o, self)

    def __or__(self, o):
        return binary("or" if _both_bool(self, o) else "|", self, o)

    def __ror__(self, o):
        return binary("or" if _both_bool(self, o) else "|", o, self)

    def __xor__(self, o):
        return binary("^", self, o)

    def __rxor__(self, o):
        return binary("^", o, self)

    def __lshift__(self, o):
        return binary("<<", self, o)

    def __rshift__(self, o):
        return binary(">>", self, o)

    def __rlshift__(self, o):  # `1 << i` with a loop variable i (TileLang's deepseek_v32 topk_selector)
        return binary("<<", o, self)

    def __rrshift__(self, o):
        return binary(">>", o, self)

    # comparisons ------------------------------------------------------------------------
    def __lt__(self, o):
        return binary("<", self, o)

    def __le__(self, o):
        return binary("<=", self, o)

    def __gt__(self, o):
        return binary(">", self, o)

    def __ge__(self, o):
        return binary(">=", self, o)

    def __eq__(self, o):
        return binary("==", self, o)

    def __ne__(self, o):
        return binary("!=", self, o)

    def __bool__(self):
        from ..errors import CompileError

        raise CompileError(
            f"the kernel value {self!s} has no Python truth value at compile time",
            hint="use it in an `if` statement directly, or T.if_then_else(cond, a, b); "
            "`and`/`or`/`not` on kernel values are written as in Python and handled by the frontend",
        )

    def __index__(self):
        from ..errors import CompileError

        raise CompileError(f"the kernel value {self!s} is not a compile-time integer",
                           hint="shapes and tile sizes must be Python ints (closure constants)")

    def __str__(self) -> str:
        from .printer import expr_str

        return expr_str(self)

    __repr__ = __str__


def _both_bool(a, b) -> bool:
    da = a.dtype if isinstance(a, Expr) else ("bool" if isinstance(b, bool) else None)
    db = b.dtype if isinstance(b, Expr) else ("bool" if isinstance(b, bool) else None)
    return da == "bool" and db == "bool"


class Var(Expr):
    """A named scalar.  ``kind``: "loop", "let", "param", "block" (block index), "thread", "dyn" (symbolic dim)."""

    __slots__ = ("kind", "name")

    def __init__(self, name: str, dtype: str = "int32", kind: str = "let"):
        self.name = name
        self.dtype = dtype
        self.kind = kind


class Const(Expr):
    __slots__ = ("value",)

    def __init__(self, value, dtype: str):
        self.dtype = dtype
        if dt.is_float(dtype):
            # an fp8 constant holds what a conversion to its type gives (ir/float8.py): saturated,
            # except that T.infinity("float8_e5m2") stays infinite
            self.value = _float8.const_value(float(value), dtype) if dtype in _float8.SATURATING else float(value)
        elif dtype == "bool":
            self.value = bool(value)
        else:
            self.value = int(value)


class BinOp(Expr):
    __slots__ = ("a", "b", "op")

    def __init__(self, op: str, a: Expr, b: Expr, dtype: str):
        self.op = op
        self.a = a
        self.b = b
        self.dtype = dtype


class UnOp(Expr):
    __slots__ = ("a", "op")

    def __init__(self, op: str, a: Expr, dtype: str):
        self.op = op
        self.a = a
        self.dtype = dtype


class Call(Expr):
    """An intrinsic math call (``exp``, ``exp2``, ``log``, ``sqrt``, ``rsqrt``, ``tanh``, ``abs``, ...)."""

    __slots__ = ("args", "name")

    def __init__(self, name: str, args: tuple, dtype: str):
        self.name = name
        self.args = tuple(args)
        self.dtype = dtype


class Cast(Expr):
    __slots__ = ("a",)

    def __init__(self, dtype: str, a: Expr):
        self.dtype = dtype
        self.a = a


class Select(Expr):
    __slots__ = ("a", "b", "cond")

    def __init__(self, cond: Expr, a: Expr, b: Expr, dtype: str):
        self.cond = cond
        self.a = a
        self.b = b
        self.dtype = dtype


class Load(Expr):
    """``buffer[indices]``.  In the Tile IR indices are logical (one per dimension); in the thread
    IR a load has exactly one index, an element offset into the (flat) buffer."""

    __slots__ = ("buffer", "indices")

    def __init__(self, buffer, indices: tuple):
        self.buffer = buffer
        self.indices = tuple(indices)
        self.dtype = buffer.dtype


class Shuffle(Expr):
    """Thread IR only: the value of ``value`` held by lane ``lane ^ mask`` of the same warp/wave."""

    __slots__ = ("mask", "value", "width")

    def __init__(self, value: Expr, mask: int, width: int):
        self.value = value
        self.mask = mask
        self.width = width
        self.dtype = value.dtype


# --------------------------------------------------------------------------------------------
# constructors with folding


def const(value, dtype: str | None = None) -> Const:
    if dtype is None:
        if isinstance(value, bool):
            dtype = "bool"
        elif isinstance(value, int):
            dtype = "int32" if -(2**31) <= value < 2**31 else "int64"
        elif isinstance(value, float):
            dtype = "float32"
        else:
            raise TypeError(f"cannot make a constant of {value!r}")
    return Const(value, dtype)


def as_expr(v, like: str | None = None) -> Expr:
    """Wrap Python scalars; ``like`` is the dtype of the other operand (Python literals adopt it)."""
    if isinstance(v, Expr):
        return v
    if isinstance(v, bool):
        return Const(v, "bool")
    if isinstance(v, int):
        if like is not None and not dt.is_bool(like):
            return Const(v, like)
        return const(v)
    if isinstance(v, float):
        if like is not None and dt.is_float(like):
            return Const(v, like)
        return Const(v, "float32")
    if hasattr(v, "item") and callable(v.item):  # numpy scalars
        return as_expr(v.item(), like)
    from ..errors import CompileError

    raise CompileError(f"cannot use {v!r} (a {type(v).__name__}) as a kernel value")


def _literal_dtype(x, other) -> str | None:
    return other.dtype if isinstance(other, Expr) else None


def binary(op: str, a, b) -> Expr:
    if not isinstance(a, Expr) and not isinstance(b, Expr):
        return _fold_py(op, a, b)
    ea = as_expr(a, _literal_dtype(a, b) if not isinstance(a, Expr) else None)
    eb = as_expr(b, _literal_dtype(b, a) if not isinstance(b, Expr) else None)
    # a Python float literal against an int kernel value makes the result float32
    if op in COMPARISONS:
        t = dt.promote(ea.dtype, eb.dtype)
        ea, eb = _coerce(ea, t), _coerce(eb, t)
        out = "bool"
    elif op in LOGICAL:
        ea, eb = _coerce(ea, "bool"), _coerce(eb, "bool")
        out = "bool"
    elif op == "/":
        t = dt.promote(ea.dtype, eb.dtype)
        if not dt.is_float(t):
            t = "float32"
        ea, eb = _coerce(ea, t), _coerce(eb, t)
        out = t
    elif op in ("<<", ">>", "&", "|", "^"):
        t = dt.promote(ea.dtype, eb.dtype)
        out = t
        ea, eb = _coerce(ea, t), _coerce(eb, t)
    else:
        t = dt.promote(ea.dtype, eb.dtype)
        ea, eb = _coerce(ea, t), _coerce(eb, t)
        out = t
    if isinstance(ea, Const) and isinstance(eb, Const):
        folded = _fold_py(op, ea.value, eb.value)
        return Const(folded, out)
    simplified = _simplify(op, ea, eb)
    if simplified is not None:
        return simplified
    return BinOp(op, ea, eb, out)


def _coerce(e: Expr, t: str) -> Expr:
    if e.dtype == t:
        return e
    if isinstance(e, Const):
        return Const(e.value, t)
    return Cast(t, e)


def _simplify(op: str, a: Expr, b: Expr):
    if isinstance(b, Const):
        if op in ("+", "-") and b.value == 0:
            return a
        if op == "*" and b.value == 1:
            return a
        if op == "*" and b.value == 0 and dt.is_int(a.dtype):
            return Const(0, a.dtype)
        if op == "//" and b.value == 1:
            return a
        if op == "%" and b.value == 1 and dt.is_int(a.dtype):
            return Const(0, a.dtype)
    if isinstance(a, Const):
        if op == "+" and a.value == 0:
            return b
        if op == "*" and a.value == 1:
            return b
        if op == "*" and a.value == 0 and dt.is_int(b.dtype):
            return Const(0, b.dtype)
    return None


# The binary operators whose meaning is Python's own operator, for ints, floats and NumPy arrays
# alike: constant folding here and the evaluation of index expressions (ir.analysis) share them.
PYTHON_OPERATORS = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv, "//": operator.floordiv,
    "%": operator.mod, "pow": operator.pow, "<": operator.lt, "<=": operator.le, ">": operator.gt,
    ">=": operator.ge, "==": operator.eq, "!=": operator.ne, "&": operator.and_, "|": operator.or_,
    "^": operator.xor, "<<": operator.lshift, ">>": operator.rshift,
}


def _fold_py(op: str, a, b):
    if op in PYTHON_OPERATORS:
        return PYTHON_OPERATORS[op](a, b)
    if op == "min":
        return min(a, b)
    if op == "max":
        return max(a, b)
    if op == "and":
        return bool(a) and bool(b)
    if op == "or":
        return bool(a) or bool(b)
    raise ValueError(op)


def unary(op: str, a) -> Expr:
    if not isinstance(a, Expr):
        if op == "neg":
            return -a
        if op == "not":
            return not a
        return ~a
    if isinstance(a, Const):
        if op == "neg":
            return Const(-a.value, a.dtype)
        if op == "not":
            return Const(not a.value, "bool")
    if op == "not":
        a = _coerce(a, "bool")
        return UnOp("not", a, "bool")
    return UnOp(op, a, a.dtype)


FLOAT_INTRINSICS = {
    "exp", "exp2", "exp10", "log", "log2", "log10", "sqrt", "rsqrt", "tanh", "sigmoid", "sin", "cos",
    "tan", "erf", "floor", "ceil", "round", "trunc", "fabs", "abs", "pow", "fma", "atan", "sinh", "cosh",
    "log1p", "expm1", "isnan", "isinf", "isfinite",
}
# TileLang's further unary float math: C's nearbyint, the reciprocal, the fast-math spellings
# (language/math.py also builds fmod and the ieee_* rounding-mode calls, float-typed by construction)
FLOAT_INTRINSICS |= {"nearbyint", "rcp", "__exp", "__exp10", "__log", "__log2", "__log10", "__sin", "__cos", "__tan"}
FLOAT_INTRINSICS |= {"__exp2"}  # attn-hopper


def call(name: str, args, dtype: str | None = None) -> Expr:
    args = [as_expr(a) for a in args]
    if name in ("isnan", "isinf", "isfinite"):  # bool-valued: a float operand keeps its type (float64 too)
        if not dt.is_float(args[0].dtype):
            args = [_coerce(args[0], "float32")]
        return Call(name, tuple(args), "bool")
    if dtype is None:
        dtype = args[0].dtype
    if name in FLOAT_INTRINSICS and name not in ("abs",) and not dt.is_float(dtype):
        dtype = "float32"
        args = [_coerce(a, "float32") for a in args]
    if name in ("pow", "fma", "min", "max"):
        t = args[0].dtype
        for a in args[1:]:
            t = dt.promote(t, a.dtype)
        args = [_coerce(a, t) for a in args]
        dtype = t
    if all(isinstance(a, Const) for a in args) and name in _PY_MATH:
        try:
            return Const(_PY_MATH[name](*[a.value for a in args]), dtype)
        except (ValueError, OverflowError, ZeroDivisionError):
            pass
    return Call(name, tuple(args), dtype)


_PY_MATH = {
    "exp": math.exp, "exp2": lambda x: 2.0**x, "log": math.log, "log2": math.log2, "sqrt": math.sqrt,
    "rsqrt": lambda x: 1.0 / math.sqrt(x), "tanh": math.tanh, "abs": abs, "floor": math.floor,
    "ceil": math.ceil,
}


def cast(dtype: str, a) -> Expr:
    dtype = dt.canon(dtype)
    e = as_expr(a, dtype)
    if e.dtype == dtype:
        return e
    if isinstance(e, Const):
        v = e.value
        if dt.is_int(dtype):
            v = int(v)
        return Const(v, dtype)
    return Cast(dtype, e)


def select(cond, a, b) -> Expr:
    if isinstance(cond, bool) or (isinstance(cond, Const)):
        c = cond if isinstance(cond, bool) else bool(cond.value)
        return as_expr(a) if c else as_expr(b)
    cond = as_expr(cond)
    if cond.dtype != "bool":
        cond = binary("!=", cond, 0)
    ea = as_expr(a, b.dtype if isinstance(b, Expr) else None)
    eb = as_expr(b, ea.dtype)
    t = dt.promote(ea.dtype, eb.dtype)
    return Select(cond, _coerce(ea, t), _coerce(eb, t), t)


def emin(a, b) -> Any:
    if not isinstance(a, Expr) and not isinstance(b, Expr):
        return min(a, b)
    return binary("min", a, b)


def emax(a, b) -> Any:
    if not isinstance(a, Expr) and not isinstance(b, Expr):
        return max(a, b)
    return binary("max", a, b)


def is_const(e, value=None) -> bool:
    if isinstance(e, (int, float)) and not isinstance(e, bool):
        return value is None or e == value
    return isinstance(e, Const) and (value is None or e.value == value)


def const_value(e):
    """The Python value of a constant expression or Python scalar, else None."""
    if isinstance(e, Const):
        return e.value
    if isinstance(e, (int, float, bool)):
        return e
    return None
