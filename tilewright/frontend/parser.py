"""Python AST of a ``@T.prim_func`` -> Tile IR ``PrimFunc``.

The body is walked statement by statement.  Each expression is evaluated by Python itself (after a
small AST rewrite of ``and``/``or``/``not``/``x if c else y``/chained comparisons, which Python
cannot overload), in a scope holding the function's globals, its closure values and the kernel
names bound so far; IR objects overload the operators, so ``by * block_M + i`` builds IR while
``block_M // 2`` folds to an int.  Closure constants are thereby folded in, Python ``if`` on a
constant keeps only the taken branch, and ``if`` on a kernel value becomes an ``IfThenElse``.
Every statement records its source location, so errors point at the user's line.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import itertools
import textwrap

from .. import language as T
from ..errors import CompileError, SourceLocation, TilewrightError
from ..ir import expr as E
from ..ir import tile as t
from . import builder as B
from .checks import check_prim_func, mark_written_params
from .dynamic_parallel import dynamic_parallel
from .kernel_sequence import has_no_kernel_block, split_kernels
from .lanes import LaneAccess, has_ramp
from .param_use import mark_param_use
from .pointer_params import replace_pointer_params
from .reducer_epochs import canonicalize_reducers
from .regions import laid_out_index
from .shape_annotations import size_expression
from .widen_fragments import widen_fragments

_MISSING = object()


class Macro:
    """A helper function whose body is inlined, statement by statement, at each call site."""

    def __init__(self, fn):
        self.fn = fn
        self.__name__ = getattr(fn, "__name__", "macro")
        self.__doc__ = fn.__doc__

    def __call__(self, *args, **kwargs):
        tr = _active_translators[-1] if _active_translators else None
        if tr is None:
            raise B.error(f"macro {self.__name__} can only be called inside a @T.prim_func body")
        return tr.inline_macro(self, args, kwargs)


_active_translators: list[Translator] = []


# --------------------------------------------------------------------------------------------
# helpers injected into the evaluation scope


def _tw_and(*vals):
    out = vals[0]
    for v in vals[1:]:
        if isinstance(out, E.Expr) or isinstance(v, E.Expr):
            out = E.binary("and", out, v)
        else:
            out = out and v
    return out


def _tw_or(*vals):
    out = vals[0]
    for v in vals[1:]:
        if isinstance(out, E.Expr) or isinstance(v, E.Expr):
            out = E.binary("or", out, v)
        else:
            out = out or v
    return out


def _tw_not(v):
    return E.unary("not", v) if isinstance(v, E.Expr) else (not v)


def _tw_ifexp(c, a, b):
    if isinstance(c, E.Expr):
        return E.select(c, a, b)
    return a if c else b


def _tw_is_static(c) -> bool:
    """Whether an ``x if c else y`` condition is known while the kernel is read (then only the taken
    branch is evaluated, as in Python: ``x - w if w is not None else 0`` must not touch ``w``)."""
    return not isinstance(c, E.Expr) or isinstance(c, E.Const)


def _tw_truth(c) -> bool:
    return bool(c.value) if isinstance(c, E.Const) else bool(c)


def _tw_min(*args, **kw):
    if len(args) == 1 or kw or not any(isinstance(a, E.Expr) for a in args):
        return builtins.min(*args, **kw)
    return T.min(*args)


def _tw_max(*args, **kw):
    if len(args) == 1 or kw or not any(isinstance(a, E.Expr) for a in args):
        return builtins.max(*args, **kw)
    return T.max(*args)


def _tw_range(*args):
    return T.serial(*args)


def _tw_print(*args, **kwargs):
    """Python's print, run while the kernel is traced (as TileLang runs it); inside a kernel body it
    warns that it printed once, on the CPU, the traced expressions -- not values on the GPU."""
    b = B.current_or_none()
    if b is not None and b.kernel is not None:
        import warnings

        from ..errors import TilewrightWarning

        msg = ("print() inside a kernel body ran once, on the CPU, while the kernel was traced (it printed "
               "expressions, not values), not on the GPU for each thread; to inspect values use T.print, or write "
               "them to an output tensor and print that after the call")
        if b.loc is not None:
            warnings.warn_explicit(msg, TilewrightWarning, b.loc.filename, b.loc.lineno)
        else:
            warnings.warn(msg, TilewrightWarning, stacklevel=2)
    return builtins.print(*args, **kwargs)


class _DeadLoopVar:
    """What a loop variable's name holds after its loop: using it is refused (kernel loops are not
    Python loops, so the name has no last value)."""

    def __init__(self, name: str, loop_line: int):
        self.name = name
        self.loop_line = loop_line


_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Lambda)
_names_of_node: dict = {}


def _load_names(node) -> tuple:
    """(names read by the expression, whether it contains a comprehension or lambda), cached per node."""
    hit = _names_of_node.get(id(node))
    if hit is None or hit[0] is not node:
        names = frozenset(n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load))
        comp = any(isinstance(n, _COMPREHENSIONS) for n in ast.walk(node))
        if comp:  # a lambda's parameters and a comprehension's targets are its own names, not the kernel's
            own = {a.arg for n in ast.walk(node) if isinstance(n, ast.Lambda) for a in ast.walk(n.args)
                   if isinstance(a, ast.arg)}
            own |= {t.id for n in ast.walk(node) if isinstance(n, ast.comprehension) for t in ast.walk(n.target)
                    if isinstance(t, ast.Name)}
            names = names - own
        hit = (node, names, comp)
        _names_of_node[id(node)] = hit
    return hit[1], hit[2]


_HELPERS = {"__tw_and": _tw_and, "__tw_or": _tw_or, "__tw_not": _tw_not, "__tw_ifexp": _tw_ifexp,
            "__tw_is_static": _tw_is_static, "__tw_truth": _tw_truth}


class _Rewriter(ast.NodeTransformer):
    """Rewrites the operators Python cannot overload into helper calls (evaluated eagerly)."""

    def visit_BoolOp(self, node):
        self.generic_visit(node)
        fn = "__tw_and" if isinstance(node.op, ast.And) else "__tw_or"
        return ast.copy_location(ast.Call(ast.Name(fn, ast.Load()), node.values, []), node)

    def visit_UnaryOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, ast.Not):
            return ast.copy_location(ast.Call(ast.Name("__tw_not", ast.Load()), [node.operand], []), node)
        return node

    def __init__(self):
        self.in_comprehension = 0
        self.ifexp_ids = itertools.count()

    def _visit_scope(self, node):
        self.in_comprehension += 1
        try:
            return self.generic_visit(node)
        finally:
            self.in_comprehension -= 1

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = visit_Lambda = _visit_scope

    def visit_IfExp(self, node):
        self.generic_visit(node)
        eager = ast.copy_location(ast.Call(ast.Name("__tw_ifexp", ast.Load()), [node.test, node.body, node.orelse],
                                           []), node)
        if self.in_comprehension:
            return eager  # an assignment expression cannot bind inside a comprehension's scope
        # `c` evaluated once into a fresh name; a condition known now takes Python's lazy branch
        name = f"__tw_ifexp_cond{next(self.ifexp_ids)}"
        test = ast.NamedExpr(ast.Name(name, ast.Store()), node.test)
        lazy = ast.IfExp(ast.Call(ast.Name("__tw_truth", ast.Load()), [ast.Name(name, ast.Load())], []),
                         node.body, node.orelse)
        eager.args = [ast.Name(name, ast.Load()), _clone(node.body), _clone(node.orelse)]
        return ast.copy_location(ast.IfExp(ast.Call(ast.Name("__tw_is_static", ast.Load()), [test], []), lazy, eager),
                                 node)

    def visit_Compare(self, node):
        self.generic_visit(node)
        if len(node.ops) == 1:
            return node
        parts = []
        left = node.left
        for op, right in zip(node.ops, node.comparators):
            parts.append(ast.copy_location(ast.Compare(left, [op], [right]), node))
            left = right
        return ast.copy_location(ast.Call(ast.Name("__tw_and", ast.Load()), parts, []), node)


_code_cache: dict = {}


def _compile_expr(node: ast.AST, filename: str):
    key = (filename, id(node))
    code = _code_cache.get(key)
    if code is None:
        tree = _Rewriter().visit(ast.Expression(body=_clone(node)))
        ast.fix_missing_locations(tree)
        code = compile(tree, filename, "eval")
        _code_cache[key] = code
    return code


def _clone(node):
    import copy

    return copy.deepcopy(node)


# --------------------------------------------------------------------------------------------


class _LoopCtx:
    def __init__(self, depth_names: set):
        self.names = depth_names


class Translator:
    def __init__(self, fn, tree: ast.FunctionDef, filename: str, line_offset: int, lines: list[str], gscope: dict):
        self.fn = fn
        self.tree = tree
        self.filename = filename
        self.line_offset = line_offset
        self.lines = lines
        self.gscope = gscope
        self.scope: dict = {}
        self.b = B.Builder()
        # names bound to kernel values, with the loop depth at which they were bound
        self.bind_depth: dict[str, int] = {}
        self.loop_depth = 0
        self.var_counter = itertools.count()
        self.dead_loop_vars = 0  # how many _DeadLoopVar markers were placed (none: skip the check)

    # ---------------------------------------------------------------- locations / errors
    def loc(self, node) -> SourceLocation:
        lineno = getattr(node, "lineno", 1)
        col = getattr(node, "col_offset", 0)
        text = self.lines[lineno - 1] if 0 < lineno <= len(self.lines) else ""
        return SourceLocation(self.filename, lineno + self.line_offset, col, text, self.tree.name)

    # ---------------------------------------------------------------- evaluation
    def eval(self, node):
        try:
            code = _compile_expr(node, self.filename)
        except (SyntaxError, ValueError, TypeError) as e:  # our AST rewrite produced something invalid
            from ..errors import InternalError

            raise InternalError(f"could not compile the expression {ast.unparse(node)!r}: {e}", "frontend",
                                self.loc(node)) from e
        names, has_comprehension = _load_names(node)
        if self.dead_loop_vars:
            for n in names:
                dead = self.scope.get(n)
                if isinstance(dead, _DeadLoopVar):
                    raise CompileError(f"loop variable {n!r} is used after its loop (line {dead.loop_line}) ended",
                                       self.loc(node), hint="a kernel loop variable exists only inside its loop; "
                                       "to keep a value for later, store it in a T.alloc_var inside the loop")
        try:
            if has_comprehension:
                # a comprehension or lambda runs while the kernel is traced, as in TileLang, and sees the
                # kernel's names through its globals: up to Python 3.11 it has a scope of its own that sees
                # only globals, from 3.12 a comprehension is inlined -- one program means the same on both
                return eval(code, {**self.gscope, **self.scope}, self.scope)
            return eval(code, self.gscope, self.scope)
        except CompileError as e:
            if has_comprehension and "kernel loops can only be used" in str(e):
                raise CompileError("a comprehension or generator expression inside a kernel cannot iterate over "
                                   "range() / T.serial: in kernel code those are kernel loops", self.loc(node),
                                   hint="write the loop out (`for j in T.unroll(n):`), or iterate over a tuple of "
                                   "compile-time values") from None
            raise e.with_loc(self.loc(node)) from None
        except TilewrightError:
            raise
        except NameError as e:
            missing = getattr(e, "name", None)
            if missing in self.scope:  # defined here, yet unseen: the code runs in a nested Python scope
                raise CompileError(
                    f"a comprehension or lambda inside a kernel cannot use the kernel name {missing!r}: Python "
                    "evaluates it in a scope of its own, which sees only globals and closure variables",
                    self.loc(node), hint="write the loop out (T.Parallel, T.serial or T.unroll), or build the list "
                    "outside the prim_func from compile-time values") from None
            raise CompileError(f"{e}", self.loc(node),
                               hint="kernel code may use the function's parameters, closure variables, "
                               "globals and names assigned earlier in the body") from None
        except AttributeError as e:
            hint = None
            if getattr(e, "obj", None) is T:
                hint = (f"T.{e.name} is not part of tilewright's language; docs/language.md lists what is "
                        "(check the spelling)")
            raise CompileError(f"AttributeError: {e}", self.loc(node), hint=hint) from None
        except Exception as e:  # noqa: BLE001 - report any Python error in the user's expression at its line
            raise CompileError(f"{type(e).__name__}: {e}", self.loc(node),
                               hint="kernel expressions are evaluated once, by Python, while the kernel is traced: "
                               "check the operands (a tensor is used through elements, A[i, j], or T.* tile "
                               "operations)") from None

    # ---------------------------------------------------------------- entry
    def translate(self) -> t.PrimFunc:
        # a body of plain statements (no `with` anywhere in it, and no kernel from a macro either) runs
        # once, as one thread: read again inside an implicit `T.Kernel(1, threads=1)`
        plain = type(self) is Translator and has_no_kernel_block(self.tree)
        try:
            params, dyn_vars, stmts = self.read_body(implicit_kernel=False)
        except CompileError:
            if not plain:
                raise
            stmts = []
        if plain and not any(isinstance(s, t.Kernel) for s in stmts):
            self.__init__(self.fn, self.tree, self.filename, self.line_offset, self.lines, self.gscope)
            params, dyn_vars, stmts = self.read_body(implicit_kernel=True)
        kernels = [s for s in stmts if isinstance(s, t.Kernel)]
        if not kernels:
            raise CompileError(f"prim_func {self.tree.name} has no `with T.Kernel(...)` block", self.loc(self.tree),
                               hint="wrap the kernel body in `with T.Kernel(grid..., threads=128) as (bx, by):`")
        others = [s for s in stmts if not isinstance(s, (t.Kernel, t.LetStmt))]
        if others:
            raise CompileError("statements outside `with T.Kernel(...)` are not supported", others[0].loc,
                               hint="move them inside the kernel block")
        body = t.SeqStmt(stmts) if len(stmts) > 1 else stmts[0]
        params, dyn_vars = self.finish_params(params, dyn_vars)
        params, dyn_vars = replace_pointer_params(self.b, params, dyn_vars)  # T.make_tensor(a_ptr, ...)
        params = params + self.b.__dict__.get("workspaces", [])  # T.alloc_global: hidden, allocated per call
        func = t.PrimFunc(self.tree.name, params, body, dyn_vars, loc=self.loc(self.tree))
        func.attrs.update(self.b.__dict__.get("func_attrs", {}))  # T.annotate_pass_configs... (language)
        if self.b.__dict__.get("host_assumes"):  # T.assume on sizes: checked by every call (jit/kernel.py)
            func.attrs["host_assumes"] = list(self.b.host_assumes)
        if len(kernels) > 1:  # launched one after another, in order (frontend/kernel_sequence.py)
            func.attrs["kernel_parts"] = split_kernels(func, stmts)
        return func

    def read_body(self, implicit_kernel: bool):
        """(parameters, symbolic sizes, top-level statements) of the function."""
        params, dyn_vars = self.params()
        B._active.append(self.b)
        _active_translators.append(self)
        try:
            self.b.loc = self.loc(self.tree)
            if implicit_kernel:
                self.enter_kernel(T.Kernel(1, threads=1), [], self.tree.body, self.tree)
            else:
                self.body(self.tree.body)
            return params, dyn_vars, self.b.pop()
        finally:
            B._active.pop()
            _active_translators.pop()

    def finish_params(self, params, dyn_vars):
        """Hook: the final parameter list (the eager-JIT reader adds tensors declared in the body)."""
        return params, dyn_vars

    def params(self):
        params, dyn = [], []
        args = self.tree.args
        if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs:
            raise CompileError("prim_func parameters must be plain positional parameters", self.loc(self.tree),
                               hint="drop *args, **kwargs, keyword-only and positional-only markers; pass compile-time "
                               "values through a closure (a function that returns the prim_func)")
        for a in args.args:
            if a.annotation is None:
                raise CompileError(f"parameter {a.arg!r} needs an annotation such as T.Tensor((M, K), 'float16') "
                                   "or T.int32", self.loc(a), hint=f"write `{a.arg}: T.Tensor(shape, dtype)` for a "
                                   f"tensor or `{a.arg}: T.int32` / `T.float32` for a scalar")
            ann = self.eval(a.annotation)
            if isinstance(ann, T.Tensor):
                shape = []
                for s in ann.shape:
                    if isinstance(s, E.Var):
                        if s.kind != "dyn":
                            s.kind = "dyn"
                        if all(s is not d for d in dyn):
                            dyn.append(s)
                        shape.append(s)
                    elif isinstance(s, int) and not isinstance(s, bool) and s >= 0:
                        shape.append(s)  # 0: an empty tensor (its loops run no iteration, as in TileLang)
                    elif isinstance(s, E.Expr):  # n * 4: bound or checked at the call (binding.shape_exprs)
                        shape.append(size_expression(s, f"shape entry {s} of {a.arg!r}", dyn, self.loc(a)))
                    else:
                        raise CompileError(f"shape entry {s!r} of {a.arg!r} must be a non-negative int or T.dynamic",
                                           self.loc(a), hint="use an int, or M = T.dynamic('M') for a size known only "
                                           "at the call")
                for s in ann.strides or ():  # a symbolic stride is bound from the argument like a size
                    if isinstance(s, E.Var):
                        s.kind = "dyn"
                        if all(s is not d for d in dyn):
                            dyn.append(s)
                buf = t.Buffer(a.arg, shape, ann.dtype, "global", strides=ann.strides, loc=self.loc(a))
                if ann.strides is not None:
                    buf.attrs["explicit_strides"] = True
                params.append(buf)
                self.scope[a.arg] = buf
            elif isinstance(ann, str):
                from ..ir import dtype as dt

                try:
                    d = dt.canon(ann)
                except ValueError as e:
                    raise CompileError(str(e), self.loc(a)) from None
                v = E.Var(a.arg, d, kind="param")
                params.append(v)
                self.scope[a.arg] = v
            else:
                raise CompileError(f"cannot read the annotation of parameter {a.arg!r} ({ann!r})", self.loc(a),
                                   hint="use T.Tensor(shape, dtype) / T.Buffer(...) or a scalar dtype like T.int32")
        return params, dyn

    # ---------------------------------------------------------------- statements
    def body(self, stmts) -> None:
        for s in stmts:
            self.b.loc = self.loc(s)
            try:
                self.stmt(s)
            except CompileError as e:
                raise e.with_loc(self.loc(s)) from None

    def block(self, stmts):
        self.b.push()
        saved = dict(self.scope)
        try:
            self.body(stmts)
        finally:
            # names bound inside a nested block stay visible (Python semantics) unless they are
            # kernel values tied to that block's loop variables; keep it simple and restore
            # only loop-variable names
            for k in list(self.scope):
                if k not in saved and isinstance(self.scope[k], E.Var) and self.scope[k].kind in ("loop", "sloop"):
                    del self.scope[k]
        out = self.b.pop()
        return t.SeqStmt(out) if len(out) != 1 else out[0]

    def stmt(self, s) -> None:
        if isinstance(s, ast.Expr):
            if isinstance(s.value, ast.Constant) and isinstance(s.value.value, str):
                return  # docstring
            self.eval(s.value)
        elif isinstance(s, ast.Assign):
            value = self.eval(s.value)
            for target in s.targets:
                self.assign(target, value, s)
        elif isinstance(s, ast.AnnAssign):
            if s.value is None and self.declare(s):
                return
            if s.value is None:
                raise CompileError("annotated declarations without a value are not supported", self.loc(s),
                                   hint="give it a value (x: T.float32 = 0), or use T.alloc_var(dtype, init)")
            value = self.eval(s.value)
            ann = self.eval(s.annotation)
            if isinstance(ann, str) and isinstance(value, (int, float, E.Expr)):
                value = E.cast(str(ann), value)
            self.assign(s.target, value, s)
        elif isinstance(s, ast.AugAssign):
            self.aug_assign(s)
        elif isinstance(s, ast.For):
            self.for_stmt(s)
        elif isinstance(s, ast.If):
            cond = self.eval(s.test)
            if isinstance(cond, E.Expr) and not isinstance(cond, E.Const):
                then_b = self.block(s.body)
                else_b = self.block(s.orelse) if s.orelse else None
                self.b.emit(t.IfThenElse(_as_bool(cond), then_b, else_b, loc=self.loc(s)))
            else:
                c = cond.value if isinstance(cond, E.Const) else cond
                self.body(s.body if c else s.orelse)
        elif isinstance(s, ast.With):
            self.with_stmt(s)
        elif isinstance(s, ast.Pass):
            pass
        elif isinstance(s, ast.Return):
            if s.value is not None and self.return_stmt(s):
                return
            if s.value is not None:
                raise CompileError("a prim_func returns nothing; outputs are written to its tensor parameters",
                                   self.loc(s), hint="use out_idx=... in tilewright.compile to get outputs back")
        elif isinstance(s, ast.Assert):
            cond = self.eval(s.test)
            if isinstance(cond, E.Expr):
                raise CompileError("assert on a kernel value is not supported; assert on compile-time values only",
                                   self.loc(s), hint="check the condition on the host before the call, or guard the "
                                   "code with an `if`")
            if not cond:
                msg = self.eval(s.msg) if s.msg is not None else "assertion failed"
                raise CompileError(f"assertion failed: {msg}", self.loc(s))
        elif isinstance(s, (ast.Break, ast.Continue)):
            raise CompileError(f"`{type(s).__name__.lower()}` is not supported in kernel loops", self.loc(s),
                               hint="guard the loop body with an `if` instead")
        elif isinstance(s, ast.While):
            raise CompileError("`while` loops are not supported in kernels", self.loc(s),
                               hint="use `for k in T.serial(n):` with a guard")
        elif isinstance(s, (ast.FunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)):
            raise CompileError(f"{type(s).__name__} is not allowed inside a prim_func body", self.loc(s),
                               hint="define helpers outside the kernel (use @T.macro for inlined helpers)")
        else:
            raise CompileError(f"unsupported statement ({type(s).__name__}) in a prim_func", self.loc(s),
                               hint="kernel code is assignments, `for` over T.Parallel/T.serial/T.Pipelined/T.unroll, "
                               "`if`, `with T.Kernel(...)` and calls of T.* functions")

    def declare(self, s) -> bool:
        """Hook: ``name: annotation`` without a value; True when handled (the eager-JIT reader
        declares its tensor parameters this way)."""
        return False

    def return_stmt(self, s) -> bool:
        """Hook: ``return value``; True when handled (the eager-JIT reader's outputs)."""
        return False

    # ---------------------------------------------------------------- assignment
    def assign(self, target, value, node) -> None:
        if isinstance(target, ast.Name):
            name = target.id
            old = self.scope.get(name, _MISSING)
            if isinstance(old, _DeadLoopVar):
                old = _MISSING
            if isinstance(old, E.Load) and old.buffer.scope == "var" and not isinstance(value, t.Buffer):
                # a T.alloc_var name reads as its value and assigning to it stores
                self.b.emit(t.BufferStore(old.buffer, (E.as_expr(0),), E.cast(old.dtype, value), loc=self.loc(node)))
                return
            if isinstance(value, t.Buffer) and value.attrs.pop("auto_name", False):
                value.name = self.b.fresh(name)  # name on-chip buffers after the user's variable
            if isinstance(value, t.Buffer) and value.scope == "var":
                self.scope[name] = E.Load(value, (E.as_expr(0),))
                self.bind_depth[name] = self.loop_depth
                return
            if isinstance(value, E.Expr) and not isinstance(value, (E.Const,)) and not _is_pure_index(value):
                if old is not _MISSING and self.bind_depth.get(name, 0) < self.loop_depth:
                    raise CompileError(
                        f"{name!r} was bound outside this loop and is re-assigned inside it; a kernel loop body is "
                        "translated once, so the new value would not carry to the next iteration",
                        self.loc(node), hint=f"declare it with {name} = T.alloc_var(dtype, init) to get a mutable "
                        "per-thread variable")
                v = E.Var(self.b.fresh(name), value.dtype, kind="let")
                self.b.emit(t.LetStmt(v, T._guard_reads(value), loc=self.loc(node)))
                self.scope[name] = v
                self.bind_depth[name] = self.loop_depth
                return
            if isinstance(value, E.Expr) and old is not _MISSING and self.bind_depth.get(name, 0) < self.loop_depth \
                    and isinstance(old, E.Expr):
                raise CompileError(
                    f"{name!r} is re-assigned inside a loop; its new value would not carry to the next iteration",
                    self.loc(node), hint=f"use {name} = T.alloc_var(dtype, init)")
            self.scope[name] = value
            self.bind_depth[name] = self.loop_depth
        elif isinstance(target, (ast.Tuple, ast.List)):
            if isinstance(value, E.Expr) or not hasattr(value, "__iter__"):
                raise CompileError("cannot unpack a kernel value into several names", self.loc(node),
                                   hint="assign each element separately, e.g. a = A[0] and b = A[1]")
            vals = list(value)
            if len(vals) != len(target.elts):
                raise CompileError(f"cannot unpack {len(vals)} values into {len(target.elts)} names", self.loc(node))
            for tg, v in zip(target.elts, vals):
                self.assign(tg, v, node)
        elif isinstance(target, ast.Subscript):
            buf = self.eval(target.value)
            idx = self.eval(target.slice)
            self.store(buf, idx, value, node)
        elif isinstance(target, ast.Attribute):
            raise CompileError("assigning to attributes is not supported in a prim_func", self.loc(node),
                               hint="store into a buffer element (buf[i] = ...) or bind a plain name")
        else:
            raise CompileError(f"unsupported assignment target {ast.unparse(target)}", self.loc(node))

    def store(self, buf, idx, value, node) -> None:
        if hasattr(buf, "store_element"):  # a T.reshape / T.view of a buffer (language/views.py)
            self.b.emit(buf.store_element(idx, value, self.loc(node)))
            return
        if not isinstance(buf, t.Buffer):
            raise CompileError(f"cannot assign into {buf!r}; only buffers can be indexed for stores", self.loc(node),
                               hint="store into a buffer from T.alloc_fragment / T.alloc_shared / T.alloc_local")
        if not isinstance(idx, tuple):
            idx = (idx,)
        if has_ramp(idx) and not hasattr(value, "store_elements"):  # buf[T.Ramp(...)] = scalar (frontend/lanes.py)
            for st in LaneAccess(buf, idx).stores(value, self.loc(node)):
                self.b.emit(st)
            return
        if "layout_map" in buf.attrs:  # a shared buffer with an annotated T.Layout: the physical element
            idx = laid_out_index(buf, idx)
        if hasattr(value, "store_elements"):  # several values at once (T.atomic_addx2(..., return_prev=True))
            for st in value.store_elements(buf, idx, self.loc(node)):
                self.b.emit(st)
            return
        if any(isinstance(i, slice) for i in idx):
            raise CompileError(f"slice assignment to {buf.name} is not supported",
                               self.loc(node), hint="use T.copy(src, dst[...]) or T.fill(dst[...], value) "
                               "for whole tiles, or a T.Parallel loop")
        if buf.scope == "var" and len(idx) == 1:
            pass
        elif len(idx) != buf.ndim:
            raise CompileError(f"{buf.name} has {buf.ndim} dimension(s) but the store gives {len(idx)} indices",
                               self.loc(node), hint=f"index every dimension of {buf.name}: shape {buf.shape}")
        if isinstance(value, (t.Buffer, t.Region)):
            raise CompileError(f"cannot store a whole tile into an element of {buf.name}", self.loc(node),
                               hint="use T.copy for tiles")
        try:
            v = E.cast(buf.dtype, value)
        except CompileError as e:
            raise e.with_loc(self.loc(node)) from None
        idx = tuple(E.as_expr(i) for i in idx)
        # reads of T.annotate_safe_value tensors out of bounds give their safe value (language/safe_value.py)
        self.b.emit(T._guarded_store(v, lambda x: t.BufferStore(buf, idx, x, loc=self.loc(node)), self.loc(node)))

    def aug_assign(self, s) -> None:
        op = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
              ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^", ast.LShift: "<<", ast.RShift: ">>",
              ast.Pow: "pow"}.get(type(s.op))
        if op is None:
            raise CompileError(f"unsupported augmented assignment {type(s.op).__name__}", self.loc(s))
        rhs = self.eval(s.value)
        if isinstance(s.target, ast.Subscript):
            buf = self.eval(s.target.value)
            idx = self.eval(s.target.slice)
            if not isinstance(buf, t.Buffer):
                raise CompileError(f"cannot update {ast.unparse(s.target.value)}; it is not a buffer", self.loc(s))
            cur = buf[idx] if buf.scope != "var" or isinstance(idx, tuple) else E.Load(buf, (E.as_expr(idx),))
            self.store(buf, idx, E.binary(op, cur, rhs), s)
        elif isinstance(s.target, ast.Name):
            cur = self.eval(ast.copy_location(ast.Name(s.target.id, ast.Load()), s.target))
            self.assign(s.target, E.binary(op, cur, rhs) if isinstance(cur, E.Expr) or isinstance(rhs, E.Expr)
                        else E._fold_py(op, cur, rhs), s)
        else:
            raise CompileError("unsupported augmented assignment target", self.loc(s))

    # ---------------------------------------------------------------- loops
    def for_stmt(self, s) -> None:
        if s.orelse:
            raise CompileError("for ... else is not supported", self.loc(s),
                               hint="move the else part after the loop")
        it = self.eval(s.iter)
        names = _target_names(s.target)
        if names is None:
            raise CompileError("loop targets must be names", self.loc(s),
                               hint="bind plain names: `for i, j in T.Parallel(M, N):`")
        if isinstance(it, T.Parallel):
            if len(names) != len(it.extents):
                raise CompileError(f"T.Parallel has {len(it.extents)} extents but the loop binds {len(names)} names",
                                   self.loc(s), hint="bind one name per extent: `for i, j in T.Parallel(M, N):`")
            if it.is_dynamic:
                return dynamic_parallel(self, names, it, s)
            vs = tuple(E.Var(self.b.fresh(n), "int32", kind="loop") for n in names)
            self.b.parallel_depth += 1
            try:
                self.run_loop_body(names, vs, s, lambda body: t.ParallelFor(vs, it.extents, body, loc=self.loc(s),
                                                                          coalesced_width=it.coalesced_width))
            finally:
                self.b.parallel_depth -= 1
        elif isinstance(it, T.Persistent):
            self.persistent_loop(names, it, s)
        elif isinstance(it, T._LoopSpec):
            if len(names) != 1:
                raise CompileError("a serial/pipelined loop binds one name", self.loc(s),
                                   hint="use `for k in T.serial(n):`; for several indices nest loops or use T.Parallel")
            start, stop = E.as_expr(it.start), E.as_expr(it.stop)
            extent = stop - start
            from ..ir.analysis import is_nonnegative

            # a loop starting below zero makes its variable signed (floor division must then be exact)
            v = E.Var(self.b.fresh(names[0]), "int32", kind="loop" if is_nonnegative(start) else "sloop")
            if it.kind == "pipelined" and it.num_stages < 0:
                raise CompileError("num_stages must be >= 0", self.loc(s),
                                   hint="use num_stages=2 or 3 (0: no pipelining)")
            attrs = {"vectorized": True} if it.vectorized else {}
            self.run_loop_body(names, (v,), s, lambda body: t.For(v, start, extent, body, it.kind, it.num_stages,
                                                                   loc=self.loc(s), attrs=attrs))
        elif isinstance(it, (list, tuple)) or (hasattr(it, "__iter__") and not isinstance(it, (E.Expr, t.Buffer))):
            for x in it:  # a Python-level loop over compile-time values: unrolled here
                self.assign(s.target, x, s)
                self.body(s.body)
        else:
            raise CompileError(f"cannot loop over {it!r}", self.loc(s),
                               hint="use T.Parallel, T.Pipelined, T.serial, T.unroll or range")

    def persistent_loop(self, names, it, s) -> None:
        """``for i, j in T.Persistent(domain, wave_size, index):``: a serial loop over waves; in wave ``w``
        the block visits tile ``w * wave_size + index`` of the row-major domain when it exists."""
        if len(names) != len(it.domain):
            raise CompileError(f"T.Persistent has a {len(it.domain)}-dimensional domain but the loop binds "
                               f"{len(names)} names", self.loc(s), hint="bind one name per domain dimension")
        total = 1
        for d in it.domain:
            total = total * d
        w = E.Var(self.b.fresh("wave"), "int32", kind="loop")
        tile = w * it.wave_size + it.index
        coords, rest = [], tile
        for d in reversed(it.domain):
            coords.append(rest % d)
            rest = rest // d
        for n, c in zip(names, reversed(coords)):
            self.scope[n] = c
            self.bind_depth[n] = self.loop_depth + 1
        self.loop_depth += 1
        try:
            body = self.block(s.body)
        finally:
            self.loop_depth -= 1
        guarded = t.IfThenElse(_as_bool(E.as_expr(tile < total)), body, None, loc=self.loc(s))
        waves = T.ceildiv(total, it.wave_size)
        self.b.emit(t.For(w, E.as_expr(0), E.as_expr(waves), guarded, "serial", 0, loc=self.loc(s)))
        for n in names:
            self.scope[n] = _DeadLoopVar(n, self.loc(s).lineno)
            self.dead_loop_vars += 1

    def run_loop_body(self, names, vs, s, make) -> None:
        for n, v in zip(names, vs):
            self.scope[n] = v
            self.bind_depth[n] = self.loop_depth + 1
        self.loop_depth += 1
        try:
            body = self.block(s.body)
        finally:
            self.loop_depth -= 1
        self.b.emit(make(body))
        for n in names:
            self.scope[n] = _DeadLoopVar(n, self.loc(s).lineno)
            self.dead_loop_vars += 1

    # ---------------------------------------------------------------- kernel
    def with_stmt(self, s) -> None:
        if len(s.items) != 1:
            raise CompileError("only `with T.Kernel(...) as (...)` is supported", self.loc(s),
                               hint="use a single `with T.Kernel(grid..., threads=128) as (bx, by):`")
        item = s.items[0]
        spec = self.eval(item.context_expr)
        if isinstance(spec, T.ws):
            return self.ws_region(spec, s)
        if isinstance(spec, T.attr):
            return self.attr_scope(spec, s)
        if not isinstance(spec, T.Kernel):
            raise CompileError("only `with T.Kernel(...) as (...)` is supported", self.loc(s),
                               hint="use a single `with T.Kernel(grid..., threads=128) as (bx, by):`")
        if self.b.kernel is not None:
            raise CompileError("nested T.Kernel blocks are not supported", self.loc(s),
                               hint="one T.Kernel per prim_func; put the inner code directly in the outer kernel")
        if self.loop_depth or len(self.b.blocks) > 1:
            raise CompileError("`with T.Kernel(...)` must be at the top level of the prim_func body, not inside a "
                               "loop or an `if`", self.loc(s),
                               hint="launch one kernel with a larger grid (use the block index where you used the "
                               "loop variable), or put the loop inside the kernel")
        names = _target_names(item.optional_vars) if item.optional_vars is not None else []
        if names is None:
            raise CompileError("T.Kernel binds block indices to names: `as (bx, by)`", self.loc(s),
                               hint="write `as bx` for one grid dimension, `as (bx, by)` for two")
        self.enter_kernel(spec, names, s.body, s)

    def enter_kernel(self, spec, names, stmts, s) -> None:
        """The block of a ``T.Kernel`` launch: block indices bound to ``names``, ``stmts`` its body."""
        dims = ("bx", "by", "bz")
        if len(names) > len(spec.grid):
            raise CompileError(f"T.Kernel has {len(spec.grid)} grid dimension(s) but binds {len(names)} names",
                               self.loc(s), hint="bind one name per grid dimension")
        if names and len(names) < len(spec.grid):
            want = ", ".join(dims[:len(spec.grid)])
            raise CompileError(f"T.Kernel has {len(spec.grid)} grid dimensions but binds only {len(names)} name(s) "
                               f"({', '.join(names)}): the blocks along the other dimension(s) could not tell "
                               "themselves apart", self.loc(s), hint=f"bind one name per grid dimension: "
                               f"`as ({want}):`")
        bvars = tuple(E.Var(names[i] if i < len(names) else dims[i], "int32", kind="block")
                      for i in range(len(spec.grid)))
        for n, v in zip(names, bvars):
            self.scope[n] = v
        tx = E.Var("tx", "int32", kind="thread")
        kernel = t.Kernel(spec.grid, spec.threads, bvars, None, loc=self.loc(s))
        self.b.kernel = kernel
        self.b.thread_var = tx
        try:
            kernel.body = self.block(stmts)
        finally:
            self.b.kernel = None
        kernel.attrs["thread_var"] = tx
        if tuple(getattr(spec, "cluster_dims", (1, 1, 1))) != (1, 1, 1):
            kernel.attrs["cluster_dims"] = tuple(spec.cluster_dims)  # thread-block clusters: check_clusters.py
        self.b.emit(kernel)

    def attr_scope(self, spec, s) -> None:
        """``with T.attr(node, key, value):`` (language/attrs.py): a reducer scope, or a code-generation
        hint without effect; the body is read in place."""
        if spec.key.startswith("pragma_"):
            T._no_effect(f"T.attr(..., {spec.key!r}, ...)", "code-generation pragmas are not applied",
                         "remove the attribute scope (keep its body)")
            self.body(s.body)
            return
        stack = self.b.__dict__.setdefault("reduce_scopes", [])
        stack.append(spec.node)
        try:
            self.body(s.body)
        finally:
            stack.pop()

    def ws_region(self, spec, s) -> None:
        """``with T.ws(i):``: a ``ThreadPartition`` over warpgroup(s) ``i``."""
        k = self.b.kernel
        if k is None:
            raise CompileError("`with T.ws(...)` must be inside `with T.Kernel(...)`", self.loc(s))
        if spec.base + spec.count > k.num_threads:
            raise CompileError(f"T.ws{spec.ids} names threads {spec.base}..{spec.base + spec.count - 1} but the "
                               f"kernel has {k.num_threads} threads", self.loc(s),
                               hint="launch 128 threads per warpgroup: T.Kernel(..., threads=128 * groups)")
        part = t.ThreadPartition(spec.base, spec.count, f"warpgroup {','.join(map(str, spec.ids))}", None,
                                 loc=self.loc(s))
        part.body = self.block(s.body)
        self.b.emit(part)

    # ---------------------------------------------------------------- macros
    def inline_macro(self, macro: Macro, args, kwargs):
        src_lines, first = inspect.getsourcelines(macro.fn)
        tree = ast.parse(textwrap.dedent("".join(src_lines)))
        fdef = next(n for n in tree.body if isinstance(n, ast.FunctionDef))
        sig = inspect.signature(macro.fn)
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        saved_scope, saved_g = self.scope, self.gscope
        saved_lines, saved_off, saved_file = self.lines, self.line_offset, self.filename
        self.gscope = _global_scope(macro.fn)
        self.scope = dict(bound.arguments)
        self.lines = textwrap.dedent("".join(src_lines)).splitlines()
        self.line_offset = first - 1
        self.filename = inspect.getsourcefile(macro.fn) or "<macro>"
        result = None
        try:
            for st in fdef.body:
                if isinstance(st, ast.Return):
                    result = self.eval(st.value) if st.value is not None else None
                    break
                self.b.loc = self.loc(st)
                self.stmt(st)
        finally:
            self.scope, self.gscope = saved_scope, saved_g
            self.lines, self.line_offset, self.filename = saved_lines, saved_off, saved_file
        return result


def _as_bool(c):
    return c if c.dtype == "bool" else E.binary("!=", c, 0)


def _is_pure_index(e) -> bool:
    """Expressions of loop/block/thread variables and constants only (no loads) may be inlined."""
    from ..ir.visitor import walk_expr

    ok = [True]

    def f(x):
        if isinstance(x, E.Load) or (isinstance(x, E.Var) and x.kind in ("let",)):
            ok[0] = False

    walk_expr(e, f)
    return ok[0]


def _target_names(target):
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)) and all(isinstance(x, ast.Name) for x in target.elts):
        return [x.id for x in target.elts]
    return None


def _global_scope(fn, outer_scope: dict | None = None) -> dict:
    """Name resolution for kernel code: module globals, then the defining function's locals, then
    the closure cells, then our helpers."""
    g = dict(fn.__globals__)
    if outer_scope:
        g.update(outer_scope)
    code = fn.__code__
    if fn.__closure__:
        for name, cell in zip(code.co_freevars, fn.__closure__):
            try:
                g[name] = cell.cell_contents
            except ValueError:
                pass
    g.update(_HELPERS)
    g["min"] = _tw_min
    g["max"] = _tw_max
    g["range"] = _tw_range
    g["print"] = _tw_print
    return g


_parse_cache: dict = {}


def parse_prim_func(fn, outer_scope: dict | None = None) -> t.PrimFunc:
    if isinstance(fn, t.PrimFunc):
        return fn
    if not callable(fn):
        raise CompileError(f"@T.prim_func expects a function, got {fn!r}")
    src = _source_of(fn)
    filename, first, text, tree = src
    memo_key = _memo_key(fn, tree, outer_scope)
    if memo_key is not None:
        hit = _func_memo.get(memo_key)
        if hit is not None:
            return hit
    if any(a.annotation is None for a in tree.args.args):  # TileLang's lazy style: declared in the body
        from .eager import read_lazy_prim_func

        func = read_lazy_prim_func(fn)
    else:
        tr = Translator(fn, tree, filename, first - 1, text.splitlines(), _global_scope(fn, outer_scope))
        func = tr.translate()
    canonicalize_reducers(func)
    widen_fragments(func)  # fragments T.Parallel loops index past their shape (frontend/widen_fragments.py)
    func.attrs["source_file"] = filename
    func.attrs["source_line"] = first
    from ..ir.verifier import verify
    from .partitions import form_partitions

    parts = func.attrs.get("kernel_parts")
    for f in parts or [func]:
        verify(form_partitions(f))
        f.attrs["_verified"] = True
        check_prim_func(f)
    if parts:  # the parts share the parameters: what any part writes or uses counts
        mark_written_params(func)
    mark_param_use(func)  # a tensor the kernel never touches may be passed as None
    if memo_key is not None:
        _func_memo[memo_key] = func
    return func


_source_cache: dict = {}


def _source_of(fn):
    """(filename, first line, dedented text, FunctionDef) of a function, cached per code object."""
    hit = _source_cache.get(fn.__code__)
    if hit is not None:
        return hit
    try:
        src_lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError) as e:
        raise CompileError(f"cannot read the source of {getattr(fn, '__name__', fn)}: {e}",
                           hint="kernels must be defined in a file (or a notebook cell), not built with exec") from None
    filename = inspect.getsourcefile(fn) or "<unknown>"
    text = textwrap.dedent("".join(src_lines))
    module = ast.parse(text)
    tree = next((n for n in module.body if isinstance(n, ast.FunctionDef)), None)
    if tree is None:
        raise CompileError(f"cannot find the def of {fn.__name__}")
    out = (filename, first, text, tree)
    _source_cache[fn.__code__] = out
    return out


_func_memo: dict = {}
_names_cache: dict = {}


def _memo_key(fn, tree, outer_scope):
    """A key for re-reading the same function with the same compile-time values: its code and the
    values of every name it mentions.  None when a value is not hashable (then nothing is memoized).
    Prim funcs are treated as immutable after construction, so sharing one object is safe."""
    names = _names_cache.get(id(tree))
    if names is None:
        names = tuple(sorted({n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}))
        _names_cache[id(tree)] = names
    cells = {}
    if fn.__closure__:
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__):
            try:
                cells[name] = cell.cell_contents
            except ValueError:
                pass
    g = fn.__globals__
    outer = outer_scope or {}
    vals = []
    for n in names:
        if n in cells:
            v = cells[n]
        elif n in outer:
            v = outer[n]
        else:
            v = g.get(n, _MISSING)
        if v is _MISSING or isinstance(v, (int, float, str, bool, type(None))):
            vals.append((n, type(v).__name__, v if v is not _MISSING else None))
        elif isinstance(v, E.Var):
            vals.append((n, "var", id(v)))
        elif isinstance(v, tuple) and all(isinstance(x, (int, float, str, bool)) for x in v):
            vals.append((n, "tuple", v))
        elif callable(v) or type(v).__name__ == "module":
            # the object itself (hashed by identity), not its id: a function that dies (a layout lambda)
            # would leave its id to the next one, and the memo would hand back the wrong prim func
            vals.append((n, "obj", v))
        else:
            return None
    try:
        key = (fn.__code__, tuple(vals))
        hash(key)
    except TypeError:
        return None
    return key
