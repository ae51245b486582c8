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


def test_attention_user_program_without_the_autotuner():
    """The in-process loop the benchmark falls back to when the autotuner fails picks a correct kernel."""
    bench = _load("attention")
    bench._autotuner_ok[0] = False
    b, h, s, d = 1, 2, 80, 32
    g = torch.Generator().manual_seed(3)
    q4, k4, v4 = (torch.randn(b, s, h, d, generator=g).to(torch.bfloat16) for _ in range(3))
    ref4 = bench.sdpa(*(x.transpose(1, 2).double() for x in (q4, k4, v4)), True).transpose(1, 2)
    kern, cfg, note = bench.tune_user_program(b, h, s, d, True, "bfloat16", bench.QUICK_CONFIGS, q4, k4, v4, ref4,
                                              True)
    assert note == "in process" and cfg in bench.QUICK_CONFIGS
    assert bench._err(kern(q4, k4, v4), ref4) < 2e-2


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
