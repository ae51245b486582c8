"""TileLang's per-thread random numbers: ``T.rng_init(seed, seq=None, off=0, generator=...)``,
``T.rng_rand()`` (a uint32) and ``T.rng_rand_float(bit=32, dist="uniform")``.

Each thread owns a generator: ``rng_init`` seeds it (``seq`` defaults to the thread's global index,
blocks x-fastest then threads, as in TileLang), each draw advances it.  The generators are curand's
Philox4x32-10 (TileLang's default; interp/rng_philox.py), MRG32k3a (interp/rng_mrg32k3a.py) and
XORWOW (interp/rng_xorwow.py), with curand's seeding, skips and conversions.  A draw is bound to a ``let`` where it
is written, so it happens exactly there, once per executing thread (inside ``T.Parallel``, once per
element the thread holds, in its order), never hoisted or shared.  The emulator and the CUDA and HIP
backends run it; the tile interpreter has no threads and refuses it.
"""

from __future__ import annotations

from ..frontend import builder as _b
from ..ir import expr as _e
from ..ir import tile as _t
from .math import InvalidArgumentError

__all__ = ["rng_init", "rng_rand", "rng_rand_float"]

PHILOX = "curandStatePhilox4_32_10_t"
_CURAND_GENERATORS = (PHILOX, "curandStateXORWOW_t", "curandStateMRG32k3a_t")
_KINDS = {PHILOX: 0, "curandStateMRG32k3a_t": 1, "curandStateXORWOW_t": 2}  # rng_init's last operand


def _in_kernel(what: str):
    b = _b.current()
    if b.kernel is None:
        raise _b.error(f"{what} must be called inside `with T.Kernel(...)`")
    return b


def _bind(b, call: _e.Call, hint: str):
    v = _e.Var(b.fresh(hint), call.dtype, kind="let")
    b.emit(_t.LetStmt(v, call, loc=b.loc))
    return v


def _global_thread_index(b):
    k = b.kernel
    block = _e.as_expr(0)
    for var, extent in reversed(list(zip(k.block_vars, k.grid))):
        block = block * extent + var
    return _e.cast("uint64", block) * k.num_threads + _e.cast("uint64", b.thread_var)


def rng_init(seed, seq=None, off=0, generator=PHILOX):
    """Seed this thread's generator: curand_init(seed, seq, off) of the chosen curand generator."""
    b = _in_kernel("T.rng_init")
    if generator not in _CURAND_GENERATORS:
        raise InvalidArgumentError(f"T.rng_init: unknown generator {generator!r}; expected one of "
                                   f"{', '.join(_CURAND_GENERATORS)}", b.loc)
    seq = _global_thread_index(b) if seq is None else _e.cast("uint64", seq)
    args = (_e.cast("uint64", seed), seq, _e.cast("uint64", off), _e.Const(_KINDS[generator], "int32"))
    _bind(b, _e.Call("rng_init", args, "int32"), "rng_seeded")


def rng_rand():
    """The next 32 random bits of this thread's generator (a uint32)."""
    return _bind(_in_kernel("T.rng_rand"), _e.Call("rng_rand", (), "uint32"), "rng_u32")


def rng_rand_float(bit=32, dist="uniform"):
    """The next random float32 (``bit=32``) or float64 (``bit=64``) of this thread's generator:
    uniform in (0, 1], or standard normal (``dist="normal"``)."""
    b = _in_kernel("T.rng_rand_float")
    if bit not in (32, 64):
        raise InvalidArgumentError(f"T.rng_rand_float(bit={bit!r}): bit must be 32 or 64", b.loc)
    if dist not in ("uniform", "normal"):
        raise InvalidArgumentError(f"T.rng_rand_float(dist={dist!r}): dist must be 'uniform' or 'normal'", b.loc)
    return _bind(b, _e.Call(f"rng_{dist}_f{bit}", (), f"float{bit}"), f"rng_{dist}")
