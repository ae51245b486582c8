"""Small helpers shared by the emulator's compilers: value normalisation, masks, bounds and
alignment checks, and where an error happened."""

from __future__ import annotations

import numpy as np

from ...ir import float8
from ...ir import thread as th  # noqa: F401
from ...ir import tile as t
from ...ir.printer import expr_str, print_stmt
from ...ir.thread_printer import thread_stmt_lines
from .errors import EmulatorOutOfBoundsError, MisalignedAccessError

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)


def _fix(v, nd: np.dtype):
    """``v`` as a NumPy value of dtype ``nd`` (scalars stay scalars); to an fp8 type saturating, as
    the GPU converts (ir/float8.py)."""
    if isinstance(v, np.ndarray):
        if v.dtype == nd:
            return v
        return v.astype(nd) if float8.saturating_max(nd) is None else float8.convert(v, nd)
    if isinstance(v, np.generic) and v.dtype == nd:
        return v
    return nd.type(v) if float8.saturating_max(nd) is None else float8.convert(v, nd)


def _and(m, c):
    """Lanes in mask ``m`` (None = all) where the bool array ``c`` holds."""
    return c if m is None else (m & c)


def _norm_mask(m):
    """None when every lane is set, else ``m``."""
    return None if m.all() else m


def _rows(vals: list, L: int, nd: np.dtype) -> np.ndarray:
    """Stack register values (arrays or scalars) into ``[len(vals), L]``."""
    out = np.empty((len(vals), L), nd)
    for i, v in enumerate(vals):
        out[i] = v
    return out


def _poison(nd: np.dtype):
    if nd.name in ("int4", "uint4"):  # ml_dtypes' 4-bit integers (kind "V")
        import ml_dtypes

        return nd.type(ml_dtypes.iinfo(nd).min)
    if nd.kind == "f" or nd.kind == "V" or nd.name.startswith(("bfloat16", "float8")):
        return nd.type(float("nan"))  # float4_e2m1fn has no NaN: -0
    if nd.kind == "b":
        return np.bool_(True)
    return nd.type(np.iinfo(nd).min)


def _is_float_np(nd: np.dtype) -> bool:
    return nd.kind == "f" or nd.name.startswith(("bfloat16", "float8", "float4"))


def _stmt_text(s) -> str:
    try:
        if isinstance(s, t.BufferStore):
            text = f"{s.buffer.name}[{expr_str(s.indices[0])}] = {expr_str(s.value)}"
        elif isinstance(s, (t.IfThenElse, t.For, t.LetStmt)):
            text = print_stmt(s).splitlines()[0]
        else:
            text = thread_stmt_lines(s)[0]
    except Exception:  # noqa: BLE001 - the message is a courtesy; never fail on it
        text = type(s).__name__
    return text if len(text) < 400 else text[:400] + " ..."


class _Where:
    """Where an error happened: the statement (text and source location)."""

    __slots__ = ("_text", "loc", "stmt")

    def __init__(self, stmt):
        self.stmt = stmt
        self.loc = getattr(stmt, "loc", None)
        self._text = None

    def text(self) -> str:
        if self._text is None:
            self._text = _stmt_text(self.stmt)
        return self._text

    def error(self, cls, message: str):
        return cls(f"{message}\n  in: {self.text()}", self.loc)


def _first(mask_arr) -> int:
    return int(np.flatnonzero(mask_arr)[0])


def _check_range(st, idx, lo_ok: int, hi_ok: int, need, what: str, where: _Where):
    """Check ``lo_ok <= idx <= hi_ok`` for the lanes in ``need`` (None: all lanes of the statement's
    mask); return ``idx`` made safe to index with for every lane (out-of-range inactive lanes are
    clamped)."""
    if not isinstance(idx, np.ndarray):
        if lo_ok <= idx <= hi_ok:
            return idx
        if need is None or need.any():
            lane = 0 if need is None else _first(need)
            raise where.error(EmulatorOutOfBoundsError, f"{st.where(lane)}: {what} index {int(idx)} is out of "
                                                        f"bounds (valid: {lo_ok}..{hi_ok})")
        return np.clip(idx, lo_ok, max(hi_ok, lo_ok))
    if idx.size == 0:
        return idx
    if idx.min() >= lo_ok and idx.max() <= hi_ok:
        return idx
    bad = (idx < lo_ok) | (idx > hi_ok)
    if need is not None:
        bad &= need
    if bad.any():
        lane = _first(bad)
        raise where.error(EmulatorOutOfBoundsError, f"{st.where(lane)}: {what} index {int(idx[lane])} is out of "
                                                    f"bounds (valid: {lo_ok}..{hi_ok})")
    return np.clip(idx, lo_ok, max(hi_ok, lo_ok))


def _check_align(st, byte_addr, nbytes: int, need, what: str, where: _Where):
    if nbytes <= 1:
        return
    bad = np.asarray(byte_addr) % nbytes != 0
    if bad.ndim == 0:
        if bad and (need is None or need.any()):
            raise where.error(MisalignedAccessError, f"{what}: {nbytes}-byte access at byte offset "
                                                     f"{int(byte_addr)} is not {nbytes}-byte aligned")
        return
    if need is not None:
        bad &= need
    if bad.any():
        lane = _first(bad)
        raise where.error(MisalignedAccessError, f"{st.where(lane)}: {what}: {nbytes}-byte access at byte offset "
                                                 f"{int(byte_addr[lane])} is not {nbytes}-byte aligned")




def _uint_of(nd: np.dtype) -> np.dtype:
    return np.dtype(f"u{nd.itemsize}")

