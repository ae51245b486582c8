"""``torch.ops.tilewright.*``: the operators registered with ``torch.library.custom_op``, each with a
fake (meta) implementation giving the output's shape and dtype, so that ``torch.compile`` traces
through them without running a kernel and without a graph break; ``matmul`` also has autograd
(its gradients are matmuls too); ``attention`` returns (out, lse) and has no backward.
Registration happens once, when torch is importable."""

# no "from __future__ import annotations": torch.library reads the annotations as real types
from typing import Optional

_done: list = []


def register() -> None:
    if _done:
        return
    try:
        import torch
    except ImportError:  # the operators need torch; the rest of tilewright does not
        return
    _done.append(True)
    from . import dispatch

    Tensor = torch.Tensor

    @torch.library.custom_op("tilewright::matmul", mutates_args=())
    def matmul_op(a: Tensor, b: Tensor, bias: Optional[Tensor], activation: str,
                  out_dtype: Optional[torch.dtype]) -> Tensor:
        return dispatch.matmul_impl(a, b, bias, activation, out_dtype)

    @matmul_op.register_fake
    def _(a, b, bias, activation, out_dtype):
        return a.new_empty((a.shape[0], b.shape[1]), dtype=out_dtype or a.dtype)

    def matmul_setup(ctx, inputs, output):
        a, b, bias, activation, out_dtype = inputs
        if activation != "none":
            ctx.unsupported = activation
        else:
            ctx.unsupported = None
            ctx.save_for_backward(a, b)
            ctx.has_bias = bias is not None

    def matmul_backward(ctx, grad):
        if ctx.unsupported:
            raise NotImplementedError(f"tilewright.ops.matmul has no backward for activation={ctx.unsupported!r}; "
                                      "apply the activation outside the matmul when training")
        a, b = ctx.saved_tensors
        g = grad.to(a.dtype)
        grad_a = dispatch.matmul_impl(g, b.t(), None, "none", None) if ctx.needs_input_grad[0] else None
        grad_b = dispatch.matmul_impl(a.t(), g, None, "none", None) if ctx.needs_input_grad[1] else None
        grad_bias = grad.sum(0).to(a.dtype) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return grad_a, grad_b, grad_bias, None, None

    matmul_op.register_autograd(matmul_backward, setup_context=matmul_setup)

    @torch.library.custom_op("tilewright::softmax", mutates_args=())
    def softmax_op(x: Tensor, dim: int) -> Tensor:
        return dispatch.softmax_impl(x, dim)

    @softmax_op.register_fake
    def _(x, dim):
        return torch.empty_like(x)

    @torch.library.custom_op("tilewright::rms_norm", mutates_args=())
    def rms_norm_op(x: Tensor, weight: Tensor, eps: float, residual: Optional[Tensor]) -> tuple[Tensor, Tensor]:
        y, r = dispatch.rms_norm_impl(x, weight, eps, residual)
        return y, (r if residual is not None else y.clone())

    @rms_norm_op.register_fake
    def _(x, weight, eps, residual):
        return torch.empty_like(x), torch.empty_like(x)

    @torch.library.custom_op("tilewright::layer_norm", mutates_args=())
    def layer_norm_op(x: Tensor, weight: Tensor, bias: Tensor, eps: float) -> Tensor:
        return dispatch.layer_norm_impl(x, weight, bias, eps)

    @layer_norm_op.register_fake
    def _(x, weight, bias, eps):
        return torch.empty_like(x)

    from . import attention_dispatch as attention_mod

    @torch.library.custom_op("tilewright::attention", mutates_args=())
    def attention_op(q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: Optional[float],
                     cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor], max_seqlen_q: Optional[int],
                     cache_seqlens: Optional[Tensor], num_splits: Optional[int]) -> tuple[Tensor, Tensor]:
        return attention_mod.attention_impl(q, k, v, causal, scale, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                            cache_seqlens, num_splits)

    @attention_op.register_fake
    def _(q, k, v, causal, scale, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, cache_seqlens, num_splits):
        out_shape, lse_shape = attention_mod.output_shapes(q, cu_seqlens_q)
        return q.new_empty(out_shape), q.new_empty(lse_shape, dtype=torch.float32)
