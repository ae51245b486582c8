"""Timing a callable: GPU events for CUDA and ROCm (through PyTorch, whose ``torch.cuda`` events are
HIP events on a ROCm build), or the CPU clock for the CPU backends.

The method is the one that gives stable figures for kernels of a few microseconds to seconds:
a few calls estimate the time of one; warm-up and measurement are then given as *time budgets*
(milliseconds) and turned into call counts; every measured call is timed on its own between two
events, with the L2 cache flushed before it (a 256 MiB write, outside the timed interval) so that a
kernel is not flattered by data the previous call left in L2; the figure is a statistic of those
samples (mean, median, min, max, or quantiles).  Optionally the calls are captured in a CUDA graph
and the graph is replayed, which removes the host's launch cost from the figure.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

_FLUSH_BYTES = 256 * 1024 * 1024  # several times the largest L2 (H100/H200: 50 MiB; MI300X: 256 MiB of L3)
_RETURN_MODES = ("mean", "median", "min", "max", "all")


@dataclass
class Timing:
    """Per-call samples in milliseconds and how they were taken."""

    samples: list
    method: str  # "event", "cudagraph" or "cpu"
    l2_flushed: bool
    starts: list | None = None  # start of each sample, ms after the first one (for a trace)
    calls_per_sample: int = 1  # a CUDA-graph sample is the mean of this many back-to-back calls

    def stat(self, mode: str = "mean"):
        if mode == "all":
            return list(self.samples)
        return {"mean": statistics.fmean, "median": statistics.median, "min": min, "max": max}[mode](self.samples)

    def quantiles(self, qs) -> list:
        s = sorted(self.samples)
        return [s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))] for q in qs]


def measure(fn, warmup_ms: float = 25, rep_ms: float = 100, *, device: bool, l2_flush: bool = True,
            cuda_graph: bool = False, max_calls: int = 10_000) -> Timing:
    """Time ``fn()`` (no arguments).  ``device``: the work runs on a GPU (events), else the CPU clock."""
    if warmup_ms < 0 or rep_ms <= 0:
        raise ValueError(f"warmup_ms must be >= 0 and rep_ms > 0 (got {warmup_ms}, {rep_ms})")
    if not device:
        return _measure_cpu(fn, warmup_ms, rep_ms, max_calls)
    import torch

    if cuda_graph:
        return _measure_graph(torch, fn, warmup_ms, rep_ms, max_calls)
    return _measure_events(torch, fn, warmup_ms, rep_ms, l2_flush, max_calls)


def _counts(estimate_ms: float, warmup_ms: float, rep_ms: float, max_calls: int) -> tuple[int, int]:
    est = max(estimate_ms, 1e-4)
    return min(max_calls, max(1, int(warmup_ms / est))), min(max_calls, max(3, int(rep_ms / est)))


def _measure_cpu(fn, warmup_ms, rep_ms, max_calls) -> Timing:
    t0 = time.perf_counter()
    fn()
    est = (time.perf_counter() - t0) * 1e3
    n_warm, n_rep = _counts(est, warmup_ms, rep_ms, max_calls)
    for _ in range(n_warm - 1):
        fn()
    samples, starts = [], []
    origin = time.perf_counter()
    for _ in range(n_rep):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
        starts.append((t0 - origin) * 1e3)
    return Timing(samples, "cpu", False, starts)


def _measure_events(torch, fn, warmup_ms, rep_ms, l2_flush, max_calls) -> Timing:
    flush = torch.empty(_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda") if l2_flush else None
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        if flush is not None:
            flush.zero_()
        fn()
    end.record()
    torch.cuda.synchronize()
    est = start.elapsed_time(end) / 5
    n_warm, n_rep = _counts(est, warmup_ms, rep_ms, max_calls)
    for _ in range(n_warm):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n_rep)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n_rep)]
    for s, e in zip(starts, ends):
        if flush is not None:
            flush.zero_()  # outside the timed interval
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return Timing([s.elapsed_time(e) for s, e in zip(starts, ends)], "event", flush is not None,
                  [starts[0].elapsed_time(s) for s in starts])


def _measure_graph(torch, fn, warmup_ms, rep_ms, max_calls) -> Timing:
    """Replay a CUDA graph of back-to-back calls: the figure excludes host launch cost (and L2 is
    warm between calls, as it is inside a real graph)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()  # the first call may compile or allocate: never inside a capture
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    n_warm, n_rep = _counts(start.elapsed_time(end), warmup_ms, rep_ms, max_calls)
    per_graph = max(1, min(n_rep, 100))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(per_graph):
            fn()
    for _ in range(max(1, n_warm // per_graph)):
        graph.replay()
    samples, starts, first = [], [], None
    for _ in range(max(3, n_rep // per_graph)):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        graph.replay()
        e.record()
        torch.cuda.synchronize()
        first = first or s
        samples.append(s.elapsed_time(e) / per_graph)
        starts.append(first.elapsed_time(s))
    return Timing(samples, "cudagraph", False, starts, per_graph)


def check_return_mode(mode: str) -> None:
    if mode not in _RETURN_MODES:
        raise ValueError(f"return_mode must be one of {', '.join(_RETURN_MODES)}; got {mode!r}")
