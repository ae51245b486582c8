"""The tile-op registry: what every layer needs to know about each tile operation, said once.

A tile operation (``Copy``, ``Fill``, ``Gemm``, ``Reduce``, ``Atomic``, ...) is a Tile IR statement
that acts on whole regions.  Generic passes (verifier, printer, uniformity, barrier insertion,
software pipelining) do not know the operations by name: they ask the op's ``TileOpDecl``, given
once here with ``declare``:

* ``regions(s)``: the regions it touches, each with its access mode ("r", "w" or "rw"), in a fixed
  order; ``exprs(s)``: the scalar expressions it holds besides the region starts;
* ``rebuild(s, region_fn, expr_fn)``: a copy (same ``uid``) with every region and expression mapped,
  or ``s`` itself when nothing changed;
* ``text(s)``: its printed form (``T.name(...)``, read back by the frontend for the built-in ops);
* ``binds(s)``: variables it defines for the statements after it (``return_prev``);
* ``collective(s)``: how errors name it when the whole thread set must perform it together, or
  None when one thread may (a scalar atomic); ``in_parallel``: allowed inside a ``T.Parallel``
  body; ``check(s)``: extra verifier checks (a ``CompileError`` with the kernel line).

The layers above give an op its meaning with ``register(op_type, layer, fn)``, in the file that
implements the layer (so the ir never imports them).  The layers and their hook signatures:

* ``"interp"``: ``fn(interpreter, s, ctx)`` executes ``s`` in the tile interpreter
  (``interp/tile.py``; the interpreter's ``_read_region``, ``_write_region``, ``_scalar`` and
  ``_tile_op_allowed`` are the helpers a hook uses);
* ``"expand"``: ``fn(s)`` returns the statement replacing ``s`` in ``passes/expand_tile_ops``
  (typically a ``T.Parallel`` loop), or None to keep it for the lowering;
* ``"lower"``: ``fn(lowering, s, env)`` returns the thread-IR statements of ``s`` in
  ``passes/lower_to_threads`` (``lowering.ctx`` is the ``LoweringContext``).

So a new tile op is its node class and its ``declare`` (ir), plus one hook per layer that runs it:
an ``expand`` hook alone makes it run everywhere the compiler goes (it becomes a loop the rest of
the pipeline knows), a ``lower`` hook gives it its own per-thread code, and an ``interp`` hook runs
it on ``target="interpret"``.  Statements that are not tile ops (loops, branches, allocations,
scalar stores, partitions, annotations) are listed in ``STRUCTURAL``; ``tests/test_tile_op_registry``
checks that every Tile IR statement class is one or the other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from . import tile as t

LAYERS = ("interp", "expand", "lower")

# Tile IR statements that are not tile operations: control flow, declarations, scalar statements
STRUCTURAL = (t.SeqStmt, t.Alloc, t.Kernel, t.For, t.ParallelFor, t.IfThenElse, t.ThreadPartition, t.BufferStore,
              t.LetStmt, t.Annotate, t.Evaluate)


def _no_exprs(s) -> list:
    return []


def _no_check(s) -> None:
    return None


@dataclass(frozen=True)
class TileOpDecl:
    """What the generic passes know about one tile operation (see the module docstring)."""

    name: str  # the op in messages: ``T.<name>``
    regions: Callable  # s -> [(Region, "r" | "w" | "rw"), ...]
    rebuild: Callable  # (s, region_fn, expr_fn) -> Stmt
    text: Callable  # s -> str
    exprs: Callable = _no_exprs  # s -> [Expr, ...] besides region starts
    collective: Callable | None = None  # s -> str | None; default "T.<name>"
    in_parallel: bool = False
    check: Callable = _no_check  # s -> None, raising CompileError
    binds: Callable = _no_exprs  # s -> [Var, ...] it defines for the statements after it


_decls: dict = {}
_hooks: dict = {layer: {} for layer in LAYERS}


def declare(op_type: type, decl: TileOpDecl) -> TileOpDecl:
    """Make ``op_type`` (a ``tile.Stmt`` subclass) a tile operation."""
    if not (isinstance(op_type, type) and issubclass(op_type, t.Stmt)):
        raise TypeError(f"{op_type!r} is not a Tile IR statement class")
    if op_type in STRUCTURAL:
        raise TypeError(f"{op_type.__name__} is a structural statement, not a tile operation")
    _decls[op_type] = decl
    return decl


def register(op_type: type, layer: str, fn: Callable) -> Callable:
    """Give the declared tile op ``op_type`` its meaning in ``layer`` (one of ``LAYERS``)."""
    if layer not in LAYERS:
        raise ValueError(f"unknown layer {layer!r}; the layers are {', '.join(LAYERS)}")
    if op_type not in _decls:
        raise TypeError(f"{op_type.__name__} is not a declared tile op: call tile_ops.declare first")
    _hooks[layer][op_type] = fn
    return fn


def unregister(op_type: type) -> None:
    """Forget a tile op and its hooks (tests that define a throw-away op)."""
    _decls.pop(op_type, None)
    for hooks in _hooks.values():
        hooks.pop(op_type, None)


def decl_of(s) -> TileOpDecl | None:
    """The declaration of statement ``s``'s type, or None when ``s`` is not a tile op."""
    return _decls.get(type(s))


def hook(op_type: type, layer: str) -> Callable | None:
    return _hooks[layer].get(op_type)


def hooks(layer: str) -> dict:
    """``{op_type: fn}`` of ``layer`` (a copy)."""
    return dict(_hooks[layer])


def declared() -> tuple:
    return tuple(_decls)


# ---------------------------------------------------------------------------------- queries


def region_accesses(s) -> list:
    """``[(Region, mode), ...]`` of a tile op; [] for any other statement."""
    d = _decls.get(type(s))
    return d.regions(s) if d is not None else []


def regions_of(s) -> list:
    return [r for r, _ in region_accesses(s)]


def op_exprs(s) -> list:
    """Scalar expressions a tile op holds besides its region starts ([] for other statements)."""
    d = _decls.get(type(s))
    return d.exprs(s) if d is not None else []


def op_binds(s) -> list:
    """Variables a tile op defines for the statements after it ([] for other statements)."""
    d = _decls.get(type(s))
    return d.binds(s) if d is not None else []


def buffer_accesses(s) -> list:
    """``[(buffer, is_write), ...]`` of a tile op's regions; a read-write region gives both."""
    out = []
    for r, mode in region_accesses(s):
        if "r" in mode:
            out.append((r.buffer, False))
        if "w" in mode:
            out.append((r.buffer, True))
    return out


def rebuild_op(s, region_fn: Callable, expr_fn: Callable):
    """``s`` with every region mapped by ``region_fn`` and every expression by ``expr_fn``."""
    return _decls[type(s)].rebuild(s, region_fn, expr_fn)


def op_text(s) -> str:
    return _decls[type(s)].text(s)


def collective_name(s) -> str | None:
    """How messages name tile op ``s`` when a whole thread set must perform it; None when one
    thread may, or when ``s`` is not a tile op."""
    d = _decls.get(type(s))
    if d is None:
        return None
    return d.collective(s) if d.collective is not None else f"T.{d.name}"


# ---------------------------------------------------------------------------- built-in ops


def _region_str(r) -> str:
    from .printer import region_str

    return region_str(r)


def _expr_str(e) -> str:
    from .printer import expr_str

    return expr_str(e)


def _rebuild(node, **changes):
    from .visitor import rebuild

    return rebuild(node, **changes)


def _copy_rebuild(s: t.Copy, rf, ef):
    return _rebuild(s, src=rf(s.src), dst=rf(s.dst))


def _copy_text(s: t.Copy) -> str:
    if s.user_sync:
        bar, idx = s.barrier
        return f"T.tma_copy({_region_str(s.src)}, {_region_str(s.dst)}, barrier={bar.name}[{_expr_str(idx)}])"
    extra = (", disable_tma=True" if s.disable_tma else "") + (
        "" if s.coalesced_width is None else f", coalesced_width={s.coalesced_width}") + (
        "" if s.multicast is None else f", multicast={s.multicast:#x}")
    return f"T.copy({_region_str(s.src)}, {_region_str(s.dst)}{extra})"


def _copy_check(s):
    from .verifier import check_copy

    check_copy(s)


declare(t.Copy, TileOpDecl(
    "copy", regions=lambda s: [(s.src, "r"), (s.dst, "w")], rebuild=_copy_rebuild, text=_copy_text,
    check=_copy_check))

declare(t.Fill, TileOpDecl(
    "fill", regions=lambda s: [(s.dst, "w")], exprs=lambda s: [s.value],
    rebuild=lambda s, rf, ef: _rebuild(s, dst=rf(s.dst), value=ef(s.value)),
    text=lambda s: f"T.fill({_region_str(s.dst)}, {_expr_str(s.value)})"))

_POLICY = {"square": "Square", "fullrow": "FullRow", "fullcol": "FullCol"}


def _gemm_text(s: t.Gemm) -> str:
    return (f"T.gemm({_region_str(s.a)}, {_region_str(s.b)}, {_region_str(s.c)}, transpose_A={s.trans_a}, "
            f"transpose_B={s.trans_b}, policy=T.GemmWarpPolicy.{_POLICY[s.policy]}, clear_accum={s.clear_accum}, "
            f"k_pack={s.k_pack})")


def _gemm_check(s):
    from .verifier import check_gemm

    check_gemm(s)


# the accumulator is listed as written only: it is a fragment, which no barrier or ring tracks
declare(t.Gemm, TileOpDecl(
    "gemm", regions=lambda s: [(s.a, "r"), (s.b, "r"), (s.c, "w")],
    rebuild=lambda s, rf, ef: _rebuild(s, a=rf(s.a), b=rf(s.b), c=rf(s.c)), text=_gemm_text, check=_gemm_check))


def _reduce_rebuild(s: t.Reduce, rf, ef):
    src, dst = rf(t.Region.full(s.src)), rf(t.Region.full(s.dst))
    if src.buffer is s.src and dst.buffer is s.dst:
        return s
    return _rebuild(s, src=src.buffer, dst=dst.buffer)


def _reduce_check(s):
    from .verifier import check_reduce

    check_reduce(s)


declare(t.Reduce, TileOpDecl(
    "reduce", regions=lambda s: [(t.Region.full(s.src), "r"), (t.Region.full(s.dst), "rw")],
    rebuild=_reduce_rebuild, check=_reduce_check,
    text=lambda s: f"T.reduce_{s.op}({s.src.name}, {s.dst.name}, dim={s.dim}, clear={s.clear}"
    + (", nan_propagate=True)" if s.nan_propagate else ")")))


def _atomic_tile(s: t.Atomic) -> bool:
    return isinstance(s.value, t.Region)


def _atomic_rebuild(s: t.Atomic, rf, ef):
    return _rebuild(s, dst=rf(s.dst), value=rf(s.value) if _atomic_tile(s) else ef(s.value))


def _atomic_text(s: t.Atomic) -> str:
    val = _region_str(s.value) if _atomic_tile(s) else _expr_str(s.value)
    order = "" if s.order == "relaxed" else f", memory_order={s.order!r}"
    call = f"T.atomic_{s.op}({_region_str(s.dst)}, {val}{order}"
    return f"{s.result.name} = {call}, return_prev=True)" if s.result is not None else f"{call})"


declare(t.Atomic, TileOpDecl(
    "atomic", regions=lambda s: [(s.dst, "w")] + ([(s.value, "r")] if _atomic_tile(s) else []),
    exprs=lambda s: [] if _atomic_tile(s) else [s.value], rebuild=_atomic_rebuild, text=_atomic_text,
    collective=lambda s: "a tile T.atomic" if _atomic_tile(s) else None, in_parallel=True,
    binds=lambda s: [] if s.result is None else [s.result]))  # return_prev binds the old value
