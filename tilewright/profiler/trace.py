"""A benchmark run as a trace in the Chrome / Perfetto JSON trace event format, so that the timed
calls can be looked at in ui.perfetto.dev or chrome://tracing.

Format: Google's "Trace Event Format" document (the JSON object form: ``{"traceEvents": [...]}``).
Every timed call is one complete event (``"ph": "X"``) with its start ``ts`` and duration ``dur`` in
microseconds; each benchmarked kernel gets its own track (``tid``), named by a metadata event
(``"ph": "M"``, ``thread_name``).  Start times are those of the measurement: GPU events relative to
the first call (CUDA/HIP) or the CPU clock (the CPU backends).  A CUDA-graph sample is one event
spanning the replay of several calls (``args.calls``).
"""

from __future__ import annotations

import json
import os

_PID = 1


def trace_events(timing, name: str, track: int = 0, offset_us: float = 0.0, args: dict | None = None) -> list:
    """The events of one measurement (a ``timing.Timing``); ``offset_us`` shifts them in time."""
    starts = timing.starts if timing.starts is not None else _back_to_back(timing.samples)
    events = [{"name": "thread_name", "ph": "M", "pid": _PID, "tid": track, "args": {"name": name}}]
    per = timing.calls_per_sample
    for i, (start, ms) in enumerate(zip(starts, timing.samples)):
        event_args = {"call": i, "ms": ms, "method": timing.method, "l2_flushed": timing.l2_flushed}
        if per > 1:
            event_args["calls"] = per
        event_args.update(args or {})
        events.append({"name": name, "cat": "kernel", "ph": "X", "pid": _PID, "tid": track,
                       "ts": offset_us + start * 1e3, "dur": ms * per * 1e3, "args": event_args})
    return events


def _back_to_back(samples) -> list:
    out, t = [], 0.0
    for ms in samples:
        out.append(t)
        t += ms
    return out


def write_trace(path: str, runs: list, process: str = "tilewright benchmark") -> str:
    """Write ``runs`` -- ``(name, Timing)`` or ``(name, Timing, args)`` -- one track each, one after
    the other in time; returns the path."""
    events = [{"name": "process_name", "ph": "M", "pid": _PID, "args": {"name": process}}]
    offset = 0.0
    for track, run in enumerate(runs):
        name, timing = run[0], run[1]
        events += trace_events(timing, name, track, offset, run[2] if len(run) > 2 else None)
        last = [e for e in events if e["ph"] == "X"]
        offset = (max(e["ts"] + e["dur"] for e in last) if last else offset) + 10.0
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    with open(path, "w") as f:
        json.dump({"traceEvents": events, "displayTimeUnit": "ms"}, f)
    return path
