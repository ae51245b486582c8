"""CUDA C++ printer: thread IR -> one ``extern "C" __global__`` kernel with inline PTX for cp.async,
ldmatrix and mma.sync.  No template libraries: only <cuda_fp16.h>/<cuda_bf16.h> (and <cuda_fp8.h>
when fp8 is used), so NVRTC compiles a kernel in a fraction of a second."""

from __future__ import annotations

import numpy as np

from ..ir import dtype as dt
from ..ir import expr as E
from ..ir import thread as th
from ..ir import tile as t
from ..ir.visitor import walk
from ..target.matrix import WGMMA_LAYOUT_TYPE
from . import subbyte
from .base import Printer, uses_device_assert
from .rng import rng_source, uses_rng

_CTYPES = {
    "float16": "half", "bfloat16": "__nv_bfloat16", "float32": "float", "float64": "double",
    "int8": "signed char", "int16": "short", "int32": "int", "int64": "long long", "uint8": "unsigned char",
    "uint16": "unsigned short", "uint32": "unsigned int", "uint64": "unsigned long long", "bool": "bool",
    "float8_e4m3fn": "__nv_fp8_e4m3", "float8_e5m2": "__nv_fp8_e5m2",
    **subbyte.CTYPES,  # the 4-bit types and float8_e8m0fnu: one-byte structs (subbyte.py)
}

_HELPERS = r"""
__device__ __forceinline__ float tw_inf() { return __int_as_float(0x7f800000); }
// a value of an 8-bit type (an fp8 type) from its bits: T.cast(..., sat=False)
template <typename T> __device__ __forceinline__ T tw_from_bits8(unsigned char b) {
  T r; *reinterpret_cast<unsigned char*>(&r) = b; return r; }
// T.round(x, "ties-away-from-zero"): C's round under TileLang's name for it
__device__ __forceinline__ float tw_RoundTiesAwayFromZero(float x) { return roundf(x); }
__device__ __forceinline__ double tw_RoundTiesAwayFromZero(double x) { return round(x); }
__device__ __forceinline__ float tw_nan() { return __int_as_float(0x7fffffff); }
template <typename T> __device__ __forceinline__ T tw_min(T a, T b) { return a < b ? a : b; }
template <typename T> __device__ __forceinline__ T tw_max(T a, T b) { return a < b ? b : a; }
template <typename T> __device__ __forceinline__ T tw_abs(T a) { return a < 0 ? -a : a; }
template <typename T> __device__ __forceinline__ T tw_floordiv(T a, T b) {
  T q = a / b; return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q; }
template <typename T> __device__ __forceinline__ T tw_floormod(T a, T b) {
  T r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
__device__ __forceinline__ float tw_atomic_max(float* p, float v) {
  int* ip = reinterpret_cast<int*>(p); int old = *ip;
  while (__int_as_float(old) < v) {
    int prev = atomicCAS(ip, old, __float_as_int(v)); if (prev == old) break; old = prev; }
  return __int_as_float(old);
}
__device__ __forceinline__ float tw_atomic_min(float* p, float v) {
  int* ip = reinterpret_cast<int*>(p); int old = *ip;
  while (__int_as_float(old) > v) {
    int prev = atomicCAS(ip, old, __float_as_int(v)); if (prev == old) break; old = prev; }
  return __int_as_float(old);
}
__device__ __forceinline__ int tw_atomic_max(int* p, int v) { return atomicMax(p, v); }
__device__ __forceinline__ int tw_atomic_min(int* p, int v) { return atomicMin(p, v); }
// 16-bit floats (half, __nv_bfloat16): a compare-and-swap loop on the 16-bit word, compared in float
template <typename T> __device__ __forceinline__ T tw_atomic_minmax16(T* p, T v, bool want_max) {
  unsigned short* ip = reinterpret_cast<unsigned short*>(p);
  unsigned short nv; memcpy(&nv, &v, 2);
  unsigned short old = *ip;
  while (true) {
    T cur; memcpy(&cur, &old, 2);
    float c = static_cast<float>(cur), x = static_cast<float>(v);
    if (!(want_max ? c < x : x < c)) break;
    unsigned short prev = atomicCAS(ip, old, nv); if (prev == old) break; old = prev; }
  T r; memcpy(&r, &old, 2); return r;
}
template <typename T> __device__ __forceinline__ T tw_atomic_max(T* p, T v) { return tw_atomic_minmax16(p, v, true); }
template <typename T> __device__ __forceinline__ T tw_atomic_min(T* p, T v) { return tw_atomic_minmax16(p, v, false); }
template <typename To, typename From> __device__ __forceinline__ To tw_bitcast(From x) {
  static_assert(sizeof(To) == sizeof(From), "tw_bitcast: the two types differ in size");
  To r; memcpy(&r, &x, sizeof(To)); return r; }
__device__ __forceinline__ unsigned tw_smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p)); }
"""

# Only when the kernel calls warp_uniform (interp/warp_ops.UNIFORM).
_LANE0_HELPER = r"""
// warp_uniform(x) (a value the compiler knows every lane holds): lane 0's, which ptxas then keeps in
// uniform registers.  Volatile, so that it stays where it is printed (every lane there); the printer makes
// one per distinct value of a loop or branch body
__device__ __forceinline__ int tw_lane0(int x) {
  int r; asm volatile("shfl.sync.idx.b32 %0, %1, 0, 0x1f, 0xffffffff;" : "=r"(r) : "r"(x)); return r; }
"""

# Only when the kernel uses the tensor memory accelerator (sm_90): the descriptor type of its extra
# parameters and the mbarrier helpers.  The descriptor is opaque, 128 bytes, 64-byte aligned.
_TMA_HELPERS = r"""
struct __align__(64) tw_tensor_map_t { unsigned long long opaque[16]; };
// the warp index, broadcast from lane 0 so that the compiler knows it is the same in the whole warp
__device__ __forceinline__ int tw_warp_uniform() { return __shfl_sync(0xffffffffu, (int)threadIdx.x >> 5, 0); }
// one lane of the (converged) warp: lets the compiler issue TMA without looping over lanes
__device__ __forceinline__ bool tw_elect_one() {
  unsigned pred = 0;
  asm volatile("{\n .reg .pred p;\n elect.sync _|p, 0xffffffff;\n selp.u32 %0, 1, 0, p;\n}\n" : "=r"(pred));
  return pred != 0;
}
__device__ __forceinline__ void tw_mbar_wait(unsigned bar, unsigned parity) {
  unsigned done = 0;
  while (!done) {
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 " selp.u32 %0, 1, 0, p;\n}\n" : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  }
}
"""

# Only in a kernel launched as a thread-block cluster (sm_90+): its rank, the cluster barrier, the
# address of the same shared-memory place in another block of the cluster (mapa)
_CLUSTER_HELPERS = r"""
__device__ __forceinline__ int tw_cluster_ctarank() {
  unsigned r; asm("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r)); return (int)r; }
__device__ __forceinline__ unsigned tw_mapa(unsigned addr, int rank) {
  unsigned out; asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(out) : "r"(addr), "r"(rank));
  return out; }
"""


# T.ieee_* on float64: CUDA's double-precision intrinsics with the mode as suffix (__dadd_rz ...)
_IEEE_F64 = {"add": "__dadd", "sub": "__dsub", "mul": "__dmul", "fmaf": "__fma", "fdiv": "__ddiv",
             "frcp": "__drcp", "fsqrt": "__dsqrt"}
# ... on float16 / bfloat16 (round to nearest only): the native half instructions where one exists;
# division, reciprocal and square root as the correctly rounded float32 operation rounded once more,
# which float32's 24 bits (>= 2 * 11 + 2) make the correctly rounded half result
_IEEE_HALF = {"add": "__hadd({0}, {1})", "sub": "__hsub({0}, {1})", "mul": "__hmul({0}, {1})",
              "fmaf": "__hfma({0}, {1}, {2})", "fdiv": "__fdiv_rn((float)({0}), (float)({1}))",
              "frcp": "__frcp_rn((float)({0}))", "fsqrt": "__fsqrt_rn((float)({0}))",
              "frsqrt": "(1.0 / sqrt((double)(float)({0})))"}


def _is_fp8(dtype: str) -> bool:
    return dtype in ("float8_e4m3fn", "float8_e5m2")


def _widen_fp8(x):
    return E.Cast("float32", x) if _is_fp8(x.dtype) else x


def _int_sum(e, sign: int):
    """``([(coef, atom), ...], const)`` with ``sign * e == sum(coef * atom) + const`` over int32 ``+`` / ``-``."""
    if isinstance(e, E.Const) and isinstance(e.value, int) and not isinstance(e.value, bool):
        return [], sign * e.value
    if isinstance(e, E.BinOp) and e.op in ("+", "-") and e.dtype == "int32":
        ta, ca = _int_sum(e.a, sign)
        tb, cb = _int_sum(e.b, sign if e.op == "+" else -sign)
        return ta + tb, ca + cb
    return [(sign, e)], 0


class CudaPrinter(Printer):
    FLOAT_FN = {**Printer.FLOAT_FN, "round": "tw_RoundTiesAwayFromZero"}

    def ctype(self, dtype: str) -> str:
        return _CTYPES[dtype]

    def const(self, c) -> str:
        # an fp8 constant by its bits (as the CPU backends round it): the __nv_fp8_* constructors
        # saturate, so T.infinity("float8_e5m2") came out as 57344 on the GPU instead of inf
        if c.dtype in ("float8_e4m3fn", "float8_e5m2"):
            bits = np.array([c.value], np.float32).astype(dt.to_numpy(c.dtype)).view(np.uint8)[0]
            return f"tw_from_bits8<{self.ctype(c.dtype)}>({int(bits):#04x})"
        return super().const(c)

    def expr(self, e, prec: int = 0) -> str:
        # cuda_fp8.h gives __nv_fp8_* no arithmetic: operate on float and convert back (saturating,
        # as every conversion to fp8 is: ir/float8.py)
        if isinstance(e, E.BinOp) and e.op not in ("and", "or") and (_is_fp8(e.a.dtype) or _is_fp8(e.b.dtype)):
            s = super().expr(E.binary(e.op, _widen_fp8(e.a), _widen_fp8(e.b)), prec)
            return f"{self.ctype(e.dtype)}({s})" if _is_fp8(e.dtype) else s
        if isinstance(e, E.UnOp) and e.op == "neg" and _is_fp8(e.dtype):
            return f"{self.ctype(e.dtype)}(-(float)({self.expr(e.a)}))"
        return super().expr(e, prec)

    def mode_cast(self, e) -> str:
        """T.cast(..., round='rz'/'rp'/'rm') to a 16-bit float, or T.cast(..., sat=False) to fp8."""
        x = self.expr(e.args[0])
        if e.name == "cast_nosat":
            kind = "__NV_E4M3" if e.dtype == "float8_e4m3fn" else "__NV_E5M2"
            return f"tw_from_bits8<{self.ctype(e.dtype)}>(__nv_cvt_float_to_fp8((float)({x}), __NV_NOSAT, {kind}))"
        half = "half" if e.dtype == "float16" else "bfloat16"
        return f"__float2{half}_{e.name.removeprefix('cast_')}((float)({x}))"

    def ieee_call(self, e) -> str:
        """T.ieee_add(..., rounding_mode=...) and its siblings in the operands' type."""
        op, mode = e.name.removeprefix("ieee_").rsplit("_", 1)
        args = [self.expr(a) for a in e.args]
        if e.dtype == "float32":
            return f"{self.FLOAT_FN[e.name]}({', '.join(args)})"
        if e.dtype == "float64":
            return f"{_IEEE_F64[op]}_{mode}({', '.join(args)})"
        out = _IEEE_HALF[op].format(*args)
        if op in ("add", "sub", "mul", "fmaf"):
            return out
        half = "half" if e.dtype == "float16" else "bfloat16"
        return f"__double2{half}({out})" if op == "frsqrt" else f"__float2{half}_rn({out})"

    def prelude(self) -> str:
        uses_fp8 = any(p.dtype.startswith("float8") and p.dtype != "float8_e8m0fnu" for p in self.k.params)

        def f(s):
            nonlocal uses_fp8
            b = getattr(s, "buffer", None)
            if b is not None and b.dtype.startswith("float8") and b.dtype != "float8_e8m0fnu":
                uses_fp8 = True

        walk(self.k.body, f)
        inc = "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n"
        if uses_fp8:
            inc += "#include <cuda_fp8.h>\n"
        tma = _TMA_HELPERS if self.k.tensor_maps or _uses_warp_sync(self.k) else ""
        wgmma = _WGMMA_HELPERS if _uses_wgmma(self.k) else ""
        ex2 = _EX2_HELPER if _calls(self.k, "__exp2") else ""  # attn-hopper
        if uses_device_assert(self.k):
            ex2 += _ASSERT_HELPER
        if self.k.attrs.get("warp_uniform") or _calls(self.k, "warp_uniform"):  # (the attr: calls in TMA/wgmma)
            ex2 += _LANE0_HELPER
        small = subbyte.helpers(subbyte.used_dtypes(self.k), "cuda")
        # out of line: inlined, the draws of a per-thread loop unrolled over 128 elements made NVRTC take
        # minutes (each draw is a whole generator; TileLang's test_rand_1d timed out on the H200)
        rng = rng_source("__device__ __noinline__", "__device__ const") if uses_rng(self.k) else ""
        cluster = _CLUSTER_HELPERS if self.k.attrs.get("cluster_dims") else ""
        return (f"// generated by tilewright for {self.k.target}\n{inc}{_HELPERS}{small}{ex2}{tma}{wgmma}{rng}"
                f"{cluster}")

    def kernel_attrs(self) -> str:
        dims = self.k.attrs.get("cluster_dims")
        if not dims:
            return super().kernel_attrs()
        # a compile-time cluster shape: a plain cuLaunchKernel launches clusters of it
        return f"{super().kernel_attrs()} __cluster_dims__({', '.join(str(int(x)) for x in dims)})"

    def smem_decl(self) -> str:
        # TMA and wgmma descriptors swizzle by address bits: their tiles sit on 1 KiB boundaries of
        # the shared window
        align = 1024 if self.k.tensor_maps or _uses_wgmma(self.k) else 128
        return f"extern __shared__ __align__({align}) unsigned char tw_smem[];"

    def tensor_map_param(self, index: int) -> str:
        return f"const __grid_constant__ tw_tensor_map_t tw_tmap{index}"

    def tma(self, s, d: int) -> None:
        if isinstance(s, th.MbarrierInit):
            bar = self.name(s.bar, s.bar.name)
            self.emit(d, "if (tw_warp_uniform() == 0 && threadIdx.x == 0) {")
            for i in range(int(s.bar.shape[0])):
                self.emit(d + 1, f'asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\\n" :: '
                                 f'"r"(tw_smem_addr(&{bar}[{i}])), "r"({int(s.count)}));')
            # make the initialised barriers visible to the async proxy (the TMA unit)
            self.emit(d + 1, 'asm volatile("fence.mbarrier_init.release.cluster;\\n" ::: "memory");')
            self.emit(d + 1, 'asm volatile("fence.proxy.async.shared::cta;\\n" ::: "memory");')
            self.emit(d, "}")
        elif isinstance(s, th.MbarrierWait):
            bar = f"tw_smem_addr(&{self.ref(s.bar, s.index)})"
            self.emit(d, f"tw_mbar_wait({bar}, {self.expr(s.parity)});")
        elif isinstance(s, (th.TmaStore, th.TmaStoreCommit, th.TmaStoreWait)):
            self.tma_stores([s], d)
        else:
            self.tma_loads([s], d)

    def stmt(self, s, d: int) -> None:
        if isinstance(s, t.For) and s.kind != "unroll" and self.k.attrs.get("warp_uniform"):
            return self.loop_with_broadcasts(s, d)
        if isinstance(s, t.IfThenElse) and self.k.attrs.get("warp_uniform"):
            return self.if_with_broadcasts(s, d)
        # consecutive TMA loads (one pipeline stage's copies) are issued by one thread in one block
        if isinstance(s, t.SeqStmt) and any(isinstance(x, th.TmaLoad) for x in s.stmts):
            run: list = []
            for x in s.stmts + [None]:
                if isinstance(x, th.TmaLoad):
                    run.append(x)
                    continue
                if run and isinstance(x, th.Comment):
                    continue
                if run:
                    self.tma_loads(run, d)
                    run = []
                if x is not None:
                    self.stmt(x, d)
            return
        if isinstance(s, t.SeqStmt) and any(isinstance(x, _TMA_STORE_NODES) for x in s.stmts):
            # one thread's TMA stores, commit and wait: one branch on the thread index for the run
            run = []
            for x in s.stmts + [None]:
                if isinstance(x, _TMA_STORE_NODES) and (not run or x.issuer == run[0].issuer):
                    run.append(x)
                    continue
                if run and isinstance(x, th.Comment):
                    continue
                if run:
                    self.tma_stores(run, d)
                    run = [x] if isinstance(x, _TMA_STORE_NODES) else []
                    if run:
                        continue
                if x is not None:
                    self.stmt(x, d)
            if run:
                self.tma_stores(run, d)
            return
        if isinstance(s, th.NamedBarrier) and not s.arrive_only:
            # bar.sync over the partition's threads (0 would be the block's __syncthreads barrier)
            self.emit(d, f'asm volatile("bar.sync %0, %1;" :: "r"({self.expr(s.barrier_id)}), "r"({int(s.count)}) '
                         ': "memory");')
            return
        super().stmt(s, d)

    def tma_loads(self, loads: list, d: int) -> None:
        # a warp-uniform branch first: the other warps jump over the issue sequence
        by_warp: dict = {}
        for s in loads:  # loads of different thread sets (T.tma_copy in a partition) issue from their own warp
            by_warp.setdefault(s.issuer_warp, []).append(s)
        for warp, run in by_warp.items():
            self.emit(d, f"if (tw_warp_uniform() == {warp}) {{")
            self.emit(d + 1, "if (tw_elect_one()) {")
            for s in run:
                self.tma_load(s, d + 2)
            self.emit(d + 1, "}")
            self.emit(d, "}")

    def tma_load(self, s: th.TmaLoad, d: int) -> None:
        index = self.k.tensor_maps.index(s.tmap)
        rank = len(s.coords)
        nbytes = int(np.prod(s.tmap.box)) * dt.nbytes(s.dst.dtype)
        bar = f"tw_smem_addr(&{self.ref(s.bar, s.bar_index)})"
        dst = f"tw_smem_addr(&{self.ref(s.dst, s.dst_index)})"
        # PTX lists coordinates innermost first
        coords = ", ".join(f"%{3 + i}" for i in range(rank))
        ops = ", ".join(f'"r"((int)({self.expr(c)}))' for c in reversed(s.coords))
        expect = nbytes if s.expect_bytes is None else int(s.expect_bytes)
        if expect and s.arrives:  # 0: a later box of a T.tma_copy, whose bytes its first box expects
            self.emit(d, f'asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\\n" :: '
                         f'"r"({bar}), "r"({expect}) : "memory");')
        elif expect:  # T.tma_copy: the program's own arrivals complete the phase
            self.emit(d, f'asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\\n" :: '
                         f'"r"({bar}), "r"({expect}) : "memory");')
        op = f"cp.async.bulk.tensor.{rank}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        if s.multicast is not None:
            # the box lands at the same offset in every block of the mask, completing its bytes on
            # the mbarrier at the same offset there
            mask = f"%{3 + rank}"
            self.emit(d, f'asm volatile("{op}.multicast::cluster [%0], [%1, {{{coords}}}], [%2], {mask};\\n" :: '
                         f'"r"({dst}), "l"(reinterpret_cast<unsigned long long>(&tw_tmap{index})), "r"({bar}), '
                         f'{ops}, "h"((unsigned short){int(s.multicast):#x}) : "memory");')
            return
        self.emit(d, f'asm volatile("{op} [%0], [%1, {{{coords}}}], [%2];\\n" :: "r"({dst}), '
                     f'"l"(reinterpret_cast<unsigned long long>(&tw_tmap{index})), "r"({bar}), {ops} : "memory");')

    def tma_stores(self, run: list, d: int) -> None:
        """TMA stores / commit / wait of one issuing thread (bulk groups are per thread: the thread
        that commits a group is the one whose wait covers it)."""
        self.emit(d, f"if (threadIdx.x == {int(run[0].issuer)}) {{")
        for s in run:
            if isinstance(s, th.TmaStore):
                index = self.k.tensor_maps.index(s.tmap)
                rank = len(s.coords)
                src = f"tw_smem_addr(&{self.ref(s.src, s.src_index)})"
                coords = ", ".join(f"%{2 + i}" for i in range(rank))  # innermost first
                ops = ", ".join(f'"r"((int)({self.expr(c)}))' for c in reversed(s.coords))
                op = f"cp.async.bulk.tensor.{rank}d.global.shared::cta.tile.bulk_group"
                self.emit(d + 1, f'asm volatile("{op} [%0, {{{coords}}}], [%1];\\n" :: '
                                 f'"l"(reinterpret_cast<unsigned long long>(&tw_tmap{index})), "r"({src}), {ops} : '
                                 '"memory");')
            elif isinstance(s, th.TmaStoreCommit):
                self.emit(d + 1, 'asm volatile("cp.async.bulk.commit_group;\\n" ::: "memory");')
            else:
                self.emit(d + 1, f'asm volatile("cp.async.bulk.wait_group.read {int(s.pending)};\\n" ::: "memory");')
        self.emit(d, "}")

    def async_copy(self, s: th.AsyncCopy, d: int) -> None:
        dst = f"tw_smem_addr(&{self.ref(s.dst, s.dst_index)})"
        src = f"&{self.ref(s.src, s.src_index)}"
        kind = "cg" if s.nbytes == 16 else "ca"
        size = str(s.nbytes) if s.pred is None else f"({self.expr(s.pred)}) ? {s.nbytes} : 0"
        self.emit(d, f'asm volatile("cp.async.{kind}.shared.global [%0], [%1], {s.nbytes}, %2;\\n" :: '
                     f'"r"({dst}), "l"({src}), "r"({size}));')

    def async_commit(self, d: int) -> None:
        self.emit(d, 'asm volatile("cp.async.commit_group;\\n" ::);')

    def async_wait(self, s: th.AsyncWait, d: int) -> None:
        self.emit(d, f'asm volatile("cp.async.wait_group {int(s.pending)};\\n" ::: "memory");')

    def load_matrix(self, s: th.LoadMatrix, d: int) -> None:
        n = s.num
        base = f"reinterpret_cast<unsigned*>(&{self.name(s.dst, s.dst.name)}[{s.dst_index}])"
        outs = ", ".join(f'"=r"({base}[{i}])' for i in range(n))
        regs = ", ".join(f"%{i}" for i in range(n))
        trans = ".trans" if s.trans else ""
        addr = f"tw_smem_addr(&{self.ref(s.src, s.src_index)})"
        self.emit(d, f'asm volatile("ldmatrix.sync.aligned.m8n8.x{n}{trans}.shared.b16 {{{regs}}}, [%{n}];\\n" '
                     f': {outs} : "r"({addr}));')

    def store_matrix(self, s: th.StoreMatrix, d: int) -> None:
        n = s.num
        base = f"reinterpret_cast<const unsigned*>(&{self.name(s.src, s.src.name)}[{s.src_index}])"
        ins = ", ".join(f'"r"({base}[{i}])' for i in range(n))
        regs = ", ".join(f"%{1 + i}" for i in range(n))
        addr = f"tw_smem_addr(&{self.ref(s.dst, s.dst_index)})"
        self.emit(d, f'asm volatile("stmatrix.sync.aligned.m8n8.x{n}.shared.b16 [%0], {{{regs}}};\\n" :: '
                     f'"r"({addr}), {ins} : "memory");')

    def matrix_multiply(self, s: th.MatrixMultiply, d: int) -> None:
        mi = s.instr
        (db, do), (ab, ao), (bb, bo), (cb, co) = s.d, s.a, s.b, s.c
        a_words = mi.a_elems * dt.bits(mi.a_dtype) // 32
        b_words = mi.b_elems * dt.bits(mi.b_dtype) // 32
        an, bn, cn = self.name(ab, ab.name), self.name(bb, bb.name), self.name(cb, cb.name)
        dn = self.name(db, db.name)
        a_ops = [f'"r"(reinterpret_cast<const unsigned*>(&{an}[{ao}])[{i}])' for i in range(a_words)]
        b_ops = [f'"r"(reinterpret_cast<const unsigned*>(&{bn}[{bo}])[{i}])' for i in range(b_words)]
        nc = mi.c_elems
        same = db is cb and do == co
        idx = 0
        d_regs = ", ".join(f"%{idx + i}" for i in range(nc))
        idx += nc
        a_regs = ", ".join(f"%{idx + i}" for i in range(a_words))
        idx += a_words
        b_regs = ", ".join(f"%{idx + i}" for i in range(b_words))
        idx += b_words
        if same:
            c_regs = d_regs
            outs = ", ".join(f'"+f"({dn}[{do + i}])' for i in range(nc))
            ins = ", ".join(a_ops + b_ops)
        else:
            c_regs = ", ".join(f"%{idx + i}" for i in range(nc))
            outs = ", ".join(f'"=f"({dn}[{do + i}])' for i in range(nc))
            ins = ", ".join(a_ops + b_ops + [f'"f"({cn}[{co + i}])' for i in range(nc)])
        self.emit(d, f'asm("{mi.mnemonic} {{{d_regs}}}, {{{a_regs}}}, {{{b_regs}}}, {{{c_regs}}};\\n" '
                     f": {outs} : {ins});")

    def wgmma(self, s, d: int) -> None:
        if isinstance(s, th.WgmmaFence):
            self.fence_registers(s.fenced, d)
            self.emit(d, 'asm volatile("wgmma.fence.sync.aligned;\\n" ::: "memory");')
        elif isinstance(s, th.WgmmaCommit):
            self.emit(d, 'asm volatile("wgmma.commit_group.sync.aligned;\\n" ::: "memory");')
        elif isinstance(s, th.WgmmaWait):
            self.emit(d, f'asm volatile("wgmma.wait_group.sync.aligned {int(s.pending)};\\n" ::: "memory");')
            self.fence_registers(s.fenced, d)
        else:
            self.wgmma_mma(s, d)

    def fence_registers(self, bufs, d: int) -> None:
        """Empty asm statements that read and write every register of ``bufs``: the device compiler
        may not move their other accesses across (the wgmma instructions use them asynchronously)."""
        for b in bufs:
            con = "+f" if b.dtype == "float32" else "+r"
            name = self.name(b, b.name)
            if dt.bits(b.dtype) == 32:
                refs = [f"{name}[{i}]" for i in range(int(b.shape[0]))]
            else:
                refs = [f"reinterpret_cast<unsigned*>({name})[{i}]" for i in range(int(b.shape[0]) * dt.bits(b.dtype)
                                                                                   // 32)]
            for i in range(0, len(refs), 16):
                ops = ", ".join(f'"{con if dt.bits(b.dtype) == 32 else "+r"}"({r})' for r in refs[i:i + 16])
                self.emit(d, f'asm volatile("" : {ops} :: "memory");')

    def wgmma_desc(self, op: th.WgmmaOperand) -> str:
        """The operand's 64-bit descriptor; with ``op.base`` (``tw.wgmma_desc_fold``) the descriptor of the tile's
        first element plus ``op.step``: the K steps of one gemm then share one descriptor computation (the device
        compiler folds the common part) instead of masking and shifting each step's address."""
        addr = f"tw_smem_addr(&{self.ref(op.buffer, op.index if op.base is None else op.base)})"
        desc = f"tw_wgmma_desc({addr}, {op.lbo}u, {op.sbo}u, {WGMMA_LAYOUT_TYPE[op.swizzle]}ull)"
        return desc if op.base is None else f"({desc} + {int(op.step)}ull)"

    def wgmma_mma(self, s: th.Wgmma, d: int) -> None:
        mi = s.instr
        (db, do) = s.d
        dn = self.name(db, db.name)
        nc = mi.c_elems
        con = "+r" if mi.acc_dtype == "int32" else "+f"
        outs = [f'"{con}"({dn}[{do + i}])' for i in range(nc)]
        d_regs = ", ".join(f"%{i}" for i in range(nc))
        ins = []
        a_reg = isinstance(s.a, tuple)
        if a_reg:
            ab, ao = s.a
            words = mi.a_elems * dt.bits(mi.a_dtype) // 32
            ins += [f'"r"(reinterpret_cast<const unsigned*>(&{self.name(ab, ab.name)}[{ao}])[{i}])'
                    for i in range(words)]
            a_text = "{" + ", ".join(f"%{nc + i}" for i in range(words)) + "}"
        else:
            ins.append(f'"l"({self.wgmma_desc(s.a)})')
            a_text = f"%{nc}"
        ins.append(f'"l"({self.wgmma_desc(s.b)})')
        b_text = f"%{nc + len(ins) - 1}"
        ins.append(f'"r"({int(s.scale_d)})')
        scale_text = f"%{nc + len(ins) - 1}"
        imms = []
        if mi.acc_dtype != "int32":
            imms += ["1", "1"]  # scale-a, scale-b: no negation
        if mi.transposable:  # 16-bit types: the transpose bits say which operands are M/N-major
            if not a_reg:
                imms.append("1" if s.a.major == "mn" else "0")
            imms.append("1" if s.b.major == "mn" else "0")
        args = ", ".join([f"{{{d_regs}}}", a_text, b_text, "p"] + imms)
        self.emit(d, "asm volatile(")
        self.emit(d + 1, f'"{{\\n .reg .pred p;\\n setp.ne.b32 p, {scale_text}, 0;\\n"')
        self.emit(d + 1, f'" {mi.mnemonic} {args};\\n}}\\n"')
        for i in range(0, len(outs), 8):
            last = i + 8 >= len(outs)
            self.emit(d + 1, (": " if i == 0 else "  ") + ", ".join(outs[i:i + 8]) + ("" if last else ","))
        self.emit(d + 1, ": " + ", ".join(ins) + ' : "memory");')

    def atomic(self, s: th.AtomicRMW, d: int) -> None:
        """A relaxed atomic (atomicAdd and the CAS loops return the old value); a stronger memory
        order is made with fences of the atomic's scope around it: a release fence before, an
        acquire fence after (the fence-and-relaxed-atomic patterns of the PTX memory model)."""
        ptr = f"&{self.ref(s.buffer, s.index)}"
        val = self.expr(s.value)
        fn = {"add": "atomicAdd", "and": "atomicAnd", "or": "atomicOr", "xor": "atomicXor", "exch": "atomicExch"}
        call = f"{fn[s.op]}({ptr}, {val})" if s.op in fn else f"tw_atomic_{s.op}({ptr}, {val})"
        fence = _CUDA_FENCE[s.scope]
        if s.order in ("release", "acq_rel", "seq_cst"):
            self.emit(d, f"{fence};")
        self.emit(d, f"{call};" if s.result is None else f"{self.ref(*s.result)} = {call};")
        if s.order in ("acquire", "acq_rel", "seq_cst"):
            self.emit(d, f"{fence};")

    def sync(self, s, d: int) -> None:
        if isinstance(s, th.MbarrierArrive) and s.cta is not None:
            # another block's barrier (same offset): its shared::cluster address.  The default semantics
            # (release at CTA scope), as CUTLASS's cluster barriers: `.release.cluster` made ptxas put
            # MEMBAR.ALL.GPU + ERRBAR before every arrival, which cost the multicast GEMM 2-4.5x on the
            # H200 (a slot's release per warp and K step); what the arrival orders is the warp's
            # wgmma reads, which its wgmma.wait_group has completed
            if s.expect_tx is not None or int(s.count) != 1:
                raise NotImplementedError("a remote mbarrier arrive carries one arrival and no transaction bytes")
            bar = f"tw_mapa(tw_smem_addr(&{self.ref(s.bar, s.index)}), {self.expr(s.cta)})"
            self.elected([f'asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\\n" :: '
                          f'"r"({bar}) : "memory");'], s.elected, d)
        elif isinstance(s, th.ClusterBarrier):
            # not .aligned: the threads of a warp may reach it apart (a producer's and consumers' paths)
            if s.arrive:
                sem = "relaxed" if s.relaxed else "release"  # (release: a MEMBAR.ALL.GPU before the arrival)
                self.emit(d, f'asm volatile("barrier.cluster.arrive.{sem};\\n" ::: "memory");')
            if s.wait:
                self.emit(d, 'asm volatile("barrier.cluster.wait.acquire;\\n" ::: "memory");')
        elif isinstance(s, th.MbarrierArrive):
            bar = f"tw_smem_addr(&{self.ref(s.bar, s.index)})"
            body = []
            if s.expect_tx is not None and int(s.count) == 1:
                body.append(f'asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\\n" :: '
                            f'"r"({bar}), "r"((unsigned)({self.expr(s.expect_tx)})) : "memory");')
            else:
                if s.expect_tx is not None:
                    body.append(f'asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\\n" :: '
                                f'"r"({bar}), "r"((unsigned)({self.expr(s.expect_tx)})) : "memory");')
                if int(s.count) == 1:
                    body.append(f'asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\\n" :: "r"({bar}) : '
                                '"memory");')
                else:
                    body.append(f'asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0], %1;\\n" :: "r"({bar}), '
                                f'"r"({int(s.count)}) : "memory");')
            self.elected(body, s.elected, d)
        elif isinstance(s, th.MbarrierExpectTx):
            bar = f"tw_smem_addr(&{self.ref(s.bar, s.index)})"
            self.elected([f'asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\\n" :: '
                          f'"r"({bar}), "r"((unsigned)({self.expr(s.nbytes)})) : "memory");'], True, d)
        elif isinstance(s, th.NamedBarrier):
            op = "bar.arrive" if s.arrive_only else "bar.sync"
            self.emit(d, f'asm volatile("{op} %0, %1;\\n" :: "r"((int)({self.expr(s.barrier_id)})), '
                         f'"r"({int(s.count)}) : "memory");')
        elif isinstance(s, th.SetMaxNReg):
            kind = "inc" if s.increase else "dec"
            self.emit(d, f'asm volatile("setmaxnreg.{kind}.sync.aligned.u32 {int(s.count)};\\n" ::: "memory");')
        elif isinstance(s, th.FenceProxyAsync):
            self.emit(d, 'asm volatile("fence.proxy.async.shared::cta;\\n" ::: "memory");')
        elif isinstance(s, th.PrefetchL2):  # (a hint: no value, no ordering; see ir.thread.PrefetchL2)
            self.emit(d, f'asm volatile("prefetch.global.L2 [%0];\\n" :: "l"(&{self.expr(s.load)}));')
        elif isinstance(s, th.GridDependency):
            if self.k.target.has("cluster"):  # (sm_90 and newer: programmatic dependent launch)
                if s.prefetch_tensor_maps and self.k.tensor_maps:  # (kernel parameters: no dependence on the wait)
                    self.emit(d, "if (threadIdx.x == 0) {")
                    for index in range(len(self.k.tensor_maps)):
                        self.emit(d + 1, 'asm volatile("prefetch.tensormap [%0];\\n" :: '
                                         f'"l"(reinterpret_cast<unsigned long long>(&tw_tmap{index})) : "memory");')
                    self.emit(d, "}")
                self.emit(d, f'asm volatile("griddepcontrol.{s.action};\\n" ::: "memory");')
            else:
                self.emit(d, f"// griddepcontrol.{s.action}: no programmatic dependent launch before sm_90")
        else:
            super().sync(s, d)

    def elected(self, body: list, elected: bool, d: int) -> None:
        """``body`` by every executing thread, or by one elected lane of each executing warp."""
        if not elected:
            for line in body:
                self.emit(d, line)
            return
        self.emit(d, "if (tw_elect_one()) {")
        for line in body:
            self.emit(d + 1, line)
        self.emit(d, "}")

    def shuffle(self, e) -> str:
        if e.dtype in subbyte.CTYPES:  # one-byte structs travel as float / int (exact for their values)
            wide = "float" if dt.is_float(e.dtype) else "int"
            inner = f"__shfl_xor_sync(0xffffffffu, ({wide})({self.expr(e.value)}), {e.mask}, {e.width})"
            return f"{self.ctype(e.dtype)}({inner})"
        return f"__shfl_xor_sync(0xffffffffu, {self.expr(e.value)}, {e.mask}, {e.width})"

    def debug_print(self, e) -> str:
        """T.print (language/debug.py): printf of the message, block, thread and value; the
        expression is 0 so it can bind the let that carries it."""
        import json

        kind, _, msg = e.name[len("debug_print:"):].partition(":")
        text = json.dumps(msg).replace("%", "%%")[1:-1]
        where = "blockIdx.x, blockIdx.y, blockIdx.z, (int)threadIdx.x"
        fmt = f'"{text}: block (%d, %d, %d) thread %d'
        if kind != "value":
            return f'(printf({fmt}\\n", {where}), 0)'
        v, d = e.args[0], e.args[0].dtype
        if dt.is_float(d):
            return f'(printf({fmt}: %f\\n", {where}, (double)(float)({self.expr(v)})), 0)'
        return f'(printf({fmt}: %lld\\n", {where}, (long long)({self.expr(v)})), 0)'

    # warp_uniform (interp/warp_ops.UNIFORM) inside a loop: each distinct broadcast whose operand the loop body
    # does not change (it may read the loop variable) is made once, at the top of the body, and named: the
    # CUDA compiler does not merge equal shuffles, and ptxas keeps what is computed from the one broadcast in
    # uniform registers.  warp_uniform's promise covers this: its lanes run the whole iteration together.
    # The branches of an ``if`` are such scopes too (the peeled first and last key steps of a loop).
    def loop_with_broadcasts(self, s, d: int) -> None:
        v = self.name(s.var, s.var.name)
        self.emit(d, f"for (int {v} = {self.expr(s.start)}; {v} < {self.expr(s.start + s.extent)}; ++{v}) {{")
        self.body_with_broadcasts(s.body, d + 1, s.var.name)
        self.emit(d, "}")

    def if_with_broadcasts(self, s, d: int) -> None:
        self.emit(d, f"if ({self.expr(s.cond)}) {{")
        self.body_with_broadcasts(s.then_body, d + 1, "if")
        if s.else_body is not None:
            self.emit(d, "} else {")
            self.body_with_broadcasts(s.else_body, d + 1, "if")
        self.emit(d, "}")

    def body_with_broadcasts(self, body, d: int, name: str) -> None:
        from ..ir.visitor import walk

        written = set()
        walk(body, lambda x: written.add(x.buffer) if isinstance(x, t.BufferStore) else
             written.add(x.var) if isinstance(x, (t.LetStmt, t.For)) else None)
        scope = {"written": written, "name": name, "names": {}}
        self.uniform_scopes = getattr(self, "uniform_scopes", []) + [scope]
        at = len(self.lines)
        self.stmt(body, d)
        self.uniform_scopes = self.uniform_scopes[:-1]
        self.lines[at:at] = ["  " * d + f"const int {n} = tw_lane0({arg});" for arg, n in scope["names"].items()]

    def shared_broadcast(self, e) -> str | None:
        """The name of the loop-top broadcast of ``warp_uniform`` call ``e`` (loop_with_broadcasts), or None."""
        from ..ir.visitor import free_vars, loads_in

        scopes = getattr(self, "uniform_scopes", [])
        if not scopes or e.dtype != "int32":
            return None
        scope = scopes[-1]
        arg = e.args[0]
        if free_vars(arg) & scope["written"] or any(ld.buffer in scope["written"] for ld in loads_in(arg)):
            return None
        terms, const = _int_sum(arg, 1)  # one broadcast of x serves x + c: lane 0's x + c is x + c in every lane
        base = None
        for coef, atom in terms:
            term = atom if coef == 1 else E.binary("*", atom, E.Const(coef, "int32"))
            base = term if base is None else E.binary("+", base, term)
        if base is None:
            return self.expr(arg)
        text = self.expr(base)
        if text not in scope["names"]:
            scope["names"][text] = self.name(object(), f"{scope['name']}_uniform")
        return f"({scope['names'][text]} + {const})" if const else scope["names"][text]

    # TileLang's T.shfl_* and warp_size() (language/warp.py): CUDA's own shuffles, width 0 = 32
    _WARP_SHUFFLE = {"warp_shfl_xor": "__shfl_xor_sync", "warp_shfl_down": "__shfl_down_sync",
                     "warp_shfl_up": "__shfl_up_sync", "warp_shfl_idx": "__shfl_sync"}

    def call(self, e) -> str:
        if e.name == "warp_size":
            return "32"
        if e.name == th.CLUSTER_RANK:
            return "tw_cluster_ctarank()"
        if e.name.startswith("ieee_"):
            return self.ieee_call(e)
        if e.name.startswith("cast_"):
            return self.mode_cast(e)
        if e.name.startswith("debug_print:"):
            return self.debug_print(e)
        if e.name.startswith("device_assert:"):  # T.device_assert: printf and __trap() (tw_device_assert_with_msg)
            import json

            msg = json.dumps(e.name[len("device_assert:"):] or "assertion failed").replace("%", "%%")
            return f"tw_device_assert_with_msg({self.expr(e.args[0])}, {msg})"
        if e.name.startswith("warp_vote_"):
            p, m = e.args
            m32 = f"{int(m.value) & 0xFFFFFFFF:#x}u"
            kind = e.name.removeprefix("warp_vote_")
            if kind == "activemask":
                return "((unsigned long long)__activemask())"
            if kind == "ballot":
                return f"((unsigned long long)__ballot_sync({m32}, {self.expr(p)}))"
            return f"((bool)__{kind}_sync({m32}, {self.expr(p)}))"
        if e.name == "warp_uniform" and e.dtype == "int32":  # interp/warp_ops.UNIFORM (tw_lane0: lane 0's value)
            return self.shared_broadcast(e) or f"tw_lane0({self.expr(e.args[0])})"
        if e.name == "warp_uniform":
            e = E.Call("warp_shfl_idx", (e.args[0], E.const(0), E.const(32)), e.dtype)
        fn = self._WARP_SHUFFLE.get(e.name)
        if fn is None:
            return super().call(e)
        v, lane, width = e.args
        w = int(width.value) or 32
        d = e.dtype
        if d in ("float32", "float64", "float16", "bfloat16", "int32", "uint32", "int64", "uint64"):
            return f"{fn}(0xffffffffu, {self.expr(v)}, {self.expr(lane)}, {w})"
        if dt.is_int(d) or d == "bool":  # narrow integers travel as int
            return f"(({self.ctype(d)}){fn}(0xffffffffu, (int)({self.expr(v)}), {self.expr(lane)}, {w}))"
        from ..errors import CompileError

        raise CompileError(f"a shuffle of a {d} value is not available in the CUDA backend",
                           hint="shuffle it as float16 or float32")


_TMA_STORE_NODES = (th.TmaStore, th.TmaStoreCommit, th.TmaStoreWait)


def _uses_warp_sync(kernel) -> bool:
    """Whether the kernel needs the mbarrier / elect helpers without using TMA."""
    found = False

    def f(s):
        nonlocal found
        if isinstance(s, (th.MbarrierInit, th.MbarrierWait, th.MbarrierArrive, th.MbarrierExpectTx)):
            found = True

    walk(kernel.body, f)
    return found


# T.__exp2: the hardware's 2**x, denormal results flushed to zero (exp2f adds range fix-ups around
# the same MUFU.EX2: four instructions instead of one)
_EX2_HELPER = r"""
__device__ __forceinline__ float tw_ex2_approx(float x) {
  float y; asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }
"""


_ASSERT_HELPER = r"""
// T.device_assert: a thread whose condition is false prints where and why, then traps (the launch fails)
__device__ __forceinline__ int tw_device_assert_with_msg(bool cond, const char* msg) {
  if (!cond) {
    printf("T.device_assert failed in block (%d, %d, %d) thread %d: %s\n", (int)blockIdx.x, (int)blockIdx.y,
           (int)blockIdx.z, (int)threadIdx.x, msg);
    __trap();
  }
  return 0;
}
"""


def _calls(kernel, name: str) -> bool:
    """Does any expression of the kernel call intrinsic ``name``?"""
    from ..ir import expr as E
    from ..ir.verifier import exprs_of
    from ..ir.visitor import walk_expr

    found = []

    def in_expr(e):
        if isinstance(e, E.Call) and e.name == name:
            found.append(e)

    walk(kernel.body, lambda s: [walk_expr(e, in_expr) for e in exprs_of(s)])
    return bool(found)


def _uses_wgmma(kernel) -> bool:
    found = False

    def f(s):
        nonlocal found
        if isinstance(s, th.Wgmma):
            found = True

    walk(kernel.body, f)
    return found


# the 64-bit shared-memory matrix descriptor of wgmma (fields: target/matrix.py)
_WGMMA_HELPERS = r"""
__device__ __forceinline__ unsigned long long tw_wgmma_desc(unsigned addr, unsigned lbo, unsigned sbo,
                                                            unsigned long long layout) {
  return (unsigned long long)((addr & 0x3FFFFu) >> 4) | ((unsigned long long)((lbo >> 4) & 0x3FFFu) << 16)
       | ((unsigned long long)((sbo >> 4) & 0x3FFFu) << 32) | (layout << 62);
}
"""


# __threadfence* are fence.sc at their scope: strong enough for every memory order
_CUDA_FENCE = {"cta": "__threadfence_block()", "gpu": "__threadfence()", "sys": "__threadfence_system()"}


def print_cuda(kernel: th.ThreadKernel) -> str:
    return CudaPrinter(kernel).print()
