"""L'Ecuyer's MRG32k3a generator behind ``T.rng_init(..., generator="curandStateMRG32k3a_t")``, with
curand's seeding, skips and conversions, for the emulator's lanes (the CUDA and HIP printers emit
the same in C: codegen/rng.py).

Two order-3 recurrences, ``x1[n] = a12 x1[n-2] - a13n x1[n-3] mod m1`` and ``x2[n] = a21 x2[n-1] -
a23n x2[n-3] mod m2``, combined as ``r = x1 - x2`` (plus m1 when that is not positive), an integer in
[1, m1].  ``curand_init(seed, seq, off)`` starts both from 12345s scrambled by the seed's halves,
then jumps ``seq * 2**76 + off`` steps (matrix powers mod m).  A uint32 draw is
``r * 1.000000048662`` truncated; uniform floats are ``r * 2.3283065498378288e-10`` (float32 rounds
that float64 product); normal ones are Box-Muller pairs of two uniform draws, the second kept.
"""

from __future__ import annotations

import numpy as np

M1, M2 = 4294967087, 4294944443
A12, A13N, A21, A23N = 1403580, 810728, 527612, 1370589
NORM = 2.3283065498378288e-10
BITS_NORM = 1.000000048662
SUBSEQUENCE_LOG2 = 76  # a subsequence is 2**76 draws
_A1 = ((0, 1, 0), (0, 0, 1), (M1 - A13N, A12, 0))
_A2 = ((0, 1, 0), (0, 0, 1), (M2 - A23N, 0, A21))


def _matmul(a, b, m):
    return tuple(tuple(sum(a[i][k] * b[k][j] for k in range(3)) % m for j in range(3)) for i in range(3))


def _matvec(a, v, m):
    return [sum(a[i][k] * v[k] for k in range(3)) % m for i in range(3)]


def _powers(a, m, count):
    """a**(2**k) mod m for k < count."""
    out = [a]
    for _ in range(count - 1):
        out.append(_matmul(out[-1], out[-1], m))
    return out


_POW1 = _POW2 = None


def _tables():
    global _POW1, _POW2
    if _POW1 is None:
        _POW1, _POW2 = _powers(_A1, M1, SUBSEQUENCE_LOG2 + 64), _powers(_A2, M2, SUBSEQUENCE_LOG2 + 64)
    return _POW1, _POW2


def _jump(v, n, table, m):
    k = 0
    while n:
        if n & 1:
            v = _matvec(table[k], v, m)
        n >>= 1
        k += 1
    return v


def seeded(seed: int, seq: int, off: int):
    """The state (s1, s2) of curand_init(seed, seq, off)."""
    s1, s2 = [12345] * 3, [12345] * 3
    if seed:
        x1 = (seed & 0xFFFFFFFF) ^ 0x55555555
        x2 = ((seed >> 32) & 0xFFFFFFFF) ^ 0xAAAAAAAA
        s1 = [x1 * 12345 % M1, x2 * 12345 % M1, x1 * 12345 % M1]
        s2 = [x2 * 12345 % M2, x1 * 12345 % M2, x2 * 12345 % M2]
    p1, p2 = _tables()
    n = ((seq & ((1 << 51) - 1)) << SUBSEQUENCE_LOG2) + off  # curand masks the subsequence to 51 bits
    return _jump(s1, n, p1, M1), _jump(s2, n, p2, M2)


def step(s1, s2) -> int:
    """One draw: advances the lists s1 and s2 in place and returns r in [1, m1]."""
    p1 = (A12 * s1[1] - A13N * s1[0]) % M1
    p2 = (A21 * s2[2] - A23N * s2[0]) % M2
    s1[:] = [s1[1], s1[2], p1]
    s2[:] = [s2[1], s2[2], p2]
    return p1 - p2 if p1 > p2 else p1 - p2 + M1


class MRG32k3aStates:
    """The generator state of ``n`` threads (Python ints: the lanes are few and the work per draw is
    small next to the emulator's)."""

    def __init__(self, n: int):
        self.s = [None] * n
        self.keep_f32, self.keep_f64 = {}, {}

    def init(self, lanes, seed, seq, off) -> None:
        for lane, a, b, c in zip(lanes, seed, seq, off):
            self.s[lane] = seeded(int(a), int(b), int(c))
            self.keep_f32.pop(lane, None)
            self.keep_f64.pop(lane, None)

    def _r(self, lane) -> int:
        s1, s2 = self.s[lane]
        return step(s1, s2)

    def next_u32(self, lanes) -> np.ndarray:
        return np.array([min(int(self._r(i) * BITS_NORM), 0xFFFFFFFF) for i in lanes], np.uint32)

    def uniform_f32(self, lanes) -> np.ndarray:
        return np.array([np.float32(self._r(i) * NORM) for i in lanes], np.float32)

    def uniform_f64(self, lanes) -> np.ndarray:
        return np.array([self._r(i) * NORM for i in lanes], np.float64)

    def normal_f32(self, lanes) -> np.ndarray:
        out = np.empty(len(lanes), np.float32)
        for j, i in enumerate(lanes):
            if i in self.keep_f32:
                out[j] = self.keep_f32.pop(i)
                continue
            x = np.float32(self._r(i) * NORM)
            y = np.float32(np.float32(self._r(i) * NORM) * np.float32(6.2831855))
            s = np.sqrt(np.float32(-2.0) * np.log(x))
            out[j], self.keep_f32[i] = np.sin(y) * s, np.cos(y) * s
        return out

    def normal_f64(self, lanes) -> np.ndarray:
        out = np.empty(len(lanes), np.float64)
        for j, i in enumerate(lanes):
            if i in self.keep_f64:
                out[j] = self.keep_f64.pop(i)
                continue
            x, y = self._r(i) * NORM, self._r(i) * NORM
            s = np.sqrt(-2.0 * np.log(x))
            out[j], self.keep_f64[i] = np.sin(2 * np.pi * y) * s, np.cos(2 * np.pi * y) * s
        return out
