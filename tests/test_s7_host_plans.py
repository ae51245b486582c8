"""Prepared launches (``Launcher.prepare``: grid, shared bytes, size arguments and the loaded
function worked out once per call signature) never change an answer: a prepared launch sends
the driver what ``launch_bound`` sends; one made for some sizes or grid-read scalars is never
used for others (a row op keeps one per row count: reusing another's would launch the wrong
number of rows); and the ops that launch through them still match float64 on poisoned outputs."""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")

from test_host_fast_paths import FakeRuntime, _fake  # noqa: E402
from test_s6_host_plans import PointerKernel, _close, _ln_ref, _rms_ref, _softmax_ref, wrap_op_kernels  # noqa: E402

import tilewright  # noqa: E402
import tilewright.language as T  # noqa: E402
from tilewright import ops  # noqa: E402
from tilewright.ops import decode_kernels  # noqa: E402
from tilewright.ops.bound_kernel import BoundKernel  # noqa: E402
from tilewright.runtime.launcher import Launcher  # noqa: E402

dispatch = importlib.import_module("tilewright.ops.dispatch")
rows_mod = importlib.import_module("tilewright.ops.rows")
attn = importlib.import_module("tilewright.ops.attention_dispatch")


# ---------------------------------------------------------------- Launcher.prepare
def _scale_kernel():
    m = T.dynamic("m")

    @T.prim_func
    def scale(A: T.Tensor((m, 64), "float32"), B: T.Tensor((m, 64), "float32"), s: T.float32, n: T.int32):
        with T.Kernel(T.ceildiv(m, 16), n, threads=64) as (bx, by):
            for i, j in T.Parallel(16, 64):
                if bx * 16 + i < m:
                    B[bx * 16 + i, j] = A[bx * 16 + i, j] * s + by

    return tilewright.compile(scale, target="cuda -arch=sm_90a")


def test_prepared_launch_sends_what_launch_bound_sends():
    k = _scale_kernel()
    rt = FakeRuntime()
    la = Launcher(k.spec, rt)
    for rows, s, n in ((40, 2.0, 3), (17, 0.5, 1), (16, -1.0, 2)):
        a, b = _fake(torch.randn(rows, 64)), _fake(torch.randn(rows, 64))
        values, dyn, dev = la.bind([a, b, s, n])
        la.launch_bound(values, dyn, dev)
        want = rt.fn.launches[-1]
        prepared = la.prepare(values, dyn, dev)
        assert prepared.matches(values)
        prepared(list(values))
        got = rt.fn.launches[-1]
        assert got[:5] == want[:5] and tuple(got[5]) == tuple(want[5])
        assert want[0] == (-(-rows // 16), n, 1) and tuple(want[5][-1:]) == (rows,)


def test_prepared_launch_knows_the_scalars_its_grid_read():
    k = _scale_kernel()
    la = Launcher(k.spec, FakeRuntime())
    a, b = _fake(torch.randn(40, 64)), _fake(torch.randn(40, 64))
    values, dyn, dev = la.bind([a, b, 2.0, 3])
    prepared = la.prepare(values, dyn, dev)
    assert prepared.matches([values[0], values[1], 7.5, 3])  # s is not read by the grid
    assert not prepared.matches([values[0], values[1], 2.0, 4])  # n is: another grid
    assert not prepared.matches([values[0], values[1], 2.0, 3.0])  # (same value, other type: not assumed)


def test_bound_kernel_launches_other_grid_scalars_through_launch_bound():
    k = _scale_kernel()
    rt = FakeRuntime()
    k._launcher = Launcher(k.spec, rt)  # the compiled kernel's launches go to the recording runtime
    bound = BoundKernel(k)
    a, b = _fake(torch.randn(40, 64)), _fake(torch.randn(40, 64))
    bound(a, b, 2.0, 3)
    bound(a, b, 2.0, 3)
    assert rt.fn.launches[-1][0] == (3, 3, 1)
    bound(a, b, 2.0, 5)  # n changes the grid: not the prepared launch of n = 3
    assert rt.fn.launches[-1][0] == (3, 5, 1)
    bound(a, b, 0.25, 3)
    assert rt.fn.launches[-1][0] == (3, 3, 1) and tuple(rt.fn.launches[-1][5]) == (a.data_ptr(), b.data_ptr(),
                                                                                 0.25, 3, 40)


# ---------------------------------------------------------------- the ops through prepared launches
class PreparingKernel(PointerKernel):
    """``PointerKernel`` whose launcher also prepares launches (as ``Launcher.prepare``): each
    prepared launch records the sizes it was made for and runs the interpreter with them."""

    def __init__(self, real):
        super().__init__(real)
        self.prepared: list = []
        self.prepared_launches = 0

    def prepare(self, values, dyn, dev):
        kernel = self

        class Prepared:
            reads = ()
            sizes = dict(dyn)

            def matches(self, vals):
                return True

            def __call__(self, vals, stream=None, sync=False):
                kernel.prepared_launches += 1
                kernel.launch_bound(vals, self.sizes, dev, stream, sync)

        kernel.prepared.append(Prepared.sizes)
        return Prepared()


@pytest.fixture
def prepared_path(monkeypatch):
    yield wrap_op_kernels(monkeypatch, PreparingKernel)
    ops.forget_plans()


def test_row_ops_keep_one_prepared_launch_per_row_count(prepared_path):
    torch.manual_seed(21)
    w, b = torch.randn(96), torch.randn(96)
    counts = (5, 5, 3, 7, 3, 5)
    for n_rows in counts:
        x, r = torch.randn(n_rows, 96), torch.randn(n_rows, 96)
        _close(ops.softmax(x), _softmax_ref(x), 1e-5)
        _close(ops.rms_norm(x, w), _rms_ref(x, w, 1e-6), 1e-4)
        y, s = ops.rms_norm(x, w, residual=r)
        _close(s, x.double() + r.double(), 1e-6)
        _close(y, _rms_ref(x + r, w, 1e-6), 1e-4)
        _close(ops.layer_norm(x, w, b), _ln_ref(x, w, b, 1e-5), 1e-4)
    for k in prepared_path.values():
        assert k.binds == 1 and k.checked_calls == 0
        assert sorted(next(iter(d.values())) for d in k.prepared) == [3, 5, 7]  # one per row count
        assert k.prepared_launches == len(counts) - 1  # every call after the first (which binds)


def test_row_ops_misaligned_input_after_prepared_launches(prepared_path):
    torch.manual_seed(22)
    x = torch.randn(4, 64)
    for _ in range(2):
        _close(ops.softmax(x), _softmax_ref(x), 1e-5)
    base = torch.randn(4 * 64 + 1)
    odd = base[1:].view(4, 64)  # same signature, a start off a 16-byte boundary: copied, still right
    assert odd.data_ptr() % 16
    _close(ops.softmax(odd), _softmax_ref(odd), 1e-5)


def test_matmul_and_attention_through_prepared_launches(prepared_path):
    torch.manual_seed(23)
    b = torch.randn(64, 48).half()
    for _ in range(4):  # matmul: the first call is checked, the second binds its plan, the rest are prepared
        a = torch.randn(32, 64).half()
        _close(ops.matmul(a, b), a.double() @ b.double(), 1e-2)
    kv = torch.randn(1, 2, 128, 32).half()
    for _ in range(3):
        q = torch.randn(1, 4, 1, 32).half()
        out = ops.attention(q, kv, kv, num_splits=2)
        g = q.shape[1] // kv.shape[1]
        k2 = kv.double().repeat_interleave(g, 1)
        ref = torch.softmax(q.double() @ k2.transpose(-1, -2) / 32 ** 0.5, -1) @ k2
        _close(out, ref, 3e-3)
    used = [k for k in prepared_path.values() if k.bound_launches]
    assert used and all(k.binds == 1 and k.prepared_launches >= 2 for k in used)


# ---------------------------------------------------------------- out_idx outputs the launcher trusts
def _out_idx_kernel():
    @T.prim_func
    def add(A: T.Tensor((256,), "float32"), B: T.Tensor((256,), "float32"), C: T.Tensor((256,), "float32")):
        with T.Kernel(2, threads=128) as bx:
            for i in T.Parallel(128):
                C[bx * 128 + i] = A[bx * 128 + i] + B[bx * 128 + i]

    k = tilewright.compile(add, target="cuda -arch=sm_90a", out_idx=[2])
    rt = FakeRuntime()
    k._launcher = Launcher(k.spec, rt)
    return k, rt.fn


def test_out_idx_outputs_are_launched_without_a_second_check():
    k, fn = _out_idx_kernel()
    a, b = _fake(torch.randn(256)), _fake(torch.randn(256))
    for _ in range(2):
        c = k(a, b)
        assert tuple(c.shape) == (256,) and c.dtype == torch.float32 and c.is_contiguous()
        assert tuple(fn.launches[-1][5]) == (a.data_ptr(), b.data_ptr(), c.data_ptr())


def test_trusting_new_outputs_never_trusts_a_passed_output():
    """The trust is for outputs the call itself allocated: the same kernel called with every
    argument still checks the output it is given (a wrong one is refused, not launched)."""
    k, fn = _out_idx_kernel()
    a, b = _fake(torch.randn(256)), _fake(torch.randn(256))
    k(a, b)
    launches = len(fn.launches)
    for bad in (_fake(torch.randn(128)), _fake(torch.randn(256, dtype=torch.float64)), _fake(torch.randn(512)[::2])):
        assert k.launcher._fast_torch_bind([a, b, bad]) is None
        with pytest.raises(tilewright.errors.ArgumentError, match="C"):
            k(a, b, bad)
    assert len(fn.launches) == launches
    assert k.launcher._fast_torch_bind([a, b, _fake(torch.randn(256))], (2,)) is not None
    # an input in an out position is not trusted: the inputs are still checked with trusted outputs
    assert k.launcher._fast_torch_bind([_fake(torch.randn(128)), b, _fake(torch.randn(256))], (2,)) is None


# ---------------------------------------------------------------- attention's LSE when not returned
def _attn_ref_lse(q, k, v, causal=False):
    g = q.shape[1] // k.shape[1]
    k, v = k.double().repeat_interleave(g, 1), v.double().repeat_interleave(g, 1)
    s = q.double() @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        sq, sk = s.shape[-2], s.shape[-1]
        s = s.masked_fill(~torch.ones(sq, sk, dtype=torch.bool).tril(sk - sq), float("-inf"))
    return torch.softmax(s, -1) @ v, torch.logsumexp(s, -1)


@pytest.mark.parametrize("case", ["decode_split", "prefill"])
def test_attention_without_lse_writes_it_to_scratch_and_returned_lse_stays_right(prepared_path, case, monkeypatch):
    monkeypatch.setattr(decode_kernels, "KERNEL", "old")  # the general kernel's plans (decode has its own kernel)
    torch.manual_seed(24)
    kv = torch.randn(1, 2, 128, 32).half()
    splits, causal = (2 if case == "decode_split" else 1), case == "prefill"
    seq = 16 if causal else 1
    for i in range(6):  # plan made, bound, then repeat calls alternating with and without the LSE
        q = torch.randn(1, 4, seq, 32).half()
        want, want_lse = _attn_ref_lse(q, kv, kv, causal)
        if i % 2:
            out, lse = ops.attention(q, kv, kv, causal=causal, num_splits=splits, return_lse=True)
            _close(lse, want_lse, 1e-3)
            assert all(lse.data_ptr() != b.data_ptr() for b in attn._lse_scratch.get(lse.device, []))
        else:
            out = ops.attention(q, kv, kv, causal=causal, num_splits=splits)
        _close(out, want, 3e-3)
    assert len(attn._dense_plans) == 1
    _, lse_plan = attn.attention_impl(q, kv, kv, causal, None, None, None, None, None, splits, want_lse=False)
    assert lse_plan is None  # the repeat call's LSE went to the scratch buffer
    scratch = attn._lse_scratch[q.device]
    assert scratch and scratch[-1].numel() >= 4 * seq


def test_lse_scratch_grows_and_keeps_the_old_buffers():
    dev = torch.device("cpu")
    saved = attn._lse_scratch.pop(dev, None)
    try:
        p1 = attn._scratch_lse(100, dev)
        assert attn._scratch_lse(50, dev) == p1  # big enough: the same buffer
        attn._scratch_lse(1000, dev)
        bufs = attn._lse_scratch[dev]
        assert len(bufs) == 2 and bufs[0].data_ptr() == p1 and bufs[1].numel() >= 1000  # the first still alive
    finally:
        attn._lse_scratch.pop(dev, None)
        if saved is not None:
            attn._lse_scratch[dev] = saved


# ---------------------------------------------------------------- matmul from pointers
def test_matmul_direct_plan_launches_pointers_of_transposed_operands(prepared_path, monkeypatch):
    monkeypatch.setitem(dispatch._archs, torch.device("cpu"), ("sm_90", 132, "the CPU as an H200"))
    torch.manual_seed(25)
    bias = torch.randn(48).half()
    for a_t, b_t, with_bias in ((False, False, False), (True, False, True), (False, True, True), (True, True, False)):
        for _ in range(4):  # checked, bound, then from pointers
            a = torch.randn(64, 32).half().t() if a_t else torch.randn(32, 64).half()
            b = torch.randn(48, 64).half().t() if b_t else torch.randn(64, 48).half()
            want = a.double() @ b.double() + (bias.double() if with_bias else 0)
            _close(ops.matmul(a, b, bias=bias if with_bias else None), want, 1e-2)
        run = dispatch._matmul_plans[dispatch._matmul_key(a, b, bias if with_bias else None, "none", None)]
        assert run.direct and run.first.bound
    base = torch.randn(32 * 64 + 8).half()
    a = base[1:1 + 32 * 64].view(32, 64)  # the signature of a plan, a start off a 16-byte boundary
    assert a.data_ptr() % 16
    b = torch.randn(64, 48).half()
    _close(ops.matmul(a, b), a.double() @ b.double(), 1e-2)
    assert not dispatch._matmul_plans[dispatch._matmul_key(a, b, None, "none", None)].from_pointers(
        a, b, None, torch.empty(32, 48).half())


def test_unhashable_options_after_good_calls_get_the_checked_paths_errors(prepared_path):
    """The plan lookups hash the key once, in the lookup: an unhashable option there is no plan
    (and no crash), and the checked path names it."""
    torch.manual_seed(26)
    a, b = torch.randn(32, 64).half(), torch.randn(64, 48).half()
    kv, q = torch.randn(1, 2, 128, 32).half(), torch.randn(1, 4, 1, 32).half()
    for _ in range(3):
        ops.matmul(a, b)
        ops.attention(q, kv, kv)
    with pytest.raises(tilewright.errors.ArgumentError, match="activation"):
        ops.matmul(a, b, activation=["relu"])
    with pytest.raises(tilewright.errors.ArgumentError, match="scale"):
        ops.attention(q, kv, kv, scale=[0.5])
    with pytest.raises(tilewright.errors.ArgumentError, match="num_splits"):
        ops.attention(q, kv, kv, num_splits=[2])
    _close(ops.matmul(a, b), a.double() @ b.double(), 1e-2)  # and the good signature still runs from its plan
