"""GPU tests: kernels compiled for the local NVIDIA GPU, checked against float64 references.

Skipped cleanly when there is no CUDA GPU (or no PyTorch with CUDA)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or getattr(torch.version, "hip", None):
    pytest.skip("needs an NVIDIA GPU with a CUDA build of PyTorch", allow_module_level=True)

import tilewright  # noqa: E402
import tilewright.language as T  # noqa: E402
from tilewright.kernels import matmul, rms_norm, softmax  # noqa: E402


def _poison(t):
    return t.fill_(float("nan")) if t.dtype.is_floating_point else t.fill_(-12345)


def _ref_mm(a, b, ta, tb):
    a64, b64 = a.double(), b.double()
    return (a64.T if ta else a64) @ (b64.T if tb else b64)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("shape", [(512, 512, 512), (1000, 500, 300), (2000, 3000, 1000), (256, 384, 128)])
@pytest.mark.parametrize("trans", [(False, False), (False, True), (True, False), (True, True)])
def test_gemm(dtype, shape, trans):
    M, N, K = shape
    ta, tb = trans
    if (ta or tb) and shape != (256, 384, 128) and shape != (1000, 500, 300):
        pytest.skip("transposes are covered on two shapes")
    td = getattr(torch, dtype)
    g = torch.Generator(device="cuda").manual_seed(M + N + K)
    a = torch.randn((K, M) if ta else (M, K), device="cuda", generator=g).to(td)
    b = torch.randn((N, K) if tb else (K, N), device="cuda", generator=g).to(td)
    c = _poison(torch.empty((M, N), device="cuda", dtype=td))
    k = tilewright.compile(matmul(M, N, K, 128, 128, 32, dtype=dtype, trans_A=ta, trans_B=tb), target="cuda")
    k(a, b, c)
    ref = _ref_mm(a, b, ta, tb)
    torch.testing.assert_close(c.double(), ref, rtol=2e-2, atol=2e-2 * K**0.5)


def test_gemm_big_tile_relu_and_out_idx():
    M, N, K = 1024, 768, 512
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    k = tilewright.compile(matmul(M, N, K, 128, 256, 32, threads=256, relu=True), out_idx=[-1], target="cuda")
    c = k(a, b)
    ref = torch.relu(a.double() @ b.double())
    torch.testing.assert_close(c.double(), ref, rtol=2e-2, atol=0.5)
    assert k.resource_usage["spills"] == 0


def test_gemm_dynamic_m():
    m = T.dynamic("m")
    k = tilewright.compile(matmul(m, 256, 128, 64, 64, 32), out_idx=[-1], target="cuda")
    for M in (1, 77, 300):
        a = torch.randn(M, 128, device="cuda", dtype=torch.float16)
        b = torch.randn(128, 256, device="cuda", dtype=torch.float16)
        c = k(a, b)
        torch.testing.assert_close(c.double(), a.double() @ b.double(), rtol=2e-2, atol=0.2)


def test_elementwise_scalar_param():
    N = 1000003

    @T.prim_func
    def axpy(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32"), Z: T.Tensor((N,), "float32"),
             alpha: T.float32):
        with T.Kernel(T.ceildiv(N, 1024), threads=256) as bx:
            for i in T.Parallel(1024):
                if bx * 1024 + i < N:
                    Z[bx * 1024 + i] = alpha * X[bx * 1024 + i] + T.sigmoid(Y[bx * 1024 + i])

    k = tilewright.compile(axpy, target="cuda")
    x, y = torch.randn(N, device="cuda"), torch.randn(N, device="cuda")
    z = _poison(torch.empty(N, device="cuda"))
    k(x, y, z, 0.5)
    torch.testing.assert_close(z.double(), 0.5 * x.double() + torch.sigmoid(y.double()), rtol=1e-5, atol=1e-5)


def test_ragged_copy_through_shared():
    M, N, bm, bn = 1000, 500, 64, 128

    @T.prim_func
    def copy2d(A: T.Tensor((M, N), "float16"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            s = T.alloc_shared((bm, bn), "float16")
            T.copy(A[by * bm, bx * bn], s)
            T.copy(s, B[by * bm, bx * bn])

    k = tilewright.compile(copy2d, target="cuda")
    a = torch.randn(M, N, device="cuda", dtype=torch.float16)
    b = _poison(torch.empty(M, N, device="cuda"))
    k(a, b)
    torch.testing.assert_close(b, a.float())


@pytest.mark.parametrize("M,N", [(64, 1024), (33, 4096)])
def test_softmax(M, N):
    k = tilewright.compile(softmax(M, N), out_idx=[-1], target="cuda")
    x = torch.randn(M, N, device="cuda")
    y = k(x)
    torch.testing.assert_close(y.double(), torch.softmax(x.double(), -1), rtol=1e-5, atol=1e-6)


def test_rms_norm():
    M, N = 100, 2048
    k = tilewright.compile(rms_norm(M, N), out_idx=[-1], target="cuda")
    x = torch.randn(M, N, device="cuda", dtype=torch.float16)
    y = k(x)
    x64 = x.double()
    ref = x64 / torch.sqrt((x64 * x64).mean(-1, keepdim=True) + 1e-6)
    torch.testing.assert_close(y.double(), ref, rtol=1e-2, atol=1e-2)


def test_argument_errors():
    k = tilewright.compile(softmax(64, 1024), out_idx=[-1], target="cuda")
    with pytest.raises(tilewright.ArgumentError, match="shape"):
        k(torch.randn(64, 512, device="cuda"))
    with pytest.raises(tilewright.ArgumentError, match="dtype"):
        k(torch.randn(64, 1024, device="cuda", dtype=torch.float16))
    with pytest.raises(tilewright.ArgumentError, match="contiguous"):
        k(torch.randn(1024, 64, device="cuda").T)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("S,D", [(256, 64), (200, 128)])
def test_flash_attention(causal, S, D):
    from tilewright.kernels import flash_attention

    B, H = 2, 3
    k = tilewright.compile(flash_attention(B, H, S, D, is_causal=causal), out_idx=[-1], target="cuda")
    q, kk, v = [torch.randn(B, S, H, D, device="cuda", dtype=torch.float16) for _ in range(3)]
    o = k(q, kk, v)
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.double().transpose(1, 2), kk.double().transpose(1, 2), v.double().transpose(1, 2), is_causal=causal
    ).transpose(1, 2)
    torch.testing.assert_close(o.double(), ref, rtol=1e-2, atol=1e-2)


def test_export_builds_a_torch_extension(tmp_path):
    import importlib.util
    import shutil

    if shutil.which("nvcc") is None:
        pytest.skip("exported extensions are built with nvcc, which is not on PATH")
    m = T.dynamic("m")
    # export writes no host-side TMA descriptor setup: the exported kernel uses cp.async
    k = tilewright.compile(matmul(m, 256, 128, 64, 64, 32), target="cuda", pass_configs={"tw.disable_tma": True})
    out = k.export(str(tmp_path / "ext"))
    spec = importlib.util.spec_from_file_location("tw_build", f"{out}/build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    ext = mod.load()
    a = torch.randn(200, 128, device="cuda", dtype=torch.float16)
    b = torch.randn(128, 256, device="cuda", dtype=torch.float16)
    c = _poison(torch.empty(200, 256, device="cuda", dtype=torch.float16))
    ext.run(a, b, c)
    torch.testing.assert_close(c.double(), a.double() @ b.double(), rtol=2e-2, atol=0.2)


# ---- more programs of the kinds users write, from the shared test zoo, on the GPU


def _np(t):
    return t.detach().cpu().numpy()


def test_fp32_simt_gemm_with_bias_relu():
    from zoo import gemm_ref
    from zoo import matmul as zmatmul

    M, N, K = 200, 136, 72
    f = zmatmul(M, N, K, 64, 64, 32, "float32", stages=2, epilogue="bias_relu")
    a, b = torch.randn(M, K, device="cuda"), torch.randn(K, N, device="cuda")
    bias = torch.randn(N, device="cuda")
    c = _poison(torch.empty(M, N, device="cuda"))
    tilewright.compile(f, target="cuda")(a, b, bias, c)
    ref = gemm_ref(_np(a), _np(b), bias=_np(bias), epilogue="bias_relu")
    torch.testing.assert_close(c.double(), torch.from_numpy(ref).cuda(), rtol=1e-4, atol=1e-3)


def test_layernorm_192_columns():
    from zoo import layernorm, layernorm_ref

    M, N = 45, 192
    x = torch.randn(M, N, device="cuda") * 2 + 1
    g, b = torch.randn(N, device="cuda"), torch.randn(N, device="cuda")
    y = _poison(torch.empty(M, N, device="cuda"))
    tilewright.compile(layernorm(M, N, 16), target="cuda")(x, g, b, y)
    torch.testing.assert_close(y.double(), torch.from_numpy(layernorm_ref(_np(x), _np(g), _np(b))).cuda(),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("style", ["idiomatic", "fresh"])
def test_column_sum(style):
    from zoo import column_sum

    M, N = 333, 100
    x = torch.randn(M, N, device="cuda")
    s = _poison(torch.empty(N, device="cuda"))
    tilewright.compile(column_sum(M, N, 64, 32, style), target="cuda")(x, s)
    torch.testing.assert_close(s.double(), x.double().sum(0), rtol=1e-5, atol=1e-4)


def test_online_softmax_and_casts():
    from zoo import convert_copy, online_softmax

    M, N = 70, 1000
    x = torch.randn(M, N, device="cuda", dtype=torch.float16)
    y = _poison(torch.empty(M, N, device="cuda", dtype=torch.float16))
    tilewright.compile(online_softmax(M, N, 16, 128), target="cuda")(x, y)
    torch.testing.assert_close(y.double(), torch.softmax(x.double(), -1), rtol=1e-2, atol=1e-3)
    X = torch.randn(100, 72, device="cuda") * 100
    Y = _poison(torch.empty(100, 72, device="cuda", dtype=torch.float16))
    Z = _poison(torch.empty(100, 72, device="cuda", dtype=torch.float16))
    tilewright.compile(convert_copy(100, 72, 32, 32), target="cuda")(X, Y, Z)
    torch.testing.assert_close(Y, X.half())
    torch.testing.assert_close(Z, X.half())
