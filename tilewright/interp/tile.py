"""CPU interpreter of the Tile IR: ``run_tile_ir(func, args)`` executes a ``PrimFunc`` with NumPy.

It is the reference the compiled kernels are tested against, so it computes what a GPU computes and
refuses, with a clear error, what a GPU would do wrong silently.  Guarantees:

* Blocks run one after another (x fastest, then y, then z); ``global`` buffers are the argument
  arrays, written in place.  ``shared`` and ``fragment`` buffers are one array per block.
* ``local`` and ``var`` buffers are per thread.  A kernel that never names its thread index
  (``T.get_thread_binding()``) is run "block mode": every thread does the same, so one copy per block
  stands for all of them.  A kernel that does name it is run "thread mode": code outside ``T.Parallel``
  runs vectorized over the threads (the thread index is ``arange(num_threads)``, per-thread buffers
  carry a leading thread axis, ``if`` on a per-thread value masks threads, stores scatter).
* On-chip buffers start as NaN (floats) or a sentinel (ints: the dtype's minimum; bool: True), so a
  kernel reading memory it never wrote gives visibly wrong results; ``T.alloc_var(dtype, init)``
  starts at ``init``.  Allocation happens once per block even when the ``Alloc`` sits in a loop.
* Arithmetic follows the IR dtypes: each node's result is rounded to its dtype (16-bit and 8-bit
  floats are computed in float32 and rounded).  Integer ``//`` and ``%`` floor; ``min``/``max``
  propagate NaN (so uninitialised data stays visible); ``round`` rounds half away from zero.
* ``T.Parallel`` bodies are evaluated vectorized over the whole iteration space.  ``if`` inside them
  and ``T.if_then_else`` / ``and`` / ``or`` mask lanes, and masked-off lanes never read memory, so the
  usual bounds guards work.  An *active* lane reading or writing out of bounds raises
  ``OutOfBoundsError`` naming the buffer and the index range (a GPU would read garbage).
* Tile operations: ``Copy`` reads the out-of-bounds part of a global region as zero and does not write
  it; on-chip regions must be in bounds.  ``Gemm`` multiplies in float32 (float64 for float64 inputs,
  exact integers for int8) and rounds into C's dtype.  ``Reduce`` works in float32 (float64 / int64)
  and folds the old destination in when ``clear=False``.  ``Annotate`` has no effect.
* Inside ``T.Parallel`` a ``local``/``var`` buffer is per iteration when it is allocated in the
  body, or allocated before the loop and stored to at an element not tied to the iteration (scratch:
  each iteration starts from the value before the loop; the frontend refuses loops that update a
  value left by other iterations).  After the loop such scratch holds the value every iteration
  left, or poison when they differ (a GPU thread would hold its last iteration's).  Elements
  indexed by the iteration (``loc[i]``) stay shared, as the same thread runs iteration i in every
  T.Parallel over the same range; read outside T.Parallel they would have no single value (only
  the thread that ran the iteration holds it), which the verifier refuses at compile time.
* Atomics: the tile form updates each element once.  The scalar form inside ``T.Parallel`` is done
  once per active iteration.  Outside it, it is done once per block (or thread partition) -- unless
  (thread mode) its index or value is per-thread by the ``ir.uniformity`` analysis (the thread index,
  a ``local``/``var`` buffer holding per-thread values) or it sits under a thread-dependent ``if``:
  then every active thread does it, as each thread's own atomic would.
* Thread partitions (``if`` on the thread index around tile operations, ``T.ws``): the body runs for
  those threads only; tile operations inside run once, for that set.  Code that hands data between
  threads through mbarriers or named barriers is refused (it needs the emulator).
* Races the interpreter can see cheaply are errors: threads (or ``T.Parallel`` iterations) storing
  different values to one element (also colliding indices such as ``acc[i // 2] += x[i]``),
  reading a per-thread value inside ``T.Parallel`` when the threads disagree on it (which thread
  runs an iteration is the compiler's choice), tile operations under a thread-dependent condition.
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
from collections.abc import Callable

import numpy as np

from ..errors import SourceLocation, TilewrightError
from ..ir import dtype as dt
from ..ir import expr as E
from ..ir import float8 as _float8
from ..ir import thread as th
from ..ir import tile as t
from ..ir.tile_ops import hooks, register
from ..ir.visitor import child_stmts, walk, walk_expr
from ..target.grid import check_launch_grid
from . import debug_print as _debug_print
from . import device_assert as _device_assert
from . import warp_ops as _warp
from .bind import bind_host_call
from .host_addresses import AddressBook, AddressError, strided_view
from .ieee_rounding import extra_float_functions as _extra_float_functions
from .ieee_rounding import ieee_function as _ieee_function

__all__ = ["InterpError", "OutOfBoundsError", "run_tile_ir"]

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_I64 = np.dtype(np.int64)
_FLOAT_NP = frozenset(dt.to_numpy(d) for d in dt.ALL_DTYPES if dt.is_float(d))


class InterpError(TilewrightError):
    """The kernel does something whose result on a GPU is undefined (or the IR is malformed)."""

    def __init__(self, message: str, loc: SourceLocation | None = None):
        self.message = message
        self.loc = loc
        super().__init__(message if loc is None else f"{message}\n{loc.excerpt()}")


class OutOfBoundsError(InterpError, IndexError):
    """An active lane reads or writes outside a buffer."""


# --------------------------------------------------------------------------------------------
# entry point


def run_tile_ir(func: t.PrimFunc, args: list, *, dyn: dict | None = None) -> None:
    """Execute ``func`` on ``args`` (NumPy arrays for buffer parameters, written in place; Python
    scalars for scalar parameters).  ``dyn`` maps symbolic dimensions (``func.dyn_vars``, or their
    names) to ints; missing ones are read from the argument shapes, and every use must agree."""
    env, bufs = _bind_args(func, list(args), dyn)
    interp = _Interpreter(func)
    interp.addresses = AddressBook(bufs.values())  # T.make_tensor on a pointer table entry
    ctx = _Ctx(env, bufs)
    # masked-off lanes may divide by zero or overflow a cast; their results are discarded
    with np.errstate(all="ignore"):
        interp.exec(func.body, ctx)


def _bind_args(func: t.PrimFunc, args: list, dyn: dict | None):
    """Checked by the binder every backend uses (``binding.args``), so the interpreter accepts
    exactly the calls the compiled kernels accept."""
    bufs, values, dyn_vals = bind_host_call(func.name, func.params, func.dyn_vars, args, dyn)
    env = {p: dt.to_numpy(p.dtype).type(v) if dt.is_float(p.dtype) else v for p, v in values.items()}
    env.update(dyn_vals)
    return env, bufs


# --------------------------------------------------------------------------------------------
# execution state


class _Ctx:
    """What the statement and expression closures see.  ``mask`` is None (every lane active) or a
    bool array broadcastable against the current values; ``tid`` indexes the thread axis of
    per-thread buffers (shaped to broadcast against T.Parallel values inside a parallel loop)."""

    __slots__ = ("bufs", "env", "in_par", "mask", "nt", "pbufs", "poff", "prank", "pshape", "tbufs", "tid")

    def __init__(self, env: dict, bufs: dict):
        self.env = env
        self.bufs = bufs
        self.mask = None
        self.in_par = False
        self.prank = 0  # rank of the iteration space of the enclosing T.Parallel nest
        self.poff = 0  # next free axis of that space
        self.pshape: list = []  # extents of the T.Parallel axes entered so far (1 for the others)
        self.tid = None
        self.tbufs: set = set()  # buffers with a leading thread axis
        # local/var buffers allocated inside T.Parallel: one copy per iteration (as each GPU thread
        # has its own for the iterations it runs); buffer -> index arrays of the leading axes
        self.pbufs: dict = {}
        self.nt = 1


def _to(x, npdt: np.dtype):
    """``x`` as a NumPy value of dtype ``npdt`` (scalars stay scalars); to an fp8 type saturating,
    as the GPU converts (ir/float8.py)."""
    return _float8.convert(x, npdt)


def _lift(x, work: np.dtype):
    if isinstance(x, np.ndarray):
        return x if x.dtype == work else x.astype(work)
    return work.type(x)


def _int_result(npdt: np.dtype):
    """Normaliser for integer-typed results: arrays get the node dtype, scalars become Python ints
    (the fast representation of block-uniform index arithmetic)."""

    def fix(x):
        if isinstance(x, np.ndarray):
            return x if x.dtype == npdt else x.astype(npdt)
        return int(x)

    return fix


def _mask_and(mask, cond):
    return cond if mask is None else mask & cond


def _normalize_mask(m):
    """None when every lane is active; False when none is; else the mask."""
    if m is None:
        return None
    if not isinstance(m, np.ndarray):
        return None if m else False
    if m.all():
        return None
    if not m.any():
        return False
    return m


def _poison(npdt: np.dtype):
    if npdt in _FLOAT_NP:
        return np.nan
    if npdt.kind == "b":
        return True
    info = dt.int_limits(npdt)
    return info.min if npdt.kind == "i" or npdt.name == "int4" else info.max


def _same(a, b):
    """Elementwise equality that treats NaN as equal to NaN."""
    a, b = np.asarray(a), np.asarray(b)
    eq = a == b
    if a.dtype in _FLOAT_NP:
        af, bf = a.astype(_F64), b.astype(_F64)
        eq = eq | (np.isnan(af) & np.isnan(bf))
    return eq


def _uniform_over_threads(vals: np.ndarray, mask, what: str):
    """``vals`` has a leading thread axis (each thread's copy); return the copy every thread holds.
    ``mask`` (without a thread axis) marks the lanes whose values matter."""
    first = vals[0]
    eq = _same(vals, first)
    if mask is not None:
        eq = eq | ~np.asarray(mask)
    if not np.all(eq):
        raise InterpError(f"{what} differs between threads here; the result would depend on which thread "
                          "the compiler picks")
    return first


# --------------------------------------------------------------------------------------------
# expressions -> closures


_CMP = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq,
        "!=": operator.ne}


def _vmin(a, b):
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray) or isinstance(a, np.floating):
        return np.minimum(a, b)
    return min(a, b)


def _vmax(a, b):
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray) or isinstance(a, np.floating):
        return np.maximum(a, b)
    return max(a, b)


_ARITH = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
    "//": operator.floordiv, "%": operator.mod, "pow": operator.pow, "min": _vmin, "max": _vmax,
    "&": operator.and_, "|": operator.or_, "^": operator.xor, "<<": operator.lshift, ">>": operator.rshift,
}


def _round_half_away(x):
    return np.copysign(np.floor(np.abs(x) + 0.5), x)


_np_erf = np.frompyfunc(math.erf, 1, 1)


def _erf(x):
    if isinstance(x, np.ndarray):
        return _np_erf(x.astype(np.float64)).astype(np.float64)
    return math.erf(float(x))


_FLOAT_CALLS: dict[str, Callable] = {
    "exp": np.exp, "exp2": np.exp2, "exp10": lambda x: np.power(x.dtype.type(10), x),
    "log": np.log, "log2": np.log2, "log10": np.log10, "log1p": np.log1p, "expm1": np.expm1,
    "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x), "tanh": np.tanh,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "sin": np.sin, "cos": np.cos, "tan": np.tan, "atan": np.arctan,
    "sinh": np.sinh, "cosh": np.cosh, "erf": _erf, "floor": np.floor, "ceil": np.ceil, "round": _round_half_away,
    "trunc": np.trunc, "fabs": np.abs, "abs": np.abs, "pow": np.power, "min": np.fmin, "max": np.fmax,
    "fma": lambda a, b, c: a * b + c,
}
_FLOAT_CALLS.update(_extra_float_functions())  # TileLang's nearbyint, fmod, fast-math and ieee_* names


def _needs_guard(e) -> bool:
    """Whether evaluating ``e`` on a lane that should not evaluate it can fail: it reads memory or
    divides integers.  Such operands of ``if_then_else``/``and``/``or`` are evaluated under a mask."""
    found = []

    def visit(x):
        if isinstance(x, E.Load) or (isinstance(x, E.BinOp) and x.op in ("//", "%") and not dt.is_float(x.dtype)):
            found.append(x)

    walk_expr(e, visit)
    return bool(found)


class _ExprCompiler:
    """Turns each expression node into a closure ``f(ctx) -> value`` once per run."""

    def __init__(self):
        self.cache: dict = {}

    def __call__(self, e) -> Callable:
        if not isinstance(e, E.Expr):
            v = e
            return lambda c: v
        f = self.cache.get(e)
        if f is None:
            method = getattr(self, "_" + type(e).__name__.lower(), None)
            if method is None:
                raise InterpError(f"the tile interpreter cannot evaluate {type(e).__name__} nodes ({e})")
            f = method(e)
            self.cache[e] = f
        return f

    # leaves -------------------------------------------------------------------------------
    def _const(self, e: E.Const):
        if dt.is_float(e.dtype):
            v = dt.to_numpy(e.dtype).type(e.value)
        else:
            v = e.value
        return lambda c: v

    def _var(self, e: E.Var):
        var = e

        def f(c):
            try:
                return c.env[var]
            except KeyError:
                raise InterpError(f"{var.name} ({var.kind}) is used where it has no value") from None

        return f

    # operators ----------------------------------------------------------------------------
    def _binop(self, e: E.BinOp):
        fa, fb = self(e.a), self(e.b)
        op = e.op
        if op in ("and", "or"):
            return self._logical(op, fa, fb, _needs_guard(e.b))
        if op in _CMP:
            cmp = _CMP[op]
            return lambda c: cmp(fa(c), fb(c))
        fn = _ARITH.get(op)
        if fn is None:
            raise InterpError(f"unknown binary operator {op!r}")
        npdt = dt.to_numpy(e.dtype)
        if dt.is_float(e.dtype):
            if op in ("min", "max"):  # the printed fminf / fmaxf: a NaN operand is dropped
                fn = np.fmin if op == "min" else np.fmax
            if dt.bits(e.dtype) < 32:
                return lambda c: _to(fn(_lift(fa(c), _F32), _lift(fb(c), _F32)), npdt)
            return lambda c: _to(fn(fa(c), fb(c)), npdt)
        if e.dtype == "bool":
            return lambda c: fn(fa(c), fb(c))
        fix = _int_result(npdt)
        if op in ("//", "%"):
            def div(c):
                a, b = fa(c), fb(c)
                if isinstance(b, np.ndarray):
                    zero = b == 0
                    if zero.any() and np.any(zero if c.mask is None else zero & c.mask):
                        raise InterpError(f"integer division by zero in {e}")
                elif b == 0:
                    if c.mask is None:
                        raise InterpError(f"integer division by zero in {e}")
                    return fix(a * 0)  # only masked-off lanes get here; their value is never used
                return fix(fn(a, b))

            return div
        return lambda c: fix(fn(fa(c), fb(c)))

    @staticmethod
    def _logical(op, fa, fb, guard_b: bool):
        # like C's && and ||: the right side is not evaluated (no loads) where the left decides
        is_and = op == "and"

        def f(c):
            a = fa(c)
            if not isinstance(a, np.ndarray):
                if is_and:
                    return fb(c) if a else False
                return True if a else fb(c)
            if not guard_b:
                b = fb(c)
            else:
                saved = c.mask
                m = _normalize_mask(_mask_and(saved, a if is_and else ~a))
                if m is False:
                    return a
                c.mask = m
                try:
                    b = fb(c)
                finally:
                    c.mask = saved
            return (a & b) if is_and else (a | b)

        return f

    def _unop(self, e: E.UnOp):
        fa = self(e.a)
        if e.op == "neg":
            if dt.is_float(e.dtype):
                npdt = dt.to_numpy(e.dtype)
                return lambda c: _to(-fa(c), npdt)
            fix = _int_result(dt.to_numpy(e.dtype))
            return lambda c: fix(-fa(c))
        if e.op == "not":
            return lambda c: np.logical_not(a) if isinstance(a := fa(c), np.ndarray) else not a
        if e.op == "bitnot":
            fix = _int_result(dt.to_numpy(e.dtype)) if e.dtype != "bool" else (lambda x: x)
            return lambda c: fix(~fa(c))
        raise InterpError(f"unknown unary operator {e.op!r}")

    def _cast(self, e: E.Cast):
        fa = self(e.a)
        npdt = dt.to_numpy(e.dtype)
        if dt.is_float(e.dtype):
            return lambda c: _to(fa(c), npdt)
        if e.dtype == "bool":
            return lambda c: (a != 0) if isinstance(a := fa(c), np.ndarray) else bool(a)
        lo, hi = dt.min_value(e.dtype), dt.max_value(e.dtype)
        span = hi - lo + 1

        def f(c):
            a = fa(c)
            if isinstance(a, np.ndarray):
                if a.dtype.kind not in "iub":  # float -> int truncates toward zero, as in C
                    a = a.astype(_F64)
                return a.astype(npdt)
            if isinstance(a, (float, np.floating)) or not isinstance(a, (int, np.integer, bool, np.bool_)):
                x = float(a)
                if not math.isfinite(x):
                    raise InterpError(f"casting {x} to {e.dtype} in {e} (was the value ever written?)")
                a = int(x)
            a = int(a)
            if not lo <= a <= hi:  # wrap like a two's-complement conversion
                a = (a - lo) % span + lo
            return a

        return f

    def _select(self, e: E.Select):
        fc, fa, fb = self(e.cond), self(e.a), self(e.b)
        guard_a, guard_b = _needs_guard(e.a), _needs_guard(e.b)
        npdt = dt.to_numpy(e.dtype)
        fix = (lambda x: _to(x, npdt)) if dt.is_float(e.dtype) else (
            _int_result(npdt) if e.dtype != "bool" else (lambda x: x))

        def branch(c, f, m, guard):
            if not guard:
                return f(c)
            saved = c.mask
            m = _normalize_mask(_mask_and(saved, m))
            if m is False:
                return None
            c.mask = m
            try:
                return f(c)
            finally:
                c.mask = saved

        def f(c):
            cv = fc(c)
            if not isinstance(cv, np.ndarray):
                return fix(fa(c) if cv else fb(c))
            a = branch(c, fa, cv, guard_a)
            b = branch(c, fb, ~cv, guard_b)
            if a is None:
                return fix(np.broadcast_to(b, np.broadcast_shapes(np.shape(b), cv.shape)).copy())
            if b is None:
                return fix(np.broadcast_to(a, np.broadcast_shapes(np.shape(a), cv.shape)).copy())
            return fix(np.where(cv, a, b))

        return f

    def _call(self, e: E.Call):
        fargs = [self(a) for a in e.args]
        name = e.name
        if name in _warp.WARP_CALLS:
            return self._warp_call(e, fargs)
        if name.startswith(_debug_print.PRINT_PREFIX):
            return self._print_call(e, fargs)
        if name.startswith(_device_assert.ASSERT_PREFIX):
            return self._assert_call(e, fargs)
        if name.startswith("rng_"):  # language/random.py
            raise InterpError("T.rng_init / T.rng_rand / T.rng_rand_float: random numbers come from each thread's own "
                              "generator, and the tile interpreter has no threads: run the kernel on the emulator "
                              "(execution_backend='emulator') or a GPU")
        if name in ("isnan", "isinf", "isfinite"):
            fn = {"isnan": np.isnan, "isinf": np.isinf, "isfinite": np.isfinite}[name]
            arg_t = _F64 if e.args[0].dtype == "float64" else _F32  # 1e300 is finite in float64
            return lambda c: fn(_lift(fargs[0](c), arg_t))
        npdt = dt.to_numpy(e.dtype)
        if name == "reinterpret":  # the same bits as another type of the same width
            src, f0 = dt.to_numpy(e.args[0].dtype), fargs[0]
            fix = (lambda x: x) if dt.is_float(e.dtype) else _int_result(npdt)

            def bits(c):
                r = np.asarray(f0(c)).astype(src).view(npdt)
                return fix(r if r.ndim else npdt.type(r[()]))

            return bits
        if not dt.is_float(e.dtype):
            if name == "abs":
                fix = _int_result(npdt)
                return lambda c: fix(abs(fargs[0](c)))
            if name in ("min", "max"):
                fix = _int_result(npdt)
                g = _vmin if name == "min" else _vmax
                return lambda c: fix(g(fargs[0](c), fargs[1](c)))
            raise InterpError(f"intrinsic {name} on {e.dtype} values is not supported by the tile interpreter")
        fn = _ieee_function(name, e.dtype) if name.startswith(("ieee_", "cast_")) else _FLOAT_CALLS.get(name)
        if fn is None:
            raise InterpError(f"intrinsic T.{name} is not supported by the tile interpreter")
        work = _F64 if e.dtype == "float64" or name == "fma" else _F32
        if name == "cast_nosat":  # T.cast(..., sat=False): NumPy's conversion, which does not saturate
            f0 = fargs[0]
            return lambda c: _float8.convert_nosat(_lift(f0(c), work), npdt)
        if len(fargs) == 1:
            f0 = fargs[0]
            return lambda c: _to(fn(_lift(f0(c), work)), npdt)
        return lambda c: _to(fn(*[_lift(g(c), work) for g in fargs]), npdt)

    def _assert_call(self, e: E.Call, fargs):
        """T.device_assert: the first executing thread (T.Parallel iteration) whose condition is false raises."""
        fc = fargs[0]
        text = str(e.args[0])

        def asserted(c):
            ok = np.asarray(fc(c))
            block = [v_ for k, v_ in c.env.items() if isinstance(k, E.Var) and k.kind == "block"]
            shape = tuple(c.pshape) if c.in_par else (c.tid.shape if c.tid is not None else ())
            ok = np.broadcast_to(ok, np.broadcast_shapes(ok.shape, shape))
            active = np.broadcast_to(True if c.mask is None else c.mask, ok.shape)
            bad = np.flatnonzero(np.ravel(active & ~ok.astype(bool)))
            if len(bad):
                if c.in_par:  # the thread that runs it is the layout's choice: name the iteration
                    who = f"(T.Parallel iteration {tuple(int(x) for x in np.unravel_index(bad[0], ok.shape))})"
                else:
                    who = int(np.ravel(c.tid)[bad[0]]) if c.tid is not None else "(every thread)"
                _device_assert.fail(e.name, text, block, who)
            return np.int32(0)

        return asserted

    def _print_call(self, e: E.Call, fargs):
        """T.print: each executing thread (each active T.Parallel iteration) prints a line."""
        has_value, msg = _debug_print.parse(e.name)
        fv = fargs[0]

        def printed(c):
            v = fv(c)
            block = [v_ for k, v_ in c.env.items() if isinstance(k, E.Var) and k.kind == "block"]
            if c.in_par or c.tid is None:
                shape = tuple(c.pshape) if c.in_par else ()
                vals = np.broadcast_to(v, np.broadcast_shapes(np.shape(v), shape)) if shape else np.asarray(v)
                active = np.broadcast_to(True if c.mask is None else c.mask, vals.shape)
                who = "(a T.Parallel iteration)" if c.in_par else "(every thread)"
                for x, on in zip(np.ravel(vals), np.ravel(active)):
                    if on:
                        _debug_print.emit(msg, has_value, block, who, x)
                return np.int32(0)
            vals = np.broadcast_to(v, c.tid.shape)
            active = np.broadcast_to(True if c.mask is None else c.mask, c.tid.shape)
            for t_, x, on in zip(c.tid, vals, active):
                if on:
                    _debug_print.emit(msg, has_value, block, int(t_), x)
            return np.int32(0)

        return printed

    def _vote_call(self, e: E.Call, fargs):
        """Warp votes over the executing threads of each 32-thread warp."""
        fp, fm = fargs
        W = _warp.INTERPRETER_WARP

        def voted(c):
            if c.in_par:
                raise InterpError(f"{e.name.replace('warp_vote_', 'T.')} inside T.Parallel: warp votes are "
                                  "per-thread code (use them outside T.Parallel)")
            tid = c.tid if c.tid is not None else np.arange(c.nt, dtype=np.int32)
            pred = np.broadcast_to(fp(c), tid.shape)
            active = np.broadcast_to(True if c.mask is None else c.mask, tid.shape)
            out = _warp.vote(e.name, tid // W, tid % W, pred, active, int(fm(c)))
            if c.tid is None:  # a uniform vote: every thread gets the same answer
                return out[0]
            return out

        return voted

    def _warp_call(self, e: E.Call, fargs):
        """A shuffle reads the value another thread of the warp holds: a gather along the thread
        axis of per-thread values (uniform values are the same in every lane)."""
        if e.name == "warp_size":
            return lambda c: np.int32(_warp.INTERPRETER_WARP)
        if e.name in _warp.VOTES:
            return self._vote_call(e, fargs)
        if e.name == _warp.UNIFORM:  # the promise is checked by the emulator, which has warps
            return fargs[0]
        fv, fl, fw = fargs
        npdt = dt.to_numpy(e.dtype)

        def shfl(c):
            if c.in_par:
                raise InterpError(f"{e.name.replace('warp_shfl_', 'T.shfl_')} inside T.Parallel: shuffles are "
                                  "per-thread code (use them outside T.Parallel, on values indexed by the thread)")
            v = fv(c)
            if c.tid is None or not isinstance(v, np.ndarray):
                return v  # every thread holds the same value: each reads it back
            tid = c.tid
            v = np.broadcast_to(v, tid.shape)
            src = _warp.source_threads(e.name, tid, fl(c), int(fw(c)), _warp.INTERPRETER_WARP)
            src = np.where(src < c.nt, src, tid)
            pos = src - tid[0]
            if (pos < 0).any() or (pos >= tid.shape[0]).any():
                raise InterpError("a shuffle reads a thread outside the T.ws partition that executes it")
            return _to(v[pos], npdt)

        return shfl

    def _load(self, e: E.Load):
        buf = e.buffer
        fidx = [self(i) for i in e.indices]

        def f(c):
            try:
                arr = c.bufs[buf]
            except KeyError:
                raise InterpError(f"buffer {buf.name} is read before it is allocated") from None
            idx = [g(c) for g in fidx]
            pre = c.pbufs.get(buf)
            if pre is not None:
                return _gather(arr, pre + idx, c.mask, buf, len(pre))
            if buf in c.tbufs:
                out = _gather(arr, [c.tid] + idx, c.mask, buf, 1)
                if c.in_par:
                    return _uniform_over_threads(out, c.mask, f"the per-thread value {buf.name}[...]")
                return out
            return _gather(arr, idx, c.mask, buf, 0)

        return f

    def _shuffle(self, e):
        raise InterpError("warp shuffles belong to the thread IR; the tile interpreter runs Tile IR only")


# --------------------------------------------------------------------------------------------
# element access


def _oob_message(buf: t.Buffer, d: int, lo, hi, n: int, verb: str) -> str:
    return (f"{buf.name} ({buf.scope}) is {verb} out of bounds: index {lo}..{hi} in dimension {d}, "
            f"which has extent {n}")


def _bad_lanes(idx, shape, skip: int):
    bad = None
    for d in range(skip, len(idx)):
        i, n = idx[d], shape[d]
        b = (i < 0) | (i >= n)
        bad = b if bad is None else bad | b
    return bad


def _check_indices(idx, shape, mask, buf, skip: int, verb: str) -> bool:
    """True when every index is in range.  When some lane is out of range, that lane must be
    masked off (else OutOfBoundsError); returns False so the caller clamps."""
    ok = True
    for d in range(skip, len(idx)):
        i, n = idx[d], shape[d]
        if isinstance(i, np.ndarray):
            if i.size and (i.min() < 0 or i.max() >= n):
                ok = False
                break
        elif not 0 <= i < n:
            ok = False
            break
    if ok:
        return True
    bad = _bad_lanes(idx, shape, skip)
    if mask is not None:
        bad = bad & mask
    if np.any(bad):
        # report the offending range of the active lanes, dimension by dimension
        for d in range(skip, len(idx)):
            i, n = idx[d], shape[d]
            sel = np.broadcast_to(i, np.shape(bad))[bad] if np.ndim(bad) else np.asarray(i).ravel()
            if sel.size and (sel.min() < 0 or sel.max() >= n):
                d_user = d - skip
                raise OutOfBoundsError(_oob_message(buf, d_user, int(sel.min()), int(sel.max()), n, verb))
        raise OutOfBoundsError(f"{buf.name} is {verb} out of bounds")
    return False


def _gather(arr: np.ndarray, idx: list, mask, buf: t.Buffer, skip: int):
    if not _check_indices(idx, arr.shape, mask, buf, skip, "read"):
        # only masked-off lanes are out of range: clamp them so the gather is safe
        idx = [i if d < skip else np.clip(i, 0, n - 1) for d, (i, n) in enumerate(zip(idx, arr.shape))]
    return arr[tuple(idx)]


def _scatter(arr: np.ndarray, idx: list, val, mask, buf: t.Buffer, skip: int) -> None:
    """``arr[idx] = val`` for the active lanes (``mask``), index arrays and values broadcast."""
    if mask is False:
        return
    if _float8.saturating_max(arr.dtype) is not None and np.asarray(val).dtype != arr.dtype:
        val = _to(val, arr.dtype)  # NumPy's own conversion to fp8 would not saturate
    if not any(isinstance(i, np.ndarray) for i in idx):
        # one element: the active lanes must agree on what they store
        if isinstance(val, np.ndarray):
            val = _one_value(val, mask, buf)
        _check_indices(idx, arr.shape, None, buf, skip, "written")
        arr[tuple(idx)] = val
        return
    if mask is None:
        ishape = np.broadcast_shapes(*(np.shape(i) for i in idx))
        shape = np.broadcast_shapes(ishape, np.shape(val))
        if shape == ishape:  # the common case: NumPy broadcasts the value into the fancy index
            _check_indices(idx, arr.shape, None, buf, skip, "written")
            _check_collisions(arr.shape, [np.broadcast_to(i, shape) for i in idx], np.broadcast_to(val, shape), buf)
            arr[tuple(idx)] = val
            return
        sel = [np.broadcast_to(i, shape) for i in idx]
        v = np.broadcast_to(val, shape)
    else:
        shape = np.broadcast_shapes(*(np.shape(i) for i in idx), np.shape(val), np.shape(mask))
        m = np.broadcast_to(mask, shape)
        sel = [np.broadcast_to(i, shape)[m] for i in idx]
        v = np.broadcast_to(val, shape)[m]
    _check_indices(sel, arr.shape, None, buf, skip, "written")
    _check_collisions(arr.shape, sel, v, buf)
    arr[tuple(sel)] = v


def _check_collisions(shape, sel: list, v, buf: t.Buffer) -> None:
    """Lanes (threads or ``T.Parallel`` iterations) of one store that hit one element must store
    the same value: iterations that update one element (``acc[i // 2] += x[i]``) race on a GPU."""
    if np.size(v) < 2:
        return
    lin = np.ravel_multi_index(tuple(np.asarray(i, np.int64).reshape(-1) for i in sel), shape, mode="clip")
    if lin.size <= int(np.prod(shape)) * 4:
        if np.bincount(lin).max() < 2:
            return
    order = np.argsort(lin, kind="stable")
    ls, vs = lin[order], np.ascontiguousarray(v).reshape(-1)[order]
    dup = ls[1:] == ls[:-1]
    if dup.any() and not np.all(_same(vs[1:][dup], vs[:-1][dup])):
        raise InterpError(f"data race: several threads (or T.Parallel iterations) store different values to "
                          f"the same element of {buf.name}")


def _one_value(val: np.ndarray, mask, buf: t.Buffer):
    """The value every active lane stores to one element (they must agree: else it is a race)."""
    v = val
    if mask is not None:
        shape = np.broadcast_shapes(v.shape, np.shape(mask))
        v = np.broadcast_to(v, shape)[np.broadcast_to(mask, shape)]
    v = v.reshape(-1)
    if v.size and not np.all(_same(v, v[0])):
        raise InterpError(f"data race: several threads (or T.Parallel iterations) store different values to "
                          f"the same element of {buf.name}")
    return v[0]


# --------------------------------------------------------------------------------------------
# statements


def _stmt_exprs(s) -> list:
    """Every expression held directly by a statement (indices, values, region starts/extents)."""
    out: list = []

    def add(v):
        if isinstance(v, E.Expr):
            out.append(v)
        elif isinstance(v, t.Region):
            for x in v.starts:
                add(x)
            for x in v.extents:
                add(x)
        elif isinstance(v, (tuple, list)):
            for x in v:
                add(x)

    for name in getattr(s, "__dataclass_fields__", {}):
        v = getattr(s, name)
        if not isinstance(v, t.Stmt) and not (isinstance(v, list) and v and isinstance(v[0], t.Stmt)):
            add(v)
    if isinstance(s, t.Alloc):
        out.extend(x for x in s.buffer.shape if isinstance(x, E.Expr))
    return out


def _vars_in_stmt_tree(s) -> set:
    found: set = set()

    def visit(x):
        for e in _stmt_exprs(x):
            walk_expr(e, lambda y: found.add(y) if isinstance(y, E.Var) else None)

    walk(s, visit)
    return found


class _Interpreter:
    def __init__(self, func: t.PrimFunc):
        self.func = func
        self.comp = _ExprCompiler()
        self.dispatch = {
            t.SeqStmt: self.x_seq, t.Kernel: self.x_kernel, t.Alloc: self.x_alloc, t.For: self.x_for,
            t.ParallelFor: self.x_parallel, t.IfThenElse: self.x_if, t.BufferStore: self.x_store,
            t.LetStmt: self.x_let, t.Annotate: self.x_nothing,
            t.Evaluate: self.x_evaluate, t.ThreadPartition: self.x_partition,
            th.Barrier: self.x_nothing, th.MbarrierInit: self.x_nothing, th.FenceProxyAsync: self.x_nothing,
            th.GridDependency: self.x_nothing, th.PrefetchL2: self.x_nothing,
            th.SetMaxNReg: self.x_nothing, th.MbarrierArrive: self.x_mbarrier, th.MbarrierWait: self.x_mbarrier,
            th.MbarrierExpectTx: self.x_mbarrier, th.NamedBarrier: self.x_mbarrier,
        }
        # tile ops: each one's execution as registered in ir.tile_ops (the built-in ones at the end of this file)
        for op_type, run in hooks("interp").items():
            self.dispatch[op_type] = functools.partial(run, self)
        self.par_info: dict = {}
        self.uniformity = None  # ir.uniformity analysis, made on first use
        self.region = None  # the ThreadPartition being run
        self.par_stored: dict = {}  # T.Parallel -> per-thread buffers from outside that it writes
        self.aranges: dict = {}
        self.full_regions: dict = {}

    def full_region(self, buf: t.Buffer) -> t.Region:
        # one Region per buffer, so its start expressions are compiled once
        r = self.full_regions.get(buf)
        if r is None:
            r = self.full_regions[buf] = t.Region.full(buf)
        return r

    def exec(self, s, c: _Ctx) -> None:
        if s is None:
            return
        fn = self.dispatch.get(type(s))
        if fn is None:
            raise InterpError(f"the tile interpreter cannot execute {type(s).__name__} statements", s.loc)
        try:
            fn(s, c)
        except InterpError as err:
            if err.loc is None and getattr(s, "loc", None) is not None:
                raise type(err)(err.message, s.loc) from None
            raise
        except Exception as err:  # say which kernel line failed, then re-raise unchanged
            if getattr(s, "loc", None) is not None and not getattr(err, "_tw_located", False):
                err._tw_located = True
                err.add_note("while interpreting:\n" + s.loc.excerpt())
            raise

    # control flow -------------------------------------------------------------------------
    def x_seq(self, s: t.SeqStmt, c: _Ctx) -> None:
        ex = self.exec
        for x in s.stmts:
            ex(x, c)

    def x_nothing(self, s, c: _Ctx) -> None:
        pass

    def x_evaluate(self, s: t.Evaluate, c: _Ctx) -> None:
        self.comp(s.value)(c)

    def x_let(self, s: t.LetStmt, c: _Ctx) -> None:
        c.env[s.var] = self.comp(s.value)(c)

    def x_kernel(self, k: t.Kernel, c: _Ctx) -> None:
        if c.tid is not None or c.in_par:
            raise InterpError("nested T.Kernel blocks are not supported")
        grid = []
        for g in k.grid:
            v = self.comp(g)(c)
            if isinstance(v, np.ndarray):
                raise InterpError(f"grid extent {g} is not a scalar")
            grid.append(int(v))
        check_launch_grid(grid, self.func.name, static=all(isinstance(g, (int, E.Const)) for g in k.grid))
        tx = k.attrs.get("thread_var")
        threaded = tx is not None and tx in _vars_in_stmt_tree(k.body)
        nt = k.num_threads
        tid = np.arange(nt, dtype=np.int32) if threaded else None
        base_env, base_bufs = c.env, c.bufs
        tbufs: set = set()
        if threaded:
            walk(k.body, lambda s: tbufs.add(s.buffer) if isinstance(s, t.Alloc) and s.buffer.scope in (
                "local", "var") else None)
            tbufs -= _allocated_in_parallel(k.body)
        ranges = [range(n) for n in reversed(grid)]  # x varies fastest
        for idx in itertools.product(*ranges):
            bc = _Ctx(dict(base_env), dict(base_bufs))
            for var, v in zip(k.block_vars, reversed(idx)):
                bc.env[var] = v
            bc.nt = nt
            if threaded:
                bc.env[tx] = tid
                bc.tid = tid
                bc.tbufs = tbufs
            self.exec(k.body, bc)

    def x_alloc(self, s: t.Alloc, c: _Ctx) -> None:
        buf = s.buffer
        if buf.scope == "global" and s.init is not None:
            c.bufs[buf] = self._tensor_at_address(s, c)
            return
        arr = c.bufs.get(buf)
        if arr is None:
            if buf.scope == "global":
                raise InterpError(f"cannot allocate global buffer {buf.name} inside a kernel")
            shape = tuple(int(self.comp(x)(c)) if isinstance(x, E.Expr) else x for x in buf.shape)
            if buf in c.tbufs:
                shape = (c.nt,) + shape
            elif c.in_par and buf.scope in ("local", "var"):
                c.pbufs[buf] = self._iteration_index(c)
                shape = tuple(c.pshape) + shape
            npdt = dt.to_numpy(buf.dtype)
            arr = np.full(shape, _poison(npdt), dtype=npdt)
            c.bufs[buf] = arr
        if s.init is not None:
            v = self.comp(s.init)(c)
            if buf in c.pbufs:
                pre = c.pbufs[buf]
                _scatter(arr, pre + [0] * buf.ndim, v, c.mask, buf, len(pre))
            elif buf in c.tbufs:
                if c.in_par:
                    arr[...] = np.reshape(v, -1)[0] if isinstance(v, np.ndarray) else v
                else:
                    _scatter(arr, [c.tid] + [0] * buf.ndim, v, c.mask, buf, 1)
            else:
                _scatter(arr, [0] * buf.ndim, v, c.mask, buf, 0)

    def _tensor_at_address(self, s: t.Alloc, c: _Ctx) -> np.ndarray:
        """``T.make_tensor(address, ...)``: the host array the address points into (host_addresses.py)."""
        buf = s.buffer
        if c.in_par:
            raise InterpError(f"T.make_tensor on an address inside T.Parallel ({buf.name}) is not supported",
                              s.loc)
        v = self.comp(s.init)(c)
        if isinstance(v, np.ndarray):
            flat = v.reshape(-1)
            if flat.size == 0 or (flat != flat[0]).any():
                raise InterpError(f"the address of tensor {buf.name} differs between the threads of a block; the "
                                  "CPU backends need one address per block", s.loc)
            v = flat[0]
        dims = [int(self.comp(x)(c)) if isinstance(x, E.Expr) else x for x in buf.shape]
        strides = [int(self.comp(x)(c)) if isinstance(x, E.Expr) else x for x in buf.strides]
        try:
            span = self.addresses.resolve(int(v), dims, strides, buf.dtype, buf.name)
        except AddressError as err:
            raise InterpError(str(err), s.loc) from None
        return strided_view(span, dims, strides)

    def _iteration_index(self, c: _Ctx) -> list:
        """Index arrays that pick the current T.Parallel iteration along each axis of the nest."""
        out = []
        for k, n in enumerate(c.pshape):
            if n == 1:
                out.append(0)
            else:
                shape = [1] * len(c.pshape)
                shape[k] = n
                out.append(np.arange(n, dtype=np.intp).reshape(shape))
        return out

    def x_if(self, s: t.IfThenElse, c: _Ctx) -> None:
        cond = self.comp(s.cond)(c)
        if not isinstance(cond, np.ndarray):
            self.exec(s.then_body if cond else s.else_body, c)
            return
        saved = c.mask
        for body, m in ((s.then_body, cond), (s.else_body, ~cond)):
            if body is None:
                continue
            mm = _normalize_mask(_mask_and(saved, m))
            if mm is False:
                continue
            c.mask = mm
            try:
                self.exec(body, c)
            finally:
                c.mask = saved

    def x_partition(self, s: t.ThreadPartition, c: _Ctx) -> None:
        """Threads base..base+count-1 run the body: per-thread state is narrowed to those threads (the
        thread axis of per-thread values and the thread index), so tile operations inside run once,
        for that set, and scalar code runs in each of its threads."""
        if c.tid is None:  # block mode: every thread is alike, the set performs the tile ops once
            saved_region, self.region = self.region, s
            try:
                self.exec(s.body, c)
            finally:
                self.region = saved_region
            return
        if c.mask is not None:
            raise InterpError(f"thread partition {s.role} under a thread-dependent condition")
        sel = slice(s.base, s.base + s.count)
        nt = c.nt
        saved_env, saved_tid = c.env, c.tid
        c.env = {k: (v[sel] if isinstance(v, np.ndarray) and v.ndim == 1 and v.shape[0] == nt else v)
                 for k, v in saved_env.items()}
        c.tid = saved_tid[sel]
        saved_region, self.region = self.region, s
        try:
            self.exec(s.body, c)
        finally:
            c.env, c.tid, self.region = saved_env, saved_tid, saved_region

    def _uniform(self, s) -> bool:
        from ..ir.uniformity import Uniformity
        from ..ir.verifier import exprs_of

        if self.uniformity is None:
            self.uniformity = Uniformity(self.func)
        return all(self.uniformity.is_uniform(e, self.region) for e in exprs_of(s))

    def x_mbarrier(self, s, c: _Ctx) -> None:
        raise InterpError(
            f"the tile interpreter runs a block's statements one after another, so it cannot run code that hands "
            f"data between threads through mbarriers or named barriers ({type(s).__name__}); run it on the GPU or "
            "on the emulator: tilewright.compile(func, target='cuda', execution_backend='emulator')")

    def x_for(self, s: t.For, c: _Ctx) -> None:
        start = self.comp(s.start)(c)
        extent = self.comp(s.extent)(c)
        var, body, env, ex = s.var, s.body, c.env, self.exec
        if not isinstance(start, np.ndarray) and not isinstance(extent, np.ndarray):
            start = int(start)
            for v in range(start, start + int(extent)):
                env[var] = v
                ex(body, c)
            return
        # bounds that differ between lanes: run the union of the ranges, masking each lane's own
        stop = start + extent
        saved = c.mask
        shape = np.broadcast_shapes(np.shape(start), np.shape(stop), np.shape(saved) if saved is not None else ())
        lo_b, hi_b = np.broadcast_to(start, shape), np.broadcast_to(stop, shape)
        if saved is not None:
            m = np.broadcast_to(saved, shape)
            lo_b, hi_b = lo_b[m], hi_b[m]
        if lo_b.size == 0:
            return
        lo, hi = int(lo_b.min()), int(hi_b.max())
        try:
            for v in range(lo, hi):
                lane = _normalize_mask(_mask_and(saved, (start <= v) & (v < stop)))
                if lane is False:
                    continue
                c.mask = lane
                env[var] = v
                ex(body, c)
        finally:
            c.mask = saved

    def x_parallel(self, s: t.ParallelFor, c: _Ctx) -> None:
        extents = [int(self.comp(x)(c)) if isinstance(x, E.Expr) else int(x) for x in s.extents]
        if c.in_par:
            self._run_parallel(s, extents, c)
            return
        # entering a T.Parallel nest from block/thread level
        if c.mask is not None:
            raise InterpError("T.Parallel under a thread-dependent condition: the loop is spread over all "
                              "threads of the block")
        info = self.par_info.get(s)
        if info is None:
            info = (_parallel_rank(s), _vars_in_stmt_tree(s.body))
            self.par_info[s] = info
        rank, used = info
        saved_env, saved_tid = c.env, c.tid
        env = dict(saved_env)
        if c.tid is not None:
            # outside T.Parallel a per-thread value is an array over the threads; inside, it may be
            # used only when every thread holds the same one
            for var in used:
                v = saved_env.get(var)
                if not isinstance(v, np.ndarray):
                    continue
                first = v.reshape(-1)[0]
                if not np.all(_same(v, first)):
                    what = ("the thread index (T.get_thread_binding())" if var.kind == "thread"
                            else f"the per-thread value {var.name}")
                    raise InterpError(f"{what} is used inside T.Parallel, where threads differ in it; "
                                      "which thread runs an iteration is the compiler's choice")
                env[var] = first
            c.tid = c.tid.reshape((-1,) + (1,) * rank)
        c.env, c.in_par, c.prank, c.poff, c.pshape = env, True, rank, 0, [1] * rank
        try:
            self._run_parallel(s, extents, c)
        finally:
            c.env, c.in_par, c.prank, c.poff, c.tid, c.pshape = saved_env, False, 0, 0, saved_tid, []

    def _run_parallel(self, s: t.ParallelFor, extents: list, c: _Ctx) -> None:
        off, rank = c.poff, c.prank
        if off + len(extents) > rank:
            raise InterpError("internal: T.Parallel nest deeper than computed")
        for k, (var, n) in enumerate(zip(s.vars, extents)):
            key = (n, off + k, rank)
            a = self.aranges.get(key)
            if a is None:
                shape = [1] * rank
                shape[off + k] = n
                a = np.arange(n, dtype=dt.to_numpy(var.dtype)).reshape(shape)
                a.flags.writeable = False
                self.aranges[key] = a
            c.env[var] = a
            c.pshape[off + k] = n
        c.poff = off + len(extents)
        private = self._privatize(s, c) if off == 0 else None
        try:
            self.exec(s.body, c)
        finally:
            c.poff = off
            for k in range(len(extents)):
                c.pshape[off + k] = 1
            if private:
                self._unprivatize(private, c)

    def _privatize(self, s: t.ParallelFor, c: _Ctx) -> list:
        """Per-thread (local/var) buffers allocated before the loop and written in it: on a GPU each
        thread runs its iterations one after another with its own copy, so an iteration that writes
        the buffer before reading it sees only its own values (the frontend refuses the other kind).
        Give each iteration a copy, starting from the value before the loop."""
        names = self.par_stored.get(s)
        if names is None:
            names = self.par_stored[s] = _scratch_buffers(s)
        out = []
        for buf in names:
            arr = c.bufs.get(buf)
            if arr is None or buf in c.pbufs:
                continue
            threaded = buf in c.tbufs
            start = arr
            if threaded:
                first = arr[0]
                start = first if np.all(_same(arr, first)) else np.full_like(first, _poison(arr.dtype))
            copy = np.empty(tuple(c.pshape) + start.shape, dtype=arr.dtype)
            copy[...] = start
            out.append((buf, arr, threaded))
            c.bufs[buf] = copy
            c.pbufs[buf] = self._iteration_index(c)
        return out

    def _unprivatize(self, private: list, c: _Ctx) -> None:
        """After the loop a thread holds what its last iteration left: one value if every iteration
        left the same, else garbage (poison here)."""
        for buf, arr, threaded in private:
            copy = c.bufs[buf]
            del c.pbufs[buf]
            c.bufs[buf] = arr
            lead = copy.ndim - (arr.ndim - (1 if threaded else 0))
            flat = copy.reshape((-1,) + copy.shape[lead:])
            first = flat[0]
            arr[...] = first if np.all(_same(flat, first)) else _poison(arr.dtype)

    # element stores -----------------------------------------------------------------------
    def x_store(self, s: t.BufferStore, c: _Ctx) -> None:
        buf = s.buffer
        arr = c.bufs.get(buf)
        if arr is None:
            raise InterpError(f"buffer {buf.name} is written before it is allocated")
        comp = self.comp
        idx = [comp(i)(c) for i in s.indices]
        val = comp(s.value)(c)
        if buf in c.pbufs:
            pre = c.pbufs[buf]
            _scatter(arr, pre + idx, val, c.mask, buf, len(pre))
        elif buf in c.tbufs:
            _scatter(arr, [c.tid] + idx, val, c.mask, buf, 1)
        else:
            _scatter(arr, idx, val, c.mask, buf, 0)

    # tile operations ----------------------------------------------------------------------
    def _tile_op_allowed(self, c: _Ctx, what: str) -> None:
        if c.in_par:
            raise InterpError(f"{what} cannot be used inside T.Parallel")
        if c.mask is not None:
            raise InterpError(f"{what} under a thread-dependent condition: tile operations are done by the "
                              "whole block")

    def _scalar(self, e, c: _Ctx, what: str):
        v = self.comp(e)(c)
        if isinstance(v, np.ndarray):
            flat = v.reshape(-1)
            if not np.all(_same(flat, flat[0])):
                raise InterpError(f"{what} ({e}) differs between threads; tile operations need one value per block")
            v = flat[0]
        return v

    def _region(self, r: t.Region, c: _Ctx, what: str):
        buf = r.buffer
        arr = c.bufs.get(buf)
        if arr is None:
            raise InterpError(f"buffer {buf.name} is used before it is allocated")
        starts = [int(self._scalar(x, c, f"the start of {what}")) for x in r.starts]
        extents = [int(self._scalar(x, c, f"the extent of {what}")) if isinstance(x, E.Expr) else int(x)
                   for x in r.extents]
        threaded = buf in c.tbufs
        shape = arr.shape[1:] if threaded else arr.shape
        if len(starts) != len(shape):
            raise InterpError(f"{what}: region of {buf.name} has {len(starts)} dimensions, the buffer {len(shape)}")
        return buf, arr, starts, extents, shape, threaded

    def _read_region(self, r: t.Region, c: _Ctx, what: str) -> np.ndarray:
        """The region's elements, shaped as its extents (global out-of-bounds parts read as zero)."""
        buf, arr, starts, extents, shape, threaded = self._region(r, c, what)
        inside, clip, sub = _clip_region(starts, extents, shape)
        if threaded:
            vals = arr[(slice(None),) + self._onchip_slices(buf, starts, extents, shape, inside, what)]
            return _uniform_over_threads(vals, None, f"the per-thread buffer {buf.name}")
        if inside:
            return arr[clip]
        if buf.scope != "global":
            self._onchip_slices(buf, starts, extents, shape, inside, what)
        out = np.zeros(extents, dtype=arr.dtype)
        if sub is not None:
            out[sub] = arr[clip]
        return out

    def _write_region(self, r: t.Region, c: _Ctx, data: np.ndarray, what: str) -> None:
        """Store ``data`` (shaped as the region's extents); global out-of-bounds parts are dropped."""
        buf, arr, starts, extents, shape, threaded = self._region(r, c, what)
        inside, clip, sub = _clip_region(starts, extents, shape)
        data = _to(data, arr.dtype)  # to an fp8 type saturating (NumPy's assignment would not)
        if threaded:
            arr[(slice(None),) + self._onchip_slices(buf, starts, extents, shape, inside, what)] = data
            return
        if inside:
            arr[clip] = data
            return
        if buf.scope != "global":
            self._onchip_slices(buf, starts, extents, shape, inside, what)
        if sub is not None:
            arr[clip] = data[sub]

    @staticmethod
    def _onchip_slices(buf, starts, extents, shape, inside, what):
        if not inside:
            for d, (s0, e0, n) in enumerate(zip(starts, extents, shape)):
                if s0 < 0 or s0 + e0 > n:
                    raise OutOfBoundsError(f"{what}: the region {s0}..{s0 + e0 - 1} of {buf.name} ({buf.scope}) "
                                           f"in dimension {d} is outside its extent {n}; only global regions may "
                                           "hang over the edge")
        return tuple(slice(s0, s0 + e0) for s0, e0 in zip(starts, extents))

    def x_copy(self, s: t.Copy, c: _Ctx) -> None:
        self._tile_op_allowed(c, "T.copy")
        data = self._read_region(s.src, c, "T.copy source")
        dst_ext = [int(self._scalar(x, c, "T.copy extent")) if isinstance(x, E.Expr) else int(x)
                   for x in s.dst.extents]
        if _squeeze(data.shape) != _squeeze(dst_ext):
            raise InterpError(f"T.copy: source tile {s.src.buffer.name} {tuple(data.shape)} and destination "
                              f"{s.dst.buffer.name} {tuple(dst_ext)} differ in shape")
        self._write_region(s.dst, c, data.reshape(dst_ext), "T.copy destination")

    def x_fill(self, s: t.Fill, c: _Ctx) -> None:
        self._tile_op_allowed(c, "T.fill")
        v = self._scalar(s.value, c, "the T.fill value")
        _, arr, _, extents, _, _ = self._region(s.dst, c, "T.fill")
        if _float8.saturating_max(arr.dtype) is not None:
            v = _to(np.asarray(v), arr.dtype)  # saturating (np.full's own conversion would not)
        self._write_region(s.dst, c, np.full(extents, v, dtype=arr.dtype), "T.fill")

    def x_gemm(self, s: t.Gemm, c: _Ctx) -> None:
        self._tile_op_allowed(c, "T.gemm")
        a = self._read_region(s.a, c, "T.gemm A").reshape(s.a.shape)
        b = self._read_region(s.b, c, "T.gemm B").reshape(s.b.shape)
        if s.trans_a:
            a = a.T
        if s.trans_b:
            b = b.T
        cdt = dt.to_numpy(s.c.buffer.dtype)
        ab_float = dt.is_float(s.a.buffer.dtype)
        if ab_float:
            # products of <=32-bit floats are summed in float32, like tensor cores
            work = _F64 if "float64" in (s.a.buffer.dtype, s.b.buffer.dtype, s.c.buffer.dtype) else _F32
            prod = _matmul(a.astype(work), b.astype(work))
        else:
            # integer products summed exactly (float64 is exact far beyond any tile's range)
            prod = np.rint(_matmul(a.astype(_F64), b.astype(_F64))).astype(_I64)
        if not dt.is_float(s.c.buffer.dtype):
            prod = prod.astype(_I64)
        if not s.clear_accum:
            old = self._read_region(s.c, c, "T.gemm C").reshape(s.c.shape)
            prod = old.astype(prod.dtype) + prod
        ext = [int(x) for x in s.c.extents]
        self._write_region(s.c, c, _to(prod, cdt).reshape(ext), "T.gemm C")

    def x_reduce(self, s: t.Reduce, c: _Ctx) -> None:
        self._tile_op_allowed(c, f"T.reduce_{s.op}")
        src = self._read_region(self.full_region(s.src), c, f"T.reduce_{s.op} source")
        sdt = s.src.dtype
        if dt.is_float(sdt):
            work = _F64 if sdt == "float64" else _F32
        else:
            work = _I64
        x = src.astype(work)
        if s.op in ("abssum", "absmax"):
            x = np.abs(x)
        # max/min drop NaN elements as TileLang's reductions (fmaxf) do, unless nan_propagate=True
        fmax, fmin = (np.maximum, np.minimum) if s.nan_propagate else (np.fmax, np.fmin)
        if s.op in ("sum", "abssum"):
            r = x.sum(axis=s.dim)
        elif s.op in ("max", "absmax"):
            r = fmax.reduce(x, axis=s.dim)
        elif s.op == "min":
            r = fmin.reduce(x, axis=s.dim)
        elif s.op in _BITWISE_REDUCE:  # TileLang's reduce_bitand/bitor/bitxor (integers)
            r = _BITWISE_REDUCE[s.op].reduce(x, axis=s.dim)
        else:
            raise InterpError(f"unknown reduction {s.op!r}")
        dst_shape = tuple(int(n) for n in s.dst.shape)
        if r.size != math.prod(dst_shape):
            raise InterpError(f"T.reduce_{s.op}: result of {r.size} elements does not fit {s.dst.name}{dst_shape}")
        r = r.reshape(dst_shape)
        if not s.clear:
            old = self._read_region(self.full_region(s.dst), c, f"T.reduce_{s.op} destination").astype(work)
            if s.op in _BITWISE_REDUCE:
                r = _BITWISE_REDUCE[s.op](old, r)
            elif s.op in ("sum", "abssum"):
                r = old + r
            else:
                r = fmin(old, r) if s.op == "min" else fmax(old, r)
        self._write_region(self.full_region(s.dst), c, _to(r, dt.to_numpy(s.dst.dtype)), f"T.reduce_{s.op}")

    def x_atomic(self, s: t.Atomic, c: _Ctx) -> None:
        if s.op not in ("add", "max", "min", *_BITWISE_ATOMICS):
            raise InterpError(f"unknown atomic operation {s.op!r}")
        if isinstance(s.value, t.Region):
            self._tile_op_allowed(c, f"T.atomic_{s.op} of a tile")
            val = self._read_region(s.value, c, f"T.atomic_{s.op} value")
            _, arr, _, extents, _, _ = self._region(s.dst, c, f"T.atomic_{s.op}")
            if _squeeze(val.shape) != _squeeze(extents):
                raise InterpError(f"T.atomic_{s.op}: value tile {tuple(val.shape)} does not fit the destination "
                                  f"{tuple(extents)}")
            old = self._read_region(s.dst, c, f"T.atomic_{s.op} destination")
            new = _combine(s.op, old, val.reshape(extents), arr.dtype)
            self._write_region(s.dst, c, new, f"T.atomic_{s.op} destination")
            return
        buf = s.dst.buffer
        arr = c.bufs.get(buf)
        if arr is None:
            raise InterpError(f"buffer {buf.name} is used before it is allocated")
        idx = [self.comp(x)(c) for x in s.dst.starts]
        val = self.comp(s.value)(c)
        if not c.in_par and c.mask is None and self._uniform(s):
            # the same update in every thread of the set (ir.uniformity): done once, as compiled
            idx = [_uniform_over_threads(x, None, "the atomic's index") if isinstance(x, np.ndarray) else x
                   for x in idx]
            val = _uniform_over_threads(val, None, "the atomic's value") if isinstance(val, np.ndarray) else val
        skip = 0
        if buf in c.pbufs:
            idx = c.pbufs[buf] + idx
            skip = len(c.pbufs[buf])
        elif buf in c.tbufs:
            idx = [c.tid] + idx
            skip = 1
        mask = c.mask
        if mask is False:
            return
        arrays = [x for x in idx + [val] if isinstance(x, np.ndarray)]
        # inside T.Parallel every active iteration updates, even where index and value are the same
        pshape = tuple(c.pshape) if c.in_par else ()
        if not arrays and mask is None and not pshape:
            _check_indices(idx, arr.shape, None, buf, skip, "updated atomically")
            key = tuple(idx)
            if s.result is not None:  # return_prev: the value before the update
                c.env[s.result] = arr.dtype.type(arr[key])
            arr[key] = _combine(s.op, arr[key], val, arr.dtype)
            return
        shape = np.broadcast_shapes(*(np.shape(x) for x in idx), np.shape(val), np.shape(mask), pshape)
        if mask is None:
            m = None
            sel = [np.broadcast_to(i, shape).reshape(-1) for i in idx]
            v = np.broadcast_to(val, shape).reshape(-1)
        else:
            m = np.broadcast_to(mask, shape)
            sel = [np.broadcast_to(i, shape)[m] for i in idx]
            v = np.broadcast_to(val, shape)[m]
        _check_indices(sel, arr.shape, None, buf, skip, "updated atomically")
        if s.result is None:
            _atomic_many(s.op, arr, sel, v)
            return
        prev = np.zeros(shape, dtype=arr.dtype)  # lanes that do not take part read 0
        got = _atomic_many_prev(s.op, arr, sel, v)
        if m is None:
            prev = got.reshape(shape)
        else:
            prev[m] = got
        c.env[s.result] = prev


def _squeeze(shape) -> tuple:
    return tuple(n for n in shape if n != 1)


def _matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` for tiles.  Tile-sized products go through einsum's single-threaded loops: a
    multi-threaded BLAS synchronises its threads on every call, and on a busy machine that makes
    hundreds of tiny GEMMs take seconds instead of milliseconds."""
    if a.shape[0] * a.shape[1] * b.shape[1] <= _EINSUM_MAX_MACS:
        return np.einsum("mk,kn->mn", a, b, optimize=False)
    return a @ b


_EINSUM_MAX_MACS = 1 << 22


def _clip_region(starts, extents, shape):
    """(fully inside?, slices of the in-bounds part, matching slices of the region or None if empty)."""
    inside = True
    clip, sub = [], []
    for s0, e0, n in zip(starts, extents, shape):
        lo, hi = max(s0, 0), min(s0 + e0, n)
        if lo != s0 or hi != s0 + e0:
            inside = False
        if hi <= lo:
            return False, None, None
        clip.append(slice(lo, hi))
        sub.append(slice(lo - s0, hi - s0))
    return inside, tuple(clip), tuple(sub)


def _combine(op: str, old, val, npdt: np.dtype):
    if npdt in _FLOAT_NP:
        work = _F64 if npdt == _F64 else _F32
    else:
        work = _I64
    o = np.asarray(old).astype(work)
    v = np.asarray(val).astype(work)
    if op in _BITWISE_ATOMICS:  # TileLang's atomic_and/or/xor (integers) and atomic_store (exch)
        r = _BITWISE_ATOMICS[op](o, v)
    else:
        r = o + v if op == "add" else (np.maximum(o, v) if op == "max" else np.minimum(o, v))
    return r.astype(npdt) if r.ndim else npdt.type(r)


_BITWISE_REDUCE = {"bitand": np.bitwise_and, "bitor": np.bitwise_or, "bitxor": np.bitwise_xor}
_BITWISE_ATOMICS = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor, "exch": lambda o, v: v}


def _atomic_many(op: str, arr: np.ndarray, idx: list, vals: np.ndarray) -> None:
    """Apply ``op`` for every (index, value) pair; repeated indices all take effect, as atomics do."""
    if vals.size == 0:
        return
    lin = np.ravel_multi_index(tuple(np.asarray(i, dtype=np.intp) for i in idx), arr.shape)
    uniq, inv = np.unique(lin, return_inverse=True)
    where = np.unravel_index(uniq, arr.shape)
    npdt = arr.dtype
    is_float = npdt in _FLOAT_NP
    cur = arr[where]
    if op in _BITWISE_ATOMICS:
        # every update takes effect: fold them one at a time (and/or/xor commute; exch keeps one)
        acc = cur.astype(npdt if op == "exch" else _I64)
        for n, k in enumerate(inv):
            acc[k] = _BITWISE_ATOMICS[op](acc[k], vals[n])
        arr[where] = acc.astype(npdt)
        return
    if op == "add":
        if is_float:
            total = np.bincount(inv, weights=vals.astype(_F64), minlength=uniq.size)
            arr[where] = (cur.astype(_F64) + total).astype(npdt)
        else:
            total = np.zeros(uniq.size, dtype=_I64)
            np.add.at(total, inv, vals.astype(_I64))
            arr[where] = (cur.astype(_I64) + total).astype(npdt)
        return
    work = _F64 if is_float else _I64
    init = (-np.inf if op == "max" else np.inf) if is_float else (
        np.iinfo(_I64).min if op == "max" else np.iinfo(_I64).max)
    acc = np.full(uniq.size, init, dtype=work)
    ufunc = np.maximum if op == "max" else np.minimum
    ufunc.at(acc, inv, vals.astype(work))
    arr[where] = ufunc(cur.astype(work), acc).astype(npdt)


def _atomic_many_prev(op: str, arr: np.ndarray, idx: list, vals: np.ndarray) -> np.ndarray:
    """Apply the updates one at a time (in lane order, one of the orders the hardware may pick) and
    return the value each one found (``return_prev``)."""
    prev = np.empty(vals.size, dtype=arr.dtype)
    keys = list(zip(*(np.asarray(i, dtype=np.intp).tolist() for i in idx)))
    for n, key in enumerate(keys):
        prev[n] = arr[key]
        arr[key] = _combine(op, arr[key], vals[n], arr.dtype)
    return prev


def _scratch_buffers(s: t.ParallelFor) -> set:
    """Per-thread (local/var) buffers allocated outside ``s`` that its body stores to at an element
    that is not tied to the iteration (the index misses one of ``s``'s variables, directly and
    through ``let`` names): each iteration's scratch.  A store indexed by the iteration (``loc[i]``)
    keeps the buffer shared, as on a GPU, where the same thread runs iteration i in every
    T.Parallel over the same range."""
    own = set(s.vars)
    deps: dict = {}
    found: set = set()
    allocated: set = set()

    def par_vars(e) -> set:
        out: set = set()

        def f(x):
            if isinstance(x, E.Var):
                out.update((x,) if x in own else deps.get(x, ()))

        walk_expr(e, f)
        return out

    def visit(x):
        if isinstance(x, t.Alloc):
            allocated.add(x.buffer)
        elif isinstance(x, t.LetStmt):
            deps[x.var] = par_vars(x.value)
        elif isinstance(x, t.BufferStore) and x.buffer.scope in ("local", "var"):
            at: set = set()
            for i in x.indices:
                at |= par_vars(i)
            if own - at:
                found.add(x.buffer)

    walk(s.body, visit)
    return found - allocated


def _allocated_in_parallel(body) -> set:
    """Buffers whose ``Alloc`` sits inside a T.Parallel body."""
    out: set = set()

    def inner(s):
        if isinstance(s, t.Alloc):
            out.add(s.buffer)

    walk(body, lambda s: walk(s.body, inner) if isinstance(s, t.ParallelFor) else None)
    return out


def _parallel_rank(s: t.ParallelFor) -> int:
    """Axes needed by a T.Parallel nest: its own plus the deepest nested T.Parallel inside it."""

    def inner(x) -> int:
        best = 0
        for ch in child_stmts(x):
            best = max(best, _parallel_rank(ch) if isinstance(ch, t.ParallelFor) else inner(ch))
        return best

    return len(s.vars) + inner(s.body)


# the execution of each tile op (ir.tile_ops): a new op registers its own the same way
register(t.Copy, "interp", _Interpreter.x_copy)
register(t.Fill, "interp", _Interpreter.x_fill)
register(t.Gemm, "interp", _Interpreter.x_gemm)
register(t.Reduce, "interp", _Interpreter.x_reduce)
register(t.Atomic, "interp", _Interpreter.x_atomic)

from . import reducer as _reducer  # noqa: E402, F401  (the reducer ops' execution: interp/reducer.py)
