"""The ``T.*`` surface a kernel author writes (source-compatible with TileLang's ``T.prim_func`` style).

``import tilewright.language as T``.  Inside a ``@T.prim_func`` body these functions append Tile IR
statements to the frontend's builder; outside one, the tile functions raise a clear error.
"""

from __future__ import annotations

import builtins as _builtins
import math as _math

from ..frontend import builder as _b
from ..frontend.regions import to_region as _to_region
from ..ir import dtype as _dt
from ..ir import expr as _e
from ..ir import tile as _t
from ..ir.expr import Expr as PrimExpr
from ..ir.expr import Var

# --------------------------------------------------------------------------------------------
# dtypes: strings that can also build constants / casts, e.g. T.float32(0) or T.float16(x)


class DType(str):
    """A dtype name usable as a value (``T.float16``), an annotation (``n: T.int32``) and a
    constructor (``T.float32(1.5)`` makes a constant, ``T.float16(x)`` casts a kernel value)."""

    def __call__(self, value=0):
        if isinstance(value, str) and _dt.is_float(str(self)):
            value = _builtins.float(value)
        return _e.cast(str(self), value)

    @property
    def bits(self) -> int:
        return _dt.bits(str(self))


for _name in _dt.ALL_DTYPES:
    globals()[_name] = DType(_name)
float16 = DType("float16")
bfloat16 = DType("bfloat16")
float32 = DType("float32")
float64 = DType("float64")
int8 = DType("int8")
int16 = DType("int16")
int32 = DType("int32")
int64 = DType("int64")
uint8 = DType("uint8")
uint32 = DType("uint32")
boolean = DType("bool")
float8_e4m3fn = DType("float8_e4m3fn")
float8_e5m2 = DType("float8_e5m2")
half = float16
float = float32
double = float64


def dtype(name) -> DType:
    return DType(_dt.canon(name))


# --------------------------------------------------------------------------------------------
# parameters


class Tensor:
    """Parameter annotation ``A: T.Tensor((M, K), "float16")`` (``T.Buffer`` is the same)."""

    def __init__(self, shape, dtype="float32", strides=None):
        if isinstance(shape, (_builtins.int, PrimExpr)):
            shape = (shape,)
        self.shape = tuple(shape)
        self.dtype = _dt.canon(dtype)
        self.strides = strides

    def __class_getitem__(cls, item):
        shape, dtype = item
        return cls(shape, dtype)

    def __repr__(self) -> str:
        return f"T.Tensor({self.shape}, {self.dtype!r})"


Buffer = Tensor


def dynamic(name: str, dtype: str = "int32") -> Var:
    """A symbolic dimension: one compiled kernel serves every value, bound from argument shapes."""
    return Var(name, _dt.canon(dtype), kind="dyn")


symbolic = dynamic


# --------------------------------------------------------------------------------------------
# kernel launch and loops (specs the frontend recognises in `with` and `for`)


class Kernel:
    """``with T.Kernel(gx, gy=1, gz=1, threads=128) as (bx, by, bz):``"""

    def __init__(self, *grid, threads=128, cluster_dims=None, prelude=None, is_cpu=False):
        if not 1 <= len(grid) <= 3:
            raise _b.error(f"T.Kernel takes 1 to 3 grid dimensions, got {len(grid)}")
        self.grid = tuple(_e.as_expr(g) for g in grid)
        if isinstance(threads, _builtins.int):
            threads = (threads,)
        threads = tuple(threads)
        if not threads or not all(isinstance(t, _builtins.int) and t > 0 for t in threads):
            raise _b.error(f"T.Kernel(threads=...) must be a positive int or a list of them, got {threads!r}")
        self.threads = threads

    def __enter__(self):  # only meaningful through the frontend
        raise _b.error("T.Kernel is used as `with T.Kernel(...) as (bx, by):` inside a @T.prim_func body")

    def __exit__(self, *a):
        return False


class _LoopSpec:
    def __init__(self, kind, start, stop, num_stages=0, step=1):
        self.kind = kind
        self.start = start
        self.stop = stop
        self.num_stages = num_stages
        if step != 1:
            raise _b.error("loop steps other than 1 are not supported; iterate over a range and scale the index")

    def __iter__(self):
        raise _b.error("kernel loops can only be used as `for v in ...:` inside a @T.prim_func body")


def _bounds(args):
    if len(args) == 1:
        return 0, args[0]
    if len(args) == 2:
        return args[0], args[1]
    raise _b.error("loops take (stop) or (start, stop)")


def serial(*args, step=1):
    lo, hi = _bounds(args[:2]) if len(args) <= 2 else (args[0], args[1])
    if len(args) == 3:
        step = args[2]
    return _LoopSpec("serial", lo, hi, step=step)


def unroll(*args, step=1, explicit=False):
    lo, hi = _bounds(args)
    return _LoopSpec("unroll", lo, hi, step=step)


def Pipelined(*args, num_stages=0, order=None, stage=None, sync=None, group=None):
    lo, hi = _bounds(args)
    return _LoopSpec("pipelined", lo, hi, num_stages=_builtins.int(num_stages))


class Parallel:
    """``for i, j in T.Parallel(M, N):`` — an elementwise loop nest over a tile."""

    def __init__(self, *extents, coalesced_width=None):
        if not extents:
            raise _b.error("T.Parallel needs at least one extent")
        for x in extents:
            if not isinstance(x, _builtins.int) or isinstance(x, _builtins.bool) or x <= 0:
                raise _b.error(f"T.Parallel extents must be positive compile-time ints, got {x!r}",
                               hint="tile sizes are Python ints from the enclosing function")
        self.extents = tuple(extents)

    def __iter__(self):
        raise _b.error("T.Parallel can only be used as `for i, j in T.Parallel(...)` inside a @T.prim_func body")


def get_thread_binding(dim: int = 0):
    b = _b.current()
    if b.kernel is None:
        raise _b.error("T.get_thread_binding() must be called inside `with T.Kernel(...)`")
    if dim != 0:
        raise _b.error("only T.get_thread_binding(0) is supported (threads are numbered linearly)")
    return b.thread_var


def get_block_binding(dim: int = 0):
    b = _b.current()
    if b.kernel is None:
        raise _b.error("T.get_block_binding() must be called inside `with T.Kernel(...)`")
    return b.kernel.block_vars[dim]


# --------------------------------------------------------------------------------------------
# memory


def _shape(shape):
    if isinstance(shape, _builtins.int):
        return (shape,)
    shape = tuple(shape)
    for s in shape:
        if not isinstance(s, _builtins.int) or s <= 0:
            raise _b.error(f"on-chip buffer shapes must be positive compile-time ints, got {shape!r}")
    return shape


def _alloc(shape, dtype, scope, name):
    b = _b.current()
    if b.kernel is None:
        raise _b.error(f"T.alloc_{scope} must be called inside `with T.Kernel(...)`")
    buf = _t.Buffer(b.fresh(name), _shape(shape), _dt.canon(dtype), scope, loc=b.loc)
    buf.attrs["auto_name"] = True
    b.emit(_t.Alloc(buf))
    return buf


def alloc_shared(shape, dtype, scope="shared.dyn"):
    return _alloc(shape, dtype, "shared", "shared")


def alloc_fragment(shape, dtype, scope="local.fragment"):
    return _alloc(shape, dtype, "fragment", "frag")


def alloc_local(shape, dtype, scope="local"):
    return _alloc(shape, dtype, "local", "local")


def alloc_var(dtype, init=None, scope="local.var"):
    b = _b.current()
    if b.kernel is None:
        raise _b.error("T.alloc_var must be called inside `with T.Kernel(...)`")
    buf = _t.Buffer(b.fresh("var"), (1,), _dt.canon(dtype), "var", loc=b.loc)
    buf.attrs["auto_name"] = True
    b.emit(_t.Alloc(buf, None if init is None else _e.cast(buf.dtype, init)))
    return buf


_REDUCER_HINT = ("accumulate per-thread partials in a T.alloc_fragment buffer and combine them with "
                 "T.reduce_sum / T.reduce_max / T.reduce_min, or update a shared/global buffer with "
                 "T.atomic_add / T.atomic_max / T.atomic_min")


def alloc_reducer(shape, dtype, op="sum", replication=None):
    # refused rather than treated as a plain fragment: its per-thread partials would never be combined
    raise _b.error("T.alloc_reducer is not supported yet", hint=_REDUCER_HINT)


def finalize_reducer(reducer):
    raise _b.error("T.finalize_reducer is not supported yet (nor is T.alloc_reducer)", hint=_REDUCER_HINT)


# --------------------------------------------------------------------------------------------
# tile operations


def _regions_for_copy(src, dst):
    if isinstance(src, _e.Load) and isinstance(dst, _e.Load):
        raise _b.error("T.copy needs at least one side with a known extent (a buffer or a slice)")
    if isinstance(src, _e.Load):
        d = _to_region(dst, what="copy destination")
        return _to_region(src, d.shape, "copy source"), d
    s = _to_region(src, what="copy source")
    return s, _to_region(dst, s.shape, "copy destination")


def copy(src, dst, coalesced_width=None, disable_tma=False, eviction_policy=None):
    """Copy a tile between global, shared and fragment memory (any direction, dtype-converting).
    Out-of-bounds parts of a global tile are not read (zero-filled) and not written."""
    b = _b.current()
    s, d = _regions_for_copy(src, dst)
    b.emit(_t.Copy(s, d))


def fill(buf, value):
    b = _b.current()
    r = _to_region(buf, what="fill target")
    b.emit(_t.Fill(r, _e.cast(r.buffer.dtype, value)))


def clear(buf):
    fill(buf, 0)


class GemmWarpPolicy:
    Square = "square"
    FullRow = "fullrow"
    FullCol = "fullcol"


def gemm(A, B, C, transpose_A=False, transpose_B=False, policy=GemmWarpPolicy.Square, clear_accum=False,
         k_pack=1, wg_wait=0, use_wgmma=None):
    """``C += op(A) @ op(B)`` with A/B in shared or fragment memory and C a fragment."""
    b = _b.current()
    if policy not in ("square", "fullrow", "fullcol"):
        raise _b.error(f"unknown GemmWarpPolicy {policy!r}")
    b.emit(_t.Gemm(_to_region(A, what="gemm A"), _to_region(B, what="gemm B"), _to_region(C, what="gemm C"),
                   _builtins.bool(transpose_A), _builtins.bool(transpose_B), policy, _builtins.bool(clear_accum),
                   _builtins.int(k_pack)))


def _reduce(op, src, dst, dim, clear):
    b = _b.current()
    for x, what in ((src, "source"), (dst, "destination")):
        if not isinstance(x, _t.Buffer):
            raise _b.error(f"T.reduce_{op} {what} must be a whole buffer, got {x!r}")
    if dim < 0:
        dim += src.ndim
    if not 0 <= dim < src.ndim:
        raise _b.error(f"T.reduce_{op}: dim={dim} is out of range for {src.name} of shape {src.shape}")
    b.emit(_t.Reduce(op, src, dst, dim, _builtins.bool(clear)))


def reduce_max(buffer, out, dim=-1, clear=True):
    _reduce("max", buffer, out, dim, clear)


def reduce_min(buffer, out, dim=-1, clear=True):
    _reduce("min", buffer, out, dim, clear)


def reduce_sum(buffer, out, dim=-1, clear=True):
    _reduce("sum", buffer, out, dim, clear)


def reduce_abssum(buffer, out, dim=-1, clear=True):
    _reduce("abssum", buffer, out, dim, clear)


def reduce_absmax(buffer, out, dim=-1, clear=True):
    _reduce("absmax", buffer, out, dim, clear)


def _atomic(op, dst, value, memory_order=None):
    b = _b.current()
    if isinstance(dst, _e.Load) and not isinstance(value, (_t.Buffer, _t.Region)):
        r = _t.Region(dst.buffer, dst.indices, tuple(1 for _ in dst.indices), tuple(range(len(dst.indices))))
        b.emit(_t.Atomic(op, r, _e.cast(dst.buffer.dtype, value)))
        return
    if isinstance(value, (_t.Buffer, _t.Region)):
        v = _to_region(value, what="atomic value")
        d = _to_region(dst, v.shape, "atomic destination")
        b.emit(_t.Atomic(op, d, v))
        return
    raise _b.error(f"T.atomic_{op}: the destination must be an element A[i, j] or a region, got {dst!r}")


def atomic_add(dst, value, memory_order=None, return_prev=False):
    _atomic("add", dst, value)


def atomic_max(dst, value, memory_order=None, return_prev=False):
    _atomic("max", dst, value)


def atomic_min(dst, value, memory_order=None, return_prev=False):
    _atomic("min", dst, value)


def use_swizzle(panel_size: int = 10, order: str = "row", enable: bool = True):
    """Rasterize block indices in panels of ``panel_size`` for L2 reuse (``order`` "row" or "col")."""
    b = _b.current()
    if order not in ("row", "col"):
        raise _b.error(f"T.use_swizzle(order=...) must be 'row' or 'col', got {order!r}")
    if enable:
        b.emit(_t.Annotate("swizzle", {"panel_size": _builtins.int(panel_size), "order": order}))


def annotate_layout(layouts: dict):
    """Accepted for TileLang compatibility; tilewright infers shared/fragment layouts itself."""
    b = _b.current()
    b.emit(_t.Annotate("layout", {"buffers": [getattr(k, "name", str(k)) for k in layouts]}))


def annotate_pipeline(*args, **kwargs):
    """Accepted for TileLang compatibility; no effect."""


def no_set_max_nreg():
    """Accepted for TileLang compatibility; no effect."""


# --------------------------------------------------------------------------------------------
# scalar math


def _unary(name):
    def f(x):
        return _e.call(name, [x])

    f.__name__ = name
    f.__doc__ = f"Elementwise {name}."
    return f


exp = _unary("exp")
exp2 = _unary("exp2")
exp10 = _unary("exp10")
log = _unary("log")
log2 = _unary("log2")
log10 = _unary("log10")
log1p = _unary("log1p")
sqrt = _unary("sqrt")
rsqrt = _unary("rsqrt")
tanh = _unary("tanh")
sigmoid = _unary("sigmoid")
sin = _unary("sin")
cos = _unary("cos")
erf = _unary("erf")
floor = _unary("floor")
ceil = _unary("ceil")
round = _unary("round")
trunc = _unary("trunc")
isnan = _unary("isnan")
isinf = _unary("isinf")


def abs(x):
    return _e.call("abs", [x]) if isinstance(x, PrimExpr) else _builtins.abs(x)


def pow(x, y):
    if not isinstance(x, PrimExpr) and not isinstance(y, PrimExpr):
        return x**y
    return _e.call("pow", [x, y])


def fma(a, b, c):
    return _e.call("fma", [a, b, c])


def max(a, b, *rest):
    r = _e.emax(a, b)
    for x in rest:
        r = _e.emax(r, x)
    return r


def min(a, b, *rest):
    r = _e.emin(a, b)
    for x in rest:
        r = _e.emin(r, x)
    return r


def if_then_else(cond, a, b):
    return _e.select(cond, a, b)


Select = if_then_else


def cast(x, dtype):
    return _e.cast(_dt.canon(dtype), x)


def infinity(dtype):
    return _e.Const(_math.inf, _dt.canon(dtype))


def max_value(dtype):
    d = _dt.canon(dtype)
    return _e.Const(_dt.max_value(d), d)


def min_value(dtype):
    d = _dt.canon(dtype)
    return _e.Const(_dt.min_value(d), d)


def ceildiv(a, b):
    if isinstance(a, _builtins.int) and isinstance(b, _builtins.int):
        return -(-a // b)
    return (a + b - 1) // b


def Cast(dtype, x):  # noqa: N802 - TVM/TileLang spelling: T.Cast(dtype, value)
    return _e.cast(_dt.canon(dtype), x)


def vectorized(*args):
    """Accepted for TileLang compatibility: an unrolled loop (the compiler vectorizes T.Parallel)."""
    return unroll(*args)


def floordiv(a, b):
    return a // b


def floormod(a, b):
    return a % b


def truncdiv(a, b):
    return a // b


def truncmod(a, b):
    return a % b


def const(value, dtype="int32"):
    return _e.cast(_dt.canon(dtype), value)


def evaluate(value):
    """Accepted for TileLang compatibility (expressions with effects are not needed here)."""


def prim_func(fn=None, **kwargs):
    """Decorator: read a Python function written in the T.* language into a Tile IR ``PrimFunc``."""
    import sys

    from ..frontend.parser import parse_prim_func

    # the defining function's locals: annotations under `from __future__ import annotations` are
    # strings whose names (tile shapes, dtypes) are not captured as closure cells
    frame_locals = dict(sys._getframe(1).f_locals)
    if fn is None:
        return lambda f: parse_prim_func(f, frame_locals)
    return parse_prim_func(fn, frame_locals)


def macro(fn):
    """Decorator for a helper whose body is inlined at each call inside a prim_func."""
    from ..frontend.parser import Macro

    return Macro(fn)
