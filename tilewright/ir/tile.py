"""Tile IR: buffers, regions and statements that describe what one thread block does with tiles.

A ``PrimFunc`` holds parameters (global ``Buffer``s and scalar ``Var``s) and a body whose root is a
``Kernel`` launch.  Inside it, buffers live in a scope: ``global`` (parameters), ``shared`` (one copy
per block), ``fragment`` (a tile spread over the block's threads, layout inferred by the compiler),
``local`` (per-thread array) or ``var`` (a per-thread scalar).  Tile operations (``Copy``, ``Fill``,
``Gemm``, ``Reduce``, ``Atomic``) act on whole regions (each is declared in ``ir.tile_ops``, which
the generic passes ask about it); ``ParallelFor`` is an elementwise loop nest over a tile that the
compiler partitions over threads.

Nodes are plain mutable objects; passes build new trees rather than editing shared ones.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from ..errors import SourceLocation
from . import dtype as dt
from .expr import Expr, Load, Var, as_expr, const_value
from .plans import Plans, new_uid

SCOPES = ("global", "shared", "fragment", "local", "var")

_ids = itertools.count()


class Buffer:
    """A named, typed, shaped array in one memory scope.

    ``shape`` entries are Python ints or ``Var``s (symbolic dimensions of global buffers).
    ``strides`` (elements) are derived row-major unless given.
    """

    __slots__ = ("attrs", "dtype", "loc", "name", "scope", "shape", "strides", "uid")
    __hash__ = object.__hash__

    def __init__(self, name: str, shape, dtype: str, scope: str, strides=None, loc=None):
        if scope not in SCOPES:
            raise ValueError(f"unknown scope {scope!r}")
        self.name = name
        self.shape = tuple(shape)
        self.dtype = dt.canon(dtype)
        self.scope = scope
        self.strides = tuple(strides) if strides is not None else row_major_strides(self.shape)
        self.uid = next(_ids)
        self.loc = loc
        self.attrs: dict[str, Any] = {}

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def static_shape(self) -> tuple[int, ...] | None:
        if all(isinstance(s, int) for s in self.shape):
            return self.shape  # type: ignore[return-value]
        return None

    def numel(self) -> int:
        n = 1
        for s in self.shape:
            if not isinstance(s, int):
                raise ValueError(f"buffer {self.name} has a symbolic shape")
            n *= s
        return n

    # kernel-code conveniences ------------------------------------------------------------
    # What ``buf[i, j]`` means in kernel source (a ``Load``, or a ``Region`` when a slice is
    # involved) is the frontend's rule; the frontend installs it here when imported, so that the
    # IR never imports the layer above it.
    subscript_rule = None

    def __getitem__(self, idx):
        rule = Buffer.subscript_rule
        if rule is None:
            raise TypeError(f"subscripting buffer {self.name} needs the frontend: import tilewright first")
        return rule(self, idx)

    @property
    def data(self) -> DataPointer:
        """TVM's ``Buffer.data``: this buffer's memory, to declare another view of it in a kernel
        (``T.Tensor(shape, dtype, buf.data)``)."""
        return DataPointer(self)

    def __repr__(self) -> str:
        return f"Buffer({self.name}, {self.shape}, {self.dtype}, {self.scope})"


class DataPointer:
    """``buf.data``: the memory of ``buffer``; only meaningful as the ``data`` of ``T.Tensor``."""

    __slots__ = ("buffer",)

    def __init__(self, buffer: Buffer):
        self.buffer = buffer

    def __repr__(self) -> str:
        return f"{self.buffer.name}.data"


def stride_mismatch(buf: Buffer, strides: tuple, bound: dict) -> str | None:
    """For a parameter declared with ``T.Tensor(strides=...)``: None when an argument's element
    ``strides`` fit the declared ones (size-1 dimensions excepted), binding symbolic strides into
    ``bound``; otherwise what is wrong (the caller names the argument).  The one copy of this rule
    for the GPU runtime and the CPU backends."""
    if not buf.attrs.get("explicit_strides"):
        return None
    for d, (want, got, n) in enumerate(zip(buf.strides, strides, buf.shape)):
        got = int(got)
        if isinstance(want, Var):
            if not 0 < got < 2**31:
                return f"has stride {got} in dimension {d}; the kernel needs a positive stride that fits in int32"
            if bound.setdefault(want, got) != got:
                return (f"has stride {got} in dimension {d}, but the symbolic stride {want.name} was already bound "
                        f"to {bound[want]}")
        elif want != got and (n if isinstance(n, int) else bound.get(n)) != 1:  # a symbolic size: its bound value
            declared = ", ".join(getattr(x, "name", str(x)) for x in buf.strides)
            return (f"has strides {tuple(int(x) for x in strides)} (elements), the kernel expects ({declared}) "
                    "(T.Tensor(strides=...)); pass a tensor with those strides")
    return None


def row_major_strides(shape) -> tuple:
    strides = []
    acc: Any = 1
    for s in reversed(shape):
        strides.append(acc)
        acc = acc * s if not (isinstance(acc, int) and acc == 1) else s
    return tuple(reversed(strides))


@dataclass
class Region:
    """A rectangular part of a buffer: ``starts`` (exprs) and ``extents`` (ints, one per buffer dim).

    A dimension indexed by a scalar (``A[i, k:k+32]``) has extent 1 and is listed in ``squeezed``.
    """

    buffer: Buffer
    starts: tuple
    extents: tuple
    squeezed: tuple = ()

    @property
    def shape(self) -> tuple:
        """Extents with squeezed dims removed: the tile shape this region denotes."""
        return tuple(e for d, e in enumerate(self.extents) if d not in self.squeezed)

    @staticmethod
    def full(buf: Buffer) -> Region:
        return Region(buf, tuple(as_expr(0) for _ in buf.shape), tuple(buf.shape), ())

    def is_full(self) -> bool:
        return all(const_value(s) == 0 for s in self.starts) and same_dims(self.extents, self.buffer.shape)


def same_dim(a, b) -> bool:
    """Two dimension sizes are the same: equal ints, or the same symbolic variable."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return a is b


def same_dims(a, b) -> bool:
    return len(a) == len(b) and all(same_dim(x, y) for x, y in zip(a, b))


# --------------------------------------------------------------------------------------------
# statements


class Stmt:
    """Base of every statement node.  ``uid`` (assigned at construction, carried over by
    ``ir.visitor.rebuild``) is the key of the node's entries in ``ir.plans.Plans``."""

    loc: SourceLocation | None = None

    def __post_init__(self):
        self.uid = new_uid()


@dataclass(eq=False)
class SeqStmt(Stmt):
    stmts: list
    loc: Any = None


@dataclass(eq=False)
class Alloc(Stmt):
    buffer: Buffer
    init: Any = None  # for scope "var": initial value expression
    loc: Any = None


@dataclass(eq=False)
class Kernel(Stmt):
    grid: tuple  # 1-3 exprs
    threads: tuple  # 1-3 ints
    block_vars: tuple  # Vars bound to blockIdx.x/y/z
    body: Any
    loc: Any = None
    attrs: dict = field(default_factory=dict)

    @property
    def num_threads(self) -> int:
        n = 1
        for t in self.threads:
            n *= t
        return n


@dataclass(eq=False)
class For(Stmt):
    """A sequential loop: kind is ``serial``, ``unroll`` or ``pipelined`` (``num_stages``)."""

    var: Var
    start: Any
    extent: Any
    body: Any
    kind: str = "serial"
    num_stages: int = 0
    loc: Any = None
    attrs: dict = field(default_factory=dict)


@dataclass(eq=False)
class ParallelFor(Stmt):
    """``for i, j in T.Parallel(M, N)``: every iteration independent, spread over the block's threads."""

    vars: tuple
    extents: tuple  # ints
    body: Any
    loc: Any = None
    coalesced_width: int | None = None  # most elements per vector access (``coalesced_width=``)


@dataclass(eq=False)
class IfThenElse(Stmt):
    cond: Expr
    then_body: Any
    else_body: Any = None
    loc: Any = None


@dataclass(eq=False)
class ThreadPartition(Stmt):
    """A region run by threads ``base .. base+count-1`` of the block only (a warp-aligned range:
    producer / consumer warps or warpgroups).  Tile operations inside are performed by those
    threads between them, and barriers inside synchronize those threads only (a named barrier).
    ``role`` names the region ("producer", "consumer", "ws1", "threads 0..63", ...) for printing
    and errors.  Made by the frontend from ``T.ws(id)`` and from ``if`` on the thread index that
    selects such a range."""

    base: int
    count: int
    role: str
    body: Any
    loc: Any = None

    def cond(self, tid):
        """The thread-IR guard ``base <= tid < base + count`` (simplified at the block's edges)."""
        from .expr import binary

        lo = binary(">=", tid, self.base) if self.base else None
        hi = binary("<", tid, self.base + self.count)
        return hi if lo is None else binary("and", lo, hi)


@dataclass(eq=False)
class BufferStore(Stmt):
    buffer: Buffer
    indices: tuple
    value: Expr
    loc: Any = None


@dataclass(eq=False)
class LetStmt(Stmt):
    """Binds ``var`` to ``value`` for the statements that follow it in the same sequence."""

    var: Var
    value: Expr
    loc: Any = None


@dataclass(eq=False)
class Copy(Stmt):
    """Copy a tile.  ``mode`` is "sync", or "async" for a global -> shared copy issued by a
    software pipeline (completion is then managed by explicit AsyncCommit/AsyncWait), or "tma" for
    one issued as tensor-memory-accelerator loads that arrive on mbarrier ``barrier`` =
    (buffer, index) (completion: ``MbarrierWait``)."""

    src: Region
    dst: Region
    loc: Any = None
    mode: str = "sync"
    barrier: Any = None
    disable_tma: bool = False  # ``T.copy(disable_tma=True)``: never issued as TMA loads
    user_sync: bool = False  # ``T.tma_copy``: one expect_tx of all its bytes on ``barrier``; the program arrives, waits
    coalesced_width: int | None = None  # most elements per vector access
    # mode "tma" only: a ctaMask (int) of the thread-block cluster: the tile lands at the same place in each
    # of those blocks, its bytes on the mbarrier at ``barrier``'s place there, and the issuing block's
    # barrier expects the bytes of all of them (passes/cluster_multicast.py)
    multicast: Any = None


@dataclass(eq=False)
class Fill(Stmt):
    dst: Region
    value: Expr
    loc: Any = None


@dataclass(eq=False)
class Gemm(Stmt):
    """``C += op(A) @ op(B)`` on tiles; A and B in shared or fragment, C a fragment."""

    a: Region
    b: Region
    c: Region
    trans_a: bool = False
    trans_b: bool = False
    policy: str = "square"
    clear_accum: bool = False
    k_pack: int = 1
    loc: Any = None


@dataclass(eq=False)
class Reduce(Stmt):
    """``dst = op over dim of src`` (``clear=False`` folds the old ``dst`` in)."""

    op: str  # "sum", "max", "min", "abssum", "absmax"
    src: Buffer
    dst: Buffer
    dim: int
    clear: bool = True
    loc: Any = None
    nan_propagate: bool = False  # max/min/absmax: a NaN wins (default: NaNs are dropped, as fmaxf does)


@dataclass(eq=False)
class Atomic(Stmt):
    """Atomic read-modify-write of one element (``indices``) or of a whole region with a tile value."""

    op: str  # "add", "max", "min"
    dst: Region
    value: Any  # Expr (scalar form) or Region (tile form)
    loc: Any = None
    order: str = "relaxed"  # memory order: relaxed, acquire, release, acq_rel, seq_cst
    result: Var | None = None  # scalar form: bound to the value before the update, like a LetStmt


@dataclass(eq=False)
class Annotate(Stmt):
    kind: str  # "swizzle" or "layout"
    attrs: dict
    loc: Any = None


@dataclass(eq=False)
class Evaluate(Stmt):
    """An expression evaluated for its effect (reserved; kept so the printer can show it)."""

    value: Any
    loc: Any = None


@dataclass(eq=False)
class PrimFunc:
    name: str
    params: list  # Buffer (global) or Var (scalar)
    body: Any
    dyn_vars: list = field(default_factory=list)  # symbolic dims appearing in param shapes
    attrs: dict = field(default_factory=dict)
    loc: Any = None
    plans: Plans = field(default_factory=Plans)  # what the passes decided (ir.plans)

    def buffer_params(self) -> list:
        return [p for p in self.params if isinstance(p, Buffer)]

    @property
    def buffer_map(self) -> dict:
        """TileLang's ``PrimFunc.buffer_map`` (parameter -> its buffer): here a tensor parameter is its buffer."""
        return {p: p for p in self.params if isinstance(p, Buffer)}

    def script(self) -> str:
        from .printer import print_func

        return print_func(self)

    def __str__(self) -> str:
        return self.script()


def load(buf: Buffer, *indices) -> Load:
    return Load(buf, tuple(as_expr(i) for i in indices))
