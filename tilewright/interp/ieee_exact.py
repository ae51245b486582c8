"""Exactly rounded float64 arithmetic in any IEEE rounding mode, element by element with Python's
rationals (used by ``ieee_rounding`` for ``T.ieee_*`` on float64 operands).

NumPy cannot set the rounding mode, and float64 has no wider type to check a result against, so
each result is computed exactly as a ``Fraction`` (or, for a square root, bracketed between two
integers far below the last place) and rounded here by integer arithmetic.  Special operands
(infinities, NaN) and exact zeros keep the sign rules of IEEE 754; everything else goes through
``round_rational``, which also gives subnormal results and overflow the rules of each mode.
Slow (a few microseconds an element) but exact: interpreter and emulator tiles are small.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

_P, _EMIN, _EMAX = 53, -1022, 1023  # float64: significand bits, smallest normal and largest exponent
_MAX = np.finfo(np.float64).max


def _away(mode: str, negative: bool) -> bool:
    """Whether a directed ``mode`` rounds an inexact value of this sign away from zero."""
    return (mode == "ru" and not negative) or (mode == "rd" and negative)


def round_rational(x: Fraction, mode: str) -> float:
    """The float64 that ``mode`` ('rn', 'rz', 'ru', 'rd') rounds the nonzero rational ``x`` to."""
    negative = x < 0
    n, d = abs(x.numerator), x.denominator
    e = n.bit_length() - d.bit_length()  # 2**(e - 1) < |x| < 2**(e + 1)
    if (n << max(0, -e)) < (d << max(0, e)):
        e -= 1  # now 2**e <= |x| < 2**(e + 1)
    q = max(e, _EMIN) - (_P - 1)  # exponent of the last place (subnormals keep the smallest one)
    num, den = (n, d << q) if q >= 0 else (n << -q, d)
    m, r = divmod(num, den)
    if r:
        if mode == "rn":
            if 2 * r > den or (2 * r == den and m & 1):
                m += 1
        elif _away(mode, negative):
            m += 1
    if m and m.bit_length() + q > _EMAX + 1:  # overflow
        v = math.inf if mode == "rn" or _away(mode, negative) else _MAX
    else:
        v = math.ldexp(m, q)
    return -v if negative else v


def _sqrt_bracket(a: float) -> Fraction:
    """A rational that rounds like sqrt(a) (a > 0 finite) in every mode: sqrt(a) itself when it is
    rational, else the midpoint of two consecutive multiples of 2**-128 times the result's scale,
    which no float64 rounding boundary (a multiple of a far coarser power of two) separates."""
    fr = Fraction(a)
    m, k = fr.numerator, -(fr.denominator.bit_length() - 1)  # a = m * 2**k
    if k % 2:
        m, k = m * 2, k - 1
    g = 128
    s = math.isqrt(m << (2 * g))  # floor(sqrt(m) * 2**g)
    root = Fraction(2 * s + (s * s != m << (2 * g)), 2)
    return root * Fraction(2) ** (k // 2 - g)


def _zero_sum(addends, mode: str) -> float:
    """IEEE's sign of an exactly zero sum: that of the addends when all are zeros of one sign,
    else +0 (-0 when rounding toward -inf)."""
    if all(a == 0 for a in addends) and len({math.copysign(1.0, a) for a in addends}) == 1:
        return addends[0]
    return -0.0 if mode == "rd" else 0.0


def _scalar(op: str, args, mode: str) -> float:
    with np.errstate(all="ignore"):
        xs = [float(a) for a in args]
        near = _numpy_nearest(op, *[np.float64(a) for a in xs])
    if not all(math.isfinite(a) for a in xs):
        return float(near)  # infinities and NaN: the same result in every mode
    if op == "fsqrt":
        if xs[0] <= 0:  # sqrt(+-0) = +-0, sqrt of a negative is NaN
            return float(near)
        return round_rational(_sqrt_bracket(xs[0]), mode)
    f = [Fraction(a) for a in xs]
    if op in ("fdiv", "frcp") and f[-1] == 0:
        return float(near)
    exact = {"add": lambda: f[0] + f[1], "sub": lambda: f[0] - f[1], "mul": lambda: f[0] * f[1],
             "fmaf": lambda: f[0] * f[1] + f[2], "fdiv": lambda: f[0] / f[1], "frcp": lambda: 1 / f[0]}[op]()
    if exact == 0:
        if op == "add":
            return _zero_sum(xs, mode)
        if op == "sub":
            return _zero_sum([xs[0], -xs[1]], mode)
        if op == "fmaf":
            return _zero_sum([xs[0] * xs[1], xs[2]], mode)
        return float(near)  # a product or quotient of zero: NumPy's sign is IEEE's
    return round_rational(exact, mode)


def _numpy_nearest(op: str, *xs):
    a = xs
    return {"add": lambda: a[0] + a[1], "sub": lambda: a[0] - a[1], "mul": lambda: a[0] * a[1],
            "fmaf": lambda: a[0] * a[1] + a[2], "fdiv": lambda: a[0] / a[1], "frcp": lambda: 1 / a[0],
            "fsqrt": lambda: np.sqrt(a[0])}[op]()


def float64_op(op: str, mode: str, *args):
    """``op`` ('add', 'sub', 'mul', 'fmaf', 'fdiv', 'frcp', 'fsqrt') of float64 arrays or scalars,
    exactly rounded in ``mode``."""
    arrays = np.broadcast_arrays(*[np.asarray(a, np.float64) for a in args])
    out = np.empty(arrays[0].shape, np.float64)
    flat = [a.reshape(-1) for a in arrays]
    res = out.reshape(-1)
    for i in range(res.size):
        res[i] = _scalar(op, [a[i] for a in flat], mode)
    return out if out.ndim else np.float64(out[()])
