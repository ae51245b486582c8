"""The session-14 decode candidates (bench/decode_splits.py ``S14_GQA``): "kvpre" / "kvpre4" (the first 2 / 4 key
blocks of a split's range prefetched into L2 before griddepcontrol.wait: ``T.prefetch_l2``, prefetch.global.L2) and
"occ2" (12 KiB more shared memory a block: 2 decode blocks a SM at d 128; with the late trigger the GQA default since
the H200 run of 11:29), also with the early trigger, the moved prologue and the MQA cluster merge.

In the CPU emulator of their per-thread code for sm_90a and sm_80, against float64 on fresh random inputs with every
allocation of the op poisoned (NaN): no cache lengths (the prefetching path; the emulator reads every prefetched
element, so one outside K or V fails), ragged lengths (no prefetch: the lengths live in memory), sequence lengths off
the key block, heads-in-columns K/V (a (batch, seq, heads, dim) tensor's view), the LSE, fp16/bf16, the merge
counters left at zero; where the prefetches sit (before the wait, nothing else of global memory there); the H200
kernels built with NVRTC without spills and the shared memory occ2 asks for; T.prefetch_l2's refusals."""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")

from test_s8_decode_variants import SMEM, _check, _run, reference  # noqa: E402
from test_s9_decode_cmerge import emulate  # noqa: E402, F401  (the fixture)
from toolchains import needs_nvrtc  # noqa: E402

import tilewright  # noqa: E402
from tilewright import language as T  # noqa: E402
from tilewright import ops  # noqa: E402

dk = importlib.import_module("tilewright.ops.decode_kernels")

SM90, SM80 = SMEM


def _run_dense(B, H, Hkv, S, D, dtype, splits, seed, heads_in_columns=False):
    """The op without cache lengths (every sequence S keys) against float64, twice (the plan's repeat call)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, 1, D, generator=g).to(dtype)
    if heads_in_columns:  # (batch, seq, heads, dim) storage, viewed as (batch, heads, seq, dim)
        k, v = (torch.randn(B, S, Hkv, D, generator=g).to(dtype).transpose(1, 2) for _ in range(2))
    else:
        k, v = (torch.randn(B, Hkv, S, D, generator=g).to(dtype) for _ in range(2))
    want = reference(q, k, v, [S] * B)
    for _ in range(2):
        out, lse = ops.attention(q, k, v, return_lse=True, num_splits=splits)
        _check(out, lse, *want, dtype)
        assert all(int(c.abs().sum()) == 0 for c in dk._counters.values()), "a merge counter left non-zero"


DENSE = [  # (B, H, Hkv, S, D, dtype, splits, heads_in_columns), variant, target
    ((2, 8, 2, 600, 128, torch.bfloat16, 4, False), "tmerge,gcount,pdlwait,kvpre", SM90),   # 3 blocks a split, ragged
    ((2, 8, 2, 1000, 128, torch.float16, 4, True), "tmerge,gcount,pdlwait,kvpre4", SM90),   # heads in columns
    ((2, 8, 2, 700, 128, torch.bfloat16, 6, False), "tmerge,gcount,kvpre,pdllate", SM90),   # 3 sets of 2
    ((2, 8, 2, 650, 128, torch.float16, 4, False), "tmerge,gcount,kvpre,occ2,pdllate", SM90),
    ((2, 8, 2, 640, 128, torch.bfloat16, 4, False), "tmerge,gcount,kvpre,occ2,pdl", SM90),  # early trigger
    ((2, 8, 2, 300, 128, torch.float16, 1, False), "kvpre,pdlwait", SM90),                  # no split
    ((2, 8, 2, 130, 128, torch.float16, 8, False), "tmerge,kvpre4", SM90),                  # empty ranges
    ((2, 4, 1, 300, 64, torch.bfloat16, 3, False), "kvpre", SM90),                          # d 64: 1 line a row
    ((2, 8, 2, 600, 128, torch.bfloat16, 4, False), "tmerge,gcount,kvpre,occ2,pdllate", SM80),  # sm_80: cp.async
    ((2, 8, 2, 900, 128, torch.float16, 4, False), "tmerge,gcount,kvpre,pdlpre", SM90),    # with the moved set-up
    ((2, 8, 2, 700, 128, torch.bfloat16, 4, False), "tmerge,gcount,occ2,pdl", SM90),        # the final run's
    ((2, 8, 2, 650, 128, torch.float16, 6, False), "tmerge,gcount,occ2,pdllate,pdlpre", SM90),
]


@needs_nvrtc
@pytest.mark.parametrize("case, variant, target", DENSE,
                         ids=["pre-s4", "pre4-hc", "late-s6", "occ2-late", "occ2-pdl", "s1", "empty", "d64", "sm80",
                              "pdlpre", "occ2-early", "occ2-late-pre"])
def test_dense_against_float64(emulate, case, variant, target):  # noqa: F811
    built = emulate(target, variant)
    _run_dense(*case[:7], seed=hash((variant, case[6])) % 1000, heads_in_columns=case[7])
    key = built[0]
    assert key[-1] == tuple(sorted(variant.split(",")))


MQA = [  # (B, H, Hkv, S, D, dtype, lens, splits), variant: the short-cache MQA default with occ2 (cover: 32 rows)
    ((2, 32, 1, 1100, 128, torch.float16, [1100, 300], 16), "cmerge,cover,gcount,occ2,pdl"),
    ((2, 32, 1, 1100, 128, torch.bfloat16, [1100, 0], 16), "cmerge,cover,gcount,occ2,pdllate"),
]


@needs_nvrtc
@pytest.mark.parametrize("case, variant", MQA, ids=["mqa-occ2-pdl", "mqa-occ2-late"])
def test_mqa_against_float64(emulate, case, variant):  # noqa: F811
    emulate(SM90, variant)
    _run(*case, seed=11)


@needs_nvrtc
@pytest.mark.parametrize("variant", ["tmerge,gcount,pdlwait,kvpre", "tmerge,gcount,kvpre4,occ2,pdllate"])
def test_cache_lengths_against_float64(emulate, variant):  # noqa: F811
    """With cache lengths nothing is prefetched (they live in memory, unread before the wait): ragged, empty, 1 key."""
    emulate(SM90, variant)
    _run(3, 8, 2, 650, 128, torch.bfloat16, [650, 0, 1], 4, seed=7)


def _kernel_of(variant, target=SM90, splits=4, has_cache=False, dtype="bfloat16", dim=128, kv_heads=8):
    from tilewright.passes.pipeline import PassContext, run_pipeline
    from tilewright.target import Target

    variant = tuple(sorted(variant))
    block_H = 32 if "cover" in variant else 16
    f = dk.decode_fwd(32, kv_heads, dim, dtype, has_cache, splits, False, False, block_H, 64, 2, 128, variant)
    opts = {"optimize_level": 2, **(dk.decode_pass_configs(variant) or {})}
    return run_pipeline(f, PassContext(Target.parse(target), opts))


def _cuda(variant, **kw):
    from tilewright.codegen.cuda import print_cuda

    src = print_cuda(_kernel_of(variant, **kw))
    return src[src.index("__global__"):]


@pytest.mark.parametrize("variant, lines", [(("gcount", "kvpre", "pdlwait", "tmerge"), 2),
                                            (("gcount", "kvpre4", "pdllate", "tmerge"), 4),
                                            (("gcount", "kvpre", "pdlpre", "tmerge"), 2)])
def test_prefetch_before_the_wait(variant, lines):
    """2 (4) key blocks x 64 rows x 2 lines over 128 threads: 2 (4) steps of one K and one V line; all of them before
    the wait, nothing else of global memory before it (Lens above all)."""
    src = _cuda(variant)
    wait = src.index("griddepcontrol.wait;")
    before = src[:wait]
    assert src.count("prefetch.global.L2") == 2 * lines and before.count("prefetch.global.L2") == 2 * lines
    assert before.count("(&K[") == lines and before.count("(&V[") == lines
    for name in ("Q[", "Lens[", "Out[", "Opart[", "Lpart[", "Cnt[", "cp.async.bulk"):
        assert name not in before, f"{name} used before the wait"


def test_no_prefetch_with_cache_lengths_or_without_the_variant():
    assert "prefetch.global.L2" not in _cuda(("gcount", "kvpre", "pdlwait", "tmerge"), has_cache=True)
    assert "prefetch.global.L2" not in _cuda(("gcount", "pdlwait", "tmerge"))


def test_occ2_shared_memory():
    """occ2: 12 KiB more, so that 3 blocks no longer fit an H200 SM's 228 KiB (the estimate says 2); without it 3."""
    base = _kernel_of(("gcount", "pdlwait", "tmerge")).shared_bytes
    occ = _kernel_of(("gcount", "occ2", "pdlwait", "tmerge")).shared_bytes
    assert occ >= base + dk.OCC2_PAD and 3 * (occ + 1024) > 228 * 1024 >= 3 * (base + 1024)
    cfg = (16, 64, 2, 128, ("gcount", "pdlwait", "tmerge"))
    assert dk.blocks_per_sm(128, cfg, 227 * 1024) == 3
    assert dk.blocks_per_sm(128, cfg[:4] + (("gcount", "occ2", "pdlwait", "tmerge"),), 227 * 1024) == 2


def test_occ2_dropped_where_it_does_not_fit(monkeypatch):
    """occ2 on a 64 KiB LDS (the GQA default in a plan without a target, or named): dropped where the pad would not
    fit beside the tiles, never shrinking them; on the H200's 227 KiB it stays."""
    monkeypatch.delenv("TILEWRIGHT_DECODE_VARIANT", raising=False)
    monkeypatch.delenv("TILEWRIGHT_DECODE_CONFIG", raising=False)
    assert dk.decode_config(128, 232448, 4) == (16, 64, 2, 128, ("gcount", "occ2", "pdllate", "tmerge"))
    assert dk.decode_config(208, 65536, 4) == (16, 32, 2, 64, ("gcount", "pdllate", "tmerge"))  # (64,000 B of tiles)
    monkeypatch.setenv("TILEWRIGHT_DECODE_VARIANT", "occ2,tmerge")
    assert dk.decode_config(128, 65536, 4)[:2] == (16, 32)  # (the LDS shrinks the tiles, not the pad)
    assert dk.decode_config(128, 65536, 4)[4] == ("occ2", "tmerge")  # (40 KiB of tiles: the pad fits)
    assert dk.decode_config(208, 65536, 4)[4] == ("tmerge",)


def test_prefetch_depth():
    assert dk.prefetch_depth(("kvpre", "tmerge")) == 2 and dk.prefetch_depth(("kvpre4",)) == 4
    assert dk.prefetch_depth(("kvpre", "kvpre4")) == 4 and dk.prefetch_depth(("tmerge",)) == 0


def _prefetch_kernel(offset):
    @T.prim_func
    def pf(A: T.Tensor((256,), "float32"), B: T.Tensor((256,), "float32")):
        with T.Kernel(2, threads=128) as (bx,):
            tx = T.get_thread_binding()
            T.prefetch_l2(A[bx * 128 + tx + offset])
            for i in T.Parallel(128):
                B[bx * 128 + i] = A[bx * 128 + i] * 2.0

    return pf


@needs_nvrtc
def test_emulator_checks_the_prefetched_element():
    """The emulator reads a prefetched element: inside the buffer the kernel runs (and the hint changes nothing);
    one element past it is an out-of-bounds error, not a silent pass."""
    import numpy as np

    from tilewright.errors import TilewrightError

    a = np.random.default_rng(3).standard_normal(256).astype(np.float32)
    k = tilewright.compile(_prefetch_kernel(0), target=SM90, execution_backend="emulator")
    b = np.full(256, np.nan, np.float32)
    k(a, b)
    assert np.array_equal(b, a * 2)
    bad = tilewright.compile(_prefetch_kernel(1), target=SM90, execution_backend="emulator")
    with pytest.raises(TilewrightError, match="out of bounds|outside"):
        bad(a, np.zeros(256, np.float32))


def test_prefetch_l2_refuses_what_is_not_a_global_element():
    with pytest.raises(tilewright.errors.CompileError, match="global buffer"):
        @T.prim_func
        def f(A: T.Tensor((128,), "float32")):
            with T.Kernel(1, threads=128) as (bx,):
                s = T.alloc_shared((128,), "float32")
                T.prefetch_l2(s[0])
                A[0] = s[0]


@needs_nvrtc
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("variant", [("gcount", "kvpre", "pdlwait", "tmerge"), ("gcount", "kvpre4", "pdlwait", "tmerge"),
                                     ("gcount", "kvpre", "pdllate", "tmerge"),
                                     ("gcount", "kvpre", "occ2", "pdllate", "tmerge"),
                                     ("gcount", "kvpre", "occ2", "pdl", "tmerge"), ("gcount", "occ2", "pdllate", "tmerge"),
                                     ("gcount", "kvpre4", "occ2", "pdllate", "tmerge"),
                                     ("gcount", "kvpre", "pdlpre", "tmerge"), ("gcount", "occ2", "pdl", "tmerge"),
                                     ("gcount", "occ2", "pdllate", "pdlpre", "tmerge"),
                                     ("cmerge", "cover", "gcount", "occ2", "pdl"),
                                     ("cmerge", "cover", "gcount", "occ2", "pdllate")])
def test_h200_kernels_build_without_spills(dtype, variant):
    """The benchmark's kernels (32 heads on 8 kv heads; MQA with "cover": on 1, 32 splits) for the H200: no spills,
    within 227 KiB."""
    from tilewright.codegen.cuda import print_cuda
    from tilewright.toolchain import nvrtc

    mqa = "cover" in variant
    k = _kernel_of(variant, dtype=dtype, splits=32 if mqa else 4, kv_heads=1 if mqa else 8)
    assert k.shared_bytes <= SMEM[SM90]
    res = nvrtc.compile_cuda(print_cuda(k), "sm_90a", [k.name]).resources[k.name]
    assert res["spills"] == 0 and res["local_bytes"] == 0, res


def test_bench_candidates_are_known_variants(monkeypatch):
    """Every variant the --s14 table times parses (an unknown name would be an ERROR cell on the H200)."""
    from test_s13_decode_candidates import load_decode_bench

    bench = load_decode_bench()
    assert len(bench.S14_GQA) == 11 and bench.S14_MQA
    for variant, _, _ in bench.S14_GQA + bench.S14_MQA:
        monkeypatch.setenv("TILEWRIGHT_DECODE_VARIANT", variant)
        assert dk.decode_variant(4) == tuple(sorted(variant.split(",")))
