"""The pass pipeline, per target, in order.  Each pass is a function ``(func, ctx) -> func`` in a
file of its own whose docstring states what it needs and guarantees; ``run_pipeline`` runs them,
dumps the IR after each when asked (``TILEWRIGHT_DUMP_DIR``), and turns unexpected exceptions into
``InternalError`` naming the pass."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from ..errors import InternalError, TilewrightError
from ..ir import tile as t
from ..ir.plans import Plans
from .check_clusters import check_clusters
from .check_target_limits import check_target_limits
from .expand_tile_ops import expand_tile_ops
from .infer_layouts import infer_layouts
from .insert_barriers import insert_barriers
from .lower_to_threads import lower_to_threads
from .pdl_prologue import pdl_prologue
from .pipeline_loops import pipeline_loops
from .plan_gemms import plan_gemms
from .plan_tma_stores import plan_tma_stores
from .share_shared_memory import share_shared_memory
from .simplify_ranges import simplify_ranges
from .version_masks import version_masks
from .warp_specialize import warp_specialize
from .warp_specialize_loop import warp_specialize_loop  # attention-shaped loops (attn-hopper)


@dataclass
class PassContext:
    target: object
    options: dict = field(default_factory=dict)
    dump: object = None  # callable(stage_name, text) or None


def _tile(fn):
    def run(func, ctx):
        return fn(func)

    run.__name__ = fn.__name__
    return run


# Tile IR -> Tile IR passes, then the lowering to thread IR.  The list is the same for CUDA and
# HIP today: the target-specific choices (matrix instructions, async copies, wave size) are made
# inside the passes from the target record.  Passes record their decisions in ``func.plans``.
_PASSES = [check_clusters, check_target_limits, version_masks, warp_specialize, warp_specialize_loop, pipeline_loops,
           pdl_prologue, plan_tma_stores, _tile(expand_tile_ops),
           plan_gemms, infer_layouts, _tile(insert_barriers), share_shared_memory]
TILE_PASSES = {"cuda": _PASSES, "hip": _PASSES}


def run_pipeline(func: t.PrimFunc, ctx: PassContext):
    """Run the passes for ``ctx.target`` on a copy of ``func``; returns the ``ThreadKernel``."""
    from ..ir.printer import print_func

    work = copy.copy(func)
    work.attrs = dict(func.attrs)
    work.plans = Plans()  # the user's function keeps no plans: each compile makes its own
    passes = TILE_PASSES[ctx.target.kind]
    for p in passes:
        try:
            work = p(work, ctx)
        except TilewrightError:
            raise
        except Exception as e:
            raise InternalError(f"{type(e).__name__}: {e}", p.__name__) from e
        if ctx.dump is not None:
            ctx.dump(f"after_{p.__name__}.py", print_func(work))
    if ctx.dump is not None:
        ctx.dump("plans.txt", work.plans.summary())
    kernel = work
    for name, step in (("lower_to_threads", lambda f: lower_to_threads(f, ctx)), ("simplify_ranges", simplify_ranges)):
        try:
            kernel = step(kernel)
        except TilewrightError:
            raise
        except Exception as e:  # a bug of ours: say so and name the pass
            raise InternalError(f"{type(e).__name__}: {e}", name) from e
    if ctx.dump is not None:
        from ..ir.thread_printer import print_thread_kernel

        ctx.dump("thread_ir.txt", print_thread_kernel(kernel))
    return kernel
