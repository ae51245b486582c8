"""A prim_func body of several ``with T.Kernel(...)`` blocks, or of none.

TileLang runs the kernels of one prim_func one after another, in source order, on the same
arguments (a later kernel sees everything an earlier one wrote: each launch starts after the
previous one has finished).  ``split_kernels`` makes one single-kernel ``PrimFunc`` per block, with
the prim_func's parameters and the top-level bindings that precede the block; the compiler
compiles each part and the JIT layer launches them in order (``jit.sequence.KernelSequence``).

A body with no ``T.Kernel`` at all (plain statements on the parameters, as TileLang's TIR allows;
no ``with`` in its source and no kernel launched by a macro it calls) runs once: the frontend reads
it again as ``with T.Kernel(1, threads=1):`` around the whole body.
"""

from __future__ import annotations

import ast

from ..ir import tile as t


def split_kernels(func: t.PrimFunc, stmts: list) -> list:
    """One ``PrimFunc`` per ``T.Kernel`` block of ``stmts`` (the top-level statements of ``func``),
    named ``<func>_kernel<i>``; each holds the ``LetStmt`` bindings that come before its block."""
    parts, lets = [], []
    for s in stmts:
        if isinstance(s, t.LetStmt):
            lets.append(s)
        elif isinstance(s, t.Kernel):
            body = t.SeqStmt(lets + [s]) if lets else s
            part = t.PrimFunc(f"{func.name}_kernel{len(parts)}", func.params, body, func.dyn_vars, loc=s.loc)
            part.attrs["sequence_of"] = func.name
            parts.append(part)
    return parts


def has_no_kernel_block(tree: ast.FunctionDef) -> bool:
    """Whether the function's own source has no ``with`` statement: then, unless a macro it calls
    launches one, it has no T.Kernel block, and the body is one implicit single-thread kernel (the
    frontend reads it normally first and wraps it only when that produced no kernel)."""
    return not any(isinstance(n, (ast.With, ast.AsyncWith)) for n in ast.walk(tree))
