"""TileLang's ``T.ieee_*`` arithmetic on float64 (all four rounding modes), float16 and bfloat16
(round to nearest, as CUDA's ``__hadd`` family): the NumPy models against exact rational
arithmetic, then kernels on the tile interpreter and the emulator of the lowered code for sm_90a
and gfx942 with outputs poisoned before each run, bit for bit against the exact answer; the
generated CUDA compiled by NVRTC and the HIP by clang; the errors TileLang's tests expect; and the
same kernels on an NVIDIA GPU where there is one.
"""

from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from toolchains import needs_hip_compiler, needs_nvrtc

import tilewright
import tilewright.language as T
from tilewright.errors import CompileError
from tilewright.interp import ieee_exact, ieee_rounding

CUDA, GFX942 = "cuda -arch=sm_90a", "hip -arch=gfx942"
BACKENDS = [("interpret", None), (CUDA, "emulator"), (GFX942, "emulator")]
BACKEND_IDS = ["interpret", "emulator-sm_90a", "emulator-gfx942"]
OPS = ["add", "sub", "mul", "fmaf", "fdiv", "frcp", "fsqrt"]
MODES = ["rn", "rz", "ru", "rd"]
NP = {"float64": np.float64, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
FORMAT = {"float64": (53, -1022, 1023), "float16": (11, -14, 15), "bfloat16": (8, -126, 127)}  # bits, emin, emax


# ============================================================================================
# an independent exact reference: the value rounded to the format by brute comparison


def exact_value(op, args):
    """The exact result as a Fraction, or for square roots (sqrt, 1/sqrt) the pair (op, x)."""
    f = [Fraction(float(v)) for v in args]
    if op in ("fsqrt", "frsqrt"):
        return (op, f[0])
    return {"add": lambda: f[0] + f[1], "sub": lambda: f[0] - f[1], "mul": lambda: f[0] * f[1],
            "fmaf": lambda: f[0] * f[1] + f[2], "fdiv": lambda: f[0] / f[1], "frcp": lambda: 1 / f[0]}[op]()


def below(c: Fraction, q) -> bool:
    """Whether the candidate c lies below the exact value q (a Fraction or a root pair), or equals it."""
    if isinstance(q, tuple):
        op, x = q
        if op == "fsqrt":
            return c < 0 or c * c <= x
        return c <= 0 or c * c * x <= 1  # c <= 1/sqrt(x)
    return c <= q


def equal(c: Fraction, q) -> bool:
    if isinstance(q, tuple):
        op, x = q
        return c * c == x if op == "fsqrt" else c * c * x == 1
    return c == q


def neighbours(dtype, approx: float):
    """Every value of ``dtype`` within a few steps of ``approx`` (the exact answer's neighbourhood)."""
    p, emin, emax = FORMAT[dtype]
    e = max(math.frexp(approx)[1] - 1, emin) if approx else emin
    ulp = Fraction(2) ** (e - p + 1)
    base = Fraction(approx) // ulp * ulp
    top = (2 - Fraction(2) ** (1 - p)) * Fraction(2) ** emax
    return [c for c in (base + k * ulp for k in range(-3, 4)) if abs(c) <= top]


def round_exact(dtype, q, mode, approx: float) -> float:
    """The value of ``dtype`` that ``mode`` rounds the exact ``q`` to (finite cases)."""
    cands = sorted(neighbours(dtype, approx))
    lo = max(c for c in cands if below(c, q))
    if equal(lo, q):
        return float(lo)
    hi = min(c for c in cands if c > lo)
    if mode == "rd":
        return float(lo)
    if mode == "ru":
        return float(hi)
    if mode == "rz":
        return float(lo if lo >= 0 else hi)
    # to nearest: compare the exact value with the midpoint, ties to the even significand
    mid = (lo + hi) / 2
    if equal(mid, q):
        p = FORMAT[dtype][0]
        e = max(math.frexp(float(lo) or float(hi))[1] - 1, FORMAT[dtype][1])
        k = lo / Fraction(2) ** (e - p + 1)
        return float(lo if k.numerator % 2 == 0 else hi)
    return float(lo if not below(mid, q) else hi)


def approx_of(q) -> float:
    """A float64 within a step of the exact value (CPython rounds a Fraction correctly)."""
    if isinstance(q, tuple):
        op, x = q
        return math.sqrt(x) if op == "fsqrt" else 1 / math.sqrt(x)
    return float(q)


def reference(dtype, op, mode, args) -> np.ndarray:
    qs = [exact_value(op, vals) for vals in zip(*args)]
    out = [round_exact(dtype, q, mode, approx_of(q)) for q in qs]
    return np.array(out, np.float64).astype(NP[dtype])


def inputs(rng, dtype, op, n):
    """Operands with wide exponent gaps (so that sums round far from the larger operand), positive
    where the operation needs it, never zero divisors."""
    spread = 30 if dtype == "float64" else 6
    x = rng.standard_normal(n) * np.exp2(rng.integers(-spread, spread, n))
    y = rng.standard_normal(n) * np.exp2(rng.integers(-spread, spread, n))
    z = rng.standard_normal(n)
    if op in ("fsqrt", "frsqrt", "frcp"):
        x = np.abs(x) + 0.01
    if op == "fdiv":
        y = np.where(np.abs(y) < 1e-3, 0.5, y)
    return tuple(v.astype(NP[dtype]) for v in (x, y, z))


def operands(op, x, y, z):
    return {"frcp": (x,), "fsqrt": (x,), "frsqrt": (x,), "fmaf": (x, y, z)}.get(op, (x, y))


def same_bits(got, want) -> bool:
    g, w = np.asarray(got), np.asarray(want)
    return np.array_equal(g.view(f"u{g.itemsize}"), w.view(f"u{w.itemsize}"))


@pytest.fixture
def rng():
    return np.random.default_rng(2026)


# ============================================================================================
# the NumPy models


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("op", OPS)
def test_float64_model_is_exact(rng, op, mode):
    x, y, z = inputs(rng, "float64", op, 300)
    args = operands(op, x, y, z)
    got = ieee_exact.float64_op(op, mode, *args)
    assert same_bits(got, reference("float64", op, mode, args)), (op, mode)


def test_float64_model_special_values():
    f = ieee_exact.float64_op
    big, tiny = np.finfo(np.float64).max, 5e-324
    assert f("mul", "rn", big, 2.0) == np.inf and f("mul", "rz", big, 2.0) == big
    assert f("mul", "ru", -big, 2.0) == -big and f("mul", "rd", -big, 2.0) == -np.inf
    assert f("mul", "ru", tiny, 0.5) == tiny and f("mul", "rd", tiny, 0.5) == 0.0
    assert f("mul", "rn", tiny, 0.75) == tiny and f("mul", "rn", tiny, 0.5) == 0.0  # the tie goes to even 0
    assert math.copysign(1, f("add", "rd", 1.0, -1.0)) == -1 and math.copysign(1, f("add", "rn", 1.0, -1.0)) == 1
    assert math.copysign(1, f("add", "ru", -0.0, -0.0)) == -1
    assert np.isnan(f("fsqrt", "ru", -1.0)) and f("fdiv", "rz", 1.0, 0.0) == np.inf
    assert f("add", "rz", np.inf, 1.0) == np.inf and np.isnan(f("fmaf", "rn", np.inf, 0.0, 1.0))
    assert f("fsqrt", "rd", 4.0) == 2.0 and f("fsqrt", "ru", 2.0) == math.sqrt(2)  # above the root
    assert f("fsqrt", "rd", 2.0) == np.nextafter(math.sqrt(2), 0)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("op", OPS + ["frsqrt"])
def test_half_models_are_exact(rng, dtype, op):
    """16-bit results: the float32 model rounded to odd, then once to the 16-bit type."""
    x, y, z = inputs(rng, dtype, op, 400)
    args = operands(op, x, y, z)
    fn = ieee_rounding.ieee_function(f"ieee_{op}_rn", dtype)
    got = np.asarray(fn(*[a.astype(np.float32) for a in args]), np.float32).astype(NP[dtype])
    assert same_bits(got, reference(dtype, op, "rn", args)), (dtype, op)


def test_half_fma_double_rounding_case():
    """A sum that float32 rounds onto a float16 midpoint (found by search): rounding to odd keeps the
    side the exact value is on; plain float32 then float16 would take the tie to even."""
    x, y, z = np.float16(1.9619140625), np.float16(0.00024890899658203125), np.float16(1.0)
    exact = np.float64(x) * np.float64(y) + np.float64(z)  # exact in float64 (33 significant bits)
    assert np.float32(exact).astype(np.float16) != exact.astype(np.float16)  # the trap is real
    fn = ieee_rounding.ieee_function("ieee_fmaf_rn", "float16")
    got = np.float32(fn(np.float32(x), np.float32(y), np.float32(z))).astype(np.float16)
    assert got == exact.astype(np.float16)


# ============================================================================================
# kernels


def ieee_kernel(N, op, mode, dtype):
    fn = getattr(T, f"ieee_{op}")
    arity = {"frcp": 1, "fsqrt": 1, "frsqrt": 1, "fmaf": 3}.get(op, 2)

    @T.prim_func
    def main(X: T.Tensor((N,), dtype), Y: T.Tensor((N,), dtype), Z: T.Tensor((N,), dtype),
             R: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
            for i in T.Parallel(128):
                g = bx * 128 + i
                if op == "frsqrt":
                    R[g] = fn(X[g])
                elif arity == 1:
                    R[g] = fn(X[g], mode)
                elif arity == 2:
                    R[g] = fn(X[g], Y[g], rounding_mode=mode)
                else:
                    R[g] = fn(X[g], Y[g], Z[g], mode)

    return main


def run(target, backend, op, mode, dtype, args3):
    N = len(args3[0])
    r = np.full(N, np.nan).astype(NP[dtype])
    tilewright.compile(ieee_kernel(N, op, mode, dtype), target=target, execution_backend=backend)(*args3, r)
    return r


@pytest.mark.parametrize("target,backend", BACKENDS, ids=BACKEND_IDS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("op", OPS)
def test_float64_kernels(rng, op, mode, target, backend):
    if target == GFX942 and mode != "rn":
        with pytest.raises(CompileError, match=rf"T.ieee_{op}.*rounding_mode='{mode}'.*HIP"):
            tilewright.compile(ieee_kernel(128, op, mode, "float64"), target=target, execution_backend=backend)
        return
    x, y, z = inputs(rng, "float64", op, 128)
    r = run(target, backend, op, mode, "float64", (x, y, z))
    assert same_bits(r, reference("float64", op, mode, operands(op, x, y, z)))


@pytest.mark.parametrize("target,backend", BACKENDS, ids=BACKEND_IDS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("op", OPS + ["frsqrt"])
def test_half_kernels(rng, op, dtype, target, backend):
    x, y, z = inputs(rng, dtype, op, 128)
    r = run(target, backend, op, "rn", dtype, (x, y, z))
    assert same_bits(r, reference(dtype, op, "rn", operands(op, x, y, z)))


# ============================================================================================
# errors (TileLang's wording where its tests match on it)


def test_invalid_rounding_mode_is_a_value_error():
    for call in (lambda: T.ieee_add(1.0, 2.0, "invalid_mode"), lambda: T.ieee_mul(1.0, 2.0, "xy"),
                 lambda: T.ieee_fsqrt(4.0, "bad_mode")):
        with pytest.raises(ValueError, match="Invalid rounding mode"):
            call()
    with pytest.raises(CompileError, match=r"Invalid rounding mode 'up'[\s\S]*use 'rn'"):
        ieee_kernel(128, "add", "up", "float32")


def test_refusals_name_the_problem():
    with pytest.raises(CompileError, match="frsqrt is not supported for float64"):
        ieee_kernel(128, "frsqrt", "rn", "float64")
    for dtype in ("float16", "bfloat16"):
        with pytest.raises(CompileError, match="Only rounding mode 'rn' is available for half precision"):
            ieee_kernel(128, "add", "rz", dtype)
    with pytest.raises(CompileError, match=r"T.ieee_add computes in float32, float64, float16 or bfloat16.*int32"):
        ieee_kernel(128, "add", "rn", "int32")
    with pytest.raises(CompileError, match=r"different types \(float32 and float64\)"):
        _mixed_kernel()


def _mixed_kernel():
    @T.prim_func
    def main(A: T.Tensor((128,), "float32"), B: T.Tensor((128,), "float64")):
        with T.Kernel(1, threads=128):
            for i in T.Parallel(128):
                B[i] = T.ieee_add(A[i], B[i])

    return main


# ============================================================================================
# generated code


def all_ops_kernel(dtype, modes):
    @T.prim_func
    def main(A: T.Tensor((256,), dtype), B: T.Tensor((256,), dtype), C: T.Tensor((256,), dtype)):
        with T.Kernel(2, threads=128) as bx:
            for i in T.Parallel(128):
                g = bx * 128 + i
                x, y = A[g], B[g]
                v = x
                for m in modes:
                    v = v + T.ieee_add(x, y, m) + T.ieee_sub(x, y, m) + T.ieee_mul(x, y, m)
                    v = v + T.ieee_fmaf(x, y, v, m) + T.ieee_fdiv(x, y, m) + T.ieee_frcp(y, m) + T.ieee_fsqrt(y, m)
                if dtype != "float64":
                    v = v + T.ieee_frsqrt(y)
                C[g] = v

    return main


@needs_nvrtc
@pytest.mark.parametrize("dtype", ["float64", "float16", "bfloat16"])
def test_cuda_compiles(tmp_path, monkeypatch, dtype):
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path))
    k = tilewright.compile(all_ops_kernel(dtype, MODES if dtype == "float64" else ["rn"]), target=CUDA)
    assert k.get_code_object()[:4] == b"\x7fELF"
    src = k.get_kernel_source()
    names = (["__dadd_rz(", "__dsub_ru(", "__dmul_rd(", "__fma_rz(", "__ddiv_ru(", "__drcp_rd(", "__dsqrt_rn("]
             if dtype == "float64" else ["__hadd(", "__hsub(", "__hmul(", "__hfma(", "__fdiv_rn(", "__fsqrt_rn("])
    for name in names:
        assert name in src, name


@needs_hip_compiler
@pytest.mark.parametrize("dtype", ["float64", "float16", "bfloat16"])
def test_hip_compiles(tmp_path, monkeypatch, dtype):
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path))
    k = tilewright.compile(all_ops_kernel(dtype, ["rn"]), target=GFX942)
    assert k.get_code_object()[:4] == b"\x7fELF"
    src = k.get_kernel_source()
    assert ("tw_ieee_dadd_rn(" if dtype == "float64" else "tw_ieee_fma_odd(") in src


# ============================================================================================
# on an NVIDIA GPU (skipped without one): the hardware's intrinsics against the exact answer


def _cuda_device():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU with a CUDA build of PyTorch")
    return torch


@pytest.mark.parametrize("dtype,mode", [("float64", m) for m in MODES] + [("float16", "rn"), ("bfloat16", "rn")])
@pytest.mark.parametrize("op", OPS)
def test_on_gpu(rng, op, dtype, mode):
    torch = _cuda_device()
    x, y, z = inputs(rng, dtype, op, 1024)
    tdt = {"float64": torch.float64, "float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
    dev = [torch.from_numpy(np.asarray(v, np.float64)).to(tdt).cuda() for v in (x, y, z)]
    r = torch.full((1024,), float("nan"), dtype=tdt, device="cuda")
    tilewright.compile(ieee_kernel(1024, op, mode, dtype), target="cuda")(*dev, r)
    got = r.float().cpu().numpy().astype(NP[dtype]) if dtype != "float64" else r.cpu().numpy()
    assert same_bits(got, reference(dtype, op, mode, operands(op, x, y, z)))
