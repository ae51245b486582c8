"""The row-wise operators of ``tilewright.ops``: ``softmax``, ``rms_norm`` (optionally with a fused
residual add) and ``layer_norm`` over the last dimension.

A call is checked once per call signature: the first call with a signature (per tensor: its
type, dtype, rank, last dimension and device, for weight and bias their whole shape; eps by type
and value; dim) runs every argument check and picks the configuration and the kernel; the plan
it leaves (``_RowPlan``) serves every
later call of that signature with no check repeated, because each check reads only what the
signature fixes.  What the signature does not fix is handled per call: the row count (any; its
range is checked at launch), the strides (a tensor that is not contiguous is copied, as the
checked path does) and the data pointers (a start that is not 16-byte aligned is copied too:
the kernels load 16-byte vectors), and for the residual its full shape (compared, as a tuple).
"""

from __future__ import annotations

from ..errors import ArgumentError
from ..jit.kernel import _SYNC_KEY, _SYNC_PROBE
from . import kernels
from .bound_kernel import RowLaunch
from .dispatch import _check_eps, _check_tensor, _dtype_name, _kernel, _same_device, _target_of, _torch
from .plan_dict import PlanDict


def _rows_config(N: int, dtype: str) -> tuple:
    """(block_M, threads): a whole row per block, held in registers, about 32 elements per thread
    (bench/rows_sweep.py on the H200 at N = 8192: 256 threads within 2% of the best configuration
    of softmax, RMSNorm and LayerNorm in fp16, bf16 and fp32; 512 threads lost up to 24% in 16-bit);
    fewer threads for short rows so that every thread has work."""
    threads = 32
    while threads < 512 and threads * 32 < N:
        threads *= 2
    return 1, threads


def _row_key(x):
    """The signature of a tensor argument (see the module docstring), or None for something that
    is not a tensor (the checked path then says what is wrong)."""
    try:
        return (x.__class__, x.dtype, x.dim(), x.shape[-1], x.device)
    except (AttributeError, IndexError, TypeError):
        return None


class _RowPlan:
    """What a signature decides: the launch (``RowLaunch``) and the row width.  Outputs are
    ``torch.empty_like`` of the contiguous input (x's dtype and device; measured half the host
    time of ``torch.empty(shape, dtype=, device=)``, whose keyword arguments torch parses per call)."""

    __slots__ = ("empty_like", "launch", "n")

    def __init__(self, kernel, n: int, is_row: tuple):
        self.launch = RowLaunch(kernel, n, is_row)
        self.n = n or 1  # rows = numel // n; with no columns there are no elements and nothing to launch
        self.empty_like = _torch().empty_like  # (the module's at plan time: tests that poison it poison this)


_row_plans = PlanDict()  # signature -> _RowPlan (the last call's key compared first)
_PLANS_MAX = 4096


def _remember(key, plan) -> None:
    if len(_row_plans) >= _PLANS_MAX:
        _row_plans.clear()
    try:
        _row_plans[key] = plan
    except TypeError:  # an argument that passed the checks but cannot be a key: checked every call
        pass


def _dense(t):
    """``t`` as the row kernels read it, and its address: contiguous, from a 16-byte boundary (they
    load 16-byte vectors), copied only when it is not."""
    if not t.is_contiguous():
        t = t.contiguous()
    p = t.data_ptr()
    if p & 15:
        t = t.clone()
        p = t.data_ptr()
    return t, p


# ---------------------------------------------------------------- softmax
def softmax(x, dim: int = -1):
    """Softmax over the last dimension (``dim`` must be -1 or x.dim() - 1)."""
    torch = _torch()
    if torch.compiler.is_compiling():
        return torch.ops.tilewright.softmax(x, dim)
    return softmax_impl(x, dim)


def softmax_impl(x, dim):
    try:  # (one flat key: _row_key's items of x; an unhashable dim raises in the lookup)
        key = ("softmax", x.__class__, x.dtype, len(xs := x.shape), xs[-1], x.device, dim.__class__, dim)
        plan = _row_plans.find(key)
    except (AttributeError, IndexError, TypeError, ValueError, RuntimeError):
        key = plan = None  # not a tensor, no dimension, an unhashable dim: the checked path explains
    if plan is None:
        plan = _softmax_plan(x, dim)
        if key is not None:
            _remember(key, plan)
    x, xp = _dense(x)
    out = plan.empty_like(x)  # (a new allocation: aligned)
    rows = x.numel() // plan.n
    if rows:
        plan.launch.pointers([xp, out.data_ptr()], rows, (x, out))
    return out


def _softmax_plan(x, dim) -> _RowPlan:
    _check_tensor("x", x, None)  # checks x first: a non-tensor has no .dim()
    if x.dim() < 1:
        raise ArgumentError("x must have at least one dimension")
    if dim not in (-1, x.dim() - 1):
        raise ArgumentError(f"softmax runs over the last dimension; got dim={dim!r} for a {x.dim()}-D tensor "
                            "(move that dimension last with .transpose)")
    N, dtype = x.shape[-1], _dtype_name(x)
    cfg = _rows_config(N, dtype)
    kern = _kernel(("softmax", N, dtype, cfg), lambda: kernels.softmax(N, dtype, *cfg), _target_of(x)) if N else None
    return _RowPlan(kern, N, (True, True))


# ---------------------------------------------------------------- RMSNorm
def rms_norm(x, weight, eps: float = 1e-6, residual=None):
    """RMSNorm over the last dimension, scaled by ``weight``.  With ``residual``, normalizes
    ``x + residual`` and returns ``(normed, x + residual)`` (the fused pre-norm of a transformer block)."""
    # A repeat of the last row call's key served from this frame (as ``attention_dispatch.attention``:
    # no frames for _torch, rms_norm_impl and the lookup); the key is rms_norm_impl's, item for item
    # (tests/test_s14_host_entry.py).  is_compiling first: dynamo folds it, so nothing of the memo is traced.
    torch = _torch_ref[0]
    plans = _row_plans
    last = plans.last
    if torch is not None and FAST_ENTRY and not torch.compiler.is_compiling() and last[2] is plans.stamp:
        try:
            if residual is None:
                key = ("rms_norm", x.__class__, x.dtype, len(xs := x.shape), xs[-1], x.device, weight.__class__,
                       weight.dtype, weight.shape, weight.device, eps.__class__, eps)
            else:
                key = ("rms_norm+residual", x.__class__, x.dtype, len(xs := x.shape), xs[-1], x.device,
                       weight.__class__, weight.dtype, weight.shape, weight.device, eps.__class__, eps,
                       residual.__class__, residual.dtype, residual.device)
            hit = key == last[0] and (residual is None or residual.shape == xs)
        except Exception:  # noqa: BLE001 - (not tensors, an eps that cannot compare: rms_norm_impl explains)
            hit = False
        if hit and last[2] is plans.stamp:
            plan = last[1]
            # _rms_norm_run inline where no tensor needs a copy (each contiguous, from a 16-byte boundary),
            # and the launch through the compiled launcher's C call where the row count's prepared launch
            # allows it (DIRECT_LAUNCH); else _rms_norm_run, which copies and launches through the frames
            xp, wp = x.data_ptr(), weight.data_ptr()
            rp = xp if residual is None else residual.data_ptr()
            if DIRECT_LAUNCH and not (xp | wp | rp) & 15 and x.is_contiguous() and weight.is_contiguous() and (
                    residual is None or residual.is_contiguous()):
                out = plan.empty_like(x)  # (a new allocation: aligned)
                op = out.data_ptr()
                if residual is None:
                    res_out, sp = out, op
                else:
                    res_out = plan.empty_like(x)
                    sp = res_out.data_ptr()
                rows = x.numel() // plan.n
                if rows:
                    ptrs = [xp, rp, wp, op, sp]
                    try:  # (FixedLaunch.__call__'s first lines: its _direct launch, current(ptrs) 0 = launched)
                        prepared = plan.launch._prepared[rows]
                        done = (prepared._direct and _SYNC_KEY not in _SYNC_PROBE
                                and not prepared.launch.current(ptrs))
                    except Exception:  # noqa: BLE001 - (a new row count, no compiled launch: nothing launched)
                        done = False
                    if not done:
                        plan.launch.pointers(ptrs, rows, (x, x if residual is None else residual, weight, out,
                                                          res_out))
                return out if residual is None else (out, res_out)
            y, r = _rms_norm_run(plan, x, weight, residual)
            return y if residual is None else (y, r)
    torch = _torch_ref[0] = _torch()
    if torch.compiler.is_compiling():
        y, r = torch.ops.tilewright.rms_norm(x, weight, eps, residual)
        return y if residual is None else (y, r)
    y, r = rms_norm_impl(x, weight, eps, residual)
    return y if residual is None else (y, r)


# True: ``rms_norm`` serves a repeat of the last row call's key in its own frame (above); False: every call
# through rms_norm_impl's lookup (the path before; bench/launch_overhead.py times both ways).
FAST_ENTRY = True
# True: that in-frame path allocates and launches itself (the compiled launcher's C call where the
# prepared launch has one: FixedLaunch's _direct); False: through _rms_norm_run, _dense and RowLaunch's
# frames (bench/launch_overhead.py times both ways).  On: H200 2026-12-02 16:11 (fp16, with FAST_ENTRY),
# rms_norm 8.3 vs 9.1 us host time a call, with residual 11.1 vs 12.0 (docs/ops.md).
DIRECT_LAUNCH = True
_torch_ref: list = [None]  # torch, once a call has looked it up (forget_plans drops it with the plans)


def rms_norm_impl(x, weight, eps, residual):
    """(normed, x + residual), or (normed, normed) without a residual."""
    # One flat key: _row_key's items of x (its shape read once), weight's whole shape in place of its
    # rank and last dimension (the same facts for the 1-D weight a plan takes, one read instead of
    # two: ~0.1 us on the CPU stub bench) and the residual's; an unhashable eps raises in the lookup.
    try:
        if residual is None:
            key = ("rms_norm", x.__class__, x.dtype, len(xs := x.shape), xs[-1], x.device, weight.__class__,
                   weight.dtype, weight.shape, weight.device, eps.__class__, eps)
        else:
            key = ("rms_norm+residual", x.__class__, x.dtype, len(xs := x.shape), xs[-1], x.device,
                   weight.__class__, weight.dtype, weight.shape, weight.device, eps.__class__, eps,
                   residual.__class__, residual.dtype, residual.device)
        plan = _row_plans.find(key)
    except (AttributeError, IndexError, TypeError, ValueError, RuntimeError):
        key = plan = xs = None  # not a tensor, no dimension, an unhashable eps: the checked path explains
    # (the residual's rank and last dimension are x's when its whole shape is: compared every call)
    if plan is None or (residual is not None and residual.shape != xs):
        plan = _rms_norm_plan(x, weight, eps, residual)
        if key is not None:
            _remember(key, plan)
    return _rms_norm_run(plan, x, weight, residual)


def _rms_norm_run(plan, x, weight, residual):
    """The allocations and the launch of a call of ``plan``'s signature (checked: rms_norm_impl's
    plan, or a key equal to the one it was kept under)."""
    x, xp = _dense(x)
    w, wp = _dense(weight)
    out = plan.empty_like(x)
    rows = x.numel() // plan.n
    if residual is None:
        if rows:
            op = out.data_ptr()
            plan.launch.pointers([xp, xp, wp, op, op], rows, (x, x, w, out, out))
        return out, out
    r, rp = _dense(residual)
    # (a second allocation, not both outputs as views of one: on the H200 empty_like of a 2x template
    # and unbind(0) took 4.9 us against 3.8 us for two empty_like, session 10's launch-overhead run)
    res_out = plan.empty_like(x)
    if rows:
        plan.launch.pointers([xp, rp, wp, out.data_ptr(), res_out.data_ptr()], rows, (x, r, w, out, res_out))
    return out, res_out


def _rms_norm_plan(x, weight, eps, residual) -> _RowPlan:
    _check_tensor("x", x, None)
    if x.dim() < 1:
        raise ArgumentError("x must have at least one dimension")
    N, dtype = x.shape[-1], _dtype_name(x)
    _check_tensor("weight", weight, 1, (dtype,))
    if weight.shape[0] != N:
        raise ArgumentError(f"weight has {weight.shape[0]} elements; x's last dimension is {N}")
    if residual is not None:
        _check_tensor("residual", residual, None, (dtype,))
        if residual.shape != x.shape:
            raise ArgumentError(f"residual has shape {tuple(residual.shape)}; x has {tuple(x.shape)}")
    _same_device(x=x, weight=weight, residual=residual)
    _check_eps(eps)
    cfg = _rows_config(N, dtype)
    has_res = residual is not None
    kern = _kernel(("rms_norm", N, dtype, float(eps), cfg, has_res),
                   lambda: kernels.rms_norm(N, dtype, float(eps), *cfg, has_res), _target_of(x)) if N else None
    return _RowPlan(kern, N, (True, True, False, True, True))


# ---------------------------------------------------------------- LayerNorm
def layer_norm(x, weight, bias, eps: float = 1e-5):
    """LayerNorm over the last dimension with ``weight`` and ``bias`` of that length."""
    torch = _torch()
    if torch.compiler.is_compiling():
        return torch.ops.tilewright.layer_norm(x, weight, bias, eps)
    return layer_norm_impl(x, weight, bias, eps)


def layer_norm_impl(x, weight, bias, eps):
    try:  # (one flat key as rms_norm's: x's items, weight's and bias's whole shapes; an unhashable eps raises)
        key = ("layer_norm", x.__class__, x.dtype, len(xs := x.shape), xs[-1], x.device, weight.__class__,
               weight.dtype, weight.shape, weight.device, bias.__class__, bias.dtype, bias.shape, bias.device,
               eps.__class__, eps)
        plan = _row_plans.find(key)
    except (AttributeError, IndexError, TypeError, ValueError, RuntimeError):
        key = plan = None  # not a tensor, no dimension, an unhashable eps: the checked path explains
    if plan is None:
        plan = _layer_norm_plan(x, weight, bias, eps)
        if key is not None:
            _remember(key, plan)
    x, xp = _dense(x)
    w, wp = _dense(weight)
    b, bp = _dense(bias)
    out = plan.empty_like(x)
    rows = x.numel() // plan.n
    if rows:
        plan.launch.pointers([xp, wp, bp, out.data_ptr()], rows, (x, w, b, out))
    return out


def _layer_norm_plan(x, weight, bias, eps) -> _RowPlan:
    _check_tensor("x", x, None)
    if x.dim() < 1:
        raise ArgumentError("x must have at least one dimension")
    N, dtype = x.shape[-1], _dtype_name(x)
    for name, t in (("weight", weight), ("bias", bias)):
        _check_tensor(name, t, 1, (dtype,))
        if t.shape[0] != N:
            raise ArgumentError(f"{name} has {t.shape[0]} elements; x's last dimension is {N}")
    _same_device(x=x, weight=weight, bias=bias)
    _check_eps(eps)
    cfg = _rows_config(N, dtype)
    kern = _kernel(("layer_norm", N, dtype, float(eps), cfg),
                   lambda: kernels.layer_norm(N, dtype, float(eps), *cfg), _target_of(x)) if N else None
    return _RowPlan(kern, N, (True, False, False, True))
