"""TileLang's ``T.cast(value, dtype, round="", sat=True, rbits=None)``: a conversion with a PTX-style
rounding modifier and saturation choice.

What each combination means here (every backend computes the same values):

* ``round=""`` or ``"rn"`` with ``sat=True``: the ordinary conversion ``T.Cast(dtype, value)``.  To
  an fp8 type it saturates on every backend, as CUDA's ``__nv_fp8_*`` constructors (``satfinite``,
  TileLang's default) do: a value beyond the largest finite one, an infinity included, becomes that
  value with its sign, NaN stays NaN (ir/float8.py; the interpreter, the emulator and HIP's
  ``tw_f32_to_*`` follow it).  fp8 constants are exact: ``T.infinity("float8_e5m2")`` is infinity.
* ``sat=False`` to an 8-bit float: no saturation, so a value beyond the largest finite one becomes
  NaN (``float8_e4m3fn`` and the fnuz formats, which have no infinity) or infinity (``float8_e5m2``) — the intrinsic
  ``cast_nosat``.  To other types a conversion never saturates, so ``sat`` changes nothing there.
* ``round="rz"`` / ``"rp"`` / ``"rm"`` (toward zero, +inf, -inf) from float32, float16 or bfloat16
  to float16 or bfloat16: the intrinsics ``cast_rz`` / ``cast_ru`` / ``cast_rd`` (CUDA's
  ``__float2half_rz`` family; the interpreter and emulator in ``interp/ieee_rounding``; HIP refuses
  them with a CompileError).  Other pairs are refused: PTX has no directed conversion to fp8.
* ``round="rs"`` (stochastic rounding with ``rbits``, sm_100a only in TileLang) is refused.

Argument errors are ValueErrors with TileLang's wording (its tests match on them), which are also
CompileErrors naming the kernel line.
"""

from __future__ import annotations

from ..frontend import builder as _b
from ..ir import dtype as _dt
from ..ir import expr as _e
from .math import InvalidArgumentError

VALID_ROUNDING_MODES = {"", "rn", "rz", "rp", "rm", "rs"}
_DIRECTED = {"rz": "cast_rz", "rp": "cast_ru", "rm": "cast_rd"}
# every saturating 8-bit float (ir/float8.SATURATING): sat=False keeps its meaning on the fnuz formats too
_FP8 = ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")


def _invalid(message: str):
    b = _b.current_or_none()
    return InvalidArgumentError(message, b.loc if b else None)


def cast(value, dtype, round: str = "", sat: bool = True, rbits=None):  # noqa: A002 - TileLang's keyword
    """``value`` converted to ``dtype``, rounded by ``round`` and saturated by ``sat`` (module docstring)."""
    if round not in VALID_ROUNDING_MODES:
        raise _invalid(f"Invalid round '{round}'. Must be one of: {sorted(VALID_ROUNDING_MODES)}")
    if not isinstance(sat, bool):
        raise _invalid(f"Invalid sat '{sat}'. Must be a bool (True for satfinite, False for no saturation)")
    if round == "rs" and rbits is None:
        raise _invalid("rbits is required when round='rs' (stochastic rounding)")
    if round != "rs" and rbits is not None:
        raise _invalid("rbits is only valid with round='rs' (stochastic rounding)")
    dtype = _dt.canon(dtype)
    if round in ("", "rn") and (sat or dtype not in _FP8):
        return _e.cast(dtype, value)
    if round == "rs":
        raise _b.error("T.cast(..., round='rs') (stochastic rounding with random bits) is not supported",
                       hint="use round='rn' (to nearest), or add the random dither to the value before the cast")
    src = _e.as_expr(value, "float32")
    if round in ("", "rn"):  # sat=False to fp8
        if not _dt.is_float(src.dtype):
            src = _e.cast("float32", src)
        return _e.Call("cast_nosat", (src,), dtype)
    if dtype not in ("float16", "bfloat16") or src.dtype not in ("float32", "float16", "bfloat16"):
        raise _b.error(f"T.cast(..., round='{round}') from {src.dtype} to {dtype} is not supported: directed "
                       "rounding converts float32, float16 or bfloat16 values to float16 or bfloat16",
                       hint="convert to float32 first, or use round='rn'")
    return _e.Call(_DIRECTED[round], (src,), dtype)
