"""``tl.enable_fast_math`` (TileLang's pass config; also ``tw.fast_math``): the float32 math calls with a
fast spelling take it (``T.exp2`` -> ``T.__exp2``: ``ex2.approx.ftz`` on CUDA), float64 keeps the accurate
functions, and nothing else changes.  Checked on the generated CUDA and HIP (built by NVRTC / clang), on the
emulator of the lowered code for sm_90a and gfx942 against float64 with NaN-poisoned outputs, on TileLang's
flash-attention program, and on an NVIDIA GPU where there is one (the hardware approximations against
float64)."""

from __future__ import annotations

import numpy as np
import pytest
from toolchains import needs_hip_compiler, needs_nvrtc

import tilewright
import tilewright.language as T

CUDA, GFX942 = "cuda -arch=sm_90a", "hip -arch=gfx942"
FAST = {"tl.enable_fast_math": True}
FUNCS = ["exp", "exp2", "log", "log2", "log10", "sin", "cos", "tan"]
ACCURATE_CUDA = {"exp": "expf(", "exp2": "exp2f(", "log": "logf(", "log2": "log2f(", "log10": "log10f(",
                 "sin": "sinf(", "cos": "cosf(", "tan": "tanf("}
FAST_CUDA = {"exp": "__expf(", "exp2": "tw_ex2_approx(", "log": "__logf(", "log2": "__log2f(",
             "log10": "__log10f(", "sin": "__sinf(", "cos": "__cosf(", "tan": "__tanf("}


@pytest.fixture
def rng():
    return np.random.default_rng()  # fresh inputs each run


def math_kernel(n, dtype="float32"):
    @T.prim_func
    def main(X: T.Tensor((n,), dtype), Y: T.Tensor((len(FUNCS), n), dtype)):
        with T.Kernel(T.ceildiv(n, 128), threads=128) as bx:
            for i in T.Parallel(128):
                g = bx * 128 + i
                if g < n:
                    x = X[g]
                    Y[0, g] = T.exp(x)
                    Y[1, g] = T.exp2(x)
                    Y[2, g] = T.log(x)
                    Y[3, g] = T.log2(x)
                    Y[4, g] = T.log10(x)
                    Y[5, g] = T.sin(x)
                    Y[6, g] = T.cos(x)
                    Y[7, g] = T.tan(x)

    return main


def reference(x):
    x = x.astype(np.float64)
    return np.stack([np.exp(x), np.exp2(x), np.log(x), np.log2(x), np.log10(x), np.sin(x), np.cos(x), np.tan(x)])


def _check(y, x):
    ref = reference(x)
    assert not np.isnan(y).any()
    # the hardware approximations: a few ulp relative for exp/exp2/log (their arguments here keep the
    # absolute error of __logf near 1 small), about 2**-21.4 absolute for sin/cos on [-pi, pi]
    np.testing.assert_allclose(y[:7], ref[:7], rtol=2e-5, atol=2e-6)
    # __tanf is __sinf / __cosf: near pi/2 the absolute error of cos grows into tan's by tan's slope 1 + tan**2
    # (the H200: 6e-5 relative at tan 357)
    tan_err = np.abs(y[7] - ref[7])
    assert (tan_err <= 2e-5 * np.abs(ref[7]) + 4e-6 * (1 + ref[7] ** 2)).all(), tan_err.max()


def _inputs(rng, n):
    return rng.uniform(0.25, 3.0, n).astype(np.float32)


@needs_nvrtc
def test_cuda_takes_the_fast_spellings_under_the_option(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path))
    plain = tilewright.compile(math_kernel(1000), target=CUDA).get_kernel_source()
    fast = tilewright.compile(math_kernel(1000), target=CUDA, pass_configs=FAST)
    src = fast.get_kernel_source()
    assert fast.get_code_object()[:4] == b"\x7fELF"
    for f in FUNCS:
        assert ACCURATE_CUDA[f] in plain and FAST_CUDA[f] not in plain, f
        assert FAST_CUDA[f] in src, f
    assert "ex2.approx.ftz.f32" in src
    # the other spelling of the option, and float64 untouched
    assert tilewright.compile(math_kernel(1000), target=CUDA,
                              pass_configs={"tw.fast_math": True}).get_kernel_source() == src
    src64 = tilewright.compile(math_kernel(1000, "float64"), target=CUDA, pass_configs=FAST).get_kernel_source()
    assert "__expf(" not in src64 and "tw_ex2_approx(" not in src64 and "exp2(" in src64


@needs_hip_compiler
def test_hip_builds_under_the_option(tmp_path, monkeypatch):
    """On HIP the fast spellings are the prelude's functions, as the accurate ones (clang lowers both
    to the GPU's instructions): the option builds and changes nothing there."""
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path))
    k = tilewright.compile(math_kernel(1000), target=GFX942, pass_configs=FAST)
    assert k.get_code_object()[:4] == b"\x7fELF"
    src = k.get_kernel_source()
    for name in ("tw_expf(", "tw_exp2f(", "tw_logf(", "tw_sinf("):
        assert name in src, name


@pytest.mark.parametrize("target", [CUDA, GFX942])
def test_fast_math_on_the_emulator_against_float64(rng, target):
    n = 1000
    x = _inputs(rng, n)
    y = np.full((len(FUNCS), n), np.nan, np.float32)
    tilewright.compile(math_kernel(n), target=target, execution_backend="emulator", pass_configs=FAST)(x, y)
    _check(y, x)


def test_flash_attention_program_with_fast_math_on_the_emulator(rng):
    """TileLang's flash-attention program unchanged, compiled with the option for sm_90a: its softmax takes
    ex2.approx, and the output matches float64 within the attention bar (3e-3)."""
    from tilewright.kernels import flash_attention

    B, H, S, D = 1, 2, 128, 64
    f = flash_attention(B, H, S, D, is_causal=True, block_M=64, block_N=64, num_stages=2, threads=128)
    k = tilewright.compile(f, target=CUDA, execution_backend="emulator", pass_configs=FAST)
    assert "tw_ex2_approx(" in k.get_kernel_source() and "exp2f(" not in k.get_kernel_source()
    q, kk, v = (rng.standard_normal((B, S, H, D)).astype(np.float16) for _ in range(3))
    out = np.full((B, S, H, D), np.nan, np.float16)
    k(q, kk, v, out)
    q64, k64, v64 = (a.astype(np.float64).transpose(0, 2, 1, 3) for a in (q, kk, v))
    s = q64 @ k64.transpose(0, 1, 3, 2) / np.sqrt(D)
    s = np.where(np.tril(np.ones((S, S), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    ref = ((p / p.sum(-1, keepdims=True)) @ v64).transpose(0, 2, 1, 3)
    err = np.abs(out.astype(np.float64) - ref).max() / np.abs(ref).max()
    assert err < 3e-3, err


def test_the_option_is_honoured_not_reported_as_without_effect():
    from tilewright import compat

    assert "tl.enable_fast_math" in compat.HONOURED and "tl.enable_fast_math" not in compat.TILELANG_WITHOUT_EFFECT
    assert "tw.fast_math" in compat.HONOURED


def test_fast_math_on_the_gpu(rng):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU with a CUDA build of PyTorch")
    n = 4096
    x = _inputs(rng, n)
    y = torch.full((len(FUNCS), n), float("nan"), dtype=torch.float32, device="cuda")
    tilewright.compile(math_kernel(n), target="cuda", pass_configs=FAST)(torch.from_numpy(x).cuda(), y)
    _check(y.cpu().numpy(), x)
