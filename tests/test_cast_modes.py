"""TileLang's ``T.cast(value, dtype, round=..., sat=..., rbits=...)`` and ``T.round(x, mode)``:
directed conversions to float16/bfloat16 bit for bit against an exact rational reference,
non-saturating fp8 conversions, rounding to integers with halves to even (TileLang's default) or
away from zero, on the tile interpreter and the emulator for sm_90a and gfx942 (outputs poisoned
first); the generated CUDA compiled by NVRTC; the argument errors TileLang's tests expect; and the
same kernels on an NVIDIA GPU where there is one.
"""

from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from toolchains import needs_nvrtc

import tilewright
import tilewright.language as T
from tilewright.errors import CompileError

CUDA, GFX942 = "cuda -arch=sm_90a", "hip -arch=gfx942"
BACKENDS = [("interpret", None), (CUDA, "emulator"), (GFX942, "emulator")]
BACKEND_IDS = ["interpret", "emulator-sm_90a", "emulator-gfx942"]
NP = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float32": np.float32,
      "float8_e4m3fn": ml_dtypes.float8_e4m3fn, "float8_e5m2": ml_dtypes.float8_e5m2}


@pytest.fixture
def rng():
    return np.random.default_rng(7)


def every_value(dtype):
    """All finite values of a 16-bit float type, as float64, sorted."""
    with np.errstate(invalid="ignore"):  # the NaN patterns
        v = np.arange(1 << 16, dtype=np.uint16).view(NP[dtype]).astype(np.float64)
    return np.unique(v[np.isfinite(v)])


def directed_reference(x, dtype, mode):
    """Each float32 of ``x`` rounded to ``dtype`` in ``mode`` by search among every value of the
    type (an independent reference: no bit tricks), infinity past the largest finite value."""
    grid = every_value(dtype)
    out = []
    for v in x.astype(np.float64):
        lo_i = np.searchsorted(grid, v, side="right") - 1  # grid[lo_i] <= v
        lo = grid[lo_i] if lo_i >= 0 else -np.inf
        hi = lo if lo == v else (grid[lo_i + 1] if lo_i + 1 < len(grid) else np.inf)
        if mode == "rm":
            r = lo
        elif mode == "rp":
            r = hi
        else:
            r = lo if v >= 0 else hi
        if r == 0 and (v < 0 or (r == v and np.signbit(v))):
            r = -0.0
        out.append(r)
    return np.array(out).astype(NP[dtype])


def cast_kernel(N, src, dst, **kw):
    @T.prim_func
    def main(A: T.Tensor((N,), src), B: T.Tensor((N,), dst)):
        with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
            for i in T.Parallel(128):
                B[bx * 128 + i] = T.cast(A[bx * 128 + i], dst, **kw)

    return main


def directed_inputs(rng, dtype, n=512):
    top = float(ml_dtypes.finfo(NP[dtype]).max)
    x = rng.standard_normal(n) * np.exp2(rng.integers(-20, 16, n))
    x[:8] = [top * 1.001, -top * 1.001, 1e-9, -1e-9, 0.0, -0.0, top, 3.0]  # overflow, underflow, exact
    return x.astype(np.float32)


def same_bits(a, b):
    return np.array_equal(np.asarray(a).view(np.uint16), np.asarray(b).view(np.uint16))


@pytest.mark.parametrize("target,backend", BACKENDS[:2], ids=BACKEND_IDS[:2])
@pytest.mark.parametrize("mode", ["rz", "rp", "rm"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_directed_casts(rng, dtype, mode, target, backend):
    x = directed_inputs(rng, dtype)
    b = np.full(len(x), np.nan).astype(NP[dtype])
    tilewright.compile(cast_kernel(len(x), "float32", dtype, round=mode), target=target, execution_backend=backend)(x, b)
    assert same_bits(b, directed_reference(x, dtype, mode))


def test_directed_casts_refused_where_they_cannot_be_done():
    with pytest.raises(CompileError, match=r"round='rz'.*not available in the HIP backend"):
        tilewright.compile(cast_kernel(128, "float32", "float16", round="rz"), target=GFX942)
    with pytest.raises(CompileError, match=r"round='rp'\) from float32 to float8_e4m3fn is not supported"):
        cast_kernel(128, "float32", "float8_e4m3fn", round="rp")
    with pytest.raises(CompileError, match=r"round='rs'\) \(stochastic rounding"):
        cast_kernel(128, "float32", "float16", round="rs", rbits=T.uint32(7))


@pytest.mark.parametrize("target,backend", BACKENDS, ids=BACKEND_IDS)
@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2"])
def test_fp8_without_saturation(rng, dtype, target, backend):
    top = float(ml_dtypes.finfo(NP[dtype]).max)
    x = (rng.standard_normal(256) * 4).astype(np.float32)
    x[:4] = [top * 4, -top * 4, np.inf, top]
    b = np.zeros(256, NP[dtype])
    tilewright.compile(cast_kernel(256, "float32", dtype, sat=False), target=target, execution_backend=backend)(x, b)
    want = x.astype(NP[dtype])  # ml_dtypes converts without saturating
    got, ref = b.astype(np.float64), want.astype(np.float64)
    assert np.array_equal(got, ref, equal_nan=True)
    assert (np.isnan(got[0]) and np.isnan(got[1])) if dtype == "float8_e4m3fn" else (got[0] == np.inf)


@pytest.mark.parametrize("target,backend", BACKENDS, ids=BACKEND_IDS)
def test_plain_cast_keywords_change_nothing(rng, target, backend):
    x = (rng.standard_normal(256) * 100).astype(np.float32)
    for kw in ({}, {"round": "rn"}, {"sat": True}, {"round": "", "sat": False}):
        b = np.full(256, np.nan, np.float16)
        tilewright.compile(cast_kernel(256, "float32", "float16", **kw), target=target, execution_backend=backend)(x, b)
        assert same_bits(b, x.astype(np.float16)), kw


def test_argument_errors_use_tilelang_wording():
    for kw, msg in (({"round": "invalid"}, "Invalid round"), ({"sat": "invalid"}, "Invalid sat"),
                    ({"round": "rs"}, "rbits is required"), ({"round": "rn", "rbits": 42}, "rbits is only valid")):
        with pytest.raises(ValueError, match=msg):
            T.cast(1.0, "float8_e4m3fn", **kw)
    T.cast(T.float32(1.0), "float8_e4m3fn", sat=True)
    T.cast(T.float32(1.0), "float8_e4m3fn", sat=False)


# ============================================================================================
# T.round: halves to even by default (TileLang), away from zero on request


def round_kernel(N, mode, dtype="float32"):
    @T.prim_func
    def main(A: T.Tensor((N,), dtype), B: T.Tensor((N,), dtype)):
        with T.Kernel(1, threads=128):
            for i in T.Parallel(N):
                B[i] = T.round(A[i]) if mode is None else T.round(A[i], mode)

    return main


@pytest.mark.parametrize("target,backend", BACKENDS, ids=BACKEND_IDS)
@pytest.mark.parametrize("mode", [None, "ties-to-even", "ties-away-from-zero"])
def test_round_modes(rng, mode, target, backend):
    x = (rng.standard_normal(128) * 10).astype(np.float32)
    x[:8] = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, -3.5]
    b = np.full(128, np.nan, np.float32)
    tilewright.compile(round_kernel(128, mode), target=target, execution_backend=backend)(x, b)
    exact = [Fraction(float(v)) for v in x]
    if mode == "ties-away-from-zero":
        want = [float((abs(q) + Fraction(1, 2)).__floor__() * (1 if q >= 0 else -1)) for q in exact]
    else:
        want = [float(round(q)) for q in exact]  # Python rounds a Fraction's halves to even
    assert np.array_equal(b, np.array(want, np.float32))


def test_round_refuses_other_modes():
    with pytest.raises(ValueError, match="Unsupported T.round rounding_mode 'up'"):
        T.round(1.5, "up")


@needs_nvrtc
def test_cuda_source_and_compile(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path))
    checks = [(cast_kernel(256, "float32", "float16", round="rz"), "__float2half_rz("),
              (cast_kernel(256, "float32", "bfloat16", round="rm"), "__float2bfloat16_rd("),
              (cast_kernel(256, "float32", "float8_e4m3fn", sat=False), "__NV_NOSAT"),
              (round_kernel(128, None), "nearbyintf("),
              (round_kernel(128, "ties-away-from-zero"), "tw_RoundTiesAwayFromZero("),
              (round_kernel(128, "ties-away-from-zero", "bfloat16"), "tw_RoundTiesAwayFromZero(")]
    for func, name in checks:
        k = tilewright.compile(func, target=CUDA)
        assert k.get_code_object()[:4] == b"\x7fELF"
        assert name in k.get_kernel_source(), name


def test_on_gpu(rng):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU with a CUDA build of PyTorch")
    for dtype, tdt in (("float16", torch.float16), ("bfloat16", torch.bfloat16)):
        for mode in ("rz", "rp", "rm"):
            x = directed_inputs(rng, dtype)
            out = torch.full((len(x),), float("nan"), dtype=tdt, device="cuda")
            tilewright.compile(cast_kernel(len(x), "float32", dtype, round=mode), target="cuda")(
                torch.from_numpy(x).cuda(), out)
            got = out.cpu().view(torch.int16).numpy().view(np.uint16)
            assert np.array_equal(got, directed_reference(x, dtype, mode).view(np.uint16)), (dtype, mode)
    for dtype, tdt in (("float8_e4m3fn", torch.float8_e4m3fn), ("float8_e5m2", torch.float8_e5m2)):
        x = (rng.standard_normal(256) * 4).astype(np.float32)
        x[:3] = [1e6, -1e6, np.inf]
        out = torch.zeros((256,), dtype=tdt, device="cuda")
        tilewright.compile(cast_kernel(256, "float32", dtype, sat=False), target="cuda")(torch.from_numpy(x).cuda(), out)
        got = out.float().cpu().numpy().astype(np.float64)
        assert np.array_equal(got, x.astype(NP[dtype]).astype(np.float64), equal_nan=True), dtype


def test_fp8_constants_keep_their_value_on_cuda():
    """An fp8 constant is printed by its bits: CUDA's __nv_fp8_* constructors saturate, so
    T.infinity("float8_e5m2") came out as 57344 on the H200 (TileLang's test_infinity) while the CPU
    backends gave inf.  (float8_e4m3fn has no infinity: T.infinity refuses it, tests/test_s7_fp8_*.)"""
    dtype, ctype = "float8_e5m2", "__nv_fp8_e5m2"

    @T.prim_func
    def fill_inf(A: T.Tensor((32,), dtype)):
        with T.Kernel(1, threads=32):
            T.fill(A, T.infinity(dtype))

    k = tilewright.compile(fill_inf, out_idx=-1, target="cuda -arch=sm_90a", execution_backend="emulator")
    src = k.get_kernel_source()
    assert f"tw_from_bits8<{ctype}>(0x7c)" in src and f"{ctype}(tw_inf())" not in src
    got = np.asarray(k()).astype(np.float32)
    assert np.isinf(got).all() and (got > 0).all()
