"""The tile interpreter's reducers (``ir.reducer``): the partials are one logical array (every
thread's copy kept alike), each ``T.Parallel`` iteration's contribution is combined into it once,
and the finalize combines the starting value once into each element.

Max and min drop NaN contributions, as TileLang's reducers (``fmaxf`` / ``fminf``) do on a GPU.
"""

from __future__ import annotations

import numpy as np

from ..ir import dtype as dt
from ..ir.reducer import ReducerFinalize, ReducerUpdate
from ..ir.tile_ops import register
from .tile import InterpError

_AT = {"sum": np.add, "max": np.fmax, "min": np.fmin, "bitand": np.bitwise_and, "bitor": np.bitwise_or,
       "bitxor": np.bitwise_xor}


def _logical(c, buf) -> np.ndarray:
    arr = c.bufs.get(buf)
    if arr is None:
        raise InterpError(f"reducer partials {buf.name} used before they are allocated")
    return arr[0] if buf in c.tbufs else arr


def _update(interp, s: ReducerUpdate, c) -> None:
    if not c.in_par:
        raise InterpError("T.reducer_update outside T.Parallel")
    idx = interp.comp(s.index)(c)
    val = interp.comp(s.value)(c)
    shape = np.broadcast_shapes(np.shape(idx), np.shape(val), np.shape(c.mask) if c.mask is not None else ())
    idx_b = np.broadcast_to(np.asarray(idx, dtype=np.intp), shape)
    val_b = np.broadcast_to(np.asarray(val), shape)
    if c.mask is not None:
        m = np.broadcast_to(c.mask, shape)
        idx_b, val_b = idx_b[m], val_b[m]
    else:
        idx_b, val_b = idx_b.reshape(-1), val_b.reshape(-1)
    arr = _logical(c, s.partials)
    if idx_b.size and (idx_b.min() < 0 or idx_b.max() >= arr.shape[0]):
        raise InterpError(f"T.reducer_update of {s.reducer}: an index is out of the reducer's bounds")
    _AT[s.op].at(arr, idx_b, val_b.astype(arr.dtype))
    if s.partials in c.tbufs:
        c.bufs[s.partials][1:] = arr


def _finalize(interp, s: ReducerFinalize, c) -> None:
    interp._tile_op_allowed(c, "T.finalize_reducer")
    data = _logical(c, s.partials).copy()
    if s.seed is not None:
        seed = np.asarray(c.bufs[s.seed]).reshape(-1)[0]
        fn = _AT[s.op]
        data = fn(np.asarray(seed, dtype=data.dtype), data).astype(data.dtype)
    out = data.reshape(tuple(int(n) for n in s.dst.shape)).astype(dt.to_numpy(s.dst.dtype))
    interp._write_region(interp.full_region(s.dst), c, out, "T.finalize_reducer")


register(ReducerUpdate, "interp", _update)
register(ReducerFinalize, "interp", _finalize)
