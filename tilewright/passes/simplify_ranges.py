"""Pass ``simplify_ranges`` (thread IR): remove checks that integer ranges prove redundant.

Needs: a ``ThreadKernel``.
Guarantees: the same behaviour, with comparisons whose outcome is decided by the value ranges of
their operands folded to constants, ``x % m`` and ``x // m`` simplified when ``0 <= x < m``,
``x // d`` and ``x % d`` split over sums (``(tid + 128) // 4`` becomes ``tid // 4 + 32``, see
``index_algebra``) so that per-chunk addresses share one base, branches on constant conditions
removed and always-true predicates of vector/async copies dropped.  Ranges come from the thread
index ([0, threads)), block indices ([0, grid) when the grid is static), loop variables, let-bound
values and, inside an ``if``, the bounds its condition implies (``k + 3 < 128``, ``tx >= 128``), by interval
arithmetic on non-negative integer expressions.  This is what removes the bounds masks of tiles
that divide the problem evenly, including those of the prefetching stages of a pipelined loop.
Last, integer arithmetic whose range may leave 32 bits is done in 64 (``offset_width``): element
offsets of tensors of 2^31 elements or more, or of dynamic shapes; static shapes below 2^31 elements
keep their 32-bit code.  Dynamic sizes are taken to lie in [0, 2^31 - 1] (the launch refuses others).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace

from ..ir import expr as E
from ..ir import thread as th
from ..ir import tile as t
from ..target.grid import GRID_LIMITS
from .analysis import affine_coeffs
from .index_algebra import split_div_mod
from .offset_width import fit, fit_index, is_large

INF = float("inf")


# the launch refuses dynamic sizes outside [0, 2^31 - 1] (they are ``int`` kernel parameters); block
# indices stay below the hardware's grid limits (x: 2^31 - 1 blocks, y and z: 65535)
DYN_MAX = 2**31 - 1
DYN64_MAX = 2**63 - 1  # a size declared T.dynamic(name, "int64") is a 64-bit kernel parameter


def simplify_ranges(kernel: th.ThreadKernel) -> th.ThreadKernel:
    ranges: dict = {kernel.thread_var: (0, kernel.num_threads - 1)}
    for v in kernel.dyn_vars:
        ranges[v] = (0, DYN_MAX if v.dtype != "int64" else DYN64_MAX)
    s = _Simplifier(ranges)
    for d, (v, g) in enumerate(zip(kernel.block_vars, kernel.grid)):
        gv = E.const_value(g)
        if isinstance(gv, int):
            ranges[v] = (0, gv - 1)
        else:
            r = s.rng(E.as_expr(g))
            ranges[v] = (0, min(r[1], GRID_LIMITS[d]) - 1) if r is not None else (0, GRID_LIMITS[d] - 1)
    s.cache = {}
    kernel.body = s.stmt(kernel.body)
    return kernel


def _conjuncts(cond):
    if isinstance(cond, E.BinOp) and cond.op == "and":
        return _conjuncts(cond.a) + _conjuncts(cond.b)
    return [cond]


def _add(a, b):
    return (a[0] + b[0], a[1] + b[1])


class _Simplifier:
    def __init__(self, ranges: dict):
        self.ranges = ranges
        self.cache: dict = {}

    # ---------------------------------------------------------------- ranges
    def rng(self, e):
        """(lo, hi) bounds of an integer expression, or None when unknown."""
        if isinstance(e, E.Const):
            if isinstance(e.value, bool) or not isinstance(e.value, int):
                return None
            return (e.value, e.value)
        if isinstance(e, E.Var):
            return self.ranges.get(e)
        if not isinstance(e, E.Expr) or e.dtype not in ("int32", "int64", "uint32"):
            return None
        key = id(e)
        if key in self.cache:
            return self.cache[key][1]
        r = self._rng(e)
        self.cache[key] = (e, r)  # keep e alive so its id stays unique
        return r

    def _rng(self, e):
        if isinstance(e, E.BinOp):
            a, b = self.rng(e.a), self.rng(e.b)
            if a is None or b is None:
                return None
            op = e.op
            if op == "+":
                return _add(a, b)
            if op == "-":
                return (a[0] - b[1], a[1] - b[0])
            if op == "*":
                cands = [x * y for x in a for y in b
                         if not (x in (INF, -INF) and y == 0 or y in (INF, -INF) and x == 0)]
                return (min(cands), max(cands)) if cands else None
            if op == "//" and b[0] > 0 and a[0] >= 0:
                return (a[0] // b[1] if b[1] != INF else 0, a[1] // b[0] if a[1] != INF else INF)
            if op == "%" and b[0] > 0 and a[0] >= 0:
                if a[1] < b[0]:
                    return a
                return (0, b[1] - 1 if b[1] != INF else INF)
            if op == "min":
                return (min(a[0], b[0]), min(a[1], b[1]))
            if op == "max":
                return (max(a[0], b[0]), max(a[1], b[1]))
            if op in ("^", "|") and a[0] >= 0 and b[0] >= 0 and a[1] != INF and b[1] != INF:
                top = 1
                while top <= max(a[1], b[1]):
                    top <<= 1
                return (0, top - 1)
            if op == "&" and a[0] >= 0 and b[0] >= 0:
                return (0, min(a[1], b[1]))
            if op == ">>" and a[0] >= 0 and b[0] == b[1]:
                return (a[0] >> b[0], a[1] >> b[0] if a[1] != INF else INF)
            return None
        if isinstance(e, E.Cast):
            return self.rng(e.a)
        if isinstance(e, E.Select):
            a, b = self.rng(e.a), self.rng(e.b)
            if a is None or b is None:
                return None
            return (min(a[0], b[0]), max(a[1], b[1]))
        return None

    # ---------------------------------------------------------------- expressions
    def expr(self, e):
        if not isinstance(e, E.Expr):
            return e
        if isinstance(e, (E.Var, E.Const)):
            return e
        if isinstance(e, E.BinOp):
            a, b = self.expr(e.a), self.expr(e.b)
            if e.op in ("<", "<=", ">", ">=", "==", "!="):
                decided = self._decide(e.op, a, b)
                if decided is not None:
                    return E.Const(decided, "bool")
            if e.op in ("%", "//"):
                ra, rb = self.rng(a), self.rng(b)
                if ra is not None and rb is not None and ra[0] >= 0 and rb[0] > 0 and ra[1] < rb[0]:
                    return a if e.op == "%" else E.Const(0, e.dtype)
                if isinstance(b, E.Const) and isinstance(b.value, int) and not isinstance(b.value, bool):
                    split = split_div_mod(e.op, a, b.value, self.rng)
                    if split is not None:
                        return self.expr(split)
            if e.op == "and":
                if isinstance(a, E.Const):
                    return b if a.value else a
                if isinstance(b, E.Const):
                    return a if b.value else b
            if e.op == "or":
                if isinstance(a, E.Const):
                    return a if a.value else b
                if isinstance(b, E.Const):
                    return b if b.value else a
            if e.op in ("min", "max"):
                ra, rb = self.rng(a), self.rng(b)
                if ra is not None and rb is not None:
                    if (e.op == "min" and ra[1] <= rb[0]) or (e.op == "max" and ra[0] >= rb[1]):
                        return a
                    if (e.op == "min" and rb[1] <= ra[0]) or (e.op == "max" and rb[0] >= ra[1]):
                        return b
            if a is e.a and b is e.b:
                return e
            return E.binary(e.op, a, b)
        if isinstance(e, E.UnOp):
            a = self.expr(e.a)
            return e if a is e.a else E.unary(e.op, a)
        if isinstance(e, E.Select):
            c = self.expr(e.cond)
            if isinstance(c, E.Const):
                return self.expr(e.a if c.value else e.b)
            a, b = self.expr(e.a), self.expr(e.b)
            return e if (c is e.cond and a is e.a and b is e.b) else E.select(c, a, b)
        if isinstance(e, E.Cast):
            a = self.expr(e.a)
            return e if a is e.a else E.cast(e.dtype, a)
        if isinstance(e, E.Call):
            args = [self.expr(x) for x in e.args]
            return e if all(x is y for x, y in zip(args, e.args)) else E.call(e.name, args, e.dtype)
        if isinstance(e, E.Load):
            idx = tuple(self.expr(i) for i in e.indices)
            return e if all(x is y for x, y in zip(idx, e.indices)) else E.Load(e.buffer, idx)
        if isinstance(e, E.Shuffle):
            v = self.expr(e.value)
            return e if v is e.value else E.Shuffle(v, e.mask, e.width)
        return e

    def _decide(self, op, a, b):
        ra, rb = self.rng(a), self.rng(b)
        if ra is None or rb is None:
            return None
        if op == "<":
            return True if ra[1] < rb[0] else False if ra[0] >= rb[1] else None
        if op == "<=":
            return True if ra[1] <= rb[0] else False if ra[0] > rb[1] else None
        if op == ">":
            return True if ra[0] > rb[1] else False if ra[1] <= rb[0] else None
        if op == ">=":
            return True if ra[0] >= rb[1] else False if ra[1] < rb[0] else None
        if op == "==" and ra[0] == ra[1] == rb[0] == rb[1]:
            return True
        if op in ("==", "!=") and (ra[1] < rb[0] or rb[1] < ra[0]):
            return op == "!="
        return None

    # ---------------------------------------------------------------- branch facts
    @contextmanager
    def _assuming(self, cond):
        """Within the block: variable bounds implied by ``cond`` (upper bounds from ``v*a + c < n``
        conjuncts).  Cached ranges are set aside, since they may have been computed without it."""
        saved_ranges, saved_cache = dict(self.ranges), self.cache
        self.cache = {}
        for conj in _conjuncts(cond):
            bound = self._upper_bound(conj)
            if bound is not None:
                var, hi = bound
                lo, old_hi = self.ranges[var]
                self.ranges[var] = (lo, min(old_hi, hi))
            bound = self._lower_bound(conj)
            if bound is not None:  # the thread range of a partition: ``tx >= 128``
                var, lo = bound
                old_lo, hi = self.ranges[var]
                self.ranges[var] = (max(old_lo, lo), hi)
        try:
            yield
        finally:
            self.ranges, self.cache = saved_ranges, saved_cache

    def _upper_bound(self, cond):
        if not isinstance(cond, E.BinOp) or cond.op not in ("<", "<="):
            return None
        coeffs = affine_coeffs(cond.a)
        limit = self.rng(cond.b)
        if coeffs is None or limit is None or limit[1] == INF:
            return None
        vars_ = [v for v in coeffs if v is not None and coeffs[v] != 0]
        if len(vars_) != 1 or coeffs[vars_[0]] <= 0 or vars_[0] not in self.ranges:
            return None
        var, scale = vars_[0], coeffs[vars_[0]]
        top = limit[1] - coeffs[None] - (1 if cond.op == "<" else 0)  # scale * var <= top
        return var, top // scale

    def _lower_bound(self, cond):
        """``var >= c`` / ``var > c`` for a variable with a known range and a constant ``c``."""
        if not isinstance(cond, E.BinOp) or cond.op not in (">=", ">") or not isinstance(cond.a, E.Var):
            return None
        c = E.const_value(cond.b)
        if not isinstance(c, int) or isinstance(c, bool) or cond.a not in self.ranges:
            return None
        return cond.a, c + (1 if cond.op == ">" else 0)

    # ---------------------------------------------------------------- statements
    def index(self, buf, e):
        """An element offset into ``buf``, simplified, in 64 bits where 32 may not hold it."""
        large = buf.scope == "global" and is_large(buf)
        return fit_index(self.expr(e), self.rng, large)

    def value(self, e, dtype):
        """A value stored or bound: its offsets and comparisons fitted (see ``index``); arithmetic
        widened on the way is converted back to ``dtype``, as C converts on assignment."""
        w = fit(e, self.rng)
        return w if not isinstance(w, E.Expr) or w.dtype == dtype else E.cast(dtype, w)

    def stmt(self, s):
        if s is None:
            return None
        if isinstance(s, t.SeqStmt):
            out = []
            for x in s.stmts:
                y = self.stmt(x)
                if y is None:
                    continue
                if isinstance(y, t.SeqStmt):
                    out.extend(y.stmts)
                else:
                    out.append(y)
            return t.SeqStmt(out, s.loc)
        if isinstance(s, t.LetStmt):
            v = self.expr(s.value)
            r = self.rng(v)
            if r is not None:
                self.ranges[s.var] = r
            return t.LetStmt(s.var, self.value(v, s.var.dtype), s.loc)
        if isinstance(s, t.For):
            start, extent = self.expr(s.start), self.expr(s.extent)
            rs, re_ = self.rng(start), self.rng(extent)
            if rs is not None and re_ is not None:
                self.ranges[s.var] = (rs[0], rs[1] + re_[1] - 1)
            elif rs is not None:
                self.ranges[s.var] = (rs[0], INF)
            return t.For(s.var, start, extent, self.stmt(s.body), s.kind, s.num_stages, s.loc, s.attrs)
        if isinstance(s, t.IfThenElse):
            c = self.expr(s.cond)
            if isinstance(c, E.Const):
                return self.stmt(s.then_body) if c.value else self.stmt(s.else_body)
            with self._assuming(c):
                then_body = self.stmt(s.then_body)
            return t.IfThenElse(fit(c, self.rng), then_body, self.stmt(s.else_body), s.loc)
        if isinstance(s, t.BufferStore):
            v = self.expr(s.value)
            return t.BufferStore(s.buffer, tuple(self.index(s.buffer, i) for i in s.indices),
                                 self.value(v, getattr(v, "dtype", None)), s.loc)
        if isinstance(s, (th.VecCopy, th.AsyncCopy)):
            pred = self.expr(s.pred) if s.pred is not None else None
            if isinstance(pred, E.Const):
                if pred.value:
                    pred = None
                elif isinstance(s, th.VecCopy) and s.dst.scope != "local":
                    return None
            return replace(s, dst_index=self.index(s.dst, s.dst_index), src_index=self.index(s.src, s.src_index),
                           pred=fit(pred, self.rng))
        if isinstance(s, th.LoadMatrix):
            return replace(s, src_index=self.expr(s.src_index))
        if isinstance(s, th.StoreMatrix):
            return replace(s, dst_index=self.expr(s.dst_index))
        if isinstance(s, th.TmaLoad):
            return replace(s, dst_index=self.expr(s.dst_index), coords=tuple(self.expr(c) for c in s.coords),
                           bar_index=self.expr(s.bar_index))
        if isinstance(s, th.MbarrierWait):
            return replace(s, index=self.expr(s.index), parity=self.expr(s.parity))
        if isinstance(s, th.PrefetchL2):  # (an element offset: 64-bit where 32 may not hold it, as a load's)
            buf = s.load.buffer
            return replace(s, load=E.Load(buf, (self.index(buf, s.load.indices[0]),)))
        if isinstance(s, th.AtomicRMW):
            v = self.expr(s.value)
            return replace(s, index=self.index(s.buffer, s.index), value=self.value(v, v.dtype))
        return s
