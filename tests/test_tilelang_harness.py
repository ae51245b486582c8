"""scripts/tilelang_tests.py: the import rewriting, the tests it leaves out, the failure classes,
and one end-to-end run on a small synthetic TileLang-style test tree (no TileLang files are in the
repository; the harness takes a checkout's path)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location("tilelang_tests", os.path.join(ROOT, "scripts", "tilelang_tests.py"))
tt = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tt)


def test_imports_are_rewritten_and_nothing_else():
    src = textwrap.dedent("""\
        import tilelang
        import tilelang.language as T
        from tilelang import language as T2
        import tilelang.testing
        from tilelang.profiler import Profiler
        from tilelang import tvm as tvm
        from tilelang.no_such_module import (
            thing,
            other as renamed,
        )
        x = "import tilelang"  # tilelang.cdiv stays
        def f():
            import tilelang.testing
            return tilelang.testing.torch_assert_close
        """)
    text = tt.rewrite_imports(src)
    lines = text.splitlines()
    assert len(lines) == len(src.splitlines())  # line numbers kept
    assert lines[10] == 'x = "import tilelang"  # tilelang.cdiv stays'
    ns: dict = {}
    exec(compile(text, "t.py", "exec"), ns)
    import tilewright
    import tilewright.language
    import tilewright.testing

    assert ns["tilelang"] is tilewright and ns["T"] is tilewright.language and ns["T2"] is tilewright.language
    assert ns["Profiler"] is tilewright.Profiler
    assert ns["f"]() is tilewright.testing.torch_assert_close
    # names tilewright lacks import fine and fail when used, naming themselves
    for name, path in (("thing", "tilelang.no_such_module.thing"), ("renamed", "tilelang.no_such_module.other"),
                       ("tvm", "tvm.target.Target")):
        obj = ns[name].target.Target if name == "tvm" else ns[name]
        try:
            obj()
        except AttributeError as e:
            assert f"not part of tilewright: {path} is used" in str(e)
        else:
            raise AssertionError(name)


def _rec(exc, msg, frames=()):
    return {"exc_type": exc, "message": msg, "frames": list(frames)}


def test_failures_are_classified():
    c = tt.classify
    assert c(_rec("builtins.AttributeError", "module 'tilewright.language' has no attribute 'foo'")) == \
        ("missing name", "T.foo")
    assert c(_rec("builtins.ModuleNotFoundError", "No module named 'tilewright.carver'")) == \
        ("missing name", "tilelang.carver (module)")
    assert c(_rec("builtins.ImportError", "cannot import name 'X' from 'tilewright.layout' (/x.py)")) == \
        ("missing name", "tilelang.layout.X")
    assert c(_rec("builtins.AttributeError", "TVM is not part of tilewright: tvm.target.Target is used"))[1] == \
        "tvm.target.Target"
    assert c(_rec("builtins.AttributeError", "it is not part of tilewright: tilelang.cuda.x is used"))[1] == \
        "tilelang.cuda.x"
    assert c(_rec("builtins.ModuleNotFoundError", "No module named 'einops'"))[0] == "missing package"
    assert c(_rec("tilewright.errors.CompileError", "T.gemm tile cannot be split"))[0] == "kernel refused"
    assert c(_rec("tilewright.errors.InternalError", "pass x failed"))[0] == "internal error"
    assert c(_rec("tilewright.errors.ToolchainError", "NVRTC failed"))[0] == "NVRTC rejected"
    assert c(_rec("builtins.TypeError", "compile() got an unexpected keyword argument 'foo'"))[0] == "parameter"
    assert c(_rec("builtins.AssertionError", "Too many mismatched elements: 5 > 1",
                  [("t.py", "torch_assert_close", "")]))[0] == "wrong result"
    assert c(_rec("builtins.AssertionError", "Torch not compiled with CUDA enabled"))[0] == "needs a GPU"
    assert c(_rec("builtins.TimeoutError", "harness timeout: the test ran past 5 s"))[0] == "timeout"
    assert c(_rec("builtins.KeyError", "'x'"))[0] == "other"
    # pytest.raises(match=...) that failed: the error actually raised decides
    raised = ("Regex pattern did not match.\n  Expected regex: 'No valid warp partition'\n  Actual message: "
              "'T.gemm tile 16x104x32 cannot be split over 12 warps'")
    assert c(_rec("builtins.AssertionError", raised))[0] == "error text differs"
    raised = ("Regex pattern did not match.\n  Expected regex: 'x'\n  Actual message: 'AttributeError: module "
              "'tilewright.language' has no attribute 'Fragment''")
    assert c(_rec("builtins.AssertionError", raised)) == ("missing name", "T.Fragment")
    # a collection error carries only pytest's text
    text = "foo\nE   ModuleNotFoundError: No module named 'tilewright.jit.adapter'\n"
    assert tt.classify({"text": text}) == ("missing name", "tilelang.jit.adapter (module)")


def _write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(textwrap.dedent(text))


def test_a_run_on_a_synthetic_tree(tmp_path):
    root = tmp_path / "tl"
    _write(str(root / "testing" / "python" / "language" / "test_small.py"), """\
        import numpy as np
        import pytest
        import tilelang
        import tilelang.language as T
        import tilelang.testing
        from tilelang import tvm as tvm


        def kernel(N):
            @T.prim_func
            def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
                with T.Kernel(1, threads=32):
                    for i in T.Parallel(N):
                        B[i] = A[i] + 1
            return main


        def test_passes():
            k = tilelang.compile(kernel(64), out_idx=[1], target="interpret")
            a = np.random.default_rng(0).standard_normal(64).astype(np.float32)
            tilelang.testing.torch_assert_close(k(a), a + 1, rtol=1e-6, atol=1e-6)


        def test_wrong():
            k = tilelang.compile(kernel(64), out_idx=[1], target="interpret")
            a = np.random.default_rng(0).standard_normal(64).astype(np.float32)
            tilelang.testing.torch_assert_close(k(a), a + 2, rtol=1e-6, atol=1e-6)


        def test_missing():
            T.no_such_tilelang_name_xyz()


        def test_tvm_internal():
            assert tvm.tirx.PrimFunc is not None


        def test_quotes_source():
            k = tilelang.compile(kernel(64), out_idx=[1], target="interpret")
            assert "B[i]" in k.get_kernel_source()


        @tilelang.testing.requires_metal
        def test_skipped():
            pass
        """)
    _write(str(root / "testing" / "python" / "language" / "test_broken.py"), """\
        import tilelang
        from no_such_package_xyz import thing


        def test_one():
            thing()


        def test_two():
            thing()
        """)
    report = tmp_path / "r.md"
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "tilelang_tests.py"), "--tests-dir",
                           str(root), "--suites", "language", "--examples", "none", "--report", str(report),
                           "--jobs", "1", "--timeout", "60"], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=ROOT))
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads((tmp_path / "r.json").read_text())
    by_name = {k.split("::")[-1]: v for k, v in results.items()}
    assert by_name["test_passes"]["outcome"] == "passed"
    assert by_name["test_wrong"]["class"] == "wrong result"
    assert by_name["test_missing"]["class"] == "missing name"
    assert by_name["test_missing"]["reason"] == "T.no_such_tilelang_name_xyz"
    assert by_name["test_tvm_internal"]["outcome"] == "left out"
    assert by_name["test_quotes_source"]["outcome"] == "left out"
    assert by_name["test_skipped"]["outcome"] == "skipped"
    # a file that cannot be imported counts once per test it defines
    assert by_name["test_one"]["class"] == by_name["test_two"]["class"] == "missing package"
    text = report.read_text()
    assert "**6 tests: 1 pass, 4 fail, 1 skip** (2 left out" in text
    assert "| `T.no_such_tilelang_name_xyz` | 1 |" in text
