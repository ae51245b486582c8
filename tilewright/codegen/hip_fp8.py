"""fp8 on the HIP path without library support: 8-bit float values are stored as ``unsigned char``
and every use converts through float32 with small integer-only device functions generated here
(one decoder and one round-to-nearest-even encoder per format).  Matrix instructions take the raw
bytes, packed like int8.

Formats (as in ml_dtypes, which the emulator and the interpreter use):
  float8_e4m3fn    bias 7,  no infinities, NaN = S.1111.111
  float8_e4m3fnuz  bias 8,  no infinities, no -0, NaN = 0x80   (MFMA fp8 on gfx942)
  float8_e5m2      bias 15, IEEE-style infinities and NaNs
  float8_e5m2fnuz  bias 16, no infinities, no -0, NaN = 0x80

``tw_f32_to_<fmt>`` saturates, as CUDA's conversions do (ir/float8.py): a value beyond the largest
finite one, an infinity included, becomes that value with its sign; NaN stays NaN.
``tw_f32_to_<fmt>_nosat`` (``T.cast(..., sat=False)``) gives infinity (e5m2) or NaN instead.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

FP8 = {
    # name: (exponent bits, mantissa bits, bias, kind)
    "float8_e4m3fn": (4, 3, 7, "fn"),
    "float8_e4m3fnuz": (4, 3, 8, "fnuz"),
    "float8_e5m2": (5, 2, 15, "ieee"),
    "float8_e5m2fnuz": (5, 2, 16, "fnuz"),
}


def is_fp8(dtype: str) -> bool:
    return dtype in FP8


def short(dtype: str) -> str:
    return dtype.replace("float8_", "")


def const_bits(value: float, dtype: str) -> int:
    """The byte of a float constant in this format (its value is already what the type holds:
    ir/float8.py; ml_dtypes rounds it to the byte)."""
    return int(np.array([value], dtype=np.float32).astype(getattr(ml_dtypes, dtype)).view(np.uint8)[0])


def _max_finite(dtype: str) -> float:
    return float(ml_dtypes.finfo(getattr(ml_dtypes, dtype)).max)


def helpers(dtypes) -> str:
    """Device functions for the fp8 formats a kernel uses."""
    out = []
    for dtype in sorted(set(dtypes)):
        e, m, bias, kind = FP8[dtype]
        n = short(dtype)
        emax = (1 << e) - 1
        nan = "0x80u" if kind == "fnuz" else "0x7fu"
        max_bits = const_bits(_max_finite(dtype), dtype)
        if kind == "ieee":
            special = (f"  if (ex == {emax}u) return man ? __builtin_nanf(\"\") : "
                       f"(s ? -__builtin_inff() : __builtin_inff());\n")
            overflow = "0x7cu"  # infinity
        elif kind == "fn":
            special = f"  if (ex == {emax}u && man == {(1 << m) - 1}u) return __builtin_nanf(\"\");\n"
            overflow = nan
        else:
            special = "  if (b == 0x80u) return __builtin_nanf(\"\");\n"
            overflow = nan
        sub_scale = f"{2.0 ** (1 - bias - m)!r}f"
        out.append(f"""
__device__ __forceinline__ float tw_{n}_to_f32(unsigned char b) {{
  unsigned s = b >> 7, ex = (b >> {m}) & {emax}u, man = b & {(1 << m) - 1}u;
{special}  float v = ex ? __builtin_bit_cast(float, ((ex + {127 - bias}u) << 23) | (man << {23 - m}))
             : (float)man * {sub_scale};
  return s ? -v : v;
}}
__device__ __forceinline__ unsigned char tw_f32_to_{n}_mode(float x, bool sat) {{
  unsigned u = __builtin_bit_cast(unsigned, x), s = (u >> 24) & 0x80u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return {nan};
  unsigned r;
  if (a < {(127 - bias + 1) << 23}u) {{  /* below the smallest normal: a multiple of the subnormal step */
    r = (unsigned)__builtin_rintf(__builtin_bit_cast(float, a) / {sub_scale});
  }} else {{                              /* round the mantissa to {m} bits, to nearest even */
    unsigned sh = {23 - m}u;
    r = (a + ((1u << (sh - 1)) - 1u) + ((a >> sh) & 1u)) >> sh;
    r -= {(127 - bias) << m}u;
  }}
  if (r > {max_bits}u) return s | (sat ? {max_bits}u : {overflow});  /* an infinity lands here too */
  {"if (r == 0u) return 0u;  /* no negative zero in this format */" if kind == "fnuz" else ""}
  return (unsigned char)(s | r);
}}
__device__ __forceinline__ unsigned char tw_f32_to_{n}(float x) {{ return tw_f32_to_{n}_mode(x, true); }}
__device__ __forceinline__ unsigned char tw_f32_to_{n}_nosat(float x) {{ return tw_f32_to_{n}_mode(x, false); }}""")
    return "\n".join(out) + "\n"
