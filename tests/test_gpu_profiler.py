"""The per-kernel report, the trace export and ``tilewright bench`` on a GPU (CUDA, or ROCm through a
ROCm build of PyTorch: the same code path).  Skipped without a GPU.  No figure is asserted beyond
its arithmetic: timing belongs in bench/."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a GPU visible to PyTorch", allow_module_level=True)

import tilewright  # noqa: E402
from tilewright.cli.main import main  # noqa: E402
from tilewright.kernels import matmul  # noqa: E402


def test_gpu_report_resources_occupancy_roof_and_trace(tmp_path):
    k = tilewright.compile(matmul(512, 512, 512, 128, 128, 32), out_idx=[-1])
    p = k.get_profiler()
    ins = p.random_inputs(seed=1)
    r = p.report(flops=2 * 512**3, input_tensors=ins, warmup=1, rep=5)
    d = r.to_dict()
    assert d["resources"]["registers"] > 0 and d["occupancy"]["blocks_per_sm"] > 0
    assert d["timing"]["method"] == "event" and d["timing"]["l2_flushed"]
    assert d["bytes"] == 3 * 512 * 512 * 2
    name = torch.cuda.get_device_name()
    if any(n in name for n in ("H100", "H200", "A100", "MI300X", "MI250X")):
        assert d["roof"] is not None and d["roof"]["bound"] in ("compute", "memory")
    trace = json.load(open(r.save_trace(str(tmp_path / "t.json"))))["traceEvents"]
    calls = [e for e in trace if e["ph"] == "X"]
    assert len(calls) == d["timing"]["samples"] and all(e["dur"] > 0 for e in calls)
    assert all(b["ts"] >= a["ts"] for a, b in zip(calls, calls[1:]))
    c = k(*ins)  # the profiled kernel still computes the right thing
    ref = ins[0].double() @ ins[1].double()
    assert (c.double() - ref).abs().max().item() <= 2e-2 * max(1.0, ref.abs().max().item())


def test_gpu_bench_softmax_against_torch(tmp_path, capsys):
    assert main(["bench", "--ops", "softmax,rms_norm", "--rep", "5", "--warmup", "1",
                 "--json", str(tmp_path / "b.json")]) == 0
    rows = json.loads((tmp_path / "b.json").read_text())["rows"]
    assert [r["op"] for r in rows] == ["softmax", "rms_norm"] and all(r["matches_torch"] for r in rows)
