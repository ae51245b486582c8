"""What a conversion to an 8-bit float gives, the same on every backend.

CUDA converts to ``__nv_fp8_e4m3`` / ``__nv_fp8_e5m2`` with ``satfinite`` (the constructors, and
TileLang's default ``T.cast(..., sat=True)``): the PTX ISA's rule for ``cvt.rn.satfinite`` is that
a NaN stays NaN, and a value whose magnitude is beyond the largest finite one, an infinity
included, becomes that largest finite value with its sign; in range it rounds to nearest even.
The HIP helpers (codegen/hip_fp8.py) follow the same rule, and so do the interpreter and the
emulator through :func:`convert` here (NumPy's / ml_dtypes' own conversion gives infinity or NaN
instead).  The fnuz formats (gfx942's MFMA operands) saturate the same way, as HIP's default
``__hip_cvt_float_to_fp8(..., __HIP_SATFINITE, ...)`` does.

Two exceptions keep their exact meaning:

* ``T.cast(x, fp8, sat=False)`` (the ``cast_nosat`` intrinsic): out of range gives infinity
  (``float8_e5m2``) or NaN (the formats without infinities): :func:`convert_nosat`.
* a constant (``Const``) of an fp8 type: ``T.infinity("float8_e5m2")`` is infinity, as TileLang's
  ``T.infinity`` defines it; a finite constant beyond the range saturates like a conversion, and
  an infinite one saturates in a format without infinities: :func:`const_value`.

``float8_e8m0fnu`` (a scale format, powers of two) and the 4-bit floats are not handled here.
"""

from __future__ import annotations

import math

import numpy as np

from . import dtype as dt

SATURATING = frozenset({"float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"})
WITH_INFINITY = frozenset({"float8_e5m2"})

_F32 = np.dtype(np.float32)


def _max_by_numpy_dtype() -> dict:
    return {dt.to_numpy(d): dt.max_value(d) for d in SATURATING}


_MAX: dict = {}


def saturating_max(npdt: np.dtype):
    """The largest finite value of ``npdt`` when conversions to it saturate, else None."""
    if not _MAX:
        _MAX.update(_max_by_numpy_dtype())
    return _MAX.get(npdt)


def convert(x, npdt: np.dtype):
    """``x`` (a NumPy array or scalar) converted to ``npdt``: saturating for the fp8 formats,
    NumPy's conversion otherwise.  Scalars stay scalars."""
    top = saturating_max(npdt)
    if top is None:
        if isinstance(x, np.ndarray):
            return x if x.dtype == npdt else x.astype(npdt)
        return npdt.type(x)
    a = np.asarray(x)
    if a.dtype == npdt:
        return x if isinstance(x, np.ndarray) else npdt.type(a[()])
    if a.dtype.kind not in "fiub":  # bfloat16 and the other 8-bit floats: exact in float32
        a = a.astype(_F32)
    # clipping to the largest finite value first is satfinite: values between it and the next
    # (unrepresentable) step round down to it anyway; NaN passes np.clip unchanged
    r = np.clip(a, -top, top).astype(npdt)
    return r if isinstance(x, np.ndarray) else npdt.type(r[()])


def convert_nosat(x, npdt: np.dtype):
    """``x`` converted to ``npdt`` without saturation (``T.cast(..., sat=False)``)."""
    if isinstance(x, np.ndarray):
        return x if x.dtype == npdt else x.astype(npdt)
    return npdt.type(x)


def const_value(value: float, dtype: str) -> float:
    """The value a constant of 8-bit float type ``dtype`` holds (module docstring): NaN stays NaN,
    an infinity stays one where the format has infinities, anything else converts saturating."""
    if dtype not in SATURATING or math.isnan(value):
        return value
    if math.isinf(value) and dtype in WITH_INFINITY:
        return value
    npdt = dt.to_numpy(dtype)
    return float(convert(np.float64(value), npdt))
