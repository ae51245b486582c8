"""``T.CUDASourceCodeKernel(grid..., threads=..., source_code_or_path=..., entry_name=...)``: a kernel
written in CUDA C++ by the user, launched like a tilewright kernel.

The prim_func gives the parameters, the grid and the block size; the body is the ``__global__``
function ``entry_name`` of the source (a string of CUDA source, or the path of a ``.cu`` file).  The
function is called with the prim_func's parameters in order (tensors as pointers to their first
element, scalars by value), then its ``T.dynamic`` sizes as ``int`` — the argument order of every
tilewright kernel, checked by the same argument binder.  It must be ``extern "C"`` so that its name is
the symbol NVRTC emits.  Only CUDA targets compile it (NVRTC); other targets, the interpreter and the
emulator refuse it at compile time, since they do not run CUDA source.
"""

from __future__ import annotations

import builtins as _builtins
import os
import re

from ..frontend import builder as _b
from ..ir import expr as _e
from ..ir import tile as _t

_ENTRY = re.compile(r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?"
                    r"([A-Za-z_]\w*)\s*\(")


def _read_source(source_code_or_path) -> str:
    if isinstance(source_code_or_path, os.PathLike) or (
            isinstance(source_code_or_path, str) and "\n" not in source_code_or_path
            and source_code_or_path.endswith((".cu", ".cuh")) and os.path.isfile(source_code_or_path)):
        try:
            with open(source_code_or_path, encoding="utf-8") as f:
                return f.read()
        except OSError as e:
            raise _b.error(f"T.CUDASourceCodeKernel: cannot read {os.fspath(source_code_or_path)!r}: {e}") from None
    if not isinstance(source_code_or_path, str):
        raise _b.error(f"T.CUDASourceCodeKernel: source_code_or_path must be CUDA source text or a path, got "
                       f"{type(source_code_or_path).__name__}")
    return source_code_or_path


def CUDASourceCodeKernel(*grid, threads=128, source_code_or_path=None, entry_name=None):  # noqa: N802
    """The kernel of this prim_func is ``entry_name`` of the CUDA source (see the module docstring)."""
    b = _b.current()
    if source_code_or_path is None:
        raise _b.error("T.CUDASourceCodeKernel needs source_code_or_path= (CUDA source text or a .cu file)")
    text = _read_source(source_code_or_path)
    entries = _ENTRY.findall(text)
    if entry_name is None and len(entries) == 1:
        entry_name = entries[0]
    if entry_name not in entries:
        raise _b.error(f"T.CUDASourceCodeKernel: the source has no __global__ function {entry_name!r}. Available "
                       f"entries: {', '.join(entries) or '(none)'}", hint="pass entry_name= of one of them")
    if b.kernel is not None:  # (checked after the source: a failed read is retried inside an implicit kernel)
        raise _b.error("T.CUDASourceCodeKernel is the whole kernel: it cannot stand inside `with T.Kernel(...)`")
    if not 1 <= len(grid) <= 3:
        raise _b.error(f"T.CUDASourceCodeKernel takes 1 to 3 grid dimensions, got {len(grid)}")
    threads = (threads,) if isinstance(threads, _builtins.int) else tuple(threads)
    if not 1 <= len(threads) <= 3 or not all(isinstance(n, _builtins.int) and n > 0 for n in threads):
        raise _b.error(f"T.CUDASourceCodeKernel(threads=...) must be 1 to 3 positive ints, got {threads!r}")
    block_vars = tuple(_e.Var(n, "int32", kind="block") for n in ("bx", "by", "bz")[:len(grid)])
    kernel = _t.Kernel(tuple(_e.as_expr(g) for g in grid), threads, block_vars, _t.SeqStmt([]), loc=b.loc)
    kernel.attrs["cuda_source"] = (text, entry_name)
    b.emit(kernel)


def source_kernel_of(func: _t.PrimFunc):
    """``(source, entry name)`` when ``func`` is a ``T.CUDASourceCodeKernel``, else None."""
    body = func.body
    return body.attrs.get("cuda_source") if isinstance(body, _t.Kernel) else None


__all__ = ["CUDASourceCodeKernel"]
