"""Argument checks, configuration choice and the kernel cache of ``tilewright.ops``."""

from __future__ import annotations

from ..errors import ArgumentError
from . import kernels

_kernels: dict = {}  # (op, static key) -> JITKernel
_DTYPES = ("float16", "bfloat16", "float32")


def _torch():
    import torch

    return torch


def _dtype_name(t) -> str:
    return str(t.dtype).replace("torch.", "")


def _target_of(t) -> str:
    if t.device.type == "cpu":
        return "interpret"
    if t.device.type != "cuda":
        raise ArgumentError(f"tensors on {t.device} are not supported; use a CUDA/ROCm GPU or the CPU")
    return "auto"


def _kernel(key: tuple, build, target: str):
    hit = _kernels.get((key, target))
    if hit is None:
        from ..compiler import compile as tw_compile

        hit = tw_compile(build(), target=target)
        _kernels[(key, target)] = hit
    return hit


def _check_tensor(name: str, t, ndim=None, dtypes=_DTYPES):
    torch = _torch()
    if not isinstance(t, torch.Tensor):
        raise ArgumentError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if ndim is not None and t.dim() not in ((ndim,) if isinstance(ndim, int) else ndim):
        raise ArgumentError(f"{name} must have {ndim} dimensions, got shape {tuple(t.shape)}")
    if _dtype_name(t) not in dtypes:
        raise ArgumentError(f"{name} has dtype {t.dtype}; supported: {', '.join(dtypes)}")


def _same_device(**tensors):
    devs = {n: t.device for n, t in tensors.items() if t is not None}
    if len(set(devs.values())) > 1:
        raise ArgumentError("all tensors must be on one device; got " + ", ".join(f"{n} on {d}" for n, d in
                                                                                 devs.items()))


def _check_eps(eps):
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 < eps < float("inf"):
        raise ArgumentError(f"eps must be positive and finite, got {eps!r}")


# ---------------------------------------------------------------- matmul
def _gemm_config(M: int) -> tuple:
    """(block_M, block_N, block_K, stages, threads) by the number of rows (measured on an H200:
    bench/results); small M is a memory-bound decode shape and wants thin, deep tiles."""
    if M <= 16:
        return 16, 128, 128, 4, 128
    if M <= 128:
        return 64, 128, 64, 4, 128
    return 128, 128, 32, 4, 128


def _operand(name: str, t):
    """(tensor to pass, transposed?): a row-major matrix, or the transpose of a row-major one."""
    if t.stride(-1) == 1 and t.stride(0) == t.shape[1]:
        return t, False
    if t.stride(0) == 1 and t.stride(1) == t.shape[0]:
        return t.t(), True
    return t.contiguous(), False


def matmul(a, b, bias=None, activation: str = "none", out_dtype=None):
    """``act(a @ b + bias)`` for 2-D fp16/bf16 ``a`` (M, K) and ``b`` (K, N); transposed operands
    (``w.t()``) are read in place.  ``activation``: none, relu, gelu_tanh, silu; ``out_dtype``:
    the input dtype (default) or torch.float32."""
    torch = _torch()
    if torch.compiler.is_compiling() or (torch.is_grad_enabled() and any(
            t is not None and t.requires_grad for t in (a, b, bias))):
        return torch.ops.tilewright.matmul(a, b, bias, activation, out_dtype)  # traced, or with autograd
    return matmul_impl(a, b, bias, activation, out_dtype)


def matmul_impl(a, b, bias, activation, out_dtype):
    torch = _torch()
    _check_tensor("a", a, 2, ("float16", "bfloat16"))
    _check_tensor("b", b, 2, ("float16", "bfloat16"))
    if a.dtype != b.dtype:
        raise ArgumentError(f"a and b must have one dtype; got {a.dtype} and {b.dtype}")
    if a.shape[1] != b.shape[0]:
        raise ArgumentError(f"a is {tuple(a.shape)} and b is {tuple(b.shape)}: a's columns must equal b's rows")
    if activation not in kernels.ACTIVATIONS:
        raise ArgumentError(f"activation {activation!r} is not one of {', '.join(kernels.ACTIVATIONS)}")
    out_dtype = out_dtype or a.dtype
    if out_dtype not in (a.dtype, torch.float32):
        raise ArgumentError(f"out_dtype must be {a.dtype} or torch.float32, got {out_dtype}")
    if bias is not None:
        _check_tensor("bias", bias, 1, (_dtype_name(a),))
        if bias.shape[0] != b.shape[1]:
            raise ArgumentError(f"bias has {bias.shape[0]} elements; b has {b.shape[1]} columns")
    _same_device(a=a, b=b, bias=bias)
    M, K = a.shape
    N = b.shape[1]
    out = torch.empty((M, N), dtype=out_dtype, device=a.device)
    if M == 0 or N == 0:
        return out
    if K == 0:
        return out.zero_() if bias is None and activation == "none" else \
            torch.nn.functional.linear(torch.zeros(M, 0, dtype=a.dtype, device=a.device), b.t(), bias).to(out_dtype)
    av, ta = _operand("a", a)
    bv, tb = _operand("b", b)
    dtype = _dtype_name(a)
    cfg = _gemm_config(M)
    key = ("linear", N, K, dtype, _dtype_name(out), ta, tb, bias is not None, activation, cfg)
    kern = _kernel(key, lambda: kernels.linear(N, K, dtype, _dtype_name(out), ta, tb, bias is not None, activation,
                                               *cfg), _target_of(a))
    bias_arg = bias if bias is not None else torch.zeros(1, dtype=a.dtype, device=a.device)
    kern(av, bv, bias_arg.contiguous(), out)
    return out


# ---------------------------------------------------------------- row-wise operators
def _rows_config(N: int, dtype: str) -> tuple:
    """(block_M, threads): a whole row per block, held in registers (measured: 512 threads at
    N = 8192; fewer for short rows so that every thread has work)."""
    threads = 32
    while threads < 512 and threads * 8 < N:
        threads *= 2
    return 1, threads


def _as_rows(name: str, x):
    _check_tensor(name, x, None)
    if x.dim() < 1:
        raise ArgumentError(f"{name} must have at least one dimension")
    return x.reshape(-1, x.shape[-1]).contiguous()


def softmax(x, dim: int = -1):
    """Softmax over the last dimension (``dim`` must be -1 or x.dim() - 1)."""
    torch = _torch()
    if torch.compiler.is_compiling():
        return torch.ops.tilewright.softmax(x, dim)
    return softmax_impl(x, dim)


def softmax_impl(x, dim):
    torch = _torch()
    rows = _as_rows("x", x)  # checks x first: a non-tensor has no .dim()
    if dim not in (-1, x.dim() - 1):
        raise ArgumentError(f"softmax runs over the last dimension; got dim={dim} for a {x.dim()}-D tensor "
                            "(move that dimension last with .transpose)")
    out = torch.empty_like(rows)
    if rows.numel():
        N, dtype = rows.shape[1], _dtype_name(x)
        cfg = _rows_config(N, dtype)
        _kernel(("softmax", N, dtype, cfg), lambda: kernels.softmax(N, dtype, *cfg), _target_of(x))(rows, out)
    return out.reshape(x.shape)


def rms_norm(x, weight, eps: float = 1e-6, residual=None):
    """RMSNorm over the last dimension, scaled by ``weight``.  With ``residual``, normalizes
    ``x + residual`` and returns ``(normed, x + residual)`` (the fused pre-norm of a transformer block)."""
    torch = _torch()
    if torch.compiler.is_compiling():
        y, r = torch.ops.tilewright.rms_norm(x, weight, eps, residual)
        return y if residual is None else (y, r)
    y, r = rms_norm_impl(x, weight, eps, residual)
    return y if residual is None else (y, r)


def rms_norm_impl(x, weight, eps, residual):
    torch = _torch()
    rows = _as_rows("x", x)
    N, dtype = rows.shape[1], _dtype_name(x)
    _check_tensor("weight", weight, 1, (dtype,))
    if weight.shape[0] != N:
        raise ArgumentError(f"weight has {weight.shape[0]} elements; x's last dimension is {N}")
    if residual is not None:
        _check_tensor("residual", residual, None, (dtype,))
        if residual.shape != x.shape:
            raise ArgumentError(f"residual has shape {tuple(residual.shape)}; x has {tuple(x.shape)}")
    _same_device(x=x, weight=weight, residual=residual)
    _check_eps(eps)
    res_rows = residual.reshape(-1, N).contiguous() if residual is not None else rows
    out = torch.empty_like(rows)
    res_out = torch.empty_like(rows) if residual is not None else out
    if rows.numel():
        cfg = _rows_config(N, dtype)
        key = ("rms_norm", N, dtype, float(eps), cfg, residual is not None)
        kern = _kernel(key, lambda: kernels.rms_norm(N, dtype, float(eps), *cfg, residual is not None), _target_of(x))
        kern(rows, res_rows, weight.contiguous(), out, res_out)
    return out.reshape(x.shape), (res_out.reshape(x.shape) if residual is not None else out.reshape(x.shape))


def layer_norm(x, weight, bias, eps: float = 1e-5):
    """LayerNorm over the last dimension with ``weight`` and ``bias`` of that length."""
    torch = _torch()
    if torch.compiler.is_compiling():
        return torch.ops.tilewright.layer_norm(x, weight, bias, eps)
    return layer_norm_impl(x, weight, bias, eps)


def layer_norm_impl(x, weight, bias, eps):
    torch = _torch()
    rows = _as_rows("x", x)
    N, dtype = rows.shape[1], _dtype_name(x)
    for name, t in (("weight", weight), ("bias", bias)):
        _check_tensor(name, t, 1, (dtype,))
        if t.shape[0] != N:
            raise ArgumentError(f"{name} has {t.shape[0]} elements; x's last dimension is {N}")
    _same_device(x=x, weight=weight, bias=bias)
    _check_eps(eps)
    out = torch.empty_like(rows)
    if rows.numel():
        cfg = _rows_config(N, dtype)
        key = ("layer_norm", N, dtype, float(eps), cfg)
        kern = _kernel(key, lambda: kernels.layer_norm(N, dtype, float(eps), *cfg), _target_of(x))
        kern(rows, weight.contiguous(), bias.contiguous(), out)
    return out.reshape(x.shape)
