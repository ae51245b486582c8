"""Pass ``check_target_limits``: refuse launch shapes the target cannot run, before anything else.

Needs: a verified Tile IR function and a target.
Guarantees: the block has at most the target's threads per block, and on AMD a whole number of
waves (a block narrower than one wave on CDNA would leave lanes of every matrix instruction
empty); otherwise a ``CompileError`` at the ``T.Kernel`` line says what to change.
"""

from __future__ import annotations

from ..errors import CompileError
from ..ir import tile as t
from ..ir.visitor import walk


def check_target_limits(func: t.PrimFunc, ctx) -> t.PrimFunc:
    target = ctx.target
    kernels = []
    walk(func.body, lambda s: kernels.append(s) if isinstance(s, t.Kernel) else None)
    for k in kernels:
        n = k.num_threads
        if n > target.max_threads_per_block:
            raise CompileError(f"T.Kernel asks for {n} threads; {target} allows at most "
                               f"{target.max_threads_per_block} per block", k.loc, hint="use fewer threads")
        if target.is_hip and n % target.warp_size:
            raise CompileError(f"T.Kernel(threads={n}) is not a multiple of the wave size {target.warp_size} of "
                               f"{target.arch}", k.loc, hint=f"use a multiple of {target.warp_size} threads "
                               f"(e.g. {max(target.warp_size, n - n % target.warp_size)})")
    return func
