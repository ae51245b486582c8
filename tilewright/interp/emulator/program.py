"""A ``ThreadKernel`` compiled once into nested closures (cached per kernel object): variable,
register and shared-memory slots, and the compilers of each statement family as mixins."""

from __future__ import annotations

import weakref

from ...ir import dtype as dt
from ...ir import expr as E
from ...ir import thread as th
from ...ir import tile as t
from ...ir.visitor import walk
from .async_ops import AsyncCompiler
from .errors import EmulatorError
from .exprs import ExprCompiler
from .matrix import MatrixCompiler
from .stmts import StmtCompiler
from .sync import SyncCompiler
from .tma_store import TmaStoreCompiler

_PROGRAMS: dict = {}


def _program(kernel: th.ThreadKernel) -> _Program:
    """The compiled program of ``kernel``, cached for the kernel object's lifetime (a kernel is
    treated as immutable: passes build new ones)."""
    key = id(kernel)
    hit = _PROGRAMS.get(key)
    if hit is not None and hit[0]() is kernel:
        return hit[1]
    prog = _Program(kernel)
    _PROGRAMS[key] = (weakref.ref(kernel), prog)
    weakref.finalize(kernel, _PROGRAMS.pop, key, None)
    return prog



# compilation


class _Program(ExprCompiler, StmtCompiler, AsyncCompiler, MatrixCompiler, SyncCompiler, TmaStoreCompiler):
    """A ``ThreadKernel`` compiled to closures."""

    def __init__(self, kernel: th.ThreadKernel):
        self.k = kernel
        self.var_slots: dict = {}
        self.nvars = 0
        self.nregs = 0
        self.ncache = 0
        self.cache_keys: dict = {}
        self.reg_slots: dict = {}
        self.global_params = [p for p in kernel.params if isinstance(p, t.Buffer)]
        self.global_index = {p: i for i, p in enumerate(self.global_params)}
        self.address_decls: list = []  # GlobalDecl buffers (T.make_tensor on an address): slots after the params
        self.shared: dict = {}  # Buffer -> (place index, byte offset, np dtype)
        self.shared_places: list = []
        self.shared_dtypes: set = set()
        self.invariant_vars: set = set()
        self.cooperative: bool | None = None  # run warp by warp (mode.needs_cooperation), decided on first run
        self.let_count: dict = {}
        for p in kernel.params:
            if isinstance(p, E.Var):
                self._var(p)
        for v in kernel.dyn_vars:
            self._var(v)
        self._var(kernel.thread_var)
        for bv in kernel.block_vars:
            self._var(bv)
        # thread index, block indices, scalar parameters and symbolic dims do not change during a
        # batch: expressions over them alone are evaluated once per batch (see _cached)
        self.invariant_vars.update(self.var_slots)

        def pre(s):
            if isinstance(s, t.LetStmt):
                self.let_count[s.var] = self.let_count.get(s.var, 0) + 1
            elif isinstance(s, th.SharedDecl):
                self._declare_shared(s)
            elif isinstance(s, th.GlobalDecl) and s.buffer not in self.global_index:
                self.global_index[s.buffer] = len(self.global_params) + len(self.address_decls)
                self.address_decls.append(s.buffer)

        walk(kernel.body, pre)
        self.body = self.stmt(kernel.body) or (lambda st: None)  # an empty kernel body does nothing
        self._grid = [self.expr(E.as_expr(g), None)[0] for g in kernel.grid]

    # ---------------------------------------------------------------- slots
    def _var(self, v) -> int:
        slot = self.var_slots.get(v)
        if slot is None:
            slot = self.var_slots[v] = self.nvars
            self.nvars += 1
        return slot

    def _reg(self, b) -> int:
        slot = self.reg_slots.get(b)
        if slot is None:
            slot = self.reg_slots[b] = self.nregs
            self.nregs += 1
        return slot

    def _declare_shared(self, s: th.SharedDecl) -> None:
        b = s.buffer
        nd = dt.to_numpy(b.dtype)
        sz = nd.itemsize
        n = b.shape[0]
        if s.offset % sz:
            raise EmulatorError(f"shared buffer {b.name} at byte offset {s.offset} is not aligned to its "
                                f"{sz}-byte elements", s.loc)
        if s.offset + n * sz > self.k.shared_bytes:
            raise EmulatorError(f"shared buffer {b.name} ({n} x {b.dtype} at byte {s.offset}) extends past the "
                                f"kernel's {self.k.shared_bytes} bytes of shared memory", s.loc)
        prev = self.shared.get(b)
        if prev is not None and prev[1] != s.offset:
            raise EmulatorError(f"shared buffer {b.name} is declared at two offsets", s.loc)
        self.shared[b] = (len(self.shared_places), s.offset, nd)
        self.shared_places.append((s.offset, sz))
        self.shared_dtypes.add(nd)

    def eval_grid(self, scalars: dict) -> tuple:
        class _G:  # the grid expressions read only scalar parameters and symbolic dims
            pass

        g = _G()
        g.vars = [None] * self.nvars
        for v, slot in self.var_slots.items():
            if v in scalars:
                g.vars[slot] = scalars[v]
        g.cache = [None] * self.ncache
        g.mask = None
        out = [int(f(g, None)) for f in self._grid]
        return tuple(out + [1] * (3 - len(out)))

