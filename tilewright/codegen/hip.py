"""HIP C++ printer: thread IR -> one ``extern "C" __global__`` kernel for an AMD GPU.

The output starts with :data:`~tilewright.codegen.hip_prelude.HIP_PRELUDE` and needs no ROCm header
and no device library, so it compiles with hiprtc, hipcc or a plain LLVM clang
(``-nogpuinc -nogpulib``).  What differs from the CUDA printer:

* indices, the barrier and the launch bounds come from the prelude (``tw_thread_idx_x()``,
  ``tw_syncthreads()``, ``TW_LAUNCH_BOUNDS``), math from its ``tw_*f`` functions (no ocml);
* the dynamic LDS is one file-scope ``extern __shared__`` array, which HIP sizes from the launch's
  ``sharedMemBytes`` (``hipModuleLaunchKernel``);
* ``MatrixMultiply`` calls the MFMA/WMMA clang builtin named by the ``MatrixInstr`` record: the
  lane's operand elements are gathered from the local arrays into the builtin's vector types and
  the result is scattered back, all in registers (clang's SROA keeps the constant-indexed local
  arrays in VGPRs/AGPRs);
* there is no cp.async or ldmatrix: an ``AsyncCopy`` (never emitted for AMD targets today) is
  printed as the equivalent synchronous copy, and ``LoadMatrix`` is an internal error.
"""

from __future__ import annotations

from typing import ClassVar

from ..errors import CompileError, InternalError
from ..ir import dtype as dt
from ..ir import expr as E
from ..ir import thread as th
from ..target.matrix_amd import AMD_VECTOR_CTYPES
from . import hip_fp8, subbyte
from .base import Printer, uses_device_assert
from .hip_prelude import HIP_INDEX_FUNCS, HIP_MATH_FUNCS, HIP_PRELUDE, HIP_VECTOR_TYPES
from .rng import rng_source, uses_rng

__all__ = ["HipPrinter", "print_hip"]

_CTYPES = {
    "float16": "tw_half", "bfloat16": "tw_bf16", "float32": "float", "float64": "double",
    "int8": "signed char", "int16": "short", "int32": "int", "int64": "long long", "uint8": "unsigned char",
    "uint16": "unsigned short", "uint32": "unsigned int", "uint64": "unsigned long long", "bool": "bool",
    # 8-bit floats travel as bytes; every use converts through float32 (hip_fp8.py)
    "float8_e4m3fn": "unsigned char", "float8_e4m3fnuz": "unsigned char", "float8_e5m2": "unsigned char",
    "float8_e5m2fnuz": "unsigned char",
    **subbyte.CTYPES,  # the 4-bit types and float8_e8m0fnu: one-byte structs (subbyte.py)
}

# Element vectors for packing matrix operands (matrix dtype -> vector typedef prefix).  Halves and
# bf16 use the prelude's; 8-bit integers get ours (below) and are then bit-cast to the builtin's
# int / long / int2 / int4 operand.
_ELEM_VECTOR_PREFIX = {"float16": "tw_half", "bfloat16": "tw_bf16x", "float32": "tw_float", "int32": "tw_int",
                       "int8": "tw_char"}

# Math the prelude does not have, built in _HELPERS from what it has (all float32; accuracy notes
# there).  None is libm-exact: they are meant for activations and normalisations.
_EXTRA_MATH = {
    "exp10": "tw_exp10f", "log10": "tw_log10f", "tan": "tw_tanf", "erf": "tw_erff", "fabs": "tw_fabsf",
    "atan": "tw_atanf", "sinh": "tw_sinhf", "cosh": "tw_coshf", "log1p": "tw_log1pf", "expm1": "tw_expm1f",
    "fmod": "tw_fmodf",
    # TileLang's names: clang lowers these float32 builtins to the GPU's instructions (no ocml);
    # the fast-math spellings compute the prelude's functions
    "nearbyint": "__builtin_rintf", "__exp": "tw_expf", "__exp10": "tw_exp10f", "__log": "tw_logf",
    "__exp2": "tw_exp2f",  # attn-hopper
    "__log2": "tw_log2f", "__log10": "tw_log10f", "__sin": "tw_sinf", "__cos": "tw_cosf", "__tan": "tw_tanf",
    "ieee_add_rn": "tw_ieee_add_rn", "ieee_sub_rn": "tw_ieee_sub_rn", "ieee_mul_rn": "tw_ieee_mul_rn",
    "ieee_fmaf_rn": "__builtin_fmaf", "ieee_fdiv_rn": "tw_ieee_fdiv_rn", "ieee_frcp_rn": "tw_ieee_frcp_rn",
    "ieee_fsqrt_rn": "__builtin_sqrtf", "ieee_frsqrt_rn": "tw_ieee_frsqrt_rn",
}

# TileLang's T.shfl_* calls -> the kind number tw_warp_src takes
_WARP_SHUFFLE_KIND = {"warp_shfl_xor": 0, "warp_shfl_down": 1, "warp_shfl_up": 2, "warp_shfl_idx": 3}

# float64 math that lowers to hardware instructions (v_sqrt/rsq/fma/floor... _f64) without ocml;
# anything else (exp, log, ...) would become a libm call that does not exist on the device.
_F64_MATH = {
    "sqrt": "__builtin_sqrt", "fabs": "__builtin_fabs", "abs": "__builtin_fabs", "floor": "__builtin_floor",
    "ceil": "__builtin_ceil", "trunc": "__builtin_trunc", "round": "__builtin_round", "fma": "__builtin_fma",
    "fmod": "__builtin_fmod", "nearbyint": "__builtin_rint",
}

# Helpers the base printer's output calls (tw_inf, tw_min, tw_floordiv, ...) and the ones this
# printer adds; the prelude is left as its author wrote it.
_HELPERS = r"""
// ---- tilewright HIP printer helpers ----
#ifndef __align__
#define __align__(n) __attribute__((aligned(n)))
#endif
// Vector copies reinterpret arrays of any element type: may_alias keeps type-based alias analysis
// from reordering them against the element-typed accesses (what -fno-strict-aliasing would do).
typedef unsigned char tw_vcopy1 __attribute__((may_alias));
typedef unsigned short tw_vcopy2 __attribute__((may_alias));
typedef unsigned tw_vcopy4 __attribute__((may_alias));
typedef unsigned tw_vcopy8 __attribute__((ext_vector_type(2), may_alias));
typedef unsigned tw_vcopy16 __attribute__((ext_vector_type(4), may_alias));
// 8-bit matrix operands are packed in these, then bit-cast to the builtin's int/long vectors.
typedef signed char tw_char4 __attribute__((ext_vector_type(4)));
typedef signed char tw_char8 __attribute__((ext_vector_type(8)));
typedef signed char tw_char16 __attribute__((ext_vector_type(16)));
// Constant folded by clang: no libm.
TW_DEV float tw_inf() { return __builtin_inff(); }
TW_DEV float tw_nan() { return __builtin_nanf(""); }
template <typename T> TW_DEV T tw_min(T a, T b) { return a < b ? a : b; }
template <typename T> TW_DEV T tw_max(T a, T b) { return a < b ? b : a; }
template <typename T> TW_DEV T tw_abs(T a) { return a < 0 ? -a : a; }
template <typename To, typename From> TW_DEV To tw_bitcast(From x) { return __builtin_bit_cast(To, x); }
template <typename T> TW_DEV T tw_floordiv(T a, T b) {
  T q = a / b; return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q; }
template <typename T> TW_DEV T tw_floormod(T a, T b) {
  T r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
// exp10 = 2^(x log2 10), with the rounding error of the product (large for large |x|) carried in a
// second, tiny exponent: log2 10 = 3.321928024f + 7.0595370e-8f.
TW_DEV float tw_exp10f(float x) {
  float p = x * 3.321928024f, e = __builtin_fmaf(x, 3.321928024f, -p) + x * 7.0595370e-8f;
  return tw_exp2f(p) * tw_exp2f(e); }
TW_DEV float tw_log10f(float x) { return tw_log2f(x) * 0.301029995663981195f; }
TW_DEV float tw_tanf(float x) { return tw_sinf(x) / tw_cosf(x); }
// log1p/expm1 (Kahan): u = 1 + x or e^x rounded; scaling by x / (u - 1) or x / log(u) cancels its
// rounding error.  sinh goes through expm1 near 0, where e^x - e^-x would cancel.
TW_DEV float tw_log1pf(float x) {
  float u = 1.0f + x;
  if (u == 1.0f || u == __builtin_inff()) return u == 1.0f ? x : u;
  return tw_logf(u) * (x / (u - 1.0f)); }
TW_DEV float tw_expm1f(float x) {
  float u = tw_expf(x);
  if (u == 1.0f || u == __builtin_inff()) return u == 1.0f ? x : u;
  float um1 = u - 1.0f;
  return um1 == -1.0f ? -1.0f : um1 * x / tw_logf(u); }
TW_DEV float tw_sinhf(float x) {
  if (__builtin_fabsf(x) < 1.0f) { float e = tw_expm1f(x); return 0.5f * (e + e / (e + 1.0f)); }
  float e = tw_expf(__builtin_fabsf(x));
  return __builtin_copysignf(0.5f * (e - 1.0f / e), x); }
TW_DEV float tw_coshf(float x) { float e = tw_expf(__builtin_fabsf(x)); return 0.5f * (e + 1.0f / e); }
// erf: Taylor series to x^11 for |x| < 0.5 (keeps the relative error small near 0), else
// Abramowitz & Stegun 7.1.26 (absolute error < 1.5e-7).
TW_DEV float tw_erff(float x) {
  float ax = __builtin_fabsf(x);
  if (ax < 0.5f) {
    float x2 = x * x;
    return x * (1.12837916710f + x2 * (-0.37612638903f + x2 * (0.11283791671f + x2 * (-0.02686617065f
           + x2 * (0.00522397763f + x2 * -0.00085483260f)))));
  }
  float t = 1.0f / (1.0f + 0.3275911f * ax);
  float p = t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
  return __builtin_copysignf(1.0f - p * tw_expf(-ax * ax), x); }
// atan as in Cephes atanf: reduce to |x| <= tan(pi/8) around 0, pi/4 or pi/2, then an odd polynomial
// (about 2 ulp; measured against libm on the host).
TW_DEV float tw_atanf(float x) {
  float ax = __builtin_fabsf(x), y = 0.0f;
  if (ax > 2.414213562f) {
    y = 1.570796327f;
    ax = -1.0f / ax;
  } else if (ax > 0.414213562f) {
    y = 0.785398163f;
    ax = (ax - 1.0f) / (ax + 1.0f);
  }
  float z = ax * ax;
  y += (((8.05374449538e-2f * z - 1.38776856032e-1f) * z + 1.99777106478e-1f) * z - 3.33329491539e-1f) * z * ax + ax;
  return __builtin_copysignf(y, x); }
// frem is expanded inline by the AMDGPU backend (no fmodf call).
TW_DEV float tw_fmodf(float x, float y) { return __builtin_fmodf(x, y); }
// Float min/max on global memory as one integer atomic (see tw_atomic_max_f32 in the prelude):
// non-negative floats order like signed ints, negative ones in reverse like unsigned ints.
TW_DEV float tw_atomic_min_f32(float* addr, float value) {
  int bits = tw_bits(int, value);
  if (bits >= 0)
    return tw_bits(float, __hip_atomic_fetch_min((int*)addr, bits, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT));
  return tw_bits(float, __hip_atomic_fetch_max((unsigned*)addr, (unsigned)bits, __ATOMIC_RELAXED,
                                               __HIP_MEMORY_SCOPE_AGENT));
}
// TileLang's ieee_* arithmetic in round-to-nearest: one correctly rounded operation each, kept
// out of fma contraction (HIP compiles with -ffp-contract=fast); reciprocal square root through
// float64, whose 29 spare bits make the final rounding the correct one.
TW_DEV float tw_ieee_add_rn(float x, float y) {
  #pragma clang fp contract(off)
  return x + y; }
TW_DEV float tw_ieee_sub_rn(float x, float y) {
  #pragma clang fp contract(off)
  return x - y; }
TW_DEV float tw_ieee_mul_rn(float x, float y) {
  #pragma clang fp contract(off)
  return x * y; }
TW_DEV float tw_ieee_fdiv_rn(float x, float y) { return x / y; }
TW_DEV float tw_ieee_frcp_rn(float x) { return 1.0f / x; }
TW_DEV float tw_ieee_frsqrt_rn(float x) { return (float)(1.0 / __builtin_sqrt((double)x)); }
// ... on float64 (round to nearest; division and square root lower to correctly rounded sequences)
TW_DEV double tw_ieee_dadd_rn(double x, double y) {
  #pragma clang fp contract(off)
  return x + y; }
TW_DEV double tw_ieee_dsub_rn(double x, double y) {
  #pragma clang fp contract(off)
  return x - y; }
TW_DEV double tw_ieee_dmul_rn(double x, double y) {
  #pragma clang fp contract(off)
  return x * y; }
// ... and the fma of 16-bit values: float32 rounded to odd (the exact residual from a float64
// two-sum, the product of two 16-bit values being exact in float64), so that the one rounding
// to the 16-bit type that follows is the correct one
TW_DEV float tw_ieee_fma_odd(float a, float b, float c) {
  #pragma clang fp contract(off)
  double p = (double)a * (double)b, s = p + (double)c, bb = s - p;
  double e = (p - (s - bb)) + ((double)c - bb);
  float r = (float)s;
  double res = (s - (double)r) + e;
  int bits = tw_bits(int, r);
  if (res != 0.0 && (bits & 1) == 0 && __builtin_isfinite(r)) {
    if (r == 0.0f) return res > 0.0 ? __builtin_bit_cast(float, 1) : __builtin_bit_cast(float, (int)0x80000001);
    bits += ((r > 0.0f) == (res > 0.0)) ? 1 : -1;  // one step away from / toward zero
    r = tw_bits(float, bits);
  }
  return r; }
// TileLang's T.shfl_*: the lane a lane reads (kind 0 xor, 1 down, 2 up, 3 idx) in segments of
// width lanes (0: the whole wave), its own lane where the source leaves the segment, as in CUDA.
TW_DEV int tw_warp_src(int kind, int arg, int width) {
  int lane = (int)tw_lane_id();
  int w = (width <= 0 || width > TW_WAVE_SIZE) ? TW_WAVE_SIZE : width;
  int seg = lane - lane % w;
  if (kind == 0) { int s = lane ^ arg; return (s >= seg + w || s >= TW_WAVE_SIZE) ? lane : s; }
  if (kind == 1) return (lane - seg + arg >= w) ? lane : lane + arg;
  if (kind == 2) return (lane - seg - arg < 0) ? lane : lane - arg;
  return seg + ((arg % w) + w) % w;
}
// TileLang's warp votes: the lanes (active, predicate true) as a 64-bit set on either wave size
TW_DEV __UINT64_TYPE__ tw_ballot(bool p) {
#if TW_WAVE_SIZE == 64
  return __builtin_amdgcn_ballot_w64(p);
#else
  return (__UINT64_TYPE__)__builtin_amdgcn_ballot_w32(p);
#endif
}
TW_DEV tw_i64 tw_shfl_src_i64(tw_i64 value, int src) {
  tw_int2 v = tw_bits(tw_int2, value);
  v.x = tw_shfl_i32(v.x, src);
  v.y = tw_shfl_i32(v.y, src);
  return tw_bits(tw_i64, v);
}
// ---- end of printer helpers ----
"""


def _vector_ctype(key: str) -> str:
    """C spelling of an ``AMD_VECTOR_CTYPES`` key: the prelude's ``tw_<key>`` typedef, or the scalar type."""
    elem, lanes = AMD_VECTOR_CTYPES[key]
    if lanes == 1:
        return elem
    name = "tw_" + key
    if name not in HIP_VECTOR_TYPES:
        raise InternalError(f"the HIP prelude has no vector type {name} for matrix operand type {key!r}", "codegen_hip")
    return name


def _f32(x):
    """``x`` as a float32 expression (fp8 values are decoded)."""
    return E.Cast("float32", x) if hip_fp8.is_fp8(x.dtype) else x


def _fp8_dtypes(kernel) -> set:
    return subbyte.kernel_dtypes(kernel, hip_fp8.is_fp8)


class HipPrinter(Printer):
    """Prints one ``ThreadKernel`` as HIP C++ for the AMD target it was lowered for."""

    vector_types: ClassVar[dict[int, str]] = {n: f"tw_vcopy{n}" for n in (1, 2, 4, 8, 16)}

    # ------------------------------------------------------------------ vendor hooks
    def ctype(self, dtype: str) -> str:
        ct = _CTYPES.get(dtype)
        if ct is None:
            # The prelude has no 8-bit float types (and clang-19 no arithmetic on them).
            raise CompileError(f"dtype {dtype} is not supported by the HIP backend",
                               hint="use a float16, bfloat16, float32, fp8 or integer type")
        return ct

    # ------------------------------------------------------------------ fp8 (bytes + float32 math)
    def const(self, c) -> str:
        if hip_fp8.is_fp8(c.dtype):
            return f"((unsigned char){hip_fp8.const_bits(c.value, c.dtype):#04x})"
        return super().const(c)

    def cast(self, dtype: str, a) -> str:
        if hip_fp8.is_fp8(dtype) and a.dtype == dtype:
            return self.expr(a)
        if hip_fp8.is_fp8(a.dtype):
            as_float = f"tw_{hip_fp8.short(a.dtype)}_to_f32({self.expr(a)})"
            if hip_fp8.is_fp8(dtype):
                return f"tw_f32_to_{hip_fp8.short(dtype)}({as_float})"
            return as_float if dtype == "float32" else f"(({self.ctype(dtype)})({as_float}))"
        if hip_fp8.is_fp8(dtype):
            return f"tw_f32_to_{hip_fp8.short(dtype)}((float)({self.expr(a)}))"
        return super().cast(dtype, a)

    def expr(self, e, prec: int = 0) -> str:
        # arithmetic on fp8 values happens in float32, rounded back to the byte format
        reinterpret = isinstance(e, E.Call) and e.name == "reinterpret"  # bits, not values: no widening
        if isinstance(e, (E.BinOp, E.UnOp, E.Call, E.Select)) and not isinstance(e, E.Load) and not reinterpret:
            if isinstance(e, E.BinOp) and (hip_fp8.is_fp8(e.a.dtype) or hip_fp8.is_fp8(e.b.dtype)):
                widened = E.binary(e.op, _f32(e.a), _f32(e.b))
                return self._narrow(widened, e.dtype)
            if isinstance(e, E.UnOp) and hip_fp8.is_fp8(e.a.dtype):
                return self._narrow(E.unary(e.op, _f32(e.a)), e.dtype)
            if isinstance(e, E.Call) and any(hip_fp8.is_fp8(x.dtype) for x in e.args):
                return self._narrow(E.call(e.name, [_f32(x) for x in e.args]), e.dtype)
            if isinstance(e, E.Select) and hip_fp8.is_fp8(e.dtype):
                return self._narrow(E.select(e.cond, _f32(e.a), _f32(e.b)), e.dtype)
        return super().expr(e, prec)

    def _narrow(self, widened, dtype: str) -> str:
        inner = super().expr(widened)
        if hip_fp8.is_fp8(dtype):
            return f"tw_f32_to_{hip_fp8.short(dtype)}({inner})"
        return inner

    def prelude(self) -> str:
        text = f"// generated by tilewright for {self.k.target}\n{HIP_PRELUDE}{_HELPERS}"
        if uses_device_assert(self.k):  # T.device_assert: a trap (no device printf without AMD's libraries)
            text += ("__device__ __forceinline__ int tw_device_assert_with_msg(bool cond) {\n"
                     "  if (!cond) __builtin_trap();\n  return 0;\n}\n")
        fp8_used = _fp8_dtypes(self.k)
        if fp8_used:
            text += hip_fp8.helpers(fp8_used)
        text += subbyte.helpers(subbyte.used_dtypes(self.k), "hip")
        if uses_rng(self.k):
            text += rng_source("static __device__ __noinline__ __attribute__((unused))", "__device__ const",
                              normal=False)  # call() refuses the normal draws
        if self.k.shared_bytes:
            # File scope, as HIP expects of an unsized extern __shared__ array: its size is the
            # launch's sharedMemBytes (the code object's group_segment_fixed_size stays 0).
            text += "TW_DYNAMIC_SHARED(unsigned char, tw_smem);\n"
        return text

    def smem_decl(self) -> str:
        return f"// tw_smem: {self.k.shared_bytes} bytes of dynamic LDS (hipModuleLaunchKernel sharedMemBytes)"

    def thread_index(self) -> str:
        return f"((int){HIP_INDEX_FUNCS['thread_idx_x']})"

    def block_index(self, d: int) -> str:
        return f"((int){HIP_INDEX_FUNCS['block_idx_' + 'xyz'[d]]})"

    def kernel_attrs(self) -> str:
        return f'extern "C" __global__ TW_LAUNCH_BOUNDS({self.k.num_threads}) void'

    def barrier(self) -> str:
        return HIP_INDEX_FUNCS["barrier"] + ";"

    def wave_size(self) -> int:
        target = self.k.target
        return int(getattr(target, "warp_size", 0) or 64)

    # ------------------------------------------------------------------ expressions
    def math_fn(self, name: str) -> str:
        fn = HIP_MATH_FUNCS.get(name) or _EXTRA_MATH.get(name)
        if fn is None and name.startswith("ieee_"):
            op, mode = name.removeprefix("ieee_").rsplit("_", 1)
            raise CompileError(f"T.ieee_{op}(..., rounding_mode={mode!r}) is not available in the HIP backend: "
                               "AMD GPUs set the rounding mode per wave, not per instruction",
                               hint="use rounding_mode='rn' on HIP, or run the kernel on a CUDA target")
        if fn is None:
            raise CompileError(f"math function {name!r} is not available in the HIP backend")
        return fn

    def call(self, e: E.Call) -> str:
        name = e.name
        args = e.args
        if name == "warp_size":
            return "TW_WAVE_SIZE"
        if name == "reinterpret":
            return super().call(e)
        if name == "warp_uniform":  # interp/warp_ops.UNIFORM: a promise for ptxas; the value itself here
            return self.expr(args[0])
        if name in _WARP_SHUFFLE_KIND:
            return self.warp_shuffle(e)
        if name.startswith("warp_vote_"):
            p, m = args
            kind, mask = name.removeprefix("warp_vote_"), f"{int(m.value):#x}ull"
            if kind == "activemask":
                return "tw_ballot(true)"
            bits = f"(tw_ballot({self.expr(p)}) & {mask})"
            if kind == "ballot":
                return bits
            return f"({bits} != 0ull)" if kind == "any" else f"({bits} == (tw_ballot(true) & {mask}))"
        if name.startswith("device_assert:"):  # T.device_assert: a trap (no device printf without AMD's libraries)
            return f"tw_device_assert_with_msg({self.expr(args[0])})"
        if name.startswith("debug_print:"):
            raise CompileError("T.print is not available in the HIP backend: device printf needs AMD's device "
                               "libraries, which tilewright does not link",
                               hint="print in the tile interpreter (target='interpret') or on the emulator "
                               "(execution_backend='emulator'), or write the values to an output buffer")
        if name in ("isnan", "isinf", "isfinite"):
            a = args[0]
            inner = self.expr(a) if a.dtype in ("float32", "float64") else f"(float)({self.expr(a)})"
            return f"__builtin_{name}({inner})"
        if name == "abs" and not dt.is_float(e.dtype):
            return f"tw_abs({self.expr(args[0])})"
        if name.startswith("ieee_"):
            return self.ieee_call(e)
        if name in ("rng_normal_f32", "rng_normal_f64"):
            raise CompileError("T.rng_rand_float(dist='normal') is not available in the HIP backend: it needs log, "
                               "sin and cos from AMD's device math library, which tilewright does not link",
                               hint="draw uniform numbers (dist='uniform') and transform them, or run on CUDA")
        if name.startswith("rng_"):
            return super().call(e)  # the base printer's calls of codegen/rng.py's functions
        if name == "cast_nosat":  # T.cast(..., sat=False): the encoder without saturation (hip_fp8)
            a = args[0]
            as_float = self.expr(a) if a.dtype == "float32" else self.cast("float32", a)
            return f"tw_f32_to_{hip_fp8.short(e.dtype)}_nosat({as_float})"
        if name.startswith("cast_"):
            mode = {"cast_rz": "rz", "cast_ru": "rp", "cast_rd": "rm"}[name]
            raise CompileError(f"T.cast(..., round='{mode}') is not available in the HIP backend: AMD GPUs set the "
                               "rounding mode per wave, not per instruction",
                               hint="use round='rn' on HIP, or run the kernel on a CUDA target")
        if e.dtype == "float64":
            fn = _F64_MATH.get(name)
            if fn is None:
                raise CompileError(
                    f"{name} on float64 is not available in the HIP backend (it needs AMD's device math library)",
                    hint="compute it in float32 (cast the argument) or use sqrt/floor/ceil/trunc/fma on float64",
                )
            return f"{fn}({', '.join(self.expr(a) for a in args)})"
        fn = self.math_fn(name)
        conv = ", ".join(self.expr(a) if a.dtype == "float32" else f"(float)({self.expr(a)})" for a in args)
        out = f"{fn}({conv})"
        return out if e.dtype == "float32" else f"{self.ctype(e.dtype)}({out})"

    def ieee_call(self, e: E.Call) -> str:
        """T.ieee_* rounded to nearest (other modes: math_fn's CompileError) in the operands' type;
        16-bit ones through float32, whose 24 bits make the second rounding harmless (fma: to odd)."""
        op = e.name.removeprefix("ieee_").rsplit("_", 1)[0]
        fn = self.math_fn(e.name)  # refuses the directed modes
        args = [self.expr(a) for a in e.args]
        if e.dtype == "float32":
            return f"{fn}({', '.join(args)})"
        if e.dtype == "float64":
            f64 = {"add": "tw_ieee_dadd_rn", "sub": "tw_ieee_dsub_rn", "mul": "tw_ieee_dmul_rn",
                   "fmaf": "__builtin_fma", "fsqrt": "__builtin_sqrt"}
            if op == "fdiv":
                return f"({args[0]} / {args[1]})"
            if op == "frcp":
                return f"(1.0 / {args[0]})"
            return f"{f64[op]}({', '.join(args)})"
        conv = [f"(float)({a})" for a in args]
        if op == "fmaf":
            out = f"tw_ieee_fma_odd({', '.join(conv)})"
        elif op == "frsqrt":
            out = f"(float)(1.0 / __builtin_sqrt((double){conv[0]}))"
        else:
            out = f"{fn}({', '.join(conv)})"
        return f"{self.ctype(e.dtype)}({out})"

    def warp_shuffle(self, e: E.Call) -> str:
        """TileLang's T.shfl_* (language/warp.py): the source lane by CUDA's segment rules
        (tw_warp_src), read with ds_bpermute; other types travel as 32/64-bit integers."""
        v, lane, width = e.args
        src = f"tw_warp_src({_WARP_SHUFFLE_KIND[e.name]}, {self.expr(lane)}, {int(width.value)})"
        x, d = self.expr(v), e.dtype
        if d == "float32":
            return f"tw_bits(float, tw_shfl_i32(tw_bits(int, {x}), {src}))"
        if d == "float64":
            return f"tw_bits(double, tw_shfl_src_i64(tw_bits(tw_i64, {x}), {src}))"
        if d in ("int64", "uint64"):
            return f"(({self.ctype(d)})tw_shfl_src_i64((tw_i64)({x}), {src}))"
        if d in ("float16", "bfloat16"):
            ct = self.ctype(d)
            return f"tw_bits({ct}, (tw_u16)tw_shfl_i32((int)tw_bits(tw_u16, {x}), {src}))"
        if dt.is_int(d) or d == "bool":
            return f"(({self.ctype(d)})tw_shfl_i32((int)({x}), {src}))"
        raise CompileError(f"a shuffle of a {d} value is not available in the HIP backend",
                           hint="shuffle it as float16 or float32")

    def minmax(self, op: str, e: E.BinOp) -> str:
        a, b = self.expr(e.a), self.expr(e.b)
        if e.dtype == "float32":
            return f"{self.math_fn('minimum' if op == 'min' else 'maximum')}({a}, {b})"
        if e.dtype == "float64":
            return f"__builtin_f{op}({a}, {b})"
        if dt.is_float(e.dtype):
            fn = self.math_fn("minimum" if op == "min" else "maximum")
            return f"{self.ctype(e.dtype)}({fn}((float)({a}), (float)({b})))"
        return f"tw_{op}({a}, {b})"

    def shuffle(self, e: E.Shuffle) -> str:
        ws = self.wave_size()
        # ds_bpermute works on the whole wave; XOR with a mask below ``width`` stays inside each
        # group of ``width`` lanes (width is a power of two), which is all a sub-wave shuffle is.
        if not (0 < e.mask < e.width <= ws) or e.width & (e.width - 1):
            raise InternalError(f"shuffle xor {e.mask} within {e.width} lanes on a wave of {ws}", "codegen_hip")
        v = self.expr(e.value)
        d = e.dtype
        if d in subbyte.CTYPES:  # one-byte structs travel as float / int (exact for their values)
            if dt.is_float(d):
                return f"{self.ctype(d)}(tw_shfl_xor_f32((float)({v}), {e.mask}))"
            return f"{self.ctype(d)}(tw_shfl_xor_i32((int)({v}), {e.mask}))"
        if d == "float32":
            return f"tw_shfl_xor_f32({v}, {e.mask})"
        if d == "float64":
            return f"tw_shfl_xor_f64({v}, {e.mask})"
        if d in ("int64", "uint64"):
            return f"(({self.ctype(d)})tw_shfl_xor_i64((tw_i64)({v}), {e.mask}))"
        if d in ("float16", "bfloat16"):
            # 16-bit floats travel as their bits: no conversion instructions, exact for NaNs too.
            ct = self.ctype(d)
            return f"tw_bits({ct}, (tw_u16)tw_shfl_xor_i32((int)tw_bits(tw_u16, {v}), {e.mask}))"
        if dt.is_int(d) or d == "bool":
            return f"(({self.ctype(d)})tw_shfl_xor_i32((int)({v}), {e.mask}))"
        raise CompileError(f"cannot shuffle a {d} value in the HIP backend")

    # ------------------------------------------------------------------ statements
    def async_copy(self, s: th.AsyncCopy, d: int) -> None:
        # AMD targets have no cp.async: copy through a register, zero-filling when ``pred`` is false
        # (cp.async's src-size 0).  The Barrier that follows the AsyncWait publishes it to the block.
        vt = self.vector_types.get(s.nbytes)
        if vt is None:
            raise InternalError(f"async copy of {s.nbytes} bytes", "codegen_hip")
        src = f"*reinterpret_cast<const {vt}*>(&{self.ref(s.src, s.src_index)})"
        dst = f"*reinterpret_cast<{vt}*>(&{self.ref(s.dst, s.dst_index)})"
        if s.pred is None:
            self.emit(d, f"{dst} = {src};  // cp.async fallback (synchronous)")
        else:
            self.emit(d, f"{{ {vt} tw_v = {{}}; if ({self.expr(s.pred)}) tw_v = {src}; {dst} = tw_v; }}"
                         "  // cp.async fallback (synchronous)")

    def async_commit(self, d: int) -> None:
        pass  # the copies above completed synchronously

    def async_wait(self, s: th.AsyncWait, d: int) -> None:
        pass

    def load_matrix(self, s: th.LoadMatrix, d: int) -> None:
        raise InternalError(
            f"ldmatrix (LoadMatrix into {s.dst.name}) is an NVIDIA instruction and was lowered for "
            f"{self.k.target}; the gemm lowering must gather AMD operands with loads",
            "codegen_hip",
        )

    def matrix_multiply(self, s: th.MatrixMultiply, d: int) -> None:
        mi = s.instr
        if mi.vendor != "amd":
            raise InternalError(f"matrix instruction {mi.name} is not an AMD one", "codegen_hip")
        ex = mi.extra_dict()
        (db, do), (ab, ao), (bb, bo), (cb, co) = s.d, s.a, s.b, s.c
        a_vec = self._pack(ab, ao, mi.a_elems, mi.a_dtype, ex["a_vec"], mi.name)
        b_vec = self._pack(bb, bo, mi.b_elems, mi.b_dtype, ex["b_vec"], mi.name)
        c_type = _vector_ctype(ex["c_vec"])
        c_lanes = AMD_VECTOR_CTYPES[ex["c_vec"]][1]
        if c_lanes != mi.c_elems:
            raise InternalError(f"{mi.name}: {ex['c_vec']} holds {c_lanes} accumulators, not {mi.c_elems}",
                                "codegen_hip")
        cn = self.name(cb, cb.name)
        c_init = ", ".join(f"{cn}[{co + i}]" for i in range(mi.c_elems))
        operands = {"a": "tw_a", "b": "tw_b", "c": "tw_c"}
        args = [operands[x] if x in operands else str(int(ex[x])) for x in ex["arg_order"].split(",")]
        self.emit(d, "{")
        self.emit(d + 1, f"const {a_vec[0]} tw_a = {a_vec[1]};")
        self.emit(d + 1, f"const {b_vec[0]} tw_b = {b_vec[1]};")
        self.emit(d + 1, f"const {c_type} tw_c = {{{c_init}}};")
        self.emit(d + 1, f"const {c_type} tw_d = {mi.mnemonic}({', '.join(args)});")
        dn = self.name(db, db.name)
        if c_lanes == 1:
            self.emit(d + 1, f"{dn}[{do}] = tw_d;")
        else:
            self.emit(d + 1, " ".join(f"{dn}[{do + i}] = tw_d[{i}];" for i in range(mi.c_elems)))
        self.emit(d, "}")

    def _pack(self, buf, off: int, count: int, dtype: str, vec_key: str, what: str) -> tuple[str, str]:
        """``(C type, initializer)`` of the builtin operand ``vec_key`` holding ``buf[off : off + count]``."""
        target_t = _vector_ctype(vec_key)
        elem, lanes = AMD_VECTOR_CTYPES[vec_key]
        if buf.dtype != dtype:
            raise InternalError(f"{what}: operand {buf.name} is {buf.dtype}, the instruction takes {dtype}",
                                "codegen_hip")
        if hip_fp8.is_fp8(dtype) and count > 1:
            # bytes: check the bit count as int8 below
            pass
        elem_bits = {"_Float16": 16, "__bf16": 16, "short": 16, "float": 32, "int": 32, "long": 64}[elem]
        if count * dt.bits(dtype) != lanes * elem_bits:
            raise InternalError(f"{what}: {count} x {dtype} do not fill a {vec_key}", "codegen_hip")
        n = self.name(buf, buf.name)
        elems = [f"{n}[{off + i}]" for i in range(count)]
        if hip_fp8.is_fp8(dtype):  # fp8 bytes are packed like int8
            elems = [f"(signed char){x}" for x in elems]
            dtype = "int8"
        if count == 1:
            natural_t, init = self.ctype(dtype), elems[0]
        else:
            prefix = _ELEM_VECTOR_PREFIX.get(dtype)
            natural_t = f"{prefix}{count}" if prefix else ""
            if natural_t not in HIP_VECTOR_TYPES and natural_t not in ("tw_char4", "tw_char8", "tw_char16"):
                raise InternalError(f"{what}: no vector type for {count} x {dtype}", "codegen_hip")
            init = f"{natural_t}{{{', '.join(elems)}}}"
        if natural_t == target_t:
            return target_t, init
        # Same bits, different declared type (bf16 as short, int8 packed into int/long): free.
        return target_t, f"tw_bits({target_t}, ({init}))"  # () : tw_bits is a macro

    def atomic(self, s: th.AtomicRMW, d: int) -> None:
        """``__hip_atomic_fetch_*`` with the atomic's memory order and scope; the float32 helpers
        (relaxed, device scope) get a stronger order from fences around them."""
        ptr = f"&{self.ref(s.buffer, s.index)}"
        val = self.expr(s.value)
        dtype = s.buffer.dtype
        assign = "" if s.result is None else f"{self.ref(*s.result)} = "
        scope = _HIP_SCOPE[s.scope]
        if dtype == "float32" and s.op in ("add", "max", "min"):
            fence = f'__builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "{_HIP_FENCE_SCOPE[s.scope]}");'
            if s.order in ("release", "acq_rel", "seq_cst"):
                self.emit(d, fence)
            self.emit(d, f"{assign}tw_atomic_{s.op}_f32({ptr}, {val});")
            if s.order in ("acquire", "acq_rel", "seq_cst"):
                self.emit(d, fence)
        elif (dtype == "float64" and s.op == "add") or (dt.is_int(dtype) and dt.bits(dtype) >= 32) or \
                (dtype in ("float32", "float64") and s.op == "exch"):  # exch: T.atomic_store
            fn = {"add": "__hip_atomic_fetch_add", "max": "__hip_atomic_fetch_max", "min": "__hip_atomic_fetch_min",
                  "and": "__hip_atomic_fetch_and", "or": "__hip_atomic_fetch_or", "xor": "__hip_atomic_fetch_xor",
                  "exch": "__hip_atomic_exchange"}
            if s.op not in fn or (s.op not in ("add", "max", "min", "exch") and not dt.is_int(dtype)):
                raise CompileError(f"atomic {s.op} on {dtype} is not supported in the HIP backend", s.loc)
            self.emit(d, f"{assign}{fn[s.op]}({ptr}, ({self.ctype(dtype)})({val}), {_HIP_ORDER[s.order]}, "
                         f"{scope});")
        else:
            raise CompileError(
                f"atomic {s.op} on {dtype} is not supported in the HIP backend", s.loc,
                hint="accumulate in a float32 or int32 buffer",
            )

    def sync(self, s, d: int) -> None:
        if isinstance(s, th.PrefetchL2):  # (a hint without an AMD instruction here: left out)
            self.emit(d, "// prefetch_l2: nothing on AMD")
            return
        if isinstance(s, th.GridDependency):  # (HIP launches in stream order: the previous kernel has finished)
            self.emit(d, f"// griddepcontrol.{s.action}: no programmatic dependent launch on AMD")
            return
        if isinstance(s, th.FenceProxyAsync):
            # AMD has no separate async proxy: LDS writes are ordered for later reads without a fence
            self.emit(d, "// fence.proxy.async: nothing to order on AMD")
            return
        what = {th.MbarrierArrive: ("mbarrier arrive", "use block barriers (__syncthreads) for producer/consumer "
                                    "hand-off on AMD"),
                th.MbarrierExpectTx: ("mbarrier expect-tx", "AMD has no transaction-counting barriers"),
                th.NamedBarrier: ("named barrier (bar.sync/bar.arrive with an id)", "AMD has only the block "
                                  "barrier: keep warp specialisation for NVIDIA sm_90"),
                th.SetMaxNReg: ("setmaxnreg", "register budgets are fixed per kernel on AMD")}
        name, hint = what.get(type(s), (type(s).__name__, None))
        raise CompileError(f"{name} ({type(s).__name__}) has no AMD equivalent ({self.k.target})",
                           getattr(s, "loc", None), hint=hint)


_HIP_ORDER = {"relaxed": "__ATOMIC_RELAXED", "acquire": "__ATOMIC_ACQUIRE", "release": "__ATOMIC_RELEASE",
              "acq_rel": "__ATOMIC_ACQ_REL", "seq_cst": "__ATOMIC_SEQ_CST"}
_HIP_SCOPE = {"cta": "__HIP_MEMORY_SCOPE_WORKGROUP", "gpu": "__HIP_MEMORY_SCOPE_AGENT",
              "sys": "__HIP_MEMORY_SCOPE_SYSTEM"}
_HIP_FENCE_SCOPE = {"cta": "workgroup", "gpu": "agent", "sys": ""}


def print_hip(kernel: th.ThreadKernel) -> str:
    """HIP C++ source of ``kernel`` (one ``extern "C"`` kernel named ``kernel.name``)."""
    return HipPrinter(kernel).print()
