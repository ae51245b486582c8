"""The C side of ``T.rng_*`` (language/random.py): Philox4x32-10 with curand's Philox state layout,
the same algorithm as interp/rng_philox.py (which documents it), so that the emulator and the GPU
draw the same bits.  A kernel that uses it declares one ``tw_rng_t`` per thread at its top."""

from __future__ import annotations

from ..ir import expr as E
from ..ir import xorwow_jump as xj
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


def rng_source(qual: str, data_qual: str, normal: bool = True) -> str:
    """The generators' C functions, ``qual`` being the device-function qualifiers and ``data_qual``
    those of device constant data; ``normal=False`` leaves out the normal draws (they call log, sin
    and cos: HIP here has no device math library)."""
    text = RNG_SOURCE if normal else RNG_SOURCE[:RNG_SOURCE.index(_NORMAL_START)]
    return text.replace("TW_RNG_QUAL", qual).replace("TW_RNG_TABLE", _xorwow_table(data_qual))


def _xorwow_table(data_qual: str) -> str:
    """x**(2**k) mod P of XORWOW's jumps (ir/xorwow_jump.py), five little-endian words each."""
    rows = []
    for k in range(xj.TABLE_SIZE):
        q = xj.jump_polynomial(k)
        rows.append("{" + ", ".join(f"{q >> (32 * w) & 0xFFFFFFFF:#x}u" for w in range(5)) + "}")
    body = ",\n  ".join(rows)
    return f"{data_qual} unsigned tw_xorwow_jump[{xj.TABLE_SIZE}][5] = {{\n  {body}}};"


_NORMAL_START = "TW_RNG_QUAL float tw_rng_normal_f32"


RNG_SOURCE = r"""
// T.rng_*: curand's Philox4x32-10 (kind 0), MRG32k3a (kind 1) and XORWOW (kind 2) with curand's seeding
// and conversions (interp/rng_philox.py, rng_mrg32k3a.py and rng_xorwow.py compute the same)
struct tw_rng_t {
  int kind; unsigned k0, k1, s0, s1; unsigned long long pos; unsigned m1[3], m2[3]; unsigned xv[5], xd;
  int has_f; float keep_f; int has_d; double keep_d; };
TW_RNG_TABLE
TW_RNG_QUAL void tw_xorwow_step(unsigned* v) {
  unsigned t = v[0] ^ (v[0] >> 2);
  unsigned n = (v[4] ^ (v[4] << 4)) ^ (t ^ (t << 1));
  v[0] = v[1]; v[1] = v[2]; v[2] = v[3]; v[3] = v[4]; v[4] = n; }
TW_RNG_QUAL void tw_xorwow_jump_by(unsigned* v, int k) {  // v = M**(2**k) v, by Horner's rule on x**(2**k) mod P
  unsigned w[5] = {0, 0, 0, 0, 0};
  for (int i = 159; i >= 0; --i) {
    tw_xorwow_step(w);
    if (tw_xorwow_jump[k][i >> 5] >> (i & 31) & 1u)
      for (int j = 0; j < 5; ++j) w[j] ^= v[j];
  }
  for (int j = 0; j < 5; ++j) v[j] = w[j]; }
TW_RNG_QUAL void tw_mrg_matmul(const unsigned long long* a, const unsigned long long* b, unsigned long long* c,
                               unsigned long long m) {
  unsigned long long t[9];
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      t[i * 3 + j] = (a[i * 3] * b[j] % m + a[i * 3 + 1] * b[3 + j] % m + a[i * 3 + 2] * b[6 + j] % m) % m;
  for (int i = 0; i < 9; ++i) c[i] = t[i]; }
TW_RNG_QUAL void tw_mrg_apply_pow(unsigned* s, unsigned long long* a, unsigned long long n, unsigned long long m) {
  while (n) {  // s = a**n s; a is squared in place
    if (n & 1) {
      unsigned long long v[3];
      for (int i = 0; i < 3; ++i) v[i] = (a[i * 3] * s[0] % m + a[i * 3 + 1] * s[1] % m + a[i * 3 + 2] * s[2] % m) % m;
      for (int i = 0; i < 3; ++i) s[i] = (unsigned)v[i];
    }
    tw_mrg_matmul(a, a, a, m);
    n >>= 1;
  } }
TW_RNG_QUAL void tw_mrg_skip(unsigned* s, const unsigned long long* base, unsigned long long m, unsigned long long off,
                             unsigned long long seq) {
  unsigned long long a[9];
  for (int i = 0; i < 9; ++i) a[i] = base[i];
  tw_mrg_apply_pow(s, a, off, m);
  for (int i = 0; i < 9; ++i) a[i] = base[i];
  for (int k = 0; k < 76; ++k) tw_mrg_matmul(a, a, a, m);  // a subsequence: 2**76 draws
  tw_mrg_apply_pow(s, a, seq & ((1ull << 51) - 1), m); }
TW_RNG_QUAL int tw_rng_init(tw_rng_t& g, unsigned long long seed, unsigned long long seq, unsigned long long off,
                            int kind) {
  g.kind = kind; g.has_f = 0; g.has_d = 0;
  if (kind == 2) {  // XORWOW: the seed's halves scrambled, then seq * 2**67 + off steps
    unsigned t0 = 1099087573u * ((unsigned)seed ^ 0xAAD26B49u);
    unsigned t1 = 2591861531u * ((unsigned)(seed >> 32) ^ 0xF7DCEFDDu);
    g.xd = 6615241u + t1 + t0 + (unsigned)off * 362437u;
    g.xv[0] = 123456789u + t0; g.xv[1] = 362436069u ^ t0; g.xv[2] = 521288629u + t1; g.xv[3] = 88675123u ^ t1;
    g.xv[4] = 5783321u + t0;
    for (int k = 0; k < 64; ++k) if (off >> k & 1) tw_xorwow_jump_by(g.xv, k);
    for (int k = 0; k < 64; ++k) if (seq >> k & 1) tw_xorwow_jump_by(g.xv, 67 + k);
    return 0;
  }
  if (kind == 1) {
    const unsigned long long m1 = 4294967087ull, m2 = 4294944443ull;
    unsigned long long x1 = 12345, x2 = 12345;
    if (seed) {
      x1 = ((unsigned)seed ^ 0x55555555u) * 12345ull;
      x2 = ((unsigned)(seed >> 32) ^ 0xAAAAAAAAu) * 12345ull;
    }
    g.m1[0] = (unsigned)(x1 % m1); g.m1[1] = (unsigned)(x2 % m1); g.m1[2] = (unsigned)(x1 % m1);
    g.m2[0] = (unsigned)(x2 % m2); g.m2[1] = (unsigned)(x1 % m2); g.m2[2] = (unsigned)(x2 % m2);
    const unsigned long long a1[9] = {0, 1, 0, 0, 0, 1, m1 - 810728ull, 1403580ull, 0};
    const unsigned long long a2[9] = {0, 1, 0, 0, 0, 1, m2 - 1370589ull, 0, 527612ull};
    tw_mrg_skip(g.m1, a1, m1, off, seq);
    tw_mrg_skip(g.m2, a2, m2, off, seq);
    return 0;
  }
  g.k0 = (unsigned)seed; g.k1 = (unsigned)(seed >> 32); g.s0 = (unsigned)seq; g.s1 = (unsigned)(seq >> 32);
  g.pos = off; return 0; }
TW_RNG_QUAL unsigned tw_mrg_r(tw_rng_t& g) {  // one MRG32k3a step: r in [1, m1]
  const unsigned long long m1 = 4294967087ull, m2 = 4294944443ull;
  unsigned long long p1 = (1403580ull * g.m1[1] + (m1 - 810728ull * g.m1[0] % m1)) % m1;
  unsigned long long p2 = (527612ull * g.m2[2] + (m2 - 1370589ull * g.m2[0] % m2)) % m2;
  g.m1[0] = g.m1[1]; g.m1[1] = g.m1[2]; g.m1[2] = (unsigned)p1;
  g.m2[0] = g.m2[1]; g.m2[1] = g.m2[2]; g.m2[2] = (unsigned)p2;
  return (unsigned)(p1 > p2 ? p1 - p2 : p1 + m1 - p2); }
TW_RNG_QUAL unsigned tw_rng_rand(tw_rng_t& g) {
  if (g.kind == 2) { tw_xorwow_step(g.xv); g.xd += 362437u; return g.xv[4] + g.xd; }
  if (g.kind == 1) {
    double v = (double)tw_mrg_r(g) * 1.000000048662;
    return v >= 4294967295.0 ? 4294967295u : (unsigned)v;
  }
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
TW_RNG_QUAL float tw_rng_uniform_f32(tw_rng_t& g) {  // the products are exact: contraction changes nothing
  if (g.kind == 1) return (float)((double)tw_mrg_r(g) * 2.3283065498378288e-10);
  return (float)tw_rng_rand(g) * 2.3283064365386963e-10f + 1.1641532182693481e-10f; }
TW_RNG_QUAL double tw_rng_two_words(tw_rng_t& g) {
  unsigned long long x = tw_rng_rand(g), y = tw_rng_rand(g);
  return (double)(x ^ (y << 21)); }
TW_RNG_QUAL double tw_rng_uniform_f64(tw_rng_t& g) {
  if (g.kind == 1) return (double)tw_mrg_r(g) * 2.3283065498378288e-10;
  if (g.kind == 2) return tw_rng_two_words(g) * 1.1102230246251565e-16 + 5.551115123125783e-17;
  return ((double)tw_rng_rand(g) + 1.0) * 2.3283064365386963e-10; }
TW_RNG_QUAL float tw_rng_normal_f32(tw_rng_t& g) {
  if (g.has_f) { g.has_f = 0; return g.keep_f; }
  float u, v;
  if (g.kind == 1) {
    u = tw_rng_uniform_f32(g);
    v = tw_rng_uniform_f32(g) * 6.2831855f;
  } else {
    u = tw_rng_uniform_f32(g);
    v = (float)tw_rng_rand(g) * (2.3283064365386963e-10f * 6.2831855f) + (1.1641532182693481e-10f * 6.2831855f);
  }
  float s = sqrtf(-2.0f * logf(u));
  g.keep_f = cosf(v) * s; g.has_f = 1;
  return sinf(v) * s; }
TW_RNG_QUAL double tw_rng_normal_f64(tw_rng_t& g) {
  if (g.has_d) { g.has_d = 0; return g.keep_d; }
  double u, v;  // v: the angle over pi
  if (g.kind == 1) {
    u = tw_rng_uniform_f64(g);
    v = 2.0 * tw_rng_uniform_f64(g);
  } else {
    u = tw_rng_two_words(g) * 1.1102230246251565e-16 + 5.551115123125783e-17;
    v = tw_rng_two_words(g) * 2.220446049250313e-16 + 1.1102230246251565e-16;
  }
  double s = sqrt(-2.0 * log(u)), sn, cs;
  sincospi(v, &sn, &cs);
  g.keep_d = cs * s; g.has_d = 1;
  return sn * s; }
"""
