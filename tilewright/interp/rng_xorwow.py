"""curand's XORWOW generator behind ``T.rng_init(..., generator="curandStateXORWOW_t")``, for the
emulator's lanes (codegen/rng.py emits the same in C).

Five 32-bit xorshift words and a Weyl counter ``d``: a step shifts the words along, makes a new last
word ``(v4 ^ v4 << 4) ^ (t ^ t << 1)`` with ``t = v0 ^ v0 >> 2``, adds 362437 to ``d`` and returns
``v4 + d``.  ``curand_init(seed, seq, off)`` scrambles the seed's halves into the words and ``d``, then
jumps ``seq * 2**67 + off`` steps (ir/xorwow_jump.py; ``d`` moves by ``362437 * off``).  Conversions
are curand's: uniform float32 ``x * 2**-32 + 2**-33``, float64 from two draws ``(x ^ y << 21) *
2**-53 + 2**-54``, normals as Philox's (rng_philox.CurandConversions).
"""

from __future__ import annotations

import numpy as np

from ..ir import xorwow_jump as xj
from .rng_philox import CurandConversions

_U32 = np.uint32


def _step(v):
    """One step of the words of many lanes: v is an (n, 5) uint32 array; returns the new array."""
    t = v[:, 0] ^ (v[:, 0] >> _U32(2))
    new = (v[:, 4] ^ (v[:, 4] << _U32(4))) ^ (t ^ (t << _U32(1)))
    return np.concatenate([v[:, 1:], new[:, None]], axis=1)


def _jump(v, q: int):
    w = np.zeros_like(v)
    for i in range(xj.DEGREE - 1, -1, -1):
        w = _step(w)
        if q >> i & 1:
            w ^= v
    return w


class XorwowStates(CurandConversions):
    def __init__(self, n: int):
        super().__init__(n)
        self.v = np.zeros((n, 5), _U32)
        self.d = np.zeros(n, _U32)

    def init(self, lanes, seed, seq, off) -> None:
        seed, seq, off = (np.broadcast_to(np.asarray(x).astype(np.uint64), lanes.shape) for x in (seed, seq, off))
        s0 = (seed & np.uint64(0xFFFFFFFF)).astype(_U32) ^ _U32(0xAAD26B49)
        s1 = (seed >> np.uint64(32)).astype(_U32) ^ _U32(0xF7DCEFDD)
        t0, t1 = s0 * _U32(1099087573), s1 * _U32(2591861531)
        v = np.stack([_U32(123456789) + t0, _U32(362436069) ^ t0, _U32(521288629) + t1, _U32(88675123) ^ t1,
                      _U32(5783321) + t0], axis=1).astype(_U32)
        jumps = [(int(a) << xj.SUBSEQUENCE_LOG2) + int(b) for a, b in zip(seq, off)]
        for k in range(max(jumps, default=0).bit_length()):
            pick = np.array([j >> k & 1 for j in jumps], bool)
            if pick.any():
                v[pick] = _jump(v[pick], xj.jump_polynomial(k))
        self.v[lanes] = v
        self.d[lanes] = _U32(6615241) + t1 + t0 + (off.astype(np.uint64) * np.uint64(362437)).astype(_U32)
        self.reset_normals(lanes)

    def next_u32(self, lanes) -> np.ndarray:
        v = _step(self.v[lanes])
        self.v[lanes] = v
        d = self.d[lanes] + _U32(362437)
        self.d[lanes] = d
        return (v[:, 4] + d).astype(_U32)

    def uniform_f64(self, lanes) -> np.ndarray:
        return self._two_words(lanes) * 2.0**-53 + 2.0**-54
