"""TileLang's names that tilewright used to lack, each in a small program written as TileLang users
write them, run on the tile interpreter and on the emulator of the lowered code for sm_90a and
gfx942 against float64 NumPy references (outputs poisoned with NaN before each run); the generated
CUDA compiled by NVRTC and the HIP by clang where those toolchains are installed.  A name a backend
cannot support must be a CompileError naming it, never silently accepted.
"""

from fractions import Fraction

import numpy as np
import pytest
from toolchains import needs_hip_compiler, needs_nvrtc
from zoo import close, f64, poisoned, rand

import tilewright
import tilewright.language as T
from tilewright.errors import CompileError
from tilewright.interp import ieee_rounding

CUDA, GFX942 = "cuda -arch=sm_90a", "hip -arch=gfx942"
BACKENDS = [("interpret", None), (CUDA, "emulator"), (GFX942, "emulator")]
BACKEND_IDS = ["interpret", "emulator-sm_90a", "emulator-gfx942"]


@pytest.fixture
def rng():
    return np.random.default_rng(12)


def build(func, target, backend=None):
    return tilewright.compile(func, target=target, execution_backend=backend)


# ============================================================================================
# scalar math


def unary_kernel(N, fn, dtype="float32"):
    @T.prim_func
    def main(A: T.Tensor((N,), dtype), B: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
            for i in T.Parallel(128):
                B[bx * 128 + i] = fn(A[bx * 128 + i])

    return main


def binary_kernel(N, fn, dtype="float32"):
    @T.prim_func
    def main(A: T.Tensor((N,), dtype), B: T.Tensor((N,), dtype), C: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
            A_s = T.alloc_shared((128,), dtype)
            T.copy(A[bx * 128], A_s)
            for i in T.Parallel(128):
                C[bx * 128 + i] = fn(A_s[i], B[bx * 128 + i])

    return main


UNARY = {  # name: (T function, float64 reference, input range, tolerance)
    "tan": (T.tan, np.tan, (-1.2, 1.2), 1e-5),
    "atan": (T.atan, np.arctan, (-4, 4), 1e-5),
    "sinh": (T.sinh, np.sinh, (-3, 3), 1e-5),
    "cosh": (T.cosh, np.cosh, (-3, 3), 1e-5),
    "nearbyint": (T.nearbyint, np.rint, (-6, 6), 0),
    "fast_rcp": (T.fast_rcp, lambda x: 1 / x, (0.25, 4), 1e-6),
    "__exp": (T.__exp, np.exp, (-4, 4), 2e-5),
    "__exp10": (T.__exp10, lambda x: 10.0**x, (-2, 2), 2e-5),
    "__log": (T.__log, np.log, (0.1, 8), 2e-5),
    "__log2": (T.__log2, np.log2, (0.1, 8), 2e-5),
    "__log10": (T.__log10, np.log10, (0.1, 8), 2e-5),
    "__sin": (T.__sin, np.sin, (-3, 3), 2e-5),
    "__cos": (T.__cos, np.cos, (-3, 3), 2e-5),
    "__tan": (T.__tan, np.tan, (-1.2, 1.2), 2e-5),
    "ieee_frsqrt": (T.ieee_frsqrt, lambda x: 1 / np.sqrt(x), (0.1, 8), 1e-7),
}


@pytest.mark.parametrize("target,backend", BACKENDS, ids=BACKEND_IDS)
@pytest.mark.parametrize("name", list(UNARY))
def test_unary_math(rng, name, target, backend):
    fn, ref, (lo, hi), tol = UNARY[name]
    N = 256
    a = rand(rng, (N,), lo=lo, hi=hi)
    if name == "nearbyint":
        a[:8] = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, -3.5]  # halves go to even, unlike T.round
    b = poisoned((N,))
    build(unary_kernel(N, fn), target, backend)(a, b)
    close(b, ref(f64(a)), tol, tol)


def test_unary_math_in_float16_and_float64(rng):
    N = 128
    for dtype, tol in (("float16", 2e-3), ("float64", 1e-12)):
        for fn, ref in ((T.tan, np.tan), (T.__exp, np.exp), (T.nearbyint, np.rint), (T.fast_rcp, lambda x: 1 / x)):
            a = rand(rng, (N,), dtype, lo=0.3, hi=1.2)
            for target, backend in BACKENDS:
                if dtype == "float64" and target == GFX942 and fn in (T.tan, T.__exp):
                    # float64 transcendentals need AMD's device library, which tilewright does not link
                    with pytest.raises(CompileError, match=r"float64 is not available in the HIP backend"):
                        build(unary_kernel(N, fn, dtype), target, backend)
                    continue
                b = poisoned((N,), dtype)
                build(unary_kernel(N, fn, dtype), target, backend)(a, b)
                close(b, ref(f64(a)), tol, tol)


BINARY = {
    "fmod": (T.fmod, np.fmod),
    "clamp": (lambda x, y: T.clamp(x, -0.25, y), lambda x, y: np.minimum(np.maximum(x, -0.25), y)),
}


@pytest.mark.parametrize("target,backend", BACKENDS, ids=BACKEND_IDS)
@pytest.mark.parametrize("name", list(BINARY))
def test_binary_math(rng, name, target, backend):
    fn, ref = BINARY[name]
    N = 256
    a, y = rand(rng, (N,), lo=-5, hi=5), rand(rng, (N,), lo=0.3, hi=2)
    y[::2] *= -1
    if name == "clamp":
        a, y = a / 5, np.abs(y) / 2
    c = poisoned((N,))
    build(binary_kernel(N, fn), target, backend)(a, y, c)
    close(c, ref(f64(a), f64(y)), 1e-6, 1e-6)


# ieee_* with rounding modes: exact rational references ---------------------------------------

def _exact(op, args):
    fr = [Fraction(float(v)) for v in args]
    if op == "add":
        return fr[0] + fr[1]
    if op == "sub":
        return fr[0] - fr[1]
    if op == "mul":
        return fr[0] * fr[1]
    if op == "fmaf":
        return fr[0] * fr[1] + fr[2]
    if op == "fdiv":
        return fr[0] / fr[1]
    if op == "frcp":
        return 1 / fr[0]
    raise ValueError(op)


def _round32(q: Fraction, mode: str) -> np.float32:
    """The float32 nearest ``q`` in ``mode``, found by bracketing (an independent reference)."""
    r = np.float32(float(q))  # within one float32 step of the answer
    lo = r if Fraction(float(r)) <= q else np.nextafter(r, np.float32(-np.inf))
    hi = lo if Fraction(float(lo)) == q else np.nextafter(lo, np.float32(np.inf))
    if mode == "rd":
        return lo
    if mode == "ru":
        return hi
    if mode == "rz":
        return lo if q >= 0 else hi
    dl, dh = q - Fraction(float(lo)), Fraction(float(hi)) - q
    if dl != dh:
        return lo if dl < dh else hi
    return lo if int(lo.view(np.int32)) % 2 == 0 else hi


def _ieee_inputs(rng, op, n):
    x = (rng.standard_normal(n) * np.exp2(rng.integers(-6, 6, n))).astype(np.float32)
    y = (rng.standard_normal(n) * np.exp2(rng.integers(-30, 6, n))).astype(np.float32)  # wide exponent gaps
    z = (rng.standard_normal(n)).astype(np.float32)
    if op in ("fdiv", "frcp"):
        y = np.where(np.abs(y) < 1e-3, np.float32(0.5), y).astype(np.float32)
    if op == "frcp":
        x = y
    return x, y, z


@pytest.mark.parametrize("mode", ["rn", "rz", "ru", "rd"])
@pytest.mark.parametrize("op", ["add", "sub", "mul", "fmaf", "fdiv", "frcp"])
def test_ieee_rounding_reference_is_exact(rng, op, mode):
    """The NumPy model the interpreter and emulator use agrees with exact rational arithmetic."""
    x, y, z = _ieee_inputs(rng, op, 400)
    args = {"frcp": (x,), "fmaf": (x, y, z)}.get(op, (x, y))
    got = getattr(ieee_rounding, f"ieee_{op}")(*args, mode)
    want = np.array([_round32(_exact(op, vals), mode) for vals in zip(*args)], np.float32)
    assert np.array_equal(got.view(np.int32), want.view(np.int32)), (op, mode)


@pytest.mark.parametrize("mode", ["rn", "rz", "ru", "rd"])
def test_ieee_fsqrt_reference_is_exact(rng, mode):
    x = (rng.uniform(0.01, 100, 400)).astype(np.float32)
    got = ieee_rounding.ieee_fsqrt(x, mode)
    for g, v in zip(got, x):
        q = Fraction(float(v))
        lo = np.float32(np.sqrt(np.float64(v)))
        lo = lo if Fraction(float(lo)) ** 2 <= q else np.nextafter(lo, np.float32(-1))
        hi = lo if Fraction(float(lo)) ** 2 == q else np.nextafter(lo, np.float32(np.inf))
        if mode in ("rd", "rz"):
            assert g == lo
        elif mode == "ru":
            assert g == hi
        else:
            assert g in (lo, hi) and abs(float(g) ** 2 - float(v)) <= abs(float(lo if g == hi else hi) ** 2 - float(v))


def ieee_kernel(N, op, mode):
    fn = getattr(T, f"ieee_{op}")
    arity = {"frcp": 1, "fsqrt": 1, "fmaf": 3}.get(op, 2)

    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32"), Z: T.Tensor((N,), "float32"),
             R: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
            for i in T.Parallel(128):
                g = bx * 128 + i
                if arity == 1:
                    R[g] = fn(X[g], mode)
                elif arity == 2:
                    R[g] = fn(X[g], Y[g], rounding_mode=mode)
                else:
                    R[g] = fn(X[g], Y[g], Z[g], mode)

    return main


@pytest.mark.parametrize("target,backend", BACKENDS, ids=BACKEND_IDS)
@pytest.mark.parametrize("mode", ["rn", "rz", "ru", "rd"])
@pytest.mark.parametrize("op", ["add", "mul", "fmaf", "fdiv", "frcp"])
def test_ieee_ops_in_kernels(rng, op, mode, target, backend):
    if target == GFX942 and mode != "rn":
        with pytest.raises(CompileError, match=rf"T.ieee_{op}.*rounding_mode='{mode}'.*HIP"):
            build(ieee_kernel(256, op, mode), target, backend)
        return
    N = 256
    x, y, z = _ieee_inputs(rng, op, N)
    r = poisoned((N,))
    build(ieee_kernel(N, op, mode), target, backend)(x, y, z, r)
    args = {"frcp": (x,), "fmaf": (x, y, z)}.get(op, (x, y))
    want = np.array([_round32(_exact(op, vals), mode) for vals in zip(*args)], np.float32)
    assert np.array_equal(r.view(np.int32), want.view(np.int32))


def test_ieee_ops_refuse_bad_modes_and_types():
    with pytest.raises(CompileError, match=r"Invalid rounding mode 'up'"):
        ieee_kernel(128, "add", "up")
    with pytest.raises(CompileError, match=r"T.ieee_add computes in float32, float64, float16 or bfloat16.*int32"):
        binary_kernel(128, lambda a, b: T.ieee_add(a, b), "int32")  # float64 and 16-bit: tests/test_ieee_math.py


# ============================================================================================
# dtypes


def test_dtype_names():
    assert T.float8_e4m3 == "float8_e4m3fn" and T.uint32 == "uint32" and T.uint64 == "uint64"
    for name in ("float32x2", "bfloat16x2", "float4_e2m1fnx2"):  # tfloat32, e8m0, fp4: tests/test_dtypes_subbyte.py
        with pytest.raises(CompileError, match=rf"{name}.*not supported"):
            unary_kernel(128, lambda x: x, getattr(T, name))


@pytest.mark.parametrize("target,backend", BACKENDS, ids=BACKEND_IDS)
def test_unsigned_and_fp8_e4m3_kernels(rng, target, backend):
    N = 256

    @T.prim_func
    def main(A: T.Tensor((N,), T.uint32), B: T.Tensor((N,), T.uint64), F: T.Tensor((N,), T.float8_e4m3),
             C: T.Tensor((N,), T.uint64), G: T.Tensor((N,), T.float32)):
        with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
            for i in T.Parallel(128):
                g = bx * 128 + i
                C[g] = T.Cast(T.uint64, A[g]) * T.uint64(3) + B[g]
                G[g] = T.Cast(T.float32, F[g]) * 2.0

    a = rng.integers(0, 2**32, N, dtype=np.uint64).astype(np.uint32)
    b = rng.integers(0, 2**40, N, dtype=np.uint64)
    f = rand(rng, (N,), "float32", -4, 4).astype(tilewright.ir.dtype.to_numpy("float8_e4m3fn"))
    c, g = np.full(N, 7, np.uint64), poisoned((N,))
    build(main, target, backend)(a, b, f, c, g)
    assert np.array_equal(c, a.astype(np.uint64) * 3 + b)
    close(g, f64(f) * 2, 0, 0)


# ============================================================================================
# the generated code compiles


def math_kernel(N, modes=("rn", "rz", "ru", "rd")):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32"), C: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
            for i in T.Parallel(128):
                g = bx * 128 + i
                x, y = A[g], B[g]
                v = T.tan(x) + T.atan(x) + T.sinh(x) + T.cosh(x) + T.fmod(x, y) + T.nearbyint(x) + T.clamp(x, 0, y)
                v = v + T.fast_rcp(y) + T.__exp(x) + T.__exp10(x) + T.__log(y) + T.__log2(y) + T.__log10(y)
                v = v + T.__sin(x) + T.__cos(x) + T.__tan(x) + T.ieee_frsqrt(y)
                for m in modes:
                    v = v + T.ieee_add(x, y, m) + T.ieee_sub(x, y, m) + T.ieee_mul(x, y, m)
                    v = v + T.ieee_fmaf(x, y, v, m) + T.ieee_fdiv(x, y, m) + T.ieee_frcp(y, m) + T.ieee_fsqrt(y, m)
                C[g] = v

    return main


@needs_nvrtc
def test_math_compiles_with_nvrtc(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path))
    k = build(math_kernel(256), CUDA)
    assert k.get_code_object()[:4] == b"\x7fELF"
    src = k.get_kernel_source()
    for fn in ("tanf", "nearbyintf", "__frcp_rn", "__expf", "__sinf", "__fadd_rz", "__fmaf_ru", "__fdiv_rd",
               "__fsqrt_rz", "__frsqrt_rn"):
        assert fn + "(" in src


@needs_hip_compiler
def test_math_compiles_for_gfx942(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path))
    k = build(math_kernel(256, modes=("rn",)), GFX942)
    assert k.get_code_object()[:4] == b"\x7fELF"
    src = k.get_kernel_source()
    assert "tw_ieee_add_rn(" in src and "__builtin_rintf(" in src


# ============================================================================================
# warp shuffles and warp reductions

WARP = {"interpret": 32, CUDA: 32, GFX942: 64}


def ref_shuffle(v, kind, arg, width, warp):
    """What each thread reads, by CUDA's rules, written out lane by lane."""
    out = np.empty_like(v)
    w = width or warp
    for t in range(len(v)):
        lane = t % warp
        seg = lane // w * w
        if kind == "xor":
            s = lane ^ arg
            s = lane if s >= seg + w else s
        elif kind == "down":
            s = lane + arg if lane - seg + arg < w else lane
        elif kind == "up":
            s = lane - arg if lane - seg - arg >= 0 else lane
        else:
            s = seg + arg % w
        out[t] = v[t - lane + s]
    return out


def shuffle_kernel(N, dtype):
    @T.prim_func
    def main(A: T.Tensor((N,), dtype), X: T.Tensor((N,), dtype), D: T.Tensor((N,), dtype),
             U: T.Tensor((N,), dtype), S: T.Tensor((N,), dtype)):
        with T.Kernel(1, threads=N) as _bx:
            tx = T.get_thread_binding()
            v = A[tx]
            X[tx] = T.shfl_xor(v, 5)
            D[tx] = T.shfl_down_sync(0xFFFFFFFF, v, 3, 16)
            U[tx] = T.shfl_up(v, 2)
            S[tx] = T.shfl_sync(0xFFFFFFFF, v, tx % 7, 8)

    return main


@pytest.mark.parametrize("target,backend", BACKENDS, ids=BACKEND_IDS)
@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "int64", "float64"])
def test_shuffles(rng, dtype, target, backend):
    N = 128
    a = (rng.standard_normal(N) * 1000).astype(dtype)
    outs = [np.full(N, -7, dtype) if "int" in dtype else poisoned((N,), dtype) for _ in range(4)]
    build(shuffle_kernel(N, dtype), target, backend)(a, *outs)
    W = WARP[target]
    tid = np.arange(N)
    wants = [ref_shuffle(a, "xor", 5, 0, W), ref_shuffle(a, "down", 3, 16, W), ref_shuffle(a, "up", 2, 0, W),
             np.array([ref_shuffle(a, "idx", int(t % 7), 8, W)[t] for t in tid])]
    for got, want in zip(outs, wants):
        assert np.array_equal(got, want)


def warp_reduce_kernel(N):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), K: T.Tensor((N,), "int32"), S: T.Tensor((N,), "float32"),
             M: T.Tensor((N,), "float32"), L: T.Tensor((N,), "float32"), BA: T.Tensor((N,), "int32"),
             BO: T.Tensor((N,), "int32")):
        with T.Kernel(1, threads=N) as _bx:
            tx = T.get_thread_binding()
            S[tx] = T.warp_reduce_sum(A[tx])
            M[tx] = T.warp_reduce_max(A[tx])
            L[tx] = T.warp_reduce_min(A[tx])
            BA[tx] = T.warp_reduce_bitand(K[tx])
            BO[tx] = T.warp_reduce_bitor(K[tx])

    return main


@pytest.mark.parametrize("target,backend", BACKENDS, ids=BACKEND_IDS)
def test_warp_reductions(rng, target, backend):
    N = 256
    a = rand(rng, (N,))
    k = rng.integers(0, 2**31 - 1, N).astype(np.int32) | np.int32(0x11)
    s, m, mn = poisoned((N,)), poisoned((N,)), poisoned((N,))
    ba, bo = np.full(N, -1, np.int32), np.full(N, -1, np.int32)
    build(warp_reduce_kernel(N), target, backend)(a, k, s, m, mn, ba, bo)
    W = WARP[target]
    groups = f64(a).reshape(-1, W)
    close(s, np.repeat(groups.sum(1), W), 1e-5, 1e-5)
    close(m, np.repeat(groups.max(1), W), 0, 0)
    close(mn, np.repeat(groups.min(1), W), 0, 0)
    kg = k.reshape(-1, W)
    assert np.array_equal(ba, np.repeat(np.bitwise_and.reduce(kg, 1), W))
    assert np.array_equal(bo, np.repeat(np.bitwise_or.reduce(kg, 1), W))


def test_shuffle_misuse_is_refused():
    with pytest.raises(CompileError, match=r"T.shfl_sync: the lane mask"):
        unary_kernel(128, lambda x: T.shfl_sync(0, x, 1))
    with pytest.raises(CompileError, match=r"width=.*power of two"):
        unary_kernel(128, lambda x: T.shfl_xor(x, 1, width=12))
    with pytest.raises(CompileError, match=r"T.warp_reduce_bitor takes an integer"):
        unary_kernel(128, T.warp_reduce_bitor)


@needs_nvrtc
def test_shuffles_compile_with_nvrtc(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path))
    for dtype in ("float32", "float16", "int64"):
        k = build(shuffle_kernel(128, dtype), CUDA)
        assert k.get_code_object()[:4] == b"\x7fELF" and "__shfl_down_sync(" in k.get_kernel_source()
    assert build(warp_reduce_kernel(128), CUDA).get_code_object()[:4] == b"\x7fELF"


@needs_hip_compiler
def test_shuffles_compile_for_gfx942(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path))
    for dtype in ("float32", "float16", "int64", "float64"):
        k = build(shuffle_kernel(128, dtype), GFX942)
        assert k.get_code_object()[:4] == b"\x7fELF" and "tw_warp_src(" in k.get_kernel_source()
    assert build(warp_reduce_kernel(128), GFX942).get_code_object()[:4] == b"\x7fELF"


# ============================================================================================
# scans


def scan_kernel(M, N, op, scope, dim, reverse, in_place, dtype="float32"):
    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128) as _bx:
            if scope == "shared":
                S = T.alloc_shared((M, N), dtype)
                D = T.alloc_shared((M, N), "float32")
            else:
                S = T.alloc_fragment((M, N), dtype)
                D = T.alloc_fragment((M, N), "float32")
            T.copy(A, S)
            if in_place:
                getattr(T, op)(S, dim=dim, reverse=reverse)
                T.copy(S, B)
            else:
                getattr(T, op)(S, D, dim, reverse)
                T.copy(D, B)

    return main


def ref_scan(a, op, dim, reverse):
    x = np.flip(f64(a), dim) if reverse else f64(a)
    r = np.cumsum(x, dim) if op == "cumsum" else np.maximum.accumulate(x, dim)
    return np.flip(r, dim) if reverse else r


@pytest.mark.parametrize("target,backend", BACKENDS, ids=BACKEND_IDS)
@pytest.mark.parametrize("scope", ["shared", "fragment"])
@pytest.mark.parametrize("op", ["cumsum", "cummax"])
def test_scans(rng, op, scope, target, backend):
    M, N = 8, 64
    for dim, reverse, in_place in ((1, False, True), (0, True, False), (-1, True, True)):
        a = rand(rng, (M, N))
        b = poisoned((M, N))
        build(scan_kernel(M, N, op, scope, dim, reverse, in_place), target, backend)(a, b)
        close(b, ref_scan(a, op, dim, reverse), 1e-5, 1e-5)


@pytest.mark.parametrize("target,backend", BACKENDS, ids=BACKEND_IDS)
def test_cumsum_of_float16_into_float32(rng, target, backend):
    M, N = 4, 128
    a = rand(rng, (M, N), "float16")
    b = poisoned((M, N))
    build(scan_kernel(M, N, "cumsum", "shared", 1, False, False, "float16"), target, backend)(a, b)
    close(b, ref_scan(a, "cumsum", 1, False), 1e-5, 1e-5)  # accumulated in the destination's float32


def test_scan_misuse_is_refused():
    with pytest.raises(CompileError, match=r"T.cumsum: dim=2 is out of range"):
        scan_kernel(8, 64, "cumsum", "shared", 2, False, True)

    with pytest.raises(CompileError, match=r"T.cummax: the source must be a whole shared or fragment buffer"):
        @T.prim_func
        def bad(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64) as _bx:
                T.cummax(A)


# ============================================================================================
# atomics, barriers, assumptions


def bit_atomics_kernel(N):
    @T.prim_func
    def main(K: T.Tensor((N,), "int32"), O: T.Tensor((4,), "int32"), P: T.Tensor((N,), "int32"),
             Q: T.Tensor((N,), "int32"), F: T.Tensor((N,), "float32"), G: T.Tensor((N,), "float32"),
             H: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=128) as _bx:
            for i in T.Parallel(N):
                T.atomic_or(O[i % 2], K[i])
                T.atomic_xor(O[2], K[i])
                T.atomic_and(O[3], K[i] | 0x10000)
                P[i] = T.atomic_load(K[i], memory_order="acquire")
                T.atomic_store(G[i], F[i] * 2, memory_order="release")
                Q[i] = T.atomic_or(K[i], 0, return_prev=True)
                H[i] = T.atomic_load(F[i])

    return main


@pytest.mark.parametrize("target,backend", BACKENDS, ids=BACKEND_IDS)
def test_bitwise_atomics_load_and_store(rng, target, backend):
    N = 1024
    k = rng.integers(0, 2**31 - 1, N).astype(np.int32)
    f = rand(rng, (N,))
    o = np.array([0, 0, 0, -1], np.int32)
    p, q = np.full(N, -1, np.int32), np.full(N, -1, np.int32)
    g, h = poisoned((N,)), poisoned((N,))
    build(bit_atomics_kernel(N), target, backend)(k, o, p, q, f, g, h)
    assert o[0] == np.bitwise_or.reduce(k[::2]) and o[1] == np.bitwise_or.reduce(k[1::2])
    assert o[2] == np.bitwise_xor.reduce(k) and o[3] == np.bitwise_and.reduce(k | 0x10000)
    assert np.array_equal(p, k) and np.array_equal(q, k)
    close(g, f64(f) * 2, 0, 0)
    close(h, f64(f), 0, 0)


def test_bitwise_atomics_refuse_floats():
    with pytest.raises(CompileError, match=r"T.atomic_or takes an integer destination, got float32"):
        @T.prim_func
        def bad(A: T.Tensor((128,), "float32")):
            with T.Kernel(1, threads=128) as _bx:
                for i in T.Parallel(128):
                    T.atomic_or(A[0], A[i])


def barrier_kernel(N):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=N) as _bx:
            tx = T.get_thread_binding()
            S = T.alloc_shared((N,), "float32")
            T.assume(tx < N)
            S[tx] = A[tx] * 3
            T.sync_threads()
            B[tx] = S[N - 1 - tx] + S[(tx + 1) % N]

    return main


@pytest.mark.parametrize("target,backend", BACKENDS, ids=BACKEND_IDS)
def test_sync_threads_and_assume(rng, target, backend):
    N = 128
    a, b = rand(rng, (N,)), poisoned((N,))
    build(barrier_kernel(N), target, backend)(a, b)
    close(b, 3 * f64(a)[::-1] + 3 * np.roll(f64(a), -1), 1e-6, 1e-6)


def test_sync_grid_is_refused():
    with pytest.raises(CompileError, match=r"T.sync_grid\(\) needs a cooperative kernel launch"):
        @T.prim_func
        def grid(A: T.Tensor((128,), "float32")):
            with T.Kernel(4, threads=128) as _bx:
                T.sync_grid()


@needs_nvrtc
def test_atomics_and_barriers_compile_with_nvrtc(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path))
    for f in (bit_atomics_kernel(1024), barrier_kernel(128), scan_kernel(8, 64, "cumsum", "fragment", 1, True, False)):
        assert build(f, CUDA).get_code_object()[:4] == b"\x7fELF"


@needs_hip_compiler
def test_atomics_and_barriers_compile_for_gfx942(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path))
    for f in (bit_atomics_kernel(1024), barrier_kernel(128), scan_kernel(8, 64, "cummax", "shared", 0, False, True)):
        assert build(f, GFX942).get_code_object()[:4] == b"\x7fELF"


# ============================================================================================
# T.print


def print_kernel():
    @T.prim_func
    def main(A: T.Tensor((8,), "float32"), B: T.Tensor((8,), "float32")):
        with T.Kernel(2, threads=4) as bx:
            tx = T.get_thread_binding()
            S = T.alloc_shared((2, 4), "float32")
            F = T.alloc_fragment((8,), "float32")
            T.copy(A, F)
            T.print(A[tx] * 2, msg="twice 100%")
            T.print(msg="hello")
            T.print(bx * 10 + tx)
            for i, j in T.Parallel(2, 4):
                S[i, j] = A[i * 4 + j] + bx
            T.print(S)
            T.print(F, msg="frag")
            for i in T.Parallel(8):
                B[i] = F[i] + 1

    return main


def expected_print_lines(a):
    lines = []
    for b in range(2):
        for t in range(4):
            lines.append(f"twice 100%: block ({b}, 0, 0) thread {t}: {a[t] * 2:f}")
            lines.append(f"hello: block ({b}, 0, 0) thread {t}")
            lines.append(f"expr<bx * 10 + tx>: block ({b}, 0, 0) thread {t}: {b * 10 + t}")
        for i in range(8):
            lines.append(f"buffer<S, float32>: block ({b}, 0, 0) thread 0: {a[i] + b:f}")
            lines.append(f"frag: block ({b}, 0, 0) thread 0: {a[i]:f}")
    return sorted(lines)


@pytest.mark.parametrize("target,backend", BACKENDS[:2], ids=BACKEND_IDS[:2])
def test_print(rng, capsys, target, backend):
    a = rand(rng, (8,))
    b = poisoned((8,))
    k = build(print_kernel(), target, backend)
    capsys.readouterr()
    k(a, b)
    out = capsys.readouterr().out
    close(b, f64(a) + 1, 1e-6, 1e-6)
    assert sorted(out.strip().splitlines()) == expected_print_lines(a)


def test_print_is_refused_on_hip():
    with pytest.raises(CompileError, match=r"T.print is not available in the HIP backend"):
        build(printing_unary_kernel(128), GFX942, "emulator")


def printing_unary_kernel(N):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=N) as _bx:
            tx = T.get_thread_binding()
            T.print(A[tx], msg="a")

    return main


@needs_nvrtc
def test_print_compiles_with_nvrtc(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path))
    k = build(print_kernel(), CUDA)
    assert k.get_code_object()[:4] == b"\x7fELF"
    assert 'printf("twice 100%%: block (%d, %d, %d) thread %d: %f\\n"' in k.get_kernel_source()


def vote_kernel(N):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), AN: T.Tensor((N,), "int32"), AL: T.Tensor((N,), "int32"),
             BA: T.Tensor((N,), "uint64"), BH: T.Tensor((N,), "uint64"), AM: T.Tensor((N,), "uint64")):
        with T.Kernel(1, threads=N) as _bx:
            tx = T.get_thread_binding()
            p = A[tx] > 0
            AN[tx] = T.Cast("int32", T.any_sync(0xFFFFFFFF, p))
            AL[tx] = T.Cast("int32", T.all_sync(0xFFFFFFFF, A[tx] > -0.9))
            BA[tx] = T.ballot(p)
            BH[tx] = T.ballot_sync(0x0000FFFF, p)
            if tx % 3 != 0:
                AM[tx] = T.activemask()

    return main


def ref_votes(a, W):
    N = len(a)
    an, al = np.zeros(N, np.int64), np.zeros(N, np.int64)
    ba, bh, am = (np.zeros(N, np.uint64) for _ in range(3))
    for w0 in range(0, N, W):
        lanes = range(W)
        p = [a[w0 + l] > 0 for l in lanes]
        q = [a[w0 + l] > -0.9 for l in lanes]
        ballot = sum(1 << l for l in lanes if p[l])
        half = sum(1 << l for l in lanes if p[l] and l < 16)
        active = sum(1 << l for l in lanes if (w0 + l) % 3 != 0)
        for l in lanes:
            an[w0 + l], al[w0 + l], ba[w0 + l], bh[w0 + l] = any(p), all(q), ballot, half
            am[w0 + l] = active if (w0 + l) % 3 != 0 else 7
    return an, al, ba, bh, am


@pytest.mark.parametrize("target,backend", BACKENDS, ids=BACKEND_IDS)
def test_warp_votes(rng, target, backend):
    N = 256
    a = rand(rng, (N,), lo=-1.0, hi=1.0)
    a[64:128] = -np.abs(a[64:128]) - 0.01  # a warp (or half a wave) with no positive lane
    a[128:192] = np.abs(a[128:192]) + 0.01  # one where every lane is positive
    outs = [np.full(N, 7, np.int32), np.full(N, 7, np.int32)] + [np.full(N, 7, np.uint64) for _ in range(3)]
    build(vote_kernel(N), target, backend)(a, *outs)
    for got, want in zip(outs, ref_votes(a, WARP[target])):
        assert np.array_equal(got, want)


@needs_nvrtc
def test_votes_compile_with_nvrtc(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path))
    k = build(vote_kernel(128), CUDA)
    assert k.get_code_object()[:4] == b"\x7fELF" and "__ballot_sync(0xffffu" in k.get_kernel_source()


@needs_hip_compiler
def test_votes_compile_for_gfx942(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path))
    assert build(vote_kernel(128), GFX942).get_code_object()[:4] == b"\x7fELF"


# ============================================================================================
# reductions: bitwise, batch=, nan_propagate=


def bit_reduce_kernel(M, N, dim, clear, batch=1):
    @T.prim_func
    def main(A: T.Tensor((M, N), "int32"), RA: T.Tensor((M if dim == 1 else N,), "int32"),
             RO: T.Tensor((M if dim == 1 else N,), "int32"), RX: T.Tensor((M if dim == 1 else N,), "int32")):
        with T.Kernel(1, threads=128) as _bx:
            F = T.alloc_fragment((M, N), "int32")
            n = M if dim == 1 else N
            OA = T.alloc_fragment((n,), "int32")
            OO = T.alloc_fragment((n,), "int32")
            OX = T.alloc_fragment((n,), "int32")
            T.copy(A, F)
            T.copy(RA, OA)
            T.copy(RO, OO)
            T.copy(RX, OX)
            T.reduce_bitand(F, OA, dim=dim, clear=clear, batch=batch)
            T.reduce_bitor(F, OO, dim=dim, clear=clear)
            T.reduce_bitxor(F, OX, dim, clear)
            T.copy(OA, RA)
            T.copy(OO, RO)
            T.copy(OX, RX)

    return main


@pytest.mark.parametrize("target,backend", BACKENDS, ids=BACKEND_IDS)
@pytest.mark.parametrize("dim,clear", [(1, True), (0, False)])
def test_bitwise_reductions(rng, dim, clear, target, backend):
    M, N = 16, 64
    a = rng.integers(-(2**31), 2**31 - 1, (M, N)).astype(np.int32) | np.int32(0x100)
    n = M if dim == 1 else N
    ra, ro, rx = (rng.integers(-(2**31), 2**31 - 1, n).astype(np.int32) for _ in range(3))
    ra0, ro0, rx0 = ra.copy(), ro.copy(), rx.copy()
    build(bit_reduce_kernel(M, N, dim, clear), target, backend)(a, ra, ro, rx)
    wa, wo, wx = (f.reduce(a, axis=dim) for f in (np.bitwise_and, np.bitwise_or, np.bitwise_xor))
    if not clear:
        wa, wo, wx = wa & ra0, wo | ro0, wx ^ rx0
    assert np.array_equal(ra, wa) and np.array_equal(ro, wo) and np.array_equal(rx, wx)


def test_reduction_options():
    from tilewright.errors import TilewrightWarning

    with pytest.warns(TilewrightWarning, match=r"T.reduce_bitand\(batch=...\) has no effect"):
        bit_reduce_kernel(16, 64, 1, True, batch=2)
    with pytest.raises(CompileError, match=r"T.reduce_bitor takes an integer buffer"):
        @T.prim_func
        def bad(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64) as _bx:
                F = T.alloc_fragment((64,), "float32")
                O = T.alloc_fragment((1,), "float32")
                T.copy(A, F)
                T.reduce_bitor(F, O)


@needs_nvrtc
def test_bitwise_reductions_compile_with_nvrtc(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path))
    assert build(bit_reduce_kernel(16, 64, 1, True), CUDA).get_code_object()[:4] == b"\x7fELF"


@needs_hip_compiler
def test_bitwise_reductions_compile_for_gfx942(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path))
    assert build(bit_reduce_kernel(16, 64, 0, False), GFX942).get_code_object()[:4] == b"\x7fELF"


# ============================================================================================
# packed atomics, dp4a


def addx_kernel(M, N, n, bm=16, bn=32):
    fn = T.atomic_addx2 if n == 2 else T.atomic_addx4

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(M, bm), T.ceildiv(N, bn), threads=64) as (bx, by):
            for i, j in T.Parallel(bm, bn // n):
                fn(B[bx * bm + i, by * bn + j * n], A[bx * bm + i, by * bn + j * n])
                fn(B[bx * bm + i, by * bn + j * n], A[bx * bm + i, by * bn + j * n])

    return main


@pytest.mark.parametrize("target,backend", BACKENDS, ids=BACKEND_IDS)
@pytest.mark.parametrize("n", [2, 4])
def test_atomic_addx2_x4(rng, n, target, backend):
    M, N = 32, 64
    a, b = rand(rng, (M, N)), rand(rng, (M, N))
    b0 = b.copy()
    build(addx_kernel(M, N, n), target, backend)(a, b)
    close(b, f64(b0) + 2 * f64(a), 1e-6, 1e-6)


def dp4a_kernel(N):
    @T.prim_func
    def main(A: T.Tensor((N, 16), "int8"), B: T.Tensor((N, 16), "int8"), C: T.Tensor((N,), "int32")):
        with T.Kernel(1, threads=N) as _bx:
            tx = T.get_thread_binding()
            a = T.alloc_local((16,), "int8")
            b = T.alloc_local((16,), "int8")
            acc = T.alloc_local((1,), "int32")
            for k in T.serial(16):
                a[k] = A[tx, k]
                b[k] = B[tx, k]
            acc[0] = C[tx]
            for k in T.serial(4):
                T.dp4a(a[k * 4], b[k * 4], acc[0])
            C[tx] = acc[0]

    return main


@pytest.mark.parametrize("target,backend", BACKENDS, ids=BACKEND_IDS)
def test_dp4a(rng, target, backend):
    N = 128
    a = rng.integers(-128, 128, (N, 16)).astype(np.int8)
    b = rng.integers(-128, 128, (N, 16)).astype(np.int8)
    c = rng.integers(-1000, 1000, N).astype(np.int32)
    want = c.astype(np.int64) + (a.astype(np.int64) * b.astype(np.int64)).sum(1)
    build(dp4a_kernel(N), target, backend)(a, b, c)
    assert np.array_equal(c, want)


def test_clamp_with_one_bound(rng):
    N = 128
    a = rand(rng, (N,))
    for fn, ref in ((lambda x: T.clamp(x, min_val=0.25), lambda x: np.maximum(x, 0.25)),
                    (lambda x: T.clamp(x, max_val=-0.25), lambda x: np.minimum(x, -0.25))):
        for target, backend in BACKENDS:
            b = poisoned((N,))
            build(unary_kernel(N, fn), target, backend)(a, b)
            close(b, ref(f64(a)), 0, 0)


@needs_nvrtc
def test_addx_and_dp4a_compile_with_nvrtc(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path))
    for f in (addx_kernel(32, 64, 4), dp4a_kernel(128)):
        assert build(f, CUDA).get_code_object()[:4] == b"\x7fELF"


@needs_hip_compiler
def test_addx_and_dp4a_compile_for_gfx942(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path))
    for f in (addx_kernel(32, 64, 2), dp4a_kernel(128)):
        assert build(f, GFX942).get_code_object()[:4] == b"\x7fELF"


# ============================================================================================
# T.reshape / T.view


def view_kernel(M, N, scope):
    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((N // 4, M * 4), "float32"),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128) as _bx:
            if scope == "shared":
                S = T.alloc_shared((M, N), "float32")
            else:
                S = T.alloc_fragment((M, N), "float32")
            T.copy(A, S)
            V = T.reshape(S, (N // 4, M * 4))
            W = T.view(V, (M * N,))
            for i, j in T.Parallel(N // 4, M * 4):
                V[i, j] = V[i, j] * 2 + W[i * M * 4 + j]
            for i, j in T.Parallel(N // 4, M * 4):
                V[i, j] += 1.0
            for i, j in T.Parallel(N // 4, M * 4):
                B[i, j] = V[i, j]
            T.copy(S, C)  # the view's writes are the buffer's

    return main


@pytest.mark.parametrize("target,backend", BACKENDS, ids=BACKEND_IDS)
@pytest.mark.parametrize("scope", ["shared", "fragment"])
def test_reshape_and_view(rng, scope, target, backend):
    M, N = 8, 32
    a = rand(rng, (M, N))
    b, c = poisoned((N // 4, M * 4)), poisoned((M, N))
    build(view_kernel(M, N, scope), target, backend)(a, b, c)
    close(b, (3 * f64(a) + 1).reshape(N // 4, M * 4), 1e-6, 1e-6)
    close(c, 3 * f64(a) + 1, 1e-6, 1e-6)


def test_view_misuse_is_refused():
    def kernel(body):
        @T.prim_func
        def main(A: T.Tensor((8, 32), "float32")):
            with T.Kernel(1, threads=128) as _bx:
                S = T.alloc_shared((8, 32), "float32")
                body(A, S)

        return main

    with pytest.raises(CompileError, match=r"has 256 elements, shape \(16, 32\) has 512"):
        kernel(lambda A, S: T.reshape(S, (16, 32)))
    with pytest.raises(CompileError, match=r"kernel parameter with another dtype"):  # views of bits: test_view_bits.py
        kernel(lambda A, S: T.view(A, dtype="int32"))
    with pytest.raises(CompileError, match=r"slices of the view .* are not supported"):
        kernel(lambda A, S: T.copy(A[0, :], T.reshape(S, (256,))[0:32]))
    with pytest.raises(CompileError, match=r"the source has shape \(8, 32\) but the destination has shape \(32, 8\)"):
        kernel(lambda A, S: T.copy(A, T.reshape(S, (32, 8))))


@needs_nvrtc
def test_views_compile_with_nvrtc(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path))
    for scope in ("shared", "fragment"):
        assert build(view_kernel(8, 32, scope), CUDA).get_code_object()[:4] == b"\x7fELF"


@needs_hip_compiler
def test_views_compile_for_gfx942(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path))
    assert build(view_kernel(8, 32, "shared"), GFX942).get_code_object()[:4] == b"\x7fELF"


# ============================================================================================
# block votes


def block_vote_kernel(N):
    @T.prim_func
    def main(A: T.Tensor((2, N), "float32"), CNT: T.Tensor((2, 2, N), "int32"), ALL: T.Tensor((2, 2, N), "int32"),
             ANY: T.Tensor((2, 2, N), "int32")):
        with T.Kernel(2, threads=N) as bx:
            tx = T.get_thread_binding()
            for r in T.serial(2):  # votes in a loop: the scratch is reused
                CNT[bx, r, tx] = T.syncthreads_count(A[r, tx] > bx * 0.5)
                ALL[bx, r, tx] = T.syncthreads_and(A[r, tx] > -2.0)
                ANY[bx, r, tx] = T.syncthreads_or(A[r, tx] > 0.99 + bx)

    return main


@pytest.mark.parametrize("target,backend", BACKENDS, ids=BACKEND_IDS)
def test_block_votes(rng, target, backend):
    N = 128
    a = rand(rng, (2, N))
    a[1, 5] = -3.0  # row 1: not every thread above -2
    a[0, 7] = 0.995  # row 0: a thread above 0.99 (for block 0; none above 1.99 for block 1)
    outs = [np.full((2, 2, N), -1, np.int32) for _ in range(3)]
    build(block_vote_kernel(N), target, backend)(a, *outs)
    for bx in range(2):
        for r in range(2):
            assert (outs[0][bx, r] == int((a[r] > bx * 0.5).sum())).all()
            assert (outs[1][bx, r] == int((a[r] > -2.0).all())).all()
            assert (outs[2][bx, r] == int((a[r] > 0.99 + bx).any())).all()
    assert outs[1][0, 0, 0] == 1 and outs[1][0, 1, 0] == 0 and outs[2][0, 0, 0] == 1 and outs[2][1, 0, 0] == 0


@needs_nvrtc
def test_block_votes_compile_with_nvrtc(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path))
    assert build(block_vote_kernel(128), CUDA).get_code_object()[:4] == b"\x7fELF"


@pytest.mark.parametrize("name,call", [
    ("T.named_barrier_arrive", lambda: T.named_barrier_arrive(1, 128)),
])
def test_unsupported_names_are_refused_by_name(name, call):
    with pytest.raises(CompileError, match=rf"{name} .*not supported") as e:
        @T.prim_func
        def main(A: T.Tensor((128,), "float32")):
            with T.Kernel(1, threads=128) as _bx:
                call()
    assert "hint:" in str(e.value) and "line" in str(e.value)
