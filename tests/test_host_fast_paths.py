"""The memos that make a repeat call cheap (``runtime/launcher.py``'s fast argument bind,
``ops.*`` plans keyed by argument metadata, the attention check memo) never change an answer:
a call with other metadata (shape, dtype, stride, contiguity, alignment, device) takes the checked
path, bad input after good input still raises ``ArgumentError``, and results match float64."""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tilewright  # noqa: E402
import tilewright.language as T  # noqa: E402
from tilewright import ops  # noqa: E402
from tilewright.errors import ArgumentError  # noqa: E402
from tilewright.runtime.launcher import Launcher  # noqa: E402

dispatch = importlib.import_module("tilewright.ops.dispatch")
attn = importlib.import_module("tilewright.ops.attention_dispatch")


# ---------------------------------------------------------------- launcher
class ClaimsCuda(torch.Tensor):
    """A CPU tensor that says it lives on cuda:0 (the recording runtime below never reads it)."""

    __torch_function__ = torch._C._disabled_torch_function_impl
    is_cuda = True

    def get_device(self):
        return 0


class Recorder:
    def __init__(self):
        self.launches = []

    def launch(self, *args):
        self.launches.append(args)


class FakeRuntime:
    def __init__(self):
        self.fn = Recorder()

    def load_function(self, code_object, name, dev):
        return self.fn

    def current_stream(self, dev):
        return 0x77

    def synchronize(self, dev):
        pass


def _launcher(func):
    k = tilewright.compile(func, target="cuda -arch=sm_90a")
    rt = FakeRuntime()
    return Launcher(k.spec, rt), rt.fn


def _add():
    @T.prim_func
    def add(A: T.Tensor((256,), "float32"), B: T.Tensor((256,), "float32"), C: T.Tensor((256,), "float32")):
        with T.Kernel(2, threads=128) as bx:
            for i in T.Parallel(128):
                C[bx * 128 + i] = A[bx * 128 + i] + B[bx * 128 + i]

    return add


def _fake(t):
    return t.as_subclass(ClaimsCuda)


def test_fast_bind_delivers_pointers_grid_and_stream():
    la, fn = _launcher(_add())
    a, b, c = (_fake(torch.randn(256)) for _ in range(3))
    for _ in range(2):  # the second call goes through the prepared plan
        assert la._fast_torch_bind([a, b, c]) is not None
        la.launch([a, b, c])
        grid, block, shared, stream, types, values = fn.launches[-1]
        assert grid == (2, 1, 1) and block == (128, 1, 1) and stream == 0x77
        assert types == ("ptr", "ptr", "ptr") and values == (a.data_ptr(), b.data_ptr(), c.data_ptr())


def test_fast_bind_refuses_what_it_cannot_prove_after_a_good_call():
    la, _ = _launcher(_add())
    good = [_fake(torch.randn(256)) for _ in range(3)]
    assert la._fast_torch_bind(good) is not None
    base = torch.randn(1024)
    cases = {
        "other shape": _fake(torch.randn(128)),
        "other rank": _fake(torch.randn(1, 256)),
        "other dtype": _fake(torch.randn(256, dtype=torch.float64)),
        "strided (same shape)": _fake(base[::4]),
        "misaligned view": _fake(base[1:257]),
        "a CPU tensor": torch.randn(256),
        "not a tensor": np.zeros(256, np.float32),
    }
    for what, bad in cases.items():
        assert la._fast_torch_bind([good[0], bad, good[2]]) is None, what
        assert la._fast_torch_bind(good) is not None  # and the good signature still passes

    class OtherDevice(ClaimsCuda):
        def get_device(self):
            return 1

    assert la._fast_torch_bind([good[0], torch.randn(256).as_subclass(OtherDevice), good[2]]) is None


def test_fast_bind_dynamic_sizes_and_scalars():
    m = T.dynamic("m")

    @T.prim_func
    def scale(A: T.Tensor((m, 64), "float32"), B: T.Tensor((m, 64), "float32"), s: T.float32, n: T.int32):
        with T.Kernel(T.ceildiv(m, 16), threads=64) as bx:
            for i, j in T.Parallel(16, 64):
                if bx * 16 + i < m:
                    B[bx * 16 + i, j] = A[bx * 16 + i, j] * s + n

    la, fn = _launcher(scale)
    a, b = _fake(torch.randn(40, 64)), _fake(torch.randn(40, 64))
    la.launch([a, b, 2, 3])
    assert fn.launches[-1][0] == (3, 1, 1)
    assert fn.launches[-1][5] == (a.data_ptr(), b.data_ptr(), 2.0, 3, 40)
    a2, b2 = _fake(torch.randn(17, 64)), _fake(torch.randn(17, 64))
    la.launch([a2, b2, 0.5, -1])
    assert fn.launches[-1][0] == (2, 1, 1) and fn.launches[-1][5][-1] == 17
    # sizes that disagree, an int out of int32 range, a bool: the checked path decides
    assert la._fast_torch_bind([a, b2, 2.0, 1]) is None
    assert la._fast_torch_bind([a, b, 2.0, 2**31]) is None
    assert la._fast_torch_bind([a, b, 2.0, True]) is None
    with pytest.raises(ArgumentError):
        la.launch([a, b2, 2.0, 1])


def test_current_stream_without_cuda_is_the_default_stream():
    from tilewright.runtime import cuda_driver

    assert cuda_driver.current_stream(0) == 0  # torch has not initialised CUDA on this machine


# ---------------------------------------------------------------- ops plans (interpreter)
def _softmax_ref(x):
    x = x.double()
    e = (x - x.max(-1, keepdim=True).values).exp()
    return e / e.sum(-1, keepdim=True)


def test_softmax_plan_follows_metadata():
    torch.manual_seed(0)
    base = torch.randn(6, 128)
    inputs = [base, base * 3, torch.randn(3, 2, 128), base.t().contiguous().t()[:, :],  # repeat, new rank
              torch.randn(128, 6).t(), base.half(), torch.randn(5, 64), base[:, :64]]  # strides, dtype, N
    for x in inputs:
        for _ in range(2):
            got = ops.softmax(x)
            assert got.dtype == x.dtype and got.shape == x.shape
            assert not got.isnan().any()
            tol = 2e-3 if x.dtype == torch.float16 else 1e-5
            assert (got.double() - _softmax_ref(x)).abs().max().item() < tol


def test_softmax_and_rms_norm_errors_after_good_calls():
    x, w = torch.randn(4, 64), torch.randn(64)
    ops.softmax(x)
    ops.rms_norm(x, w)
    with pytest.raises(ArgumentError, match="last dimension"):
        ops.softmax(x, dim=0)
    with pytest.raises(ArgumentError):
        ops.softmax(x.to(torch.int32))
    with pytest.raises(ArgumentError, match="weight"):
        ops.rms_norm(x, torch.randn(32))
    with pytest.raises(ArgumentError, match="weight"):
        ops.rms_norm(x, w.half())
    with pytest.raises(ArgumentError, match="eps"):
        ops.rms_norm(x, w, eps=math.nan)
    with pytest.raises(ArgumentError, match="eps"):
        ops.rms_norm(x, w, eps=-1.0)


def test_rms_norm_plan_matches_float64():
    torch.manual_seed(1)
    w = torch.randn(96)
    for x, eps in ((torch.randn(5, 96), 1e-6), (torch.randn(5, 96), 1e-6), (torch.randn(2, 3, 96), 1e-6),
                   (torch.randn(96, 5).t(), 1e-6), (torch.randn(5, 96), 0.5)):
        got = ops.rms_norm(x, w, eps=eps)
        xd = x.double()
        want = xd / (xd.pow(2).mean(-1, keepdim=True) + eps).sqrt() * w.double()
        assert not got.isnan().any() and (got.double() - want).abs().max().item() < 1e-4


# ---------------------------------------------------------------- attention check memo
def _attn_ref(q, k, v):
    g = q.shape[1] // k.shape[1]
    k, v = k.double().repeat_interleave(g, 1), v.double().repeat_interleave(g, 1)
    s = q.double() @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    return torch.softmax(s, -1) @ v


def test_attention_repeat_calls_match_and_errors_still_raise():
    torch.manual_seed(2)
    q = torch.randn(1, 4, 1, 32).half()
    kv = torch.randn(1, 2, 64, 32).half()
    for _ in range(2):
        got = ops.attention(q, kv, kv)
        assert not got.isnan().any()
        assert (got.double() - _attn_ref(q, kv, kv)).abs().max().item() < 3e-3
    with pytest.raises(ArgumentError, match="dtype"):
        ops.attention(q, kv.bfloat16(), kv.bfloat16())
    with pytest.raises(ArgumentError, match="heads"):
        ops.attention(q, torch.randn(1, 3, 64, 32).half(), torch.randn(1, 3, 64, 32).half())
    with pytest.raises(ArgumentError, match="scale"):
        ops.attention(q, kv, kv, scale=-1.0)
    with pytest.raises(ArgumentError, match="scale"):
        ops.attention(q, kv, kv, scale=float("nan"))
    with pytest.raises(ArgumentError, match="causal"):
        ops.attention(q, kv, kv, causal=1)
    with pytest.raises(ArgumentError, match="num_splits"):
        ops.attention(q, kv, kv, num_splits=[2])  # unhashable: checked every call


def test_attention_check_memo_keys_on_values_and_types():
    calls = []
    real = attn._check_arguments
    try:
        attn._check_arguments = lambda *a: (calls.append(a), real(*a))[1]
        attn._checked.clear()
        q, kv = torch.randn(1, 4, 1, 32).half(), torch.randn(1, 2, 64, 32).half()
        args = (q, kv, kv, False, None, None, None, None, None, None)
        attn._check(*args)
        attn._check(*args)
        assert len(calls) == 1
        attn._check(q, kv, kv, False, 0.5, None, None, None, None, None)  # another scale: checked
        attn._check(q.bfloat16(), kv.bfloat16(), kv.bfloat16(), False, None, None, None, None, None, None)
        assert len(calls) == 3
    finally:
        attn._check_arguments = real


def test_matmul_plan_follows_strides_dtypes_and_bias():
    torch.manual_seed(3)
    a = torch.randn(32, 64).half()
    b = torch.randn(64, 48).half()
    bias = torch.randn(48).half()
    wide = torch.randn(64, 96).half()
    cases = [(a, b, None), (a, b, None), (a, b.t().contiguous().t(), None),  # same shape, transposed strides
             (a, wide[:, ::2], None),  # same shape, strided: copied
             (a.bfloat16(), b.bfloat16(), None), (a, b, bias), (a[:17], b, bias)]
    for x, w, bi in cases:
        for _ in range(2):
            got = ops.matmul(x, w, bias=bi)
            want = x.double() @ w.double() + (bi.double() if bi is not None else 0)
            assert got.dtype == x.dtype and got.shape == (x.shape[0], w.shape[1])
            assert not got.isnan().any()
            assert (got.double() - want).abs().max().item() < 2e-2 * max(1.0, want.abs().max().item())


def test_matmul_errors_after_good_calls():
    a, b = torch.randn(32, 64).half(), torch.randn(64, 48).half()
    ops.matmul(a, b)
    with pytest.raises(ArgumentError, match="columns"):
        ops.matmul(a, torch.randn(32, 48).half())
    with pytest.raises(ArgumentError, match="dtype"):
        ops.matmul(a, b.bfloat16())
    with pytest.raises(ArgumentError, match="activation"):
        ops.matmul(a, b, activation="tanh")
    with pytest.raises(ArgumentError, match="bias"):
        ops.matmul(a, b, bias=torch.randn(47).half())
    with pytest.raises(ArgumentError, match="out_dtype"):
        ops.matmul(a, b, out_dtype=torch.float64)
