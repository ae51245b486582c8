"""The session-13 decode candidates (bench/decode_splits.py ``S13_GQA`` / ``S13_MQA``): "pdlpre" (the block's set-up
that reads nothing of the previous kernel -- the TMA ring's mbarrier init and a prefetch of the tensor-map
descriptors -- ahead of griddepcontrol.wait: passes/pdl_prologue, ``tw.pdl_prologue``) and "pdllate" (the trigger,
griddepcontrol.launch_dependents, after the block's last key block); "lazysum" (the softmax denominator reduced across
the warps once after the loop).

In the CPU emulator of their per-thread code for sm_90a (TMA, mbarriers, clusters for cmerge) and sm_80 (cp.async;
no griddepcontrol there), against float64 on fresh random inputs with every allocation of the op poisoned (NaN):
GQA group 4 at head dim 128 and MQA 32 rows ("cover"), ragged cache lengths (0, lengths off the key block), the
LSE, fp16/bf16, the merge counters left at zero; where the compiler puts the moved set-up, the prefetch and the
late trigger (nothing that reads global memory before the wait); the pass leaving kernels alone without its option
or without a wait; the H200 kernels built with NVRTC without spills."""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")

from test_s8_decode_variants import SMEM, _run  # noqa: E402
from test_s9_decode_cmerge import emulate  # noqa: E402, F401  (the fixture)
from toolchains import needs_nvrtc  # noqa: E402

from tilewright import language as T  # noqa: E402

dk = importlib.import_module("tilewright.ops.decode_kernels")

SM90, SM80 = SMEM

CASES = [  # (B, H, Hkv, S, D, dtype, lens, splits), variant, target
    ((2, 8, 2, 600, 128, torch.bfloat16, [600, 131], 4), "tmerge,gcount,pdlpre", SM90),          # one set of 4
    ((2, 8, 2, 700, 128, torch.float16, [699, 0], 6), "tmerge,gcount,pdllate", SM90),            # 3 sets of 2, empty
    ((3, 8, 2, 650, 128, torch.bfloat16, [650, 1, 64], 4), "tmerge,gcount,pdllate,pdlpre", SM90),  # both, 1 key
    ((2, 8, 2, 500, 128, torch.float16, [500, 1], 1), "tmerge,pdllate,pdlpre", SM90),            # no split, no merge
    ((2, 8, 2, 600, 128, torch.bfloat16, [600, 70], 4), "tmerge,gcount,pdllate,pdlpre", SM80),   # sm_80: cp.async
    ((2, 32, 1, 1100, 128, torch.float16, [1100, 300], 16), "cmerge,cover,gcount,pdl,pdlpre", SM90),  # MQA clusters
    ((2, 32, 1, 2100, 128, torch.bfloat16, [2100, 129], 16), "cover,gcount,pdlpre,tmerge", SM90),  # MQA, 2 sets of 8
    ((3, 8, 2, 700, 128, torch.float16, [700, 0, 1], 4), "tmerge,gcount,lazysum,pdlwait", SM90),   # lazysum, empty
    ((2, 8, 2, 650, 128, torch.bfloat16, [650, 65], 6), "tmerge,gcount,lazysum,pdllate,pdlpre", SM90),
    ((2, 8, 2, 600, 128, torch.float16, [599, 130], 4), "lazysum,tmerge", SM80),                    # sm_80
    ((2, 32, 1, 1100, 128, torch.bfloat16, [1100, 0], 16), "cmerge,cover,gcount,lazysum,pdl", SM90),  # MQA 32 rows
    ((2, 4, 1, 300, 64, torch.float16, [300, 77], 3), "lazysum", SM90),                             # d 64, plain merge
]


@needs_nvrtc
@pytest.mark.parametrize("case, variant, target", CASES,
                         ids=["pre-s4", "late-s6", "both-s4", "both-s1", "sm80", "mqa-cmerge", "mqa-tmerge", "lazy-s4",
                              "lazy-all-s6", "lazy-sm80", "lazy-mqa", "lazy-d64"])
def test_candidates_against_float64(emulate, case, variant, target):  # noqa: F811
    built = emulate(target, variant)
    _run(*case, seed=hash((variant, case[7])) % 1000)
    (key,) = built
    assert key[6] == case[7] and key[-1] == tuple(sorted(variant.split(",")))


def _kernel_of(variant, target=SM90, splits=4, heads=(32, 8), block_H=16, dtype="bfloat16"):
    """The thread kernel of the benchmark's decode kernel for ``variant`` with the pass configs the op gives it."""
    from tilewright.passes.pipeline import PassContext, run_pipeline
    from tilewright.target import Target

    variant = tuple(sorted(variant))
    f = dk.decode_fwd(*heads, 128, dtype, False, splits, False, False, block_H, 64, 2, 128, variant)
    opts = {"optimize_level": 2, **(dk.decode_pass_configs(variant) or {})}
    return run_pipeline(f, PassContext(Target.parse(target), opts))


def _cuda(variant, **kw):
    from tilewright.codegen.cuda import print_cuda

    return print_cuda(_kernel_of(variant, **kw))


def _kernel_text(src):
    return src[src.index("__global__"):]


@pytest.mark.parametrize("variant", [("gcount", "pdlpre", "tmerge"), ("gcount", "pdllate", "pdlpre", "tmerge")])
def test_setup_and_prefetch_before_the_wait(variant):
    """"pdlpre": the ring's mbarrier init, its fences and the block barrier, then one thread's prefetch of both
    tensor maps, then the wait, once; nothing of global memory is touched before it."""
    src = _kernel_text(_cuda(variant))
    wait = src.index("griddepcontrol.wait;")
    before, after = src[:wait], src[wait:]
    assert src.count("griddepcontrol.wait;") == 1
    assert before.count("mbarrier.init.shared::cta.b64") == 2 and "mbarrier.init" not in after
    assert "fence.mbarrier_init" in before and "__syncthreads();" in before
    assert before.index("mbarrier.init") < before.index("prefetch.tensormap")
    assert before.count("prefetch.tensormap") == 2 and "&tw_tmap0" in before and "&tw_tmap1" in before
    for name in ("Q[", "Lens[", "K[", "V[", "Out[", "Opart[", "Lpart[", "Cnt[", "cp.async.bulk"):
        assert name not in before, f"{name} used before the wait"
    assert "cp.async.bulk.tensor" in after and "Q[" in after


def test_late_trigger_after_the_key_loop():
    """"pdllate": one launch_dependents, after the key-block loop (its last mbarrier wait) and before the partial
    stores and the merge's counting atomic; the wait still first."""
    src = _kernel_text(_cuda(("gcount", "pdllate", "tmerge")))
    assert src.count("griddepcontrol.launch_dependents;") == 1 and src.count("griddepcontrol.wait;") == 1
    trigger = src.index("griddepcontrol.launch_dependents;")
    assert src.index("griddepcontrol.wait;") < src.index("Q[") < trigger
    assert src.rindex("tw_mbar_wait(") < trigger < src.index("Opart[") < src.index("atomic")
    assert "prefetch.tensormap" not in src  # (without pdlpre the set-up stays where pipeline_loops put it)


def test_without_the_option_nothing_moves():
    """pdlwait (no ``tw.pdl_prologue``) keeps the set-up after the wait and prefetches nothing; with the option, a
    kernel without a wait is unchanged; on sm_80 (no griddepcontrol) pdlpre emits no prefetch either."""
    src = _kernel_text(_cuda(("gcount", "pdlwait", "tmerge")))
    assert src.index("griddepcontrol.wait;") < src.index("mbarrier.init") and "prefetch.tensormap" not in src
    from tilewright.passes.pdl_prologue import pdl_prologue
    from tilewright.passes.pipeline import PassContext
    from tilewright.target import Target

    @T.prim_func
    def plain(A: T.Tensor((128,), "float32"), B: T.Tensor((128,), "float32")):
        with T.Kernel(2, threads=64) as (bx,):
            for i in T.Parallel(64):
                B[bx * 64 + i] = A[bx * 64 + i] + 1.0

    body = plain.body
    out = pdl_prologue(plain, PassContext(Target.parse(SM90), {"tw.pdl_prologue": True}))
    assert out.body is body
    sm80 = _cuda(("gcount", "pdlpre", "tmerge"), target=SM80)
    assert "prefetch.tensormap" not in sm80 and "griddepcontrol." not in sm80.replace("// griddepcontrol.", "")


def _loop_barriers(src):
    """Block barriers in the key-block loop's body, and the source after the loop."""
    start = src.index("for (int kb = lo")
    depth = 0
    for end in range(start, len(src)):
        depth += {"{": 1, "}": -1}.get(src[end], 0)
        if src[end] == "}" and depth == 0:
            return src[start:end].count("__syncthreads();"), src[end:]
    raise AssertionError("the key-block loop does not close")


def test_lazysum_takes_the_row_sum_out_of_the_loop():
    """"lazysum": 6 block barriers a key block instead of 9 (the row sum's exchange gone), one row-sum reduction
    after the loop; the scores' max stays in the loop."""
    base, _ = _loop_barriers(_kernel_text(_cuda(("gcount", "pdlwait", "tmerge"))))
    src = _kernel_text(_cuda(("gcount", "lazysum", "pdlwait", "tmerge")))
    lazy, after = _loop_barriers(src)
    assert (base, lazy) == (9, 6)
    assert "reduce_sum sum_s" in after and "reduce_max acc_s" in src[src.index("for (int kb = lo"):]


def test_pass_configs_of_the_candidates():
    assert dk.decode_pass_configs(("gcount", "pdlpre", "tmerge")) == {"tw.pdl_prologue": True}
    assert dk.decode_pass_configs(("pdlpre", "ws")) == {"tw.pdl_prologue": True, "tw.warp_specialize": True}
    assert dk.decode_pass_configs(("pdllate", "tmerge")) is None
    assert dk.decode_pass_configs(("w8",)) == {"tw.warp_specialize": False}


@needs_nvrtc
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("variant, splits, heads, block_H", [
    (("gcount", "pdlpre", "tmerge"), 4, (32, 8), 16), (("gcount", "pdllate", "tmerge"), 4, (32, 8), 16),
    (("gcount", "pdllate", "pdlpre", "tmerge"), 4, (32, 8), 16),
    (("cmerge", "cover", "gcount", "pdl", "pdlpre"), 32, (32, 1), 32),
    (("cover", "gcount", "pdlpre", "tmerge"), 32, (32, 1), 32),
    (("gcount", "lazysum", "pdlwait", "tmerge"), 4, (32, 8), 16),
    (("gcount", "lazysum", "pdllate", "pdlpre", "tmerge"), 4, (32, 8), 16),
    (("cmerge", "cover", "gcount", "lazysum", "pdl"), 32, (32, 1), 32)])
def test_h200_kernels_build_without_spills(dtype, variant, splits, heads, block_H):
    """The benchmark's kernels (32 heads on 8 kv heads, or on 1 with "cover": 32-row blocks; d 128) for the H200:
    no spills, within 227 KiB (prefetch.tensormap assembles for sm_90a)."""
    from tilewright.codegen.cuda import print_cuda
    from tilewright.toolchain import nvrtc

    k = _kernel_of(variant, splits=splits, heads=heads, block_H=block_H, dtype=dtype)
    assert k.shared_bytes <= SMEM[SM90]
    res = nvrtc.compile_cuda(print_cuda(k), "sm_90a", [k.name]).resources[k.name]
    assert res["spills"] == 0 and res["local_bytes"] == 0, res


def load_decode_bench():
    """bench/decode_splits.py as a module (its folder on the path for its own imports)."""
    import importlib.util
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
    spec = importlib.util.spec_from_file_location("decode_splits_bench", sys.path[0] + "/decode_splits.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_bench_candidates_are_known_variants(monkeypatch):
    """Every variant the --s13 tables time parses (an unknown name would be an ERROR cell on the H200)."""
    bench = load_decode_bench()
    for variant, _, _ in bench.S13_GQA + bench.S13_MQA:
        monkeypatch.setenv("TILEWRIGHT_DECODE_VARIANT", variant)
        assert dk.decode_variant(4) == tuple(sorted(variant.split(",")))
