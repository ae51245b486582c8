"""Text form of the IR.

The Tile IR prints as a tilewright ``T.prim_func`` in Python syntax, which the frontend reads back
(``tests/test_ir.py`` round-trips it), so a dumped IR file is also a runnable kernel.  Thread IR
statements print in a compact pseudo-C form used by dumps and error messages.
"""

from __future__ import annotations

from .expr import BinOp, Call, Cast, Const, Expr, Load, Select, Shuffle, UnOp, Var

_PREC = {"or": 1, "and": 2, "not": 3, "<": 4, "<=": 4, ">": 4, ">=": 4, "==": 4, "!=": 4, "|": 5, "^": 6,
         "&": 7, "<<": 8, ">>": 8, "+": 9, "-": 9, "*": 10, "/": 10, "//": 10, "%": 10, "neg": 11, "bitnot": 11}


def expr_str(e, prec: int = 0) -> str:
    if not isinstance(e, Expr):
        return repr(e)
    if isinstance(e, Var):
        return e.name
    if isinstance(e, Const):
        if e.dtype == "bool":
            return "True" if e.value else "False"
        if e.dtype in ("int32",):
            return str(e.value)
        if e.dtype == "float32":
            v = e.value
            if v != v or v in (float("inf"), float("-inf")):
                return f"T.float32({str(v)!r})"
            return repr(float(v))
        return f"T.{e.dtype}({e.value!r})"
    if isinstance(e, BinOp):
        if e.op in ("min", "max"):
            return f"T.{e.op}({expr_str(e.a)}, {expr_str(e.b)})"
        if e.op == "pow":
            return f"T.pow({expr_str(e.a)}, {expr_str(e.b)})"
        p = _PREC[e.op]
        s = f"{expr_str(e.a, p)} {e.op} {expr_str(e.b, p + 1)}"
        return f"({s})" if p < prec else s
    if isinstance(e, UnOp):
        if e.op == "neg":
            return f"-{expr_str(e.a, 11)}"
        if e.op == "not":
            return f"not {expr_str(e.a, 3)}" if prec <= 3 else f"(not {expr_str(e.a, 3)})"
        return f"~{expr_str(e.a, 11)}"
    if isinstance(e, Call):
        return f"T.{e.name}({', '.join(expr_str(a) for a in e.args)})"
    if isinstance(e, Cast):
        return f"T.cast({expr_str(e.a)}, {e.dtype!r})"
    if isinstance(e, Select):
        return f"T.if_then_else({expr_str(e.cond)}, {expr_str(e.a)}, {expr_str(e.b)})"
    if isinstance(e, Load):
        return f"{e.buffer.name}[{', '.join(expr_str(i) for i in e.indices)}]"
    if isinstance(e, Shuffle):
        return f"shfl_xor({expr_str(e.value)}, {e.mask}, {e.width})"
    return f"<{type(e).__name__}>"


def _shape_str(shape) -> str:
    inner = ", ".join(expr_str(s) if isinstance(s, Expr) else str(s) for s in shape)
    return f"({inner},)" if len(shape) == 1 else f"({inner})"


def region_str(r) -> str:
    if r.is_full():
        return r.buffer.name
    parts = []
    for d, (s, e) in enumerate(zip(r.starts, r.extents)):
        if d in r.squeezed:
            parts.append(expr_str(s))
        else:
            parts.append(f"{expr_str(s)}:{expr_str(s + e) if isinstance(s, Expr) else s + e}")
    return f"{r.buffer.name}[{', '.join(parts)}]"


class _TilePrinter:
    def __init__(self):
        self.lines: list[str] = []

    def emit(self, depth: int, text: str) -> None:
        self.lines.append("    " * depth + text)

    def stmt(self, s, d: int) -> None:
        from . import tile as t
        from . import tile_ops

        if s is None:
            return
        if isinstance(s, t.SeqStmt):
            if not s.stmts:
                self.emit(d, "pass")
            for x in s.stmts:
                self.stmt(x, d)
        elif isinstance(s, t.Kernel):
            grid = ", ".join(expr_str(g) for g in s.grid)
            thr = s.threads[0] if len(s.threads) == 1 else list(s.threads)
            names = ", ".join(v.name for v in s.block_vars)
            cluster = s.attrs.get("cluster_dims")
            cluster = f", cluster_dims={tuple(cluster)}" if cluster else ""  # in the cache key too
            self.emit(d, f"with T.Kernel({grid}, threads={thr}{cluster}) as ({names},):")
            self.stmt(s.body, d + 1)
        elif isinstance(s, t.Alloc):
            b = s.buffer
            if b.scope == "var":
                init = "" if s.init is None else f", {expr_str(s.init)}"
                self.emit(d, f"{b.name} = T.alloc_var({b.dtype!r}{init})")
            elif b.scope == "global" and s.init is not None:  # a tensor at an address (frontend/address_tensors.py)
                strides = "" if not b.attrs.get("explicit_strides") else f", strides={_shape_str(b.strides)}"
                self.emit(d, f"{b.name} = T.make_tensor({expr_str(s.init)}, {_shape_str(b.shape)}, {b.dtype!r}"
                             f"{strides})")
            else:
                self.emit(d, f"{b.name} = T.alloc_{b.scope}({_shape_str(b.shape)}, {b.dtype!r})")
        elif isinstance(s, t.For):
            if s.kind == "pipelined":
                it = f"T.Pipelined({expr_str(s.start)}, {expr_str(s.start + s.extent)}, num_stages={s.num_stages})"
            else:
                fn = "T.unroll" if s.kind == "unroll" else "T.serial"
                it = f"{fn}({expr_str(s.start)}, {expr_str(s.start + s.extent)})"
            self.emit(d, f"for {s.var.name} in {it}:")
            self.stmt(s.body, d + 1)
        elif isinstance(s, t.ParallelFor):
            names = ", ".join(v.name for v in s.vars)
            cw = "" if s.coalesced_width is None else f", coalesced_width={s.coalesced_width}"
            self.emit(d, f"for {names} in T.Parallel({', '.join(str(e) for e in s.extents)}{cw}):")
            self.stmt(s.body, d + 1)
        elif isinstance(s, t.IfThenElse):
            self.emit(d, f"if {expr_str(s.cond)}:")
            self.stmt(s.then_body, d + 1)
            if s.else_body is not None:
                self.emit(d, "else:")
                self.stmt(s.else_body, d + 1)
        elif isinstance(s, t.ThreadPartition):
            self.emit(d, f"with T.thread_partition({s.base}, {s.count}, {s.role!r}):")
            self.stmt(s.body, d + 1)
        elif isinstance(s, t.BufferStore):
            idx = ", ".join(expr_str(i) for i in s.indices)
            self.emit(d, f"{s.buffer.name}[{idx}] = {expr_str(s.value)}")
        elif isinstance(s, t.LetStmt):
            self.emit(d, f"{s.var.name} = {expr_str(s.value)}")
        elif tile_ops.decl_of(s) is not None:
            self.emit(d, tile_ops.op_text(s))
        elif isinstance(s, t.Annotate):
            if s.kind == "swizzle":
                self.emit(d, f"T.use_swizzle(panel_size={s.attrs['panel_size']}, order={s.attrs['order']!r})")
            else:
                self.emit(d, f"# annotate {s.kind} {s.attrs}")
        elif isinstance(s, t.Evaluate):
            self.emit(d, f"T.evaluate({expr_str(s.value)})")
        else:
            from .thread_printer import thread_stmt_lines

            for line in thread_stmt_lines(s):
                self.emit(d, line)


def print_func(f) -> str:
    """Print a Tile IR ``PrimFunc`` as tilewright Python source."""
    from .tile import Buffer

    p = _TilePrinter()
    for v in f.dyn_vars:
        p.emit(0, f"{v.name} = T.dynamic({v.name!r})")
    params = []
    for prm in f.params:
        if isinstance(prm, Buffer):
            strides = f", strides={_shape_str(prm.strides)}" if prm.attrs.get("explicit_strides") else ""
            params.append(f"{prm.name}: T.Tensor({_shape_str(prm.shape)}, {prm.dtype!r}{strides})")
        else:
            params.append(f"{prm.name}: T.{prm.dtype}")
    p.emit(0, "@T.prim_func")
    p.emit(0, f"def {f.name}({', '.join(params)}):")
    p.stmt(f.body, 1)
    return "\n".join(p.lines) + "\n"


def print_stmt(s) -> str:
    p = _TilePrinter()
    p.stmt(s, 0)
    return "\n".join(p.lines) + "\n"
