"""Timing and checking helpers for a compiled kernel (TileLang's ``get_profiler()`` surface).

``do_bench`` times back-to-back launches between CUDA events on the kernel's stream (after a
warm-up); ``assert_allclose`` runs the kernel and a reference on fresh random inputs and compares.
Timing belongs in ``bench/`` scripts, never in tests.
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

    # ------------------------------------------------------------------ timing
    def do_bench(self, func=None, warmup: int = 25, rep: int = 100, input_tensors=None, **_ignored) -> float:
        """Milliseconds per call: ``rep`` back-to-back calls between two CUDA events, after ``warmup``
        calls (host overhead overlaps the GPU work, as it does in a real program)."""
        import torch

        fn = func or self.kernel
        ins = input_tensors if input_tensors is not None else self.random_inputs()
        for _ in range(max(warmup, 1)):
            fn(*ins)
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(rep):
            fn(*ins)
        e.record()
        torch.cuda.synchronize()
        return float(s.elapsed_time(e)) / rep


def _to_np(x):
    mod = type(x).__module__
    if mod.startswith("torch"):
        return x.detach().float().cpu().numpy()
    return np.asarray(x, dtype=np.float64)
