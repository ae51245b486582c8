"""``tilewright bench``: the library operators (``tilewright.ops``) against PyTorch on this machine.

On a GPU the shapes are realistic (a 4096^3 GEMM, a 2k-token attention, 16k x 4096 row operators)
and both sides are timed with GPU events, the L2 cache flushed before each call; without one the
operators run on CPU tensors (the tile interpreter) at tiny shapes, timed with the CPU clock, which
shows the tool works rather than anything about speed.  Each case is first checked against torch's
own result (the "max |diff|" column); a case whose outputs disagree beyond the dtype's tolerance is
marked "MISMATCH".  Output: a table, ``--json``, ``--plot`` (a bar chart PNG), ``--roofline`` (every
case as a point under the device roof, PNG), ``--trace`` (every timed call, Chrome/Perfetto JSON).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass

from ..profiler import costs

OPS = ("matmul", "attention", "softmax", "rms_norm", "layer_norm")


@dataclass
class Case:
    op: str
    shape: str  # for the table
    ours: object  # () -> output
    theirs: object  # () -> output
    flops: float
    bytes: float


def _cases(torch, device: str, dtype, ops) -> list[Case]:
    import torch.nn.functional as F

    from .. import ops as tw

    gpu = device != "cpu"
    g = torch.Generator(device=device).manual_seed(0)
    size = torch.empty((), dtype=dtype).element_size()

    def rand(*shape):
        return torch.randn(shape, generator=g, device=device, dtype=torch.float32).to(dtype)

    out = []
    if "matmul" in ops:
        for M, N, K in ([(4096, 4096, 4096), (16, 8192, 8192)] if gpu else [(64, 64, 64)]):
            a, b = rand(M, K), rand(K, N) / K**0.5
            out.append(Case("matmul", f"{M}x{N}x{K}", lambda a=a, b=b: tw.matmul(a, b),
                            lambda a=a, b=b: a @ b, *costs.matmul(M, N, K, size)))
    if "attention" in ops:
        for B, H, S, D, causal in ([(4, 32, 2048, 128, False), (4, 32, 2048, 128, True)] if gpu
                                   else [(1, 2, 64, 64, False), (1, 2, 64, 64, True)]):
            q, k, v = rand(B, H, S, D), rand(B, H, S, D), rand(B, H, S, D)
            out.append(Case("attention", f"B{B} H{H} S{S} D{D}{' causal' if causal else ''}",
                            lambda q=q, k=k, v=v, c=causal: tw.attention(q, k, v, causal=c),
                            lambda q=q, k=k, v=v, c=causal: F.scaled_dot_product_attention(q, k, v, is_causal=c),
                            *costs.attention(B, H, S, S, D, size, causal)))
    rows, cols = (16384, 4096) if gpu else (64, 128)
    x, w, bias = rand(rows, cols), rand(cols), rand(cols)
    if "softmax" in ops:
        out.append(Case("softmax", f"{rows}x{cols}", lambda: tw.softmax(x), lambda: torch.softmax(x, -1),
                        *costs.softmax(rows, cols, size)))
    if "rms_norm" in ops:
        out.append(Case("rms_norm", f"{rows}x{cols}", lambda: tw.rms_norm(x, w, 1e-6),
                        lambda: F.rms_norm(x, (cols,), w, 1e-6), *costs.rms_norm(rows, cols, size)))
    if "layer_norm" in ops:
        out.append(Case("layer_norm", f"{rows}x{cols}", lambda: tw.layer_norm(x, w, bias, 1e-5),
                        lambda: F.layer_norm(x, (cols,), w, bias, 1e-5), *costs.layer_norm(rows, cols, size)))
    return out


def run_bench(ops=OPS, dtype: str = "float16", device: str | None = None, warmup: float = 25, rep: float = 100,
              progress=None) -> dict:
    """Check and time every case; returns ``{"device", "dtype", "rows": [...], "timings": [...]}``."""
    import torch

    from ..profiler.peaks import roof_for
    from ..profiler.timing import measure

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    tdtype = getattr(torch, dtype)
    gpu = device != "cpu"
    name = torch.cuda.get_device_name(torch.device(device)) if gpu else "CPU (tile interpreter)"
    roof = roof_for(name) if gpu else None
    tol = {"float16": 2e-2, "bfloat16": 6e-2, "float32": 1e-3}[dtype]
    rows, timings = [], []
    for case in _cases(torch, device, tdtype, ops):
        if progress:
            progress(f"{case.op} {case.shape}")
        a, b = case.ours(), case.theirs()
        diff = (a.float() - b.float()).abs().max().item()
        scale = max(b.float().abs().max().item(), 1.0)
        ok = diff <= tol * scale
        row = {"op": case.op, "shape": case.shape, "flops": case.flops, "bytes": case.bytes, "max_abs_diff": diff,
               "matches_torch": ok}
        for who, fn in (("tilewright", case.ours), ("torch", case.theirs)):
            t = measure(fn, warmup, rep, device=gpu, l2_flush=gpu)
            ms = t.stat("median")
            timings.append((f"{who} {case.op} {case.shape}", t))
            row[f"{who}_ms"] = ms
            row[f"{who}_tflops"] = case.flops / (ms * 1e-3) / 1e12
            row[f"{who}_gbs"] = case.bytes / (ms * 1e-3) / 1e9
        row["speedup"] = row["torch_ms"] / row["tilewright_ms"]
        if roof is not None:
            bound = case.flops / case.bytes >= roof.ridge(dtype)
            row["roof_fraction"] = (row["tilewright_tflops"] / roof.peak_tflops(dtype) if bound
                                    else row["tilewright_gbs"] / roof.bandwidth_gbs)
        rows.append(row)
    return {"device": name, "dtype": dtype, "timing": "GPU events, L2 flushed" if gpu else "CPU clock",
            "roof": roof.name if roof else None, "rows": rows, "timings": timings}


def table(result: dict) -> str:
    has_roof = result["roof"] is not None
    head = "| op | shape | tilewright ms | torch ms | speedup | tilewright TFLOP/s | tilewright GB/s |"
    head += " % of roof |" if has_roof else ""
    head += " max abs diff |"
    lines = [f"tilewright bench on {result['device']} ({result['dtype']}; {result['timing']}; median of the calls)",
             "", head, "|" + "---|" * (head.count("|") - 1)]
    for r in result["rows"]:
        cells = [r["op"], r["shape"], f"{r['tilewright_ms']:.4f}", f"{r['torch_ms']:.4f}", f"{r['speedup']:.2f}x",
                 f"{r['tilewright_tflops']:.3g}", f"{r['tilewright_gbs']:.3g}"]
        if has_roof:
            cells.append(f"{r['roof_fraction']:.0%}")
        cells.append(f"{r['max_abs_diff']:.2e}" + ("" if r["matches_torch"] else " MISMATCH"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def bench_command(ops: str, dtype: str, device: str | None, json_out, plot, trace, warmup: float, rep: float,
                  roofline=None, out=None) -> int:
    from .commands import UsageError

    out = out or sys.stdout
    chosen = [o.strip() for o in ops.split(",") if o.strip()] if ops else list(OPS)
    unknown = [o for o in chosen if o not in OPS]
    if unknown:
        raise UsageError(f"unknown op(s) {', '.join(unknown)}; choose from {', '.join(OPS)}")
    if warmup < 0 or rep <= 0:
        raise UsageError(f"--warmup must be >= 0 and --rep > 0 (milliseconds); got {warmup} and {rep}")
    if device is not None and device != "cpu" and not device.startswith("cuda"):
        raise UsageError(f"--device {device}: use cuda (a CUDA or ROCm GPU through PyTorch) or cpu")
    if dtype not in ("float16", "bfloat16"):
        raise UsageError(f"--dtype {dtype} is not benchmarked; use float16 or bfloat16")
    try:
        import torch
    except ImportError:
        raise UsageError("bench compares with PyTorch, which is not installed: pip install torch") from None
    if device is not None and device.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError(f"--device {device}: this PyTorch sees no GPU (torch.cuda.is_available() is False)")
    if plot or roofline:  # fail before the run, not after it
        from ..profiler.plots import PlotUnavailable, _pyplot

        try:
            _pyplot()
        except PlotUnavailable as e:
            raise UsageError(str(e)) from None
    result = run_bench(chosen, dtype, device, warmup, rep,
                       progress=lambda s: print(f"  {s} ...", file=sys.stderr, flush=True))
    timings = result.pop("timings")
    if json_out == "-":
        print(json.dumps(result, indent=1), file=out)
    else:
        print(table(result), file=out)
        if json_out:
            with open(json_out, "w") as f:
                json.dump(result, f, indent=1)
            print(f"wrote {json_out}", file=out)
    if plot:
        from ..profiler.plots import bars_png

        labels = [f"{r['op']} {r['shape']}" for r in result["rows"]]
        bars_png(plot, labels, {"tilewright": [r["tilewright_ms"] for r in result["rows"]],
                                "torch": [r["torch_ms"] for r in result["rows"]]},
                 "ms per call (median, lower is better)", f"tilewright.ops vs torch on {result['device']}", log=True)
        print(f"wrote {plot}", file=out if json_out != "-" else sys.stderr)
    if roofline:
        from ..profiler.peaks import roof_for
        from ..profiler.plots import roofline_png

        points = [(f"{who} {r['op']} {r['shape']}", r["flops"] / r["bytes"], r[f"{who}_tflops"])
                  for r in result["rows"] for who in ("tilewright", "torch")]
        roofline_png(roofline, points, roof_for(result["device"]) if result["roof"] else None, dtype,
                     title=f"tilewright.ops and torch on {result['device']}")
        print(f"wrote {roofline}", file=out if json_out != "-" else sys.stderr)
    if trace:
        from ..profiler.trace import write_trace

        write_trace(trace, timings, process=f"tilewright bench on {result['device']}")
        print(f"wrote {trace}", file=out if json_out != "-" else sys.stderr)
    return 0 if all(r["matches_torch"] for r in result["rows"]) else 1
