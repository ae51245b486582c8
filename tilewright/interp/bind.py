"""Argument binding shared by the two CPU backends (the tile interpreter and the thread-IR
emulator): symbolic sizes given by name or Var, NumPy buffers checked against their parameters
(dtype, rank, static sizes, one value per symbolic size), every symbolic size bound."""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError
from ..ir import dtype as dt
from ..ir import expr as E
from ..ir.tile import stride_mismatch


def as_int(v, what: str) -> int:
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise ArgumentError(f"{what} must be an int, got {v!r}")
    return int(v)


def shape_text(shape) -> str:
    return "(" + ", ".join(s.name if isinstance(s, E.Var) else str(s) for s in shape) + ")"


def given_dyn(name: str, dyn_vars, dyn: dict | None) -> dict:
    """``dyn`` (keys: Vars or their names) as a Var -> int dict, refusing unknown keys."""
    out: dict = {}
    by_name = {v.name: v for v in dyn_vars}
    for k, v in (dyn or {}).items():
        var = by_name.get(k) if isinstance(k, str) else k
        if var is None or all(var is not d for d in dyn_vars):
            raise ArgumentError(f"{k!r} is not a symbolic dimension of {name} "
                                f"(those are: {', '.join(by_name) or 'none'})")
        out[var] = as_int(v, f"dyn[{var.name}]")
    return out


def check_array(p, a, dyn_vals: dict) -> None:
    """``a`` fits buffer parameter ``p``; binds the symbolic sizes its shape fixes."""
    if not isinstance(a, np.ndarray):
        raise ArgumentError(f"argument {p.name} must be a NumPy array, got {type(a).__name__}")
    if a.dtype != dt.to_numpy(p.dtype):
        raise ArgumentError(f"argument {p.name} has dtype {a.dtype}, the kernel expects {p.dtype}")
    if a.ndim != len(p.shape):
        raise ArgumentError(f"argument {p.name} has {a.ndim} dimension(s) {a.shape}, the kernel expects "
                            f"{len(p.shape)}: {shape_text(p.shape)}")
    for d, (want, got) in enumerate(zip(p.shape, a.shape)):
        if isinstance(want, E.Var):
            seen = dyn_vals.setdefault(want, got)
            if seen != got:
                raise ArgumentError(f"symbolic dimension {want.name} is {seen} but argument {p.name} has "
                                    f"size {got} in dimension {d}")
        elif want != got:
            raise ArgumentError(f"argument {p.name} has shape {a.shape}, the kernel expects "
                                f"{shape_text(p.shape)} (dimension {d})")
    if p.attrs.get("explicit_strides"):
        if any(s % a.itemsize or s <= 0 for s in a.strides):
            raise ArgumentError(f"argument {p.name} has byte strides {a.strides}; the kernel needs positive strides "
                                "that are whole elements")
        wrong = stride_mismatch(p, tuple(s // a.itemsize for s in a.strides), dyn_vals)
        if wrong:
            raise ArgumentError(f"argument {p.name} {wrong}")


def strided_span(a: np.ndarray) -> np.ndarray:
    """A flat view of the memory an array with positive strides spans, from its first element, so
    that flat element offsets computed from its strides address it (writes go to ``a``'s memory)."""
    if a.size == 0:
        return a.reshape(-1)
    step = a.itemsize
    span = 1 + sum((n - 1) * (s // step) for n, s in zip(a.shape, a.strides))
    return np.lib.stride_tricks.as_strided(a, shape=(span,), strides=(step,))


def require_bound(name: str, dyn_vars, dyn_vals: dict) -> None:
    for v in dyn_vars:
        if v not in dyn_vals:
            raise ArgumentError(f"symbolic dimension {v.name} of {name} is not bound")
