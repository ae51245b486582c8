"""Timing and checking helpers for a compiled kernel (TileLang's ``get_profiler()`` surface).

``do_bench`` times the kernel with GPU events (CUDA or ROCm, through PyTorch) or the CPU clock on
the CPU backends, with the L2 cache flushed before every timed call, warm-up and measurement given
as time budgets, and quantiles on request (``timing.py``); ``assert_allclose`` runs the kernel and a
reference on fresh random inputs and compares.  Timing belongs in ``bench/`` scripts, never in tests.
"""

from __future__ import annotations

import numpy as np

from ..ir import tile as t


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
                from ..runtime.tensor_args import to_torch_dtype

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
        from .timing import check_return_mode, measure

        check_return_mode(return_mode)
        if backend not in ("event", "cudagraph"):
            raise ValueError(f"do_bench backend {backend!r} is not available here; use 'event' or 'cudagraph'")
        fn = func or self.kernel
        ins = list(input_tensors) if input_tensors is not None else self.random_inputs()
        on_device = self.kernel.backend == "device"
        if on_device and backend == "cudagraph" and self.kernel.target.kind != "cuda":
            raise ValueError("cudagraph timing needs a CUDA target")
        est = None
        if n_warmup or n_repeat:  # call counts: turn them into budgets from one timed call
            est = measure(lambda: fn(*ins), 0, 1e-9, device=on_device, l2_flush=False, max_calls=3).stat("median")
            warmup, rep = est * max(n_warmup, 1), est * max(n_repeat, 3)
        timing = measure(lambda: fn(*ins), warmup, rep, device=on_device, l2_flush=l2_flush,
                         cuda_graph=backend == "cudagraph")
        if quantiles is not None:
            return timing.quantiles(quantiles)
        return timing.stat(return_mode)


def _to_np(x):
    mod = type(x).__module__
    if mod.startswith("torch"):
        return x.detach().float().cpu().numpy()
    return np.asarray(x, dtype=np.float64)
