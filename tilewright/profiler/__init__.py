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
    def __init__(self, kernel):
        self.kernel = kernel

    # ------------------------------------------------------------------ inputs
    def random_inputs(self, seed: int = 0, device=None):
        """Fresh random inputs for the kernel's input parameters (normal for floats)."""
        k = self.kernel
        ins = []
        gen_np = np.random.default_rng(seed)
        use_torch = k.backend == "device"
        if use_torch:
            import torch

            g = torch.Generator(device="cuda").manual_seed(seed)
        dyn_default = 256
        for i, p in enumerate(k.params):
            if i in k.out_idx:
                continue
            if not isinstance(p, t.Buffer):
                ins.append(1.0 if p.dtype.startswith("float") else 1)
                continue
            shape = tuple(s if isinstance(s, int) else dyn_default for s in p.shape)
            if use_torch:
                from ..binding.tensor_args import to_torch_dtype

                td = to_torch_dtype(p.dtype)
                if p.dtype.startswith(("float", "bfloat")):
                    x = torch.randn(shape, generator=g, device="cuda", dtype=torch.float32).to(td)
                else:
                    x = torch.randint(-4, 5, shape, generator=g, device="cuda").to(td)
            else:
                from ..ir import dtype as dt

                if p.dtype.startswith(("float", "bfloat")):
                    x = gen_np.standard_normal(shape).astype(dt.to_numpy(p.dtype))
                else:
                    x = gen_np.integers(-4, 5, shape).astype(dt.to_numpy(p.dtype))
            ins.append(x)
        return ins

    # ------------------------------------------------------------------ checking
    def assert_allclose(self, reference_program, rtol: float = 1e-2, atol: float = 1e-2, seed: int = 0,
                        max_mismatched_ratio: float = 0.0):
        ins = self.random_inputs(seed)
        outs = self.kernel(*ins)
        refs = reference_program(*ins)
        outs = outs if isinstance(outs, (list, tuple)) else [outs]
        refs = refs if isinstance(refs, (list, tuple)) else [refs]
        for o, r in zip(outs, refs):
            a = _to_np(o)
            b = _to_np(r)
            bad = ~np.isclose(a, b, rtol=rtol, atol=atol)
            if bad.mean() > max_mismatched_ratio:
                idx = np.argwhere(bad)[0]
                raise AssertionError(f"{bad.sum()} of {bad.size} elements differ beyond rtol={rtol}, atol={atol}; "
                                     f"first at {tuple(idx)}: {a[tuple(idx)]} vs reference {b[tuple(idx)]}")

    # ------------------------------------------------------------------ running and timing
    def run_once(self, func=None):
        """Run the kernel (or ``func``) once on fresh random inputs; returns its outputs."""
        return (func or self.kernel)(*self.random_inputs())

    def do_bench(self, func=None, warmup: float = 25, rep: float = 100, n_warmup: int = 0, n_repeat: int = 0,
                 input_tensors=None, backend: str = "event", quantiles=None, return_mode: str = "mean",
                 l2_flush: bool = True):
        """Milliseconds per call of the kernel (or ``func``) on ``input_tensors`` (default: fresh
        random inputs).  ``warmup``/``rep`` are time budgets in milliseconds (``n_warmup``/``n_repeat``,
        when given, are call counts instead); each call is timed on its own with the L2 cache flushed
        before it.  ``backend``: "event" (GPU events; the CPU clock for the CPU backends) or
        "cudagraph" (replay of a captured graph: no host launch cost in the figure).  Returns the
        ``return_mode`` statistic ("mean", "median", "min", "max", "all"), or the ``quantiles``."""
        from .timing import check_return_mode

        check_return_mode(return_mode)
        timing = self.timing(func, warmup, rep, n_warmup, n_repeat, input_tensors, backend, l2_flush)
        if quantiles is not None:
            return timing.quantiles(quantiles)
        return timing.stat(return_mode)

    def timing(self, func=None, warmup: float = 25, rep: float = 100, n_warmup: int = 0, n_repeat: int = 0,
               input_tensors=None, backend: str = "event", l2_flush: bool = True):
        """``do_bench``'s measurement itself: a ``timing.Timing`` with every sample and its start time."""
        from .timing import measure

        if backend not in ("event", "cudagraph"):
            raise ValueError(f"do_bench backend {backend!r} is not available here; use 'event' or 'cudagraph'")
        fn = func or self.kernel
        ins = list(input_tensors) if input_tensors is not None else self.random_inputs()
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

def _to_np(x):
    mod = type(x).__module__
    if mod.startswith("torch"):
        return x.detach().float().cpu().numpy()
    return np.asarray(x, dtype=np.float64)
