"""Index algebra of ``simplify_ranges``: splitting ``//`` and ``%`` over sums must be exact, and the
bounds that an ``if`` implies must remove the masks of evenly dividing pipelined copies (and only
those)."""

from __future__ import annotations

import numpy as np
import pytest

from tilewright.ir import expr as E
from tilewright.kernels import matmul
from tilewright.passes.analysis import eval_expr
from tilewright.passes.index_algebra import linear_terms, split_div_mod

TID = E.Var("tid", "int32", kind="thread")
K = E.Var("k", "int32", kind="loop")
RANGES = {TID: (0, 255), K: (0, 130)}


def _rng(e):
    """Interval of a non-negative expression built from TID, K and constants (test stand-in)."""
    env = {TID: np.arange(256).repeat(131), K: np.tile(np.arange(131), 256)}
    v = eval_expr(e, env)
    v = np.asarray(v)
    return (int(v.min()), int(v.max()))


CASES = [
    ("//", (TID + 128) // 4 * 1 + 0, 4),
    ("//", TID + 128, 4),
    ("%", TID + 128, 4),
    ("//", (TID % 4) * 8, 8),
    ("%", (TID % 4) * 8, 8),
    ("//", TID * 16 + K * 32 + 24, 16),
    ("%", TID * 16 + K * 32 + 24, 16),
    ("//", TID // 4, 2),
    ("%", TID % 32, 8),
    ("//", TID * 3 + 7, 4),
    ("%", K * 6 + TID + 5, 3),
]


@pytest.mark.parametrize("op,x,d", CASES)
def test_split_is_exact(op, x, d):
    out = split_div_mod(op, x, d, _rng)
    env = {TID: np.arange(256).repeat(131), K: np.tile(np.arange(131), 256)}
    want = eval_expr(E.binary(op, x, E.Const(d, "int32")), env)
    if out is None:
        return
    np.testing.assert_array_equal(eval_expr(out, env), want)


def test_split_pulls_out_multiples():
    out = split_div_mod("//", TID + 128, 4, _rng)
    terms, const = linear_terms(out)
    assert const == 32 and len(terms) == 1
    assert split_div_mod("%", TID + 128, 4, _rng) is not None
    # nothing to pull out: left alone
    assert split_div_mod("//", TID + 3, 4, _rng) is None
    # negative coefficients are never touched (C division would then differ from floor division)
    assert split_div_mod("//", TID - 128, 4, _rng) is None


def _mainloop_source(func) -> str:
    from tilewright.compiler import lower
    from tilewright.compiler import print_source as _print
    from tilewright.target import Target

    src = _print(lower(func, target="cuda"), Target.parse("cuda"))
    return src[src.index("for (int k"):]


def test_divisible_gemm_has_no_masks_in_its_mainloop():
    loop = _mainloop_source(matmul(256, 256, 256, 128, 128, 32, num_stages=3))
    assert "cp.async" in loop
    assert "? 16 : 0" not in loop, "the prefetch copies of an evenly divided GEMM should not be masked"


def test_ragged_gemm_keeps_its_masks():
    loop = _mainloop_source(matmul(200, 256, 250, 128, 128, 32, num_stages=3))
    assert "? 16 : 0" in loop
