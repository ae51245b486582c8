"""The per-signature plans of ``tilewright.ops`` (``ops/rows.py``, the matmul memo, the dense
attention plan) on the launch path a GPU takes, run on the CPU: each kernel the ops compile (for
the interpreter) is wrapped as a "device" kernel whose launcher turns the pointers and sizes it
receives back into tensors over the same memory and runs the interpreter on them.  So a result
that matches float64 proves the pointers, sizes and scalars a repeat call launches with; the
outputs the ops allocate are poisoned (NaN) so that an element left unwritten shows.  Also: every
memo is left for the checked path when the signature changes (strides, dtype, device, contiguity,
alignment, the tuned configuration), and bad input after good input still gets the same error."""

from __future__ import annotations

import ctypes
import importlib
import math

import pytest

torch = pytest.importorskip("torch")

from tilewright import ops  # noqa: E402
from tilewright.binding.tensor_args import to_torch_dtype  # noqa: E402
from tilewright.errors import ArgumentError  # noqa: E402
from tilewright.ir import tile as t  # noqa: E402
from tilewright.ir.analysis import eval_expr  # noqa: E402
from tilewright.ir.expr import Var  # noqa: E402
from tilewright.ops import decode_kernels  # noqa: E402

dispatch = importlib.import_module("tilewright.ops.dispatch")
rows_mod = importlib.import_module("tilewright.ops.rows")
attn = importlib.import_module("tilewright.ops.attention_dispatch")


def _at(ptr: int, shape, dtype):
    """A tensor over ``ptr`` (memory some live CPU tensor owns)."""
    n = math.prod(shape)
    size = torch.empty((), dtype=dtype).element_size()
    buf = (ctypes.c_byte * max(n * size, 1)).from_address(ptr)
    return torch.frombuffer(buf, dtype=dtype, count=n).view(shape)


class PointerKernel:
    """An interpreter kernel seen as a GPU kernel: ``bind`` and ``launch_bound`` as the launcher's."""

    backend = "device"

    def __init__(self, real):
        self.real = real
        self.params = real.params
        self.launcher = self
        self.binds = self.bound_launches = self.checked_calls = 0

    def __call__(self, *args, stream=None):  # the checked path (JITKernel.__call__)
        self.checked_calls += 1
        return self.real(*args)

    def bind(self, args):
        self.binds += 1
        dyn = {}
        for p, a in zip(self.params, args):
            if isinstance(p, t.Buffer):
                assert a.is_contiguous() and a.data_ptr() % 16 == 0, p.name
                for want, got in zip(p.shape, a.shape):
                    if isinstance(want, Var):
                        assert dyn.setdefault(want, got) == got
                    else:
                        assert want == got, (p.name, tuple(p.shape), tuple(a.shape))
        return [a.data_ptr() if isinstance(p, t.Buffer) else a for p, a in zip(self.params, args)], dyn, 0

    def launch_bound(self, values, dyn, dev, stream=None, sync=False):
        self.bound_launches += 1
        args = []
        for p, v in zip(self.params, values):
            if isinstance(p, t.Buffer):
                assert v % 16 == 0, f"{p.name}: pointer {v:#x} is not 16-byte aligned"
                shape = [s if isinstance(s, int) else int(eval_expr(s, dyn)) for s in p.shape]
                args.append(_at(v, shape, to_torch_dtype(p.dtype)))
            else:
                args.append(v)
        self.real(*args)


class PoisonTorch:
    """torch, but ``empty``/``empty_like`` give NaN-filled tensors (the ops' outputs and workspaces)."""

    def __getattr__(self, name):
        return getattr(torch, name)

    @staticmethod
    def empty(*shape, **kw):
        return _poison(torch.empty(*shape, **kw))

    @staticmethod
    def empty_like(*a, **kw):
        return _poison(torch.empty_like(*a, **kw))


def _poison(x):
    return x.fill_(float("nan")) if x.is_floating_point() else x.fill_(-7)


def wrap_op_kernels(monkeypatch, wrapper) -> dict:
    """The ops' kernels wrapped by ``wrapper`` (one per compiled kernel) and their allocations poisoned,
    plans forgotten; returns {id(kernel): wrapped} (forget the plans again after the test)."""
    wrapped: dict = {}
    real_kernel = dispatch._kernel

    def kernel(*a, **kw):
        k = real_kernel(*a, **kw)
        if id(k) not in wrapped:
            wrapped[id(k)] = wrapper(k)
        return wrapped[id(k)]

    for mod in (dispatch, rows_mod, attn):
        monkeypatch.setattr(mod, "_kernel", kernel)
        monkeypatch.setattr(mod, "_torch", lambda: PoisonTorch())
    ops.forget_plans()
    return wrapped


@pytest.fixture
def device_path(monkeypatch):
    """The ops' kernels as PointerKernels (one per compiled kernel), plans forgotten before and after."""
    yield wrap_op_kernels(monkeypatch, PointerKernel)
    ops.forget_plans()


def _calls(wrapped):
    return {k: (w.binds, w.bound_launches, w.checked_calls) for k, w in wrapped.items()}


def _softmax_ref(x):
    x = x.double()
    return torch.softmax(x, -1)


def _rms_ref(x, w, eps):
    x = x.double()
    return x / (x.pow(2).mean(-1, keepdim=True) + eps).sqrt() * w.double()


def _ln_ref(x, w, b, eps):
    x = x.double()
    m = x.mean(-1, keepdim=True)
    return (x - m) / ((x - m).pow(2).mean(-1, keepdim=True) + eps).sqrt() * w.double() + b.double()


def _close(got, want, tol):
    assert not got.isnan().any(), "an output element was not written"
    err = (got.double() - want).abs().max().item()
    assert err < tol * max(1.0, want.abs().max().item()), err


# ---------------------------------------------------------------- row-wise operators
def test_row_ops_repeat_calls_launch_from_pointers(device_path):
    torch.manual_seed(10)
    w, b = torch.randn(96), torch.randn(96)
    for n_rows in (5, 5, 3, 7):  # a repeat call, then other row counts: one plan per signature
        x, r = torch.randn(n_rows, 96), torch.randn(n_rows, 96)
        _close(ops.softmax(x), _softmax_ref(x), 1e-5)
        _close(ops.rms_norm(x, w), _rms_ref(x, w, 1e-6), 1e-4)
        y, s = ops.rms_norm(x, w, residual=r)
        _close(s, x.double() + r.double(), 1e-6)
        _close(y, _rms_ref(x + r, w, 1e-6), 1e-4)
        _close(ops.layer_norm(x, w, b), _ln_ref(x, w, b, 1e-5), 1e-4)
    for binds, launches, checked in _calls(device_path).values():
        assert binds == 1 and checked == 0 and launches == 4  # bound once, every call from pointers
    assert len(rows_mod._row_plans) == 4


def test_row_plans_follow_rank_strides_dtype_and_alignment(device_path):
    torch.manual_seed(11)
    w = torch.randn(64)
    base = torch.randn(8, 64)
    flat = torch.randn(8 * 64 + 1)
    inputs = [base, torch.randn(2, 3, 64), torch.randn(64, 8).t(),  # rank, then a transposed view
              base[:, :].t().contiguous().t(),  # strides of a transpose of a transpose: contiguous
              flat[1:].view(8, 64),  # contiguous but off a 16-byte boundary: copied, not misread
              base.half(), base.bfloat16()]  # dtypes
    for x in inputs:
        for _ in range(2):
            got = ops.softmax(x)
            assert got.shape == x.shape and got.dtype == x.dtype and got.is_contiguous()
            _close(got, _softmax_ref(x), 1e-5 if x.dtype == torch.float32 else 1e-2)
            wx = w.to(x.dtype)
            _close(ops.rms_norm(x, wx), _rms_ref(x, wx, 1e-6), 1e-4 if x.dtype == torch.float32 else 2e-2)
    for eps in (1e-6, 0.5, 1):  # eps by value and type: another kernel, another plan
        _close(ops.rms_norm(base, w, eps=eps), _rms_ref(base, w, eps), 1e-4)


def test_row_ops_empty_and_zero_width_inputs(device_path):
    for x in (torch.randn(0, 64), torch.randn(3, 0), torch.randn(2, 0, 64)):
        assert ops.softmax(x).shape == x.shape
        assert ops.layer_norm(x, torch.randn(x.shape[-1]), torch.randn(x.shape[-1])).shape == x.shape


class OnDevice(torch.Tensor):
    """A CPU tensor that reports another device (only the device checks read it)."""

    __torch_function__ = torch._C._disabled_torch_function_impl

    @property
    def device(self):
        return torch.device("cuda", 1)


def test_row_errors_after_good_calls(device_path):
    x, w, b = torch.randn(4, 64), torch.randn(64), torch.randn(64)
    for _ in range(2):
        ops.softmax(x)
        ops.rms_norm(x, w)
        ops.rms_norm(x, w, residual=x)
        ops.layer_norm(x, w, b)
    with pytest.raises(ArgumentError, match="last dimension"):
        ops.softmax(x, dim=0)
    with pytest.raises(ArgumentError, match="last dimension"):
        ops.softmax(x, dim=[1])  # unhashable: no memo, the check explains
    with pytest.raises(ArgumentError, match="dtype"):
        ops.softmax(x.to(torch.int32))
    with pytest.raises(ArgumentError, match="torch.Tensor"):
        ops.softmax(x.numpy())
    with pytest.raises(ArgumentError, match="weight"):
        ops.rms_norm(x, torch.randn(32))
    with pytest.raises(ArgumentError, match="residual has shape"):
        ops.rms_norm(x, w, residual=torch.randn(2, 2, 64))  # the same rank and width: the shape is compared
    with pytest.raises(ArgumentError, match="residual has shape"):
        ops.rms_norm(x, w, residual=torch.randn(5, 64))
    with pytest.raises(ArgumentError, match="eps"):
        ops.rms_norm(x, w, eps=math.nan)
    with pytest.raises(ArgumentError, match="eps"):
        ops.layer_norm(x, w, b, eps=True)
    with pytest.raises(ArgumentError, match="bias"):
        ops.layer_norm(x, w, torch.randn(63))
    with pytest.raises(ArgumentError, match="one device"):
        ops.rms_norm(x, w.as_subclass(OnDevice))
    with pytest.raises(ArgumentError, match="one device"):
        ops.layer_norm(x, w, b.as_subclass(OnDevice))


def test_signature_keys_hold_the_device():
    x = torch.randn(4, 64)
    other = x.as_subclass(OnDevice)
    assert rows_mod._row_key(x) != rows_mod._row_key(other)
    assert rows_mod._row_key(other)[-1] == torch.device("cuda", 1)
    a, b = torch.randn(8, 16).half(), torch.randn(16, 8).half()
    assert torch.device("cpu") in dispatch._matmul_key(a, b, None, "none", None)
    q, kv = torch.randn(1, 4, 1, 32).half(), torch.randn(1, 2, 64, 32).half()
    key = attn._dense_key(q, kv, kv, False, None, None, None, None)
    assert key.count(torch.device("cpu")) == 3
    assert attn._dense_key(q, kv, kv, False, None, None, None, [2]) is None  # unhashable: no memo


# ---------------------------------------------------------------- matmul
def test_matmul_repeat_calls_launch_from_pointers(device_path):
    torch.manual_seed(12)
    b, bias = torch.randn(64, 48).half(), torch.randn(48).half()
    for _ in range(3):
        a = torch.randn(32, 64).half()
        _close(ops.matmul(a, b), a.double() @ b.double(), 1e-2)
        _close(ops.matmul(a, b.t().contiguous().t(), bias=bias), a.double() @ b.double() + bias.double(), 1e-2)
    launched = [w for w in device_path.values() if w.bound_launches]
    assert launched and all(w.binds == 1 for w in launched)


def test_matmul_memo_follows_the_tuned_choice(device_path, monkeypatch, tmp_path):
    from tilewright.ops import gemm_configs

    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path))
    torch.manual_seed(13)
    a, b = torch.randn(32, 64).half(), torch.randn(64, 48).half()
    _close(ops.matmul(a, b), a.double() @ b.double(), 1e-2)
    ops.matmul(a, b)
    run = dispatch._matmul_plans[dispatch._matmul_key(a, b, None, "none", None)]
    first = dispatch.matmul_config(32, 48, 64, a)
    arch, num_sms, _ = dispatch._arch_of(a)
    other = next(c for c in gemm_configs.candidates(32, 48, 64, "float16", arch, num_sms, dispatch.shared_limit(a))
                 if (c.kind, c.block_M, c.block_N, c.block_K) != (first.kind, first.block_M, first.block_N,
                                                                   first.block_K))
    dispatch.record_tuned(a, b, None, None, None, other, 0.01)  # the tuner's new winner
    assert dispatch.matmul_config(32, 48, 64, a) == other
    _close(ops.matmul(a, b), a.double() @ b.double(), 1e-2)
    assert dispatch._matmul_plans[dispatch._matmul_key(a, b, None, "none", None)] is not run
    # an entry written without record_tuned (another process): read once per process, so the
    # memo keeps the old choice until forget_plans
    key = gemm_configs.cache_key(32, 48, 64, "float16", "float16", False, False, False, "none", arch,
                                 dispatch._arch_of(a)[2])
    gemm_configs.store(key, first, 0.001, [], arch, dispatch._arch_of(a)[2])
    assert dispatch.matmul_config(32, 48, 64, a) == other
    ops.forget_plans()
    assert dispatch.matmul_config(32, 48, 64, a) == first
    _close(ops.matmul(a, b), a.double() @ b.double(), 1e-2)


def test_matmul_errors_after_good_calls_on_the_device_path(device_path):
    a, b = torch.randn(32, 64).half(), torch.randn(64, 48).half()
    for _ in range(2):
        ops.matmul(a, b)
    with pytest.raises(ArgumentError, match="columns"):
        ops.matmul(a, torch.randn(32, 48).half())
    with pytest.raises(ArgumentError, match="one dtype"):
        ops.matmul(a, b.bfloat16())
    with pytest.raises(ArgumentError, match="torch.Tensor"):
        ops.matmul(a.numpy(), b)
    with pytest.raises(ArgumentError, match="one device"):
        ops.matmul(a, b.as_subclass(OnDevice))


# ---------------------------------------------------------------- attention
def _attn_ref(q, k, v, causal=False):
    g = q.shape[1] // k.shape[1]
    k, v = k.double().repeat_interleave(g, 1), v.double().repeat_interleave(g, 1)
    s = q.double() @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        sq, sk = s.shape[-2], s.shape[-1]
        keep = torch.ones(sq, sk, dtype=torch.bool).tril(sk - sq)
        s = s.masked_fill(~keep, -math.inf)
    return torch.softmax(s, -1) @ v


def _pointer_plans() -> int:
    """Dense plans launched from pointers: the general path's and the decode kernel's (one query token)."""
    return len(attn._dense_plans)


@pytest.mark.parametrize("decode", ["new", "old"])
@pytest.mark.parametrize("case", ["decode_split", "decode", "prefill", "bshd"])
def test_attention_repeat_calls_launch_from_pointers(device_path, case, decode, monkeypatch):
    # one query token takes ops/decode_kernels.py, or the general kernel with TILEWRIGHT_DECODE_KERNEL=old
    monkeypatch.setattr(decode_kernels, "KERNEL", decode)
    torch.manual_seed(14)
    kv = torch.randn(1, 2, 128, 32).half()
    splits, causal = (2 if case == "decode_split" else 1), case == "prefill"
    for _ in range(4):  # first call binds, the second leaves the dense plan, the rest launch from it
        if case == "bshd":  # flash-attn's (batch, seq, heads, dim) read in place
            q = torch.randn(1, 16, 4, 32).half().transpose(1, 2)
        else:
            q = torch.randn(1, 4, 16 if case == "prefill" else 1, 32).half()
        out, lse = ops.attention(q, kv, kv, causal=causal, num_splits=splits, return_lse=True)
        _close(out, _attn_ref(q, kv, kv, causal), 3e-3)
        assert not lse.isnan().any()
    assert _pointer_plans() == 1
    for w in device_path.values():
        assert w.binds == 1 and w.bound_launches == 4 and w.checked_calls == 0


@pytest.mark.parametrize("decode", ["new", "old"])
def test_attention_dense_plan_leaves_copies_and_misaligned_starts_to_the_general_path(device_path, decode,
                                                                                      monkeypatch):
    monkeypatch.setattr(decode_kernels, "KERNEL", decode)  # one query token: either decode path (as above)
    torch.manual_seed(15)
    q = torch.randn(1, 4, 1, 32).half()
    kv = torch.randn(1, 2, 64, 32).half()
    strided = torch.randn(1, 2, 64, 64).half()[..., ::2]  # a layout _rows copies
    for _ in range(3):
        _close(ops.attention(q, strided, strided), _attn_ref(q, strided, strided), 3e-3)
    assert not _pointer_plans()
    for _ in range(3):
        ops.attention(q, kv, kv)
    assert _pointer_plans() == 1
    flat = torch.randn(4 * 32 + 1).half()
    odd = flat[1:].view(1, 4, 1, 32)  # same signature, a start off a 16-byte boundary
    _close(ops.attention(odd, kv, kv), _attn_ref(odd, kv, kv), 3e-3)


def test_attention_errors_after_good_calls_on_the_device_path(device_path):
    q, kv = torch.randn(1, 4, 1, 32).half(), torch.randn(1, 2, 64, 32).half()
    for _ in range(3):
        ops.attention(q, kv, kv)
    with pytest.raises(ArgumentError, match="dtype"):
        ops.attention(q, kv.bfloat16(), kv.bfloat16())
    with pytest.raises(ArgumentError, match="scale"):
        ops.attention(q, kv, kv, scale=-1.0)
    with pytest.raises(ArgumentError, match="causal"):
        ops.attention(q, kv, kv, causal=1)
    with pytest.raises(ArgumentError, match="num_splits"):
        ops.attention(q, kv, kv, num_splits=[2])
    with pytest.raises(ArgumentError, match="one device"):
        ops.attention(q, kv, kv.as_subclass(OnDevice))
    with pytest.raises(ArgumentError, match="cache_seqlens"):
        ops.attention(q, kv, kv, cache_seqlens=torch.tensor([1, 2], dtype=torch.int32))
