"""Pass ``check_target_limits``: refuse launch shapes the target cannot run, before anything else.

Needs: a verified Tile IR function and a target.
Guarantees: the block has at most the target's threads per block, and on AMD a whole number of
waves (a block narrower than one wave on CDNA would leave lanes of every matrix instruction
empty); otherwise a ``CompileError`` at the ``T.Kernel`` line says what to change.  The shared
buffers the kernel declares fit the target's shared memory per block (placed one after another, or
sharing memory where their lifetimes do not overlap: ``share_shared_memory``); otherwise the error points at
the largest allocation and lists the largest ones with their lines (``shared_overflow_error`` is
also what ``lower_to_threads`` raises when pipelining stages push the total over).  On CUDA no
buffer or value has an AMD-only 8-bit float type (``float8_e4m3fnuz`` / ``float8_e5m2fnuz``: CUDA
has no such type), which is refused naming the parameter or line.
"""

from __future__ import annotations

from ..errors import CompileError
from ..ir import tile as t
from ..ir.visitor import walk
from ..target.grid import GRID_HINT, GRID_LIMITS, check_launch_grid, grid_limit_error  # noqa: F401


def shared_overflow_error(kernel: t.Kernel, sizes: list, total: int, target) -> CompileError:
    """The error for ``total`` bytes of shared memory over the target's limit; ``sizes`` lists
    (Tile IR buffer, bytes it takes) for the user's shared allocations."""
    from ..ir import dtype as dt

    ranked = sorted(sizes, key=lambda bs: -bs[1])
    parts = []
    for buf, nbytes in ranked[:4]:
        line = f", line {buf.loc.lineno}" if buf.loc is not None else ""
        declared = _numel(buf) * dt.nbytes(buf.dtype)
        stages = f", {nbytes // declared} pipeline copies" if declared and nbytes >= 2 * declared else ""
        parts.append(f"{buf.name} ({nbytes} bytes{stages}{line})")
    more = f" and {len(ranked) - 4} more" if len(ranked) > 4 else ""
    loc = ranked[0][0].loc if ranked and ranked[0][0].loc is not None else kernel.loc
    listing = f"; the largest allocations: {', '.join(parts)}{more}" if parts else ""
    return CompileError(f"the kernel needs {total} bytes of shared memory; {target} allows "
                        f"{target.max_shared_bytes} per block{listing}", loc,
                        hint="use smaller tiles, fewer pipeline stages (num_stages), or a lower-precision dtype "
                        "for the largest buffers")


def _numel(buf: t.Buffer) -> int:
    n = 1
    for d in buf.shape:
        if not isinstance(d, int):
            return 0
        n *= d
    return n


def _check_declared_shared(k: t.Kernel, target) -> None:
    from ..ir import dtype as dt

    sizes = []
    walk(k.body, lambda s: sizes.append(s.buffer) if isinstance(s, t.Alloc) and s.buffer.scope == "shared" else None)
    sizes = [(b, _numel(b) * dt.nbytes(b.dtype)) for b in sizes]
    total = 0
    for _, n in sizes:
        total = (total + 127) // 128 * 128 + n  # each shared buffer starts 128-byte aligned
    if total > target.max_shared_bytes:
        from .share_shared_memory import packed_bytes

        declared = dict(sizes)
        packed = packed_bytes(k, lambda b: (declared[b], 128))
        if packed is None or packed > target.max_shared_bytes:  # else buffers of disjoint lifetimes share
            raise shared_overflow_error(k, sizes, total, target)


def check_target_limits(func: t.PrimFunc, ctx) -> t.PrimFunc:
    target = ctx.target
    kernels = []
    walk(func.body, lambda s: kernels.append(s) if isinstance(s, t.Kernel) else None)
    for k in kernels:
        n = k.num_threads
        if n > target.max_threads_per_block:
            raise CompileError(f"T.Kernel asks for {n} threads; {target} allows at most "
                               f"{target.max_threads_per_block} per block", k.loc, hint="use fewer threads")
        if target.is_hip and n % target.warp_size:
            raise CompileError(f"T.Kernel(threads={n}) is not a multiple of the wave size {target.warp_size} of "
                               f"{target.arch}", k.loc, hint=f"use a multiple of {target.warp_size} threads "
                               f"(e.g. {max(target.warp_size, n - n % target.warp_size)})")
        _check_declared_shared(k, target)
    if target.is_cuda:
        _check_no_fnuz(func)
    return func


_AMD_ONLY = {"float8_e4m3fnuz": "float8_e4m3fn", "float8_e5m2fnuz": "float8_e5m2"}


def _check_no_fnuz(func: t.PrimFunc) -> None:
    """CUDA has no fnuz 8-bit floats (gfx942's MFMA formats): a CompileError instead of a code
    generator without a C type for them."""
    from ..ir.verifier import exprs_of
    from ..ir.visitor import walk_expr

    def refuse(dtype, what, loc):
        raise CompileError(f"{what} has type {dtype}, an AMD (gfx942) 8-bit float that CUDA targets do not have",
                           loc, hint=f"use {_AMD_ONLY[dtype]} on CUDA (the OCP format of the same exponent and "
                           "mantissa widths; its exponent bias differs by one, so values convert rather than "
                           "share bits)")

    for p in func.params:
        if getattr(p, "dtype", None) in _AMD_ONLY:
            refuse(p.dtype, f"parameter {p.name}", getattr(p, "loc", None) or func.loc)

    def stmt(s):
        if isinstance(s, t.Alloc) and s.buffer.dtype in _AMD_ONLY:
            refuse(s.buffer.dtype, f"buffer {s.buffer.name}", s.buffer.loc or getattr(s, "loc", None))
        for e in exprs_of(s):
            def expr(x):
                if getattr(x, "dtype", None) in _AMD_ONLY:
                    refuse(x.dtype, "a value", getattr(s, "loc", None) or func.loc)
            walk_expr(e, expr)

    walk(func.body, stmt)
