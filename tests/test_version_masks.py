"""Pass ``version_masks``: a ``T.Parallel`` store of a ``T.if_then_else`` mask that holds over the whole tile
takes an unmasked version behind one block-uniform test.  Checked: the test it builds for TileLang's
flash-attention program (causal and a ragged key length); masks of every comparison and sign, with
uniform offsets passed as kernel arguments chosen at, below and above the point where the test flips,
give bit for bit the output of the same kernel with the pass off (emulator of the lowered code, sm_90a and
gfx942, NaN-poisoned outputs); the forms it must leave alone; the switch; and the flash-attention program
on the emulator against float64."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import tilewright
import tilewright.language as T
from tilewright.ir import tile as t
from tilewright.ir.visitor import walk
from tilewright.passes.pipeline import PassContext
from tilewright.passes.version_masks import version_masks
from tilewright.target import Target

CUDA, GFX942 = "cuda -arch=sm_90a", "hip -arch=gfx942"
OFF = {"tw.version_masks": False}


@pytest.fixture
def rng():
    return np.random.default_rng()  # fresh inputs each run


def _versioned(func, options=None):
    ctx = PassContext(Target.parse(CUDA), {"optimize_level": 2, **(options or {})})
    out = version_masks(copy.copy(func), ctx)  # (as run_pipeline: the user's function keeps its body)
    ifs = []
    walk(out.body, lambda s: ifs.append(s) if isinstance(s, t.IfThenElse) else None)
    return ifs


def mask_kernel(form: str, M=32, N=48):
    """Y[r, c] = X[r, c] where the mask ``form`` holds at (i, j) of the tile at offsets (a, b), else -1; the
    offsets a and b are kernel arguments (uniform), the tile is (M, N)."""

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32"), a: T.int32, b: T.int32):
        with T.Kernel(1, threads=128) as bx:
            F = T.alloc_fragment((M, N), "float32")
            T.copy(X, F)
            for i, j in T.Parallel(M, N):
                if form == "causal":
                    F[i, j] = T.if_then_else(a + i >= b + j, F[i, j], -1.0)
                elif form == "lt":
                    F[i, j] = T.if_then_else(2 * i - 3 * j + a < b, F[i, j], -1.0)
                elif form == "le_neg":
                    F[i, j] = T.if_then_else(b - i <= a * 2 - j, F[i, j], -1.0)
                elif form == "gt_and":
                    F[i, j] = T.if_then_else((i + a > b) and (j * 4 < a + b + bx), F[i, j], -1.0)
            T.copy(F, Y)

    return main


@pytest.mark.parametrize("form", ["causal", "lt", "le_neg", "gt_and"])
@pytest.mark.parametrize("target", [CUDA, GFX942])
def test_versioned_masks_store_what_the_mask_stores(rng, form, target):
    # (on AMD the pass is off unless asked for: its gain is unmeasured there and it cost registers on gfx1100)
    k_on = tilewright.compile(mask_kernel(form), target=target, execution_backend="emulator",
                              pass_configs={"tw.version_masks": True})
    k_off = tilewright.compile(mask_kernel(form), target=target, execution_backend="emulator", pass_configs=OFF)
    # offsets around the flip points of each form (where the whole-tile test turns true)
    offsets = [(0, 0), (47, 0), (46, 0), (48, 1), (-5, 90), (200, -100), (-200, 100), (31, 31), (95, 0), (0, -95),
               (30, 60), (60, 30), (100, 90), (100, 88), (150, 100)]
    taken = set()
    for a, b in offsets:
        x = rng.standard_normal((32, 48)).astype(np.float32)
        y_on, y_off = np.full_like(x, np.nan), np.full_like(x, np.nan)
        k_on(x, y_on, a, b)
        k_off(x, y_off, a, b)
        assert not np.isnan(y_on).any()
        np.testing.assert_array_equal(y_on, y_off)
        taken.add(bool((y_off == x).all()))
    assert taken == {True, False}, "the offsets should take both versions"


def test_the_flash_attention_program_gets_the_diagonal_test():
    from tilewright.kernels import flash_attention

    ifs = _versioned(flash_attention(1, 2, 256, 64, is_causal=True, block_M=64, block_N=64))
    assert len(ifs) == 1
    src = tilewright.compile(flash_attention(1, 2, 256, 64, is_causal=True, block_M=64, block_N=64),
                             target=CUDA).get_kernel_source()
    assert "bx * 64" in src or "blockIdx.x) * 64" in src
    # a ragged key length: the tail mask (k * 64 + j < 200) is versioned too
    assert len(_versioned(flash_attention(1, 2, 200, 64, is_causal=False, block_M=64, block_N=64))) == 1
    assert not _versioned(flash_attention(1, 2, 256, 64, is_causal=True, block_M=64, block_N=64), OFF)
    assert not _versioned(flash_attention(1, 2, 256, 64, is_causal=True, block_M=64, block_N=64),
                          {"optimize_level": 1})
    ctx = PassContext(Target.parse(GFX942), {"optimize_level": 2})  # AMD: off by default
    out = version_masks(copy.copy(flash_attention(1, 2, 256, 64, is_causal=True, block_M=64, block_N=64)), ctx)
    ifs = []
    walk(out.body, lambda s: ifs.append(s) if isinstance(s, t.IfThenElse) else None)
    assert not ifs


def test_forms_it_leaves_alone():
    @T.prim_func
    def main(X: T.Tensor((32, 32), "float32"), Y: T.Tensor((32, 32), "float32"), a: T.int32):
        with T.Kernel(1, threads=128):
            F = T.alloc_fragment((32, 32), "float32")
            G = T.alloc_fragment((32,), "int32")
            T.copy(X, F)
            for i in T.Parallel(32):
                G[i] = i
            for i, j in T.Parallel(32, 32):
                F[i, j] = T.if_then_else(i * j < a, F[i, j], 0.0)  # not affine
            for i, j in T.Parallel(32, 32):
                F[i, j] = T.if_then_else(G[i] < j + a, F[i, j], 0.0)  # a per-thread value
            for i, j in T.Parallel(32, 32):
                F[i, j] = T.if_then_else(X[0, 0] < 0.5, F[i, j], 0.0)  # a float condition
            for i, j in T.Parallel(32, 32):
                F[i, j] = T.if_then_else(i == j + a, F[i, j], 0.0)  # equality: never whole-tile
            for i, j in T.Parallel(32, 32):
                F[i, j] = T.if_then_else(i < j or j < a, F[i, j], 0.0)  # a disjunction
            T.copy(F, Y)

    assert not _versioned(main)


def test_flash_attention_program_on_the_emulator_against_float64(rng):
    from tilewright.kernels import flash_attention

    for causal, S in ((True, 200), (False, 136)):
        B, H, D = 1, 2, 64
        k = tilewright.compile(flash_attention(B, H, S, D, is_causal=causal, block_M=64, block_N=64),
                               target=CUDA, execution_backend="emulator")
        q, kk, v = (rng.standard_normal((B, S, H, D)).astype(np.float16) for _ in range(3))
        out = np.full((B, S, H, D), np.nan, np.float16)
        k(q, kk, v, out)
        q64, k64, v64 = (x.astype(np.float64).transpose(0, 2, 1, 3) for x in (q, kk, v))
        s = q64 @ k64.transpose(0, 1, 3, 2) / np.sqrt(D)
        if causal:
            s = np.where(np.tril(np.ones((S, S), bool)), s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        ref = ((p / p.sum(-1, keepdims=True)) @ v64).transpose(0, 2, 1, 3)
        err = np.abs(out.astype(np.float64) - ref).max() / np.abs(ref).max()
        assert err < 3e-3, (causal, S, err)


@pytest.mark.parametrize("causal, S", [(True, 1000), (False, 1000), (True, 1024)])
def test_flash_attention_program_on_the_gpu(causal, S):
    """TileLang's program at the H200's block configuration (128 x 128, 256 threads), causal tiles masked only
    on the diagonal, against float64; rows past a ragged length are left alone by the program."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU with a CUDA build of PyTorch")
    from tilewright.kernels import flash_attention

    B, H, D = 2, 4, 128
    g = torch.Generator(device="cuda").manual_seed(S + causal)
    q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
    out = torch.full_like(q, float("nan"))
    kern = tilewright.compile(flash_attention(B, H, S, D, is_causal=causal, block_M=128, block_N=128, num_stages=2,
                                              threads=256, dtype="bfloat16"), target="cuda")
    kern(q, k, v, out)
    q64, k64, v64 = (x.double().transpose(1, 2) for x in (q, k, v))
    s = q64 @ k64.transpose(-1, -2) / D ** 0.5
    if causal:
        s = s.masked_fill(~torch.ones(S, S, dtype=torch.bool, device="cuda").tril(), float("-inf"))
    ref = (torch.softmax(s, -1) @ v64).transpose(1, 2)
    err = ((out.double() - ref).abs().max() / ref.abs().max()).item()
    assert err < 3e-3, err
