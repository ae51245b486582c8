"""The fuzz templates of the features that landed last (tilewright/fuzz/templates_new.py): a few
seeded cases of each on the interpreter and the sm_90a emulator (wgmma, warp specialization, TMA),
none may give a wrong answer, an internal error or a crash, and each template must produce kernels
that run (not only refusals).  The two compiler bugs the long fuzz found, fixed since, are kept as
regression tests with their minimal kernels."""

from __future__ import annotations

import numpy as np
import pytest
from shared_fuzz import assert_some_case_ran, run_quick_cases

import tilewright
import tilewright.language as T
from tilewright.errors import CompileError
from tilewright.fuzz.runner import judge, run_case
from tilewright.fuzz.templates import TEMPLATES
from tilewright.fuzz.templates_new import NEW

BACKENDS = ("interpret", "emulator:sm_90a")
# guarded reads: also the AMD emulator, whose vectorized loads are formed differently
EXTRA_BACKENDS = {"guarded_select": ("emulator:gfx1100",)}


# a template's quick draws: (cases, seed); the attention and persistent cases are the slow ones
QUICK = {"hopper_gemm": (3, 11), "lib_splitk": (2, 12), "lib_persistent": (2, 13), "ws_attention": (2, 14),
         "sparse_gemm": (3, 15), "launch_sized": (4, 16), "guarded_select": (6, 17)}


@pytest.mark.parametrize("name", [t.name for t in NEW])
def test_new_template_quick_cases(name):
    assert set(QUICK) == {t.name for t in NEW}
    cases, seed = QUICK[name]
    backends = BACKENDS + EXTRA_BACKENDS.get(name, ())

    def small_attention(p):
        if name == "ws_attention":
            p.update(batch=1, heads=1, seq=min(p["seq"], 129))

    assert_some_case_ran(name, run_quick_cases(name, backends, cases, seed, adjust=small_attention), backends)


def test_elements_past_the_run_time_extent_are_checked():
    """Elements past T.Parallel(n) hold the input copied through the launch-sized buffer, unscaled."""
    case = TEMPLATES["launch_sized"].make({"size": 8, "n": 3, "threads": 64, "where": "all", "dtype": "float32",
                                           "scale": 0.5, "red": "sum", "rows": 1, "cols": 8, "blocks": 1,
                                           "seed": 3})
    got = [np.copy(a) if isinstance(a, np.ndarray) else a for a in case.args]
    got[1] = case.expected[1].astype(np.float32)
    got[3] = case.expected[3].astype(np.float32)
    assert np.isnan(got[1]).sum() == 0 and judge(case, got).status == "ok"
    over = [np.copy(a) if isinstance(a, np.ndarray) else a for a in got]
    over[1][0, 5] += 1.0  # past n: must be A's value, untouched by the T.Parallel(n) loop
    assert judge(case, over).status == "wrong"


def test_a_refusal_that_says_internal_is_a_finding(monkeypatch):
    from tilewright.fuzz import runner

    case = TEMPLATES["launch_sized"].make({"size": 7, "n": 7, "threads": 64, "where": "all", "dtype": "float32",
                                           "scale": 0.5, "red": "sum", "rows": 1, "cols": 8, "blocks": 1, "seed": 1})

    def refuse(*a, **k):
        raise CompileError("internal: something the compiler cannot do")

    monkeypatch.setattr("tilewright.compiler.compile", refuse)
    assert runner.run_case(case, "interpret").status == "internal"


def test_split_k_runs_both_kernels_and_checks_the_workspace():
    p = {"m": 33, "n": 40, "k": 100, "bm": 16, "bn": 32, "bk": 32, "splits": 3, "stages": 2, "threads": 128,
         "trans_a": False, "trans_b": True, "dtype": "float16", "atomic": False, "bias": True, "act": "silu",
         "out": "in", "seed": 4}
    case = TEMPLATES["lib_splitk"].make(p)
    assert len(case.chain) == 2 and set(case.expected) == {2, 4}
    assert run_case(case, "interpret").status == "ok"


# ---------------------------------------------------------------- bugs found by the long fuzz
@pytest.mark.parametrize("target", ["cuda -arch=sm_90a", "cuda -arch=sm_80", "hip -arch=gfx942"])
def test_persistent_gemm_with_a_ragged_operand(target):
    """Found by the fuzz (lib_persistent): an operand whose rows are not a whole number of 16 bytes
    (N=31 fp16) leaves TMA on sm_90a, and the cp.async pipeline nested in the persistent tile loop
    wrote nothing; fixed with the nested-pipeline barrier/prologue fix (tests/test_pipeline_nested.py)."""
    from tilewright.kernels.gemm import matmul_persistent

    M, N, K = 1, 31, 16
    f = matmul_persistent(M, N, K, 128, 32, 32, "float16", "float32", False, False, num_stages=2, threads=128,
                          num_blocks=1, group_M=2)
    k = tilewright.compile(f, target=target, execution_backend="emulator")
    rng = np.random.default_rng(0)
    a, b = rng.uniform(-1, 1, (M, K)).astype(np.float16), rng.uniform(-1, 1, (K, N)).astype(np.float16)
    c = np.full((M, N), np.nan, np.float32)
    k(a, b, np.zeros(1, np.float32), c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-3, atol=1e-3)


def _two_step_max(R, threads):
    @T.prim_func
    def k(X: T.Tensor((R, 8), "float32"), Tot: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=threads):
            F = T.alloc_fragment((R, 8), "float32")
            Rw = T.alloc_fragment((R,), "float32")
            Out = T.alloc_fragment((1,), "float32")
            T.copy(X, F)
            T.reduce_max(F, Rw, dim=1)
            T.reduce_max(Rw, Out[0], dim=0)
            T.copy(Out, Tot)

    return k


@pytest.mark.parametrize("target", ["cuda -arch=sm_80", "cuda -arch=sm_90a", "hip -arch=gfx942", "hip -arch=gfx1100"])
@pytest.mark.parametrize("rows", [3, 5, 31])
def test_reduction_of_a_reduced_padded_fragment(target, rows):
    """Found by the fuzz (launch_sized): reducing the result of a row reduction over a padded
    fragment raised 'partial register without validity predicate' (ReducedLayout had no valid_expr)."""
    k = tilewright.compile(_two_step_max(rows, 128), target=target, execution_backend="emulator")
    x = np.random.default_rng(rows).standard_normal((rows, 8)).astype(np.float32)
    out = np.full(1, np.nan, np.float32)
    k(x, out)
    assert out[0] == x.max()


def test_reduction_of_a_reduced_fragment_that_fills_the_threads():
    """The same two-step reduction where the fragment is not padded works (the bug's boundary)."""
    k = tilewright.compile(_two_step_max(64, 128), target="cuda -arch=sm_80", execution_backend="emulator")
    x = np.random.default_rng(2).standard_normal((64, 8)).astype(np.float32)
    out = np.full(1, np.nan, np.float32)
    k(x, out)
    assert out[0] == x.max()


def test_guarded_select_catches_an_unguarded_read():
    """The template's expected output holds ``fill`` where the guard fails: a kernel that read A
    there instead would be judged wrong (the template can fail)."""
    p = {"rows": 4, "cols": 16, "threads": 64, "dtype": "float32", "blocks": 2, "cut": "both", "offset": 1,
         "seed_n": 7, "fill": -1.5, "seed": 2}
    case = TEMPLATES["guarded_select"].make(p)
    got = [np.copy(a) if isinstance(a, np.ndarray) else a for a in case.args]
    got[1] = case.expected[1].astype(np.float32)
    assert judge(case, got).status == "ok"
    n_rows, n_cols = case.args[2], case.args[3]
    assert n_rows < 8 or n_cols < 16  # some element is past the guard
    r, c = (n_rows, 0) if n_rows < 8 else (0, n_cols)
    got[1][r, c] = 0.25  # a value read from past A's valid part instead of the fill
    assert judge(case, got).status == "wrong"
