"""Jumps of curand's XORWOW generator by any number of steps, shared by the emulator
(interp/rng_xorwow.py) and the printers (codegen/rng.py), which is why it sits in this low layer.

XORWOW's five 32-bit words ``v`` change linearly over GF(2) at each step (the Weyl counter ``d`` is
separate), so ``n`` steps are ``M**n v`` for a 160x160 bit matrix ``M``.  With ``P`` the characteristic
polynomial of ``M`` (found here by Berlekamp-Massey from a bit of the output, degree 160),
``M**n = q(M)`` for ``q = x**n mod P``, and ``q(M) v`` takes 160 plain steps by Horner's rule.
``jump_polynomial(k)`` is ``x**(2**k) mod P`` as a 160-bit integer; a jump by ``n`` applies one per
set bit of ``n``.  curand's subsequences are ``2**67`` steps apart, so k runs to 67 + 64.
"""

from __future__ import annotations

MASK32 = 0xFFFFFFFF
DEGREE = 160
SUBSEQUENCE_LOG2 = 67
TABLE_SIZE = SUBSEQUENCE_LOG2 + 64


def step_words(v: list) -> list:
    """One XORWOW step of the five words (without the Weyl counter)."""
    t = v[0] ^ (v[0] >> 2)
    new = (v[4] ^ ((v[4] << 4) & MASK32)) ^ (t ^ ((t << 1) & MASK32))
    return [v[1], v[2], v[3], v[4], new]


def _berlekamp_massey(bits: list) -> list:
    """The shortest linear recurrence over GF(2) of ``bits``: connection coefficients c[0..L]."""
    c, b = [1] + [0] * len(bits), [1] + [0] * len(bits)
    length, m = 0, -1
    for n in range(len(bits)):
        d = bits[n]
        for i in range(1, length + 1):
            d ^= c[i] & bits[n - i]
        if d:
            t = c[:]
            shift = n - m
            for i in range(len(bits) + 1 - shift):
                c[i + shift] ^= b[i]
            if 2 * length <= n:
                length, m, b = n + 1 - length, n, t
    return c[:length + 1]


def _characteristic() -> int:
    v = [0x12345678, 0x9ABCDEF0, 0x0F1E2D3C, 0x4B5A6978, 0x13579BDF]
    bits = []
    for _ in range(4 * DEGREE):
        v = step_words(v)
        bits.append(v[4] & 1)
    c = _berlekamp_massey(bits)
    if len(c) - 1 != DEGREE:
        raise RuntimeError(f"XORWOW's recurrence came out of degree {len(c) - 1}, not {DEGREE}")
    # P(x) = x**L * C(1/x): the coefficient of x**(L - i) is c[i]
    return sum(1 << (DEGREE - i) for i, ci in enumerate(c) if ci)


def _mulmod(a: int, b: int, p: int) -> int:
    r = 0
    while b:
        if b & 1:
            r ^= a
        b >>= 1
        a <<= 1
        if a >> DEGREE & 1:
            a ^= p
    return r


_TABLE: list = []


def jump_polynomial(k: int) -> int:
    """x**(2**k) mod P, for k < TABLE_SIZE."""
    if not _TABLE:
        p = _characteristic()
        q = 2  # the polynomial x
        for _ in range(TABLE_SIZE):
            _TABLE.append(q)
            q = _mulmod(q, q, p)
    return _TABLE[k]


def jump_words(v: list, q: int) -> list:
    """q(M) v by Horner's rule: 160 steps."""
    w = [0] * 5
    for i in range(DEGREE - 1, -1, -1):
        w = step_words(w)
        if q >> i & 1:
            w = [a ^ b for a, b in zip(w, v)]
    return w
