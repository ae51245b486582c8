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
    occ = report["occupancy"]  # the profiler's occupancy, printed and saved by compile
    assert occ["blocks_per_sm"] == min(occ["limits"].values()) > 0 and occ["limited_by"] in occ["limits"]
    assert "occupancy:" in capsys.readouterr().out
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
    # and each row says what the registry says (a knob's meaning edited in config.py reaches the page)
    stale = [row.split("|")[1].strip() for row in config.markdown().splitlines()[2:] if row not in text]
    assert not stale, f"regenerate the table of docs/configuration.md (python -m tilewright.config): {stale}"


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


def test_profile_on_the_interpreter_prints_a_report_and_json(capsys, tmp_path):
    args = [f"{QUICKSTART}:matmul", "64", "64", "64", "32", "32", "32", "--target", "interpret", "--rep", "1"]
    assert main(["profile", *args, "--flops", str(2 * 64**3), "--trace", str(tmp_path / "t.json")]) == 0
    out = capsys.readouterr().out
    assert "kernel gemm" in out and "TFLOP/s" in out and "CPU clock" in out
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    assert main(["profile", *args, "--json"]) == 0
    (report,) = json.loads(capsys.readouterr().out)
    assert report["bytes"] == 3 * 64 * 64 * 2 and report["flops"] is None and report["timing"]["samples"] >= 3


def test_bench_on_the_cpu_checks_against_torch(capsys, tmp_path):
    pytest.importorskip("torch")
    assert main(["bench", "--device", "cpu", "--ops", "softmax,rms_norm", "--warmup", "0", "--rep", "1",
                 "--json", str(tmp_path / "b.json"), "--trace", str(tmp_path / "t.json")]) == 0
    out = capsys.readouterr().out
    assert "| softmax | 64x128 |" in out and "| rms_norm | 64x128 |" in out and "MISMATCH" not in out
    result = json.loads((tmp_path / "b.json").read_text())
    assert [r["op"] for r in result["rows"]] == ["softmax", "rms_norm"]
    assert all(r["matches_torch"] and r["tilewright_ms"] > 0 and r["torch_ms"] > 0 for r in result["rows"])
    names = {e["args"]["name"] for e in json.loads((tmp_path / "t.json").read_text())["traceEvents"]
             if e["name"] == "thread_name"}
    assert names == {"tilewright softmax 64x128", "torch softmax 64x128", "tilewright rms_norm 64x128",
                     "torch rms_norm 64x128"}


@pytest.mark.parametrize("argv, message", [
    (["bench", "--ops", "matmul,conv"], "unknown op(s) conv"),
    (["bench", "--dtype", "float64"], "float16 or bfloat16"),
    (["bench", "--device", "xpu"], "use cuda"),
    (["bench", "--rep", "0"], "--rep > 0"),
    (["profile", f"{QUICKSTART}:matmul", "64", "64", "64", "--rep", "-1"], "--rep must be > 0"),
    (["profile", f"{QUICKSTART}:matmul", "64", "64", "64", "--target", "interpret", "--plot", "x.png"], "--flops"),
])
def test_bench_and_profile_argument_errors(argv, message, capsys):
    pytest.importorskip("torch")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        if "--plot" in argv:
            message = "tilewright[plot]"
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


@needs_nvrtc
def test_profile_of_a_gpu_kernel_without_a_gpu_says_so(capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    args = [f"{QUICKSTART}:matmul", "64", "64", "64", "32", "32", "32", "--target", "cuda -arch=sm_80"]
    assert main(["profile", *args]) == 2
    err = capsys.readouterr().err
    assert "no GPU is usable" in err and "Traceback" not in err
