"""The device prelude every generated HIP source starts with.

``HIP_PRELUDE`` is self-contained C++: it needs no ROCm header and no device library (ocml/ockl),
so the same text compiles

* under plain clang, ``clang -x hip --cuda-device-only -nogpuinc -nogpulib`` (what a ``pip``
  install without ROCm gets: Debian's clang-19 works);
* under hiprtc, which pre-includes ``hiprtc_runtime.h`` (that defines ``__HIPCC_RTC__``, the
  execution-space macros, ``__launch_bounds__``, ``HIP_INCLUDE_HIP_HIP_RUNTIME_H``, ``threadIdx``,
  ``__syncthreads``...);
* under hipcc / ROCm clang with ``hip/hip_runtime.h`` included (same include guard) or with only
  clang's ``__clang_hip_runtime_wrapper.h`` (defines ``__global__`` & co. as macros).

Every name we add is spelled ``tw_*`` / ``TW_*`` so it cannot clash with HIP's (HIP's ``float4``,
``__half``, ``__shfl_xor`` are different types and functions from ours).  The CUDA-style names
``threadIdx``, ``blockIdx``, ``blockDim``, ``gridDim``, ``warpSize`` and ``__syncthreads()`` are
defined only when no HIP header is present, for hand-written kernels.

How the printer should use it
-----------------------------
* Kernels: ``extern "C" __global__ TW_LAUNCH_BOUNDS(256) void name(float* __restrict__ p, ...)``
  (``extern "C"`` keeps the symbol name unmangled for ``hipModuleGetFunction``).
* Indices: call the functions in ``HIP_INDEX_FUNCS`` (``tw_thread_idx_x()``, ``tw_block_idx_y()``,
  ``tw_block_dim_x()``, ``tw_grid_dim_x()``, ``tw_lane_id()``), not ``threadIdx.x``: they work in
  every compile mode.  ``TW_WAVE_SIZE`` is the compile-time wave size.
* Barrier: ``tw_syncthreads()``.  Static LDS: ``__shared__ T name[N];``; dynamic LDS:
  ``TW_DYNAMIC_SHARED(T, name);`` at file scope, sized by the launch's ``shared_bytes``.
* Types: ``tw_half`` (``_Float16``), ``tw_bf16`` (``__bf16``), and for an ``AMD_VECTOR_CTYPES`` key
  ``k`` of ``target/matrix_amd.py`` (``"half4"``, ``"short8"``, ``"float16"`` = 16 floats, ...)
  the vector type ``"tw_" + k``.  ``tw_bits(T, v)`` reinterprets bits (e.g. a ``tw_bf16x4`` as the
  ``tw_short4`` the bf16 MFMA builtins take); ``__builtin_convertvector(v, tw_float4)`` converts.
* Math: ``HIP_MATH_FUNCS`` maps an op name to a float function; everything is ``float``-typed,
  so 16-bit values are converted to float first (``(float)h``) and back (``(tw_half)f``).
* Shuffles: ``tw_shfl_xor_i32/_f32/_i64/_f64(value, lane_mask)``, ``tw_shfl_i32(value, src_lane)``.
* Atomics: ``tw_atomic_add_f32(float*, float)``, ``tw_atomic_max_f32(float*, float)`` (global memory).
  Compile with ``-munsafe-fp-atomics`` to get the hardware float add on gfx90a/gfx11/gfx12 (it is
  always used on gfx942); without it those targets use a compare-and-swap loop.
* Do not pass ``-fmath-errno``: it turns ``__builtin_expf`` & co. into library calls that do not
  exist without ocml.

Verified with clang 19.1.7 (``-nogpuinc -nogpulib -O3``) for gfx90a, gfx942, gfx1100 and gfx1201:
no ``s_swappc`` (calls) and no undefined symbols; each math function lowers to ``v_exp_f32``,
``v_log_f32``, ``v_sqrt_f32``, ``v_rsq_f32``, ``v_rcp_f32``, ``v_floor/ceil/trunc/rndne_f32``,
``v_sin/cos_f32`` plus ALU code; the barrier is ``s_barrier`` (``s_barrier_signal -1`` +
``s_barrier_wait -1`` on gfx12); the conversions are ``v_cvt_f32_f16`` / ``v_cvt_f16_f32`` and short
integer sequences for bf16.  It also compiles unchanged after a ``hiprtc_runtime.h`` rebuilt from
ROCm/clr's recipe (hipamd/src/hiprtc/cmake/HIPRTC.cmake) with ``-D__HIPCC_RTC__``.
"""

from __future__ import annotations

__all__ = ["HIP_INDEX_FUNCS", "HIP_MATH_FUNCS", "HIP_PRELUDE", "HIP_VECTOR_TYPES"]

# What the printer calls for each index query.
HIP_INDEX_FUNCS: dict[str, str] = {
    "thread_idx_x": "tw_thread_idx_x()",
    "thread_idx_y": "tw_thread_idx_y()",
    "thread_idx_z": "tw_thread_idx_z()",
    "block_idx_x": "tw_block_idx_x()",
    "block_idx_y": "tw_block_idx_y()",
    "block_idx_z": "tw_block_idx_z()",
    "block_dim_x": "tw_block_dim_x()",
    "block_dim_y": "tw_block_dim_y()",
    "block_dim_z": "tw_block_dim_z()",
    "grid_dim_x": "tw_grid_dim_x()",
    "grid_dim_y": "tw_grid_dim_y()",
    "grid_dim_z": "tw_grid_dim_z()",
    "lane_id": "tw_lane_id()",
    "wave_size": "TW_WAVE_SIZE",
    "barrier": "tw_syncthreads()",
}

# op name -> float function of the prelude (arity in the comment of each definition below).
HIP_MATH_FUNCS: dict[str, str] = {
    "exp": "tw_expf",
    "exp2": "tw_exp2f",
    "log": "tw_logf",
    "log2": "tw_log2f",
    "sqrt": "tw_sqrtf",
    "rsqrt": "tw_rsqrtf",
    "rcp": "tw_rcpf",
    "tanh": "tw_tanhf",
    "sigmoid": "tw_sigmoidf",
    "abs": "tw_fabsf",
    "minimum": "tw_fminf",
    "maximum": "tw_fmaxf",
    "fma": "tw_fmaf",
    "floor": "tw_floorf",
    "ceil": "tw_ceilf",
    "trunc": "tw_truncf",
    "round": "tw_roundf",  # half away from zero: CUDA's roundf, the interpreter and the emulator agree
    "pow": "tw_powf",
    "sin": "tw_sinf",
    "cos": "tw_cosf",
}

# ext_vector_type typedefs of the prelude: name -> (element C type, lanes).  The keys without the
# "tw_" prefix match target/matrix_amd.py's AMD_VECTOR_CTYPES.
HIP_VECTOR_TYPES: dict[str, tuple[str, int]] = {
    f"tw_{prefix}{n}": (elem, n)
    for elem, prefix, sizes in (
        ("_Float16", "half", (2, 4, 8, 16)),
        ("__bf16", "bf16x", (2, 4, 8, 16)),
        ("short", "short", (2, 4, 8, 16)),
        ("float", "float", (2, 4, 8, 16, 32)),
        ("int", "int", (2, 4, 8, 16)),
        ("unsigned", "uint", (2, 4)),
    )
    for n in sizes
}


def _vector_typedefs() -> str:
    return "\n".join(
        f"typedef {elem} {name} __attribute__((ext_vector_type({n})));" for name, (elem, n) in HIP_VECTOR_TYPES.items()
    )


HIP_PRELUDE: str = r"""// ---- tilewright HIP prelude (no ROCm headers or device libraries needed) ----
#ifndef TILEWRIGHT_HIP_PRELUDE
#define TILEWRIGHT_HIP_PRELUDE

// hiprtc pre-includes hiprtc_runtime.h (and defines __HIPCC_RTC__); hipcc users include
// hip/hip_runtime.h.  Both define HIP_INCLUDE_HIP_HIP_RUNTIME_H and then already declare
// threadIdx, __syncthreads, ..., which we must not redefine.
#if defined(__HIPCC_RTC__) || defined(HIP_INCLUDE_HIP_HIP_RUNTIME_H)
#define TW_HAVE_HIP_HEADERS 1
#else
#define TW_HAVE_HIP_HEADERS 0
#endif

// Execution spaces are clang attributes; HIP headers and clang's HIP wrapper header define these
// macros too, so each one is defined only if nobody did.
#ifndef __global__
#define __global__ __attribute__((global))
#endif
#ifndef __device__
#define __device__ __attribute__((device))
#endif
#ifndef __host__
#define __host__ __attribute__((host))
#endif
#ifndef __shared__
#define __shared__ __attribute__((shared))  // LDS, address space 3
#endif
#ifndef __constant__
#define __constant__ __attribute__((constant))
#endif
#ifndef __forceinline__
#define __forceinline__ inline __attribute__((always_inline))
#endif
#ifndef __noinline__
#define __noinline__ __attribute__((noinline))
#endif
// __restrict__ is a GNU keyword that clang always accepts: nothing to define.

// The most threads a block may have: the compiler sizes the register budget from it (the default
// is 1024).  AMDGPU has no "min blocks per SM"; the occupancy hint is a minimum of waves per
// SIMD (EU), which is what HIP also does with __launch_bounds__'s second argument.
#define TW_LAUNCH_BOUNDS(max_threads) __attribute__((amdgpu_flat_work_group_size(1, max_threads)))
#define TW_LAUNCH_BOUNDS_WAVES(max_threads, min_waves_per_eu) \
  __attribute__((amdgpu_flat_work_group_size(1, max_threads), amdgpu_waves_per_eu(min_waves_per_eu)))
#ifndef __launch_bounds__
#define TW_LB_PICK_(_1, _2, impl, ...) impl
// (the trailing "_" keeps "..." non-empty: an empty one is a C++20 extension under -Wpedantic)
#define __launch_bounds__(...) TW_LB_PICK_(__VA_ARGS__, TW_LAUNCH_BOUNDS_WAVES, TW_LAUNCH_BOUNDS, _)(__VA_ARGS__)
#endif

// Dynamic LDS: an unsized extern __shared__ array, sized at launch by shared_bytes.
#define TW_DYNAMIC_SHARED(type, name) extern __shared__ __attribute__((aligned(16))) type name[]

// static: file-local, no symbol in the code object; unused: -Wall is quiet about helpers not called.
#define TW_DEV static __device__ __forceinline__ __attribute__((unused))

// No <stdint.h> without headers: use the compiler's predefined types.
typedef __INT8_TYPE__ tw_i8;
typedef __UINT8_TYPE__ tw_u8;
typedef __INT16_TYPE__ tw_i16;
typedef __UINT16_TYPE__ tw_u16;
typedef __INT32_TYPE__ tw_i32;
typedef __UINT32_TYPE__ tw_u32;
typedef __INT64_TYPE__ tw_i64;
typedef __UINT64_TYPE__ tw_u64;

// ---- indices ---------------------------------------------------------------------------------
// Work-item ids arrive in VGPRs and work-group ids in SGPRs; the kernel descriptor asks the hardware
// only for the ids the kernel reads.  Block and grid sizes are loads from the dispatch packet or the
// implicit kernel arguments (code object v5).
TW_DEV tw_u32 tw_thread_idx_x() { return __builtin_amdgcn_workitem_id_x(); }
TW_DEV tw_u32 tw_thread_idx_y() { return __builtin_amdgcn_workitem_id_y(); }
TW_DEV tw_u32 tw_thread_idx_z() { return __builtin_amdgcn_workitem_id_z(); }
TW_DEV tw_u32 tw_block_idx_x() { return __builtin_amdgcn_workgroup_id_x(); }
TW_DEV tw_u32 tw_block_idx_y() { return __builtin_amdgcn_workgroup_id_y(); }
TW_DEV tw_u32 tw_block_idx_z() { return __builtin_amdgcn_workgroup_id_z(); }
TW_DEV tw_u32 tw_block_dim_x() { return __builtin_amdgcn_workgroup_size_x(); }
TW_DEV tw_u32 tw_block_dim_y() { return __builtin_amdgcn_workgroup_size_y(); }
TW_DEV tw_u32 tw_block_dim_z() { return __builtin_amdgcn_workgroup_size_z(); }
// The packet holds the grid size in work-items; blocks = that / block size (an integer division,
// so prefer a value passed in or known at compile time in hot code).
TW_DEV tw_u32 tw_grid_dim_x() { return __builtin_amdgcn_grid_size_x() / __builtin_amdgcn_workgroup_size_x(); }
TW_DEV tw_u32 tw_grid_dim_y() { return __builtin_amdgcn_grid_size_y() / __builtin_amdgcn_workgroup_size_y(); }
TW_DEV tw_u32 tw_grid_dim_z() { return __builtin_amdgcn_grid_size_z() / __builtin_amdgcn_workgroup_size_z(); }
// 64 on gfx9 (CDNA), 32 on gfx10+ (RDNA) unless compiled with -mwavefrontsize64.
#define TW_WAVE_SIZE __AMDGCN_WAVEFRONT_SIZE__
// mbcnt counts the mask bits below this lane: with an all-ones mask that is the lane id.
TW_DEV tw_u32 tw_lane_id() { return __builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u)); }
// A wave-uniform copy (an SGPR) of the value of the first active lane.
TW_DEV int tw_readfirstlane(int value) { return __builtin_amdgcn_readfirstlane(value); }

#if !TW_HAVE_HIP_HEADERS
// CUDA-style names for hand-written kernels: each .x/.y/.z read is one builtin call and the
// unused ones are removed, so reading threadIdx.x does not make the kernel set up y and z.
struct tw_uint3_ {
  tw_u32 x, y, z;
};
#define threadIdx (tw_uint3_{tw_thread_idx_x(), tw_thread_idx_y(), tw_thread_idx_z()})
#define blockIdx (tw_uint3_{tw_block_idx_x(), tw_block_idx_y(), tw_block_idx_z()})
#define blockDim (tw_uint3_{tw_block_dim_x(), tw_block_dim_y(), tw_block_dim_z()})
#define gridDim (tw_uint3_{tw_grid_dim_x(), tw_grid_dim_y(), tw_grid_dim_z()})
#define warpSize TW_WAVE_SIZE
#endif

// ---- barrier ---------------------------------------------------------------------------------
// s_barrier alone does not order memory: LDS and global writes before it must be released and
// later reads acquired at work-group scope, as HIP's __syncthreads does.  (gfx12 splits s_barrier
// into s_barrier_signal + s_barrier_wait; the backend does that.)
TW_DEV void tw_syncthreads() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}
#if !TW_HAVE_HIP_HEADERS
#define __syncthreads() tw_syncthreads()
#endif

// ---- types -----------------------------------------------------------------------------------
// clang's native 16-bit floats: (float)x, (tw_half)f and (tw_bf16)f are plain conversions
// (v_cvt_f32_f16 / v_cvt_f16_f32; bf16 by integer ops, round to nearest even) on every target.
typedef _Float16 tw_half;
typedef __bf16 tw_bf16;
// ext_vector_type vectors: what the MFMA/WMMA builtins take and return (tw_float16 = 16 floats).
// clang-19's bf16 MFMA (..._bf16_1k) and WMMA builtins declare their operands as short vectors.
@VECTOR_TYPEDEFS@
// Reinterpret bits between equally sized types (scalars or vectors); free.
#define tw_bits(type, value) __builtin_bit_cast(type, value)
// Named conversions (round to nearest even) for printers that prefer calls to casts.
TW_DEV float tw_half2float(tw_half h) { return (float)h; }
TW_DEV tw_half tw_float2half(float f) { return (tw_half)f; }
TW_DEV float tw_bf162float(tw_bf16 h) { return (float)h; }
TW_DEV tw_bf16 tw_float2bf16(float f) { return (tw_bf16)f; }

// ---- wave shuffles ---------------------------------------------------------------------------
// ds_bpermute reads a 32-bit value from lane (address / 4) of the same wave; it runs on the LDS
// crossbar but allocates no LDS.  Floats go through a bit cast, 64-bit values in two halves.
// Only the low bits of the lane index count: it wraps around modulo the wave size.
TW_DEV int tw_shfl_i32(int value, int src_lane) { return __builtin_amdgcn_ds_bpermute(src_lane << 2, value); }
TW_DEV int tw_shfl_xor_i32(int value, int lane_mask) {
  return __builtin_amdgcn_ds_bpermute((int)(tw_lane_id() ^ (tw_u32)lane_mask) << 2, value);
}
TW_DEV float tw_shfl_xor_f32(float value, int lane_mask) {
  return tw_bits(float, tw_shfl_xor_i32(tw_bits(int, value), lane_mask));
}
TW_DEV tw_i64 tw_shfl_xor_i64(tw_i64 value, int lane_mask) {
  tw_int2 v = tw_bits(tw_int2, value);
  v.x = tw_shfl_xor_i32(v.x, lane_mask);
  v.y = tw_shfl_xor_i32(v.y, lane_mask);
  return tw_bits(tw_i64, v);
}
TW_DEV double tw_shfl_xor_f64(double value, int lane_mask) {
  return tw_bits(double, tw_shfl_xor_i64(tw_bits(tw_i64, value), lane_mask));
}

// ---- math without device libraries -----------------------------------------------------------
// Each one is an LLVM intrinsic (or AMDGPU builtin) that the backend expands into hardware
// instructions, so no ocml is needed.  exp/exp2/log/log2/sqrt are the backend's full-range,
// denormal-safe expansions (about 1 ulp; sqrt correctly rounded); rsqrt and rcp are the raw
// v_rsq_f32 / v_rcp_f32 (1 ulp, denormal inputs flushed).
TW_DEV float tw_expf(float x) { return __builtin_expf(x); }
TW_DEV float tw_exp2f(float x) { return __builtin_exp2f(x); }
TW_DEV float tw_logf(float x) { return __builtin_logf(x); }
TW_DEV float tw_log2f(float x) { return __builtin_log2f(x); }
TW_DEV float tw_sqrtf(float x) { return __builtin_sqrtf(x); }
TW_DEV float tw_rsqrtf(float x) { return __builtin_amdgcn_rsqf(x); }
TW_DEV float tw_rcpf(float x) { return __builtin_amdgcn_rcpf(x); }
TW_DEV float tw_fabsf(float x) { return __builtin_fabsf(x); }
TW_DEV float tw_fminf(float a, float b) { return __builtin_fminf(a, b); }  // NaN-ignoring, like fminf
TW_DEV float tw_fmaxf(float a, float b) { return __builtin_fmaxf(a, b); }
TW_DEV float tw_fmaf(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
TW_DEV float tw_floorf(float x) { return __builtin_floorf(x); }
TW_DEV float tw_ceilf(float x) { return __builtin_ceilf(x); }
TW_DEV float tw_truncf(float x) { return __builtin_truncf(x); }
TW_DEV float tw_rintf(float x) { return __builtin_rintf(x); }  // round half to even
TW_DEV float tw_roundf(float x) { return __builtin_roundf(x); }  // round half away from zero
// pow = exp2(y * log2(x)): right for x > 0 (scales, norms); NaN for x < 0, loses accuracy when
// |y * log2(x)| is large.  powf proper needs ocml.
TW_DEV float tw_powf(float x, float y) { return __builtin_exp2f(y * __builtin_log2f(x)); }
// sigmoid = 1 / (1 + e^-x): e^-x = inf for x < -88 gives exactly 0, no NaN.
TW_DEV float tw_sigmoidf(float x) { return 1.0f / (1.0f + __builtin_expf(-x)); }
// tanh: the odd Taylor series to x^17 for |x| < 0.55, where 1 - 2 / (e^2x + 1) would cancel; the exp
// form elsewhere (e^2x = inf for large |x| gives exactly +-1).  Emulated in float32 against float64
// tanh: at most 1.8 ulp with a correctly rounded exp (v_exp-based expf adds about 1 ulp).
TW_DEV float tw_tanhf(float x) {
  float ax = __builtin_fabsf(x);
  if (ax < 0.55f) {
    float x2 = x * x;
    float p = -8.863235530e-3f + x2 * (3.592128037e-3f + x2 * (-1.455834387e-3f + x2 * 5.900274409e-4f));
    p = -3.333333333e-1f + x2 * (1.333333333e-1f + x2 * (-5.396825397e-2f + x2 * (2.186948854e-2f + x2 * p)));
    return x + x * x2 * p;
  }
  return __builtin_copysignf(1.0f - 2.0f / (__builtin_expf(2.0f * ax) + 1.0f), x);
}
// Fast sine/cosine like CUDA's __sinf: v_sin/v_cos of x / (2 pi); fine for |x| up to ~1e3.
TW_DEV float tw_sinf(float x) { return __builtin_sinf(x); }
TW_DEV float tw_cosf(float x) { return __builtin_cosf(x); }

// ---- atomics (global memory, device scope, relaxed) ------------------------------------------
// A hardware global_atomic_add_f32 on gfx942 always; on gfx90a/gfx11/gfx12 only with
// -munsafe-fp-atomics (fine for hipMalloc memory, which is coarse-grained), else a CAS loop.
TW_DEV float tw_atomic_add_f32(float* addr, float value) {
  return __hip_atomic_fetch_add(addr, value, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
}
// There is no f32 atomic max before gfx12.  Non-negative floats order like their bits as signed
// ints, negative ones in reverse like their bits as unsigned ints, so one integer atomic does it
// (+0.0 counts as greater than -0.0; a +NaN wins and a -NaN loses).  Returns the old value.
TW_DEV float tw_atomic_max_f32(float* addr, float value) {
  int bits = tw_bits(int, value);
  if (bits >= 0)
    return tw_bits(float, __hip_atomic_fetch_max((int*)addr, bits, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT));
  return tw_bits(float, __hip_atomic_fetch_min((unsigned*)addr, (unsigned)bits, __ATOMIC_RELAXED,
                                               __HIP_MEMORY_SCOPE_AGENT));
}

#endif  // TILEWRIGHT_HIP_PRELUDE
// ---- end of tilewright HIP prelude ----
""".replace("@VECTOR_TYPEDEFS@", _vector_typedefs())
