"""The Philox4x32-10 generator behind ``T.rng_init`` / ``T.rng_rand`` / ``T.rng_rand_float``, on NumPy
arrays of per-thread states (the emulator's lanes); the CUDA and HIP printers emit the same
algorithm in C (codegen/rng.py), so every backend draws the same bits.

It follows curand's ``curandStatePhilox4_32_10_t`` (the generator TileLang's default names):
``curand_init(seed, seq, off)`` keys the generator with the seed's two 32-bit halves and puts the
sequence number in the counter's high 64 bits; draw number ``n`` of a thread is word ``(off + n) % 4``
of Philox4x32-10 applied to counter ``seq * 2**64 + (off + n) // 4``.  Uniform floats are
``x * 2**-32 + 2**-33`` (float32) and ``(x + 1) * 2**-32`` (float64), both in (0, 1]; normal ones are
Box-Muller pairs (float64: from two 53-bit fractions of two draws each, the angle as a multiple of
pi), the second of each pair kept for the next call.  The
uint32 and uniform draws are exact integer/float arithmetic and agree bit for bit everywhere; the
normal ones go through log, sqrt, sin and cos, whose last bit differs between math libraries.
"""

from __future__ import annotations

import numpy as np

_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_W0, _W1 = np.uint64(0x9E3779B9), np.uint64(0xBB67AE85)
_LO = np.uint64(0xFFFFFFFF)
_S32 = np.uint64(32)
TWO_PI = 6.2831855  # float32(2 * pi), as curand's CURAND_2PI


def philox4x32_10(c0, c1, c2, c3, k0, k1):
    """Philox4x32-10 of counters (c0..c3) under keys (k0, k1): uint64 arrays of 32-bit values."""
    c0, c1, c2, c3, k0, k1 = (np.asarray(v, np.uint64) for v in (c0, c1, c2, c3, k0, k1))
    for r in range(10):
        p0, p1 = _M0 * c0, _M1 * c2  # 32 x 32 -> 64-bit products
        c0, c1, c2, c3 = (p1 >> _S32) ^ c1 ^ k0, p1 & _LO, (p0 >> _S32) ^ c3 ^ k1, p0 & _LO
        if r < 9:
            k0, k1 = (k0 + _W0) & _LO, (k1 + _W1) & _LO
    return c0, c1, c2, c3


class CurandConversions:
    """curand's conversions of 32-bit draws (``next_u32``, given by a subclass) to floats, shared by
    Philox and XORWOW, with the second value of each Box-Muller pair kept per thread."""

    def __init__(self, n: int):
        self.has_f32, self.keep_f32 = np.zeros(n, bool), np.zeros(n, np.float32)
        self.has_f64, self.keep_f64 = np.zeros(n, bool), np.zeros(n, np.float64)

    def reset_normals(self, lanes) -> None:
        self.has_f32[lanes] = False
        self.has_f64[lanes] = False

    def next_u32(self, lanes) -> np.ndarray:
        raise NotImplementedError

    def uniform_f32(self, lanes) -> np.ndarray:
        x = self.next_u32(lanes).astype(np.float32)
        return (x * np.float32(2.0**-32) + np.float32(2.0**-33)).astype(np.float32)

    def _two_words(self, lanes) -> np.ndarray:
        """(x ^ y << 21) of two draws: 53 random bits, as an integer-valued float64."""
        x = self.next_u32(lanes).astype(np.uint64)
        y = self.next_u32(lanes).astype(np.uint64)
        return (x ^ (y << np.uint64(21))).astype(np.float64)

    def normal_f32(self, lanes) -> np.ndarray:
        out = np.empty(len(lanes), np.float32)
        kept = self.has_f32[lanes]
        out[kept] = self.keep_f32[lanes[kept]]
        fresh = lanes[~kept]
        if len(fresh):
            u = self.uniform_f32(fresh)
            v = (self.next_u32(fresh).astype(np.float32) * np.float32(2.0**-32 * TWO_PI)
                 + np.float32(2.0**-33 * TWO_PI)).astype(np.float32)
            s = np.sqrt(np.float32(-2.0) * np.log(u)).astype(np.float32)
            out[~kept] = np.sin(v) * s
            self.keep_f32[fresh] = np.cos(v) * s
        self.has_f32[lanes] = ~kept
        return out

    def normal_f64(self, lanes) -> np.ndarray:
        out = np.empty(len(lanes), np.float64)
        kept = self.has_f64[lanes]
        out[kept] = self.keep_f64[lanes[kept]]
        fresh = lanes[~kept]
        if len(fresh):
            u = self._two_words(fresh) * 2.0**-53 + 2.0**-54  # in (0, 1)
            v = self._two_words(fresh) * 2.0**-52 + 2.0**-53  # in (0, 2): the angle over pi
            s = np.sqrt(-2.0 * np.log(u))
            out[~kept] = np.sin(np.pi * v) * s
            self.keep_f64[fresh] = np.cos(np.pi * v) * s
        self.has_f64[lanes] = ~kept
        return out


class PhiloxStates(CurandConversions):
    """The Philox generator state of ``n`` threads: key, sequence and position."""

    def __init__(self, n: int):
        super().__init__(n)
        z = np.zeros(n, np.uint64)
        self.k0, self.k1, self.s0, self.s1, self.pos = z.copy(), z.copy(), z.copy(), z.copy(), z.copy()

    def init(self, lanes, seed, seq, off) -> None:
        """``curand_init(seed, seq, off)`` on the threads ``lanes`` (an index array)."""
        seed, seq, off = (np.broadcast_to(np.asarray(v).astype(np.uint64), lanes.shape) for v in (seed, seq, off))
        self.k0[lanes], self.k1[lanes] = seed & _LO, seed >> _S32
        self.s0[lanes], self.s1[lanes] = seq & _LO, seq >> _S32
        self.pos[lanes] = off
        self.reset_normals(lanes)

    def next_u32(self, lanes) -> np.ndarray:
        """One draw (``curand``) on each thread of ``lanes``; their positions advance by one."""
        pos = self.pos[lanes]
        q = pos >> np.uint64(2)
        words = philox4x32_10(q & _LO, q >> _S32, self.s0[lanes], self.s1[lanes], self.k0[lanes], self.k1[lanes])
        which = (pos & np.uint64(3)).astype(np.int64)
        out = np.choose(which, words).astype(np.uint32)
        self.pos[lanes] = pos + np.uint64(1)
        return out

    def uniform_f64(self, lanes) -> np.ndarray:
        """One draw: (x + 1) * 2**-32, as curand_uniform_double of a Philox state."""
        return (self.next_u32(lanes).astype(np.float64) + 1.0) * 2.0**-32


DRAWS = {"rng_rand": ("next_u32", "uint32"), "rng_uniform_f32": ("uniform_f32", "float32"),
         "rng_uniform_f64": ("uniform_f64", "float64"), "rng_normal_f32": ("normal_f32", "float32"),
         "rng_normal_f64": ("normal_f64", "float64")}


GENERATOR_KINDS = {"curandStatePhilox4_32_10_t": 0, "curandStateMRG32k3a_t": 1, "curandStateXORWOW_t": 2}


class LaneGenerators:
    """Each lane's generator, of the kind its last ``rng_init`` chose: Philox4x32-10 (here), MRG32k3a
    (rng_mrg32k3a.py) or XORWOW (rng_xorwow.py)."""

    def __init__(self, n: int):
        from .rng_mrg32k3a import MRG32k3aStates
        from .rng_xorwow import XorwowStates

        self.generators = (PhiloxStates(n), MRG32k3aStates(n), XorwowStates(n))  # by kind
        self.kind = np.full(n, -1, np.int8)  # -1: not seeded

    def init(self, lanes, seed, seq, off, kind: int) -> None:
        self.generators[kind].init(lanes, seed, seq, off)
        self.kind[lanes] = kind

    def unseeded(self, lanes):
        return lanes[self.kind[lanes] < 0]

    def draw(self, method: str, lanes, nd) -> np.ndarray:
        out = np.zeros(len(lanes), nd)
        for kind, gen in enumerate(self.generators):
            pick = self.kind[lanes] == kind
            if pick.any():
                out[pick] = getattr(gen, method)(lanes[pick])
        return out
