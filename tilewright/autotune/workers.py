"""Compiling tuning candidates in parallel worker processes.

Each worker calls the builder with one configuration, compiles the prim_func and sends back the
compiler's ``LaunchSpec`` (plain, picklable data: code object, launch shape, resources), or the
error that refused the configuration.  The parent never recompiles a candidate: it wraps the spec
in a kernel (``compiler.kernel_from_spec``) and times it.

Workers are forked, so the builder need not be importable or picklable (it is usually a local
function of the user's script); they never touch a GPU, only the compiler and its toolchain.  A
worker that does not answer within ``timeout`` seconds, or a pool that cannot be started, costs
that candidate (or the parallelism) and is reported, never a hang or a crash of the tuning run.
"""

from __future__ import annotations

import multiprocessing
import time
import traceback
from dataclasses import dataclass

_JOB: dict = {}  # set in the parent before forking; read by the workers


@dataclass
class Compiled:
    index: int
    spec: object = None  # LaunchSpec on success (GPU targets)
    kernel: object = None  # the JITKernel, when compiled in this process
    error: str = ""
    seconds: float = 0.0


def compile_all(build, configs: list, compile_kw: dict, workers: int, timeout: float) -> list[Compiled]:
    """``build(config) -> PrimFunc`` compiled for every configuration; results in config order."""
    if workers > 1 and len(configs) > 1 and "fork" in multiprocessing.get_all_start_methods():
        try:
            return _in_pool(build, configs, compile_kw, workers, timeout)
        except (OSError, RuntimeError):
            pass  # no pool on this machine: compile here, one after the other
    return [_compile_one(build, i, c, compile_kw) for i, c in enumerate(configs)]


def _in_pool(build, configs, compile_kw, workers, timeout) -> list[Compiled]:
    _JOB.update(build=build, configs=configs, compile_kw=compile_kw)
    results: list = [None] * len(configs)
    pool = multiprocessing.get_context("fork").Pool(min(workers, len(configs)))
    try:
        pending = [pool.apply_async(_worker, (i,)) for i in range(len(configs))]
        deadline = time.monotonic() + timeout * max(1, -(-len(configs) // workers))
        for i, job in enumerate(pending):
            try:
                results[i] = job.get(timeout=max(0.1, deadline - time.monotonic()))
            except multiprocessing.TimeoutError:
                results[i] = Compiled(i, error=f"compilation did not finish within {timeout:.0f} s")
    finally:
        pool.terminate()  # also ends a worker stuck in a toolchain past the deadline
        pool.join()
        _JOB.clear()
    return results


def _worker(index: int) -> Compiled:
    done = _compile_one(_JOB["build"], index, _JOB["configs"][index], _JOB["compile_kw"])
    done.kernel = None  # only the spec crosses the process boundary
    return done


def _compile_one(build, index: int, cfg: dict, compile_kw: dict) -> Compiled:
    from ..compiler import compile as tw_compile
    from ..errors import TilewrightError

    t0 = time.perf_counter()
    try:
        kernel = tw_compile(build(cfg), **compile_kw)
        return Compiled(index, spec=kernel.spec, kernel=kernel, seconds=time.perf_counter() - t0)
    except TilewrightError as e:
        first = str(e).strip().splitlines()
        return Compiled(index, error=f"{type(e).__name__}: {first[0] if first else ''}",
                        seconds=time.perf_counter() - t0)
    except Exception as e:  # noqa: BLE001 - a builder bug for one configuration must not end the run
        tb = traceback.format_exception_only(type(e), e)[-1].strip()
        return Compiled(index, error=f"the builder failed for this configuration: {tb}",
                        seconds=time.perf_counter() - t0)
