"""bench/attention.py and bench/memory.py run end to end with --quick (tiny shapes in the CPU
interpreter): every tilewright row is measured (checked against the reference first, so a wrong
output would show as 'nan' and a WRONG line) and the tables have the columns the GPU run reports."""

import importlib.util
import os

import pytest

torch = pytest.importorskip("torch")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load(name):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", os.path.join(ROOT, "bench", f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _cells(row):
    return [c.strip() for c in row.strip().strip("|").split("|")]


def test_attention_quick(capsys):
    rows = _load("attention").main(["--quick", "--no-save", "--dtypes", "bfloat16"])
    assert "WRONG" not in capsys.readouterr().out
    header = next(r for r in rows if r.startswith("| dtype | B,H,S,D"))
    cols = _cells(header)
    fwd = [_cells(r) for r in rows if r.startswith("| bfloat16 |") and len(_cells(r)) == len(cols)]
    assert len(fwd) == 4  # two shapes, causal and not
    for r in fwd:
        assert r[cols.index("user program")] != "nan" and r[cols.index("ops.attention")] != "nan", r
        assert float(r[cols.index("ops err")]) < 2e-2
    dec_header = next(r for r in rows if r.startswith("| dtype | KV length"))
    dcols = _cells(dec_header)
    dec = [_cells(r) for r in rows if r.startswith("| bfloat16 |") and len(_cells(r)) == len(dcols)]
    assert [int(r[1]) for r in dec] == [256, 512]
    for r in dec:
        assert r[dcols.index("ops.attention GB/s")] != "nan" and float(r[dcols.index("ops err")]) < 2e-2


def test_memory_quick(capsys):
    rows = _load("memory").main(["--quick", "--no-save", "--no-compile", "--dtypes", "float32,bfloat16"])
    assert "WRONG" not in capsys.readouterr().out
    names = [_cells(r)[0] for r in rows if r.startswith("| ") and not r.startswith("| kernel")]
    for want in ("ops.softmax", "ops.rms_norm", "residual + ops.rms_norm (fused)", "ops.layer_norm",
                 "softmax (user program)", "rmsnorm (user program)"):
        assert want in names
    cols = _cells(next(r for r in rows if r.startswith("| kernel")))
    for r in rows:
        if r.startswith("| ") and not r.startswith("| kernel") and "---" not in r:
            c = _cells(r)
            assert c[cols.index("tilewright TB/s")] != "nan", r
