"""The 4-bit types (int4, uint4, float4_e2m1fn) and the MX scale type (float8_e8m0fnu) in generated
code, for both vendors (plain C++, no vendor intrinsics: NVIDIA's fp4 conversions exist on sm_100
only, and AMD has none before gfx950).

In registers and shared memory each value is a one-byte struct with a converting constructor and a
conversion operator, so the printers' casts and arithmetic (done in int / float) just work.  Global
memory holds the 4-bit types two per byte (ir/dtype.py): loads read a nibble, stores replace one
with a compare-and-swap on the aligned 32-bit word, so that two threads writing the two halves of
one byte do not lose either write.

Rounding is ml_dtypes' (what the interpreter and the emulator compute with):
  float4_e2m1fn   values 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives; round to nearest even,
                  saturate to +-6 (infinities too); NaN -> -0 (+NaN) or +0 (-NaN), as ml_dtypes
  float8_e8m0fnu  2**(b - 127) for b < 255, b = 255 is NaN; round half up on the exponent, zero,
                  negatives, infinities and NaN -> NaN, above 2**127 -> NaN, below 2**-127 -> 2**-127
  int4 / uint4    two's complement / unsigned, wrapping (a conversion keeps the low 4 bits)
"""

from __future__ import annotations

from ..ir import dtype as dt

CTYPES = {"int4": "tw_i4", "uint4": "tw_u4", "float4_e2m1fn": "tw_fp4", "float8_e8m0fnu": "tw_e8m0"}

_COMMON = r"""
__device__ __forceinline__ unsigned tw_ld_nibble(const unsigned char* p, long long i) {
  return (p[i >> 1] >> ((i & 1) * 4)) & 0xFu;
}
__device__ __forceinline__ void tw_st_nibble(unsigned char* p, long long i, unsigned v) {
  unsigned long long a = (unsigned long long)(p + (i >> 1));
  unsigned* w = (unsigned*)(a & ~3ull);
  unsigned sh = (unsigned)(a & 3ull) * 8u + (unsigned)(i & 1) * 4u, m = 0xFu << sh, nv = (v & 0xFu) << sh;
  unsigned old = *(volatile unsigned*)w;
  while (!TW_CAS32(w, old, (old & ~m) | nv)) {}  /* on failure, old is the word's current value */
}
"""

_TYPES = {
    "int4": r"""
struct tw_i4 {
  signed char v;
  tw_i4() = default;
  __device__ __forceinline__ tw_i4(int x) : v((signed char)(((x & 15) ^ 8) - 8)) {}
  __device__ __forceinline__ operator int() const { return v; }
};
__device__ __forceinline__ tw_i4 tw_ld_int4(const unsigned char* p, long long i) {
  return tw_i4((int)tw_ld_nibble(p, i)); }
__device__ __forceinline__ void tw_st_int4(unsigned char* p, long long i, tw_i4 x) {
  tw_st_nibble(p, i, (unsigned)x.v); }
""",
    "uint4": r"""
struct tw_u4 {
  unsigned char v;
  tw_u4() = default;
  __device__ __forceinline__ tw_u4(unsigned x) : v((unsigned char)(x & 15u)) {}
  __device__ __forceinline__ tw_u4(int x) : v((unsigned char)(x & 15)) {}
  __device__ __forceinline__ operator unsigned() const { return v; }
};
__device__ __forceinline__ tw_u4 tw_ld_uint4(const unsigned char* p, long long i) {
  return tw_u4(tw_ld_nibble(p, i)); }
__device__ __forceinline__ void tw_st_uint4(unsigned char* p, long long i, tw_u4 x) {
  tw_st_nibble(p, i, (unsigned)x.v); }
""",
    "float4_e2m1fn": r"""
struct tw_fp4 {
  unsigned char v;
  tw_fp4() = default;
  __device__ __forceinline__ tw_fp4(float x) : v(tw_f32_to_fp4(x)) {}
  __device__ __forceinline__ operator float() const { return tw_fp4_to_f32(v); }
};
__device__ __forceinline__ tw_fp4 tw_ld_float4_e2m1fn(const unsigned char* p, long long i) {
  tw_fp4 r; r.v = (unsigned char)tw_ld_nibble(p, i); return r; }
__device__ __forceinline__ void tw_st_float4_e2m1fn(unsigned char* p, long long i, tw_fp4 x) {
  tw_st_nibble(p, i, x.v); }
""",
    "float8_e8m0fnu": r"""
struct tw_e8m0 {
  unsigned char v;
  tw_e8m0() = default;
  __device__ __forceinline__ tw_e8m0(float x) : v(tw_f32_to_e8m0(x)) {}
  __device__ __forceinline__ operator float() const { return tw_e8m0_to_f32(v); }
};
""",
}

# the HIP prelude has no __float_as_uint / __uint_as_float in scope before its own headers: the
# printers put these first for it
HIP_BITCASTS = r"""
__device__ __forceinline__ unsigned tw_f2u(float x) { return __builtin_bit_cast(unsigned, x); }
__device__ __forceinline__ float tw_u2f(unsigned x) { return __builtin_bit_cast(float, x); }
"""


_CUDA_CAS = r"""
__device__ __forceinline__ bool tw_cas32(unsigned* w, unsigned& old, unsigned nv) {
  unsigned seen = atomicCAS(w, old, nv); bool ok = seen == old; old = seen; return ok; }
#define TW_CAS32(w, old, nv) tw_cas32(w, old, nv)
"""
_HIP_CAS = r"""
#define TW_CAS32(w, old, nv) \
  __hip_atomic_compare_exchange_strong(w, &old, nv, __ATOMIC_RELAXED, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT)
"""


# float <-> byte conversions, plain C++ (also compiled on the host by the tests)
CONVERSIONS = {
    "float4_e2m1fn": r"""
__device__ __forceinline__ float tw_fp4_to_f32(unsigned c) {
  unsigned e = (c >> 1) & 3u, m = c & 1u;
  float a = e ? (float)(2u + m) * (float)(1u << e) * 0.25f : (float)m * 0.5f;
  return (c & 8u) ? -a : a;
}
__device__ __forceinline__ unsigned char tw_f32_to_fp4(float x) {
  unsigned u = __float_as_uint(x), s = (u >> 28) & 8u;
  float a = __uint_as_float(u & 0x7fffffffu);
  if (a != a) return s ? 0u : 8u;  /* NaN: as ml_dtypes */
  /* nearest of 0, .5, 1, 1.5, 2, 3, 4, 6; the ties .25, .75, 1.25, 1.75, 2.5, 3.5, 5 go to the even code */
  unsigned c = a <= 0.25f ? 0u : a < 0.75f ? 1u : a <= 1.25f ? 2u : a < 1.75f ? 3u
             : a <= 2.5f ? 4u : a < 3.5f ? 5u : a <= 5.0f ? 6u : 7u;
  return (unsigned char)(s | c);
}
""",
    "float8_e8m0fnu": r"""
__device__ __forceinline__ float tw_e8m0_to_f32(unsigned b) {
  return b == 255u ? __uint_as_float(0x7fffffffu) : __uint_as_float(b ? b << 23 : 0x00400000u);
}
__device__ __forceinline__ unsigned char tw_f32_to_e8m0(float x) {
  unsigned u = __float_as_uint(x);
  if ((u >> 31) || u == 0u || (u >> 23) == 255u) return 255u;  /* negative, zero, inf, NaN */
  /* float32 subnormal m * 2^-149: code 0 (2^-127, m = 0x400000) up to the midpoint 1.5 * 2^-127, then
     code 1 (2^-126), ties up like the normal case (ml_dtypes >= 0.7; 0.6 switched at 2^-127 already) */
  if ((u >> 23) == 0u) return (unsigned char)((u & 0x7fffffu) >= 0x600000u);
  unsigned r = (u + 0x400000u) >> 23;
  return (unsigned char)(r > 254u ? 255u : r);
}
""",
}


def conversions(dtype: str, vendor: str = "hip") -> str:
    """The conversion functions of ``dtype`` alone (the HIP spelling uses only compiler builtins)."""
    text = CONVERSIONS[dtype]
    if vendor == "hip":
        text = HIP_BITCASTS + text.replace("__float_as_uint", "tw_f2u").replace("__uint_as_float", "tw_u2f")
    return text


def used_dtypes(kernel) -> set:
    """The dtypes of ``CTYPES`` that ``kernel`` uses (parameters, buffers, expressions)."""
    return kernel_dtypes(kernel, lambda d: d in CTYPES, ("buffer", "src", "dst", "var"))


def kernel_dtypes(kernel, keep, buffer_attrs=("buffer",)) -> set:
    """The dtypes ``d`` with ``keep(d)`` that ``kernel`` uses: of its parameters, of the buffers its
    statements name in ``buffer_attrs``, and of the expressions in their values, conditions, bounds
    and indices (which helpers a printer must emit)."""
    from ..ir import expr as E
    from ..ir.visitor import walk, walk_expr

    found = {p.dtype for p in kernel.params if keep(p.dtype)}

    def see(x):
        if isinstance(x, E.Expr) and keep(x.dtype):
            found.add(x.dtype)

    def f(st):
        for name in buffer_attrs:
            b = getattr(st, name, None)
            if b is not None and keep(getattr(b, "dtype", None)):
                found.add(b.dtype)
        for name in ("value", "cond", "pred", "start", "extent"):
            v = getattr(st, name, None)
            if isinstance(v, E.Expr):
                walk_expr(v, see)
        for ix in getattr(st, "indices", ()) or ():
            walk_expr(ix, see)

    walk(kernel.body, f)
    return found


def helpers(dtypes, vendor: str) -> str:
    """Device code for the types in ``dtypes`` (empty when none is used)."""
    dtypes = set(dtypes) & set(CTYPES)
    if not dtypes:
        return ""
    text = _COMMON + "".join(CONVERSIONS.get(d, "") + _TYPES[d] for d in sorted(dtypes))
    if vendor == "cuda":
        text = _CUDA_CAS + text
    if vendor == "hip":
        text = HIP_BITCASTS + _HIP_CAS + text.replace("__float_as_uint", "tw_f2u").replace("__uint_as_float", "tw_u2f")
    return text


def is_packed_global(buf) -> bool:
    """A 4-bit buffer in global memory: two elements per byte, addressed by nibble."""
    return dt.is_subbyte(buf.dtype) and buf.scope == "global"
