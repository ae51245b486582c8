"""Split-K, persistent and direct ``ops.matmul`` configurations on the GPU: every candidate the
benchmark times, against float64 with NaN-poisoned outputs; split-K bit-reproducible unless
atomic; CUDA-graph capture of the two-kernel split-K path.  Skipped without a CUDA GPU."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or getattr(torch.version, "hip", None):
    pytest.skip("needs an NVIDIA GPU with a CUDA build of PyTorch", allow_module_level=True)

from tilewright.ops import dispatch, gemm_configs  # noqa: E402
from tilewright.ops.gemm_configs import GemmConfig  # noqa: E402


def _inputs(M, N, K, dtype, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(M, K, device="cuda", generator=g).to(dtype)
    w = torch.randn(N, K, device="cuda", generator=g).to(dtype)
    bias = torch.randn(N, device="cuda", generator=g).to(dtype)
    return a, w, bias


def _rel(got, want) -> float:
    """Largest error relative to the largest output, minus what rounding the exact result to the
    output's dtype may cost (half an ulp: 2^-11 of an fp16 value, 2^-8 of a bf16 one — alone more
    than the 2e-3 bound for bf16 outputs, for cuBLAS as for us)."""
    assert torch.isfinite(got).all(), "outputs left unwritten (NaN poison)"
    rounding = {torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}.get(got.dtype, 0.0)
    return (got.double() - want).abs().max().item() / want.abs().max().item() - rounding


@pytest.mark.parametrize("M, N, K", [(16, 4096, 4096), (128, 4096, 4096), (1000, 1500, 1000)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_every_candidate_matches_float64(M, N, K, dtype):
    probe = torch.empty(1, device="cuda")
    arch, num_sms, _ = dispatch._arch_of(probe)
    a, w, _ = _inputs(M, N, K, dtype, seed=M)
    b = w.t().contiguous()
    want = a.double() @ b.double()
    for cfg in gemm_configs.candidates(M, N, K, str(dtype).replace("torch.", ""), arch, num_sms,
                                       dispatch.shared_limit(probe)):
        out = torch.full((M, N), float("nan"), device="cuda", dtype=dtype)
        dispatch.matmul_impl(a, b, None, None, None, config=cfg, out=out)
        assert _rel(out, want) < 2e-3, cfg


@pytest.mark.parametrize("cfg", [GemmConfig("splitk", 16, 128, 128, 4, 128, splits=3),
                                 GemmConfig("splitk", 16, 128, 128, 4, 128, splits=4, atomic=True),
                                 GemmConfig("splitk", 64, 128, 64, 4, 128, splits=2, wgmma=True)],
                         ids=lambda c: c.short().replace(" ", "_"))
def test_split_k_transposed_weight_bias_activation(cfg):
    a, w, bias = _inputs(50, 3000, 2000, torch.bfloat16, seed=1)
    want = torch.nn.functional.gelu(a.double() @ w.double().t() + bias.double(), approximate="tanh")
    out = torch.full((50, 3000), float("nan"), device="cuda", dtype=torch.bfloat16)
    dispatch.matmul_impl(a, w.t(), bias, "gelu_tanh", None, config=cfg, out=out)
    assert _rel(out, want) < 2e-3
    again = dispatch.matmul_impl(a, w.t(), bias, "gelu_tanh", None, config=cfg)
    if not cfg.atomic:
        assert torch.equal(out, again)  # the slices are added in a fixed order


def test_persistent_on_hopper_with_bias_and_fp32_out():
    arch, _, _ = dispatch._arch_of(torch.empty(1, device="cuda"))
    if arch != "sm_90":
        pytest.skip("the persistent GEMM is used on sm_90 only")
    a, w, bias = _inputs(2000, 3000, 1000, torch.float16, seed=2)
    cfg = GemmConfig("persistent", 128, 256, 64, 4, 256, wgmma=True)
    out = torch.full((2000, 3000), float("nan"), device="cuda", dtype=torch.float32)
    dispatch.matmul_impl(a, w.t(), bias, "relu", torch.float32, config=cfg, out=out)
    assert _rel(out, (a.double() @ w.double().t() + bias.double()).clamp_min(0)) < 2e-3


def test_split_k_in_a_cuda_graph():
    from tilewright import ops

    a, w, _ = _inputs(16, 4096, 8192, torch.float16, seed=3)
    assert dispatch.matmul_config(16, 4096, 8192, a, False, True).kind == "splitk"
    ops.matmul(a, w.t())  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = ops.matmul(a, w.t())
    a.copy_(torch.randn_like(a))
    graph.replay()
    torch.cuda.synchronize()
    assert _rel(out, a.double() @ w.double().t()) < 2e-3
