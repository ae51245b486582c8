"""Reducer epochs: the reducer markers of a freshly read prim_func become Tile IR.

Needs: the Tile IR straight from the parser (with ``frontend/reducer`` markers).
Guarantees: no marker is left; every reducer ``acc`` follows one epoch per dynamic execution --
``T.reducer_init`` (or, legacy, ``T.clear`` / ``T.fill``), updates inside ``T.Parallel`` loops,
``T.finalize_reducer`` -- and is rewritten as:

* at the allocation: the per-thread partials (a flat ``local`` buffer);
* at the init: the partials set to the op's identity in every thread, and the starting value (if
  any) captured in a per-thread scalar there, so later writes to what it reads do not change it;
* each update: a ``ReducerUpdate`` of the partials at the flattened index;
* the finalize: a ``ReducerFinalize`` into ``dst`` (legacy: into ``acc`` itself, which is then
  an ordinary fragment holding the results).

A reducer touched by ``T.reducer_init`` / ``T.reducer_update`` / ``T.finalize_reducer(acc, dst)`` is
read and written only through them.  A reducer used with the legacy spelling (TileLang's v1 reducer,
and any reducer no new-style call touches) takes ``T.clear`` / ``T.fill`` as the init (the op's
identity; for max/min any value, which then acts as the starting value), ``acc[i] += v`` (sum) or
``acc[i] = T.max(acc[i], v)`` / ``T.min`` as updates inside ``T.Parallel``, and is readable after
its in-place ``T.finalize_reducer(acc)``.  Anything else -- a read of partial values, an update
before the init or outside ``T.Parallel``, a second init, an epoch never finalized, a finalize in a
loop the init is not in -- is a ``CompileError`` at its line.
"""

from __future__ import annotations

import math

from ..errors import CompileError
from ..ir import dtype as dt
from ..ir import expr as E
from ..ir import tile as t
from ..ir.reducer import ReducerFinalize, ReducerUpdate
from ..ir.tile_ops import region_accesses
from ..ir.verifier import exprs_of
from ..ir.visitor import loads_in, walk
from .reducer import FinalizeMark, InitMark, ReducerInfo, UpdateMark, reducer_info

_MAXMIN = {"max": "max", "min": "min"}


def identity(op: str, dtype: str) -> E.Const:
    """The value a partial starts from: combining it changes nothing."""
    if op in ("sum", "bitor", "bitxor"):
        return E.Const(0, dtype)
    if op == "bitand":
        return E.Const(-1 if dt.is_signed_int(dtype) else (1 << (8 * dt.nbytes(dtype))) - 1, dtype)
    if dt.is_float(dtype):
        return E.Const(-math.inf if op == "max" else math.inf, dtype)
    return E.Const(int(dt.min_value(dtype)) if op == "max" else int(dt.max_value(dtype)), dtype)


class _Epoch:
    def __init__(self, acc: t.Buffer, info: ReducerInfo, v2: bool):
        self.acc, self.info, self.v2 = acc, info, v2
        self.phase = "allocated"  # allocated -> active -> finalized (-> active again: a new epoch)
        self.scope: tuple = ()
        self.seed: t.Buffer | None = None
        self.init_loc = None


def canonicalize_reducers(func: t.PrimFunc) -> None:
    reducers: dict = {}
    v2: set = set()

    def scan(s):
        if isinstance(s, t.Alloc) and reducer_info(s.buffer) is not None:
            reducers[s.buffer] = reducer_info(s.buffer)
        if isinstance(s, (InitMark, UpdateMark)) or isinstance(s, FinalizeMark) and s.dst is not None:
            v2.add(s.reducer)

    walk(func.body, scan)
    if not reducers:
        return
    for acc, info in reducers.items():
        if acc in v2 and info.legacy:
            raise CompileError(f"reducer {acc.name} was allocated with replication= (the legacy reducer) but is used "
                               "with T.reducer_init / T.reducer_update / T.finalize_reducer(acc, dst)", acc.loc,
                               hint="leave out replication= in T.alloc_reducer")
        info.partials.name = f"{acc.name}_partials"
    rw = _Rewriter({acc: _Epoch(acc, info, acc in v2) for acc, info in reducers.items()})
    func.body = rw.block(func.body, (), False)
    for ep in rw.epochs.values():
        if ep.phase == "active":
            raise CompileError(f"reducer {ep.acc.name} is never finalized: its epoch opened here has no "
                               "T.finalize_reducer", ep.init_loc,
                               hint=f"finalize it: T.finalize_reducer({ep.acc.name}, result_fragment)")


class _Rewriter:
    def __init__(self, epochs: dict):
        self.epochs = epochs
        self.n = 0

    def block(self, s, scope: tuple, in_par: bool):
        if s is None:
            return None
        out = self.stmt(s, scope, in_par)
        if isinstance(out, list):
            return out[0] if len(out) == 1 else t.SeqStmt(out, loc=s.loc)
        return out

    def stmt(self, s, scope: tuple, in_par: bool):
        if isinstance(s, t.SeqStmt):
            out = []
            for x in s.stmts:
                r = self.stmt(x, scope, in_par)
                out.extend(r if isinstance(r, list) else [r])
            return t.SeqStmt(out, loc=s.loc)
        if isinstance(s, t.Kernel):
            s.body = self.block(s.body, scope, in_par)
            return s
        if isinstance(s, t.For):
            self._check_reads(s, [s.start, s.extent])
            s.body = self.block(s.body, scope + (("loop", s.uid),), in_par)
            return s
        if isinstance(s, t.ParallelFor):
            s.body = self.block(s.body, scope + (("par", s.uid),), True)
            return s
        if isinstance(s, t.IfThenElse):
            self._check_reads(s, [s.cond])
            s.then_body = self.block(s.then_body, scope + (("if", s.uid, 0),), in_par)
            s.else_body = self.block(s.else_body, scope + (("if", s.uid, 1),), in_par)
            return s
        if isinstance(s, t.ThreadPartition):
            s.body = self.block(s.body, scope + (("part", s.uid),), in_par)
            return s
        if isinstance(s, t.Alloc) and s.buffer in self.epochs:
            ep = self.epochs[s.buffer]
            ep.phase = "allocated"
            out = [t.Alloc(ep.info.partials, loc=s.loc)]
            return out + ([s] if not ep.v2 else [])
        if isinstance(s, InitMark):
            return self.init(self.epochs[s.reducer], s.value, scope, s.loc, "T.reducer_init")
        if isinstance(s, UpdateMark):
            return self.update(self.epochs[s.reducer], s.indices, s.value, s.loc)
        if isinstance(s, FinalizeMark):
            return self.finalize(self.epochs[s.reducer], s, scope)
        if isinstance(s, t.Fill) and s.dst.buffer in self.epochs:
            return self.legacy_fill(self.epochs[s.dst.buffer], s, scope)
        if isinstance(s, t.BufferStore) and s.buffer in self.epochs:
            return self.legacy_store(self.epochs[s.buffer], s, in_par)
        for r, _mode in region_accesses(s):
            ep = self.epochs.get(r.buffer)
            if ep is not None and (ep.v2 or ep.phase != "finalized"):
                raise CompileError(f"illegal use of reducer {ep.acc.name} in a tile operation "
                                   + ("(read the results from the T.finalize_reducer destination)" if ep.v2 else
                                      "before its T.finalize_reducer"), s.loc)
        self._check_reads(s, exprs_of(s))
        return s

    # ------------------------------------------------------------------ epoch operations
    def init(self, ep: _Epoch, value, scope, loc, call: str) -> list:
        if ep.phase == "active":
            raise CompileError(f"double T.reducer_init of reducer {ep.acc.name}: its epoch is already open "
                               "(one init per T.finalize_reducer)", loc)
        self._check_reads(None, [value] if value is not None else [], loc)
        ep.phase, ep.scope, ep.init_loc, ep.seed = "active", scope, loc, None
        out: list = []
        p = ep.info.partials
        if value is not None:
            self.n += 1
            ep.seed = t.Buffer(f"{ep.acc.name}_seed{self.n}", (1,), ep.acc.dtype, "var", loc=loc)
            out.append(t.Alloc(ep.seed, E.cast(ep.acc.dtype, value), loc=loc))
        k = E.Var(f"{ep.acc.name}_k", "int32", kind="loop")
        out.append(t.For(k, E.as_expr(0), E.as_expr(p.shape[0]),
                         t.BufferStore(p, (k,), identity(ep.info.op, p.dtype), loc=loc), "unroll", loc=loc))
        return out

    def update(self, ep: _Epoch, indices, value, loc) -> ReducerUpdate:
        if ep.phase != "active":
            what = "before T.reducer_init" if ep.phase == "allocated" else "after its T.finalize_reducer"
            raise CompileError(f"T.reducer_update of reducer {ep.acc.name} {what}", loc,
                               hint=f"open the epoch first: T.reducer_init({ep.acc.name})")
        self._check_reads(None, list(indices) + [value], loc)
        return ReducerUpdate(ep.info.partials, _flat(ep.acc, indices), value, ep.info.op, ep.acc.name, loc=loc)

    def finalize(self, ep: _Epoch, s: FinalizeMark, scope) -> ReducerFinalize:
        if ep.phase != "active":
            what = "without a T.reducer_init before it" if ep.phase == "allocated" else "a second time"
            raise CompileError(f"T.finalize_reducer of reducer {ep.acc.name} {what}", s.loc)
        extra = scope[len(ep.scope):]
        if scope[:len(ep.scope)] != ep.scope or any(x[0] != "if" for x in extra):
            raise CompileError(f"T.finalize_reducer({ep.acc.name}) is not in the scope of its T.reducer_init: "
                               "init and finalize must be in the same loop body (the finalize may sit in an `if` "
                               "there)", s.loc, hint="move the init and the finalize into the same loop")
        if s.dst is None and ep.v2:
            raise CompileError(f"T.finalize_reducer({ep.acc.name}) needs a destination for a reducer opened with "
                               "T.reducer_init", s.loc, hint=f"T.finalize_reducer({ep.acc.name}, result_fragment)")
        ep.phase = "finalized"
        dst = ep.acc if s.dst is None else s.dst
        return ReducerFinalize(ep.info.partials, dst, ep.info.op, ep.seed, s.batch, ep.acc.name, loc=s.loc)

    # ------------------------------------------------------------------ the legacy spelling
    def legacy_fill(self, ep: _Epoch, s: t.Fill, scope) -> list:
        if ep.v2:
            raise CompileError(f"illegal T.fill / T.clear of reducer {ep.acc.name}: it is opened with "
                               "T.reducer_init", s.loc, hint=f"T.reducer_init({ep.acc.name}, value)")
        if not s.dst.is_full():
            raise CompileError(f"T.fill / T.clear of part of reducer {ep.acc.name}", s.loc,
                               hint="fill the whole reducer")
        if ep.phase == "active":
            raise CompileError(f"second T.clear / T.fill of legacy reducer {ep.acc.name}: one T.finalize_reducer "
                               "per fill", s.loc)
        op, value = ep.info.op, s.value
        ident = identity(op, ep.acc.dtype)
        c = E.const_value(value)
        if op in _MAXMIN:
            seed = None if c is not None and c == ident.value else value
        elif c is not None and c == 0:
            seed = None
        else:
            raise CompileError(f"legacy reducer {ep.acc.name} (op={op}) is filled with {value!r}: only the "
                               "identity (0) starts a sum", s.loc,
                               hint=f"start from 0 and add the value after the finalize, or use "
                               f"T.reducer_init({ep.acc.name}, value), which adds it once")
        return self.init(ep, seed, scope, s.loc, "T.fill")

    def legacy_store(self, ep: _Epoch, s: t.BufferStore, in_par: bool):
        if ep.v2:
            raise CompileError(f"illegal store to reducer {ep.acc.name}", s.loc,
                               hint=f"contribute with T.reducer_update({ep.acc.name}[...], value)")
        if ep.phase != "active":
            what = "after its T.finalize_reducer" if ep.phase == "finalized" else "before T.clear / T.fill"
            raise CompileError(f"store to legacy reducer {ep.acc.name} {what}", s.loc)
        if not in_par:
            raise CompileError(f"update of reducer {ep.acc.name} outside any T.Parallel loop", s.loc,
                               hint="update it inside `for ... in T.Parallel(...)`")
        contribution = _contribution(ep, s)
        if contribution is None:
            want = "acc[i] += v" if ep.info.op == "sum" else f"acc[i] = T.{ep.info.op}(acc[i], v)"
            raise CompileError(f"unsupported store to legacy reducer {ep.acc.name} (op={ep.info.op}): expected "
                               f"`{want}`", s.loc, hint="or use T.reducer_update(acc[i], v)")
        return self.update(ep, s.indices, E.cast(ep.acc.dtype, contribution), s.loc)

    def _check_reads(self, s, exprs, loc=None) -> None:
        for e in exprs:
            for ld in loads_in(e):
                ep = self.epochs.get(ld.buffer)
                if ep is None:
                    continue
                if ep.v2:
                    raise CompileError(f"illegal read of reducer {ep.acc.name}: its values are read from the "
                                       "T.finalize_reducer destination", loc or getattr(s, "loc", None))
                if ep.phase != "finalized":
                    raise CompileError(f"read of legacy reducer {ep.acc.name} before T.finalize_reducer: partial "
                                       "values are not readable", loc or getattr(s, "loc", None))


def _strip_cast(e, dtype):
    while isinstance(e, E.Cast) and e.dtype == dtype:
        e = e.a
    return e


def _same_load(e, acc, indices) -> bool:
    e = _strip_cast(e, acc.dtype)
    return isinstance(e, E.Load) and e.buffer is acc and len(e.indices) == len(indices) and \
        all(str(a) == str(b) for a, b in zip(e.indices, indices))


def _contribution(ep: _Epoch, s: t.BufferStore):
    """``v`` of ``acc[i] = acc[i] + v`` (sum) or ``acc[i] = max(acc[i], v)`` (max/min), else None."""
    v = _strip_cast(s.value, ep.acc.dtype)
    op = ep.info.op
    want = {"sum": "+", "max": "max", "min": "min"}.get(op)
    if not isinstance(v, E.BinOp) or v.op != want:
        return None
    if _same_load(v.a, ep.acc, s.indices):
        return v.b
    if _same_load(v.b, ep.acc, s.indices):
        return v.a
    return None


def _flat(acc: t.Buffer, indices) -> E.Expr:
    if len(indices) != len(acc.shape):
        raise CompileError(f"reducer {acc.name} has {len(acc.shape)} dimension(s), the update gives {len(indices)} "
                           "indices", acc.loc)
    off = E.as_expr(0)
    for x, n in zip(indices, acc.shape):
        off = off * n + x
    return off
