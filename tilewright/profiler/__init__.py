"""Timing and checking helpers for a compiled kernel (TileLang's ``get_profiler()`` surface).

``do_bench`` times the kernel with GPU events (CUDA or ROCm, through PyTorch) or the CPU clock on
the CPU backends, with the L2 cache flushed before every timed call, warm-up and measurement given
as time budgets, and quantiles on request (``timing.py``); ``assert_allclose`` runs the kernel and a
reference on fresh random inputs and compares.  ``report`` is the per-kernel report (resources,
theoretical occupancy, achieved TFLOP/s and GB/s against the device roof, a roofline PNG:
``report.py``, ``occupancy.py``, ``peaks.py``, ``plots.py``) and ``trace`` writes the timed calls of a
run as a Chrome/Perfetto trace (``trace.py``).  Timing belongs in ``bench/`` scripts, never in tests.
"""

from __future__ import annotations

import logging
import sys

import numpy as np

from ..ir import tile as t

log = logging.getLogger(__name__)


class Profiler:
    """``kernel.get_profiler(tensor_supply_type)``: inputs made as ``tensor_supply_type`` says
    (TileLang's ``TensorSupplyType``; default ``Auto``: uniform in [-1, 1) for floats, small
    random integers otherwise), a tolerant comparison against a reference and timing."""

    def __init__(self, kernel, supply_type=None):
        self.kernel = kernel
        self.supply_type = supply_type
        self.result_idx = list(kernel.out_idx)

    # ------------------------------------------------------------------ inputs
    def random_inputs(self, seed: int = 0, device=None, dynamic_symbolic_constraints: dict | None = None):
        """Fresh random inputs for the kernel's input parameters, made as the supply type says
        (TileLang's ``_get_inputs``).  Dynamic sizes take their value from
        ``dynamic_symbolic_constraints`` (name -> int), else 256."""
        from .supply import make_input

        k = self.kernel
        on_device = k.backend == "device"
        rng = _Rng(seed, on_device)
        ins = []
        for i, p in enumerate(k.params):
            if i in k.out_idx or i in getattr(k, "workspace_idx", ()):  # outputs, T.alloc_global: the call makes them
                continue
            if not isinstance(p, t.Buffer):
                ins.append(1.0 if p.dtype.startswith(("float", "bfloat")) else 1)
                continue
            shape = tuple(_size(s, dynamic_symbolic_constraints) for s in p.shape)
            ins.append(make_input(p.dtype, shape, self.supply_type, rng, on_device))
        return ins

    def _get_inputs(self, with_output: bool = False, dynamic_symbolic_constraints: dict | None = None):
        """TileLang's spelling: the inputs (and with ``with_output`` fresh tensors for the outputs
        too, in parameter order)."""
        if not with_output:
            return self.random_inputs(dynamic_symbolic_constraints=dynamic_symbolic_constraints)
        from .supply import make_input

        k = self.kernel
        ins = iter(self.random_inputs(dynamic_symbolic_constraints=dynamic_symbolic_constraints))
        rng = _Rng(1, k.backend == "device")
        out = []
        for i, p in enumerate(k.params):
            if i in getattr(k, "workspace_idx", ()):
                continue
            if i in k.out_idx:
                shape = tuple(_size(s, dynamic_symbolic_constraints) for s in p.shape)
                out.append(make_input(p.dtype, shape, self.supply_type, rng, k.backend == "device"))
            else:
                out.append(next(ins))
        return out

    # ------------------------------------------------------------------ checking
    def assert_allclose(self, reference_program, input_tensors=None, atol: float = 1e-2, rtol: float = 1e-2,
                        max_mismatched_ratio: float = 0.01, *, seed: int = 0):
        """Run ``reference_program`` and then the kernel on the same inputs (``input_tensors``, or
        fresh random ones) and compare each output: at most ``int(numel * max_mismatched_ratio)``
        elements may fail ``|out - ref| <= atol + rtol * |ref|`` (TileLang's argument order and
        defaults; NaN matches NaN)."""
        from ..compat import assert_mostly_close

        ins = list(input_tensors) if input_tensors is not None else self.random_inputs(seed)
        refs = _as_list(reference_program(*ins))
        outs = _as_list(self.kernel(*ins))
        if len(outs) != len(refs):
            raise AssertionError(f"the kernel returned {len(outs)} output(s), the reference {len(refs)}")
        for o, r in zip(outs, refs):
            if o is None or r is None:  # a reference may mark an output as not compared
                continue
            assert_mostly_close(o, r, rtol=rtol, atol=atol, max_mismatched_ratio=max_mismatched_ratio,
                                names=("tilewright", "ref"))

    def manual_assert_close(self, reference_program, input_tensors=None, manual_check_prog=None):
        """Run the reference and the kernel on the same inputs and hand both output lists to
        ``manual_check_prog(outs, refs)``."""
        if manual_check_prog is None:
            raise TypeError("manual_assert_close needs manual_check_prog=(outs, refs) -> None")
        ins = list(input_tensors) if input_tensors is not None else self.random_inputs()
        refs = _as_list(reference_program(*ins))
        outs = _as_list(self.kernel(*ins))
        if len(outs) != len(refs):
            raise AssertionError(f"the kernel returned {len(outs)} output(s), the reference {len(refs)}")
        manual_check_prog(outs, refs)

    def assert_consistent(self, repeat: int = 10):
        """Run the kernel ``repeat`` more times on the same inputs; every run must reproduce the
        first one exactly (a race shows up as a difference)."""
        ins = self.random_inputs()
        first = [_to_np(x).copy() for x in _as_list(self.kernel(*ins))]
        for n in range(repeat):
            for j, (o, f) in enumerate(zip(_as_list(self.kernel(*ins)), first)):
                if not np.array_equal(_to_np(o), f, equal_nan=True):
                    raise AssertionError(f"output {j} of run {n + 2} differs from the first run: the kernel "
                                         "is not deterministic (a race?)")

    @property
    def func(self):
        return self.kernel

    def __call__(self, *args, **kwargs):
        return self.kernel(*args, **kwargs)

    # ------------------------------------------------------------------ running and timing
    def run_once(self, func=None):
        """Run the kernel (or ``func``) once on fresh random inputs; returns its outputs."""
        return (func or self.kernel)(*self.random_inputs())

    def do_bench(self, func=None, warmup: float = 25, rep: float = 100, n_warmup: int = 0, n_repeat: int = 0,
                 input_tensors=None, backend: str = "event", quantiles=None, return_mode: str = "mean",
                 l2_flush: bool = True, dynamic_symbolic_constraints: dict | None = None, device=None,
                 early_stop_baseline=None):
        """Milliseconds per call of the kernel (or ``func``) on ``input_tensors`` (default: fresh
        random inputs).  ``warmup``/``rep`` are time budgets in milliseconds (``n_warmup``/``n_repeat``,
        when given, are call counts instead); each call is timed on its own with the L2 cache flushed
        before it.  ``backend``: "event" (GPU events; the CPU clock for the CPU backends) or
        "cudagraph" (replay of a captured graph: no host launch cost in the figure).  Returns the
        ``return_mode`` statistic ("mean", "median", "min", "max", "all"), or the ``quantiles``."""
        from .timing import check_return_mode

        check_return_mode(return_mode)
        if backend == "cupti" and self.kernel.target.kind != "cuda":
            backend = "event"  # CUPTI and CUDA graphs are NVIDIA's
        if early_stop_baseline is not None:
            import warnings

            from ..errors import TilewrightWarning

            warnings.warn("do_bench(early_stop_baseline=) has no effect in tilewright: the full time budget is "
                          "always measured; remove it", TilewrightWarning, stacklevel=2)
        if device is not None and self.kernel.backend == "device":
            import torch

            with torch.cuda.device(device):
                return self.do_bench(func, warmup, rep, n_warmup, n_repeat, input_tensors, backend, quantiles,
                                     return_mode, l2_flush, dynamic_symbolic_constraints)
        timing = self.timing(func, warmup, rep, n_warmup, n_repeat, input_tensors, backend, l2_flush,
                             dynamic_symbolic_constraints)
        if quantiles is not None:
            return timing.quantiles(quantiles)
        return timing.stat(return_mode)

    def timing(self, func=None, warmup: float = 25, rep: float = 100, n_warmup: int = 0, n_repeat: int = 0,
               input_tensors=None, backend: str = "event", l2_flush: bool = True,
               dynamic_symbolic_constraints: dict | None = None):
        """``do_bench``'s measurement itself: a ``timing.Timing`` with every sample and its start time."""
        from .timing import measure

        backend = _timing_backend(backend)
        fn = func or self.kernel
        if input_tensors is not None:
            ins = list(input_tensors)
        else:
            ins = self.random_inputs(dynamic_symbolic_constraints=dynamic_symbolic_constraints)
        on_device = self.kernel.backend == "device"
        if on_device and backend == "cudagraph" and self.kernel.target.kind != "cuda":
            raise ValueError("cudagraph timing needs a CUDA target")
        if n_warmup or n_repeat:  # call counts: turn them into budgets from one timed call
            est = measure(lambda: fn(*ins), 0, 1e-9, device=on_device, l2_flush=False, max_calls=3).stat("median")
            warmup, rep = est * max(n_warmup, 1), est * max(n_repeat, 3)
        return measure(lambda: fn(*ins), warmup, rep, device=on_device, l2_flush=l2_flush,
                       cuda_graph=backend == "cudagraph")

    # ------------------------------------------------------------------ the per-kernel report
    def report(self, flops: float | None = None, bytes: float | None = None, dtype: str | None = None,
               warmup: float = 25, rep: float = 100, input_tensors=None, backend: str = "event",
               l2_flush: bool = True, device: str | None = None, run: bool = True):
        """A ``report.KernelReport``: resources, theoretical occupancy and (``run=True``) a timed run
        with achieved TFLOP/s (given ``flops``) and GB/s against the device roof.  ``bytes`` defaults
        to every argument tensor read or written once; ``dtype`` (which peak applies) to the first
        floating-point argument's; ``device`` names a row of ``peaks.ROOFS`` (default: the local GPU,
        else the target's usual part).  ``print(report)``, ``.to_dict()``, ``.plot_roofline(png)``,
        ``.save_trace(json)``."""
        from .peaks import roof_for
        from .report import KernelReport

        k = self.kernel
        source = "given"
        timing = None
        if run:
            ins = list(input_tensors) if input_tensors is not None else self.random_inputs()
            outs = k(*ins)
            outs = [] if outs is None else list(outs) if isinstance(outs, (list, tuple)) else [outs]
            if bytes is None:
                bytes = float(sum(_nbytes(x) for x in ins + outs)) or None
                source = "compulsory"
            timing = self.timing(None, warmup, rep, input_tensors=ins, backend=backend, l2_flush=l2_flush)
        name = _device_name(k) if device is None else device
        roof = roof_for(name, k.target.arch if k.target.vendor != "cpu" else None)
        return KernelReport(kernel=k.func.name, target=k.target, backend=k.backend, device=name,
                            num_threads=k.num_threads, resources=_resources(k), timing=timing, flops=flops,
                            bytes=bytes, bytes_source=source, dtype=dtype or _main_dtype(k), roof=roof)

    def trace(self, path: str, warmup: float = 25, rep: float = 100, input_tensors=None, backend: str = "event",
              l2_flush: bool = True) -> str:
        """Benchmark the kernel and write the timed calls as a Chrome/Perfetto trace; returns the path."""
        from .trace import write_trace

        timing = self.timing(None, warmup, rep, input_tensors=input_tensors, backend=backend, l2_flush=l2_flush)
        k = self.kernel
        return write_trace(path, [(k.func.name, timing, {"target": str(k.target), "device": _device_name(k)})])


def _resources(kernel) -> dict:
    """The kernel's resource usage; on the emulator, whose run needs no code object, the target's
    toolchain builds one for the figures when it is available (else only shared memory is known)."""
    res = kernel.resource_usage
    if kernel.backend == "emulator" and "registers" not in res:
        try:
            kernel.get_code_object()
            res = kernel.resource_usage
        except Exception as e:  # noqa: BLE001 - no toolchain here: report what is known
            log.info("no code object for the report of %s: %s", kernel.func.name, str(e).splitlines()[0])
    return res


def _nbytes(x) -> int:
    n = getattr(x, "nbytes", None)
    if n is not None:
        return int(n)
    if type(x).__module__.startswith("torch"):
        return x.numel() * x.element_size()
    return 0


def _main_dtype(kernel) -> str:
    for p in kernel.params:
        if isinstance(p, t.Buffer) and p.dtype.startswith(("float", "bfloat")):
            return p.dtype
    return "float16"


def _device_name(kernel) -> str:
    """What the kernel runs on, in words."""
    if kernel.backend == "interpret":
        return "CPU (tile interpreter)"
    if kernel.backend == "emulator":
        return f"CPU (emulator of {kernel.target.arch})"
    torch = sys.modules.get("torch")  # a timed GPU run has imported it; a static report need not
    try:
        if torch is not None and torch.cuda.is_available():
            return torch.cuda.get_device_name(torch.cuda.current_device())
    except Exception:  # noqa: BLE001 - only a label; the roof then falls back to the architecture
        pass
    return kernel.target.arch

def _timing_backend(backend: str) -> str:
    """TileLang's do_bench backends: "event", "cudagraph", and "cupti" (kernel time from CUPTI
    activity records, launch overhead excluded) — timed here by replaying a CUDA graph, which also
    leaves the host launch cost out of the figure."""
    if backend == "cupti":
        return "cudagraph"
    if backend not in ("event", "cudagraph"):
        raise ValueError(f"do_bench backend {backend!r} is not available here; use 'event', 'cudagraph' or 'cupti'")
    return backend


def do_bench(fn, warmup: float = 25, rep: float = 100, _n_warmup: int = 0, _n_repeat: int = 0, quantiles=None,
             fast_flush: bool = True, backend: str = "event", return_mode: str = "mean", device=None,
             cache_size: int = 256, early_stop_baseline=None):
    """Milliseconds per call of ``fn()`` (TileLang's ``tilelang.profiler.do_bench``): GPU events
    when a CUDA/ROCm device is present (the L2 cache flushed before every call), else the CPU clock.
    ``warmup``/``rep`` are time budgets in ms; ``_n_warmup``/``_n_repeat`` call counts instead.
    ``fast_flush`` and ``cache_size`` (how the L2 flush is done) do not change what is measured."""
    from .timing import check_return_mode, measure

    check_return_mode(return_mode)
    backend = _timing_backend(backend)
    on_device = _gpu_present()
    if early_stop_baseline is not None:
        import warnings

        from ..errors import TilewrightWarning

        warnings.warn("do_bench(early_stop_baseline=) has no effect in tilewright: the full time budget is "
                      "always measured; remove it", TilewrightWarning, stacklevel=2)
    if device is not None and on_device:
        import torch

        with torch.cuda.device(device):
            return do_bench(fn, warmup, rep, _n_warmup, _n_repeat, quantiles, fast_flush, backend, return_mode)
    if _n_warmup or _n_repeat:
        est = measure(fn, 0, 1e-9, device=on_device, l2_flush=False, max_calls=3).stat("median")
        warmup, rep = est * max(_n_warmup, 1), est * max(_n_repeat, 3)
    timing = measure(fn, warmup, rep, device=on_device, l2_flush=True, cuda_graph=on_device and backend == "cudagraph")
    if quantiles is not None:
        return timing.quantiles(quantiles)
    return timing.stat(return_mode)


def _gpu_present() -> bool:
    import sys

    torch = sys.modules.get("torch")
    if torch is None:
        try:
            import torch
        except ImportError:
            return False
    return bool(torch.cuda.is_available())


class _Rng:
    """One seeded generator for a set of inputs: torch's on the GPU, NumPy's on the CPU backends."""

    def __init__(self, seed: int, on_device: bool):
        self.numpy = np.random.default_rng(seed)
        self.torch = None
        if on_device:
            import torch

            self.torch = torch.Generator(device="cuda").manual_seed(seed)


def _size(s, constraints):
    """A static size, the value ``constraints`` gives a dynamic one, or 256 when no constraints
    are given at all (a constraints dict that lacks the name is an error, as in TileLang)."""
    if isinstance(s, int):
        return s
    name = getattr(s, "name", str(s))
    if constraints is None:
        return 256
    if name not in constraints:
        raise ValueError(f"Dynamic symbolic variable '{name}' not found in constraints. Available constraints: "
                         f"{list(constraints)}")
    return int(constraints[name])


def _as_list(x) -> list:
    if x is None:
        return []
    if isinstance(x, (list, tuple)):
        return list(x)
    return [x]


def _to_np(x):
    mod = type(x).__module__
    if mod.startswith("torch"):
        return x.detach().float().cpu().numpy()
    return np.asarray(x, dtype=np.float64)
