"""The project's differential fuzzer: a seeded quick run in CI (no finding allowed), and the
fuzzer's own machinery checked on a seeded fault (it must report it, shrink it and write a repro
script that reproduces it)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np

from tilewright.fuzz import fuzz
from tilewright.fuzz.ops_cases import OPS
from tilewright.fuzz.ops_cases_s10 import OPS_S10
from tilewright.fuzz.runner import judge, run_case
from tilewright.fuzz.templates import TEMPLATES
from tilewright.fuzz.templates_new import NEW
from tilewright.fuzz.templates_s10 import S10

# the templates of templates_new.py have their own quick test (test_fuzz_new.py), which keeps out the
# draws of two known, xfail-pinned compiler bugs, and the op-level ones (ops_cases.py: seconds per
# case) theirs with small sizes (test_fuzz_s9.py), the session-10 ones too (test_fuzz_s10.py); the long
# runs (python -m tilewright.fuzz) include them
FIRST = [t for t in TEMPLATES if t not in {n.name for n in (*NEW, *OPS, *S10, *OPS_S10)}]


def test_quick_seeded_fuzz_finds_nothing(tmp_path):
    """Every template at least once (in turn, not drawn), on the interpreter and three emulators."""
    cases = len(FIRST) + 8
    report = fuzz(cases=cases, seed=2026, templates=FIRST, out_dir=str(tmp_path), shrink_budget=0, round_robin=True)
    assert report.runs == cases * 4
    assert {t for t, _, _ in report.counts} == set(FIRST)
    assert not report.findings, report.table() + "\n" + "\n".join(map(str, report.findings))
    assert sum(n for (_, _, s), n in report.counts.items() if s == "ok") > report.runs // 2


def test_judge_flags_unwritten_and_wrong_outputs():
    case = TEMPLATES["elementwise"].make({"n": 33, "block": 32, "threads": 32, "dtype": "float32", "op": "fma",
                                          "style": "guard", "seed": 1})
    good = [a.copy() for a in case.args]
    good[3] = case.expected[3].astype(np.float32)
    assert judge(case, good).status == "ok"
    unwritten = [a.copy() for a in good]
    unwritten[3][-1] = np.nan
    assert judge(case, unwritten).status == "wrong" and "never written" in judge(case, unwritten).detail
    off = [a.copy() for a in good]
    off[3][5] += 1.0
    assert judge(case, off).status == "wrong" and "(5,)" in judge(case, off).detail


def test_a_seeded_fault_is_found_shrunk_and_reproduced(tmp_path, monkeypatch):
    """Make the reference of one template wrong for sizes > 8: the fuzzer must report it, shrink the
    size towards the smallest failing value, and the repro script must fail the same way."""
    from tilewright.fuzz import templates as tp

    real = tp._make_elementwise

    def broken(p):
        case = real(p)
        if p["n"] > 8:
            case.expected[3] = case.expected[3] + 1.0
        return case

    monkeypatch.setitem(TEMPLATES, "elementwise", tp.Template("elementwise", tp._draw_elementwise, broken))
    report = fuzz(cases=3, seed=5, backends=("interpret",), templates=["elementwise"], out_dir=str(tmp_path),
                  shrink_budget=20)
    wrong = [f for f in report.findings if f[2] == "wrong"]
    assert wrong, report.table()
    params, path = wrong[0][4], wrong[0][5]
    assert 8 < params["n"] <= 16 and os.path.exists(path)
    # the repro script rebuilds the case from the (unpatched) templates: it passes there, which
    # shows it runs standalone; with the patched template it would fail as reported
    assert run_case(broken(params), "interpret").status == "wrong"
    proc = subprocess.run([sys.executable, path], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert proc.returncode == 0 and "ok" in proc.stdout
