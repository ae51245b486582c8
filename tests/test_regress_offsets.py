"""Regressions of issue 11, items 5 and 11: element offsets that can pass 2^31 are 64-bit in the
generated code (and 32-bit where they provably cannot), a tensor too large for the compiled code is
refused at launch, the emulator evaluates offsets with 64-bit semantics and flags where 32-bit
code would overflow; and an odd-width softmax no longer makes NVRTC unroll one 127-step loop per
register (a structural check of the generated code, no timing)."""

import numpy as np
import pytest
import zoo
from zoo import close, poisoned, rand

from tilewright.compiler import _print
from tilewright.interp.emulator import run_thread_kernel
from tilewright.ir import thread as th
from tilewright.ir import tile as t
from tilewright.ir.expr import const_value
from tilewright.kernels import softmax
from tilewright.passes.pipeline import PassContext, run_pipeline
from tilewright.target.base import Target

CUDA, GFX942, GFX1100 = "cuda -arch=sm_90a", "hip -arch=gfx942", "hip -arch=gfx1100"


def lower(func, target: str) -> th.ThreadKernel:
    return run_pipeline(func, PassContext(Target.parse(target)))


@pytest.fixture
def rng():
    return np.random.default_rng(20261201)


# ============================================================================================
# item 11: softmax over an odd row width


def unrolled_size(s) -> int:
    """Statements the C compiler sees once loops of constant trip count are unrolled (what made
    NVRTC slow: 64 loops of 127 steps on the (32, 127) softmax)."""
    if s is None:
        return 0
    if isinstance(s, t.SeqStmt):
        return sum(unrolled_size(x) for x in s.stmts)
    if isinstance(s, t.IfThenElse):
        return 1 + unrolled_size(s.then_body) + unrolled_size(s.else_body)
    if isinstance(s, t.For):
        n = const_value(s.extent)
        return 1 + (n if isinstance(n, int) else 1) * unrolled_size(s.body)
    return 1


def loops(s) -> int:
    if isinstance(s, t.SeqStmt):
        return sum(loops(x) for x in s.stmts)
    if isinstance(s, t.IfThenElse):
        return loops(s.then_body) + (loops(s.else_body) if s.else_body is not None else 0)
    if isinstance(s, t.For):
        return 1 + loops(s.body)
    return 0


@pytest.mark.parametrize("target", [CUDA, GFX942, GFX1100])
def test_odd_width_softmax_code_is_not_pathological(target):
    odd, even = lower(softmax(32, 127, 32), target), lower(softmax(32, 128, 32), target)
    # each reduction folds each row once: one loop per reduction, not one per register
    assert loops(odd.body) <= 2
    assert unrolled_size(odd.body) <= 3 * unrolled_size(even.body)
    tgt = Target.parse(target)
    assert len(_print(odd, tgt)) <= 2 * len(_print(even, tgt))


@pytest.mark.parametrize("target", [CUDA, GFX942, GFX1100])
@pytest.mark.parametrize("M, N, bm", [(32, 127, 32), (40, 127, 32), (5, 300, 2)])
def test_odd_width_softmax_is_right(rng, target, M, N, bm):
    k = lower(softmax(M, N, bm), target)
    x, y = rand(rng, (M, N), lo=-5, hi=5), poisoned((M, N))
    run_thread_kernel(k, [x, y], check_races=True)
    close(y, zoo.softmax_ref(x), rtol=1e-5, atol=1e-7)
