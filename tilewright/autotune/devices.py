"""Which GPUs time the candidates of a tuning run, and the loop that spreads the timing over them.

Timing is the slow half of tuning once compilation runs in parallel worker processes, and one GPU
times one candidate at a time.  With several GPUs *of one kind* (one device name: timings on
different kinds of GPU cannot be compared), each GPU gets a thread that takes the next untimed
candidate from a shared queue (so a slow candidate on one GPU does not hold the others back) and
times it inside ``torch.cuda.device(index)``: kernels load per device (the launcher keeps a loaded
function per device index), inputs are made on that device, and the GPU events and the L2 flush of
the profiler use the current device.  Threads, not processes: the kernels are already compiled in
this process, and a launch is asynchronous work for the GPU, so the interpreter lock is not what
limits a timing loop.  The merged outcome goes into the one tuning cache by the caller.

``TILEWRIGHT_AUTOTUNE_GPUS`` caps the number of GPUs used (0: every visible GPU of the current
one's kind; 1: the current GPU only).
"""

from __future__ import annotations

import contextlib
import queue
import sys
import threading

from .. import config as knobs


def timing_devices(on_device: bool) -> list:
    """Device indices to time on; ``[None]`` (the current device, or the CPU clock) when there is
    only one to use."""
    if not on_device:
        return [None]
    torch = sys.modules.get("torch")
    if torch is None:
        return [None]
    try:
        count = torch.cuda.device_count()
        if count < 2:
            return [None]
        current = torch.cuda.current_device()
        kind = torch.cuda.get_device_name(current)
        same = [current] + [d for d in range(count) if d != current and torch.cuda.get_device_name(d) == kind]
    except Exception:  # noqa: BLE001 - a runtime that cannot answer: time on the current device
        return [None]
    cap = knobs.get("autotune_gpus")
    return same[:cap] if cap and cap > 0 else same


def device_scope(device):
    """The context in which ``device`` is torch's current device (nothing for ``None``)."""
    if device is None:
        return contextlib.nullcontext()
    import torch

    return torch.cuda.device(device)


def spread(todo: list, devices: list, time_one, on_done=None, scope=None) -> None:
    """Call ``time_one(candidate, device)`` for every candidate of ``todo``, one thread per device
    pulling from a shared queue (in this thread when there is one device).  ``on_done()`` after each
    candidate (a progress bar).  ``time_one`` must score its own failures: an exception escaping it
    is re-raised here after every thread has stopped.  ``scope(device)``: the context a thread
    times in (``device_scope`` unless given)."""
    scope = scope or device_scope
    if len(devices) == 1:
        with scope(devices[0]):
            for i in todo:
                time_one(i, devices[0])
                if on_done:
                    on_done()
        return
    work: queue.Queue = queue.Queue()
    for i in todo:
        work.put(i)
    errors: list = []
    lock = threading.Lock()

    def run(device):
        try:
            with scope(device):
                while True:
                    try:
                        i = work.get_nowait()
                    except queue.Empty:
                        return
                    time_one(i, device)
                    if on_done:
                        with lock:
                            on_done()
        except BaseException as e:  # noqa: BLE001 - handed to the caller below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(d,), name=f"tilewright-tune-gpu{d}", daemon=True) for d in devices]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise errors[0]
