"""Arithmetic with an explicit IEEE rounding mode, on NumPy arrays (used by the tile interpreter
and the emulator for ``T.ieee_add(..., rounding_mode="rz")`` and its siblings): float32 here,
float64 in ``ieee_exact``, and float16/bfloat16 (round to nearest only, as in CUDA's ``__hadd``)
as the float32 result rounded *to odd*, whose one final rounding to the 16-bit type is then the
correct one (float32 keeps more than two extra bits: round-to-odd's condition).

Round-to-nearest results come from NumPy's float32 operations, which are correctly rounded.  A
directed mode starts from that nearest result ``r`` and moves it one float32 step when the exact
result lies on the wrong side of ``r``.  The side is the sign of the exact residual (exact result
minus ``r``), computed in float64 from quantities that are exact there: a float32 product, a
two-sum error term, ``r * y`` for a quotient, ``r * r`` for a square root.  The sign of a float64
subtraction is always the sign of the exact difference, so the step is never taken wrongly.
"""

from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numpy as np

from .ieee_exact import float64_op

MODES = ("rn", "rz", "ru", "rd")
_F32 = np.float32
_F64 = np.float64
_MAX32 = np.finfo(np.float32).max


def _two_sum(a, b):
    """(s, e) with s = fl(a + b) and a + b = s + e exactly (Knuth's two-sum, in float64)."""
    s = a + b
    bb = s - a
    e = (a - (s - bb)) + (b - bb)
    return s, e


def _direct(r, residual_sign, mode: str, finite_inputs):
    """Move the nearest float32 ``r`` one step where the exact result lies beyond it in ``mode``."""
    r = np.asarray(r, _F32)
    if mode == "rn":
        return r
    sgn = np.nan_to_num(np.asarray(residual_sign, _F64))
    with np.errstate(invalid="ignore"):
        if mode == "ro":  # inexact and even: the odd neighbour on the exact result's side
            even = (r.view(np.uint32) & 1) == 0
            toward = np.where(sgn > 0, _F32(np.inf), _F32(-np.inf))
            return np.where((sgn != 0) & even & np.isfinite(r), np.nextafter(r, toward), r).astype(_F32)
        if mode == "ru":
            out = np.where(sgn > 0, np.nextafter(r, _F32(np.inf)), r)
        elif mode == "rd":
            out = np.where(sgn < 0, np.nextafter(r, _F32(-np.inf)), r)
        else:  # rz: toward zero when the exact magnitude is below |r|
            shrink = ((r > 0) & (sgn < 0)) | ((r < 0) & (sgn > 0))
            out = np.where(shrink, np.nextafter(r, _F32(0)), r)
        # an overflow to infinity rounds to the largest finite value unless the mode rounds away
        over = np.isinf(r) & finite_inputs
        keep_inf = (r > 0) & (mode == "ru") | (r < 0) & (mode == "rd")
        out = np.where(over & ~keep_inf, np.copysign(_F32(_MAX32), r), out)
    return out.astype(_F32)


def _finite(*xs):
    ok = True
    for x in xs:
        ok = ok & np.isfinite(x)
    return ok


def _wide(*xs):
    return [np.asarray(x, _F32).astype(_F64) for x in xs]


def ieee_add(x, y, mode: str):
    a, b = _wide(x, y)
    with np.errstate(over="ignore", invalid="ignore"):
        r = np.asarray(x, _F32) + np.asarray(y, _F32)
        s, e = _two_sum(a, b)
        res = (s - r.astype(_F64)) + e
    return _direct(r, res, mode, _finite(a, b))


def ieee_sub(x, y, mode: str):
    return ieee_add(x, -np.asarray(y, _F32), mode)


def ieee_mul(x, y, mode: str):
    a, b = _wide(x, y)
    with np.errstate(over="ignore", invalid="ignore"):
        r = np.asarray(x, _F32) * np.asarray(y, _F32)
        res = a * b - r.astype(_F64)  # the product of two float32 values is exact in float64
    return _direct(r, res, mode, _finite(a, b))


def ieee_fmaf(x, y, z, mode: str):
    a, b, c = _wide(x, y, z)
    with np.errstate(over="ignore", invalid="ignore"):
        s, e = _two_sum(a * b, c)  # exact: x * y + z == s + e
        # within half a float32 step (plus a hair) of the exact result; for "rn" the same double
        # rounding through float64 as the emulator's T.fma
        r = s.astype(_F32)
        res = (s - r.astype(_F64)) + e
    return _direct(r, res, mode, _finite(a, b, c))


def ieee_fdiv(x, y, mode: str):
    a, b = _wide(x, y)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        r = np.asarray(x, _F32) / np.asarray(y, _F32)
        res = (a - r.astype(_F64) * b) * np.sign(b)  # r * y is exact in float64
    return _direct(r, res, mode, _finite(a, b) & (b != 0))


def ieee_frcp(x, mode: str):
    return ieee_fdiv(np.ones_like(np.asarray(x, _F32)), x, mode)


def ieee_fsqrt(x, mode: str):
    (a,) = _wide(x)
    with np.errstate(invalid="ignore"):
        r = np.sqrt(np.asarray(x, _F32))
        res = a - r.astype(_F64) * r.astype(_F64)  # r * r is exact in float64
    return _direct(r, res, mode, _finite(a) & (a >= 0))


def ieee_frsqrt(x):
    """1/sqrt(x) rounded to nearest (float64 has 29 spare bits: double rounding is out of reach
    except on inputs no test can hit)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return (1.0 / np.sqrt(np.asarray(x, _F32).astype(_F64))).astype(_F32)


def _frsqrt_odd(x):
    """1/sqrt(x) in float32 rounded to odd (for the 16-bit types): the side of the exact result
    from the sign of 1 - r*r*x, computed exactly with rationals."""
    r = np.atleast_1d(ieee_frsqrt(x))
    xs = np.broadcast_to(np.asarray(x, _F32), r.shape)
    side = np.zeros(r.shape)
    for i in np.ndindex(r.shape):
        if np.isfinite(r[i]) and r[i] > 0 and np.isfinite(xs[i]):
            f = Fraction(float(r[i]))
            side[i] = np.sign(1 - f * f * Fraction(float(xs[i])))  # > 0: the exact value is above r
    out = _direct(r, side, "ro", True)
    return out if np.ndim(x) else _F32(out[0])


_F32_OPS = {"add": ieee_add, "sub": ieee_sub, "mul": ieee_mul, "fmaf": ieee_fmaf, "fdiv": ieee_fdiv,
            "frcp": ieee_frcp, "fsqrt": ieee_fsqrt}


_BITS16 = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def _cast_directed(mode: str, dtype: str):
    """float32 values -> the float32 value of ``dtype`` that ``mode`` ('rz', 'ru', 'rd') rounds
    each to (T.cast(..., round='rz'...)): the nearest one, moved one step on the 16-bit grid where
    it lies on the wrong side of the value (bit patterns order like magnitudes within a sign)."""
    t = _BITS16[dtype]

    def f(x):
        x = np.asarray(x, _F32)
        r = x.astype(t)
        rf = r.astype(_F32)
        bits = np.atleast_1d(r.view(np.uint16)).astype(np.int32)
        neg = (bits & 0x8000) != 0
        with np.errstate(invalid="ignore"):
            if mode == "rz":
                fix = np.atleast_1d(np.abs(rf) > np.abs(x))
                bits = np.where(fix, bits - 1, bits)  # one step toward zero
            elif mode == "ru":
                fix = np.atleast_1d(rf < x)
                bits = np.where(fix, np.where(neg, np.where(bits == 0x8000, 1, bits - 1), bits + 1), bits)
            else:
                fix = np.atleast_1d(rf > x)
                bits = np.where(fix, np.where(neg, bits + 1, np.where(bits == 0, 0x8001, bits - 1)), bits)
        out = bits.astype(np.uint16).view(t).astype(_F32)
        return out if np.ndim(x) else out[0]

    return f


def ieee_function(name: str, dtype: str):
    """The NumPy function computing intrinsic ``name`` (``ieee_add_rz``, ..., ``cast_rz``, ...)
    for a result of ``dtype``: float64 operands exactly (``ieee_exact``); float32 ones in float32;
    16-bit ones (given as float32 values) as the float32 result rounded to odd, for the caller's
    final cast; the mode casts as the 16-bit value (as float32) or, for ``cast_nosat``, unchanged
    (the caller's final conversion to fp8 does not saturate)."""
    if name == "cast_nosat":
        return lambda x: x
    if name.startswith("cast_"):
        return _cast_directed(name.removeprefix("cast_"), dtype)
    op, mode = name.removeprefix("ieee_").rsplit("_", 1)
    if dtype == "float64":
        if op == "frsqrt":
            raise ValueError("frsqrt is not supported for float64")

        def f64(*args):
            return float64_op(op, mode, *args)

        return f64
    if dtype in ("float16", "bfloat16"):
        return _frsqrt_odd if op == "frsqrt" else _make(_F32_OPS[op], "ro")
    return ieee_functions()[name]


def _make(fn, mode):
    def f(*args):
        out = fn(*args, mode)
        return out if np.ndim(out) else _F32(out)

    return f


def ieee_functions() -> dict:
    """Intrinsic name (``ieee_add_rz``, ...) -> NumPy function of float32 operands."""
    table = {}
    for op, fn in _F32_OPS.items():
        for mode in MODES:
            table[f"ieee_{op}_{mode}"] = _make(fn, mode)
    table["ieee_frsqrt_rn"] = lambda x: ieee_frsqrt(x) if np.ndim(x) else _F32(ieee_frsqrt(x))
    return table


def _nearbyint(x):
    return np.rint(x)


def extra_float_functions() -> dict:
    """NumPy meanings of the intrinsics added for TileLang's names: the fast-math spellings compute
    the accurate function (the GPU's fast versions differ by a few ulp), ``nearbyint`` rounds half
    to even, ``rcp`` is 1/x, ``fmod`` is C's fmod."""
    table = {
        "nearbyint": _nearbyint, "rcp": lambda x: 1 / x, "fmod": np.fmod,
        "__exp": np.exp, "__exp2": np.exp2, "__exp10": lambda x: np.power(x.dtype.type(10), x), "__log": np.log,
        "__log2": np.log2, "__log10": np.log10, "__sin": np.sin, "__cos": np.cos, "__tan": np.tan,
    }
    table.update(ieee_functions())
    return table
