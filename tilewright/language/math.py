"""TileLang's further scalar math: ``T.tan``, ``T.atan``, ``T.sinh``, ``T.cosh``, ``T.fmod``,
``T.nearbyint``, ``T.clamp``, ``T.fast_rcp``, the fast-math spellings ``T.__exp`` ... and the IEEE
arithmetic with an explicit rounding mode ``T.ieee_add(x, y, rounding_mode="rz")`` ...

Each builds an intrinsic call (``ir.expr.call``) that the tile interpreter, the emulator and the
CUDA and HIP printers all know.  The fast-math spellings compute the same function as the accurate
ones (on the GPU with the hardware's approximation, a few ulp off); in float64 they are the accurate
function.  ``ieee_*`` are float32 operations, as in CUDA's ``__fadd_rz`` family; HIP has only
round-to-nearest (it refuses the other modes with a CompileError naming the operation).
"""

from __future__ import annotations

from ..errors import CompileError
from ..frontend import builder as _b
from ..ir import dtype as _dt
from ..ir import expr as _e
from ..ir.expr import Expr as _Expr

__all__ = [
    "tan", "atan", "sinh", "cosh", "fmod", "nearbyint", "round", "isfinite", "clamp", "fast_rcp", "rcp",
    "__exp", "__exp2", "__exp10", "__log", "__log2", "__log10", "__sin", "__cos", "__tan",
    "ieee_add", "ieee_sub", "ieee_mul", "ieee_fmaf", "ieee_fdiv", "ieee_frcp", "ieee_fsqrt", "ieee_frsqrt",
]


class InvalidArgumentError(CompileError, ValueError):
    """A T.* call given a value it does not take: a CompileError that is also the ValueError
    TileLang raises there (its tests match on ValueError)."""


def _unary(name, doc):
    def f(x):
        return _e.call(name, [x])

    f.__name__ = name
    f.__doc__ = doc
    return f


tan = _unary("tan", "Elementwise tangent.")
atan = _unary("atan", "Elementwise arc tangent.")
sinh = _unary("sinh", "Elementwise hyperbolic sine.")
cosh = _unary("cosh", "Elementwise hyperbolic cosine.")
nearbyint = _unary("nearbyint", "Round to the nearest integer, halves to even (C's nearbyint).")
isfinite = _unary("isfinite", "Whether x is neither infinite nor NaN (a bool).")

_ROUND_MODES = ("ties-to-even", "ties-away-from-zero")


def round(x, rounding_mode="ties-to-even"):  # noqa: A001 - TileLang's T.round
    """Round to the nearest integer: halves to even by default (TileLang's and TVM's T.round, C's
    nearbyint), or ``rounding_mode="ties-away-from-zero"`` (C's round)."""
    if rounding_mode is None:
        rounding_mode = "ties-to-even"
    if rounding_mode not in _ROUND_MODES:
        b = _b.current_or_none()
        raise InvalidArgumentError(
            f"Unsupported T.round rounding_mode {rounding_mode!r}; expected 'ties-to-even' or 'ties-away-from-zero'",
            b.loc if b else None)
    return _e.call("nearbyint" if rounding_mode == "ties-to-even" else "round", [x])


def fmod(x, y):
    """C's ``fmod``: ``x - trunc(x / y) * y``, with the sign of ``x``."""
    ex, ey = _e.as_expr(x), _e.as_expr(y)
    t = _dt.promote(ex.dtype, ey.dtype)
    if not _dt.is_float(t):
        t = "float32"
    return _e.call("fmod", [_e.cast(t, ex), _e.cast(t, ey)])


def clamp(x, min_val=None, max_val=None):
    """``min(max(x, min_val), max_val)`` (a bound left out is not applied)."""
    if min_val is None and max_val is None:
        raise _b.error("T.clamp needs a lower bound, an upper bound or both")
    if min_val is not None:
        x = _e.emax(x, min_val)
    return x if max_val is None else _e.emin(x, max_val)


def fast_rcp(x):
    """``1 / x`` (on the GPU with the hardware reciprocal: CUDA's ``__frcp_rn``, AMD's ``v_rcp_f32``)."""
    ex = _e.as_expr(x)
    if ex.dtype == "float64":
        return 1.0 / ex
    return _e.call("rcp", [ex])


rcp = fast_rcp


def _fast(name: str, accurate: str, what: str):
    def f(x):
        ex = _e.as_expr(x)
        return _e.call(accurate if ex.dtype == "float64" else name, [ex])

    f.__name__ = name
    f.__doc__ = f"{what} with fast math (the hardware approximation on the GPU; accurate in float64)."
    return f


__exp = _fast("__exp", "exp", "e**x")
__exp2 = _fast("__exp2", "exp2", "2**x")  # attn-hopper: CUDA ex2.approx.ftz (flash attention's softmax)
__exp10 = _fast("__exp10", "exp10", "10**x")
__log = _fast("__log", "log", "log(x)")
__log2 = _fast("__log2", "log2", "log2(x)")
__log10 = _fast("__log10", "log10", "log10(x)")
__sin = _fast("__sin", "sin", "sin(x)")
__cos = _fast("__cos", "cos", "cos(x)")
__tan = _fast("__tan", "tan", "tan(x)")

_ROUNDING_MODES = ("rn", "rz", "ru", "rd")
_IEEE_TYPES = ("float32", "float64", "float16", "bfloat16")


def _ieee(op: str, args, rounding_mode) -> _Expr:
    if not isinstance(rounding_mode, str) or rounding_mode not in _ROUNDING_MODES:
        b = _b.current_or_none()
        raise InvalidArgumentError(
            f"Invalid rounding mode {rounding_mode!r} in T.ieee_{op}. Must be one of: {', '.join(_ROUNDING_MODES)}",
            b.loc if b else None,
            "use 'rn' (to nearest), 'rz' (toward zero), 'ru' (toward +inf) or 'rd' (toward -inf)")
    # the operation's type is that of its first typed operand (TileLang: x's); literals follow it
    typed = [a for a in args if isinstance(a, _Expr)]
    t = typed[0].dtype if typed else "float32"
    if t not in _IEEE_TYPES:
        raise _b.error(f"T.ieee_{op} computes in float32, float64, float16 or bfloat16; got an operand of type {t}",
                       hint="cast the operand: T.float32(x) (or T.Cast('float32', x))")
    exprs = [_e.as_expr(a, t) for a in args]
    for a in exprs:
        if a.dtype != t:
            raise _b.error(f"T.ieee_{op}: the operands have different types ({t} and {a.dtype})",
                           hint=f"cast them to one type, e.g. T.Cast('{t}', x)")
    if t in ("float16", "bfloat16") and rounding_mode != "rn":
        raise _b.error(f"T.ieee_{op}(rounding_mode={rounding_mode!r}) on {t}: Only rounding mode 'rn' is "
                       "available for half precision (CUDA's __hadd family rounds to nearest)",
                       hint="use rounding_mode='rn', or compute in float32: T.ieee_add(T.float32(x), ...)")
    if t == "float64" and op == "frsqrt":
        raise _b.error("T.ieee_frsqrt: frsqrt is not supported for float64 (CUDA has no correctly rounded "
                       "float64 reciprocal square root)",
                       hint="compute T.ieee_frcp(T.ieee_fsqrt(x, 'rn'), 'rn') (two roundings), or use float32")
    return _e.Call(f"ieee_{op}_{rounding_mode}", tuple(exprs), t)


def ieee_add(x, y, rounding_mode="rn"):
    """``x + y`` rounded in ``rounding_mode`` ('rn', 'rz', 'ru', 'rd')."""
    return _ieee("add", (x, y), rounding_mode)


def ieee_sub(x, y, rounding_mode="rn"):
    """``x - y`` rounded in ``rounding_mode``."""
    return _ieee("sub", (x, y), rounding_mode)


def ieee_mul(x, y, rounding_mode="rn"):
    """``x * y`` rounded in ``rounding_mode``."""
    return _ieee("mul", (x, y), rounding_mode)


def ieee_fmaf(x, y, z, rounding_mode="rn"):
    """``x * y + z`` with one rounding in ``rounding_mode``."""
    return _ieee("fmaf", (x, y, z), rounding_mode)


def ieee_fdiv(x, y, rounding_mode="rn"):
    """``x / y`` rounded in ``rounding_mode``."""
    return _ieee("fdiv", (x, y), rounding_mode)


def ieee_frcp(x, rounding_mode="rn"):
    """``1 / x`` rounded in ``rounding_mode``."""
    return _ieee("frcp", (x,), rounding_mode)


def ieee_fsqrt(x, rounding_mode="rn"):
    """``sqrt(x)`` rounded in ``rounding_mode``."""
    return _ieee("fsqrt", (x,), rounding_mode)


def ieee_frsqrt(x):
    """``1 / sqrt(x)`` rounded to nearest (float32, float16, bfloat16)."""
    return _ieee("frsqrt", (x,), "rn")
