"""Session 13 GEMMs on the GPU (sm_90): programmatic dependent launch (``GemmConfig.pdl``,
``gemm_configs.s13_candidates``) through ``ops.matmul`` with each configuration forced, against float64 with
NaN-poisoned outputs (the bench's shapes and ragged ones, fp16 / bf16, bias, activation, a transposed weight);
and chains of calls that depend on each other -- each call reading what the one before wrote (and a torch op
between them), or writing what the one before read -- eagerly and captured in a CUDA graph, bit for bit equal
to the same chain without PDL (the same kernels' arithmetic: only the launch differs).  Skipped without an
H100/H200."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or getattr(torch.version, "hip", None) or \
        torch.cuda.get_device_capability() != (9, 0):
    pytest.skip("needs an sm_90 NVIDIA GPU with a CUDA build of PyTorch", allow_module_level=True)

import dataclasses  # noqa: E402

from test_gpu_s10_gemm import _run, run_bias_silu_transposed  # noqa: E402

from tilewright.ops import dispatch, gemm_configs  # noqa: E402
from tilewright.ops.gemm_configs import GemmConfig  # noqa: E402

BENCH_SHAPES = [(2000, 3000, 1000), (128, 8192, 8192), (4096, 4096, 4096), (8192, 8192, 1024)]
# every PDL form the bench times (MEASURE-ME.md: the heuristic's and gemm_configs.s13_candidates) at its shapes
PDL = [(c, *shape) for shape in BENCH_SHAPES
       for c in [gemm_configs.heuristic(*shape, "float16", "sm_90", 132), *gemm_configs.s13_candidates(*shape)] if c.pdl]
P = GemmConfig.parse
ROWS = "direct 128x64x64 s8 t128 wgmma ws tma-store"
PAIRS = "persistent 128x192x64 s4 t128 g8 wgmma ws tma-store/64 pingpong c2x1"
WIDE = "persistent 128x256x64 s4 t256 g8 wgmma ws tma-store/128"
# (ragged N and K compile new kernels: three configurations, one shape)
RAGGED = [(P(x), 300, 1000, 264) for x in (PAIRS + " pdlwait", ROWS + " pdllate", WIDE + " pdlearly")]
# the chains: (configuration, M, K) -- N = K; at K 8192 and 4096 the bench's bf16 kernels (MEASURE-ME.md's run)
CHAINS = [(P(ROWS + " pdllate"), 256, 8192), (P(ROWS + " pdlearly"), 256, 8192), (P(PAIRS + " pdlwait"), 1000, 1024),
          (P(PAIRS + " pdlearly"), 1000, 1024), (P(WIDE + " pdlearly"), 1000, 4096)]


def _ids(x):
    return x.short().replace(" ", "_") if hasattr(x, "short") else str(x)


@pytest.mark.parametrize("cfg, M, N, K", PDL + RAGGED, ids=_ids)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_pdl_candidates_match_float64(cfg, M, N, K, dtype):
    assert _run(cfg, M, N, K, dtype) < 2e-3, cfg.short()


@pytest.mark.parametrize("cfg", [P(PAIRS + " pdlwait"), P(ROWS + " pdllate")], ids=_ids)
def test_pdl_with_bias_activation_and_transposed_weight(cfg):
    assert run_bias_silu_transposed(cfg, 600 if cfg.block_N > 64 else 120, seed=13) < 2e-3, cfg.short()


def _chain(cfg, x, w, y, rounds=3):
    """``rounds`` times: y = x @ w; x = y @ w (written where the call before read); x *= 0.5 (torch, between two
    of ours); each of ours reads what the one before wrote."""
    for _ in range(rounds):
        dispatch.matmul_impl(x, w, None, None, None, config=cfg, out=y)
        dispatch.matmul_impl(y, w, None, None, None, config=cfg, out=x)
        x.mul_(0.5)


@pytest.mark.parametrize("cfg, M, K", CHAINS, ids=_ids)
@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
def test_dependent_calls_see_each_others_results(cfg, M, K, graph):
    g = torch.Generator(device="cuda").manual_seed(1300 + M)
    x0 = torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16)
    w = (torch.randn(K, K, device="cuda", generator=g) / K ** 0.5).to(torch.bfloat16)
    plain = dataclasses.replace(cfg, pdl="")
    want_x, want_y = x0.clone(), torch.full((M, K), float("nan"), device="cuda", dtype=torch.bfloat16)
    _chain(plain, want_x, w, want_y)
    # (the first step against float64 too: the plain chain is right)
    x, y = x0.clone(), torch.full((M, K), float("nan"), device="cuda", dtype=torch.bfloat16)
    dispatch.matmul_impl(x, w, None, None, None, config=plain, out=y)
    ref = x0.double() @ w.double()
    assert (y.double() - ref).abs().max().item() <= 2e-2 * ref.abs().max().item()
    x, y = x0.clone(), torch.full((M, K), float("nan"), device="cuda", dtype=torch.bfloat16)
    if graph:
        _chain(cfg, x.clone(), w, y.clone(), rounds=1)  # (compiled outside the capture)
        torch.cuda.synchronize()
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            cg = torch.cuda.CUDAGraph()
            with torch.cuda.graph(cg, stream=side):
                _chain(cfg, x, w, y)
        x.copy_(x0)
        y.fill_(float("nan"))
        torch.cuda.synchronize()
        cg.replay()
    else:
        _chain(cfg, x, w, y)
    torch.cuda.synchronize()
    assert torch.isfinite(x).all() and torch.isfinite(y).all()
    assert torch.equal(x, want_x) and torch.equal(y, want_y), cfg.short()


def test_pdl_kernels_are_launched_programmatically():
    a = torch.empty(1, device="cuda", dtype=torch.float16)
    arch, num_sms, _ = dispatch._arch_of(a)
    for cfg, _m, N, K in PDL:
        for c in (cfg, dataclasses.replace(cfg, pdl="")):
            plan = dispatch._plan(c, N, K, "float16", "float16", False, False, False, "none", dispatch._target_of(a),
                                  arch, num_sms)
            assert plan[1].spec.programmatic == bool(c.pdl), c.short()
