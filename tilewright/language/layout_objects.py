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
* A ``Fragment`` layout would fix which thread holds which element, which tilewright places itself:
  refused with a CompileError that says to remove the annotation.
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
    a fragment layout (which thread holds each element).  Recorded only: ``T.annotate_layout`` refuses
    it (see the module docstring)."""

    def __init__(self, shape, forward_fn=None, forward_thread_fn=None, forward_index_fn=None, replicate=1,
                 **kwargs):
        self.shape = tuple(shape) if isinstance(shape, (list, tuple)) else (shape,)
        self.forward_fn = forward_fn
        self.forward_thread_fn = forward_thread_fn
        self.forward_index_fn = forward_index_fn
        self.replicate = replicate

    def __repr__(self) -> str:
        return f"T.Fragment({self.shape}, replicate={self.replicate})"


def apply_layouts(layouts: dict) -> None:
    """``T.annotate_layout`` entries whose value is a ``Layout`` or ``Fragment`` (see the module)."""
    for buf, lay in layouts.items():
        if isinstance(lay, Fragment):
            raise _b.error(f"T.annotate_layout({_name(buf)}: T.Fragment(...)) is not supported: tilewright chooses "
                           "which thread holds each fragment element itself", hint="remove the T.Fragment "
                           "annotation; the kernel computes the same without it")
        if isinstance(lay, Layout):
            _apply_shared_layout(buf, lay)


def _name(buf) -> str:
    return getattr(buf, "name", repr(buf))


def _apply_shared_layout(buf, lay: Layout) -> None:
    if not isinstance(buf, _t.Buffer):
        raise _b.error(f"T.annotate_layout: the key {buf!r} is not a buffer")
    if buf.scope == "global":
        _accept_global_layout(buf, lay)
        return
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
