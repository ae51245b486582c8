"""Session 13 (issue 8): programmatic dependent launch for ``ops.matmul`` (``GemmConfig.pdl``: pdlwait, pdlpre,
pdllate; ``kernels.gemm.PDL_MODES``).  On the sm_90a emulator against float64 with NaN-poisoned outputs (ragged
M, N and K, fp16 / bf16, bias and activation epilogues, B transposed); the order in the CUDA source that makes
it correct -- ``griddepcontrol.wait`` ahead of both warp-specialized roles, so that no TMA load of A or B, no
bias read and no store of C comes before it (``passes/warp_specialize``, ``warp_specialize_loop``), the ring's
set-up ahead of it only with pdlpre / pdllate (``passes/pdl_prologue``), the trigger after the mainloop; the
launch flag; names; NVRTC builds without spills.  The GPU side: tests/test_s13_gemm_gpu.py."""

import re
import sys
from pathlib import Path

import pytest
from test_s10_gemm_candidates import _compile, assert_builds_without_spills, run_on_the_emulator
from toolchains import needs_nvrtc

import tilewright
import tilewright.language as T
from tilewright.ops import gemm_configs
from tilewright.ops.gemm_configs import GemmConfig

P = GemmConfig.parse
ROWS = "direct 128x64x64 s8 t128 wgmma ws tma-store"  # the heuristic's at 128x8192x8192
PAIRS = "persistent 128x192x64 s4 t128 g8 wgmma ws tma-store/64 pingpong c2x1"  # ... at 2000x3000x1000
WIDE = "persistent 128x256x64 s4 t256 g8 wgmma ws tma-store/128"  # ... at 4096^3
EMULATED = [
    # (config, M, N, K, dtype, trans_b, activation): ragged edges in every dimension
    (P(ROWS + " pdlwait"), 120, 200, 584, "float16", False, "none"),
    (P(ROWS + " pdllate"), 77, 136, 392, "bfloat16", True, "silu"),
    (P(PAIRS + " pdlpre"), 200, 584, 360, "bfloat16", False, "relu"),
    (P(PAIRS + " pdllate"), 136, 392, 200, "float16", True, "silu"),
    (P(WIDE + " pdllate"), 300, 520, 200, "bfloat16", False, "none"),
    (P(ROWS + " pdlearly"), 128, 264, 200, "float16", False, "relu"),
    (P(PAIRS + " pdlearly"), 264, 392, 136, "bfloat16", False, "none"),
    (P("direct 128x128x64 s6 t128 wgmma ws tma-store"), 100, 264, 456, "bfloat16", False, "relu"),
    (P("direct 128x128x64 s6 t256 wgmma ws tma-store"), 128, 136, 520, "float16", True, "none"),
]


@pytest.mark.parametrize("cfg, M, N, K, dtype, trans_b, activation", EMULATED,
                         ids=lambda x: x.short().replace(" ", "_") if isinstance(x, GemmConfig) else None)
def test_pdl_gemms_on_the_emulator(cfg, M, N, K, dtype, trans_b, activation):
    src = run_on_the_emulator(cfg, M, N, K, dtype, trans_b, activation)
    assert ("griddepcontrol.wait" in src) == bool(cfg.pdl)


def _order(src: str) -> dict:
    """Where the things that matter first appear in the source (-1: absent)."""
    marks = {"wait": "griddepcontrol.wait", "trigger": "griddepcontrol.launch_dependents",
             "init": "mbarrier.init", "prefetch": "prefetch.tensormap", "producer": "thread partition producer",
             "tma_load": "cp.async.bulk.tensor.2d.shared::cluster.global", "store": "cp.async.bulk.tensor.2d.global",
             "drain": "wgmma.wait_group.sync.aligned 0"}
    return {k: src.find(v) for k, v in marks.items()}


@pytest.mark.parametrize("base", [ROWS, PAIRS, WIDE])
@pytest.mark.parametrize("mode", ["wait", "pre", "late", "early"])
def test_the_wait_comes_before_every_global_access(base, mode):
    cfg = P(f"{base} pdl{mode}")
    k = _compile(cfg, 392, 200)
    src = k.get_kernel_source()
    at = _order(src)
    assert k.spec.programmatic
    # the whole block waits, ahead of both roles: every TMA load and store, bias read and C store follows
    assert 0 <= at["wait"] < at["producer"] < at["tma_load"] and at["wait"] < at["store"]
    assert src.count("griddepcontrol.wait") == 1
    before = src[:at["wait"]]
    assert not re.search(r"\bA\[|\bB\[|\bBias\[|\bC\[|ld\.global|st\.global|cp\.async\.bulk", before)
    if mode == "wait":
        assert at["wait"] < at["init"] and at["prefetch"] < 0
    else:  # the ring's set-up and the descriptors' prefetch ahead of it
        assert 0 <= at["init"] < at["prefetch"] < at["wait"]
    if mode == "late":
        assert at["drain"] < at["trigger"]  # after the mainloop's last wgmma
    elif mode == "early":
        assert at["wait"] < at["trigger"] < at["producer"]  # right after the wait, the whole block's
    else:
        assert at["trigger"] < 0
    if cfg.pingpong:
        assert k.spec.num_threads == 384  # (still two consumer warpgroups: the wait did not undo ping-pong)


def test_without_pdl_nothing_changes():
    for base in (ROWS, PAIRS):
        k = _compile(P(base), 392, 200)
        assert not k.spec.programmatic and "griddepcontrol" not in k.get_kernel_source()


def test_a_kernels_own_wait_goes_ahead_of_a_warp_specialized_loop():
    """The pass, outside the library: a user's T.pdl_sync before a warp-specialized mainloop is the whole block's
    (left among the consumers' statements, the producer would load A and B before the previous kernel is done)."""
    M = N = K = 256

    @T.prim_func
    def gemm(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(N // 128, M // 128, threads=256) as (bx, by):
            T.pdl_sync()
            A_s = T.alloc_shared((128, 64), "float16")
            B_s = T.alloc_shared((64, 128), "float16")
            acc = T.alloc_fragment((128, 128), "float32")
            T.clear(acc)
            for k in T.Pipelined(K // 64, num_stages=3):
                T.copy(A[by * 128, k * 64], A_s)
                T.copy(B[k * 64, bx * 128], B_s)
                T.gemm(A_s, B_s, acc)
            T.copy(acc, C[by * 128, bx * 128])

    src = tilewright.compile(gemm, target="cuda -arch=sm_90a", execution_backend="emulator",
                             pass_configs={"tw.warp_specialize": True}).get_kernel_source()
    at = _order(src)
    assert "thread partition" in src and 0 <= at["wait"] < at["producer"] < at["tma_load"]


def test_names_refusals_and_candidates():
    for cfg, *_ in EMULATED:
        assert GemmConfig.parse(cfg.short()) == cfg
        assert GemmConfig.from_json(cfg.to_json()) == cfg
        assert gemm_configs.fit_shared(cfg, gemm_configs.H200_SHARED_BYTES) == cfg
    assert P(ROWS + " pdlpre").pass_configs("sm_90")["tw.pdl_prologue"] is True
    assert "tw.pdl_prologue" not in P(ROWS + " pdlwait").pass_configs("sm_90")
    for bad in ("splitk 128x128x64 s4 t128 k/2 wgmma pdlwait", ROWS + " pdlsoon", ROWS + " pdl"):
        with pytest.raises(ValueError):
            P(bad)
    assert GemmConfig.from_json({"kind": "streamk", "pdl": "wait"}) is None
    # a tuned entry stored before the field: no PDL
    assert GemmConfig.from_json({k: v for k, v in P(ROWS).to_json().items() if k != "pdl"}) == P(ROWS)
    # the measured defaults (H200 runs of 2026-12-02 11:30 and 12:03 UTC): pdllate for 128 rows, pdlearly for the
    # clusters' ping-pong pairs; the others unchanged
    h = gemm_configs.heuristic
    assert h(128, 8192, 8192, "bfloat16", "sm_90", 132).short() == ROWS + " pdllate"
    assert h(2000, 3000, 1000, "bfloat16", "sm_90", 132).short() == PAIRS + " pdlearly"
    assert h(4096, 4096, 4096, "float16", "sm_90", 132).pdl == h(8192, 8192, 1024, "float16", "sm_90", 132).pdl == ""
    assert h(128, 8192, 8192, "float16", "sm_80", 108).pdl == ""
    for shape, base, default in (((128, 8192, 8192), ROWS, "late"), ((2000, 3000, 1000), PAIRS, "early"),
                                 ((4096, 4096, 4096), WIDE, "")):
        assert [c.short() for c in gemm_configs.s13_candidates(*shape)] == [
            f"{base} pdl{m}" if m else base for m in ("", "wait", "late", "early") if m != default]
        assert [c.pdl for c in gemm_configs.candidates(*shape, "float16", "sm_90", 132) if c.pdl] == \
            ([default] if default else [])  # (the heuristic's own only)
    with pytest.raises(ValueError, match="pdl mode"):
        from tilewright.ops import kernels
        kernels.linear(64, 64, "float16", "float16", False, False, False, "none", 64, 64, 32, 2, 128, pdl="soon")


@needs_nvrtc
@pytest.mark.parametrize("cfg", [P(f"{b} pdl{m}") for b in (ROWS, PAIRS, WIDE) for m in ("wait", "late", "early")] +
                         [P("direct 128x128x64 s6 t128 wgmma ws tma-store")], ids=lambda c: c.short().replace(" ", "_"))
def test_pdl_gemms_build_without_spills(cfg, tmp_path):
    """NVRTC at the benchmark's shapes: no spills or local memory, HGMMA in the SASS."""
    N, K = (8192, 8192) if cfg.kind == "direct" else (3000, 1000)
    assert_builds_without_spills(cfg, N, K, "bfloat16", tmp_path)


def test_a_warp_specialized_decode_waits_before_its_producer_loads():
    """The same rule in ``warp_specialize_loop``: decode's "ws" variant with "pdlwait" (before session 13 the
    wait sat among the consumers' statements, after the producer's TMA loads of K and V had been issued)."""
    from tilewright.codegen.cuda import print_cuda
    from tilewright.ops import decode_kernels as dk
    from tilewright.passes.pipeline import PassContext, run_pipeline
    from tilewright.target import Target

    variant = ("ws", "pdlwait", "tmerge")
    f = dk.decode_fwd(32, 8, 128, "bfloat16", False, 4, False, False, 16, 64, 2, 256, variant)
    src = print_cuda(run_pipeline(f, PassContext(Target.parse("cuda -arch=sm_90a"),
                                                 {"optimize_level": 2, **dk.decode_pass_configs(variant)})))
    at = _order(src)
    assert 0 <= at["wait"] < at["producer"] < src.find("cp.async.bulk.tensor")


def test_bench_s13_keyword_times_the_heuristic_beside_the_candidates():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    pytest.importorskip("torch")  # (bench/gemm.py imports it)
    import gemm as bench_gemm

    only = bench_gemm.parse_configs("128x8192x8192=s13; 2000x3000x1000=" + PAIRS + " pdlpre")
    rows = bench_gemm.shape_candidates(128, 8192, 8192, "float16", "sm_90", 132, gemm_configs.H200_SHARED_BYTES, only)
    assert [c.short() for c in rows] == [ROWS + " pdllate"] + [
        c.short() for c in gemm_configs.s13_candidates(128, 8192, 8192)]
    assert {c.pdl for c in rows} == {"", "wait", "late", "early"}
    pairs = bench_gemm.shape_candidates(2000, 3000, 1000, "float16", "sm_90", 132, gemm_configs.H200_SHARED_BYTES, only)
    assert [c.short() for c in pairs] == [PAIRS + " pdlpre"]
