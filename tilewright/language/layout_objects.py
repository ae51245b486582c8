"""TileLang's layout objects: ``T.Layout(shape, forward_fn)`` (``tilelang.layout.Layout``) and
``T.Fragment(shape, forward_fn=..., replicate=...)``, and what ``T.annotate_layout`` does with them.

* A ``Layout`` on a **shared** buffer is honored: element ``s[i, j]`` lives at the physical coordinates
  ``forward_fn(i, j)`` (one expression or a list, row-major over their bounding box).  The map must be
  injective on the buffer's domain: two logical elements at one physical place would alias, so that is
  a ``LayoutError`` (a ``ValueError``) naming the buffer and both elements.  The buffer is then
  allocated over the bounding box and used through its elements (``s[i, j]`` in ``T.Parallel`` loops or
  plain statements, every index mapped); whole-tile operations on it (``T.copy``, ``T.gemm``...) are
  refused, as their lowering places shared tiles itself.  The annotation must come before the buffer's
  first use.
* A ``Layout`` on a **global** tensor (TileLang permutes a float32 dQ accumulator this way in its
  attention backward kernels, so that the atomic adds of one warp land close together) is accepted and
  not applied, with a note in the ``tilewright`` log.  Every access of a global tensor here goes through
  its logical indices, in this kernel and in every other tilewright kernel that touches the tensor, so
  the values each logical element receives and yields are the same either way; only the order of the
  elements in the caller's memory differs (row-major here).  A program that fills such a tensor in one
  kernel and reads it in another (the attention backward's accumulation and post-processing kernels)
  therefore computes the same; a caller that reads the raw buffer itself sees the logical (row-major)
  order, not TileLang's permuted one.  The layout must still fit the tensor (its shape, the number of
  indices its function takes).
* A ``Fragment`` on a **fragment** fixes which thread holds each element (and, with ``replicate=k``, the
  ``k`` threads holding copies of it) and at which local index: it is checked here (its shape, that its
  functions can be evaluated on integer indices) and recorded in ``buf.attrs["user_fragment"]``;
  ``passes.infer_layouts`` builds the layout (``ir.layout_user``) for the block's threads, and every
  ``T.Parallel`` loop, reduction, copy and fill over the fragment uses it.  It is not observable on the
  interpreter, which keeps whole tiles.
"""

from __future__ import annotations

import inspect
import logging

import numpy as np

from ..errors import CompileError
from ..frontend import builder as _b
from ..ir import expr as _e
from ..ir import tile as _t

__all__ = ["Layout", "Fragment"]
_log = logging.getLogger("tilewright")


class LayoutError(CompileError, ValueError):
    """A layout that cannot be honored as written (TileLang raises ValueError for these)."""


class Layout:
    """``T.Layout(shape, forward_fn)``: logical index -> physical coordinates."""

    def __init__(self, shape, forward_fn):
        self.shape = tuple(int(s) if isinstance(s, (int, np.integer)) else s for s in
                           ((shape,) if isinstance(shape, (int, _e.Expr)) else shape))
        if not callable(forward_fn):
            raise _b.error(f"T.Layout takes a function of the {len(self.shape)} logical indices, got {forward_fn!r}")
        self.forward_fn = forward_fn

    def forward(self, *idx) -> tuple:
        out = self.forward_fn(*idx)
        return tuple(out) if isinstance(out, (list, tuple)) else (out,)

    def __repr__(self) -> str:
        return f"T.Layout({self.shape})"


class Fragment:
    """``T.Fragment(shape, forward_fn=..., forward_thread_fn=..., forward_index_fn=..., replicate=1)``:
    a fragment layout.  ``forward_fn(*idx[, rep])`` returns ``(thread, local_index)`` (the local index one
    expression or a list of them); or ``forward_thread_fn(*idx[, rep])`` the thread and
    ``forward_index_fn(*idx)`` the local index."""

    def __init__(self, shape, forward_fn=None, forward_thread_fn=None, forward_index_fn=None, replicate=1,
                 **kwargs):
        self.shape = tuple(shape) if isinstance(shape, (list, tuple)) else (shape,)
        self.forward_fn = forward_fn
        self.forward_thread_fn = forward_thread_fn
        self.forward_index_fn = forward_index_fn
        self.replicate = replicate

    def __repr__(self) -> str:
        return f"T.Fragment({self.shape}, replicate={self.replicate})"

    def tables(self) -> tuple:
        """``(threads, regs)``, each ``[numel, replicate]``: where each element (row-major) and each of its
        replicas lives; a multi-dimensional local index is flattened row-major over its bounding box.
        Raises ``ValueError`` / ``TypeError`` when the functions do not evaluate on integer indices."""
        shape = tuple(int(x) for x in self.shape)
        grid = np.indices(shape).reshape(len(shape), -1)
        rep = int(self.replicate)
        threads, locals_ = [], []
        for k in range(rep):
            extra = (np.full(grid.shape[1:], k, dtype=np.int64),) if rep > 1 else ()
            if self.forward_fn is not None:
                out = self.forward_fn(*grid, *extra)
                if not isinstance(out, (list, tuple)) or len(out) != 2:
                    raise ValueError("forward_fn must return (thread, local index)")
                thread, index = out
            else:
                if self.forward_thread_fn is None or self.forward_index_fn is None:
                    raise ValueError("give forward_fn, or both forward_thread_fn and forward_index_fn")
                thread, index = self.forward_thread_fn(*grid, *extra), self.forward_index_fn(*grid)
            index = list(index) if isinstance(index, (list, tuple)) else [index]
            threads.append(np.broadcast_to(np.asarray(thread, dtype=np.int64), grid.shape[1:]))
            locals_.append([np.broadcast_to(np.asarray(x, dtype=np.int64), grid.shape[1:]) for x in index])
        ndim = max(len(x) for x in locals_)
        if any(len(x) != ndim for x in locals_):
            raise ValueError("the local index has a different number of dimensions for different replicas")
        extents = [max(int(x[d].max()) for x in locals_) + 1 for d in range(ndim)]
        regs = []
        for x in locals_:
            flat = np.zeros(grid.shape[1:], dtype=np.int64)
            for d in range(ndim):
                flat = flat * extents[d] + x[d]
            regs.append(flat)
        return np.stack(threads, axis=1), np.stack(regs, axis=1)


def apply_layouts(layouts: dict) -> list:
    """``T.annotate_layout`` entries whose value is a ``Layout`` or ``Fragment`` (see the module); returns a
    digest of each applied layout's tables (what the kernel's text shows of them)."""
    digests = []
    for buf, lay in layouts.items():
        if isinstance(lay, Fragment):
            threads, regs = _apply_fragment_layout(buf, lay)
            digests.append(_digest(threads, regs))
        elif isinstance(lay, Layout):
            digests.append(_digest(*_apply_shared_layout(buf, lay)))
    return digests


def _digest(*arrays) -> str:
    import hashlib

    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a, dtype=np.int64)
        h.update(repr(a.shape).encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]


def _name(buf) -> str:
    return getattr(buf, "name", repr(buf))


def _apply_fragment_layout(buf, lay: Fragment) -> None:
    """Check a ``T.Fragment`` against its fragment and record it (see the module docstring)."""
    if not isinstance(buf, _t.Buffer) or buf.scope != "fragment":
        what = f"a {buf.scope} buffer" if isinstance(buf, _t.Buffer) else "not a buffer"
        raise _b.error(f"T.annotate_layout({_name(buf)}: T.Fragment(...)): {_name(buf)} is {what}; a T.Fragment "
                       "lays out a T.alloc_fragment buffer", hint="annotate the fragment itself")
    if tuple(lay.shape) != tuple(buf.shape):
        raise _b.error(f"T.annotate_layout: the T.Fragment of {buf.name} has shape {tuple(lay.shape)}, the fragment "
                       f"{tuple(buf.shape)}")
    if not isinstance(lay.replicate, (int, np.integer)) or lay.replicate < 1:
        raise _b.error(f"T.Fragment(replicate={lay.replicate!r}) for {buf.name}: replicate must be a positive int")
    if "user_fragment" in buf.attrs:
        raise _b.error(f"T.annotate_layout: fragment {buf.name} already has a layout")
    if _used_since_alloc(buf):
        raise _b.error(f"T.annotate_layout({buf.name}: ...) must come before the first use of {buf.name}",
                       hint="annotate layouts right after the T.alloc_fragment calls")
    try:
        threads, regs = lay.tables()
    except (TypeError, ValueError, IndexError) as e:
        raise _b.error(f"the T.Fragment layout of {buf.name} cannot be evaluated on integer indices: {e}",
                       hint="write forward_fn(*indices[, rep]) -> (thread, local index) with + - * // % on the "
                       "indices") from None
    if (threads < 0).any() or (regs < 0).any():
        raise LayoutError(f"the T.Fragment layout of `{buf.name}` gives some element a negative thread or local "
                          "index", _b.current().loc)
    buf.attrs["user_fragment"] = (threads, regs, _b.current().loc)
    buf.attrs["layout"] = lay  # (frontend.uniform_fragments leaves a fragment with a layout of its own alone)
    return threads, regs


def _apply_shared_layout(buf, lay: Layout):
    from .views import BufferView

    if isinstance(buf, BufferView) and _is_identity(buf, lay):
        # the row-major order a view already has (TileLang's test annotates a dtype-changing view so)
        return ()
    if not isinstance(buf, _t.Buffer):
        raise _b.error(f"T.annotate_layout: the key {buf!r} is not a buffer",
                       hint="annotate the buffer the view is of; a view takes only the identity layout")
    if buf.scope == "global":
        _accept_global_layout(buf, lay)
        return ()
    if buf.scope != "shared":
        raise _b.error(f"T.annotate_layout({buf.name}: T.Layout(...)): {buf.name} is a {buf.scope} buffer, whose "
                       "placement tilewright does not take from the program", hint="remove the annotation (the kernel "
                       "computes the same with tilewright's placement), or stage the data in a T.alloc_shared buffer")
    if "layout_map" in buf.attrs:
        raise _b.error(f"T.annotate_layout: shared buffer {buf.name} already has a layout")
    if tuple(lay.shape) != tuple(buf.shape):
        raise _b.error(f"T.annotate_layout: the layout of {buf.name} has shape {lay.shape}, the buffer {buf.shape}")
    if _used_since_alloc(buf):
        raise _b.error(f"T.annotate_layout({buf.name}: ...) must come before the first use of {buf.name}",
                       hint="annotate layouts right after the T.alloc_shared calls")
    nparams = len(inspect.signature(lay.forward_fn).parameters)
    if nparams != buf.ndim:
        raise _b.error(f"the layout function of {buf.name} takes {nparams} indices; {buf.name} has {buf.ndim} "
                       "dimensions")
    grid = np.indices(buf.shape).reshape(buf.ndim, -1)
    try:
        phys = [np.broadcast_to(np.asarray(c, dtype=np.int64), grid.shape[1:]) for c in lay.forward(*grid)]
    except (TypeError, ValueError) as e:
        raise _b.error(f"the layout function of {buf.name} cannot be evaluated on integer indices: {e}",
                       hint="write it with + - * // % ^ & | on the indices") from None
    if any((c < 0).any() for c in phys):
        raise LayoutError(f"the layout of shared buffer `{buf.name}` maps an element to a negative physical "
                          "coordinate", _b.current().loc)
    extents = tuple(int(c.max()) + 1 for c in phys)
    flat = np.ravel_multi_index(tuple(phys), extents)
    _check_injective(buf, grid, phys, flat)
    logical_shape = buf.shape
    physical = int(np.prod(extents))

    def index_map(idx: tuple) -> tuple:
        coords = lay.forward(*idx)
        off = 0
        for c, n in zip(coords, extents):
            off = off * n + c
        return (_e.as_expr(off),)

    buf.shape = (physical,)
    buf.strides = (1,)
    buf.attrs["layout_map"] = index_map
    buf.attrs["logical_shape"] = logical_shape
    return (flat, np.asarray(extents))


def _is_identity(view, lay: Layout) -> bool:
    """The layout maps every index of the view to itself."""
    shape = tuple(view.shape)
    if tuple(lay.shape) != shape or not all(isinstance(x, (int, np.integer)) for x in shape):
        return False
    grid = np.indices(shape).reshape(len(shape), -1)
    try:
        phys = lay.forward(*grid)
    except (TypeError, ValueError):
        return False
    return len(phys) == len(shape) and all(np.array_equal(np.broadcast_to(np.asarray(p), g.shape), g)
                                           for p, g in zip(phys, grid))


def _accept_global_layout(buf, lay: Layout) -> None:
    """A ``Layout`` on a global tensor: checked against the tensor, then left unapplied (see the module)."""
    if len(lay.shape) != buf.ndim or any(isinstance(a, int) and isinstance(b, int) and a != b
                                         for a, b in zip(lay.shape, buf.shape)):
        raise _b.error(f"T.annotate_layout: the layout of {buf.name} has shape {tuple(lay.shape)}, the tensor "
                       f"{tuple(buf.shape)}")
    nparams = len(inspect.signature(lay.forward_fn).parameters)
    if nparams != buf.ndim:
        raise _b.error(f"the layout function of {buf.name} takes {nparams} indices; {buf.name} has {buf.ndim} "
                       "dimensions")
    loc = _b.current().loc
    where = f" ({loc.filename}:{loc.lineno})" if loc is not None else ""
    _log.info("T.annotate_layout on the global tensor %s%s is not applied: tilewright addresses global tensors by "
              "their logical indices in every kernel, which gives the same values; the caller's buffer holds the "
              "elements in row-major order", buf.name, where)


def _check_injective(buf, grid, phys, flat) -> None:
    order = np.argsort(flat, kind="stable")
    same = np.nonzero(flat[order][1:] == flat[order][:-1])[0]
    if not len(same):
        return
    a, b = order[same[0]], order[same[0] + 1]
    la, lb = tuple(int(x) for x in grid[:, a]), tuple(int(x) for x in grid[:, b])
    pc = tuple(int(c[a]) for c in phys)
    raise LayoutError(f"the layout of shared buffer `{buf.name}` must be injective: logical indices {la} and {lb} "
                      f"both map to physical coordinates {pc}", _b.current().loc,
                      hint="give every element its own physical place (e.g. pad instead of folding with %)")


def _used_since_alloc(buf) -> bool:
    """Whether a statement read so far, other than the buffer's allocation, mentions ``buf``."""
    from ..frontend.param_use import statements_mention

    b = _b.current()
    emitted = [s for block in b.blocks for s in block]
    return statements_mention([s for s in emitted if not (isinstance(s, _t.Alloc) and s.buffer is buf)], buf)
