"""The ``T.*`` surface a kernel author writes (source-compatible with TileLang's ``T.prim_func`` style).

``import tilewright.language as T``.  Inside a ``@T.prim_func`` body these functions append Tile IR
statements to the frontend's builder; outside one, the tile functions raise a clear error.
"""

from __future__ import annotations

import builtins as _builtins
import math as _math
import re as _re
import warnings as _warnings

from ..errors import CompileError, TilewrightWarning
from ..frontend import builder as _b
from ..frontend import dynamic_shared as _dynamic_shared
from ..frontend import reducer as _reducer
from ..frontend.reduce_operands import reduce_into_register as _reduce_into_register
from ..frontend.reduce_operands import reduce_operand as _reduce_operand
from ..frontend.reduce_operands import reduce_per_thread as _reduce_per_thread
from ..frontend.regions import element_region as _element_region
from ..frontend.regions import to_region as _to_region
from ..ir import dtype as _dt
from ..ir import expr as _e
from ..ir import tile as _t
from ..ir.expr import Expr as PrimExpr
from ..ir.expr import Var

# --------------------------------------------------------------------------------------------
# dtypes: strings that can also build constants / casts, e.g. T.float32(0) or T.float16(x)


_NO_VALUE = object()


class LetSlot:
    """TileLang's ``x = T.int32()`` inside a kernel: a name that ``T.let(x, value)`` binds.  Not a
    value: using it before ``T.let`` is an error at that line."""

    def __init__(self, dtype: str):
        self.dtype = dtype

    def __repr__(self) -> str:
        return f"T.{self.dtype}() (a name not yet bound by T.let)"


def unbound_var(dtype: str):
    """``T.int32()``: inside a kernel a ``LetSlot``; outside one (TIR-style code that only builds
    expressions) a symbolic scalar."""
    dtype = _dt.canon(dtype)
    return LetSlot(dtype) if _b.current_or_none() is not None else Var("v", dtype, kind="unbound")


class DType(str):
    """A dtype name usable as a value (``T.float16``), an annotation (``n: T.int32``) and a
    constructor (``T.float32(1.5)`` makes a constant, ``T.float16(x)`` casts a kernel value)."""

    def __call__(self, value=_NO_VALUE):
        if value is _NO_VALUE:  # `x = T.int32()`: a name bound later by T.let(x, value)
            return unbound_var(str(self))
        if isinstance(value, str) and _dt.is_float(str(self)):
            value = _builtins.float(value)
        return _e.cast(str(self), value)

    @property
    def bits(self) -> int:
        return _PACKED_PAIRS.get(str(self), (None, 0))[1] or _dt.bits(_dt.canon(str(self)))

    @property
    def lanes(self) -> int:
        return 1 if str(self) == "float4_e2m1_unpacked" else 2 if str(self) in _PACKED_PAIRS else 1

    @property
    def type_code(self) -> int:
        """The DLPack type code of the element type (``DLDataTypeCode``, which TVM's ``DataType.type_code``
        is): int 0, uint 1, float 2, bfloat 4, bool 6, the float8 formats 10-14, float4_e2m1fn 17;
        TileLang's float4_e2m1_unpacked is its custom type 131."""
        name = str(self)
        if name == "float4_e2m1_unpacked":
            return 131
        element = _PACKED_PAIRS.get(name, (name, 0))[0]
        canon = _dt.canon(element)
        if canon in _DLPACK_CODES:
            return _DLPACK_CODES[canon]
        return next(code for prefix, code in (("uint", 1), ("int", 0), ("bfloat", 4), ("float", 2)) if
                    canon.startswith(prefix))

    def is_float4(self) -> bool:
        return str(self).startswith("float4")

    def is_float4_e2m1fn(self) -> bool:
        return str(self) == "float4_e2m1fn"

    def is_float4_e2m1_unpacked(self) -> bool:
        return str(self) == "float4_e2m1_unpacked"

    def as_torch(self):
        """The torch dtype of this dtype (TileLang's ``T.float16.as_torch()``; imports torch): the
        storage dtype for the 4-bit types (``int8`` for int4/uint4, ``float4_e2m1fn_x2`` for fp4)."""
        from ..binding.tensor_args import to_torch_dtype, torch_storage_name

        name = str(self)
        return to_torch_dtype(torch_storage_name(name if name in _PACKED_PAIRS else _dt.canon(name)))


# DLPack's codes of the types that are not plain int/uint/float/bfloat (dlpack.h, DLDataTypeCode)
_DLPACK_CODES = {"bool": 6, "float8_e4m3fn": 10, "float8_e4m3fnuz": 11, "float8_e5m2": 12, "float8_e5m2fnuz": 13,
                 "float8_e8m0fnu": 14, "float4_e2m1fn": 17}

# packed-pair names TileLang has: (element dtype, bits of the pair); usable as names, refused as element types
_PACKED_PAIRS = {"float4_e2m1fnx2": ("float4_e2m1fn", 8), "bfloat16x2": ("bfloat16", 32), "float16x2": ("float16", 32),
                 "float32x2": ("float32", 64), "float4_e2m1_unpacked": ("float4_e2m1fn", 8)}


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
float8_e4m3 = DType("float8_e4m3fn")  # TileLang's spelling of the finite e4m3 format
uint16 = DType("uint16")
uint64 = DType("uint64")
# TileLang's tensor-core float32: float32 here (ir/dtype.py)
tfloat32 = DType("tfloat32")
float8_e8m0fnu = DType("float8_e8m0fnu")
float4_e2m1fn = DType("float4_e2m1fn")
int4 = DType("int4")
uint4 = DType("uint4")
# TileLang dtypes tilewright cannot hold as element types: using one raises a DTypeError that says so
float32x2 = DType("float32x2")
float16x2 = DType("float16x2")
bfloat16x2 = DType("bfloat16x2")
float4_e2m1fnx2 = DType("float4_e2m1fnx2")
float4_e2m1_unpacked = DType("float4_e2m1_unpacked")
half = float16
float = float32
double = float64


def dtype(name) -> DType:
    return DType(_dt.canon(name))


# --------------------------------------------------------------------------------------------
# arguments accepted for TileLang compatibility that change nothing here


def _no_effect(argument: str, why: str, todo: str) -> None:
    """Warn (once per kernel and argument) that ``argument`` is a performance hint tilewright does
    not act on: the results are the same with or without it.  The warning points at the kernel line."""
    b = _b.current_or_none()
    seen = None if b is None else b.__dict__.setdefault("_no_effect_warned", set())
    if seen is not None:
        if argument in seen:
            return
        seen.add(argument)
    message = f"{argument} has no effect in tilewright: {why}; {todo}"
    loc = b.loc if b is not None else None
    if loc is not None:
        _warnings.warn_explicit(message, TilewrightWarning, loc.filename, loc.lineno)
    else:
        _warnings.warn(message, TilewrightWarning, stacklevel=3)


# --------------------------------------------------------------------------------------------
# parameters


class Tensor:
    """Parameter annotation ``A: T.Tensor((M, K), "float16")`` (``T.Buffer`` is the same).

    ``strides=`` (elements, one per dimension: positive ints or ``T.dynamic`` names) addresses the
    tensor with those strides instead of row-major ones; arguments must have exactly those strides
    (a symbolic stride is read from the argument).

    In a kernel, ``T.Tensor(shape, dtype, buf.data)`` (TileLang/TVM's buffer over another buffer's
    data) is ``buf`` seen with another shape: ``T.reshape(buf, shape)`` (language/views.py)."""

    def __new__(cls, shape=None, dtype="float32", data=None, strides=None):
        if data is None:
            return super().__new__(cls)
        if not isinstance(data, _t.DataPointer):
            raise _b.error(f"T.Tensor(shape, dtype, data): data must be a buffer's .data (a view of its memory), "
                           f"got {data!r}", hint="write T.Tensor(shape, dtype, A.data) for a tensor or buffer A")
        if strides is not None:
            raise _b.error("T.Tensor(shape, dtype, buf.data, strides=...) is not supported: the view is row-major")
        _b.current()  # inside a kernel body
        if isinstance(shape, (_builtins.int, PrimExpr)):
            shape = (shape,)
        return _views.view(data.buffer, tuple(shape), dtype)

    def __init__(self, shape, dtype="float32", data=None, strides=None):
        if isinstance(shape, (_builtins.int, PrimExpr)):
            shape = (shape,)
        self.shape = tuple(shape)
        self.dtype = _dt.canon(dtype)
        if strides is not None:
            strides = (strides,) if isinstance(strides, (_builtins.int, PrimExpr)) else tuple(strides)
            if len(strides) != len(self.shape):
                raise _b.error(f"T.Tensor(strides={strides!r}) gives {len(strides)} strides for "
                               f"{len(self.shape)} dimensions", hint="give one stride (in elements) per dimension")
            for s in strides:
                is_int = isinstance(s, _builtins.int) and not isinstance(s, _builtins.bool)
                if not (isinstance(s, Var) or is_int and s > 0):
                    raise _b.error(f"T.Tensor(strides=...) entries must be positive ints or T.dynamic names, got {s!r}")
        self.strides = strides

    def __class_getitem__(cls, item):
        # T.Tensor[shape, dtype], or T.Tensor[shape] (float32, TileLang's default); a dtype is a
        # string (T.float16 is one) or a torch / NumPy dtype (torch.uint8), never a size
        if isinstance(item, tuple) and len(item) == 2 and _is_dtype(item[1]):
            return cls(item[0], item[1])
        return cls(item)

    def __repr__(self) -> str:
        return f"T.Tensor({self.shape}, {self.dtype!r})"


Buffer = Tensor


def _is_dtype(x) -> bool:
    """A dtype spelling (``"float16"``, ``T.float16``, ``torch.uint8``, ``np.int8``), not a size or shape."""
    if isinstance(x, str):
        return True
    if isinstance(x, (_builtins.int, _builtins.bool, tuple, list, PrimExpr)) or any(x is k for k in (int, float, bool)):
        return False
    try:
        _dt.canon(x)
    except (ValueError, TypeError):
        return False
    return True


def dynamic(name: str, dtype: str = "int32") -> Var:
    """A symbolic dimension: one compiled kernel serves every value, bound from argument shapes.
    Several names (``T.dynamic("batch, seq_len")``, as in TileLang) give a tuple of them."""
    names = [n for n in _re.split(r"[,\s]+", name.strip()) if n] if isinstance(name, str) else [name]
    if len(names) > 1:
        return tuple(Var(n, _dt.canon(dtype), kind="dyn") for n in names)
    return Var(name.strip() if isinstance(name, str) else name, _dt.canon(dtype), kind="dyn")


symbolic = dynamic


# --------------------------------------------------------------------------------------------
# kernel launch and loops (specs the frontend recognises in `with` and `for`)


class Kernel:
    """``with T.Kernel(gx, gy=1, gz=1, threads=128) as (bx, by, bz):``"""

    def __init__(self, *grid, threads=128, cluster_dims=None, prelude=None, is_cpu=False):
        if not grid:
            grid = (1,)  # TileLang's `T.Kernel(threads=...)` with no grid: one block
        if not 1 <= len(grid) <= 3:
            raise _b.error(f"T.Kernel takes 1 to 3 grid dimensions, got {len(grid)}")
        if prelude is not None:
            raise _b.error("T.Kernel(prelude=...) (source text pasted before the kernel) is not supported",
                           hint="write the helper as a @T.macro or with T.* functions inside the kernel")
        if is_cpu:
            raise _b.error("T.Kernel(is_cpu=True) is not supported: tilewright compiles GPU kernels",
                           hint="use target='interpret' to run a GPU kernel on the CPU")
        self.cluster_dims = _check_cluster_dims(cluster_dims)
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


def _check_cluster_dims(cluster_dims) -> tuple:
    """The thread-block cluster shape as three ints ((1, 1, 1): no cluster).  What a target without
    clusters does with a larger one is decided when the kernel is compiled (passes/check_clusters.py:
    a warning, blocks launched independently, unless the kernel uses a cluster feature)."""
    if cluster_dims is None:
        return (1, 1, 1)
    dims = (cluster_dims,) if isinstance(cluster_dims, _builtins.int) else tuple(cluster_dims)
    if not 1 <= len(dims) <= 3 or not all(isinstance(d, _builtins.int) and not isinstance(d, _builtins.bool)
                                          and d > 0 for d in dims):
        raise _b.error(f"T.Kernel(cluster_dims=...) must be a positive int or 1 to 3 of them, got {cluster_dims!r}")
    dims = dims + (1,) * (3 - len(dims))
    if _math.prod(dims) > 16:
        raise _b.error(f"T.Kernel(cluster_dims={cluster_dims!r}): a cluster holds at most 16 blocks (8 portably)",
                       hint="use cluster_dims=(2, 1, 1) or another shape of at most 8 blocks")
    return dims


class _LoopSpec:
    def __init__(self, kind, start, stop, num_stages=0, step=1):
        self.kind = kind
        self.start = start
        self.stop = stop
        self.num_stages = num_stages
        self.vectorized = False  # T.vectorized: an unrolled loop the lowering may vectorize
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
    """``for k in T.Pipelined(n, num_stages=s):`` — a software-pipelined loop.  TileLang's explicit
    schedule (``order``, ``stage``, ``sync``, ``group``) is not implemented: tilewright plans the
    pipeline from ``num_stages``; the loop computes the same either way, so those are warned about."""
    lo, hi = _bounds(args)
    if not isinstance(num_stages, _builtins.int) or isinstance(num_stages, _builtins.bool):
        raise _b.error(f"T.Pipelined(num_stages=...) must be an int, got {num_stages!r}")
    for name, v in (("order", order), ("stage", stage), ("sync", sync), ("group", group)):
        if v is not None:
            _no_effect(f"T.Pipelined({name}=...)",
                       "explicit pipeline schedules are not implemented; the pipeline is planned from num_stages",
                       f"remove {name}= (the loop computes the same) and tune num_stages instead")
    return _LoopSpec("pipelined", lo, hi, num_stages=_builtins.int(num_stages))


class Parallel:
    """``for i, j in T.Parallel(M, N):`` — an elementwise loop nest over a tile."""

    def __init__(self, *extents, coalesced_width=None):
        if not extents:
            raise _b.error("T.Parallel needs at least one extent")
        self.coalesced_width = _coalesced_width(coalesced_width, "T.Parallel")
        # an extent known only at run time (a kernel argument, a symbolic size) is an expression:
        # the frontend spreads such a loop over the threads chunk by chunk (frontend/dynamic_parallel.py)
        extents = tuple(_e.const_value(x) if isinstance(x, _e.Expr) and _e.const_value(x) is not None else x
                        for x in extents)
        for x in extents:
            if isinstance(x, _e.Expr) and not isinstance(x, _builtins.bool) and _dt.is_int(x.dtype):
                continue
            if not isinstance(x, _builtins.int) or isinstance(x, _builtins.bool) or x <= 0:
                raise _b.error(f"T.Parallel extents must be positive ints or integer kernel values, got {x!r}",
                               hint="tile sizes are Python ints from the enclosing function; a size known at "
                               "launch is a T.dynamic symbol or an integer kernel argument")
        self.extents = extents

    @property
    def is_dynamic(self) -> bool:
        return not all(isinstance(x, _builtins.int) for x in self.extents)

    def __iter__(self):
        raise _b.error("T.Parallel can only be used as `for i, j in T.Parallel(...)` inside a @T.prim_func body")


def _coalesced_width(w, what: str):
    """``coalesced_width=``: the most elements one thread moves per vector access (a power of two)."""
    if w is None:
        return None
    if not isinstance(w, _builtins.int) or isinstance(w, _builtins.bool) or w <= 0 or w & (w - 1):
        raise _b.error(f"{what}(coalesced_width=...) must be a positive power of two, got {w!r}",
                       hint="it bounds the elements per vector access (1 disables vectorization)")
    return w


def get_thread_binding(dim: int = 0):
    b = _b.current()
    if b.kernel is None:
        raise _b.error("T.get_thread_binding() must be called inside `with T.Kernel(...)`")
    if not isinstance(dim, _builtins.int) or isinstance(dim, _builtins.bool) or not 0 <= dim <= 2:
        raise _b.error(f"T.get_thread_binding(dim) takes 0, 1 or 2 (threadIdx.x, .y, .z), got {dim!r}")
    # threads are numbered linearly, x fastest: with T.Kernel(threads=(x, y, z)), threadIdx.y is (tid // x) % y
    threads = tuple(b.kernel.threads) + (1,) * 3
    inner = _math.prod(threads[:dim])
    extent = threads[dim]
    if extent == 1:
        return _e.as_expr(0)
    tid = b.thread_var
    v = tid if inner == 1 else tid // inner
    return v if extent * inner == _math.prod(threads[:3]) else v % extent


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
    # a shared buffer may be sized at launch (frontend/dynamic_shared.py)
    shape = _dynamic_shared.shared_shape(shape) if scope == "shared" else _shape(shape)
    buf = _t.Buffer(b.fresh(name), shape, _dt.canon(dtype), scope, loc=b.loc)
    buf.attrs["auto_name"] = True
    b.emit(_t.Alloc(buf))
    return buf


def _check_scope(call: str, scope, allowed: tuple) -> None:
    """TileLang's ``scope=`` names; another scope would put the buffer somewhere else."""
    if scope not in allowed:
        takes = " or ".join(map(repr, allowed))
        raise _b.error(f"{call}(scope={scope!r}) is not supported here; it takes scope {takes}",
                       hint="use the T.alloc_* call of the memory you want (alloc_shared, alloc_fragment, "
                       "alloc_local, alloc_var)")


def alloc_shared(shape, dtype, scope="shared.dyn"):
    _check_scope("T.alloc_shared", scope, ("shared.dyn", "shared"))
    return _alloc(shape, dtype, "shared", "shared")


def alloc_fragment(shape, dtype, scope="local.fragment"):
    _check_scope("T.alloc_fragment", scope, ("local.fragment",))
    return _alloc(shape, dtype, "fragment", "frag")


def alloc_local(shape, dtype, scope="local"):
    _check_scope("T.alloc_local", scope, ("local",))
    return _alloc(shape, dtype, "local", "local")


def _check_initializer_fits(dtype: str, init) -> None:
    """A constant float initializer beyond the dtype's largest finite value would silently become
    infinity: refused with ValueError, as TileLang does."""
    value = init.value if isinstance(init, _e.Const) else init
    number = isinstance(value, (_builtins.int, _builtins.float)) and not isinstance(value, _builtins.bool)
    if not _dt.is_float(dtype) or not number:
        return
    if _math.isfinite(value) and abs(value) > _dt.max_value(dtype):
        from ..errors import CompileValueError

        raise CompileValueError(f"T.alloc_var: the initializer {value!r} exceeds maximum of {dtype} "
                                f"({_dt.max_value(dtype):g})", _b.current().loc,
                                hint=f"use a value within +-{_dt.max_value(dtype):g}, a wider dtype, or "
                                "T.infinity(dtype) if infinity is meant")


def alloc_var(dtype, init=None, scope="local.var"):
    _check_scope("T.alloc_var", scope, ("local.var",))
    b = _b.current()
    if b.kernel is None:
        raise _b.error("T.alloc_var must be called inside `with T.Kernel(...)`")
    buf = _t.Buffer(b.fresh("var"), (1,), _dt.canon(dtype), "var", loc=b.loc)
    buf.attrs["auto_name"] = True
    _check_initializer_fits(buf.dtype, init)
    b.emit(_t.Alloc(buf, None if init is None else _e.cast(buf.dtype, init)))
    return buf


def alloc_reducer(shape, dtype, op="sum", replication=None):
    """A reducer: ``T.Parallel`` iterations contribute to its elements (several to one element)
    with ``T.reducer_update(acc[i], v)`` after ``T.reducer_init(acc)``, combined by ``op`` (sum,
    max, min, bitand, bitor, bitxor) at ``T.finalize_reducer(acc, dst)``.  ``replication=`` selects
    TileLang's legacy spelling (``T.clear`` / ``acc[i] += v`` / in-place ``T.finalize_reducer(acc)``)."""
    return _reducer.alloc_reducer(shape, dtype, op, replication)


def reducer_init(reducer, init=None):
    """Open a reducer's epoch; ``init`` is combined once into every element at the finalize."""
    _reducer.reducer_init(reducer, init)


def reducer_update(target, value):
    """Contribute ``value`` to ``acc[indices]`` (inside ``T.Parallel``: once per iteration)."""
    _reducer.reducer_update(target, value)


def finalize_reducer(reducer, dst=None, batch=1, annotations=None):
    """Combine the contributions of every thread into ``dst`` (a fragment of the reducer's shape),
    or, for the legacy reducer, into the reducer itself."""
    _reducer.finalize_reducer(reducer, dst, batch, annotations)


def alloc_global(shape, dtype, scope="global"):
    """A global-memory workspace of the kernel: a hidden tensor parameter (after the declared ones)
    that the call allocates, uninitialized, on the arguments' device, as TileLang does.  Its shape is
    compile-time ints or sizes of the declared parameters (bound from the arguments)."""
    _check_scope("T.alloc_global", scope, ("global",))
    b = _b.current()
    shape = (shape,) if not isinstance(shape, (_builtins.list, _builtins.tuple)) else tuple(shape)
    dims = []
    for s in shape:
        s = s.value if isinstance(s, _e.Const) else s
        if isinstance(s, _builtins.int) and not isinstance(s, _builtins.bool) and s > 0:
            dims.append(s)
        elif isinstance(s, Var):
            dims.append(s)
        else:
            raise _b.error(f"T.alloc_global shape entry {s!r} must be a positive int or a size of a parameter "
                           "(a T.dynamic / T.const name)", hint="compute derived sizes as ints on the host")
    buf = _t.Buffer(b.fresh("workspace"), tuple(dims), _dt.canon(dtype), "global", loc=b.loc)
    buf.attrs["auto_name"] = True
    buf.attrs["workspace"] = True
    b.__dict__.setdefault("workspaces", []).append(buf)
    return buf


def named_barrier_arrive(*args, **kwargs):
    raise _b.error("T.named_barrier_arrive is not supported: named barriers are placed by the compiler "
                   "for T.ws partitions", hint="synchronize a T.ws partition with T.sync_threads() inside it, "
                   "or use mbarriers (T.alloc_barrier, T.mbarrier_arrive, T.mbarrier_wait_parity)")


def transpose(src, dst):
    """``dst[j, i] = src[i, j]`` for a 2-D tile ``src`` of shape (m, n) and ``dst`` of shape (n, m)
    (buffers or slices, any memory; dtype-converting): one T.Parallel loop over ``dst``."""
    b = _b.current()
    s = _to_region(src, what="T.transpose source")
    d = _to_region(dst, what="T.transpose destination")
    if _builtins.len(s.shape) != 2 or tuple(d.shape) != tuple(reversed(s.shape)):
        raise _b.error(f"T.transpose takes a 2-D tile of shape (m, n) and a destination of shape (n, m); got "
                       f"{tuple(s.shape)} and {tuple(d.shape)}")
    if not all(isinstance(n, _builtins.int) for n in s.shape):
        raise _b.error(f"T.transpose needs compile-time tile shapes, got {tuple(s.shape)}")
    j, i = (Var(b.fresh(n), "int32", kind="loop") for n in ("j", "i"))
    value = _views.element_of(s, (i, j))
    at = _views.element_of(d, (j, i))
    store = _t.BufferStore(at.buffer, at.indices, _e.cast(at.buffer.dtype, value), loc=b.loc)
    b.emit(_t.ParallelFor((j, i), tuple(d.shape), store, loc=b.loc))


def let(var, value=None):
    """``T.let(x, value)`` after ``x = T.int32()``: binds the name ``x`` to ``value`` from here on (a
    let binding, as ``x = value`` is)."""
    from ..frontend.parser import _active_translators

    b = _b.current()
    if not isinstance(var, LetSlot) or not _active_translators:
        raise _b.error(f"T.let(x, value) binds a name made by x = T.int32() (or another dtype), got {var!r}",
                       hint="or bind a name directly: x = value")
    if value is None:
        raise _b.error("T.let(x, value) needs the value")
    scope = _active_translators[-1].scope
    names = [n for n, v in scope.items() if v is var]
    bound = Var(b.fresh(names[0] if names else "let"), var.dtype, kind="let")
    b.emit(_t.LetStmt(bound, _e.cast(var.dtype, value), loc=b.loc))
    for n in names:
        scope[n] = bound


# --------------------------------------------------------------------------------------------
# tile operations


def _regions_for_copy(src, dst):
    if isinstance(src, _e.Load) and isinstance(dst, _e.Load):
        return _element_region(src), _element_region(dst)  # element to element: one-element tiles
    if isinstance(src, _e.Load):
        d = _to_region(dst, what="copy destination")
        return _to_region(src, d.shape, "copy source"), d
    s = _to_region(src, what="copy source")
    return s, _to_region(dst, s.shape, "copy destination")


def copy(src, dst, coalesced_width=None, disable_tma=False, eviction_policy=None, *, prefer_instruction=None,
         annotations=None):
    """Copy a tile between global, shared and fragment memory (any direction, dtype-converting).
    Out-of-bounds parts of a global tile are not read (zero-filled) and not written.
    ``disable_tma=True`` keeps this copy off the TMA path (a pipelined loop holding it uses cp.async
    for all its copies); ``coalesced_width`` bounds the elements per vector access.
    ``prefer_instruction`` ("tma", "cp_async", "sync") and ``annotations`` (a dict of those same
    settings, taking precedence, as in TileLang): see ``_copy_annotations``."""
    b = _b.current()
    coalesced_width, disable_tma, eviction_policy = _copy_annotations(
        annotations, prefer_instruction, coalesced_width, disable_tma, eviction_policy)
    width = _coalesced_width(coalesced_width, "T.copy")
    if eviction_policy is not None:
        if eviction_policy not in ("evict_normal", "evict_first", "evict_last"):
            raise _b.error(f"T.copy(eviction_policy=...) must be 'evict_normal', 'evict_first' or 'evict_last', "
                           f"got {eviction_policy!r}")
        _no_effect("T.copy(eviction_policy=...)", "cache eviction hints are not emitted",
                   "remove eviction_policy (the copy is the same)")
    if isinstance(src, _e.Load) and isinstance(dst, _e.Load) and b.parallel_depth:
        # one element inside a T.Parallel body: the iteration's own store
        b.emit(_guarded_store(_e.cast(dst.buffer.dtype, src), lambda v: _t.BufferStore(dst.buffer, dst.indices, v),
                              b.loc))
        return
    if _views.is_view(src) or _views.is_view(dst):
        return _views.copy_through_view(src, dst)  # T.copy(T.reshape(A, ...), B): an element loop
    if _views.is_view_element(src) != _views.is_view_element(dst) and not (
            isinstance(src, _e.Load) and isinstance(dst, _e.Load)):
        return _views.copy_view_tile(src, dst)  # T.copy(view[i, j], tile): the view's rectangle
    s, d = _regions_for_copy(src, dst)
    d = _fit_destination(s, d)
    pad = _safe_value(s.buffer) if s.buffer.scope == "global" else None
    if pad is not None or _dynamic_shared.is_dynamic_region(s) or _dynamic_shared.is_dynamic_region(d):
        # a run-time size, or out-of-bounds reads of value `pad` (language/safe_value.py): an element loop
        return _dynamic_shared.copy_elements(s, d, pad)
    b.emit(_t.Copy(s, d, disable_tma=_builtins.bool(disable_tma), coalesced_width=width))


_COPY_ANNOTATIONS = ("coalesced_width", "disable_tma", "eviction_policy", "prefer_instruction")
_EVICTION_CODES = {0: "evict_normal", 1: "evict_first", 2: "evict_last"}  # TileLang's annotation values


def _copy_annotations(annotations, prefer, width, disable_tma, eviction):
    """TileLang's ``T.copy(annotations={...}, prefer_instruction=...)``: the annotation values win over
    the arguments.  ``prefer_instruction="sync"`` is ``disable_tma=True`` (plain loads and stores);
    "tma" and "cp_async" are hints: the lowering already issues TMA / cp.async where a pipelined
    loop stages the copy and plain vector accesses elsewhere, so they change nothing (a warning
    says so).  Unknown keys or values are errors.  Returns (coalesced_width, disable_tma, eviction_policy)."""
    if annotations is not None:
        if not isinstance(annotations, dict):
            raise _b.error(f"T.copy(annotations=...) takes a dict, got {annotations!r}")
        unknown = sorted(_builtins.str(k) for k in annotations if k not in _COPY_ANNOTATIONS)
        if unknown:
            raise _b.error(f"T.copy(annotations=...): unknown key(s) {', '.join(unknown)}",
                           hint="the keys are " + ", ".join(_COPY_ANNOTATIONS))
        width = annotations.get("coalesced_width", width)
        disable_tma = annotations.get("disable_tma", disable_tma)
        eviction = annotations.get("eviction_policy", eviction)
        eviction = _EVICTION_CODES.get(eviction, eviction) if isinstance(eviction, _builtins.int) else eviction
        prefer = annotations.get("prefer_instruction", prefer)
    if prefer is not None:
        if prefer not in ("tma", "cp_async", "sync"):
            raise _b.error(f"T.copy(prefer_instruction=...) must be 'tma', 'cp_async' or 'sync', got {prefer!r}")
        if prefer == "sync":
            disable_tma = True
        else:
            _no_effect(f"T.copy(prefer_instruction={prefer!r})", "the copy's instructions are chosen by the "
                       "lowering (TMA or cp.async where a pipelined loop stages it, vector loads elsewhere)",
                       "remove it (the copy is the same)")
    return width, disable_tma, eviction


def _fit_destination(s, d):
    """TileLang's copy of a smaller source tile into a larger destination region (``T.copy(A[:, :2],
    B[:, :3])``, test_tilelang_copy_shape_mismatched): the source's elements go to the start of the
    destination region, the rest of it is left alone.  A larger source, or tiles of other ranks, stay
    a CompileError (ir/verifier.py: nothing is dropped or broadcast silently)."""
    ss, ds = s.shape, d.shape
    if not all(isinstance(x, _builtins.int) for x in ss + ds):  # (first: == on a symbolic size builds an Expr)
        return d
    if len(ss) != len(ds) or d.squeezed or ss == ds or not all(a <= c for a, c in zip(ss, ds)):
        return d
    message = (f"T.copy: the source tile {s.buffer.name} {ss} is smaller than the destination region of "
               f"{d.buffer.name} {ds}; it is copied to the start of that region, as TileLang does")
    loc = _b.current().loc
    if loc is not None:
        _warnings.warn_explicit(message, TilewrightWarning, loc.filename, loc.lineno)
    else:
        _warnings.warn(message, TilewrightWarning, stacklevel=3)
    return _t.Region(d.buffer, d.starts, ss, ())


def tma_copy(src, dst, *, barrier=None, eviction_policy=None, annotations=None):
    """A global -> shared tile copy by the tensor memory accelerator with user-managed completion
    (TileLang's contract): one elected thread of the executing threads raises ``barrier``'s expected
    bytes by all of the copy's and issues the loads, without arriving; the program arrives
    (``T.barrier_arrive(barrier)``) and waits with ``T.mbarrier_wait_parity(barrier, parity)``
    (sm_90 and newer; the tile must be one TMA can describe, as for pipelined copies).
    The other direction, shared -> global (TileLang's TMA store, completed by ``T.tma_store_wait``),
    takes no barrier: it is done as a ``T.copy`` of the block, complete when the statement ends."""
    b = _b.current()
    if eviction_policy is not None:
        _no_effect("T.tma_copy(eviction_policy=...)", "cache eviction hints are not emitted",
                   "remove eviction_policy (the copy is the same)")
    if barrier is None and not isinstance(src, _e.Load) and _is_store_direction(src, dst):
        s, d = _regions_for_copy(src, dst)
        b.emit(_t.Copy(s, d))
        return
    if barrier is None:
        raise _b.error("T.tma_copy needs barrier=: the mbarrier its bytes complete on",
                       hint="allocate one with `bars = T.alloc_barrier([1] * n)` and pass barrier=bars[i]")
    bar, idx = _mbar(barrier, "T.tma_copy")
    s, d = _regions_for_copy(src, dst)
    if s.buffer.scope != "global" or d.buffer.scope != "shared":
        raise _b.error(f"T.tma_copy copies a global tensor into shared memory; got {s.buffer.scope} -> "
                       f"{d.buffer.scope}", hint="use T.copy for other directions")
    b.emit(_t.Copy(s, d, mode="tma", barrier=(bar, idx), user_sync=True))


def _is_store_direction(src, dst) -> bool:
    """``T.tma_copy(shared tile, global ...)``: a TMA store."""
    src_buf = getattr(src, "buffer", src)
    dst_buf = getattr(dst, "buffer", dst)
    return getattr(src_buf, "scope", None) == "shared" and getattr(dst_buf, "scope", None) == "global"


def tma_store_wait(read=False):
    """Wait for this thread's TMA stores (``T.tma_copy`` shared -> global): those are done here as
    block copies that are complete when their statement ends, so there is nothing left to wait for."""
    _b.current()  # inside a kernel body, like the other T.* statements


def fill(buf, value):
    b = _b.current()
    if isinstance(buf, _e.Load):  # one element (TileLang's T.fill(buf[i], v) / T.clear(a T.alloc_var)): one store
        b.emit(_t.BufferStore(buf.buffer, buf.indices, _e.cast(buf.buffer.dtype, value), loc=b.loc))
        return
    r = _to_region(buf, what="fill target")
    if _dynamic_shared.is_dynamic_region(r):
        return _dynamic_shared.fill_elements(r, value)  # a run-time size: an element loop
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
    if k_pack not in (1, 2) or isinstance(k_pack, _builtins.bool):
        raise _b.error(f"T.gemm(k_pack={k_pack!r}) is not supported; TileLang's k_pack is 1 or 2",
                       hint="leave k_pack at 1: the gemm planner chooses the instruction's K width itself")
    if k_pack == 2:
        _no_effect("T.gemm(k_pack=2)", "the gemm planner chooses how many K elements a lane packs per "
                   "MFMA/mma instruction", "remove k_pack (the product is the same)")
    if use_wgmma:
        _no_effect("T.gemm(use_wgmma=True)", "wgmma is not implemented yet; the gemm uses mma.sync / MFMA / WMMA",
                   "remove use_wgmma (the product is the same)")
    if wg_wait != 0:
        if not isinstance(wg_wait, _builtins.int) or isinstance(wg_wait, _builtins.bool) or wg_wait < -1:
            raise _b.error(f"T.gemm(wg_wait=...) must be an int >= -1, got {wg_wait!r}")
        _no_effect("T.gemm(wg_wait=...)", "the gemm is synchronous: its result is complete when T.gemm returns",
                   "remove wg_wait (the product is the same)")
    b.emit(_t.Gemm(_to_region(A, what="gemm A"), _to_region(B, what="gemm B"), _to_region(C, what="gemm C"),
                   _builtins.bool(transpose_A), _builtins.bool(transpose_B), policy, _builtins.bool(clear_accum),
                   _builtins.int(k_pack)))


def _reduce(op, src, dst, dim, clear, batch=1, nan_propagate=False):
    b = _b.current()
    src, dst = _reduce_operand(src, op, "source"), _reduce_operand(dst, op, "destination")
    _reduce_options(op, src, batch, nan_propagate)
    if dim < 0:
        dim += src.ndim
    if not 0 <= dim < src.ndim:
        raise _b.error(f"T.reduce_{op}: dim={dim} is out of range for {src.name} of shape {src.shape}")
    if src.scope == "local":
        _reduce_per_thread(op, src, dst, dim, _builtins.bool(clear), _builtins.bool(nan_propagate))
        return
    if dst.scope in ("var", "local"):
        _reduce_into_register(op, src, dst, dim, _builtins.bool(clear), _builtins.bool(nan_propagate))
        return
    b.emit(_t.Reduce(op, src, dst, dim, _builtins.bool(clear), nan_propagate=_builtins.bool(nan_propagate)))


def _reduce_options(op, src, batch, nan_propagate) -> None:
    """TileLang's ``batch=`` (how many results share one cross-thread exchange: scheduling only)
    and ``nan_propagate=`` (max/min/absmax: a NaN element makes the result NaN; by default NaNs are
    dropped, as TileLang's reductions (``fmaxf``) do), and integer-only bitwise reductions."""
    if op.startswith("bit") and not _dt.is_int(src.dtype):
        raise _b.error(f"T.reduce_{op} takes an integer buffer, got {src.name} of {src.dtype}")
    if not isinstance(batch, _builtins.int) or isinstance(batch, _builtins.bool) or batch < 1:
        raise _b.error(f"T.reduce_{op}(batch={batch!r}) must be a positive int")
    if batch != 1:
        _no_effect(f"T.reduce_{op}(batch=...)", "the cross-thread exchange is scheduled by the reduce lowering",
                   "remove batch (the result is the same)")


def reduce_max(buffer, out, dim=-1, clear=True, batch=1, nan_propagate=False):
    _reduce("max", buffer, out, dim, clear, batch, nan_propagate)


def reduce_min(buffer, out, dim=-1, clear=True, batch=1, nan_propagate=False):
    _reduce("min", buffer, out, dim, clear, batch, nan_propagate)


def reduce_sum(buffer, out, dim=-1, clear=True, batch=1):
    _reduce("sum", buffer, out, dim, clear, batch)


def reduce_abssum(buffer, out, dim=-1, clear=True, batch=1):
    _reduce("abssum", buffer, out, dim, clear, batch)


def reduce_absmax(buffer, out, dim=-1, clear=True, batch=1, nan_propagate=False):
    _reduce("absmax", buffer, out, dim, clear, batch, nan_propagate)


def reduce_bitand(buffer, out, dim=-1, clear=True, batch=1):
    """Bitwise and of an integer buffer along ``dim``."""
    _reduce("bitand", buffer, out, dim, clear, batch)


def reduce_bitor(buffer, out, dim=-1, clear=True, batch=1):
    """Bitwise or of an integer buffer along ``dim``."""
    _reduce("bitor", buffer, out, dim, clear, batch)


def reduce_bitxor(buffer, out, dim=-1, clear=True, batch=1):
    """Bitwise xor of an integer buffer along ``dim``."""
    _reduce("bitxor", buffer, out, dim, clear, batch)


_MEMORY_ORDERS = ("relaxed", "consume", "acquire", "release", "acq_rel", "seq_cst")


def _memory_order(op: str, memory_order) -> str:
    if memory_order is None:
        return "relaxed"
    if memory_order not in _MEMORY_ORDERS:
        raise _b.error(f"T.atomic_{op}(memory_order={memory_order!r}) is not a memory order",
                       hint=f"use one of {', '.join(repr(m) for m in _MEMORY_ORDERS)}")
    return "acquire" if memory_order == "consume" else memory_order  # consume is promoted, as C++ compilers do


def _atomic(op, dst, value, memory_order=None, return_prev=False):
    """Scalar form ``T.atomic_add(A[i, j], v)`` (one element; with ``return_prev=True`` it returns the
    element's value before the update) or tile form ``T.atomic_add(A[i:i+m, :], tile)``."""
    b = _b.current()
    order = _memory_order(op, memory_order)
    target = getattr(dst, "buffer", dst)
    if getattr(target, "dtype", None) in ("int4", "uint4", "float4_e2m1fn", "float8_e8m0fnu"):
        raise _b.error(f"T.atomic_{op} on {target.dtype} values is not supported: no GPU has atomics of that type",
                       hint="accumulate in a float32 / int32 buffer and convert afterwards")
    if isinstance(dst, _e.Load) and not isinstance(value, (_t.Buffer, _t.Region)):
        r = _t.Region(dst.buffer, dst.indices, tuple(1 for _ in dst.indices), tuple(range(len(dst.indices))))
        prev = _e.Var(b.fresh("prev"), dst.buffer.dtype, kind="let") if return_prev else None
        b.emit(_t.Atomic(op, r, _e.cast(dst.buffer.dtype, value), order=order, result=prev))
        return prev
    if isinstance(value, (_t.Buffer, _t.Region)):
        if return_prev:
            raise _b.error(f"T.atomic_{op}(..., return_prev=True) needs an element destination such as A[i, j]; "
                           "a tile update has no single previous value",
                           hint="update elements in a T.Parallel loop: prev = T.atomic_add(A[i, j], v, "
                           "return_prev=True)")
        v = _to_region(value, what="atomic value")
        d = _to_region(dst, v.shape, "atomic destination")
        for r in (v, d):
            if not all(isinstance(n, _builtins.int) for n in r.extents):
                raise _b.error(f"T.atomic_{op} of a tile needs compile-time tile extents, got {r.buffer.name} "
                               f"extents {tuple(r.extents)}",
                               hint="update elements in a T.Parallel loop of constant extent, guarded by the bound")
        b.emit(_t.Atomic(op, d, v, order=order))
        return None
    if isinstance(dst, (_t.Buffer, _t.Region)):
        if return_prev:
            raise _b.error(f"T.atomic_{op}(..., return_prev=True) needs an element destination such as A[i, j]; "
                           "a tile update has no single previous value")
        _atomic_broadcast(op, _to_region(dst, what="atomic destination"), value, order)
        return None
    raise _b.error(f"T.atomic_{op}: the destination must be an element A[i, j] or a region, got {dst!r}")


def _atomic_broadcast(op, dst, value, order):
    """``T.atomic_add(A[i:i+m, :], v)`` / ``T.atomic_add(B, v)``: every element of the region is updated
    once with the scalar ``v`` (TileLang's tile atomic with a scalar value), as a T.Parallel loop of
    element atomics; elements of a global region past the tensor's end are left alone."""
    from ..ir.analysis import bounds_condition

    b = _b.current()
    shape = tuple(dst.extents)
    if not all(isinstance(n, _builtins.int) for n in shape):
        raise _b.error(f"T.atomic_{op} of a scalar into a region of {dst.buffer.name} needs compile-time extents, "
                       f"got {shape}", hint="update elements in a T.Parallel loop of constant extent")
    vs = tuple(_e.Var(b.fresh("a"), "int32", kind="loop") for _ in shape)
    idx = tuple(s + v for s, v in zip(dst.starts, vs))
    elem = _t.Region(dst.buffer, idx, tuple(1 for _ in idx), tuple(range(len(idx))))
    body = _t.Atomic(op, elem, _e.cast(dst.buffer.dtype, value), order=order, loc=b.loc)
    if dst.buffer.scope == "global":
        cond = bounds_condition(dst.buffer.shape, idx)
        if cond is not None:
            body = _t.IfThenElse(cond, body, None, loc=b.loc)
    b.emit(_t.ParallelFor(vs, shape, body, loc=b.loc))


def atomic_add(dst, value, memory_order=None, return_prev=False, use_tma=False):
    """``dst += value`` atomically; ``memory_order`` as in C++ (default relaxed); with
    ``return_prev=True`` returns the value ``dst`` held before (element form).  ``use_tma`` (TileLang's
    bulk tensor reduce-store of a shared tile) gives the same sums as the element atomics used here."""
    if use_tma:
        _no_effect("T.atomic_add(use_tma=True)", "the tile is added by per-element atomics, with the same result",
                   "remove use_tma")
    return _atomic("add", dst, value, memory_order, return_prev)


def atomic_max(dst, value, memory_order=None, return_prev=False):
    return _atomic("max", dst, value, memory_order, return_prev)


def atomic_min(dst, value, memory_order=None, return_prev=False):
    return _atomic("min", dst, value, memory_order, return_prev)


def _atomic_int(op, dst, value, memory_order, return_prev):
    buf = getattr(dst, "buffer", dst)
    if not _dt.is_int(getattr(buf, "dtype", "int32")):
        raise _b.error(f"T.atomic_{op} takes an integer destination, got {buf.dtype}",
                       hint="bitwise atomics exist for int32/uint32/int64/uint64 buffers")
    return _atomic(op, dst, value, memory_order, return_prev)


def atomic_or(dst, value, memory_order=None, return_prev=False):
    """``dst |= value`` atomically (integers); ``return_prev=True`` returns the old value."""
    return _atomic_int("or", dst, value, memory_order, return_prev)


def atomic_and(dst, value, memory_order=None, return_prev=False):
    """``dst &= value`` atomically (integers); ``return_prev=True`` returns the old value."""
    return _atomic_int("and", dst, value, memory_order, return_prev)


def atomic_xor(dst, value, memory_order=None, return_prev=False):
    """``dst ^= value`` atomically (integers); ``return_prev=True`` returns the old value."""
    return _atomic_int("xor", dst, value, memory_order, return_prev)


_LOAD_ORDERS = ("relaxed", "consume", "acquire", "seq_cst")  # as C++ atomic load: no release half
_STORE_ORDERS = ("relaxed", "release", "seq_cst")  # as C++ atomic store: no acquire half


def _check_one_sided_order(what: str, memory_order, allowed) -> None:
    """A load has no release half and a store no acquire half (C++ makes these undefined): refused
    with ValueError, as TileLang does."""
    if memory_order is not None and memory_order not in allowed:
        from ..errors import CompileValueError

        b = _b.current_or_none()
        raise CompileValueError(f"T.{what} does not support memory_order={memory_order!r}",
                                b.loc if b else None, hint=f"use one of {', '.join(repr(m) for m in allowed)}")


def atomic_store(dst, value, memory_order=None):
    """Store ``value`` to the element ``dst`` atomically, with ``memory_order`` (default relaxed)."""
    _check_one_sided_order("atomic_store", memory_order, _STORE_ORDERS)
    if not isinstance(dst, _e.Load):
        raise _b.error(f"T.atomic_store needs an element destination such as A[i], got {dst!r}")
    _atomic("exch", dst, value, memory_order, False)


def atomic_load(src, memory_order=None):
    """The element ``src`` read atomically, with ``memory_order`` (default relaxed): an atomic
    update that leaves it unchanged (``| 0`` for integers, ``+ -0.0`` for floats) returning the
    value it found."""
    _check_one_sided_order("atomic_load", memory_order, _LOAD_ORDERS)
    if not isinstance(src, _e.Load):
        raise _b.error(f"T.atomic_load needs an element such as A[i], got {src!r}")
    if _dt.is_int(src.buffer.dtype):
        return _atomic("or", src, 0, memory_order, True)
    return _atomic("add", src, -0.0, memory_order, True)


def _shifted(x, k: int, what: str):
    """The element ``k`` places after the element ``x`` (a load ``A[i, j]``) along its last dimension."""
    if not isinstance(x, _e.Load):
        raise _b.error(f"{what} takes elements such as A[i, j] (the first of the consecutive ones), got {x!r}")
    return _e.Load(x.buffer, x.indices[:-1] + (x.indices[-1] + k,))


class PackedValues(tuple):
    """The ``n`` previous values of ``T.atomic_addx{n}(..., return_prev=True)``: stored by a slice
    assignment of ``n`` elements (``Prev[0:2] = T.atomic_addx2(...)``) or unpacked into names."""

    def store_elements(self, buf, idx, loc) -> list:
        """The stores of ``buf[idx] = self`` (``idx`` a slice of as many consecutive elements)."""
        region = buf[idx]
        n = _builtins.len(self)
        if not isinstance(region, _t.Region) or region.shape != (n,):
            raise CompileError(f"{n} packed values are stored into a slice of {n} consecutive elements such as "
                               f"{buf.name}[i:i + {n}]", loc)
        first = _first_element(region, "the packed store")
        return [_t.BufferStore(buf, _shifted(first, k, "the packed store").indices,
                               _e.cast(buf.dtype, v), loc=loc) for k, v in enumerate(self)]


def _first_element(x, what: str):
    """The first element of an element ``A[i, j]`` or of a slice ``A[i, j:j+n]`` along the last dimension."""
    if isinstance(x, _t.Buffer):
        x = _t.Region.full(x)
    if hasattr(x, "as_region"):  # x[T.Ramp(base, 1, n)] (frontend/lanes.py)
        x = x.as_region()
    if isinstance(x, _t.Region):
        if any(e != 1 for d, e in enumerate(x.extents[:-1])):
            raise _b.error(f"{what} takes consecutive elements along the last dimension, got a region of shape "
                           f"{x.shape}")
        return _e.Load(x.buffer, tuple(x.starts))
    return x


def _atomic_add_vector(dst, value, n: int, memory_order, return_prev):
    what = f"T.atomic_addx{n}"
    dst = _first_element(dst, what)
    value = _first_element(value, what)
    prevs = []
    for k in range(n):
        src = _shifted(value, k, what) if isinstance(value, _e.Load) else value
        prevs.append(_atomic("add", _shifted(dst, k, what), src, memory_order, return_prev))
    return PackedValues(prevs) if return_prev else None


def atomic_addx2(dst, value, memory_order=None, return_prev=False):
    """``dst[.., j + k] += value[.., j' + k]`` for k = 0, 1: two consecutive elements (each update
    atomic; TileLang's packed 2-wide atomic).  ``dst`` and ``value`` are first elements or slices of 2;
    with ``return_prev=True`` the two previous values, stored with ``Prev[0:2] = ...``."""
    return _atomic_add_vector(dst, value, 2, memory_order, return_prev)


def atomic_addx4(dst, value, memory_order=None, return_prev=False):
    """``dst[.., j + k] += value[.., j' + k]`` for k = 0..3 (each update atomic); as T.atomic_addx2."""
    return _atomic_add_vector(dst, value, 4, memory_order, return_prev)


def dp4a(A, B, C):
    """``C += A[0]*B[0] + ... + A[3]*B[3]`` over four consecutive 8-bit integers starting at the
    elements (or buffers) ``A`` and ``B``, accumulated in the 32-bit integer element ``C``."""
    from .math import InvalidArgumentError

    ops = []
    for x, name in ((A, "A"), (B, "B"), (C, "C")):
        if isinstance(x, _t.Buffer):
            x = _e.Load(x, tuple(_e.as_expr(0) for _ in x.shape))
        if not isinstance(x, _e.Load):
            raise _b.error(f"T.dp4a: {name} must be a buffer or an element such as {name}_local[k], got {x!r}")
        ops.append(x)
    a, bb, c = ops
    loc = _b.current_or_none().loc if _b.current_or_none() else None
    for x, name in ((a, "A"), (bb, "B")):  # TileLang's wording (a ValueError): the signed instruction only
        if x.buffer.dtype != "int8":
            raise InvalidArgumentError(f"T.dp4a requires int8 inputs, got {name}.dtype='{x.buffer.dtype}'", loc)
    if c.buffer.dtype != "int32":
        raise InvalidArgumentError(f"T.dp4a requires an int32 accumulator, got C.dtype='{c.buffer.dtype}'", loc)
    b = _b.current()
    acc = c
    for k in range(4):
        prod = _e.cast(c.buffer.dtype, _shifted(a, k, "T.dp4a")) * _e.cast(c.buffer.dtype, _shifted(bb, k, "T.dp4a"))
        acc = acc + prod
    b.emit(_t.BufferStore(c.buffer, c.indices, acc, loc=b.loc))


def use_swizzle(panel_size: int = 10, order: str = "row", enable: bool = True):
    """Rasterize block indices in panels of ``panel_size`` for L2 reuse (``order`` "row" or "col")."""
    b = _b.current()
    if order not in ("row", "col"):
        raise _b.error(f"T.use_swizzle(order=...) must be 'row' or 'col', got {order!r}")
    if enable:
        b.emit(_t.Annotate("swizzle", {"panel_size": _builtins.int(panel_size), "order": order}))


def annotate_layout(layouts: dict):
    """Layout requests: a ``T.Layout`` on a shared buffer and a ``T.Fragment`` on a fragment are honored, a
    layout on a global tensor accepted unapplied (language/layout_objects.py); ``make_swizzled_layout``-style
    requests are accepted (tilewright infers shared layouts and swizzles itself)."""
    from .layout_objects import apply_layouts

    b = _b.current()
    digests = apply_layouts(layouts)
    # the digests of the layouts' tables are part of the kernel's text, and so of its cache keys: two
    # kernels that differ only in a layout function must not share a compiled kernel
    b.emit(_t.Annotate("layout", {"buffers": [getattr(k, "name", str(k)) for k in layouts], "digests": digests}))


def annotate_pipeline(*args, **kwargs):
    """Accepted for TileLang compatibility; no effect."""


def no_set_max_nreg():
    """Accepted for TileLang compatibility; no effect."""


# --------------------------------------------------------------------------------------------
# thread partitions and synchronization (TileLang's warp-specialization spellings)


class ws:  # noqa: N801 - TileLang spelling: ``with T.ws(1):``
    """``with T.ws(i, ...):`` a region run by warpgroup(s) ``i`` only (threads ``128 i .. 128 i + 127``;
    several indices must be consecutive).  Tile operations inside are performed by those threads
    between them, and barriers inside synchronize only them."""

    WARPGROUP = 128

    def __init__(self, *warp_group_idx):
        ids = sorted(_builtins.int(i) for i in warp_group_idx)
        if not ids or ids != list(range(ids[0], ids[0] + len(ids))) or ids[0] < 0:
            raise _b.error(f"T.ws needs one or more consecutive warpgroup indices, got {warp_group_idx!r}")
        self.ids = tuple(ids)
        self.base = ids[0] * self.WARPGROUP
        self.count = len(ids) * self.WARPGROUP

    def __enter__(self):  # only meaningful through the frontend
        raise _b.error("`with T.ws(...)` can only be used inside a @T.prim_func body")

    def __exit__(self, *a):
        return False


WarpSpecialize = ws


def alloc_barrier(arrive_count):
    """Shared-memory mbarriers, one per entry of ``arrive_count`` (an int: one barrier), each
    completing a phase after that many arrivals (plus the bytes of the TMA copies it expects).
    Initialized by one thread, then the block synchronizes.  Index the result: ``bars[i]``."""
    b = _b.current()
    if b.kernel is None:
        raise _b.error("T.alloc_barrier must be called inside `with T.Kernel(...)`")
    counts = [arrive_count] if isinstance(arrive_count, (_builtins.int, _e.Const)) else list(arrive_count)
    counts = [c.value if isinstance(c, _e.Const) else c for c in counts]
    if not counts or not all(isinstance(c, _builtins.int) and c > 0 for c in counts):
        raise _b.error(f"T.alloc_barrier takes positive compile-time arrive counts, got {arrive_count!r}")
    if len(set(counts)) != 1:
        raise _b.error(f"T.alloc_barrier with different arrive counts {counts} is not supported",
                       hint="allocate one T.alloc_barrier([...]) per arrive count")
    from ..ir import thread as _th

    buf = _t.Buffer(b.fresh("mbar"), (len(counts),), "uint64", "shared", loc=b.loc)
    buf.attrs["auto_name"] = True
    buf.attrs["mbarrier"] = True
    b.emit(_t.Alloc(buf))
    b.emit(_th.MbarrierInit(buf, counts[0]))
    b.emit(_th.Barrier())
    return buf


def _mbar(x, what: str):
    """(barrier buffer, index expression) of ``bars[i]`` or of a one-barrier buffer."""
    if isinstance(x, _e.Load) and x.buffer.attrs.get("mbarrier"):
        return x.buffer, x.indices[0]
    if isinstance(x, _t.Buffer) and x.attrs.get("mbarrier"):
        if x.shape != (1,):
            raise _b.error(f"{what}: {x.name} holds {x.shape[0]} barriers; say which one",
                           hint=f"index the barrier: {x.name}[i]")
        return x, _e.as_expr(0)
    raise _b.error(f"{what} takes a barrier from T.alloc_barrier (e.g. bars[i]), got {x!r}",
                   hint="allocate barriers with `bars = T.alloc_barrier([count] * n)`")


def mbarrier_wait_parity(mbarrier, parity):
    """Wait until the phase of parity ``parity`` (0/1) of ``mbarrier`` has completed."""
    from ..ir import thread as _th

    bar, idx = _mbar(mbarrier, "T.mbarrier_wait_parity")
    _b.current().emit(_th.MbarrierWait(bar, idx, _e.as_expr(parity)))


def mbarrier_arrive(mbarrier, cta_id=None):
    """Each executing thread arrives once on ``mbarrier``; with ``cta_id``, on the mbarrier at the same
    place in block ``cta_id`` (its rank) of the thread-block cluster."""
    from ..ir import thread as _th

    bar, idx = _mbar(mbarrier, "T.mbarrier_arrive")
    cta = None if cta_id is None else _e.as_expr(cta_id)  # the block of the cluster whose barrier it is
    _b.current().emit(_th.MbarrierArrive(bar, idx, cta=cta))


def mbarrier_expect_tx(mbarrier, tx):
    """Raise the bytes the current phase of ``mbarrier`` waits for by ``tx`` (no arrival)."""
    from ..ir import thread as _th

    bar, idx = _mbar(mbarrier, "T.mbarrier_expect_tx")
    _b.current().emit(_th.MbarrierExpectTx(bar, idx, _e.as_expr(tx)))


def mbarrier_arrive_expect_tx(mbarrier, tx):
    """Each executing thread arrives on ``mbarrier`` and raises its expected bytes by ``tx``."""
    from ..ir import thread as _th

    bar, idx = _mbar(mbarrier, "T.mbarrier_arrive_expect_tx")
    _b.current().emit(_th.MbarrierArrive(bar, idx, expect_tx=_e.as_expr(tx)))


def barrier_wait(barrier_id, parity=None):
    """TileLang's alias of ``T.mbarrier_wait_parity``."""
    if parity is None:
        raise _b.error("T.barrier_wait needs the parity to wait for", hint="T.barrier_wait(bars[i], parity)")
    mbarrier_wait_parity(barrier_id, parity)


def barrier_arrive(barrier_id):
    """TileLang's alias of ``T.mbarrier_arrive``."""
    mbarrier_arrive(barrier_id)


def sync_threads():
    """A barrier of the block (CUDA's ``__syncthreads``); inside ``T.ws`` only those threads."""
    from ..ir import thread as _th

    b = _b.current()
    if b.kernel is None:
        raise _b.error("T.sync_threads() must be called inside `with T.Kernel(...)`")
    b.emit(_th.Barrier())


def sync_grid():
    """A barrier of the whole grid needs a cooperative launch, which tilewright does not make."""
    raise _b.error("T.sync_grid() needs a cooperative kernel launch (all blocks resident at once); tilewright "
                   "launches kernels normally, where a grid barrier could hang",
                   hint="split the kernel in two at the grid barrier and launch them one after the other")


def assume(cond):
    """A fact the compiler may rely on (TileLang passes it to the optimizer).  Nothing here relies on
    it, so the kernel computes the same whether it holds or not.  A condition on sizes and scalar
    parameters only (``T.assume(N % 4 == 0)``) is checked by every call, as TileLang does: a call
    where it is false raises RuntimeError naming it."""
    if isinstance(cond, PrimExpr) and cond.dtype != "bool":
        raise _b.error(f"T.assume takes a condition, got a {cond.dtype} value {cond}")
    if isinstance(cond, PrimExpr):
        from ..ir.visitor import free_vars, loads_in

        names = free_vars(cond)
        if names and all(v.kind in ("dyn", "param") for v in names) and not loads_in(cond):
            b = _b.current()
            b.__dict__.setdefault("host_assumes", []).append(cond)


def fence_proxy_async():
    """Order this thread's shared-memory writes before later asynchronous-proxy (TMA) accesses."""
    from ..ir import thread as _th

    _b.current().emit(_th.FenceProxyAsync())


def set_max_nreg(reg_count, is_inc):
    """The executing warpgroup's per-thread register budget becomes ``reg_count`` (24..256, a
    multiple of 8); ``is_inc`` 1 raises it, 0 lowers it (sm_90a)."""
    from ..ir import thread as _th

    if not isinstance(reg_count, _builtins.int) or not 24 <= reg_count <= 256 or reg_count % 8:
        raise _b.error(f"T.set_max_nreg: reg_count must be a multiple of 8 in 24..256, got {reg_count!r}")
    _b.current().emit(_th.SetMaxNReg(reg_count, _builtins.bool(is_inc)))


def inc_max_nreg(reg_count):
    set_max_nreg(reg_count, 1)


def dec_max_nreg(reg_count):
    set_max_nreg(reg_count, 0)


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
# T.round (halves to even, as in TileLang): language/math.py
trunc = _unary("trunc")
isnan = _unary("isnan")
isinf = _unary("isinf")

# TileLang's further math (tan, fmod, nearbyint, clamp, fast_rcp, __exp..., ieee_*): language/math.py
from . import views as _views  # noqa: E402
from .attrs import *  # noqa: E402, F403  (T.attr, T.comm_reducer, T.tvm_thread_allreduce: attrs.py)
from .compat_names import *  # noqa: E402, F403  (T.ClusterKernel, T.Persistent, T.func_attr...: compat_names.py)
from .debug import print  # noqa: E402, A004, F401  (T.print: language/debug.py)
from .func_annotations import *  # noqa: E402, F403  (T.annotate_pass_configs...: func_annotations.py)
from .im2col import *  # noqa: E402, F403  (T.im2col, T.c2d_im2col: language/im2col.py)
from .layout_objects import Fragment, Layout  # noqa: E402, F401  (layout_objects.py)
from .logical import *  # noqa: E402, F403  (any_of, all_of: language/logical.py)
from .math import *  # noqa: E402, F403
from .math import __all__ as _math_names  # noqa: E402, F401
from .random import *  # noqa: E402, F403  (rng_init, rng_rand, rng_rand_float: language/random.py)
from .safe_value import annotate_safe_value  # noqa: E402, F401  (safe_value.py)
from .safe_value import guard_reads as _guard_reads  # noqa: E402, F401  (the frontend guards bindings)
from .safe_value import guarded_store as _guarded_store  # noqa: E402
from .safe_value import safe_value as _safe_value  # noqa: E402
from .scan import *  # noqa: E402, F403  (cumsum, cummax: language/scan.py)
from .source_kernel import *  # noqa: E402, F403  (T.CUDASourceCodeKernel: source_kernel.py)
from .strided import *  # noqa: E402, F403  (T.StridedTensor: language/strided.py)
from .views import *  # noqa: E402, F403  (reshape, view: language/views.py; T.reinterpret: attrs.py)
from .warp import *  # noqa: E402, F403  (shfl_*, warp_reduce_*: language/warp.py)


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


def cast(x, dtype, round="", sat=True, rbits=None):  # noqa: A002 - TileLang's keywords
    """``x`` converted to ``dtype``; TileLang's rounding and saturation keywords: language/cast_modes.py."""
    from .cast_modes import cast as _cast_with_modes

    return _cast_with_modes(x, dtype, round=round, sat=sat, rbits=rbits)


def infinity(dtype):
    """+infinity of ``dtype``: a float type with an infinity (float8_e5m2 has one; float8_e4m3fn, the
    fnuz formats, float8_e8m0fnu and the 4-bit floats have none, and TileLang refuses them too)."""
    d = _dt.canon(dtype)
    if not _dt.is_float(d) or (d.startswith(("float8", "float4")) and d != "float8_e5m2"):
        raise _b.error(f"T.infinity({d!r}): {d} has no infinity",
                       hint=f"use T.max_value({d!r}) for its largest finite value, or a type with an infinity "
                       "(float16, bfloat16, float32, float64, float8_e5m2)")
    return _e.Const(_math.inf, d)


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
    """``for i in T.vectorized(n):`` — a loop each thread runs whole, unrolled, with its contiguous
    global/shared accesses done as vector accesses where the addresses allow (passes/lower_vectorized.py)."""
    spec = unroll(*args)
    spec.vectorized = True
    return spec


def floordiv(a, b):
    return a // b


def floormod(a, b):
    return a % b


def truncdiv(a, b):
    """Division rounding toward zero (C's ``/``); ``//`` in a kernel rounds toward minus infinity."""
    if not isinstance(a, PrimExpr) and not isinstance(b, PrimExpr):
        q = _builtins.abs(a) // _builtins.abs(b)
        return q if (a < 0) == (b < 0) else -q
    q = abs(a) // abs(b)
    if not isinstance(b, PrimExpr):
        return _e.select(a < 0, -q, q) if b > 0 else _e.select(a < 0, q, -q)
    return _e.select(a < 0, _e.select(b < 0, q, -q), _e.select(b < 0, -q, q))


def truncmod(a, b):
    """The remainder of ``truncdiv`` (C's ``%``: the sign of ``a``)."""
    return a - truncdiv(a, b) * b


# ---- the eager-JIT style: size names and outputs of an `@jit` function that is the kernel


def const(value, dtype="int32"):
    """``T.const(1.5, "float32")``: a constant.  ``T.const("M, N, K")`` (names separated by commas or
    spaces): the sizes of an eager ``@tilewright.jit`` function, compile-time ints bound from the
    shapes of the arguments whose ``T.Tensor`` declarations use them (one name gives one size, several a
    tuple).  Outside such a function the names are symbolic sizes, as with ``T.dynamic``."""
    from ..frontend.eager import declare_sizes, is_size_names

    if is_size_names(value):
        return declare_sizes(value, dtype)
    return _e.cast(_dt.canon(dtype), value)


def empty(*shape, dtype=None):
    """``C = T.empty((M, N), dtype)`` (or ``T.empty(M, N, dtype=...)``): a new output tensor of an eager
    ``@tilewright.jit`` function, allocated at each call and returned by ``return C``."""
    from ..frontend.eager import new_output

    if shape and dtype is None and isinstance(shape[-1], str):
        shape, dtype = shape[:-1], shape[-1]
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    if not shape:
        raise _b.error("T.empty needs a shape: T.empty((M, N), dtype)")
    return new_output(shape, _dt.canon(dtype if dtype is not None else "float32"))


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


def align_up(x, y):
    """``x`` rounded up to a multiple of ``y``: ``T.ceildiv(x, y) * y`` (TileLang's ``T.align_up``)."""
    return ceildiv(x, y) * y


# ---- TileLang launch and register-allocation hints that change no result here


def pdl_trigger():
    """Programmatic dependent launch (sm_90+): this block lets the next kernel of the stream start its blocks
    now, if that kernel waits for this one with ``T.pdl_sync`` (``griddepcontrol.launch_dependents``; a
    block that exits without it counts as having triggered).  Nothing to do elsewhere (``ir.thread.GridDependency``)."""
    from ..ir import thread as _th

    _b.current().emit(_th.GridDependency("launch_dependents"))


def prefetch_l2(element):
    """Ask for the cache line holding ``element`` of a global buffer (``T.prefetch_l2(K[row, col])``: each
    executing thread its own element) to be brought into L2 (``prefetch.global.L2`` on CUDA; nothing on AMD and
    in the interpreters).  A hint: it changes no value and orders nothing, and L2 is the device's point of
    coherence, so a later read of the line sees every write to it; it may therefore come before ``T.pdl_sync``
    (the previous kernel's writes still reach the reads after the wait).  The element must be inside the buffer
    (the emulator checks it)."""
    from ..ir import thread as _th

    if not isinstance(element, _e.Load) or getattr(element.buffer, "scope", None) != "global":
        raise _b.error("T.prefetch_l2 takes one element of a global buffer (a kernel parameter), e.g. "
                       f"T.prefetch_l2(K[row, col]); got {element!r}")
    if len(element.indices) != len(element.buffer.shape):
        raise _b.error(f"T.prefetch_l2: {element.buffer.name} has {len(element.buffer.shape)} dimensions, "
                       f"{len(element.indices)} indices given")
    _b.current().emit(_th.PrefetchL2(element))


def pdl_sync():
    """Programmatic dependent launch (sm_90+): wait here until the previous kernel of the stream has
    finished and its writes are visible (``griddepcontrol.wait``).  A kernel holding it is launched with
    programmatic stream serialization on a CUDA target of sm_90 or newer: it may start while the previous
    kernel still runs, so nothing before the wait may read what that kernel writes, or write what it reads.
    Elsewhere the previous kernel has already finished (``ir.thread.GridDependency``)."""
    from ..ir import thread as _th

    _b.current().emit(_th.GridDependency("wait"))


def disable_warp_group_reg_alloc():
    """TileLang's switch-off of warpgroup register reallocation: the function compiles with the pass config
    ``tw.setmaxnreg: False`` (warp-specialized kernels keep the launch's register budget in every warpgroup,
    no ``setmaxnreg``); an explicit ``pass_configs=`` entry wins."""
    from .func_annotations import merge_pass_configs

    merge_pass_configs({"tw.setmaxnreg": False})


def annotate_l2_hit_ratio(l2_hit_ratio_map: dict):
    """TileLang's L2 persistence hint per global buffer (a hit ratio in [0, 1])."""
    _b.current()
    for buf, ratio in dict(l2_hit_ratio_map).items():
        if not isinstance(buf, _t.Buffer) or buf.scope != "global":
            raise _b.error(f"T.annotate_l2_hit_ratio: {buf!r} is not a global buffer (a kernel parameter)")
        if not 0.0 <= _builtins.float(ratio) <= 1.0:
            raise _b.error(f"T.annotate_l2_hit_ratio: the hit ratio of {buf.name} must be in [0, 1], got {ratio!r}")
    _no_effect("T.annotate_l2_hit_ratio", "no L2 persistence window is set for the launch",
               "remove it to silence this warning")


# TileLang's C-style dtype names
int = DType("int32")  # noqa: A001 - TileLang's T.int
uint = DType("uint32")
short = DType("int16")
long = DType("int64")
ulong = DType("uint64")


# ---- TileLang's language modules: this one is its default, the CUDA facade (language/dialects.py)
__tilelang_dialect__ = "cuda"


def __getattr__(name: str):  # computed when asked for, so it lists names added above in any order
    if name == "__all__":
        from .dialects import names_of

        return names_of(__tilelang_dialect__)
    import sys

    from .tir.exports import tir_name_hint

    raise AttributeError(f"module {__name__!r} has no attribute {name!r}{tir_name_hint(name)}", name=name,
                         obj=sys.modules[__name__])
