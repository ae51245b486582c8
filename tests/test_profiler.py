"""The profiler on the CPU backends (the CPU clock): statistics, quantiles, call counts and the
argument checks.  No figure is asserted beyond being a positive time."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import tilewright
from tilewright.kernels import matmul
from tilewright.profiler.timing import Timing


def test_do_bench_on_the_interpreter():
    k = tilewright.compile(matmul(64, 64, 64, 32, 32, 32), target="interpret", out_idx=[-1])
    p = k.get_profiler()
    assert p.do_bench(warmup=1, rep=5) > 0
    q = p.do_bench(rep=5, quantiles=[0.2, 0.5, 0.8])
    assert len(q) == 3 and q[0] <= q[1] <= q[2]
    assert len(p.do_bench(rep=5, n_repeat=4, return_mode="all")) >= 3
    with pytest.raises(ValueError, match="return_mode"):
        p.do_bench(return_mode="average")
    with pytest.raises(ValueError, match="backend"):
        p.do_bench(backend="nsight")
    assert p.do_bench(rep=2, backend="cupti") > 0  # TileLang's kernel-time backend (a CUDA graph replay here)
    c = p.run_once()
    assert c.shape == (64, 64) and np.isfinite(c).all()


def test_timing_statistics():
    t = Timing([3.0, 1.0, 2.0, 4.0], "cpu", False)
    assert t.stat("min") == 1.0 and t.stat("max") == 4.0 and t.stat("median") == 2.5 and t.stat("mean") == 2.5
    assert t.quantiles([0.0, 1.0]) == [1.0, 4.0]


def test_module_level_do_bench_takes_tilelang_arguments():
    from tilewright.profiler import do_bench

    calls = []
    ms = do_bench(lambda: calls.append(1), warmup=1, rep=2, backend="cupti", return_mode="median")
    assert ms > 0 and calls
    assert len(do_bench(lambda: None, _n_warmup=1, _n_repeat=3, quantiles=[0.5, 0.9])) == 2
    with pytest.raises(ValueError, match="backend"):
        do_bench(lambda: None, backend="nsight")


# ------------------------------------------------------------------ occupancy, roofs, the report, traces
from tilewright.profiler.occupancy import occupancy  # noqa: E402
from tilewright.profiler.peaks import ROOFS, roof_for  # noqa: E402
from tilewright.target.base import Target  # noqa: E402


@pytest.mark.parametrize("arch, threads, res, blocks, limited_by", [
    # 64 regs x 32 lanes = 2048 per warp, 4 warps -> 8192 per block; 65536 / 8192 = 8
    ("sm_90a", 128, {"registers": 64, "shared_bytes": 16416}, 8, "registers"),
    # (16416 + 1 KiB reserved) rounded to 128 B = 17536; 228 KiB / 17536 = 13; registers allow 16
    ("sm_90a", 128, {"registers": 32, "shared_bytes": 16416}, 13, "shared memory"),
    # no registers reported: 64 warps / 8 per block
    ("sm_90a", 256, {}, 8, "threads"),
    # sm_86 holds 48 warps: 1536 / 256 threads = 6 blocks
    ("sm_86", 256, {"registers": 32}, 6, "threads"),
    # 33 registers round up to 40 per lane (1280 per warp): 65536 / (1280 x 8 warps) = 6
    ("sm_80", 256, {"registers": 33}, 6, "registers"),
    # tiny blocks: the 32-block limit
    ("sm_80", 32, {"registers": 16}, 32, "blocks per SM"),
    # gfx942: 312 unified VGPRs -> 1 wave per SIMD; 2 waves per block, one per SIMD -> 1 block
    ("gfx942", 128, {"registers": 312, "shared_bytes": 49152}, 1, "registers"),
    # gfx942: 128 VGPRs -> 4 waves per SIMD; 256 threads = 4 waves, one per SIMD -> 4 blocks; LDS allows 4
    ("gfx942", 256, {"registers": 128, "shared_bytes": 16384}, 4, "registers"),
    # gfx1100 (wave32, 2 SIMDs, 1536 VGPR slots, granule 24): 100 -> 120 VGPRs, 12 waves per SIMD;
    # 128 threads = 4 waves, 2 per SIMD -> 6 blocks
    ("gfx1100", 128, {"registers": 100}, 6, "registers"),
])
def test_occupancy_from_the_architecture_limits(arch, threads, res, blocks, limited_by):
    occ = occupancy(Target.parse(f"{'cuda' if arch.startswith('sm') else 'hip'} -arch={arch}"), threads, res)
    assert (occ.blocks_per_sm, occ.limited_by) == (blocks, limited_by)
    assert 0 < occ.fraction <= 1


def test_occupancy_refuses_what_cannot_run():
    tgt = Target.parse("cuda -arch=sm_80")
    assert occupancy(tgt, 128, {"shared_bytes": 200 * 1024}).blocks_per_sm == 0
    occ = occupancy(tgt, 1024, {"registers": 128})  # 128 x 1024 = 131072 registers > 65536
    assert occ.blocks_per_sm == 0 and "register" in occ.limited_by
    assert occupancy(Target.parse("interpret"), 128, {}) is None


def test_device_roofs_by_name_and_architecture():
    assert roof_for("NVIDIA H200") is ROOFS["H200"]
    assert roof_for("NVIDIA H100 80GB HBM3") is ROOFS["H100"]
    assert roof_for("NVIDIA H100 PCIe") is ROOFS["H100 PCIe"]
    assert roof_for("AMD Instinct MI300X") is ROOFS["MI300X"]
    assert roof_for(None, "gfx90a") is ROOFS["MI250X"] and roof_for(None, "sm_90a") is ROOFS["H100"]
    assert roof_for("NVIDIA GeForce RTX 4090") is None and roof_for(None, "gfx1201") is None
    h200 = ROOFS["H200"]
    assert h200.peak_tflops("float16") == h200.peak_tflops("bfloat16") < h200.peak_tflops("float8_e4m3")
    assert h200.ridge("float16") == pytest.approx(989.4e12 / 4.8e12)
    assert h200.peak_tflops("float32") < h200.peak_tflops("float16")


def test_report_on_the_interpreter_and_its_trace(tmp_path):
    k = tilewright.compile(matmul(64, 64, 64, 32, 32, 32), target="interpret", out_idx=[-1])
    p = k.get_profiler()
    ins = p.random_inputs(seed=3)
    r = p.report(flops=2 * 64**3, input_tensors=ins, warmup=0, rep=3)
    d = r.to_dict()
    assert d["bytes"] == 3 * 64 * 64 * 2 and d["bytes_source"] == "compulsory"  # A, B, C in float16
    ms = d["timing"]["median_ms"]
    assert d["tflops"] == pytest.approx(2 * 64**3 / (ms * 1e-3) / 1e12)
    assert d["gbs"] == pytest.approx(3 * 64 * 64 * 2 / (ms * 1e-3) / 1e9)
    assert d["roof"] is None and d["occupancy"] is None  # CPU clock: no device roof
    text = str(r)
    assert "CPU clock" in text and "no device roof" in text and "FLOP/B" in text
    import json

    path = r.save_trace(str(tmp_path / "t.json"))
    events = json.load(open(path))["traceEvents"]
    calls = [e for e in events if e["ph"] == "X"]
    assert len(calls) == len(r.timing.samples) >= 3
    assert [e["dur"] for e in calls] == pytest.approx([s * 1e3 for s in r.timing.samples])
    assert all(b["ts"] >= a["ts"] + a["dur"] - 1e-3 for a, b in zip(calls, calls[1:]))  # in order, no overlap
    assert {e["name"] for e in events if e["ph"] == "M"} == {"process_name", "thread_name"}
    path = p.trace(str(tmp_path / "t2.json"), warmup=0, rep=2)
    assert json.load(open(path))["traceEvents"][-1]["name"] == "gemm"


def test_report_against_a_roof_from_gpu_timing():
    """The report's arithmetic and wording for a GPU measurement (a made-up one: no GPU here)."""
    from tilewright.profiler.report import KernelReport
    from tilewright.profiler.timing import Timing

    flops, nbytes = 2 * 4096**3, 3 * 4096 * 4096 * 2
    r = KernelReport("gemm", Target.parse("cuda -arch=sm_90a"), "device", "NVIDIA H200", 128,
                     {"registers": 128, "shared_bytes": 65536}, Timing([0.2, 0.25, 0.2], "event", True),
                     flops=flops, bytes=nbytes, roof=ROOFS["H200"])
    assert r.tflops == pytest.approx(flops / 0.2e-3 / 1e12)
    assert r.bound() == "compute"  # 1365 FLOP/B is beyond the ridge (206)
    text = str(r)
    assert f"{r.tflops / 989.4:.1%} of the 989.4 fp16 peak" in text and "compute-bound on NVIDIA H200" in text
    # registers allow 4 blocks (16384 each); shared memory 3 ((65536 + 1024) x 3 <= 228 KiB)
    assert "occupancy: 3 block(s) per SM/CU, 12 of 64 warps (19%), limited by shared memory" in text
    assert "L2 flushed" in text
    assert r.to_dict()["roof"]["bound"] == "compute"


def test_roofline_png_or_a_clear_message(tmp_path, monkeypatch):
    from tilewright.profiler.plots import PlotUnavailable, roofline_png

    try:
        import matplotlib  # noqa: F401
    except ImportError:
        with pytest.raises(PlotUnavailable, match=r"pip install 'tilewright\[plot\]'"):
            roofline_png(str(tmp_path / "r.png"), [("k", 10.0, 1.0)], ROOFS["H200"])
        return
    path = roofline_png(str(tmp_path / "r.png"), [("k", 10.0, 1.0)], ROOFS["H200"])
    assert open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if it were not installed
    with pytest.raises(PlotUnavailable, match=r"pip install 'tilewright\[plot\]'"):
        roofline_png(str(tmp_path / "r2.png"), [("k", 10.0, 1.0)], ROOFS["H200"])


def test_report_on_the_emulator_counts_the_targets_resources():
    """The emulator runs the lowered code on the CPU: CPU-clock timing, but occupancy on the target."""
    import tilewright.language as T

    @T.prim_func
    def scale(A: T.Tensor((256,), "float32"), B: T.Tensor((256,), "float32")):
        with T.Kernel(2, threads=128) as bx:
            S = T.alloc_shared((128,), "float32")
            T.copy(A[bx * 128], S)
            for i in T.Parallel(128):
                B[bx * 128 + i] = S[i] * 2.0

    k = tilewright.compile(scale, target="hip -arch=gfx942", execution_backend="emulator", out_idx=[-1])
    a = np.random.default_rng(7).standard_normal(256).astype(np.float32)
    r = k.get_profiler().report(input_tensors=[a], warmup=0, rep=1)
    d = r.to_dict()
    assert d["timing"]["method"] == "cpu" and d["roof"] is None and d["bytes"] == 2 * 256 * 4
    assert d["occupancy"]["blocks_per_sm"] > 0 and d["resources"]["shared_bytes"] >= 128 * 4
    assert ("VGPRs" in str(r)) == ("registers" in d["resources"])  # a code object when clang is here
    np.testing.assert_array_equal(k(a), a * 2)  # and the kernel still computes


def test_resource_lines_without_a_code_object():
    from tilewright.profiler.report import resource_lines

    lines = resource_lines(Target.parse("cuda -arch=sm_90a"), 256, {"shared_bytes": 8192})
    assert lines[0].startswith("registers: not known") and "registers not counted" in lines[-1]
    lines = resource_lines(Target.parse("hip -arch=gfx90a"), 256, {"vgpr": 128, "agpr": 0, "sgpr": 30,
                                                                  "shared_bytes": 8192, "vgpr_spills": 3})
    assert "128 VGPRs per lane" in lines[0] and "3 VGPR + 0 SGPR spills" in lines[2]
