"""Fragment layouts the program gives (``T.annotate_layout({frag: T.Fragment(...)})``), for ``infer_layouts``.

``user_layouts`` builds a ``UserFragmentLayout`` (``ir.layout_user``) for each annotated fragment over
the threads that use it; ``infer_layouts`` starts from these, so that loops, reductions and copies
over the fragment follow it.

``check_user_reductions`` keeps TileLang's rules for a reduction whose source the program laid out:
TileLang reduces across the threads holding the source with a butterfly of warp shuffles and
barriers among those warps only, and refuses a set of threads that is not one contiguous range, not
a power of two wide, or not aligned to a warp.  tilewright could reduce over such sets (through
shared memory), but a program written for TileLang does not, and the same rules keep the two
compilers accepting the same kernels.
"""

from __future__ import annotations

from ..errors import CompileError
from ..ir import tile as t
from ..ir.layout_user import LayoutFitError, UserFragmentLayout


def user_layouts(frags, frag_counts: dict, nthreads: int) -> dict:
    """Fragment -> its ``UserFragmentLayout``, for the fragments with a ``T.Fragment`` annotation."""
    out = {}
    for buf in frags:
        given = buf.attrs.get("user_fragment")
        if given is None:
            continue
        threads, regs, loc = given
        count = frag_counts.get(buf, nthreads)
        try:
            out[buf] = UserFragmentLayout.from_holders(buf.shape, threads, regs, count, buf.name)
        except LayoutFitError as e:
            raise CompileError(f"the T.Fragment layout of {buf.name} cannot be used: {e}", loc or buf.loc,
                               hint="give every element a thread of the block and its own local index, with "
                               "+ - * // % by powers of two") from None
    return out


def check_user_reductions(stmts, layouts: dict, user: dict, target) -> None:
    """TileLang's limits on the threads of a reduction over a program-laid-out fragment (module docstring)."""
    for s in stmts:
        if not isinstance(s, t.Reduce) or s.src not in user:
            continue
        held = user[s.src].holders()
        lo, hi = int(held[0]), int(held[-1]) + 1
        what = f"T.reduce_{s.op} of {s.src.name}"
        if len(held) != hi - lo:
            gaps = sorted(set(range(lo, hi)) - {int(x) for x in held})
            raise CompileError(f"{what} runs on threads {lo}..{hi - 1} except {_ranges(gaps)}: the threads holding a "
                               "T.Fragment-laid-out reduction source must form one contiguous thread range", s.loc,
                               hint="lay the source out over consecutive threads")
        width = hi - lo
        if width & (width - 1):
            raise CompileError(f"{what} runs on {width} threads ({lo}..{hi - 1}): the number of threads holding a "
                               "T.Fragment-laid-out reduction source must be a positive power of two", s.loc,
                               hint="lay the source out over 2^k threads")
        align = min(width, target.warp_size)
        if lo % align:
            raise CompileError(f"{what} runs on threads {lo}..{hi - 1}: a T.Fragment-laid-out reduction source needs "
                               f"a warp-aligned participating thread range (starting at a multiple of {align})",
                               s.loc, hint="start the source's threads at a multiple of the warp size")


def _ranges(xs) -> str:
    parts, start = [], None
    for k, x in enumerate(xs):
        if start is None:
            start = x
        if k + 1 == len(xs) or xs[k + 1] != x + 1:
            parts.append(f"{start}..{x}" if x != start else f"{x}")
            start = None
    return ", ".join(parts)
