"""Compiling expressions to closures ``f(st, need) -> value`` (values: per-lane arrays or scalars when
uniform), with loads, shuffles and per-batch caching of invariant subexpressions."""

from __future__ import annotations

import numpy as np

from ...ir import dtype as dt
from ...ir import expr as E
from ...ir import float8
from ...ir.analysis import is_nonnegative
from ...ir.thread import CLUSTER_RANK
from ...ir.visitor import walk_expr
from .. import debug_print, device_assert
from ..ieee_rounding import ieee_function
from ..rng_philox import DRAWS, LaneGenerators
from ..warp_ops import UNIFORM, VOTES, WARP_CALLS, source_threads, vote
from .errors import DivergenceError, EmulatorError, EmulatorOutOfBoundsError
from .mathfns import _BINOPS, _MATH, _check_division, _check_int32, _float_to_int, _fma, _trunc_div
from .memory import _GlobalMem, _SharedMem
from .support import _F32, _F64, _and, _check_range, _first, _fix, _is_float_np, _rows, _Where


class ExprCompiler:
    """Mixin of ``_Program``: expressions."""

    # ---------------------------------------------------------------- expressions
    # An expression compiles to ``f(st, need) -> value`` where ``need`` is the mask of lanes whose
    # value is used (None: the statement's active lanes): loads check bounds only for those lanes.
    # ``expr`` returns (closure, invariant, structural key); invariant means it depends only on
    # values fixed for a batch, and ``_cached`` then evaluates it once per batch.

    def cexpr(self, e, where: _Where | None):
        f, inv, key = self.expr(E.as_expr(e), where)
        return self._cached(f, inv, key)

    def _cached(self, f, inv, key):
        if not inv or key is None or key[0] in ("c", "v"):
            return f
        slot = self.cache_keys.get(key)
        if slot is None:
            slot = self.cache_keys[key] = self.ncache
            self.ncache += 1

        def cached(st, need):
            v = st.cache[slot]
            if v is None:
                v = st.cache[slot] = f(st, need)
            return v

        return cached

    def expr(self, e, where):
        nd = dt.to_numpy(e.dtype)
        if isinstance(e, E.Const):
            v = nd.type(e.value)
            return (lambda st, need: v), True, ("c", e.dtype, e.value)
        if isinstance(e, E.Var):
            if e not in self.var_slots:
                raise EmulatorError(f"variable {e.name} is used but never bound")
            slot = self.var_slots[e]
            return (lambda st, need: st.vars[slot]), e in self.invariant_vars, ("v", slot)
        if isinstance(e, E.Load):
            return self.load(e, where), False, None
        if isinstance(e, E.BinOp):
            return self.binop(e, nd, where)
        if isinstance(e, E.UnOp):
            fa, inv, ka = self.expr(e.a, where)
            fa = self._cached(fa, inv, ka) if not inv else fa
            ufunc = {"neg": np.negative, "not": np.logical_not, "bitnot": np.invert}[e.op]

            def unop(st, need):
                return _fix(ufunc(fa(st, need)), nd)

            return unop, inv, (e.op, e.dtype, ka)
        if isinstance(e, E.Cast):
            return self.cast(e, nd, where)
        if isinstance(e, E.Select):
            return self.select(e, nd, where)
        if isinstance(e, E.Call):
            return self.call(e, nd, where)
        if isinstance(e, E.Shuffle):
            return self.shuffle(e, where), False, None
        raise EmulatorError(f"the emulator cannot evaluate {type(e).__name__}")

    def _children(self, es, where):
        parts = [self.expr(x, where) for x in es]
        inv = all(p[1] for p in parts)
        keys = tuple(p[2] for p in parts)
        if any(k is None for k in keys):
            keys = None
        fs = [p[0] if inv else self._cached(*p) for p in parts]
        return fs, inv, keys

    def binop(self, e: E.BinOp, nd, where):
        op = e.op
        (fa, fb), inv, keys = self._children((e.a, e.b), where)
        key = None if keys is None else (op, e.dtype) + keys
        wd = dt.to_numpy(e.a.dtype)
        is_float = _is_float_np(wd)
        if op in ("and", "or"):
            lazy = _has_effects(e.b)
            is_and = op == "and"

            def logical(st, need):
                a = fa(st, need)
                if not isinstance(a, np.ndarray):
                    if bool(a) != is_and:  # short circuit, as C does
                        return np.bool_(not is_and)
                    b = fb(st, need)  # the right side alone decides; it may differ between lanes
                    return b.astype(np.bool_) if isinstance(b, np.ndarray) else np.bool_(bool(b))
                # the right side runs only where the left does not decide (C short-circuit)
                b = fb(st, _and(need, a if is_and else ~a) if lazy else need)
                return np.logical_and(a, b) if is_and else np.logical_or(a, b)

            return logical, inv, key
        if op in ("min", "max"):
            # the printed fminf/fmaxf (and fmin/fmax of CDNA/RDNA): a NaN operand is dropped
            fn = np.fmin if op == "min" else np.fmax
        elif op == "/":
            fn = np.true_divide if is_float else _trunc_div
        elif op == "//":
            fn = (lambda a, b: np.floor(np.true_divide(a, b))) if is_float else np.floor_divide
        elif op == "%":
            fn = np.fmod if is_float else np.remainder
        else:
            fn = _BINOPS[op]

        if op in ("/", "//", "%") and not is_float and not inv and where is not None:
            # the printers emit C's truncating '/' and '%' when analysis proves both sides
            # non-negative: check that assumption (and division by zero) on the lanes that need it
            assumed = dt.is_signed_int(e.dtype) and is_nonnegative(e.a) and is_nonnegative(e.b)

            def checked_division(st, need):
                a, b = fa(st, need), fb(st, need)
                _check_division(st, a, b, need, assumed, op, where)
                return _fix(fn(a, b), nd)

            return checked_division, inv, key

        if e.dtype == "int32" and op in ("+", "-", "*") and where is not None:
            # the generated code computes this in a 32-bit int: evaluate exactly (64 bits) and refuse
            # a result that int would not hold, on the lanes that use it
            def checked_int32(st, need):
                r = fn(np.asarray(fa(st, need), np.int64), np.asarray(fb(st, need), np.int64))
                _check_int32(st, r, need, e, where)
                return _fix(r, nd)

            return checked_int32, inv, key

        if float8.saturating_max(nd) is not None and op not in ("min", "max"):
            # fp8 operands: computed in float32 and converted back (saturating), as the printers do;
            # ml_dtypes' own fp8 arithmetic would round to infinity / NaN
            def binary(st, need):
                return _fix(fn(_fix(fa(st, need), _F32), _fix(fb(st, need), _F32)), nd)

            return binary, inv, key

        def binary(st, need):
            return _fix(fn(fa(st, need), fb(st, need)), nd)

        return binary, inv, key

    def cast(self, e: E.Cast, nd, where):
        fa, inv, ka = self.expr(e.a, where)
        fa = fa if inv else self._cached(fa, inv, ka)
        src = dt.to_numpy(e.a.dtype)
        key = None if ka is None else ("cast", e.dtype, ka)
        if _is_float_np(src) and nd.kind in "iu":
            def to_int(st, need):
                return _float_to_int(fa(st, need), nd)

            return to_int, inv, key
        if nd.kind == "b":
            def to_bool(st, need):
                v = fa(st, need)
                return v != 0 if isinstance(v, np.ndarray) else np.bool_(v != 0)

            return to_bool, inv, key

        def conv(st, need):
            return _fix(fa(st, need), nd)

        return conv, inv, key

    def select(self, e: E.Select, nd, where):
        (fc, fa, fb), inv, keys = self._children((e.cond, e.a, e.b), where)
        key = None if keys is None else ("sel", e.dtype) + keys
        lazy_a, lazy_b = _has_effects(e.a), _has_effects(e.b)

        def sel(st, need):
            c = fc(st, need)
            if not isinstance(c, np.ndarray):
                return _fix(fa(st, need) if c else fb(st, need), nd)
            # each side is needed only where it is chosen (C's ?: evaluates one side)
            a = fa(st, _and(need, c)) if lazy_a else fa(st, need)
            b = fb(st, _and(need, ~c)) if lazy_b else fb(st, need)
            return _fix(np.where(c, a, b), nd)

        return sel, inv, key

    def call(self, e: E.Call, nd, where):
        name = e.name
        if name == CLUSTER_RANK:
            return self.cluster_rank(where), False, None
        if name in WARP_CALLS:
            return self.warp_call(e, nd, where)
        if name.startswith(debug_print.PRINT_PREFIX):
            return self.print_call(e, where)
        if name.startswith(device_assert.ASSERT_PREFIX):
            return self.assert_call(e, where)
        if name.startswith("rng_"):  # a draw changes the thread's state: never cached, never invariant
            return self.rng_call(e, nd, where), False, None
        fs, inv, keys = self._children(e.args, where)
        key = None if keys is None else ("call", name, e.dtype) + keys
        if name in ("isnan", "isinf", "isfinite"):
            fn = {"isnan": np.isnan, "isinf": np.isinf, "isfinite": np.isfinite}[name]
            f0 = fs[0]
            arg_t = np.float64 if e.args[0].dtype == "float64" else np.float32  # 1e300 is finite in float64

            def test(st, need):
                return fn(np.asarray(f0(st, need), arg_t))

            return test, inv, key
        if name == "reinterpret":  # the same bits as another type of the same width
            f0, src = fs[0], dt.to_numpy(e.args[0].dtype)

            def bits(st, need):
                v = np.asarray(_fix(f0(st, need), src))
                r = v.view(nd)
                return r if r.ndim else nd.type(r[()])

            return bits, inv, key
        if name in ("min", "max"):
            fn2 = np.fmin if name == "min" else np.fmax
            fa, fb = fs

            def mm(st, need):
                return _fix(fn2(fa(st, need), fb(st, need)), nd)

            return mm, inv, key
        if name == "abs" and not _is_float_np(nd):
            f0 = fs[0]

            def iabs(st, need):
                return _fix(np.abs(f0(st, need)), nd)

            return iabs, inv, key
        if name == "fma":
            math_fn = _fma
        elif name.startswith(("ieee_", "cast_")):  # rounding per operand type: interp/ieee_rounding.py
            math_fn = ieee_function(name, e.dtype)
        elif name in _MATH:
            math_fn = _MATH[name]
        else:
            raise EmulatorError(f"the emulator does not know the math function {name!r}")
        work = _F64 if nd == _F64 else _F32  # 16-bit and 8-bit floats compute in float32, then round
        if name == "cast_nosat":  # T.cast(..., sat=False): the one fp8 conversion that does not saturate
            f0 = fs[0]

            def nosat(st, need):
                return float8.convert_nosat(_fix(f0(st, need), work), nd)

            return nosat, inv, key

        def mathcall(st, need):
            args = [_fix(f(st, need), work) for f in fs]
            return _fix(_fix(math_fn(*args), work), nd)

        return mathcall, inv, key

    def rng_call(self, e: E.Call, nd, where):
        """T.rng_init and the draws (language/random.py) on the lanes that execute them."""

        def states(st, need):
            if st.rng is None:
                st.rng = LaneGenerators(st.L)
            active = st.mask if need is None else need
            lanes = np.arange(st.L) if active is None else np.flatnonzero(np.broadcast_to(active, (st.L,)))
            return st.rng, lanes

        if e.name == "rng_init":
            fs, _, _ = self._children(e.args[:3], where)
            kind = int(e.args[3].value)

            def init(st, need):
                g, lanes = states(st, need)
                g.init(lanes, *[np.broadcast_to(f(st, need), (st.L,))[lanes] for f in fs], kind)
                return np.int32(0)

            return init
        method = DRAWS[e.name][0]

        def draw(st, need):
            g, lanes = states(st, need)
            bad = g.unseeded(lanes)
            if len(bad):
                raise where.error(EmulatorError, f"{st.where(bad[0])} draws a random number before T.rng_init seeded "
                                                 "its generator")
            out = np.zeros(st.L, nd)
            out[lanes] = g.draw(method, lanes, nd)
            return out

        return draw

    def cluster_rank(self, where):
        """``%cluster_ctarank``: the block's position in its cluster, ``x + cx * (y + cy * z)``."""
        dims = self.k.attrs.get("cluster_dims")
        if not dims:
            raise where.error(EmulatorError, "T.block_rank_in_cluster() in a kernel launched without a thread-block "
                                             "cluster")
        cx, cy, cz = (int(d) for d in dims)

        def rank(st, need):
            lin = st.block + st.first
            gx, gy = st.grid[0], st.grid[1]
            x, y, z = lin % gx, (lin // gx) % gy, lin // (gx * gy)
            return ((x % cx) + cx * ((y % cy) + cy * (z % cz))).astype(np.int32)

        return rank

    def assert_call(self, e: E.Call, where):
        """T.device_assert: the first active lane whose condition is false raises DeviceAssertError."""
        fc = self.cexpr(e.args[0], where)
        text = str(e.args[0])

        def asserted(st, need):
            ok = np.broadcast_to(np.asarray(fc(st, need)).astype(bool), (st.L,))
            active = np.ones(st.L, bool) if st.mask is None else np.broadcast_to(st.mask, (st.L,))
            bad = np.flatnonzero(active & ~ok)
            if len(bad):
                lane = int(bad[0])
                b, (gx, gy) = st.first + int(st.block[lane]), st.grid[:2]
                device_assert.fail(e.name, text, (b % gx, (b // gx) % gy, b // (gx * gy)), int(st.tid[lane]))
            return np.int32(0)

        return asserted, False, None

    def print_call(self, e: E.Call, where):
        """T.print: each active lane prints a line, in lane order."""
        has_value, msg = debug_print.parse(e.name)
        fv = self.cexpr(e.args[0], where)

        def printed(st, need):
            v = np.broadcast_to(fv(st, need), (st.L,))
            active = np.ones(st.L, bool) if st.mask is None else st.mask
            gx, gy = st.grid[0], st.grid[1]
            for lane in np.flatnonzero(active):
                b = st.first + int(st.block[lane])
                debug_print.emit(msg, has_value, (b % gx, (b // gx) % gy, b // (gx * gy)), int(st.tid[lane]), v[lane])
            return np.int32(0)

        return printed, False, None

    def warp_call(self, e: E.Call, nd, where):
        """``warp_size()`` and the shuffles of language/warp.py, over the target's warps."""
        W = self.k.target.warp_size if self.k.target is not None else 32
        if e.name == "warp_size":
            v = np.int32(W)
            return (lambda st, need: v), True, ("c", "int32", W)
        if e.name == UNIFORM:
            return self.uniform_call(e, where, W), False, None
        if e.name in VOTES:
            fp, fm = (self.cexpr(a, where) for a in e.args)
            kind = e.name

            def voted(st, need):
                pred = np.broadcast_to(fp(st, need), (st.L,))
                # the lanes executing the vote (a lazy side of ?: / && / || runs in the lanes needing it)
                mask = need if need is not None else st.mask
                active = np.ones(st.L, bool) if mask is None else mask
                warp_of = st.block * ((st.T + W - 1) // W) + st.tid // W
                return vote(kind, warp_of, st.tid % W, pred, active, int(fm(st, need)))

            return voted, False, None
        fv, fl, fw = (self.cexpr(a, where) for a in e.args)
        kind = e.name

        def shfl(st, need):
            v = fv(st, need)
            if not isinstance(v, np.ndarray):
                return v  # every lane holds the same value
            src_tid = source_threads(kind, st.tid, fl(st, need), int(fw(st, need)), W)
            src_tid = np.where(src_tid < st.T, src_tid, st.tid)
            src = st.lane - st.tid + src_tid
            if (src < 0).any() or (src >= v.shape[0]).any():
                raise where.error(EmulatorError, "a shuffle reads a lane outside the warp being emulated")
            active = need if need is not None else st.mask  # the executing lanes (see shuffle below)
            if active is not None:
                bad = active & ~active[src]
                if bad.any():
                    lane = _first(bad)
                    raise where.error(DivergenceError, f"{st.where(lane)}: shuffle reads lane "
                                                       f"{int(src[lane]) % st.T}, which is not executing it")
            return _fix(v[src], nd)

        return shfl, False, None

    def uniform_call(self, e: E.Call, where, W: int):
        """``warp_uniform(x)`` (warp_ops.UNIFORM): ``x``, after checking that the executing lanes of each warp
        hold one value of it (CUDA broadcasts lane 0's, so a lane that differs would compute with another's)."""
        fv = self.cexpr(e.args[0], where)

        def uniform(st, need):
            v = fv(st, need)
            if not isinstance(v, np.ndarray):
                return v
            active = need if need is not None else st.mask
            on = np.ones(v.shape[0], bool) if active is None else np.asarray(active, bool)
            warp_of = st.block * ((st.T + W - 1) // W) + st.tid // W
            keys, inv = np.unique(warp_of, return_inverse=True)
            first = np.full(len(keys), v.shape[0], np.int64)  # each warp's lowest executing lane (lane 0 when full)
            lanes = np.flatnonzero(on)
            np.minimum.at(first, inv[lanes], lanes)
            first = np.minimum(first, v.shape[0] - 1)  # warps with no executing lane: compared nowhere
            ref = v[first[inv]]
            bad = on & (ref != v) & ~(np.isnan(ref) & np.isnan(v) if v.dtype.kind == "f" else False)
            if bad.any():
                lane = _first(bad)
                raise where.error(EmulatorError, f"{st.where(lane)}: warp_uniform: this lane holds {v[lane]!r}, "
                                                 f"lane {int(st.tid[first[inv[lane]]]) % W} of its warp "
                                                 f"{ref[lane]!r} (a value the compiler took as warp-uniform)")
            return v

        return uniform

    def shuffle(self, e: E.Shuffle, where):
        fv = self.cexpr(e.value, where)
        xor, width = int(e.mask), int(e.width)
        memo_key = ("shfl", xor, width)

        def shfl(st, need):
            v = fv(st, need)
            if not isinstance(v, np.ndarray):
                return v
            src = st.memo.get(memo_key)
            if src is None:
                tid = st.tid
                s = tid ^ xor
                ok = (s // width == tid // width) & (s < st.T)
                src = st.memo[memo_key] = st.lane - tid + np.where(ok, s, tid)
            # the lanes executing the shuffle: those that need its value where it sits in the lazy
            # side of a ?: / && / || (C evaluates that side in those lanes only), else the statement's
            active = need if need is not None else st.mask
            if active is not None:
                bad = active & ~active[src]
                if bad.any():
                    lane = _first(bad)
                    raise where.error(DivergenceError, f"{st.where(lane)}: shuffle reads lane "
                                                       f"{int(src[lane]) % st.T}, which is not executing it")
            return v[src]

        return shfl

    # ---------------------------------------------------------------- memory
    def load(self, e: E.Load, where):
        b = e.buffer
        fi = self.cexpr(e.indices[0], where)
        if b.scope == "local":
            return self._load_local(b, fi, e.indices[0], where)
        if b.scope == "shared":
            place, _, nd = self._shared_of(b, where)
            n = b.shape[0]
            what = f"load of shared {b.name}"
            sz = nd.itemsize

            def load_shared(st, need):
                idx = _check_range(st, fi(st, need), 0, n - 1, need, what, where)
                pos = st.sbase[place] + idx
                if st.races is not None:
                    st.races.access(pos, sz, need, where, b.name, None)
                if st.banks is not None:
                    lanes = st.lane if need is None else np.flatnonzero(need)
                    st.banks.record(st, where, b.name, np.broadcast_to(pos, (st.L,))[lanes], sz, sz, lanes, "read")
                return st.sviews[nd][pos]

            return load_shared
        if b.scope == "global":
            gi = self._global_of(b, where)
            mem = self._mem(b, where)
            what = f"load of global {b.name}"

            def load_global(st, need):
                arr = st.glob[gi]
                idx = _check_range(st, fi(st, need), 0, arr.size - 1, need, what, where)
                if st.graces is not None:
                    mem.track_read(st, idx, None, need, where)
                return arr[idx]

            return load_global
        raise EmulatorError(f"cannot load from a {b.scope} buffer ({b.name}) in thread IR")

    def _load_local(self, b, fi, idx_expr, where):
        slot = self._reg(b)
        n = b.shape[0]
        c = E.const_value(idx_expr)
        if c is not None:
            c = int(c)
            if not 0 <= c < n:
                def bad_reg(st, need):
                    raise where.error(EmulatorOutOfBoundsError, f"register {b.name}[{c}] is out of bounds "
                                                                f"({n} registers)")

                return bad_reg

            def load_reg(st, need):
                return st.regs[slot][c]

            return load_reg
        nd = dt.to_numpy(b.dtype)

        def load_reg_dyn(st, need):
            idx = _check_range(st, fi(st, need), 0, n - 1, need, f"register {b.name}", where)
            rows = _rows(st.regs[slot], st.L, nd)
            return rows[idx, st.lane] if isinstance(idx, np.ndarray) else rows[int(idx)]

        return load_reg_dyn

    def _shared_of(self, b, where):
        if b not in self.shared:
            raise (where.error(EmulatorError, f"shared buffer {b.name} has no SharedDecl") if where
                   else EmulatorError(f"shared buffer {b.name} has no SharedDecl"))
        return self.shared[b]

    def _global_of(self, b, where) -> int:
        if b not in self.global_index:
            raise EmulatorError(f"global buffer {b.name} is not a kernel parameter")
        return self.global_index[b]

    def _mem(self, b, where):
        """(kind, ...) description of a memory (global/shared) buffer for vector accesses."""
        if b.scope == "shared":
            place, off, nd = self._shared_of(b, where)
            return _SharedMem(b, place, off, nd)
        if b.scope == "global":
            return _GlobalMem(b, self._global_of(b, where))
        raise EmulatorError(f"buffer {b.name} of scope {b.scope} is not memory")



def _has_effects(e) -> bool:
    """Whether evaluating ``e`` on lanes that do not need it could fail (loads, shuffles)."""
    found = False

    def f(x):
        nonlocal found
        if isinstance(x, (E.Load, E.Shuffle)):
            found = True

    walk_expr(e, f)
    return found


