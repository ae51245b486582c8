"""The flash-decoding kernel's candidate variants (ops/decode_kernels.VARIANTS, TILEWRIGHT_DECODE_VARIANT)
in the CPU emulator of their per-thread code for sm_90a (TMA, mbarriers, the warp-specialized producer) and
sm_80 (cp.async), against float64 on fresh random inputs with every allocation of the op poisoned (NaN):
GQA group 4, MQA (group 8, and 20: two 16-row slices), ragged cache lengths (0, 1, lengths off the key block,
the whole cache), split counts 1..32 (more than a short sequence's key blocks: empty ranges), fp16/bf16,
head dims 64/128/256; the merge counters left at zero; the split count "wave" chooses, checked by hand."""

from __future__ import annotations

import importlib
import math

import pytest

torch = pytest.importorskip("torch")

from test_ops_attention import _PoisonedTorch  # noqa: E402
from toolchains import needs_nvrtc  # noqa: E402

import tilewright  # noqa: E402
from tilewright import ops  # noqa: E402

ad = importlib.import_module("tilewright.ops.attention_dispatch")
dk = importlib.import_module("tilewright.ops.decode_kernels")

# the per-block shared memory each target allows (H200 / A100 opt-in)
SMEM = {"cuda -arch=sm_90a": 232448, "cuda -arch=sm_80": 166912}


@pytest.fixture
def emulate(monkeypatch):
    """Poisoned allocations, kernels compiled for ``target`` and run by the emulator; returns the keys
    of the kernels built (to see which variant ran)."""
    monkeypatch.setattr(ad, "_torch", lambda: _PoisonedTorch())
    built = []

    def use(target, variant):
        monkeypatch.setenv("TILEWRIGHT_DECODE_VARIANT", variant)
        monkeypatch.setattr(ad, "_shared_bytes", lambda t: SMEM[target])

        def kernel(key, build, _target, pass_configs=None):
            built.append((key, pass_configs))
            return tilewright.compile(build(), target=target, execution_backend="emulator", pass_configs=pass_configs)

        monkeypatch.setattr(ad, "_kernel", kernel)
        ad.forget_plans()
        return built

    yield use
    ad.forget_plans()


def reference(q, k, v, lens):
    """float64 decoding: batch b sees its first lens[b] keys; a row without keys: output 0, lse -inf."""
    q, k, v = q.double(), k.double(), v.double()
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    for b, n in enumerate(lens):
        s[b, :, :, n:] = -math.inf
    lse = torch.logsumexp(s, -1)
    return torch.exp(s - lse[..., None]).nan_to_num(0.0) @ v, lse


def _check(out, lse, want, want_lse, dtype):
    assert not out.isnan().any(), "NaN in the output (an element never written)"
    tol = 8e-3 if dtype == torch.bfloat16 else 3e-3
    err = (out.double() - want).abs().max().item()
    assert err <= tol * max(1.0, want.abs().max().item()), err
    finite = torch.isfinite(want_lse)
    assert torch.equal(torch.isfinite(lse), finite) and (lse[~finite] == -math.inf).all()
    if finite.any():
        assert (lse.double()[finite] - want_lse[finite]).abs().max().item() <= 1e-4 * max(
            1.0, want_lse[finite].abs().max().item())


def _run(B, H, Hkv, S, D, dtype, lens, splits, seed):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(*shape, generator=g).to(dtype) for shape in
               ((B, H, 1, D), (B, Hkv, S, D), (B, Hkv, S, D)))
    cache = torch.tensor(lens, dtype=torch.int32)
    want = reference(q, k, v, lens)
    for _ in range(2):  # the second call reuses the plan and the counters the first left at zero
        out, lse = ops.attention(q, k, v, return_lse=True, cache_seqlens=cache, num_splits=splits)
        _check(out, lse, *want, dtype)
        assert all(int(c.abs().sum()) == 0 for c in dk._counters.values()), "a merge counter left non-zero"


CASES = [  # B, H, Hkv, S, D, dtype, lens, splits
    (3, 8, 2, 300, 64, torch.float16, [277, 0, 64], 3),        # GQA 4, ragged, an empty sequence, merged
    (2, 8, 1, 200, 128, torch.bfloat16, [200, 129], 5),        # MQA group 8, d 128, lengths off the block
    (2, 4, 1, 150, 256, torch.float16, [150, 33], 4),          # d 256 (32-key blocks), group 4
]


SM90, SM80 = SMEM


def _on(target, other):
    return pytest.param(target, other, marks=needs_nvrtc)


@pytest.mark.parametrize("target, variant", [_on(SM90, "flatmerge"), _on(SM90, "cpasync"), _on(SM90, "ws"),
                                             _on(SM90, "ws,flatmerge"), _on(SM80, "flatmerge"), _on(SM80, "cpasync")])
# ("ws" needs TMA: on sm_80 it is the plain kernel)
@pytest.mark.parametrize("case", CASES, ids=["gqa4-d64", "mqa8-d128", "d256"])
def test_variants_against_float64(emulate, target, variant, case):
    built = emulate(target, variant)
    _run(*case, seed=hash((variant, case[4])) % 1000)
    (key, configs), = built
    assert key[0] == "decode" and key[-1] == tuple(sorted(variant.split(",")))
    assert configs == ({"tw.warp_specialize": True} if "ws" in variant else None)


@pytest.mark.parametrize("target, splits", [_on(SM90, 1), _on(SM90, 2), _on(SM90, 7), _on(SM90, 16), _on(SM90, 32),
                                            _on(SM80, 3), _on(SM80, 32)])
def test_flatmerge_over_split_counts(emulate, target, splits):
    """1..32 splits of 3..5 key blocks: most ranges empty (partial LSE -inf, weight 0), a sequence of
    length 0 (every range empty: output 0, LSE -inf), one of length 1; group 20 is two 16-row slices
    (the second one partial: its rows past the group read the group's last row and are not stored)."""
    emulate(target, "flatmerge")
    dtype = torch.bfloat16 if splits % 2 else torch.float16
    _run(3, 40, 2, 300, 64, dtype, [300, 0, 1] if splits != 16 else [257, 150, 0], splits, seed=splits)


COVER = [  # (B, H, Hkv, S, D, dtype, lens, splits), block_H
    ((2, 32, 1, 200, 128, torch.bfloat16, [200, 65], 3), 32),   # MQA group 32: one 32-row block, not two slices
    ((2, 40, 1, 150, 64, torch.float16, [150, 0], 2), 48),      # group 40: 48 rows, 8 past the group
    ((1, 32, 1, 100, 256, torch.float16, [100], 2), 32),        # d 256: at most 32 rows
    ((2, 80, 1, 150, 64, torch.float16, [99, 150], 4), 64),     # group 80: two slices of 64 (the second partial)
]


@pytest.mark.parametrize("target, variant, case", [
    *(pytest.param(SM90, "cover", c, marks=needs_nvrtc, id=f"sm90-{c[1]}") for c in COVER),
    *(pytest.param(SM90, "cover,flatmerge,wave", c, marks=needs_nvrtc, id=f"sm90-all-{c[1]}") for c in COVER[:2]),
    *(pytest.param(SM80, "cover", c, marks=needs_nvrtc, id=f"sm80-{c[1]}") for c in COVER[1:2]),
])
def test_cover_reads_each_kv_head_once(emulate, target, variant, case):
    case, block_H = case
    built = emulate(target, variant)
    _run(*case, seed=block_H)
    (key, _), = built
    B, H, Hkv = case[:3]
    assert key[9] == block_H  # (heads, kv_heads, dim, dtype, cache, splits, k_hc, v_hc, block_H, ...)
    (plan,) = dk._plans.values()
    assert plan.counters == B * Hkv * -(-(H // Hkv) // block_H)


def test_flatmerge_emits_no_branch_around_the_merge_loads():
    """What the variant is for: the merge's partial loads are unconditional (rows past the group clamp
    to the group's last row), in two unrolled loops, with no select around a weight."""
    cfg = dk.decode_config(128, SMEM["cuda -arch=sm_90a"])[:4] + (("flatmerge",),)
    src = tilewright.compile(dk.decode_fwd(32, 8, 128, "float16", False, 4, False, False, *cfg),
                             target="cuda -arch=sm_90a", execution_backend="emulator").get_kernel_source()
    loops = src[src.index("atomicAdd"):].split("#pragma unroll")[1:3]
    assert len(loops) == 2
    loops = [loop[:loop.index("\n    }\n")] for loop in loops]
    assert "Lpart[" in loops[0] and "Opart[" in loops[1] and "Lpart[" in loops[1], loops
    assert not any("if (" in loop or " ? " in loop for loop in loops), loops


@pytest.mark.parametrize("variant, dim, expected", [
    ("", 128, 4),               # the general heuristic: 2 x 132 // 64
    ("wave", 128, 6),           # 3 blocks of 64 x 2 stages a SM: 396 slots // 64 groups
    ("wave,ws", 128, 4),        # the producer warpgroup's registers: 2 blocks a SM
    ("wave", 64, 6),            # d 64: 4 stages of 64 x 64, 3 a SM too
])
def test_wave_split_counts(monkeypatch, variant, dim, expected):
    monkeypatch.setenv("TILEWRIGHT_DECODE_VARIANT", variant)
    cfg = dk.decode_config(dim, 232448)
    assert dk.decode_splits(64, 64, None, dim, cfg, 232448, 132) == expected
    assert dk.decode_splits(64, 64, 9, dim, cfg, 232448, 132) == 9   # num_splits given: as given
    assert dk.decode_splits(64, 7, None, dim, cfg, 232448, 132) == 1  # short sequences: no split
    assert dk.decode_splits(500, 64, None, dim, cfg, 232448, 132) == 1  # more groups than slots
    if "wave" in variant:
        assert dk.decode_splits(4, 64, None, dim, cfg, 232448, 132) == 16  # capped at 4 key blocks a range
        assert dk.decode_splits(64, 64, None, dim, cfg, 232448, 132) * 64 <= 132 * dk.blocks_per_sm(
            dim, cfg, 232448)


@needs_nvrtc
def test_blocks_per_sm_is_not_above_the_compiled_kernels():
    """The estimate against the compiled default and 3-stage kernels' shared memory and registers."""
    for stages, ws in ((2, ()), (3, ()), (2, ("ws",))):
        cfg = (16, 64, stages, 128, ws)
        kern = tilewright.compile(dk.decode_fwd(32, 8, 128, "float16", False, 4, False, False, *cfg),
                                  target="cuda -arch=sm_90a", execution_backend="emulator",
                                  pass_configs=dk.decode_pass_configs(ws))
        kern.get_code_object()
        use = kern.resource_usage
        by_smem = 233472 // (use["shared_bytes"] + 1024)
        by_regs = 65536 // (-(-use["registers"] // 8) * 8 * kern.num_threads)
        assert dk.blocks_per_sm(128, cfg, 232448) <= min(by_smem, by_regs, 2048 // kern.num_threads), (cfg, use)


@needs_nvrtc
def test_wave_variant_runs_with_its_split_count(emulate, monkeypatch):
    """"wave" on a 2-SM 'GPU': 2 x 3 slots for 2 groups -> 3 splits of 18 key blocks, run and checked."""
    emulate("cuda -arch=sm_90a", "wave,flatmerge")
    monkeypatch.setattr(ad, "_NUM_SMS", 2)
    _run(1, 8, 2, 1100, 64, torch.float16, [1100], None, seed=3)
    (plan,) = dk._plans.values()
    assert plan.splits == 3


def test_unknown_variant_is_refused(monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_DECODE_VARIANT", "wave,fast")
    with pytest.raises(ValueError, match="fast"):
        dk.decode_config(128, 232448)


@pytest.mark.parametrize("variant", ["flatmerge,cover", "wave,cpasync"])
def test_variants_in_the_tile_interpreter(monkeypatch, variant):
    """CPU tensors run the tile interpreter (no per-thread code): the variants' tile programs themselves."""
    monkeypatch.setattr(ad, "_torch", lambda: _PoisonedTorch())
    monkeypatch.setenv("TILEWRIGHT_DECODE_VARIANT", variant)
    ad.forget_plans()
    _run(2, 40, 1, 300, 64, torch.float16, [300, 0], 3, seed=4)
    _run(1, 8, 2, 700, 128, torch.bfloat16, [650], None, seed=5)
    ad.forget_plans()


@needs_nvrtc
def test_cover_with_four_stages(emulate, monkeypatch):
    """bench/decode_splits.py's MQA columns: cover (32 rows) with 4 stages of 64 keys (TILEWRIGHT_DECODE_CONFIG)."""
    monkeypatch.setenv("TILEWRIGHT_DECODE_CONFIG", "64,4,128")
    built = emulate(SM90, "cover")
    _run(2, 32, 1, 500, 128, torch.float16, [500, 70], 2, seed=6)
    (key, _), = built
    assert key[9:13] == (32, 64, 4, 128)
