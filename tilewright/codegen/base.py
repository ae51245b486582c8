"""The printer base class: thread IR -> C++ source, shared by the CUDA and HIP printers.

Subclasses supply the vendor parts (type names, includes, math, barriers, shuffles, async copies,
matrix instructions); everything structural (names, loops, statements, expressions) lives here.
"""

from __future__ import annotations

import math
import re

from ..errors import CompileError, InternalError
from ..ir import dtype as dt
from ..ir import expr as E
from ..ir import thread as th
from ..ir import tile as t
from ..ir.analysis import is_nonnegative
from . import rng, subbyte
from .rng import uses_rng

_CPP_KEYWORDS = {
    "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else", "enum", "extern",
    "float", "for", "goto", "if", "int", "long", "register", "return", "short", "signed", "sizeof", "static",
    "struct", "switch", "typedef", "union", "unsigned", "void", "volatile", "while", "bool", "class", "new",
    "delete", "this", "template", "typename", "half", "min", "max", "abs", "exp", "log", "sqrt",
}

def _is_scalar_local(buf) -> bool:
    """A register that holds one value (``T.alloc_var``, marked by passes/lower_to_threads.py): declared
    and used as a plain C++ local, not a one-element array."""
    return buf.scope == "local" and buf.attrs.get("scalar", False)


_PREC = {"or": 1, "and": 2, "|": 3, "^": 4, "&": 5, "==": 6, "!=": 6, "<": 7, "<=": 7, ">": 7, ">=": 7,
         "<<": 8, ">>": 8, "+": 9, "-": 9, "*": 10, "/": 10, "//": 10, "%": 10}
_C_OP = {"and": "&&", "or": "||", "//": "/"}


class Printer:
    """Prints one ``ThreadKernel``."""

    vector_types = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "uint2", 16: "uint4"}

    def __init__(self, kernel: th.ThreadKernel):
        self.k = kernel
        self.names: dict = {}
        self.used: set = set()
        self.lines: list[str] = []
        self.special: dict = {}

    # ------------------------------------------------------------------ vendor hooks
    def ctype(self, dtype: str) -> str:
        raise NotImplementedError

    def prelude(self) -> str:
        raise NotImplementedError

    def thread_index(self) -> str:
        return "((int)threadIdx.x)"

    def block_index(self, d: int) -> str:
        return f"((int)blockIdx.{'xyz'[d]})"

    def kernel_attrs(self) -> str:
        min_blocks = self.k.attrs.get("min_blocks_per_sm")
        bounds = f"{self.k.num_threads}, {min_blocks}" if min_blocks else f"{self.k.num_threads}"
        return f'extern "C" __global__ void __launch_bounds__({bounds})'

    def smem_decl(self) -> str:
        return "extern __shared__ __align__(128) unsigned char tw_smem[];"

    def tensor_map_param(self, index: int) -> str:
        raise NotImplementedError(f"{type(self).__name__} has no tensor memory accelerator (TMA) parameters")

    def tma(self, s, d: int) -> None:
        raise NotImplementedError(f"{type(self).__name__} cannot print {type(s).__name__} (TMA is NVIDIA sm_90+)")

    # ------------------------------------------------------------------ names
    def name(self, obj, base: str) -> str:
        n = self.names.get(obj)
        if n is not None:
            return n
        clean = re.sub(r"\W", "_", base) or "v"
        if clean[0].isdigit():
            clean = "v_" + clean
        if clean in _CPP_KEYWORDS or clean.startswith("tw_"):
            clean = clean + "_"
        cand, i = clean, 1
        while cand in self.used:
            cand = f"{clean}_{i}"
            i += 1
        self.used.add(cand)
        self.names[obj] = cand
        return cand

    # ------------------------------------------------------------------ output
    def emit(self, depth: int, text: str) -> None:
        self.lines.append("  " * depth + text)

    def print(self) -> str:
        k = self.k
        self.special[k.thread_var] = self.thread_index()
        for d, v in enumerate(k.block_vars):
            self.special[v] = self.block_index(d)
        params = []
        for p in k.params:
            if isinstance(p, t.Buffer):
                ct = "unsigned char" if subbyte.is_packed_global(p) else self.ctype(p.dtype)  # two per byte
                params.append(f"{ct}* __restrict__ {self.name(p, p.name)}")
            else:
                params.append(f"{self.ctype(p.dtype)} {self.name(p, p.name)}")
        for v in k.dyn_vars:  # int, or long long for a size declared T.dynamic(name, "int64")
            params.append(f"{self.ctype('int64' if v.dtype == 'int64' else 'int32')} {self.name(v, v.name)}")
        for i, _ in enumerate(k.tensor_maps):
            params.append(self.tensor_map_param(i))
        self.lines.append(self.prelude())
        self.emit(0, f"{self.kernel_attrs()} {k.name}({', '.join(params)}) {{")
        if k.shared_bytes:
            self.emit(1, self.smem_decl())
        if uses_rng(k):  # T.rng_*: the thread's generator (codegen/rng.py)
            self.emit(1, f"tw_rng_t {rng.STATE};")
        self.stmt(k.body, 1)
        self.emit(0, "}")
        return "\n".join(self.lines) + "\n"

    # ------------------------------------------------------------------ statements
    def stmt(self, s, d: int) -> None:
        if s is None:
            return
        if isinstance(s, t.SeqStmt):
            for x in s.stmts:
                self.stmt(x, d)
        elif isinstance(s, th.LocalDecl):
            b = s.buffer
            if _is_scalar_local(b):  # T.alloc_var
                self.emit(d, f"{self.ctype(b.dtype)} {self.name(b, b.name)};")
            else:
                self.emit(d, f"__align__(16) {self.ctype(b.dtype)} {self.name(b, b.name)}[{b.shape[0]}];")
        elif isinstance(s, th.GlobalDecl):  # T.make_tensor on an address (a pointer table entry)
            ct = self.ctype(s.buffer.dtype)
            self.emit(d, f"{ct}* {self.name(s.buffer, s.buffer.name)} = "  # entries may alias: no __restrict__
                         f"reinterpret_cast<{ct}*>({self.expr(s.address)});")
        elif isinstance(s, th.SharedDecl):
            b = s.buffer
            ct = self.ctype(b.dtype)
            self.emit(d, f"{ct}* {self.name(b, b.name)} = reinterpret_cast<{ct}*>(tw_smem + {s.offset});")
        elif isinstance(s, t.LetStmt):
            self.emit(d, f"const {self.ctype(s.var.dtype)} {self.name(s.var, s.var.name)} = {self.expr(s.value)};")
        elif isinstance(s, t.BufferStore):
            b = s.buffer
            if subbyte.is_packed_global(b):
                value = self.cast(b.dtype, s.value) if s.value.dtype != b.dtype else self.expr(s.value)
                self.emit(d, f"tw_st_{b.dtype}({self.name(b, b.name)}, {self.expr(s.indices[0])}, {value});")
            else:
                self.emit(d, f"{self.ref(b, s.indices[0])} = {self.expr(s.value)};")
        elif isinstance(s, t.IfThenElse):
            self.emit(d, f"if ({self.expr(s.cond)}) {{")
            self.stmt(s.then_body, d + 1)
            if s.else_body is not None:
                self.emit(d, "} else {")
                self.stmt(s.else_body, d + 1)
            self.emit(d, "}")
        elif isinstance(s, t.For):
            v = self.name(s.var, s.var.name)
            if s.kind == "unroll":
                self.emit(d, "#pragma unroll")
            start = self.expr(s.start)
            end = self.expr(s.start + s.extent)
            self.emit(d, f"for (int {v} = {start}; {v} < {end}; ++{v}) {{")
            self.stmt(s.body, d + 1)
            self.emit(d, "}")
        elif isinstance(s, th.VecCopy):
            self.vec_copy(s, d)
        elif isinstance(s, th.Barrier):
            self.emit(d, self.barrier())
        elif isinstance(s, th.Comment):
            self.emit(d, f"// {s.text}")
        elif isinstance(s, th.AsyncCopy):
            self.async_copy(s, d)
        elif isinstance(s, th.AsyncCommit):
            self.async_commit(d)
        elif isinstance(s, th.AsyncWait):
            self.async_wait(s, d)
        elif isinstance(s, th.StoreMatrix):
            self.store_matrix(s, d)
        elif isinstance(s, th.LoadMatrix):
            self.load_matrix(s, d)
        elif isinstance(s, th.MatrixMultiply):
            self.matrix_multiply(s, d)
        elif isinstance(s, th.AtomicRMW):
            self.atomic(s, d)
        elif isinstance(s, (th.MbarrierInit, th.TmaLoad, th.MbarrierWait, th.TmaStore, th.TmaStoreCommit,
                            th.TmaStoreWait)):
            self.tma(s, d)
        elif isinstance(s, (th.MbarrierArrive, th.MbarrierExpectTx, th.NamedBarrier, th.SetMaxNReg,
                            th.FenceProxyAsync, th.ClusterBarrier, th.GridDependency, th.PrefetchL2)):
            self.sync(s, d)
        elif isinstance(s, (th.Wgmma, th.WgmmaFence, th.WgmmaCommit, th.WgmmaWait)):
            self.wgmma(s, d)
        else:
            raise NotImplementedError(f"{type(self).__name__} cannot print {type(s).__name__}")

    def barrier(self) -> str:
        return "__syncthreads();"

    def sync(self, s, d: int) -> None:
        """Warp-level synchronisation (mbarrier arrive / expect-tx, named barriers, setmaxnreg, async
        fences): each printer prints what its vendor has and refuses the rest."""
        raise CompileError(f"{type(self).__name__} cannot print {type(s).__name__}", getattr(s, "loc", None))

    def wgmma(self, s, d: int) -> None:
        """Warpgroup matrix instructions (NVIDIA sm_90a); other printers refuse them."""
        raise CompileError(f"{type(s).__name__}: wgmma is an NVIDIA sm_90a instruction, which {type(self).__name__} "
                           f"cannot print (the gemm was planned for sm_90a, not for {self.k.target})",
                           getattr(s, "loc", None), hint="compile for the target the kernel runs on")

    def ref(self, buf, index) -> str:
        if _is_scalar_local(buf):
            if not (isinstance(index, E.Const) and index.value == 0):
                raise InternalError(f"element {self.expr(index)} of the scalar {buf.name} reached the printer",
                                    "codegen")
            return self.name(buf, buf.name)
        return f"{self.name(buf, buf.name)}[{self.expr(index)}]"

    def vec_copy(self, s: th.VecCopy, d: int) -> None:
        if subbyte.is_packed_global(s.src) or subbyte.is_packed_global(s.dst):
            raise CompileError(f"internal: a vector copy of {s.src.dtype} values packed two per byte reached the "
                               "printer (the copy lowering keeps them element by element)", getattr(s, "loc", None))
        nbytes = s.lanes * dt.nbytes(s.src.dtype)
        vt = self.vector_types[nbytes]
        src = f"*reinterpret_cast<const {vt}*>(&{self.ref(s.src, s.src_index)})"
        dst = f"*reinterpret_cast<{vt}*>(&{self.ref(s.dst, s.dst_index)})"
        if s.pred is None:
            self.emit(d, f"{dst} = {src};")
        elif s.dst.scope == "local":
            self.emit(d, f"{{ {vt} tw_v = {{}}; if ({self.expr(s.pred)}) tw_v = {src}; {dst} = tw_v; }}")
        else:
            self.emit(d, f"if ({self.expr(s.pred)}) {dst} = {src};")

    def async_copy(self, s, d):
        raise NotImplementedError

    def async_commit(self, d):
        pass

    def async_wait(self, s, d):
        pass

    def load_matrix(self, s, d):
        raise NotImplementedError

    def matrix_multiply(self, s, d):
        raise NotImplementedError

    def atomic(self, s, d):
        raise NotImplementedError

    # ------------------------------------------------------------------ expressions
    def const(self, c: E.Const) -> str:
        if c.dtype == "bool":
            return "true" if c.value else "false"
        if dt.is_float(c.dtype):
            v = c.value
            if math.isinf(v):
                f = "(-tw_inf())" if v < 0 else "tw_inf()"
            elif math.isnan(v):
                f = "tw_nan()"
            else:
                f = repr(float(v)) + ("" if c.dtype == "float64" else "f")
                if "e" in f and "." not in f.split("e")[0]:
                    f = f.replace("e", ".0e", 1)
            if c.dtype in ("float32", "float64"):
                return f if c.dtype == "float32" or not f.endswith("f") else f[:-1]
            return f"{self.ctype(c.dtype)}({f})"
        if c.dtype == "int64":
            return f"{c.value}LL"
        if c.dtype in ("uint32", "uint64"):
            return f"{c.value}u"
        if c.dtype == "int32":
            return str(c.value) if c.value >= -(2**31) + 1 else f"(int)({c.value}LL)"
        return f"(({self.ctype(c.dtype)}){c.value})"

    def expr(self, e, prec: int = 0) -> str:
        if isinstance(e, (int, float)):
            return self.expr(E.as_expr(e), prec)
        if isinstance(e, E.Var):
            if e in self.special:
                return self.special[e]
            return self.name(e, e.name)
        if isinstance(e, E.Const):
            return self.const(e)
        if isinstance(e, E.Load):
            if subbyte.is_packed_global(e.buffer):
                return f"tw_ld_{e.buffer.dtype}({self.name(e.buffer, e.buffer.name)}, {self.expr(e.indices[0])})"
            return self.ref(e.buffer, e.indices[0])
        if isinstance(e, E.BinOp):
            return self.binop(e, prec)
        if isinstance(e, E.UnOp):
            if e.op == "neg":
                return f"(-{self.expr(e.a, 11)})"
            if e.op == "not":
                return f"(!{self.expr(e.a, 11)})"
            return f"(~{self.expr(e.a, 11)})"
        if isinstance(e, E.Cast):
            return self.cast(e.dtype, e.a)
        if isinstance(e, E.Select):
            _check_no_shuffle(e.a, e.b)
            return f"({self.expr(e.cond, 1)} ? {self.expr(e.a, 1)} : {self.expr(e.b, 1)})"
        if isinstance(e, E.Call):
            return self.call(e)
        if isinstance(e, E.Shuffle):
            return self.shuffle(e)
        raise NotImplementedError(f"cannot print {type(e).__name__}")

    def binop(self, e: E.BinOp, prec: int) -> str:
        op = e.op
        if op in ("min", "max"):
            return self.minmax(op, e)
        if op == "pow":
            return self.call(E.Call("pow", (e.a, e.b), e.dtype))
        if op in ("//", "%") and dt.is_signed_int(e.dtype) and not (is_nonnegative(e.a) and is_nonnegative(e.b)):
            fn = "tw_floordiv" if op == "//" else "tw_floormod"
            return f"{fn}({self.expr(e.a)}, {self.expr(e.b)})"
        if op == "%" and dt.is_float(e.dtype):
            return self.call(E.Call("fmod", (e.a, e.b), e.dtype))
        if op == "//" and dt.is_float(e.dtype):
            return self.call(E.Call("floor", (E.binary("/", e.a, e.b),), e.dtype))
        p = _PREC[op]
        if op in ("and", "or"):
            _check_no_shuffle(e.b)  # evaluated only where the left side does not decide
        s = f"{self.expr(e.a, p)} {_C_OP.get(op, op)} {self.expr(e.b, p + 1)}"
        return f"({s})"

    def minmax(self, op: str, e: E.BinOp) -> str:
        a, b = self.expr(e.a), self.expr(e.b)
        if dt.is_float(e.dtype):
            if e.dtype == "float32":
                return f"{'fminf' if op == 'min' else 'fmaxf'}({a}, {b})"
            if e.dtype == "float64":
                return f"{'fmin' if op == 'min' else 'fmax'}({a}, {b})"
            ct = self.ctype(e.dtype)
            return f"{ct}({'fminf' if op == 'min' else 'fmaxf'}(float({a}), float({b})))"
        return f"tw_{op}({a}, {b})"

    def cast(self, dtype: str, a) -> str:
        src = a.dtype
        inner = self.expr(a)
        ct = self.ctype(dtype)
        if dt.is_low_precision_float(dtype) and not dt.is_float(src):
            return f"{ct}((float)({inner}))"
        if dt.is_low_precision_float(src) and not dt.is_float(dtype):
            return f"(({ct})(float)({inner}))"
        if dt.is_low_precision_float(src) and dt.is_low_precision_float(dtype):
            return f"{ct}((float)({inner}))"
        if dt.is_low_precision_float(dtype):
            return f"{ct}({inner})"
        return f"(({ct})({inner}))"

    FLOAT_FN = {
        "exp": "expf", "exp2": "exp2f", "exp10": "exp10f", "log": "logf", "log2": "log2f", "log10": "log10f",
        "sqrt": "sqrtf", "rsqrt": "rsqrtf", "tanh": "tanhf", "sin": "sinf", "cos": "cosf", "tan": "tanf",
        "erf": "erff", "floor": "floorf", "ceil": "ceilf", "round": "roundf", "trunc": "truncf",
        "fabs": "fabsf", "abs": "fabsf", "pow": "powf", "fma": "fmaf", "atan": "atanf", "sinh": "sinhf",
        "cosh": "coshf", "log1p": "log1pf", "expm1": "expm1f", "fmod": "fmodf",
        # TileLang's names (the language layer keeps the fast-math and ieee_* ones float32-only)
        "nearbyint": "nearbyintf", "rcp": "__frcp_rn", "__exp": "__expf", "__exp10": "__exp10f", "__log": "__logf",
        "__exp2": "tw_ex2_approx",  # attn-hopper: codegen/cuda.py prints the helper where it is called
        "__log2": "__log2f", "__log10": "__log10f", "__sin": "__sinf", "__cos": "__cosf", "__tan": "__tanf",
        **{f"ieee_{op}_{mode}": f"__{cu}_{mode}" for op, cu in (("add", "fadd"), ("sub", "fsub"), ("mul", "fmul"),
                                                                ("fmaf", "fmaf"), ("fdiv", "fdiv"), ("frcp", "frcp"),
                                                                ("fsqrt", "fsqrt"))
           for mode in ("rn", "rz", "ru", "rd")},
        "ieee_frsqrt_rn": "__frsqrt_rn",
    }

    def call(self, e: E.Call) -> str:
        name = e.name
        if name == "reinterpret":  # same width (T.reinterpret, T.view with a dtype): a bit copy
            return f"tw_bitcast<{self.ctype(e.dtype)}>({self.expr(e.args[0])})"
        if name == "rng_init":
            seed, seq, off = (self.expr(x) for x in e.args[:3])
            return f"tw_rng_init({rng.STATE}, {seed}, {seq}, {off}, {int(e.args[3].value)})"
        if name in rng.DRAW_FUNCTIONS:
            return f"{rng.DRAW_FUNCTIONS[name]}({rng.STATE})"
        if name in ("isnan", "isinf", "isfinite"):
            x = e.args[0]  # float64 stays float64: (float)1e300 would be infinite
            # other types as (float)(x), as printed before float32 went bare: the H200 dropped NaN in
            # float32 reductions after that change (16-bit ones, still cast, were right)
            return f"{name}({self.expr(x) if x.dtype == 'float64' else f'(float)({self.expr(x)})'})"
        if name == "abs" and not dt.is_float(e.dtype):
            return f"tw_abs({self.expr(e.args[0])})"
        if name == "sigmoid":
            x = e.args[0]
            inner = f"(1.0f / (1.0f + {self.math_fn('exp')}(-(float)({self.expr(x)}))))"
            return inner if e.dtype == "float32" else f"{self.ctype(e.dtype)}({inner})"
        fn = self.math_fn(name)
        if e.dtype == "float64":
            fn = fn.removesuffix("f")
            return f"{fn}({', '.join(self.expr(a) for a in e.args)})"
        args = ", ".join(f"(float)({self.expr(a)})" if a.dtype != "float32" else self.expr(a) for a in e.args)
        out = f"{fn}({args})"
        return out if e.dtype == "float32" else f"{self.ctype(e.dtype)}({out})"

    def math_fn(self, name: str) -> str:
        return self.FLOAT_FN[name]

    def shuffle(self, e: E.Shuffle) -> str:
        raise NotImplementedError


def _check_no_shuffle(*sides) -> None:
    """C evaluates one side of ``?:`` (the right one of ``&&``, ``||``) only in the lanes that need
    it: a warp shuffle there would read lanes that are not executing it (undefined; NaN-propagating
    reductions lost their NaN so).  Lowering shuffles into a register first; this catches one that
    was not."""
    from ..ir.visitor import walk_expr

    found = []
    for side in sides:
        walk_expr(side, lambda x: found.append(x) if isinstance(x, E.Shuffle) else None)
    if found:
        raise InternalError("a warp shuffle inside a lazily evaluated operand (?:, &&, ||) runs in only some lanes",
                            "lower_to_threads")


def uses_device_assert(kernel) -> bool:
    """Does the kernel hold a ``T.device_assert`` on a run-time condition (a ``device_assert:`` call)?"""
    from ..ir.verifier import exprs_of
    from ..ir.visitor import walk, walk_expr

    found = []

    def in_expr(e):
        if isinstance(e, E.Call) and e.name.startswith("device_assert:"):
            found.append(e)

    walk(kernel.body, lambda s: [walk_expr(e, in_expr) for e in exprs_of(s)])
    return bool(found)
