"""Argument binding for the two CPU backends (the tile interpreter and the thread-IR emulator).

The checks themselves are ``binding.args`` (the binder every backend uses), so a call is accepted
or refused, with the same words, whichever backend runs it; this module adapts them to the
emulator's incremental use (one array at a time, sizes collected in a dict)."""

from __future__ import annotations

import numpy as np

from ..binding import args as _args
from ..binding.packed import is_packed_storage
from ..errors import ArgumentError
from ..ir import dtype as dt
from ..ir import expr as E


def as_int(v, what: str) -> int:
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise ArgumentError(f"{what} must be an int, got {v!r}")
    return int(v)


def shape_text(shape) -> str:
    return "(" + ", ".join(s.name if isinstance(s, E.Var) else str(s) for s in shape) + ")"


def given_dyn(name: str, dyn_vars, dyn: dict | None) -> dict:
    """``dyn`` (keys: Vars or their names) as a Var -> int dict, refusing unknown keys and sizes
    that are not non-negative int32 values."""
    return _args.given_dyn(name, dyn_vars, dyn)


def check_array(p, a, dyn_vals: dict, kernel_name: str = "kernel") -> None:
    """``a`` fits buffer parameter ``p``; binds the symbolic sizes its shape fixes."""
    ta = _args.describe_param(p, a, kernel_name, host_arrays=True)
    if is_packed_storage(p.dtype, ta):
        raise ArgumentError(f"{kernel_name}: argument {p.name} holds {p.dtype} values packed two per byte; the CPU "
                            "backends take one element per byte here (tilewright.binding.packed.unpack makes that "
                            "array), or call a compiled kernel, which unpacks")
    _args.check_tensor(p, ta, dyn_vals, kernel_name, 1)


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
            raise ArgumentError(f"{name}: could not infer dynamic dimension(s) {[v.name]} from the arguments")


def bind_host_call(kernel_name: str, params, dyn_vars, args: list, dyn: dict | None):
    """Check a CPU-backend call with the binder every backend uses; returns (buffer param -> NumPy
    array, scalar param -> Python value, symbolic size Var -> int)."""
    from ..ir import tile as t

    bound = _args.bind_arguments(list(params), list(dyn_vars), list(args), kernel_name=kernel_name, device_type="cpu",
                                 dyn=dyn, host_arrays=True)
    bufs, scalars = {}, {}
    for p, a, v in zip(params, args, bound.values):
        if isinstance(p, t.Buffer):
            # None: an optional tensor the kernel never touches (the binder checked that): an empty array
            bufs[p] = a if a is not None else np.empty((0,) * p.ndim, dtype=dt.to_numpy(p.dtype))
        else:
            scalars[p] = v
    return bufs, scalars, bound.dyn
