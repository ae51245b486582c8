"""Integer index algebra used by ``simplify_ranges``: floor division and modulo split over sums.

Lowered index expressions look like ``((tid + 128) // 4) * 32 + ((tid + 128) % 4) ^ ...`` — one
copy per chunk a thread moves, each differing by a constant inside a ``//`` or ``%``.  The C
compiler cannot see that these differ by a constant (it does not know ``tid >= 0``), so it keeps one
register per chunk.  Rewriting ``(tid + 128) // 4`` to ``tid // 4 + 32`` and ``(tid + 128) % 4`` to
``tid % 4`` exposes the common part; every chunk address then becomes "one register + immediate".

The identities used hold for floor division by a positive constant ``d`` and any integers:
``(d*Q + R) // d == Q + R // d`` and ``(d*Q + R) % d == R % d``; ``(x // a) // b == x // (a*b)``;
``(x % (a*k)) % a == x % a``.  They are applied only when every term has a non-negative coefficient
and a non-negative range, so the results print as plain C ``/`` and ``%`` exactly where the inputs
did.
"""

from __future__ import annotations

from ..ir import dtype as dt
from ..ir import expr as E


def linear_terms(e):
    """``([(coef, atom), ...], const)`` with ``e == sum(coef * atom) + const``; atoms are the
    maximal sub-expressions that are not integer sums or products by constants."""
    if isinstance(e, E.Const) and isinstance(e.value, int) and not isinstance(e.value, bool):
        return [], e.value
    if isinstance(e, E.BinOp) and e.op == "+":
        ta, ca = linear_terms(e.a)
        tb, cb = linear_terms(e.b)
        return ta + tb, ca + cb
    if isinstance(e, E.BinOp) and e.op == "*":
        for x, y in ((e.a, e.b), (e.b, e.a)):
            if isinstance(y, E.Const) and isinstance(y.value, int) and not isinstance(y.value, bool):
                tx, cx = linear_terms(x)
                return [(k * y.value, a) for k, a in tx], cx * y.value
    return [(1, e)], 0


def build_sum(terms, const, dtype):
    out = None
    for coef, atom in terms:
        term = atom if coef == 1 else E.binary("*", atom, E.Const(coef, dtype))
        out = term if out is None else E.binary("+", out, term)
    if out is None:
        return E.Const(const, dtype)
    return E.binary("+", out, E.Const(const, dtype)) if const else out


def split_div_mod(op: str, x, d: int, rng):
    """Rewrite ``x // d`` or ``x % d`` (``d > 0``) by pulling out multiples of ``d``; ``rng`` gives
    the (lo, hi) range of an expression or None.  Returns the new expression or None."""
    if d <= 0 or not dt.is_int(x.dtype):
        return None
    nested = _nested(op, x, d)
    if nested is not None:
        return nested
    terms, const = linear_terms(x)
    if const < 0 or any(k < 0 for k, _ in terms):
        return None
    for _, atom in terms:
        r = rng(atom)
        if r is None or r[0] < 0:
            return None
    whole = [(k // d, a) for k, a in terms if k % d == 0]
    rest = [(k, a) for k, a in terms if k % d != 0]
    cq, cr = divmod(const, d)
    if not whole and cq == 0:
        return None
    remainder = build_sum(rest, cr, x.dtype)
    rr = rng(remainder)
    small = rr is not None and 0 <= rr[0] and rr[1] < d
    if op == "%":
        return remainder if small else E.binary("%", remainder, E.Const(d, x.dtype))
    if small:
        return build_sum(whole, cq, x.dtype)
    tail = E.binary("//", remainder, E.Const(d, x.dtype))
    return build_sum(whole + [(1, tail)], cq, x.dtype)


def _nested(op, x, d):
    if not isinstance(x, E.BinOp) or not isinstance(x.b, E.Const) or not isinstance(x.b.value, int):
        return None
    inner = x.b.value
    if inner <= 0:
        return None
    if op == "//" and x.op == "//":
        return E.binary("//", x.a, E.Const(inner * d, x.dtype))
    if op == "%" and x.op == "%" and inner % d == 0:
        return E.binary("%", x.a, E.Const(d, x.dtype))
    return None
