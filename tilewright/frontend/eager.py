"""Reading an eager-style ``@jit`` function (TileLang >= 0.1.8) into a ``PrimFunc``.

In that style the decorated function *is* the kernel: its parameters are the tensors themselves
(plus compile-time values such as block sizes), sizes are declared with ``M, N = T.const("M, N")``,
tensors are declared in the body (``A: T.Tensor((M, K), dtype)``), outputs are made with
``T.empty(...)`` and returned, and ``with T.Kernel(...)`` appears directly in the body.

The reader is the prim_func ``Translator`` with three hooks: the parameters come from the call's
arguments, ``name: T.Tensor(...)`` declares a tensor parameter, and ``return`` names the outputs.
Sizes are compile-time constants, so a function is read twice per new binding:

1. ``discover_sizes`` runs the body with each ``T.const`` name as a symbol, up to the first
   top-level ``with`` (the kernel) or ``return``, and binds every symbol from the shape of the argument whose
   annotation uses it (a conflict is an error at the annotation's line);
2. ``read_eager`` reads the whole body with those symbols replaced by the bound ints.
``T.dynamic`` sizes stay symbolic: one kernel serves every value.
"""

from __future__ import annotations

import ast
import inspect
import re
from dataclasses import dataclass, field

from .. import language as T
from ..binding.tensor_args import PACKED_STORAGE
from ..errors import ArgumentError, CompileError, SourceLocation, TilewrightError
from ..ir import dtype as dt
from ..ir import expr as E
from ..ir import tile as t
from ..ir.visitor import free_vars
from . import builder as B
from .parser import Translator, _active_translators, _global_scope, _source_of
from .reducer_epochs import canonicalize_reducers
from .shape_annotations import size_expression

NOT_GIVEN = type("NotGiven", (), {"__repr__": lambda self: "<not given>"})()
_NAMES = re.compile(r"^\s*[A-Za-z_]\w*(\s*[,\s]\s*[A-Za-z_]\w*)*\s*,?\s*$")
_active: list[EagerTranslator] = []


def is_size_names(text) -> bool:
    """Whether ``T.const(text)`` declares size names (``"M, N, K"`` or ``"M N K"``)."""
    return isinstance(text, str) and bool(_NAMES.match(text)) and text.strip().lower() not in ("inf", "nan",
                                                                                               "infinity")


def is_tensor_like(value) -> bool:
    """A tensor, an array or a ``T.Tensor`` spec (a NumPy or torch scalar of no dimensions is a number)."""
    if value is NOT_GIVEN or isinstance(value, (E.Expr, t.Buffer)):
        return False
    shape = getattr(value, "shape", None)
    return shape is not None and hasattr(value, "dtype") and len(tuple(shape)) > 0


def declare_sizes(text: str, dtype: str = "int32"):
    """``T.const("M, N")``: the named sizes of the function being read (ints once bound); outside
    an eager function, symbolic sizes like ``T.dynamic``."""
    names = [n for n in re.split(r"[,\s]+", text.strip()) if n]
    tr = _active[-1] if _active else None
    vals = [tr.size(n, dtype) if tr is not None else T.dynamic(n, dtype) for n in names]
    return vals[0] if len(vals) == 1 else tuple(vals)


def new_output(shape, dtype):
    """``T.empty(shape, dtype)``: a new output tensor of the eager function being read."""
    tr = _active[-1] if _active else None
    if tr is None:
        raise B.error("T.empty creates an output of an eager @tilewright.jit function (one whose parameters are "
                      "the tensors); it cannot be used in a @T.prim_func",
                      hint="in a prim_func, make the output a parameter and pass out_idx=... to tilewright.compile")
    return tr.output(shape, dtype)


class _Stop(TilewrightError):
    """Size discovery has seen what it needs (a TilewrightError so that expression evaluation passes it on)."""


@dataclass
class EagerInfo:
    """What the jit layer needs besides the PrimFunc: which arguments are passed at run time (in
    parameter order) and how the outputs are returned."""
    runtime_names: list
    out_idx: tuple
    sizes: dict = field(default_factory=dict)


class EagerTranslator(Translator):
    def __init__(self, fn, arguments: dict, sizes: dict, discovering: bool):
        filename, first, text, tree = _source_of(fn)
        super().__init__(fn, tree, filename, first - 1, text.splitlines(), _global_scope(fn))
        self.arguments = arguments  # parameter name -> call value (NOT_GIVEN for parameter-only compiles)
        self.sizes = dict(sizes)  # T.const name -> int, known
        self.discovering = discovering
        self.symbols: dict = {}  # T.const name -> (Var, loc) while discovering
        self.bound_at: dict = {}  # T.const name -> (parameter, index, line, "dimension" or "stride") that bound it
        self.runtime_names: list = []  # tensor and scalar parameters, signature order
        self.decl: dict = {}  # parameter name -> Buffer / Var
        self.implicit: set = set()
        self.compile_time: set = set()  # parameters whose values are folded in
        self.skipped: list = []  # errors of statements skipped while discovering sizes
        self.outputs: list = []
        self.returned = None

    # ---------------------------------------------------------------- T.const / T.empty
    def size(self, name: str, dtype: str):
        if name in self.sizes:
            return self.sizes[name]
        if not self.discovering:
            raise CompileError(f"T.const size {name!r} is not bound by any argument", self.b.loc)
        if name not in self.symbols:
            self.symbols[name] = (E.Var(name, dt.canon(dtype), kind="dyn"), self.b.loc)
        return self.symbols[name][0]

    def output(self, shape, dtype):
        shape = self._shape(shape, "T.empty")
        buf = t.Buffer("out", shape, dtype, "global", loc=self.b.loc)
        buf.attrs["auto_name"] = True
        self.outputs.append(buf)
        return buf

    def _shape(self, shape, what: str) -> tuple:
        out = []
        for s in shape:
            if isinstance(s, E.Const):
                s = s.value
            if isinstance(s, int) and not isinstance(s, bool) and s > 0:
                out.append(s)
            elif isinstance(s, E.Var):
                out.append(s)
            elif self.discovering and isinstance(s, E.Expr):
                out.append(s)  # an expression of not-yet-bound sizes: checked on the second reading
            elif isinstance(s, E.Expr):  # m * 2 + 1 of T.dynamic sizes or scalar parameters: bound at the call
                out.append(size_expression(s, f"{what} shape entry {s}", [], self.b.loc))
            else:
                raise CompileError(f"{what} shape entry {s!r} must be a positive int, a T.const size or a T.dynamic "
                                   "name", self.b.loc, hint="give the dimension its own T.dynamic name and compute "
                                   "derived sizes inside the kernel")
        return tuple(out)

    # ---------------------------------------------------------------- parameters
    def _signature(self) -> list:
        args = self.tree.args
        if args.vararg or args.kwarg:
            raise CompileError("*args and **kwargs are not supported in an eager @jit function", self.loc(self.tree),
                               hint="name every tensor and compile-time value as a parameter")
        return args.posonlyargs + args.args + args.kwonlyargs

    def params(self):
        for a in self._signature():
            name = a.arg
            value = self.arguments.get(name, NOT_GIVEN)
            ann = self._annotation(a)
            pointer = getattr(ann, "is_pointer", False)  # `A: T.ptr`, bound by T.make_tensor(A, ...)
            if isinstance(ann, T.Tensor) or (isinstance(ann, str) and (pointer or not is_tensor_like(value))):
                self.runtime_names.append(name)
                self.declare_param(name, ann, self.loc(a))
            elif is_tensor_like(value):
                self.runtime_names.append(name)
                self.implicit_tensor(name, value, self.loc(a))
            elif value is NOT_GIVEN:
                self.runtime_names.append(name)  # a tensor declared in the body (parameter-only compile)
            else:
                self.scope[name] = value  # a compile-time value: folded into the kernel
                self.compile_time.add(name)
        return [], []

    def _annotation(self, a):
        """A signature annotation's value; annotations that are not T.Tensor or a dtype (``int``,
        ``T.dtype``, typing names) only document compile-time parameters, so one that cannot be read
        is ignored unless it mentions T.Tensor."""
        if a.annotation is None:
            return None
        try:
            return self.eval(a.annotation)
        except CompileError:
            if _mentions_tensor(a.annotation):
                raise
            return None

    def implicit_tensor(self, name, value, loc) -> None:
        """A tensor argument the body never annotates: a parameter of exactly the argument's shape."""
        try:
            shape = tuple(int(s) for s in value.shape)
            dtype = dt.canon(value.dtype)
        except (TypeError, ValueError):
            return
        buf = t.Buffer(name, shape, dtype, "global", loc=loc)
        self.decl[name] = buf
        self.scope[name] = buf
        self.implicit.add(name)

    def declare(self, s) -> bool:
        if not isinstance(s.target, ast.Name):
            return False
        if s.target.id in self.compile_time:
            ann = self.eval(s.annotation)
            value = self.arguments[s.target.id]
            if isinstance(ann, T.Tensor):
                raise ArgumentError(f"argument {s.target.id} is declared as a tensor (line {self.loc(s).lineno}: "
                                    f"{self.loc(s).line_text.strip()}) but got {type(value).__name__} {value!r}")
            if not isinstance(ann, str):
                return False
            # `n: T.int32` in the body: the number is passed at run time, not folded in
            self.compile_time.discard(s.target.id)
            order = [a.arg for a in self._signature()]
            self.runtime_names.append(s.target.id)
            self.runtime_names.sort(key=order.index)
        if s.target.id not in self.runtime_names:
            return False
        if self.loop_depth or len(self.b.blocks) > 1 or self.b.kernel is not None:
            raise CompileError(f"the tensor parameter {s.target.id!r} must be declared at the top of the function, "
                               "before `with T.Kernel(...)`", self.loc(s))
        name = s.target.id
        if name in self.decl and name not in self.implicit:
            raise CompileError(f"parameter {name!r} is declared twice", self.loc(s))
        self.implicit.discard(name)
        self.declare_param(name, self.eval(s.annotation), self.loc(s))
        return True

    def declare_param(self, name: str, ann, loc: SourceLocation) -> None:
        value = self.arguments.get(name, NOT_GIVEN)
        if isinstance(ann, str):  # a scalar passed at run time: `n: T.int32`
            if is_tensor_like(value) and not getattr(ann, "is_pointer", False):
                raise ArgumentError(f"argument {name} is a tensor but is declared as a scalar {ann} (line "
                                    f"{loc.lineno}: {loc.line_text.strip()})")
            try:
                v = E.Var(name, dt.canon(ann), kind="param")
            except ValueError as e:
                raise CompileError(str(e), loc) from None
            self.decl[name] = v
            self.scope[name] = v
            return
        if not isinstance(ann, T.Tensor):
            raise CompileError(f"cannot read the annotation of parameter {name!r} ({ann!r})", loc,
                               hint=f"declare it as `{name}: T.Tensor((M, K), dtype)` or as a scalar `{name}: T.int32`")
        if any(d is int for d in ann.shape):  # `T.Tensor[[int, int], dtype]`: sizes taken from the argument
            if not is_tensor_like(value):
                raise CompileError(f"the declaration of {name!r} leaves sizes to the argument (`int`), but no tensor "
                                   "is given", loc, hint="pass the tensor (or a T.Tensor spec), or name the sizes "
                                   "with T.const")
            if len(value.shape) == len(ann.shape):
                ann = T.Tensor(tuple(int(g) if d is int else d for d, g in zip(ann.shape, value.shape)), ann.dtype)
        if value is not NOT_GIVEN:
            self.bind(name, ann, value, loc)
        shape = list(self._shape_at(ann.shape, name, loc))
        strides = None if ann.strides is None else self._shape_at(ann.strides, name, loc)
        buf = t.Buffer(name, shape, ann.dtype, "global", strides=strides, loc=loc)
        if strides is not None:  # T.StridedTensor / T.Tensor(strides=): a symbolic stride is read from the argument
            buf.attrs["explicit_strides"] = True
            for st in strides:
                if isinstance(st, E.Var):
                    st.kind = "dyn"
        self.decl[name] = buf
        self.scope[name] = buf

    def _shape_at(self, shape, name, loc) -> tuple:
        saved = self.b.loc
        self.b.loc = loc
        try:
            return self._shape(shape, f"the declaration of {name!r}:")
        finally:
            self.b.loc = saved

    def bind(self, name: str, ann, value, loc: SourceLocation) -> None:
        """Check an argument against its declaration and bind the T.const sizes (and strides) it uses.
        A 4-bit declaration takes byte storage (two elements per byte): its shape and strides count
        elements, so the storage's last dimension is doubled (``binding.packed``)."""
        if not is_tensor_like(value):
            raise ArgumentError(f"argument {name} is declared as a tensor (line {loc.lineno}: "
                                f"{loc.line_text.strip()}) but got {type(value).__name__}")
        got = tuple(value.shape)
        if len(got) != len(ann.shape):
            raise ArgumentError(f"argument {name} has shape {tuple(got)} ({len(got)} dimensions); its declaration at "
                                f"line {loc.lineno} has {len(ann.shape)}: {loc.line_text.strip()}")
        got_dtype = _dtype_name(value.dtype)
        packed = dt.is_subbyte(ann.dtype) and got_dtype in PACKED_STORAGE
        if got_dtype is not None and got_dtype != ann.dtype and not packed:
            raise ArgumentError(f"argument {name} has dtype {got_dtype}; its declaration at line {loc.lineno} says "
                                f"{ann.dtype}: {loc.line_text.strip()}")
        strides = _strides_of(value)
        if packed:  # counted in elements of the declared 4-bit type
            got = (*got[:-1], got[-1] * 2) if isinstance(got[-1], int) else got
            if strides is not None:
                strides = (*(s * 2 for s in strides[:-1]), 1)
        self._bind_dims(name, "dimension", ann.shape, got, loc, packed)
        if ann.strides is not None and strides is not None:
            self._bind_dims(name, "stride", ann.strides, strides, loc, packed)

    def _bind_dims(self, name, what: str, declared, got, loc, packed: bool) -> None:
        symbols = {id(v): n for n, (v, _) in self.symbols.items()}
        for i, (want, g) in enumerate(zip(declared, got)):
            if not isinstance(g, int):
                continue  # a symbolic argument (T.Tensor spec): nothing to bind
            if isinstance(want, E.Var) and id(want) in symbols:
                size = symbols[id(want)]
                if size in self.sizes and self.sizes[size] != g:
                    where = self.bound_at.get(size)
                    first = f"{where[0]} {where[3]} {where[1]} (line {where[2]})" if where else "an earlier binding"
                    raise CompileError(f"size {size} is bound twice with different values: {self.sizes[size]} by "
                                       f"{first}, {g} by {name} {what} {i}", loc,
                                       hint="the arguments' shapes disagree; check which tensor has the wrong shape")
                self.sizes[size] = g
                self.bound_at.setdefault(size, (name, i, loc.lineno, what))
            elif isinstance(want, E.Const) and want.value != g or isinstance(want, int) and want != g:
                storage = (" (the argument is byte storage of 4-bit values, two per byte: its last dimension counts "
                           "half the elements)" if packed and what == "dimension" and i == len(got) - 1 else "")
                values = "shape" if what == "dimension" else "strides"
                raise ArgumentError(f"argument {name} has {values} {tuple(got)}{storage}; its declaration at line "
                                    f"{loc.lineno} needs {what} {i} to be {want}: {loc.line_text.strip()}")

    # ---------------------------------------------------------------- statements
    def stmt(self, s) -> None:
        if isinstance(s, ast.Assert) and self._assert_always_holds(s):
            return  # `assert M == M_` where both are one T.dynamic size: true for every value
        top = self.loop_depth == 0 and len(self.b.blocks) == 1 and self.b.kernel is None
        if not (self.discovering and top):
            return super().stmt(s)
        if isinstance(s, (ast.With, ast.Return)):
            raise _Stop  # tensors are declared before the kernel: every binding (and conflict) is seen
        if isinstance(s, ast.AnnAssign) and s.value is None:
            return super().stmt(s)  # a declaration: its errors (conflicts, bad arguments) are the user's
        try:
            super().stmt(s)
        except CompileError as e:
            # other statements may need sizes not bound yet (`assert K % block_K == 0` before B's
            # declaration); the second reading, with every size an int, reports real errors
            self.skipped.append(e)

    def _assert_always_holds(self, s) -> bool:
        try:
            return _same_on_both_sides(self.eval(s.test))
        except CompileError:
            return False  # reported (or, while discovering sizes, skipped) by the statement itself

    def return_stmt(self, s) -> bool:
        if self.discovering:
            raise _Stop
        if self.loop_depth or len(self.b.blocks) > 1:
            raise CompileError("`return` must be the last statement of the function, at its top level", self.loc(s))
        value = self.eval(s.value)
        vals = list(value) if isinstance(value, (tuple, list)) else [value]
        for v in vals:
            if not isinstance(v, t.Buffer) or all(v is not o for o in self.outputs):
                raise CompileError(f"an eager @jit function returns the tensors it made with T.empty; got {v!r}",
                                   self.loc(s), hint="create outputs with `C = T.empty((M, N), dtype)` and return "
                                   "them; inputs are modified in place and need not be returned")
        self.returned = vals
        return True

    def finish_params(self, params, dyn_vars):
        out = []
        for n in self.runtime_names:
            if n not in self.decl:
                raise CompileError(f"parameter {n!r} has no value and no declaration", self.loc(self.tree),
                                   hint=f"pass a tensor for {n}, or declare it in the body: "
                                   f"`{n}: T.Tensor((M, K), dtype)`")
            out.append(self.decl[n])
        returned = self.returned or []
        for o in self.outputs:
            if all(o is not r for r in returned):
                raise CompileError(f"the output {o.name} made by T.empty is never returned", o.loc,
                                   hint=f"return it (`return {o.name}`), or use a T.alloc_* buffer for scratch space")
        out += returned
        dyn = []
        for p in out:
            declared = p.strides if isinstance(p, t.Buffer) and p.attrs.get("explicit_strides") else ()
            for s in tuple(getattr(p, "shape", ())) + tuple(declared):
                for v in sorted(free_vars(s), key=lambda v: v.name) if isinstance(s, E.Expr) else ():
                    if v.kind == "dyn" and all(v is not d for d in dyn):
                        dyn.append(v)
        inputs = out[:len(self.runtime_names)]
        given = {id(v) for p in inputs for d in (getattr(p, "shape", ()) if isinstance(p, t.Buffer) else (p,))
                 if isinstance(d, E.Expr) for v in free_vars(d)}
        for o in returned:
            for s in o.shape:
                for v in sorted(free_vars(s), key=lambda v: v.name) if isinstance(s, E.Expr) else ():
                    if id(v) not in given:
                        raise CompileError(f"the size {v.name} of output {o.name} is not the size of any input "
                                           "tensor", o.loc, hint="use sizes that an input's declaration binds, or "
                                           "scalar parameters")
        return out, dyn


def _dtype_name(dtype) -> str | None:
    """Our name of an argument's dtype (torch's packed ``float4_e2m1fn_x2`` too), None if unknown."""
    text = str(dtype).removeprefix("torch.")
    if text in PACKED_STORAGE:
        return text
    try:
        return dt.canon(dtype)
    except ValueError:
        return None


def _strides_of(value) -> tuple | None:
    """An argument's strides in elements (torch tensors, NumPy arrays), None when it has none (a spec)."""
    stride = getattr(value, "stride", None)
    if callable(stride):
        try:
            return tuple(int(s) for s in stride())
        except (TypeError, ValueError):
            return None
    byte_strides, itemsize = getattr(value, "strides", None), getattr(value, "itemsize", None)
    if isinstance(byte_strides, tuple) and isinstance(itemsize, int) and itemsize:
        return tuple(int(s) // itemsize for s in byte_strides)
    return None


def _same_on_both_sides(cond) -> bool:
    """A comparison ``a == b`` (or ``<=``, ``>=``) of one and the same size expression, or an ``and``
    of such comparisons and true constants."""
    if isinstance(cond, bool) or isinstance(cond, E.Const):
        return bool(cond.value if isinstance(cond, E.Const) else cond)
    if not isinstance(cond, E.BinOp):
        return False
    if cond.op == "and":
        return _same_on_both_sides(cond.a) and _same_on_both_sides(cond.b)
    return cond.op in ("==", "<=", ">=") and isinstance(cond.a, E.Expr) and str(cond.a) == str(cond.b) \
        and _is_size_expr(cond.a)


def _is_size_expr(e) -> bool:
    from ..ir.visitor import walk_expr

    ok = [True]

    def f(x):
        if isinstance(x, E.Load) or (isinstance(x, E.Var) and x.kind != "dyn"):
            ok[0] = False

    walk_expr(e, f)
    return ok[0]


def _run(tr: EagerTranslator, action):
    _active.append(tr)
    try:
        return action()
    finally:
        _active.pop()


def discover_sizes(fn, arguments: dict, sizes: dict) -> dict:
    """The T.const sizes of ``fn`` bound from the arguments' shapes (and the given ``sizes``)."""
    tr = EagerTranslator(fn, arguments, sizes, discovering=True)

    def go():
        tr.params()
        B._active.append(tr.b)
        _active_translators.append(tr)
        try:
            tr.b.loc = tr.loc(tr.tree)
            tr.body(tr.tree.body)
        except _Stop:
            pass
        finally:
            B._active.pop()
            _active_translators.pop()

    _run(tr, go)
    for name, (_, loc) in tr.symbols.items():
        if name not in tr.sizes:
            if tr.skipped:
                raise tr.skipped[0]
            raise CompileError(f"T.const size {name!r} is not bound by any argument", loc,
                               hint=f"use {name} in the T.Tensor declaration of a tensor parameter, pass the tensor, "
                               f"or give it when compiling: .compile({name}=...)")
    return tr.sizes


def read_eager(fn, arguments: dict, sizes: dict) -> tuple:
    """(PrimFunc, EagerInfo) of ``fn`` for these arguments and bound sizes."""
    tr = EagerTranslator(fn, arguments, sizes, discovering=False)
    func = _run(tr, tr.translate)
    canonicalize_reducers(func)
    func.attrs["source_file"] = tr.filename
    func.attrs["source_line"] = tr.line_offset + 1
    n_in = len(tr.runtime_names)
    out_idx = tuple(range(n_in, n_in + len(tr.returned or [])))
    return func, EagerInfo(list(tr.runtime_names), out_idx, dict(tr.sizes))


def read_lazy_prim_func(fn) -> t.PrimFunc:
    """A ``@T.prim_func`` in TileLang's lazy style: parameters without annotations, declared in the
    body (``A: T.Tensor(...)``), outputs made with ``T.empty`` and returned.  It is read as an eager
    function called without arguments; the returned outputs become the last parameters and their
    indices (negative, counted from the end) are ``attrs["tilelang_out_idx"]``, which
    ``tilewright.compile`` takes as ``out_idx``."""
    func, info = read_eager(fn, {}, discover_sizes(fn, {}, {}))
    if info.out_idx:
        n = len([p for p in func.params if not (isinstance(p, t.Buffer) and p.attrs.get("workspace"))])
        func.attrs["tilelang_out_idx"] = [i - n for i in info.out_idx]
    return func


def is_eager_function(fn) -> bool:
    """Whether a ``@jit`` function is written in the eager style (it is the kernel) rather than as a
    builder returning a ``@T.prim_func``: its body, outside nested functions, has ``with T.Kernel``,
    ``T.const("names")`` or ``T.empty``, or a parameter is annotated ``T.Tensor``."""
    if not inspect.isfunction(fn):
        return False
    try:
        _, _, _, tree = _source_of(fn)
    except CompileError:
        return False
    for a in tree.args.posonlyargs + tree.args.args + tree.args.kwonlyargs:
        if a.annotation is not None and _mentions_tensor(a.annotation):
            return True
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, ast.AnnAssign) and node.value is None and _mentions_tensor(node.annotation):
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            attr = node.func.attr
            if attr == "Kernel" or attr == "empty" or (
                    attr == "const" and node.args and isinstance(node.args[0], ast.Constant)
                    and is_size_names(node.args[0].value)):
                return True
        stack.extend(ast.iter_child_nodes(node))
    return False


def _mentions_tensor(node) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr in ("Tensor", "Buffer", "StridedTensor") for n in ast.walk(node))


__all__ = ["NOT_GIVEN", "EagerInfo", "declare_sizes", "discover_sizes", "is_eager_function",
           "is_size_names", "is_tensor_like", "new_output", "read_eager", "read_lazy_prim_func"]
