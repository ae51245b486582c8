"""Integer width of index arithmetic (part of ``simplify_ranges``): 32-bit where value ranges prove
it exact, 64-bit elsewhere.

Lowered index expressions are ``int32`` (C ``int``), which is what the GPU computes fastest.  A
tensor of 2^31 elements or more, or a product of sizes that reach that far, would be addressed
with an overflowed offset.  For every maximal integer expression in the kernel (a buffer index, an
operand of a comparison, a value stored or selected) this module decides:

* keep it 32-bit when the range of every sub-expression is known and inside ``int32`` (static
  shapes below 2^31 elements: the code is unchanged);
* rebuild it in ``int64`` when some sub-expression's known range leaves ``int32``;
* for the element offset of a *large* global buffer (a dynamic dimension, or 2^31 elements or
  more), also rebuild it when some sub-expression's range is unknown (a gathered index read from
  memory): only a bound proves 32 bits suffice.  For a small static buffer an unknown part is left
  alone: an in-bounds offset is below its element count.

Dynamic sizes are 64-bit by this rule rather than specialized: one compiled kernel serves every
size up to 2^31 - 1 per dimension (the launch refuses larger ones), at the price of a few 64-bit
multiply-adds per address, which the memory access dwarfs.

Widening casts the leaves (variables, loads, calls) to ``int64`` and does the arithmetic there; a
comparison between a widened side and a 32-bit side compares in ``int64``.  ``rng(e)`` returns the
(lo, hi) range of an integer expression or None (see ``simplify_ranges``).
"""

from __future__ import annotations

from ..ir import expr as E

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
_ARITH = ("+", "-", "*", "//", "%", "min", "max", "&", "|", "^", "<<", ">>")


def is_large(buf) -> bool:
    """A global buffer whose offsets are not bounded by a static element count below 2^31."""
    n = 1
    for x in buf.shape:
        v = E.const_value(x)
        if not isinstance(v, int):
            return True
        n *= v
    return n > INT32_MAX


def _fits(r) -> bool:
    return r is not None and INT32_MIN <= r[0] and r[1] <= INT32_MAX


def needs_64(e, rng, large: bool) -> bool:
    """Whether the int32 expression ``e`` must be computed in 64 bits."""
    bad = [False]

    def visit(x):
        if bad[0] or not isinstance(x, E.Expr) or x.dtype != "int32":
            return
        r = rng(x)
        if r is None:
            if large:
                bad[0] = True
                return
        elif not _fits(r):
            bad[0] = True
            return
        if isinstance(x, E.BinOp) and x.op in _ARITH:
            visit(x.a)
            visit(x.b)
        elif isinstance(x, E.UnOp):
            visit(x.a)
        elif isinstance(x, E.Select):
            visit(x.a)
            visit(x.b)

    visit(e)
    return bad[0]


def widen(e, rng):
    """``e`` (an int32 expression) computed in int64: sub-expressions whose ranges are known to
    fit stay 32-bit and are converted once (``(long long)(tid * 4 / 64)``); the rest is rebuilt."""
    if not isinstance(e, E.Expr) or e.dtype == "int64":
        return e
    if isinstance(e, E.Const):
        return E.Const(e.value, "int64")
    if e.dtype == "int32" and not needs_64(e, rng, True):
        return E.cast("int64", e)
    if isinstance(e, E.BinOp) and e.op in _ARITH and e.dtype == "int32":
        return E.binary(e.op, widen(e.a, rng), widen(e.b, rng))
    if isinstance(e, E.UnOp) and e.op == "neg" and e.dtype == "int32":
        return E.unary("neg", widen(e.a, rng))
    if isinstance(e, E.Select) and e.dtype == "int32":
        return E.select(e.cond, widen(e.a, rng), widen(e.b, rng))
    if isinstance(e, E.Cast) and e.dtype == "int32" and e.a.dtype == "int32":
        return widen(e.a, rng)
    return E.cast("int64", e)


def fit_index(e, rng, large: bool):
    """An element offset: widened when it must be (``large``: see the module docstring)."""
    e = fit(e, rng)
    if isinstance(e, E.Expr) and e.dtype == "int32" and needs_64(e, rng, large):
        return widen(e, rng)
    return e


def fit(e, rng):
    """``e`` with every int32 sub-expression whose range may leave int32 computed in int64 (bottom
    up: a comparison or sum with one widened side is done in int64).  Returns ``e`` itself when
    nothing changes."""
    if not isinstance(e, E.Expr):
        return e
    out = _fit_children(e, rng)
    if out.dtype == "int32" and needs_64(out, rng, False):
        return widen(out, rng)
    return out


def _fit_children(e, rng):
    if isinstance(e, E.BinOp):
        a, b = fit(e.a, rng), fit(e.b, rng)
        return e if (a is e.a and b is e.b) else E.binary(e.op, a, b)
    if isinstance(e, E.UnOp):
        a = fit(e.a, rng)
        return e if a is e.a else E.unary(e.op, a)
    if isinstance(e, E.Select):
        c, a, b = fit(e.cond, rng), fit(e.a, rng), fit(e.b, rng)
        return e if (c is e.cond and a is e.a and b is e.b) else E.select(c, a, b)
    if isinstance(e, E.Cast):
        a = fit(e.a, rng)
        return e if a is e.a else E.cast(e.dtype, a)
    if isinstance(e, E.Call):
        args = [fit(x, rng) for x in e.args]
        return e if all(x is y for x, y in zip(args, e.args)) else E.call(e.name, args, e.dtype)
    if isinstance(e, E.Load):
        large = e.buffer.scope == "global" and is_large(e.buffer)
        idx = tuple(fit_index(i, rng, large) for i in e.indices)
        return e if all(x is y for x, y in zip(idx, e.indices)) else E.Load(e.buffer, idx)
    if isinstance(e, E.Shuffle):
        v = fit(e.value, rng)
        return e if v is e.value else E.Shuffle(v, e.mask, e.width)
    return e
