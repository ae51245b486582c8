"""TVM-style attribute scopes and the thread all-reduce TileLang kernels write with them:

    with T.attr(T.comm_reducer(lambda x, y: x + y, [T.cast(0, dtype)]), "reduce_scope",
                T.reinterpret(T.uint64(0), dtype="handle")):
        T.evaluate(T.tvm_thread_allreduce(T.uint32(1), v[0], True, out[0], tx, dtype="handle"))

* ``T.attr(node, key, value)`` is a ``with`` scope carrying an attribute.  ``"reduce_scope"`` with a
  ``T.comm_reducer`` makes that reducer the one ``T.tvm_thread_allreduce`` uses inside the scope.  Keys
  ``pragma_*`` are code-generation hints (unrolling and the like) that change no result: accepted with
  a warning.  Other keys (thread bindings, storage scopes...) are refused: tilewright binds threads
  and places buffers itself.
* ``T.comm_reducer(combine, identities)``: a commutative reducer of one value (``combine(x, y)`` on
  kernel values, ``identities`` its identity element).
* ``T.tvm_thread_allreduce(n, value, cond, result, thread_var)``: every thread of the block gives
  ``value`` (the identity where ``cond`` is false), the values are combined with the scope's reducer,
  and every thread receives the combined value in ``result`` (an element of a per-thread buffer).
  The reduction runs over the block's threads (the one thread index tilewright has), through a
  shared-memory buffer of one slot per thread, as a tree in TVM's order: with ``p`` the largest power
  of two up to the thread count, threads below ``n - p`` first fold in slot ``tid + p``; then for
  offsets ``p/2, p/4, ..., 1`` threads below the offset fold in slot ``tid + offset`` (a barrier after
  each level), and slot 0 holds the result.  Each combine rounds to the result's type, so the order
  matters for 16-bit types: it is the order of TVM's shuffle-down all-reduce that TileLang uses.
* ``T.reinterpret(value, dtype="handle")``: the opaque handle such scopes take; other dtypes (a bit
  cast) are refused.
"""

from __future__ import annotations

from ..frontend import builder as _b
from ..ir import expr as _e
from ..ir import tile as _t

__all__ = ["attr", "comm_reducer", "tvm_thread_allreduce", "reinterpret"]


class _Handle:
    """An opaque handle value (``T.reinterpret(x, dtype="handle")``): only carried, never computed with."""

    def __repr__(self) -> str:
        return "T.handle"


def reinterpret(value, dtype):
    """``T.reinterpret(value, dtype="handle")`` (see the module docstring); any other dtype
    reinterprets the value's bits (``views.reinterpret``)."""
    if str(dtype) == "handle" or str(value) == "handle":
        return _Handle()
    from .views import reinterpret as reinterpret_bits

    return reinterpret_bits(value, dtype)


class comm_reducer:  # noqa: N801 - TileLang spelling
    """``T.comm_reducer(lambda x, y: ..., [identity])`` (see the module docstring)."""

    def __init__(self, combine, identities):
        if not callable(combine):
            raise _b.error(f"T.comm_reducer takes a function combining two values, got {combine!r}")
        ids = list(identities) if isinstance(identities, (list, tuple)) else [identities]
        if len(ids) != 1:
            raise _b.error(f"T.comm_reducer of {len(ids)} values is not supported; it takes one identity",
                           hint="reduce each value with its own reducer")
        self.combine = combine
        self.identity = ids[0]

    def __repr__(self) -> str:
        return f"T.comm_reducer(identity={self.identity})"


class attr:  # noqa: N801 - TileLang spelling: ``with T.attr(node, key, value):``
    """An attribute scope (see the module docstring); the frontend enters it (``attr_scope``)."""

    def __init__(self, node, attr_key, value):
        if not isinstance(attr_key, str):
            raise _b.error(f"T.attr takes a string key, got {attr_key!r}")
        if attr_key == "reduce_scope":
            if not isinstance(node, comm_reducer):
                raise _b.error(f"T.attr(..., 'reduce_scope', ...) takes a T.comm_reducer, got {node!r}")
        elif not attr_key.startswith("pragma_"):
            raise _b.error(f"T.attr key {attr_key!r} is not supported: tilewright binds threads and places buffers "
                           "itself", hint="remove the attribute scope (keep its body)")
        self.node = node
        self.key = attr_key
        self.value = value

    def __enter__(self):  # only meaningful through the frontend
        raise _b.error("`with T.attr(...)` can only be used inside a @T.prim_func body")

    def __exit__(self, *a):
        return False


def current_reducer():
    """The reducer of the innermost ``reduce_scope`` attribute scope, or None."""
    b = _b.current()
    stack = b.__dict__.get("reduce_scopes") or []
    return stack[-1] if stack else None


def tvm_thread_allreduce(*args, dtype="handle"):
    """``T.tvm_thread_allreduce(n, value, cond, result, thread_var)`` (see the module docstring)."""
    from . import alloc_shared, alloc_var, sync_threads

    b = _b.current()
    if b.kernel is None:
        raise _b.error("T.tvm_thread_allreduce must be called inside `with T.Kernel(...)`")
    reducer = current_reducer()
    if reducer is None:
        raise _b.error("T.tvm_thread_allreduce needs a reducer: call it inside "
                       "`with T.attr(T.comm_reducer(...), 'reduce_scope', ...)`")
    n = args[0].value if isinstance(args[0], _e.Const) else args[0]
    if n != 1 or len(args) != 5:
        raise _b.error(f"T.tvm_thread_allreduce of {n!r} value(s) with {len(args)} arguments is not supported; it "
                       "takes (1, value, cond, result, thread_var)")
    _, value, cond, result, thread_var = args
    if thread_var is not b.thread_var:
        raise _b.error(f"T.tvm_thread_allreduce reduces over the block's thread index (T.get_thread_binding()), "
                       f"got {thread_var!r}")
    if not isinstance(result, _e.Load) or result.buffer.scope not in ("local", "var", "fragment"):
        raise _b.error(f"T.tvm_thread_allreduce: the result must be an element of a per-thread buffer, got {result!r}")
    out = result.buffer
    identity = _e.cast(out.dtype, reducer.identity)
    mine = _e.cast(out.dtype, value)
    if not (cond is True or isinstance(cond, _e.Const) and cond.value):
        mine = _e.select(cond, mine, identity)
    nthreads = b.kernel.num_threads
    slots = alloc_shared((nthreads,), out.dtype)
    tid = b.thread_var
    b.emit(_t.BufferStore(slots, (tid,), mine, loc=b.loc))
    sync_threads()

    def fold_in(offset: int, active: int):
        # threads below ``active`` fold in the slot ``offset`` above their own
        step = _e.cast(out.dtype, reducer.combine(_e.Load(slots, (tid,)), _e.Load(slots, (tid + offset,))))
        b.emit(_t.IfThenElse(_e.binary("<", tid, _e.as_expr(active)),
                             _t.BufferStore(slots, (tid,), step, loc=b.loc), None, loc=b.loc))
        sync_threads()

    # a tree in TVM's order (halving offsets, as its shuffle-down all-reduce combines), not a
    # running fold: each combine rounds to the result's type, and a 16-bit product or sum rounded
    # at every one of n steps drifts further (and differently) from what TileLang computes
    width = 1 << (nthreads.bit_length() - 1)
    if width < nthreads:
        fold_in(width, nthreads - width)
    while width > 1:
        width //= 2
        fold_in(width, width)
    acc = alloc_var(out.dtype, _e.Load(slots, (_e.as_expr(0),)))
    acc_buf = acc.buffer if isinstance(acc, _e.Load) else acc
    sync_threads()  # every thread has read slot 0 before the slots can be reused
    b.emit(_t.BufferStore(out, result.indices, _e.Load(acc_buf, (_e.as_expr(0),)), loc=b.loc))
