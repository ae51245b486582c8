"""The arguments of test_ignored_args.py that take effect, on an NVIDIA GPU: atomics returning the
previous value under every memory order, strided parameters, ``disable_tma`` and ``coalesced_width``.
Checked against float64 references with outputs poisoned.  Skipped without a CUDA GPU."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or getattr(torch.version, "hip", None):
    pytest.skip("needs an NVIDIA GPU with a CUDA build of PyTorch", allow_module_level=True)

import test_ignored_args as cpu  # noqa: E402

import tilewright  # noqa: E402
from tilewright.errors import ArgumentError  # noqa: E402


def _poison(t):
    return t.fill_(float("nan")) if t.dtype.is_floating_point else t.fill_(-12345)


@pytest.mark.parametrize("order", [None, "acquire", "release", "acq_rel", "seq_cst"])
def test_atomic_return_prev_on_the_gpu(order):
    N = 4096
    k = tilewright.compile(cpu.atomics_kernel(N, order=order), target="cuda")
    x = torch.randn(N, device="cuda")
    x0 = x.clone()
    cnt = torch.tensor([17], dtype=torch.int32, device="cuda")
    p, q = _poison(torch.empty(N, device="cuda")), _poison(torch.empty(N, dtype=torch.int32, device="cuda"))
    k(x, cnt, p, q)
    torch.testing.assert_close(p, x0, rtol=0, atol=0)
    torch.testing.assert_close(x.double(), x0.double() + 1.5)
    assert int(cnt.item()) == 17 + N
    assert sorted(q.cpu().tolist()) == list(range(17, 17 + N))


def test_atomic_return_prev_block_uniform_on_the_gpu():
    blocks, N = 64, 128
    import tilewright.language as T

    @T.prim_func
    def kern(Cnt: T.Tensor((1,), "int32"), Out: T.Tensor((blocks, N), "int32")):
        with T.Kernel(blocks, threads=128) as bx:
            ticket = T.atomic_add(Cnt[0], 10, memory_order="acq_rel", return_prev=True)
            for i in T.Parallel(N):
                Out[bx, i] = ticket + i

    k = tilewright.compile(kern, target="cuda")
    cnt = torch.tensor([5], dtype=torch.int32, device="cuda")
    out = _poison(torch.empty((blocks, N), dtype=torch.int32, device="cuda"))
    k(cnt, out)
    assert int(cnt.item()) == 5 + 10 * blocks
    o = out.cpu()
    assert sorted(o[:, 0].tolist()) == [5 + 10 * b for b in range(blocks)]
    assert torch.equal(o - o[:, :1], torch.arange(N, dtype=torch.int32).expand(blocks, N))


def test_strided_parameters_on_the_gpu():
    M, N = 64, 48
    k = tilewright.compile(cpu.strided_kernel(M, N), target="cuda")
    for pad in (8, 24):
        a = torch.randn(N, M, device="cuda").t()  # column-major (strides (1, M))
        b = torch.randn(M, N + pad, device="cuda")[:, :N]  # rows of N + pad elements
        c = _poison(torch.empty(M, N, device="cuda"))
        k(a, b, c)
        torch.testing.assert_close(c.double(), 2 * a.double() + b.double(), rtol=1e-6, atol=1e-6)
    with pytest.raises(ArgumentError, match=r"argument A has strides"):
        k(a.contiguous(), b, c)


@pytest.mark.parametrize("disable", [False, True])
def test_disable_tma_gemm_on_the_gpu(disable):
    M, N, K = 256, 192, 320
    k = tilewright.compile(cpu.gemm_kernel(M, N, K, 64, 64, 32, stages=3, copy_kw={"disable_tma": disable}),
                           target="cuda")
    assert bool(k.thread_kernel.tensor_maps) != disable
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    c = _poison(torch.empty(M, N, device="cuda"))
    k(a, b, c)
    torch.testing.assert_close(c.double(), a.double() @ b.double(), rtol=1e-2, atol=2e-2)


@pytest.mark.parametrize("width", [None, 2, 1])
@pytest.mark.parametrize("via_parallel", [False, True])
def test_coalesced_width_on_the_gpu(width, via_parallel):
    M, N = 32, 64
    k = tilewright.compile(cpu.scaled_copy(M, N, width, via_parallel), target="cuda")
    a = torch.randn(M, N, device="cuda")
    b = _poison(torch.empty(M, N, device="cuda"))
    k(a, b)
    torch.testing.assert_close(b, a * (3.0 if via_parallel else 1.0))
