"""TileLang's warp-level operations on per-thread values: ``T.shfl_xor``, ``T.shfl_down``,
``T.shfl_up``, ``T.shfl_sync`` (and ``T.shfl_xor_sync`` / ``_down_sync`` / ``_up_sync``), and
``T.warp_reduce_sum/max/min/bitand/bitor``.

They are written in per-thread code (outside ``T.Parallel``, typically over values indexed by
``T.get_thread_binding()``).  A shuffle reads ``value`` as another lane of the same warp holds it,
with CUDA's rules: lanes are grouped in segments of ``width`` (a power of two, default the whole
warp: 32 lanes on NVIDIA, the 64-lane wave on CDNA AMD GPUs, 32 in the tile interpreter), and a
source outside the reading lane's segment (above it for xor/down, below it for up) reads the lane's
own value.  Each becomes an intrinsic call ``warp_shfl_<kind>(value, lane_or_delta, width)``
(width 0: the whole warp) that the interpreter, the emulator and both printers know.  The lane
``mask`` of the ``*_sync`` forms names the lanes that take part; every named lane must execute the
shuffle (as in CUDA), and the result does not depend on it.
"""

from __future__ import annotations

import builtins as _builtins

from ..frontend import builder as _b
from ..ir import dtype as _dt
from ..ir import expr as _e

__all__ = [
    "shfl_xor", "shfl_down", "shfl_up", "shfl_sync", "shfl_xor_sync", "shfl_down_sync", "shfl_up_sync",
    "warp_reduce_sum", "warp_reduce_max", "warp_reduce_min", "warp_reduce_bitand", "warp_reduce_bitor",
]

SHUFFLE_KINDS = ("xor", "down", "up", "idx")


def _width(width, what: str) -> _e.Expr:
    if width is None:
        return _e.Const(0, "int32")
    w = _e.const_value(width)
    if not isinstance(w, _builtins.int) or isinstance(w, _builtins.bool) or w <= 0 or w & (w - 1) or w > 64:
        raise _b.error(f"{what}(width={width!r}) must be a power of two from 1 to the warp size",
                       hint="leave width out to shuffle across the whole warp")
    return _e.Const(w, "int32")


def _shuffle(kind: str, value, lane, width, what: str) -> _e.Expr:
    v = _e.as_expr(value)
    if v.dtype.startswith("float8"):
        raise _b.error(f"{what} of a {v.dtype} value is not supported",
                       hint="shuffle it as float16 or float32: T.Cast('float32', x)")
    lane = _e.as_expr(lane)
    if not _dt.is_int(lane.dtype):
        raise _b.error(f"{what}: the lane argument must be an integer, got a {lane.dtype} value")
    return _e.Call(f"warp_shfl_{kind}", (v, _e.cast("int32", lane), _width(width, what)), v.dtype)


def shfl_xor(value, offset, width=None):
    """``value`` of lane ``lane ^ offset``."""
    return _shuffle("xor", value, offset, width, "T.shfl_xor")


def shfl_down(value, offset, width=None):
    """``value`` of lane ``lane + offset`` (the lane's own value past the end of its segment)."""
    return _shuffle("down", value, offset, width, "T.shfl_down")


def shfl_up(value, offset, width=None):
    """``value`` of lane ``lane - offset`` (the lane's own value before the start of its segment)."""
    return _shuffle("up", value, offset, width, "T.shfl_up")


def _check_mask(mask, what: str) -> None:
    m = _e.const_value(mask)
    if not isinstance(m, _builtins.int) or isinstance(m, _builtins.bool) or m == 0 or m >> 64:
        raise _b.error(f"{what}: the lane mask must be a nonzero compile-time int such as 0xFFFFFFFF, got {mask!r}")


def shfl_sync(mask, value, src_lane, width=None):
    """``value`` of lane ``src_lane`` of the reading lane's segment (CUDA's ``__shfl_sync``)."""
    _check_mask(mask, "T.shfl_sync")
    return _shuffle("idx", value, src_lane, width, "T.shfl_sync")


def shfl_xor_sync(mask, value, offset, width=None):
    _check_mask(mask, "T.shfl_xor_sync")
    return _shuffle("xor", value, offset, width, "T.shfl_xor_sync")


def shfl_down_sync(mask, value, offset, width=None):
    _check_mask(mask, "T.shfl_down_sync")
    return _shuffle("down", value, offset, width, "T.shfl_down_sync")


def shfl_up_sync(mask, value, offset, width=None):
    _check_mask(mask, "T.shfl_up_sync")
    return _shuffle("up", value, offset, width, "T.shfl_up_sync")


def warp_size() -> _e.Expr:
    """The lanes of a warp on the target (32 on NVIDIA and in the interpreter, 64 on CDNA)."""
    return _e.Call("warp_size", (), "int32")


def _warp_reduce(value, combine, what: str):
    """Butterfly over the whole warp: every lane ends with the combination of all lanes' values."""
    v = _let(_e.as_expr(value), what)
    for off in (1, 2, 4, 8, 16):
        v = _let(combine(v, _shuffle("xor", v, off, None, what)), what)
    # the last step exists only where a warp has 64 lanes (AMD's wave64)
    return _e.select(warp_size() > 32, combine(v, _shuffle("xor", v, 32, None, what)), v)


def _let(value: _e.Expr, what: str) -> _e.Expr:
    """``value`` bound to a fresh name, so each butterfly step is computed (and shuffled) once."""
    from ..ir import tile as _t

    b = _b.current()
    if b.kernel is None:
        raise _b.error(f"{what} must be called inside `with T.Kernel(...)`")
    if isinstance(value, (_e.Var, _e.Const)):
        return value
    var = _e.Var(b.fresh("wred"), value.dtype, kind="let")
    b.emit(_t.LetStmt(var, value, loc=b.loc))
    return var


def _int_only(what):
    def check(v):
        if not _dt.is_int(_e.as_expr(v).dtype):
            raise _b.error(f"{what} takes an integer value, got {_e.as_expr(v).dtype}")

    return check


def warp_reduce_sum(value):
    """The sum of ``value`` over the lanes of the warp, in every lane."""
    return _warp_reduce(value, lambda a, b: a + b, "T.warp_reduce_sum")


def warp_reduce_max(value):
    """The maximum of ``value`` over the lanes of the warp, in every lane."""
    return _warp_reduce(value, _e.emax, "T.warp_reduce_max")


def warp_reduce_min(value):
    """The minimum of ``value`` over the lanes of the warp, in every lane."""
    return _warp_reduce(value, _e.emin, "T.warp_reduce_min")


def warp_reduce_bitand(value):
    """The bitwise and of ``value`` (an integer) over the lanes of the warp, in every lane."""
    _int_only("T.warp_reduce_bitand")(value)
    return _warp_reduce(value, lambda a, b: a & b, "T.warp_reduce_bitand")


def warp_reduce_bitor(value):
    """The bitwise or of ``value`` (an integer) over the lanes of the warp, in every lane."""
    _int_only("T.warp_reduce_bitor")(value)
    return _warp_reduce(value, lambda a, b: a | b, "T.warp_reduce_bitor")


# ---------------------------------------------------------------------------------------------
# warp votes: calls warp_vote_<kind>(predicate, lane mask); results over the active lanes of the
# warp that are in the mask (CUDA's rules), ballots and masks as uint64 (a 64-lane wave fits)

VOTE_KINDS = ("any", "all", "ballot", "activemask")
_FULL = (1 << 64) - 1


def _vote(kind: str, mask, pred, what: str) -> _e.Expr:
    if mask is None:
        m = _FULL
    else:
        _check_mask(mask, what)
        m = _builtins.int(_e.const_value(mask))
        if m == 0xFFFFFFFF:
            m = _FULL  # CUDA's "every lane" spelling also means every lane of a 64-lane wave
    p = _e.as_expr(True if pred is None else pred)
    if p.dtype != "bool":
        p = p != 0
    dtype = "bool" if kind in ("any", "all") else "uint64"
    return _e.Call(f"warp_vote_{kind}", (p, _e.Const(m, "uint64")), dtype)


def any_sync(mask, predicate):
    """Whether ``predicate`` holds in any active lane of the warp named in ``mask``."""
    return _vote("any", mask, predicate, "T.any_sync")


def all_sync(mask, predicate):
    """Whether ``predicate`` holds in every active lane of the warp named in ``mask``."""
    return _vote("all", mask, predicate, "T.all_sync")


def ballot_sync(mask, predicate):
    """Bit ``l`` set where lane ``l`` of the warp is active, in ``mask`` and ``predicate`` holds."""
    return _vote("ballot", mask, predicate, "T.ballot_sync")


def ballot(predicate):
    """``T.ballot_sync`` over every lane of the warp."""
    return _vote("ballot", None, predicate, "T.ballot")


def activemask():
    """Bit ``l`` set where lane ``l`` of the warp is executing this call."""
    return _vote("activemask", None, None, "T.activemask")


__all__ += ["any_sync", "all_sync", "ballot_sync", "ballot", "activemask"]


# ---------------------------------------------------------------------------------------------
# block votes: T.syncthreads_count / _and / _or (CUDA's __syncthreads_count/_and/_or): a barrier
# that also combines a predicate over every thread of the block


def _block_count(pred, what: str) -> _e.Expr:
    """Each thread writes its predicate to its own slot of a shared scratch array; after a barrier
    every thread adds the slots up (the same count in all of them); a second barrier lets the
    scratch be written again (a vote in a loop)."""
    import math as _m

    from ..ir import thread as _th
    from ..ir import tile as _t
    from . import alloc_shared, alloc_var

    b = _b.current()
    if b.kernel is None or b.thread_var is None:
        raise _b.error(f"{what} must be called inside `with T.Kernel(...)`")
    nt = _m.prod(b.kernel.threads)
    p = _e.as_expr(pred)
    p = p if p.dtype == "bool" else p != 0
    flags = alloc_shared((nt,), "int32")
    b.emit(_t.BufferStore(flags, (b.thread_var,), _e.select(p, 1, 0), loc=b.loc))
    b.emit(_th.Barrier())
    acc = alloc_var("int32", 0)
    k = _e.Var(b.fresh("vote_k"), "int32", kind="loop")
    add = _t.BufferStore(acc, (_e.as_expr(0),), _e.Load(acc, (_e.as_expr(0),)) + _e.Load(flags, (k,)), loc=b.loc)
    b.emit(_t.For(k, _e.as_expr(0), _e.as_expr(nt), add, "serial", loc=b.loc))
    b.emit(_th.Barrier())
    count = _e.Var(b.fresh("vote_count"), "int32", kind="let")
    b.emit(_t.LetStmt(count, _e.Load(acc, (_e.as_expr(0),)), loc=b.loc))
    return count, nt


def syncthreads_count(predicate):
    """Barrier of the block; the number of its threads for which ``predicate`` holds."""
    return _block_count(predicate, "T.syncthreads_count")[0]


def syncthreads_and(predicate):
    """Barrier of the block; whether ``predicate`` holds in every thread (1 or 0, int32)."""
    count, nt = _block_count(predicate, "T.syncthreads_and")
    return _e.select(count == nt, 1, 0)


def syncthreads_or(predicate):
    """Barrier of the block; whether ``predicate`` holds in any thread (1 or 0, int32)."""
    count, _ = _block_count(predicate, "T.syncthreads_or")
    return _e.select(count > 0, 1, 0)


__all__ += ["syncthreads_count", "syncthreads_and", "syncthreads_or"]
