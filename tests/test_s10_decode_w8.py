"""The flash-decoding kernel's session-10 candidate "w8" (ops/decode_kernels.VARIANTS): 8 warps a block, with the
warp-specialized loop kept off (a kernel of two warpgroups would otherwise get a producer warpgroup: 384 threads).
In the CPU emulator of the per-thread code for sm_90a and sm_80, against float64 on fresh random inputs with every
allocation of the op poisoned (NaN): GQA group 4 (d 64, d 128), MQA group 32 with "cover" (32 rows over 2 x 4 warps)
and the tree merge, MHA, ragged cache lengths with an empty sequence, split and unsplit, fp16/bf16, the LSE."""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")

from test_s8_decode_variants import SMEM, _run  # noqa: E402
from test_s9_decode_cmerge import emulate  # noqa: E402, F401  (the fixture)
from toolchains import needs_nvrtc  # noqa: E402

import tilewright  # noqa: E402

dk = importlib.import_module("tilewright.ops.decode_kernels")

SM90, SM80 = SMEM

CASES = [  # B, H, Hkv, S, D, dtype, lens, splits; variant; target
    ((2, 8, 2, 300, 128, torch.float16, [277, 0], 4), "w8", SM90),                  # GQA 4, d 128, plain merge
    ((2, 8, 2, 300, 64, torch.bfloat16, [300, 65], 1), "w8", SM90),                 # no split: the output directly
    ((2, 32, 1, 700, 128, torch.bfloat16, [700, 129], 8), "cover,tmerge,w8", SM90),  # MQA 32 rows, one set of 8
    ((1, 4, 4, 260, 64, torch.float16, [259], 4), "tmerge,w8", SM90),               # MHA: 1 row of 16
    ((2, 8, 2, 300, 64, torch.float16, [150, 299], 3), "w8", SM80),                 # sm_80 (mma.sync, cp.async)
]


@needs_nvrtc
@pytest.mark.parametrize("case, variant, target", CASES, ids=["gqa4-d128", "unsplit", "mqa-cover-tmerge", "mha",
                                                               "sm80"])
def test_w8_against_float64(emulate, case, variant, target):  # noqa: F811 (the fixture)
    built = emulate(target, variant)
    _run(*case, seed=hash((variant, case[7], case[4])) % 1000)
    (key,) = built
    assert "w8" in key[-1] and key[12] == 256  # ("decode", ..., block_H, block_N, stages, threads, variant)


def test_w8_config_and_pass_configs(monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_DECODE_VARIANT", "w8")
    monkeypatch.delenv("TILEWRIGHT_DECODE_CONFIG", raising=False)
    assert dk.decode_config(128, 232448, 4) == (16, 64, 2, 256, ("w8",))
    assert dk.decode_config(80, 232448, 4)[3] == 64  # (an odd multiple of 16: 2 warps, as without w8)
    assert dk.decode_pass_configs(("w8",)) == {"tw.warp_specialize": False}
    assert dk.decode_pass_configs(()) is None and dk.decode_pass_configs(("ws",)) == {"tw.warp_specialize": True}
    assert dk.blocks_per_sm(128, dk.decode_config(128, 232448, 4), 232448) == 2  # (256 threads x 128 registers)
    monkeypatch.setenv("TILEWRIGHT_DECODE_VARIANT", "w8,ws")
    with pytest.raises(ValueError, match="w8 and ws cannot be combined"):
        dk.decode_config(128, 232448, 4)


@needs_nvrtc
def test_w8_kernel_is_256_threads_without_a_producer():
    k = tilewright.compile(dk.decode_fwd(32, 8, 128, "float16", False, 4, False, False, 16, 64, 2, 256, ("w8",)),
                           target=SM90, execution_backend="emulator", pass_configs=dk.decode_pass_configs(("w8",)))
    src = k.get_kernel_source()
    assert "__launch_bounds__(256)" in src and "setmaxnreg" not in src


@pytest.mark.parametrize("variant", [("w8",), ("tmerge", "w8"), ("cover", "tmerge", "w8")])
def test_w8_at_d256_keeps_four_warps_and_compiles(variant, monkeypatch):
    """d 256 (block_N 32): the 16 x 32 score tile has MMAs for 4 warps only, so "w8" keeps 128 threads there
    (8 warps failed to compile on the H200: "No valid warp partition"); the kernel builds for sm_90a."""
    monkeypatch.setattr(dk, "decode_variant", lambda group, seq_k=None: variant)
    bH, bN, stages, threads, got = dk.decode_config(256, 232448, 4)
    assert (bN, threads) == (32, 128) and got == variant
    k = tilewright.compile(dk.decode_fwd(8, 2, 256, "float16", False, 32, False, False, bH, bN, stages, threads,
                                         variant), target="cuda -arch=sm_90a", execution_backend="emulator")
    assert "__launch_bounds__(128" in k.get_kernel_source()
