"""Math functions and integer arithmetic with the GPU's semantics (C's truncating division, saturating
float -> int casts, single-rounding fma)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ...ir import dtype as dt
from ..ieee_rounding import extra_float_functions
from .errors import EmulatorError
from .support import _first

# math


_ERF64 = np.frompyfunc(math.erf, 1, 1)


def _erf(x):
    # the C library's erf in float64 (correctly rounded to well under 1 ulp of float32), without scipy
    x = np.asarray(x)
    r = _ERF64(x.astype(np.float64)).astype(np.float64)
    return r.astype(x.dtype) if r.ndim else x.dtype.type(r)


def _round_half_away(x):
    return np.copysign(np.floor(np.abs(x) + x.dtype.type(0.5)), x)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


_MATH: dict[str, Callable] = {
    "exp": np.exp, "exp2": np.exp2, "exp10": lambda x: np.power(x.dtype.type(10), x), "log": np.log,
    "log2": np.log2, "log10": np.log10, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x), "tanh": np.tanh,
    "sigmoid": _sigmoid, "sin": np.sin, "cos": np.cos, "tan": np.tan, "erf": _erf, "floor": np.floor,
    "ceil": np.ceil, "round": _round_half_away, "trunc": np.trunc, "fabs": np.abs, "abs": np.abs,
    "pow": np.power, "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "log1p": np.log1p,
    "expm1": np.expm1, "fmod": np.fmod,
}
_MATH.update(extra_float_functions())  # TileLang's nearbyint, rcp, fast-math and ieee_* names


def _fma(a, b, c):
    # fmaf rounds once: the float64 product of two float32 values is exact
    return np.asarray(a, np.float64) * b + c


def _trunc_div(a, b):
    q = np.floor_divide(a, b)
    fix = (np.remainder(a, b) != 0) & ((a < 0) != (b < 0))
    return q + fix.astype(q.dtype) if isinstance(q, np.ndarray) else (q + 1 if fix else q)


def _check_division(st, a, b, need, assumed_nonneg: bool, op: str, where):
    """Integer division by zero, or by/of a negative value where the printers assume none, is an error."""
    bad = b == 0
    if assumed_nonneg:
        bad = bad | (a < 0) | (b < 0)
    if isinstance(bad, np.ndarray):
        if need is not None:
            bad = bad & need
        if not bad.any():
            return
        lane = _first(bad)
        av, bv = np.broadcast_to(a, bad.shape)[lane], np.broadcast_to(b, bad.shape)[lane]
        who = st.where(lane)
    else:
        if not bad or (need is not None and not need.any()):
            return
        av, bv, who = a, b, "every thread"
    why = "division by zero" if bv == 0 else "the printers emit C's truncating operator here, assuming operands >= 0"
    raise where.error(EmulatorError, f"{who}: integer {int(av)} {op} {int(bv)}: {why}")


def _check_int32(st, r, need, e, where):
    """A 32-bit signed result ``r`` (computed in int64) that leaves int32 on a lane that uses it is
    an error: the generated code would overflow there (an element offset past 2^31, say)."""
    bad = (r < -(2**31)) | (r > 2**31 - 1)
    if not bad.any():
        return
    if bad.ndim:
        if need is not None:
            bad = bad & need
        if not bad.any():
            return
        lane = _first(bad)
        val, who = int(np.broadcast_to(r, bad.shape)[lane]), st.where(lane)
    else:
        if need is not None and not need.any():
            return
        val, who = int(r), "every thread"
    raise where.error(EmulatorError, f"{who}: 32-bit integer overflow: {e} is {val} here, which a C int cannot "
                                     f"hold (the generated code computes it in 32 bits)")


def _float_to_int(x, nd: np.dtype):
    info = dt.int_limits(nd)
    x = np.nan_to_num(np.trunc(np.asarray(x, np.float64)), nan=0.0)
    r = np.clip(x, info.min, info.max).astype(nd)
    return r if r.ndim else nd.type(r)




_BINOPS = {
    "+": np.add, "-": np.subtract, "*": np.multiply, "<": np.less, "<=": np.less_equal, ">": np.greater,
    ">=": np.greater_equal, "==": np.equal, "!=": np.not_equal, "&": np.bitwise_and, "|": np.bitwise_or,
    "^": np.bitwise_xor, "<<": np.left_shift, ">>": np.right_shift, "pow": np.power,
}

