"""Tensor-parallel linear layers (column- and row-parallel, as in Megatron-LM's MLP) on
``tilewright.ops.matmul``, with the collectives from ``torch.distributed``, checked against a
single-device float64 reference.

    torchrun --nproc_per_node 2 examples/tensor_parallel.py          # one GPU per rank, NCCL
    torchrun --nproc_per_node 2 examples/tensor_parallel.py --cpu    # CPU ranks, gloo, tile interpreter

The MLP ``y = gelu(x @ W1 + b1) @ W2 + b2`` is split over P ranks without communication in the
middle: the first layer is column-parallel (rank r keeps the columns r*F/P ... of W1 and b1, and its
output is its slice of the hidden features, with the activation fused into the GEMM's epilogue);
the second is row-parallel (rank r keeps the matching rows of W2, multiplies its hidden slice, and
the partial products are summed over the ranks by one all-reduce, in float32, before b2 is added
once).  A column-parallel layer with its output gathered (``all_gather``) is checked as well.
Every rank's kernels run on the GPU its tensors live on (``cuda:LOCAL_RANK``).
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.distributed as dist

import tilewright.ops as ops


class ColumnParallelLinear:
    """``act(x @ W[:, cols_r] + b[cols_r])`` on rank r; with ``gather`` the slices are concatenated."""

    def __init__(self, weight, bias, rank: int, world: int, activation: str = "none", gather: bool = False):
        n = weight.shape[1]
        if n % world:
            raise ValueError(f"{n} output features do not split over {world} ranks")
        cols = slice(rank * n // world, (rank + 1) * n // world)
        self.weight = weight[:, cols].contiguous()
        self.bias = bias[cols].contiguous()
        self.activation, self.gather, self.world = activation, gather, world

    def __call__(self, x):
        y = ops.matmul(x, self.weight, self.bias, self.activation)
        if not self.gather:
            return y
        parts = [torch.empty_like(y) for _ in range(self.world)]
        dist.all_gather(parts, y)
        return torch.cat(parts, dim=-1)


class RowParallelLinear:
    """``sum over ranks of x_r @ W[rows_r, :]`` (one all-reduce in float32), plus ``b`` once."""

    def __init__(self, weight, bias, rank: int, world: int):
        k = weight.shape[0]
        if k % world:
            raise ValueError(f"{k} input features do not split over {world} ranks")
        self.weight = weight[rank * k // world:(rank + 1) * k // world].contiguous()
        self.bias = bias

    def __call__(self, x_slice):
        partial = ops.matmul(x_slice, self.weight, out_dtype=torch.float32)
        dist.all_reduce(partial)
        return (partial + self.bias.float()).to(x_slice.dtype)


def _relative_error(got, want) -> float:
    return float((got.double().cpu() - want).abs().max() / want.abs().max())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cpu", action="store_true", help="CPU ranks with gloo (the kernels run in the tile interpreter)")
    p.add_argument("--tokens", type=int, default=512)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--ffn", type=int, default=4096)
    p.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    a = p.parse_args()
    if a.cpu:
        dist.init_process_group("gloo")
        device = torch.device("cpu")
    else:
        if not torch.cuda.is_available():
            print("no GPU here: run with --cpu", file=sys.stderr)
            return 2
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
        dist.init_process_group("nccl", device_id=device)
    rank, world = dist.get_rank(), dist.get_world_size()
    dtype = getattr(torch, a.dtype)

    # every rank draws the same full weights and input (one seed), keeps its shard of the weights
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(a.tokens, a.hidden, generator=g, dtype=torch.float64)
    w1 = torch.randn(a.hidden, a.ffn, generator=g, dtype=torch.float64) / a.hidden ** 0.5
    b1 = torch.randn(a.ffn, generator=g, dtype=torch.float64) * 0.1
    w2 = torch.randn(a.ffn, a.hidden, generator=g, dtype=torch.float64) / a.ffn ** 0.5
    b2 = torch.randn(a.hidden, generator=g, dtype=torch.float64) * 0.1
    lowp = [t.to(dtype) for t in (x, w1, b1, w2, b2)]
    # the reference sees the same rounded inputs, then computes in float64 on one device
    xr, w1r, b1r, w2r, b2r = (t.double() for t in lowp)
    ref_hidden = torch.nn.functional.gelu(xr @ w1r + b1r, approximate="tanh")
    ref = ref_hidden @ w2r + b2r
    xd, w1d, b1d, w2d, b2d = (t.to(device) for t in lowp)

    up = ColumnParallelLinear(w1d, b1d, rank, world, activation="gelu_tanh")
    down = RowParallelLinear(w2d, b2d, rank, world)
    y = down(up(xd))
    gathered = ColumnParallelLinear(w1d, b1d, rank, world, activation="gelu_tanh", gather=True)(xd)
    single = ops.matmul(ops.matmul(xd, w1d, b1d, "gelu_tanh"), w2d, b2d)  # the same MLP on one device

    errs = torch.tensor([_relative_error(y, ref), _relative_error(gathered, ref_hidden),
                         _relative_error(single, ref)], dtype=torch.float64)
    worst = errs.clone().to(device)
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)
    tol = 2e-2 if a.dtype == "bfloat16" else 5e-3
    ok = bool((worst <= tol).all())
    if rank == 0:
        where = "CPU (gloo, tile interpreter)" if a.cpu else f"{world} x {torch.cuda.get_device_name(device)} (NCCL)"
        print(f"tensor-parallel MLP {a.tokens}x{a.hidden} -> {a.ffn} -> {a.hidden} {a.dtype} on {world} ranks, {where}")
        print(f"  column+row parallel vs float64 reference: max relative error {worst[0].item():.2e}")
        print(f"  column parallel, gathered:                max relative error {worst[1].item():.2e}")
        print(f"  same MLP on one device:                   max relative error {worst[2].item():.2e}")
        print(("matches" if ok else "DOES NOT MATCH") + f" the single-device reference (tolerance {tol:g})")
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
