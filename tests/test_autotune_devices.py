"""Spreading the timing of autotuning candidates over several GPUs of one kind (issue 13 item 3).
This machine has no GPU: the thread-per-device loop is driven with stand-in devices (a scope that
records which thread is on which device), the device choice with a stand-in ``torch.cuda``, and a
real tuning run on the interpreter with its timing spread over two stand-in devices.  On a machine
with several GPUs the same code runs inside ``torch.cuda.device(i)``."""

from __future__ import annotations

import contextlib
import sys
import threading
import types

import numpy as np
import pytest

import tilewright as tilelang
import tilewright.language as T
from tilewright.autotune import devices


def _recording_scope(log):
    @contextlib.contextmanager
    def scope(device):
        log.append((threading.current_thread().name, device))
        yield

    return scope


def test_every_candidate_is_timed_once_and_every_device_takes_part():
    seen, lock = [], threading.Lock()
    both_started = threading.Barrier(2, timeout=10)
    first = {}

    def time_one(i, device):
        if device not in first:  # each device waits for the other once: both must take work
            first[device] = i
            both_started.wait()
        with lock:
            seen.append((i, device))

    done = []
    scopes = []
    devices.spread(list(range(9)), [0, 1], time_one, on_done=lambda: done.append(1), scope=_recording_scope(scopes))
    assert sorted(i for i, _ in seen) == list(range(9))
    assert {d for _, d in seen} == {0, 1}
    assert len(done) == 9
    assert sorted(d for _, d in scopes) == [0, 1] and len({name for name, _ in scopes}) == 2


def test_one_device_times_in_the_calling_thread():
    names = []
    devices.spread([3, 4], [None], lambda i, d: names.append(threading.current_thread().name),
                   scope=_recording_scope([]))
    assert names == [threading.current_thread().name] * 2


def test_an_escaping_error_reaches_the_caller_after_the_threads_stop():
    def time_one(i, device):
        if i == 2:
            raise RuntimeError("candidate 2 broke the loop")

    with pytest.raises(RuntimeError, match="candidate 2"):
        devices.spread(list(range(5)), [0, 1], time_one, scope=_recording_scope([]))


def _fake_torch(names, current):
    cuda = types.SimpleNamespace(device_count=lambda: len(names), current_device=lambda: current,
                                 get_device_name=lambda d=None: names[current if d is None else d])
    return types.SimpleNamespace(cuda=cuda)


def test_timing_devices_are_the_gpus_of_the_current_kind(monkeypatch):
    monkeypatch.delenv("TILEWRIGHT_AUTOTUNE_GPUS", raising=False)
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(["NVIDIA H200", "NVIDIA A100", "NVIDIA H200"], 2))
    assert devices.timing_devices(on_device=True) == [2, 0]  # the current one first, never the other kind
    assert devices.timing_devices(on_device=False) == [None]
    monkeypatch.setenv("TILEWRIGHT_AUTOTUNE_GPUS", "1")
    assert devices.timing_devices(on_device=True) == [2]
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(["NVIDIA H200"], 0))
    monkeypatch.delenv("TILEWRIGHT_AUTOTUNE_GPUS")
    assert devices.timing_devices(on_device=True) == [None]


def test_a_tuning_run_spread_over_two_devices_merges_into_one_result(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TILEWRIGHT_DISABLE_CACHE", raising=False)
    from tilewright.autotune import tuner

    monkeypatch.setattr(tuner, "timing_devices", lambda on_device: [0, 1])
    scopes = []
    monkeypatch.setattr(devices, "device_scope", _recording_scope(scopes))

    @tilelang.autotune(configs=[{"block": b} for b in (16, 32, 64, 128)] + [{"block": 64, "factor": 3.0}],
                       ref_prog=lambda a: 2.0 * a, warmup=1, rep=2)
    @tilelang.jit(out_idx=[-1], target="interpret")
    def scale(n, block=64, factor=1.0):
        @T.prim_func
        def k(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
            with T.Kernel(T.ceildiv(n, block), threads=32) as bx:
                for i in T.Parallel(block):
                    if bx * block + i < n:
                        B[bx * block + i] = A[bx * block + i] * 2.0 * factor

        return k

    result = scale.tune(300)
    statuses = [r["status"] for r in result.rows]
    assert statuses.count("timed") == 4 and statuses.count("wrong") == 1
    assert {d for _, d in scopes} == {0, 1}
    timed = [r for r in result.rows if r["status"] == "timed"]
    assert result.latency == min(r["latency_ms"] for r in timed)
    a = np.random.default_rng(5).standard_normal(300).astype(np.float32)
    np.testing.assert_allclose(scale(300)(a), 2.0 * a.astype(np.float64), rtol=1e-6)
    assert scale.tune(300).from_cache  # the merged outcome went into the one tuning cache
