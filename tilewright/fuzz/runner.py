"""Running one fuzz case on one backend and judging the outcome.

Backends: ``interpret`` (the tile interpreter), ``emulator:<arch>`` (the lowered code of that
target executed on the CPU: sm_80, sm_90a, gfx90a, gfx942, gfx1100, ...) and ``gpu`` (the local
GPU, via torch tensors).  Outcomes:

- ``ok``: every expected output matches the float64 reference within the case's tolerance and no
  output element was left unwritten (outputs start poisoned);
- ``refused``: the compiler refused the kernel with a ``CompileError`` (a limitation to look at,
  but never a wrong answer);
- ``wrong``: an output differs from the reference, or was not written;
- ``internal``: an ``InternalError`` (a compiler bug);
- ``crash``: any other exception (an emulator, interpreter or runtime bug);
- ``skipped``: the case does not run on this backend (an op-level case, ``Case.backends``).

Only ``ok``, ``refused`` and ``skipped`` are acceptable; the others are findings.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass

import numpy as np

from ..errors import CompileError, InternalError

ACCEPTABLE = ("ok", "refused", "skipped")


@dataclass
class Outcome:
    status: str
    detail: str = ""


def backend_args(backend: str) -> dict:
    if backend == "interpret":
        return {"target": "interpret"}
    if backend.startswith("emulator:"):
        arch = backend.split(":", 1)[1]
        kind = "hip" if arch.startswith("gfx") else "cuda"
        return {"target": f"{kind} -arch={arch}", "execution_backend": "emulator"}
    if backend == "gpu":
        return {"target": "auto"}
    raise ValueError(f"unknown fuzz backend {backend!r}; use interpret, emulator:<arch> or gpu")


def run_case(case, backend: str) -> Outcome:
    from ..compiler import compile as tw_compile

    if case.backends is not None and backend not in case.backends:
        return Outcome("skipped", f"runs on {', '.join(case.backends)} only")
    if case.call is not None:
        return _run_call(case, backend)
    chain = case.chain or [(case.func, list(range(len(case.args))), case.pass_configs)]
    kernels = []
    try:
        for func, _, configs in chain:
            kernels.append(tw_compile(func, **backend_args(backend), pass_configs=configs))
    except CompileError as e:
        return _refusal(e)
    except InternalError as e:
        return Outcome("internal", str(e).strip().splitlines()[0])
    except Exception as e:  # noqa: BLE001 - every other failure is a finding
        return Outcome("crash", _last_line(e))
    args = [np.copy(a) if isinstance(a, np.ndarray) else a for a in case.args]
    try:
        if backend == "gpu":
            results = _run_on_gpu(kernels, [idx for _, idx, _ in chain], args)
        else:
            for kernel, (_, idx, _) in zip(kernels, chain):
                kernel(*[args[i] for i in idx])
            results = args
    except InternalError as e:
        return Outcome("internal", str(e).strip().splitlines()[0])
    except CompileError as e:
        return _refusal(e)
    except Exception as e:  # noqa: BLE001
        return Outcome("crash", _last_line(e))
    return judge(case, results)


def _run_call(case, backend: str) -> Outcome:
    """An op-level case: ``case.call(backend)`` compiles, runs and returns the results."""
    try:
        results = case.call(backend)
    except ImportError as e:  # (torch missing)
        return Outcome("skipped", f"needs {e.name}")
    except InternalError as e:
        return Outcome("internal", str(e).strip().splitlines()[0])
    except CompileError as e:
        return _refusal(e)
    except Exception as e:  # noqa: BLE001 - an ArgumentError of a valid call is a finding too
        return Outcome("crash", _last_line(e))
    return judge(case, results)


def _refusal(e: CompileError) -> Outcome:
    """A CompileError is a refusal, unless it says it is a compiler bug ("internal: ...")."""
    first = str(e).strip().splitlines()[0] if str(e).strip() else "CompileError"
    return Outcome("internal" if first.lower().startswith("internal") else "refused", first)


def judge(case, results) -> Outcome:
    for index, want in case.expected.items():
        got = np.asarray(results[index]).astype(np.float64)
        if got.shape != want.shape:
            return Outcome("wrong", f"output {index}: shape {got.shape}, expected {want.shape}")
        unwritten = ~np.isfinite(got) & np.isfinite(want)
        out_dtype = np.asarray(case.args[index]).dtype
        if np.issubdtype(out_dtype, np.integer):  # (the sentinel expected: an element that must stay unwritten)
            unwritten = (got == np.iinfo(out_dtype).min) & (want != np.iinfo(out_dtype).min)
        if unwritten.any():
            where = tuple(int(v) for v in np.argwhere(unwritten)[0])
            return Outcome("wrong", f"output {index}: {int(unwritten.sum())} elements never written (first {where})")
        # NaN expected = an element the kernel must leave as poisoned (outside a run-time extent)
        bad = ~np.isclose(got, want, rtol=case.rtol, atol=case.atol, equal_nan=True)
        if bad.any():
            where = tuple(int(v) for v in np.argwhere(bad)[0])
            err = np.abs(got - want)[bad].max()
            return Outcome("wrong", f"output {index}: {int(bad.sum())} of {bad.size} elements off (max abs error "
                                    f"{err:.3g}; first {where}: {got[where]:.6g} vs {want[where]:.6g})")
    return Outcome("ok")


# NumPy dtypes from ml_dtypes -> the torch dtype of the same bits
_ML_DTYPES = {"bfloat16": "bfloat16", "float8_e4m3fn": "float8_e4m3fn", "float8_e5m2": "float8_e5m2",
              "float8_e4m3fnuz": "float8_e4m3fnuz", "float8_e5m2fnuz": "float8_e5m2fnuz"}


def _run_on_gpu(kernels, indices, args) -> list:
    import torch

    def to_gpu(a):
        if not isinstance(a, np.ndarray):
            return a
        if a.dtype.name in _ML_DTYPES:  # ml_dtypes (bfloat16, float8): through their bits
            bits = np.int16 if a.dtype.itemsize == 2 else np.uint8
            return torch.from_numpy(a.view(bits)).cuda().view(getattr(torch, _ML_DTYPES[a.dtype.name]))
        return torch.from_numpy(a).cuda()

    def back(d, a):
        if not isinstance(d, torch.Tensor):
            return d
        if isinstance(a, np.ndarray) and a.dtype.name in _ML_DTYPES:
            bits = torch.int16 if a.dtype.itemsize == 2 else torch.uint8
            return d.view(bits).cpu().numpy().view(a.dtype)
        return d.cpu().numpy()

    dev = [to_gpu(a) for a in args]
    for kernel, idx in zip(kernels, indices):
        kernel(*[dev[i] for i in idx])
    torch.cuda.synchronize()
    return [back(d, a) for d, a in zip(dev, args)]


def _last_line(e: BaseException) -> str:
    tb = traceback.extract_tb(e.__traceback__)
    where = f" at {tb[-1].filename.split('tilewright/')[-1]}:{tb[-1].lineno}" if tb else ""
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}{where}"
