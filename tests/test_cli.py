"""The command line: doctor on a machine without a GPU, compile to code objects for both vendors,
and clear one-line errors (exit status 2) for bad arguments instead of tracebacks."""

from __future__ import annotations

import json
import os

import pytest
from toolchains import needs_hip_compiler, needs_nvrtc

import tilewright
from tilewright.cli.main import main

QUICKSTART = os.path.join(os.path.dirname(__file__), "tilelang_quickstart.py")


def test_doctor_names_what_it_found_and_what_is_missing(capsys, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    code = main(["doctor"])
    out = capsys.readouterr().out
    assert f"tilewright {tilewright.__version__}" in out
    for name in ("NVRTC", "HIP compiler", "PyTorch", "kernel cache", "NVIDIA GPUs", "AMD GPUs"):
        assert name in out
    if "the local GPU can be used" in out:
        assert code == 0
    else:
        assert code == 1 and "no usable GPU" in out
    for line in out.splitlines():  # every missing piece comes with its fix
        if "[missing]" in line:
            assert "fix:" in out


@needs_nvrtc
def test_compile_writes_a_cubin_source_and_report(tmp_path, capsys):
    args = [f"{QUICKSTART}:matmul", "256", "256", "128", "64", "64", "32"]
    assert main(["compile", *args, "--target", "cuda", "--arch", "sm_90a", "-o", str(tmp_path)]) == 0
    cubin = (tmp_path / "gemm.sm_90a.cubin").read_bytes()
    assert cubin[:4] == b"\x7fELF"
    report = json.loads((tmp_path / "gemm.sm_90a.json").read_text())
    assert report["target"] == "cuda -arch=sm_90a" and report["resources"]["spills"] == 0
    assert "wgmma.mma_async" in (tmp_path / "gemm.sm_90a.cu").read_text()  # the sm_90a default


@needs_hip_compiler
def test_compile_writes_an_amd_code_object(tmp_path, capsys):
    args = [f"{QUICKSTART}:matmul", "256", "256", "128", "64", "64", "32"]
    assert main(["compile", *args, "--target", "hip", "--arch", "gfx942", "-o", str(tmp_path)]) == 0
    assert (tmp_path / "gemm.gfx942.hsaco").read_bytes()[:4] == b"\x7fELF"
    assert "__builtin_amdgcn_mfma" in (tmp_path / "gemm.gfx942.hip").read_text()
    assert "gemm:" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["compile", "no_such_file.py"], "no such file"),
    (["compile", f"{QUICKSTART}"], "defines no prim_func at module level"),
    (["compile", f"{QUICKSTART}:nope"], "has no 'nope'"),
    (["compile", f"{QUICKSTART}:matmul", "1"], "calling matmul"),
    (["compile", f"{QUICKSTART}:matmul", "64", "64", "64", "--target", "interpret"], "give a GPU target"),
    (["compile", f"{QUICKSTART}:matmul", "64", "--target", "hip -arch=gfx942", "--arch", "gfx90a"], "once"),
])
def test_bad_arguments_are_one_line_errors(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_version_and_cache_info(capsys, tmp_path, monkeypatch):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and tilewright.__version__ in capsys.readouterr().out
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path / "c"))
    assert main(["cache", "info"]) == 0 and "files: 0" in capsys.readouterr().out
    os.makedirs(tmp_path / "c" / "ab")
    assert main(["cache", "clear"]) == 0 and not (tmp_path / "c").exists()


def test_every_knob_is_documented():
    from tilewright import config

    text = open(os.path.join(os.path.dirname(__file__), "..", "docs", "configuration.md")).read()
    missing = [k.env for k in config.KNOBS.values() if f"`{k.env}`" not in text]
    assert not missing, f"regenerate docs/configuration.md (python -m tilewright.config): {missing}"


def test_tune_runs_an_autotuned_function_from_a_file(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path / "cache"))
    prog = tmp_path / "tuned.py"
    prog.write_text('''
import tilewright as tilelang
import tilewright.language as T

@tilelang.autotune(configs=[{"block": 32}, {"block": 64}], warmup=1, rep=2)
@tilelang.jit(out_idx=[-1], target="interpret")
def scale(n, block=64):
    @T.prim_func
    def k(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, block), threads=32) as bx:
            for i in T.Parallel(block):
                if bx * block + i < n:
                    B[bx * block + i] = A[bx * block + i] * 2.0
    return k

def plain(n):
    return n
''')
    assert main(["tune", f"{prog}:scale", "300"]) == 0
    out = capsys.readouterr().out
    assert "| config | status |" in out and "best: {'block'" in out
    assert main(["tune", f"{prog}:scale", "300"]) == 0 and "from the tuning cache" in capsys.readouterr().out
    assert main(["tune", f"{prog}:plain", "3"]) == 2
    assert "not decorated with @tilewright.autotune" in capsys.readouterr().err
