"""Shared helpers for the benchmark scripts: timing with triton's do_bench when present (CUDA
events otherwise), the result table, and saving it under bench/results/ with date, GPU and commit."""

from __future__ import annotations

import datetime
import os
import subprocess
import time

import torch


def output_rounding(dtype) -> float:
    """What rounding an exact result to ``dtype`` may cost, relative to the value (half an ulp:
    2^-11 for fp16, 2^-8 for bf16 — for bf16 alone more than a 2e-3 bound, for cuBLAS as for us)."""
    return {torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}.get(dtype, 0.0)


def bench_ms(fn, warmup=25, rep=100) -> float:
    if not torch.cuda.is_available():  # --quick runs on the CPU (the tile interpreter): the median of a few calls
        return _cpu_ms(fn)
    try:
        from triton.testing import do_bench

        return float(do_bench(fn, warmup=warmup, rep=rep))
    except ImportError:
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
        ts = []
        for _ in range(50):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            torch.cuda.synchronize()
            ts.append(s.elapsed_time(e))
        ts.sort()
        return ts[len(ts) // 2]


def _cpu_ms(fn, reps: int = 3) -> float:
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    return sorted(ts)[len(ts) // 2]


def commit() -> str:
    """The commit measured: git when the tree has it, else TW_COMMIT (the device copy has no .git)."""
    if os.environ.get("TW_COMMIT"):
        return os.environ["TW_COMMIT"]
    try:
        return subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], text=True,
                                       stderr=subprocess.DEVNULL).strip()
    except Exception:  # noqa: BLE001
        return os.environ.get("TW_COMMIT", "unknown")


def save(name: str, lines: list[str]) -> str:
    gpu = torch.cuda.get_device_name(0).replace(" ", "-") if torch.cuda.is_available() else "cpu"
    now = datetime.datetime.now(datetime.timezone.utc)
    day, hhmm = now.date().isoformat(), now.strftime("%H%M")
    header = [f"# {name}: {day} {hhmm} UTC, {gpu}, commit {commit()}", ""]
    text = "\n".join(header + lines) + "\n"
    folder = os.path.join(os.path.dirname(__file__), "results")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{day}-{hhmm}-{name}-{gpu}.md")  # several runs a day keep their tables
    for n in range(2, 100):  # a second run of the same bench within the minute keeps the first one's table
        if not os.path.exists(path):
            break
        path = os.path.join(folder, f"{day}-{hhmm}-{name}-{n}-{gpu}.md")
    with open(path, "w") as f:
        f.write(text)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, os.path.basename(path)), "w") as f:
            f.write(text)
    return path


def vector_add():
    """The 1024-element float32 ``C = A + B`` kernel whose calls bench/launch_overhead.py and
    bench/decode_timeline.py time beside torch.add (host-bound: one block, a few instructions)."""
    import tilewright.language as T

    @T.prim_func
    def add(A: T.Tensor((1024,), "float32"), B: T.Tensor((1024,), "float32"), C: T.Tensor((1024,), "float32")):
        with T.Kernel(1, threads=128):
            for i in T.Parallel(1024):
                C[i] = A[i] + B[i]

    return add


def graph_us(fn, n=20, replays=20) -> float:
    """GPU time per call alone: ``n`` calls captured in one CUDA graph (after a warm-up on a side
    stream, as capture wants), replayed ``replays`` times back to back: no host work in the figure."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(n):
            fn()
    g.replay()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(replays):
        g.replay()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / (n * replays) * 1e6
