"""The C side of ``T.rng_*`` (language/random.py): Philox4x32-10 with curand's Philox state layout,
the same algorithm as interp/rng_philox.py (which documents it), so that the emulator and the GPU
draw the same bits.  A kernel that uses it declares one ``tw_rng_t`` per thread at its top."""

from __future__ import annotations

from ..ir import expr as E
from ..ir.verifier import exprs_of
from ..ir.visitor import walk, walk_expr

STATE = "tw_rng_state"
DRAW_FUNCTIONS = {"rng_rand": "tw_rng_rand", "rng_uniform_f32": "tw_rng_uniform_f32",
                  "rng_uniform_f64": "tw_rng_uniform_f64", "rng_normal_f32": "tw_rng_normal_f32",
                  "rng_normal_f64": "tw_rng_normal_f64"}


def uses_rng(kernel) -> bool:
    found = []

    def in_expr(e):
        if isinstance(e, E.Call) and e.name.startswith("rng_"):
            found.append(e)

    walk(kernel.body, lambda s: [walk_expr(e, in_expr) for e in exprs_of(s)])
    return bool(found)


def rng_source(qual: str, normal: bool = True) -> str:
    """The generator's C functions, ``qual`` being the device-function qualifiers; ``normal=False``
    leaves out the normal draws (they call log, sin and cos: HIP here has no device math library)."""
    text = RNG_SOURCE if normal else RNG_SOURCE[:RNG_SOURCE.index(_NORMAL_START)]
    return text.replace("TW_RNG_QUAL", qual)


_NORMAL_START = "TW_RNG_QUAL float tw_rng_normal_f32"


RNG_SOURCE = r"""
// T.rng_*: Philox4x32-10 with curand's Philox state layout (interp/rng_philox.py has the same)
struct tw_rng_t { unsigned k0, k1, s0, s1; unsigned long long pos; int has_f; float keep_f; int has_d; double keep_d; };
TW_RNG_QUAL int tw_rng_init(tw_rng_t& g, unsigned long long seed, unsigned long long seq, unsigned long long off) {
  g.k0 = (unsigned)seed; g.k1 = (unsigned)(seed >> 32); g.s0 = (unsigned)seq; g.s1 = (unsigned)(seq >> 32);
  g.pos = off; g.has_f = 0; g.has_d = 0; return 0; }
TW_RNG_QUAL unsigned tw_rng_rand(tw_rng_t& g) {
  unsigned long long q = g.pos >> 2;
  unsigned c0 = (unsigned)q, c1 = (unsigned)(q >> 32), c2 = g.s0, c3 = g.s1, k0 = g.k0, k1 = g.k1;
  for (int r = 0; r < 10; ++r) {
    unsigned long long p0 = 0xD2511F53ull * c0, p1 = 0xCD9E8D57ull * c2;
    unsigned n0 = (unsigned)(p1 >> 32) ^ c1 ^ k0, n2 = (unsigned)(p0 >> 32) ^ c3 ^ k1;
    c1 = (unsigned)p1; c3 = (unsigned)p0; c0 = n0; c2 = n2;
    if (r < 9) { k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }
  }
  unsigned w = (unsigned)(g.pos & 3); g.pos += 1;
  return w == 0 ? c0 : w == 1 ? c1 : w == 2 ? c2 : c3; }
TW_RNG_QUAL float tw_rng_uniform_f32(tw_rng_t& g) {  // the product is exact: contraction changes nothing
  return (float)tw_rng_rand(g) * 2.3283064365386963e-10f + 1.1641532182693481e-10f; }
TW_RNG_QUAL double tw_rng_uniform_f64(tw_rng_t& g) { return ((double)tw_rng_rand(g) + 1.0) * 2.3283064365386963e-10; }
TW_RNG_QUAL double tw_rng_two_words(tw_rng_t& g) {
  unsigned long long x = tw_rng_rand(g), y = tw_rng_rand(g);
  return (double)(x ^ (y << 21)); }
TW_RNG_QUAL float tw_rng_normal_f32(tw_rng_t& g) {
  if (g.has_f) { g.has_f = 0; return g.keep_f; }
  float u = tw_rng_uniform_f32(g);
  float v = (float)tw_rng_rand(g) * (2.3283064365386963e-10f * 6.2831855f) + (1.1641532182693481e-10f * 6.2831855f);
  float s = sqrtf(-2.0f * logf(u));
  g.keep_f = cosf(v) * s; g.has_f = 1;
  return sinf(v) * s; }
TW_RNG_QUAL double tw_rng_normal_f64(tw_rng_t& g) {
  if (g.has_d) { g.has_d = 0; return g.keep_d; }
  double u = tw_rng_two_words(g) * 1.1102230246251565e-16 + 5.551115123125783e-17;
  double v = tw_rng_two_words(g) * 2.220446049250313e-16 + 1.1102230246251565e-16;
  double s = sqrt(-2.0 * log(u)), sn, cs;
  sincospi(v, &sn, &cs);
  g.keep_d = cs * s; g.has_d = 1;
  return sn * s; }
"""
