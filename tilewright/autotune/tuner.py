"""``AutoTuner``: find the fastest configuration of a kernel builder (TileLang's autotuner API on
our own engine).

A run: (1) look the question up in the tuning cache (``cache.py``) — a hit costs a lookup and one
compile of the winning configuration (itself a disk-cache hit); (2) compile every configuration in
parallel worker processes (``workers.py``); (3) drop, from their resource usage alone, candidates
that cannot run or that spill when others do not (``prune.py``); (4) time the rest with the L2
cache flushed before every call (``profiler.timing``), after checking each one's result against
the reference program when one is given (outputs poisoned first, so an unwritten element fails);
(5) store the outcome.  A configuration that fails anywhere is scored as infinitely slow with the
reason in the report — never a crash of the run.  On the CPU backends (``target="interpret"`` or
``execution_backend="emulator"``) the same run times with the CPU clock.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from .. import config as knobs
from ..errors import TilewrightError
from . import cache as tuning_cache
from .devices import spread, timing_devices
from .inputs import get_autotune_inputs
from .progress import progress_bar
from .prune import judge
from .workers import compile_all

log = logging.getLogger("tilewright.autotune")


@dataclass
class AutotuneResult:
    """The outcome: the best configuration, its kernel and latency, and one row per candidate."""

    latency: float  # ms of the best configuration
    config: dict
    ref_latency: float | None
    libcode: str  # the best kernel's generated source
    func: object  # its prim_func
    kernel: object  # its JITKernel
    rows: list = field(default_factory=list)  # dicts: config, status, latency_ms, compile_s, resources, reason
    from_cache: bool = False
    seconds: float = 0.0  # wall time of the run

    def table(self) -> str:
        """The per-candidate report as a Markdown table, fastest first."""
        lines = ["| config | status | ms | compile s | registers | shared B | occupancy (warps/SM) | note |",
                 "|---|---|---|---|---|---|---|---|"]
        for r in sorted(self.rows, key=lambda r: r.get("latency_ms") or math.inf):
            res = r.get("resources") or {}
            ms = r.get("latency_ms")
            lines.append(f"| {r['config']} | {r['status']} | {'' if ms is None else f'{ms:.4f}'} | "
                         f"{r.get('compile_s', 0):.2f} | {res.get('registers', '')} | {res.get('shared_bytes', '')} |"
                         f" {r.get('warps_per_sm', '')} | {r.get('reason', '')} |")
        return "\n".join(lines)


@dataclass
class CompileArgs:
    out_idx: object = None
    target: object = "auto"
    execution_backend: object = None
    pass_configs: object = None
    optimize_level: int = 2
    verbose: bool = False


@dataclass
class ProfileArgs:
    warmup: float = 25
    rep: float = 100
    timeout: float = 100
    supply_type: object = None
    ref_prog: object = None
    supply_prog: object = None
    rtol: float = 1e-2
    atol: float = 1e-2
    max_mismatched_ratio: float = 0.01
    skip_check: bool = False
    manual_check_prog: object = None
    cache_input_tensors: bool = False
    backend: str = "event"


class AutoTuner:
    """``AutoTuner.from_kernel(builder, configs).set_compile_args(...).set_profile_args(...).run()``.

    ``builder(**config)`` (plus the arguments given by ``set_kernel_parameters``) returns a
    prim_func; ``configs`` is a list of dicts or a function of the builder's arguments returning one.
    """

    def __init__(self, fn, configs):
        self.fn = fn
        self.configs = configs
        self.compile_args = CompileArgs()
        self.profile_args = ProfileArgs()
        self._args: tuple = ()
        self._kwargs: dict = {}

    @classmethod
    def from_kernel(cls, kernel, configs) -> AutoTuner:
        return cls(kernel, configs)

    def set_compile_args(self, out_idx=None, target="auto", execution_backend=None, target_host=None,
                         verbose: bool = False, pass_configs=None, optimize_level: int = 2) -> AutoTuner:
        if execution_backend in ("auto", "cython", "nvrtc", "tvm_ffi", "ctypes", "torch", "dlpack"):
            execution_backend = None  # TileLang's host-launcher names: ours is the one launcher
        self.compile_args = CompileArgs(out_idx, target, execution_backend, pass_configs, optimize_level, verbose)
        return self

    def set_profile_args(self, warmup: float = 25, rep: float = 100, timeout: float = 100, supply_type=None,
                         ref_prog=None, supply_prog=None, rtol: float = 1e-2, atol: float = 1e-2,
                         max_mismatched_ratio: float = 0.01, skip_check: bool = False, manual_check_prog=None,
                         cache_input_tensors: bool = False, backend: str = "event") -> AutoTuner:
        self.profile_args = ProfileArgs(warmup, rep, timeout, supply_type, ref_prog, supply_prog, rtol, atol,
                                        max_mismatched_ratio, skip_check, manual_check_prog, cache_input_tensors,
                                        backend)
        return self

    def set_kernel_parameters(self, args: tuple = (), kwargs: dict | None = None, *_compat) -> AutoTuner:
        """The builder's arguments that are not tuned (sizes, dtypes)."""
        self._args, self._kwargs = tuple(args), dict(kwargs or {})
        return self

    # ------------------------------------------------------------------ the run
    def run(self, warmup: float | None = None, rep: float | None = None, timeout: float | None = None):
        pa = self.profile_args
        if warmup is not None:
            pa.warmup = warmup
        if rep is not None:
            pa.rep = rep
        if timeout is not None:
            pa.timeout = timeout
        t0 = time.perf_counter()
        configs = self._expand_configs()
        target = self._target()
        on_device = not target.is_interpret and self.compile_args.execution_backend is None
        key = tuning_cache.key_of(self._key_parts(configs, target, on_device))
        use_cache = not knobs.get("disable_cache")
        entry = tuning_cache.load(key) if use_cache else None
        if entry is not None and entry["best_config"] is not None:
            result = self._result_from_cache(entry, configs)
            if result is not None:
                result.seconds = time.perf_counter() - t0
                return result
        compiled = compile_all(self._build, configs, self._compile_kw(), self._workers(on_device, len(configs)),
                               pa.timeout)
        rows = [{"config": c, "status": "compiled", "compile_s": round(d.seconds, 3), "latency_ms": None}
                for c, d in zip(configs, compiled)]
        kernels = self._kernels(configs, compiled, rows, target)
        best = self._time_all(kernels, rows, on_device)
        if best is None:
            reasons = "; ".join(f"{r['config']}: {r.get('reason', r['status'])}" for r in rows)
            raise TilewrightError(f"autotuning {self._name()}: no configuration compiled, ran and passed the "
                                  f"check ({reasons})")
        i, latency = best
        kernel = kernels[i]
        result = AutotuneResult(latency, configs[i], None, kernel.get_kernel_source(), kernel.func, kernel, rows,
                                seconds=time.perf_counter() - t0)
        if use_cache:
            tuning_cache.store(key, {"best_config": configs[i], "best_latency_ms": latency, "rows": _json_rows(rows),
                                     "target": str(target), "device": _device_name(on_device)})
        if self.compile_args.verbose:
            print(result.table(), file=sys.stderr)
        log.info("autotuned %s: best %s at %.4f ms (%d candidates, %.1f s)", self._name(), configs[i], latency,
                 len(configs), result.seconds)
        return result

    # ------------------------------------------------------------------ pieces
    def _expand_configs(self) -> list:
        configs = self.configs
        if callable(configs):
            configs = configs(*self._args, **self._kwargs)
        configs = [dict(c) for c in (configs or [])]
        if not configs:
            raise TilewrightError(f"autotuning {self._name()}: no configurations to try (configs is empty)")
        given = given_names(self.fn, self._args, self._kwargs)
        for c in configs:
            clash = set(c) & given
            if clash:
                raise TilewrightError(f"autotuning {self._name()}: {sorted(clash)} are given both as tuned "
                                      "configuration keys and as fixed arguments; pass each one in one place")
        return configs

    def _build(self, cfg: dict):
        from ..ir.tile import PrimFunc

        func = _raw_builder(self.fn)(*self._args, **self._kwargs, **cfg)
        if not isinstance(func, PrimFunc):
            raise TilewrightError(f"the tuned function {self._name()} must return a @T.prim_func, got "
                                  f"{type(func).__name__}")
        return func

    def _compile_kw(self) -> dict:
        ca = self.compile_args
        return dict(out_idx=ca.out_idx, target=ca.target, pass_configs=ca.pass_configs,
                    optimize_level=ca.optimize_level, execution_backend=ca.execution_backend)

    def _target(self):
        from ..target.base import Target

        return Target.parse(self.compile_args.target)

    def _workers(self, on_device: bool, n: int) -> int:
        if not on_device:
            return 1  # the CPU backends keep their kernels in this process
        want = knobs.get("autotune_workers")
        return max(1, min(n, want or os.cpu_count() or 1, 16))

    def _kernels(self, configs, compiled, rows, target) -> list:
        """A kernel per usable candidate (None for the others, with the reason in its row)."""
        from ..compiler import kernel_from_spec

        kernels: list = [None] * len(configs)
        usable = []
        for i, done in enumerate(compiled):
            if done.error:
                rows[i].update(status="refused", reason=done.error)
                continue
            rows[i]["resources"] = dict(done.spec.resources) if done.spec is not None else {}
            usable.append(i)
        if usable and compiled[usable[0]].spec is not None:
            verdicts = judge([(compiled[i].spec.resources, compiled[i].spec.num_threads) for i in usable], target)
            for i, v in zip(usable, verdicts):
                rows[i]["warps_per_sm"] = v.warps_per_sm
                if not v.keep:
                    rows[i].update(status="pruned", reason=v.reason)
            usable = [i for i, v in zip(usable, verdicts) if v.keep]
        ca = self.compile_args
        for i in usable:
            done = compiled[i]
            if done.kernel is not None:
                kernels[i] = done.kernel
            else:
                kernels[i] = kernel_from_spec(self._build(configs[i]), done.spec, ca.out_idx, ca.target,
                                              ca.pass_configs, ca.optimize_level)
        return kernels

    def _time_all(self, kernels, rows, on_device: bool = False):
        """Check and time every usable candidate, spread over the GPUs of one kind (``devices.py``);
        (index, latency) of the fastest, or None."""
        pa = self.profile_args
        inputs: dict = {}  # device -> the arguments made on it (when they are cached between candidates)
        todo = [i for i, k in enumerate(kernels) if k is not None]

        def time_one(i, device):
            k = kernels[i]
            try:
                if device not in inputs or not pa.cache_input_tensors:
                    inputs[device] = self._inputs(k)
                args = _poisoned_call(k, inputs[device])  # every argument, outputs allocated once
                if not pa.skip_check and not self._check(k, args, rows[i]):
                    return
                ms = k.get_profiler().do_bench(warmup=pa.warmup, rep=pa.rep, input_tensors=args, backend=pa.backend)
            except Exception as e:  # noqa: BLE001 - one failing candidate is scored, not fatal
                text = str(e).splitlines()[0] if str(e) else ""
                rows[i].update(status="failed", reason=f"{type(e).__name__}: {text}")
                return
            rows[i].update(status="timed", latency_ms=ms)
            if device is not None:
                rows[i]["gpu"] = device

        bar = progress_bar(len(todo), f"tuning {self._name()}")
        try:
            spread(todo, timing_devices(on_device), time_one, on_done=bar.update)
        finally:
            bar.close()
        timed = [(i, rows[i]["latency_ms"]) for i in todo if rows[i]["status"] == "timed"]
        return min(timed, key=lambda x: x[1]) if timed else None

    def _inputs(self, kernel) -> list:
        """The call's arguments: from ``set_autotune_inputs``, ``supply_prog`` or fresh random data."""
        given = get_autotune_inputs()
        if given is not None:
            return list(given)
        pa = self.profile_args
        if pa.supply_prog is not None:
            return list(pa.supply_prog(kernel.params))
        return kernel.get_profiler().random_inputs(seed=int(time.time_ns() % 2**31))

    def _check(self, kernel, full, row) -> bool:
        """``full``: every argument after one call with poisoned outputs."""
        pa = self.profile_args
        if pa.ref_prog is None and pa.manual_check_prog is None:
            return True
        outs = [full[j] for j in kernel.out_idx] if kernel.out_idx else full
        ins = [full[j] for j in range(len(full)) if j not in kernel.out_idx]
        if pa.manual_check_prog is not None:
            try:
                pa.manual_check_prog(outs, pa.ref_prog(*ins) if pa.ref_prog else None)
            except AssertionError as e:
                row.update(status="wrong", reason=f"manual check failed: {e}")
                return False
            return True
        refs = pa.ref_prog(*ins)
        refs = refs if isinstance(refs, (list, tuple)) else [refs]
        for o, r in zip(outs, refs):
            a, b = _np(o), _np(r)
            bad = ~np.isclose(a, b, rtol=pa.rtol, atol=pa.atol)  # NaN (an unwritten output) is never close
            if bad.mean() > pa.max_mismatched_ratio:
                row.update(status="wrong", reason=f"{int(bad.sum())} of {bad.size} elements differ from the reference")
                return False
        return True

    def _result_from_cache(self, entry, configs):
        best = entry["best_config"]
        if best not in configs:
            return None  # the stored winner is not among today's configurations: tune again
        from ..compiler import compile as tw_compile

        try:
            kernel = tw_compile(self._build(best), **self._compile_kw())
        except TilewrightError:
            return None
        return AutotuneResult(entry["best_latency_ms"], best, None, kernel.get_kernel_source(), kernel.func, kernel,
                              list(entry["rows"]), from_cache=True)

    def _key_parts(self, configs, target, on_device) -> dict:
        from ..compiler import _compiler_fingerprint

        ca, pa = self.compile_args, self.profile_args
        return {"builder": tuning_cache.builder_identity(_raw_builder(self.fn)), "args": list(self._args),
                "kwargs": self._kwargs, "configs": configs, "target": target.key(), "out_idx": ca.out_idx,
                "pass_configs": ca.pass_configs, "optimize_level": ca.optimize_level,
                "backend": ca.execution_backend, "device": _device_name(on_device),
                "compiler": _compiler_fingerprint(), "check": [pa.rtol, pa.atol, pa.skip_check],
                "inputs": get_autotune_inputs()}

    def _name(self) -> str:
        return getattr(_raw_builder(self.fn), "__name__", "kernel")


def _raw_builder(fn):
    """The builder function behind a ``@tilewright.jit`` wrapper (or ``fn`` itself)."""
    return getattr(fn, "builder", fn)


def given_names(fn, args: tuple, kwargs: dict) -> set:
    """The builder parameters a call gives: its keywords and the names its positional arguments
    bind to (``f(1024, 1024, 64)`` gives ``block_K`` too when that is the third parameter)."""
    import inspect

    try:
        params = inspect.signature(_raw_builder(fn)).parameters.values()
    except (TypeError, ValueError):  # no signature to read: only the keywords are known
        return set(kwargs)
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return set(kwargs) | set(positional[:len(args)])


def _poisoned_call(kernel, inputs) -> list:
    """Run ``kernel`` with its outputs filled with NaN first; returns all arguments after the call."""
    n = len(kernel.params)
    if len(inputs) == n:
        full = list(inputs)
        for j in kernel.out_idx:
            _poison(full[j])
        kernel(*full)
        return full
    full = kernel._with_outputs(list(inputs))
    for j in kernel.out_idx:
        _poison(full[j])
    kernel(*full)
    return full


def _poison(x) -> None:
    try:
        x.fill_(float("nan")) if hasattr(x, "fill_") else x.fill(np.nan)
    except (TypeError, ValueError, RuntimeError):
        pass  # integer outputs cannot hold NaN: the reference comparison still checks them


def _np(x):
    if type(x).__module__.startswith("torch"):
        return x.detach().float().cpu().numpy()
    return np.asarray(x, dtype=np.float64)


def _device_name(on_device: bool) -> str:
    if not on_device:
        return "cpu"
    torch = sys.modules.get("torch")
    try:
        return torch.cuda.get_device_name() if torch is not None else "unknown"
    except Exception:  # noqa: BLE001
        return "unknown"


def _json_rows(rows) -> list:
    out = []
    for r in rows:
        r = dict(r)
        if r.get("latency_ms") is not None and not math.isfinite(r["latency_ms"]):
            r["latency_ms"] = None
        out.append(r)
    return out
