"""TileLang's per-thread random numbers (``T.rng_init``, ``T.rng_rand``, ``T.rng_rand_float``): the
Philox4x32-10 model against Random123's known-answer vectors, kernels on the emulator for sm_90a and
gfx942 bit for bit against draws computed here from the model (TileLang's own example checks the
same numbers against Triton's ``randint4x``), a draw under a guard, per-thread streams, the
refusals, and the generated code through NVRTC and clang; on an NVIDIA GPU where there is one.
"""

from __future__ import annotations

import numpy as np
import pytest
from toolchains import needs_hip_compiler, needs_nvrtc

import tilewright
import tilewright.language as T
from tilewright.errors import CompileError
from tilewright.interp import rng_mrg32k3a as mrg
from tilewright.interp.rng_philox import PhiloxStates, philox4x32_10
from tilewright.interp.tile import InterpError
from tilewright.ir import xorwow_jump as xj

CUDA, GFX942 = "cuda -arch=sm_90a", "hip -arch=gfx942"
EMULATORS = [(CUDA, "emulator"), (GFX942, "emulator")]
EMULATOR_IDS = ["emulator-sm_90a", "emulator-gfx942"]


def test_philox_known_answers():
    """Random123's known-answer vectors for Philox4x32-10."""
    cases = [((0, 0, 0, 0, 0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
             ((0xFFFFFFFF,) * 6, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
             ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344, 0xA4093822, 0x299F31D0),
              (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1))]
    for args, want in cases:
        assert tuple(int(w) for w in philox4x32_10(*args)) == want


def word(seed, seq, pos):
    """Draw number ``pos`` of a stream, straight from the definition (curand's Philox layout)."""
    q = pos // 4
    w = philox4x32_10(q & 0xFFFFFFFF, q >> 32, seq & 0xFFFFFFFF, seq >> 32, seed & 0xFFFFFFFF, seed >> 32)
    return int(w[pos % 4])


def uniform32(x):
    return np.float32(np.float32(x) * np.float32(2.0**-32) + np.float32(2.0**-33))


def uniform64(x):
    return (x + 1) * 2.0**-32


def rand_1d(M, seed):
    """TileLang's test kernel: one thread per block draws 128 values of each kind in order."""
    per = 128

    @T.prim_func
    def main(A: T.Tensor((M,), "uint32"), B: T.Tensor((M,), "float32"), C: T.Tensor((M,), "float64")):
        with T.Kernel(T.ceildiv(M, per), threads=1) as bx:
            tx = T.get_thread_binding()
            T.rng_init(seed, 0, bx * per + tx * per)
            for i, j in T.Parallel(1, per):
                idx = (bx + i) * per + j
                if idx < M:
                    A[idx] = T.rng_rand()
            for i, j in T.Parallel(1, per):
                idx = (bx + i) * per + j
                if idx < M:
                    B[idx] = T.rng_rand_float()
            for i, j in T.Parallel(1, per):
                idx = (bx + i) * per + j
                if idx < M:
                    C[idx] = T.rng_rand_float(bit=64)

    return main


@pytest.mark.parametrize("seed", [0, 42, 2**40 + 123])
def test_rand_1d(seed, target=CUDA, backend="emulator"):  # one thread per block: not a whole AMD wave
    M = 384
    a, b, c = np.zeros(M, np.uint32), np.full(M, np.nan, np.float32), np.full(M, np.nan)
    tilewright.compile(rand_1d(M, seed), target=target, execution_backend=backend)(a, b, c)
    base = [(i // 128) * 128 for i in range(M)]
    want_a = [word(seed, 0, base[i] + i % 128) for i in range(M)]
    want_b = [uniform32(word(seed, 0, base[i] + 128 + i % 128)) for i in range(M)]
    want_c = [uniform64(word(seed, 0, base[i] + 256 + i % 128)) for i in range(M)]
    assert np.array_equal(a, np.array(want_a, np.uint32))
    assert np.array_equal(b, np.array(want_b, np.float32))
    assert np.array_equal(c, np.array(want_c))
    assert 0 < b.min() and b.max() <= 1 and 0 < c.min() and c.max() <= 1
    if seed == 42:  # TileLang's example: the first 128 equal Triton's randint4x(42, 0..31)
        assert [int(x) for x in a[:8]] == [int(w) for o in (0, 1) for w in philox4x32_10(o, 0, 0, 0, 42, 0)]


def per_thread_kernel(seed, threads=64, draws=3, default_seq=True):
    @T.prim_func
    def main(A: T.Tensor((2 * threads * draws,), "uint32")):
        with T.Kernel(2, threads=threads) as bx:
            tx = T.get_thread_binding()
            if default_seq:
                T.rng_init(seed)
            else:
                T.rng_init(seed, tx, 5)
            for k in T.serial(draws):
                A[(bx * threads + tx) * draws + k] = T.rng_rand()

    return main


@pytest.mark.parametrize("target,backend", EMULATORS, ids=EMULATOR_IDS)
@pytest.mark.parametrize("default_seq", [True, False])
def test_each_thread_has_its_own_stream(default_seq, target, backend):
    threads, draws = 64, 3
    a = np.zeros(2 * threads * draws, np.uint32)
    tilewright.compile(per_thread_kernel(7, threads, draws, default_seq), target=target, execution_backend=backend)(a)
    want = []
    for bx in range(2):
        for tx in range(threads):
            seq, off = (bx * threads + tx, 0) if default_seq else (tx, 5)
            want += [word(7, seq, off + k) for k in range(draws)]
    assert np.array_equal(a, np.array(want, np.uint32))


# ============================================================================================
# MRG32k3a


def test_mrg32k3a_model():
    """L'Ecuyer's published first output for the all-12345 seeds (seed 0 in curand), and jumps by
    matrix powers equal to stepping."""
    s1, s2 = mrg.seeded(0, 0, 0)
    first = [mrg.step(s1, s2) for _ in range(40)]
    assert abs(first[0] / (mrg.M1 + 1) - 0.1270111220) < 1e-9
    for off in (1, 5, 17, 39):
        a, b = mrg.seeded(0, 0, off)
        assert mrg.step(a, b) == first[off]
    a, b = mrg.seeded(99, 1, 0)  # offsets and subsequences combine: 5 steps on from subsequence 1
    for _ in range(5):
        mrg.step(a, b)
    assert (a, b) == tuple(mrg.seeded(99, 1, 5))

    def power(mat, m, squarings):  # mat ** (2 ** squarings) mod m, written out here
        for _ in range(squarings):
            mat = [[sum(mat[i][k] * mat[k][j] for k in range(3)) % m for j in range(3)] for i in range(3)]
        return mat

    j1 = power([[0, 1, 0], [0, 0, 1], [mrg.M1 - mrg.A13N, mrg.A12, 0]], mrg.M1, 76)  # a subsequence: 2**76 draws
    j2 = power([[0, 1, 0], [0, 0, 1], [mrg.M2 - mrg.A23N, 0, mrg.A21]], mrg.M2, 76)
    s1, s2 = mrg.seeded(99, 1, 0)
    t1, t2 = mrg.seeded(99, 2, 0)
    assert t1 == [sum(j1[i][k] * s1[k] for k in range(3)) % mrg.M1 for i in range(3)]
    assert t2 == [sum(j2[i][k] * s2[k] for k in range(3)) % mrg.M2 for i in range(3)]


def mrg_kernel(seed, threads=64, draws=4):
    @T.prim_func
    def main(A: T.Tensor((2 * threads * draws,), "uint32"), U: T.Tensor((2 * threads * draws,), "float32"),
             D: T.Tensor((2 * threads * draws,), "float64")):
        with T.Kernel(2, threads=threads) as bx:
            tx = T.get_thread_binding()
            T.rng_init(seed, tx % 3, bx * 7 + tx, generator="curandStateMRG32k3a_t")
            for k in T.serial(draws):
                g = (bx * threads + tx) * draws + k
                A[g] = T.rng_rand()
                U[g] = T.rng_rand_float()
                D[g] = T.rng_rand_float(bit=64)

    return main


@pytest.mark.parametrize("target,backend", EMULATORS, ids=EMULATOR_IDS)
def test_mrg32k3a_kernels(target, backend):
    threads, draws, seed = 64, 4, 2**33 + 5
    n = 2 * threads * draws
    a, u, d = np.zeros(n, np.uint32), np.full(n, np.nan, np.float32), np.full(n, np.nan)
    tilewright.compile(mrg_kernel(seed, threads, draws), target=target, execution_backend=backend)(a, u, d)
    wa, wu, wd = [], [], []
    for bx in range(2):
        for tx in range(threads):
            s1, s2 = mrg.seeded(seed, tx % 3, bx * 7 + tx)
            for _ in range(draws):
                wa.append(min(int(mrg.step(s1, s2) * 1.000000048662), 2**32 - 1))
                wu.append(np.float32(mrg.step(s1, s2) * 2.3283065498378288e-10))
                wd.append(mrg.step(s1, s2) * 2.3283065498378288e-10)
    assert np.array_equal(a, np.array(wa, np.uint32))
    assert np.array_equal(u, np.array(wu, np.float32))
    assert np.array_equal(d, np.array(wd))
    assert 0 < u.min() and u.max() <= 1


# ============================================================================================
# XORWOW


def xorwow_reference(seed, seq, off, count):
    """Draws straight from the definition: scrambled seed, then seq * 2**67 + off steps by the jump
    polynomials (checked against plain stepping in test_xorwow_jumps), then plain steps."""
    s0, s1 = (seed & 0xFFFFFFFF) ^ 0xAAD26B49, (seed >> 32) ^ 0xF7DCEFDD
    t0, t1 = 1099087573 * s0 & 0xFFFFFFFF, 2591861531 * s1 & 0xFFFFFFFF
    v = [(123456789 + t0) & 0xFFFFFFFF, 362436069 ^ t0, (521288629 + t1) & 0xFFFFFFFF, 88675123 ^ t1,
         (5783321 + t0) & 0xFFFFFFFF]
    d = (6615241 + t1 + t0 + 362437 * off) & 0xFFFFFFFF
    n, k = (seq << 67) + off, 0
    while n:
        if n & 1:
            v = xj.jump_words(v, xj.jump_polynomial(k))
        n, k = n >> 1, k + 1
    out = []
    for _ in range(count):
        v = xj.step_words(v)
        d = (d + 362437) & 0xFFFFFFFF
        out.append((v[4] + d) & 0xFFFFFFFF)
    return out


def test_xorwow_jumps():
    v = [123456789, 362436069, 521288629, 88675123, 5783321]
    stepped = [v]
    for _ in range(300):
        stepped.append(xj.step_words(stepped[-1]))
    for n in (1, 2, 3, 37, 128, 255, 300):
        w, m, k = v, n, 0
        while m:
            if m & 1:
                w = xj.jump_words(w, xj.jump_polynomial(k))
            m, k = m >> 1, k + 1
        assert w == stepped[n], n
    # the table is x**(2**k) mod P: squaring one entry gives the next
    for k in (0, 66, 67, 100):
        a = xj.jump_words(xj.jump_words(v, xj.jump_polynomial(k)), xj.jump_polynomial(k))
        assert a == xj.jump_words(v, xj.jump_polynomial(k + 1))


def xorwow_kernel(seed, threads=64, draws=3):
    @T.prim_func
    def main(A: T.Tensor((2 * threads * draws,), "uint32"), D: T.Tensor((2 * threads * draws,), "float64")):
        with T.Kernel(2, threads=threads) as bx:
            tx = T.get_thread_binding()
            T.rng_init(seed, tx % 5, bx * 11 + tx, generator="curandStateXORWOW_t")
            for k in T.serial(draws):
                g = (bx * threads + tx) * draws + k
                A[g] = T.rng_rand()
                D[g] = T.rng_rand_float(bit=64)

    return main


@pytest.mark.parametrize("target,backend", EMULATORS, ids=EMULATOR_IDS)
def test_xorwow_kernels(target, backend):
    threads, draws, seed = 64, 3, 2**35 + 77
    n = 2 * threads * draws
    a, d = np.zeros(n, np.uint32), np.full(n, np.nan)
    tilewright.compile(xorwow_kernel(seed, threads, draws), target=target, execution_backend=backend)(a, d)
    wa, wd = [], []
    for bx in range(2):
        for tx in range(threads):
            w = xorwow_reference(seed, tx % 5, bx * 11 + tx, 3 * draws)
            for k in range(draws):
                wa.append(w[3 * k])
                wd.append(float(w[3 * k + 1] ^ (w[3 * k + 2] << 21)) * 2.0**-53 + 2.0**-54)
    assert np.array_equal(a, np.array(wa, np.uint32))
    assert np.array_equal(d, np.array(wd))


def guarded_kernel(M, seed, guarded, generator="curandStatePhilox4_32_10_t"):
    threads = 64

    @T.prim_func
    def main(A: T.Tensor((M,), "uint32"), n: T.int32):
        with T.Kernel(M, threads=threads) as bx:
            tx = T.get_thread_binding()
            s = T.alloc_shared((threads,), "int32")
            if bx < n or not guarded:
                T.rng_init(seed, 0, bx, generator=generator)
                s[tx] = 1
                T.cumsum(s, dim=0)
                if tx == 0:
                    A[bx] = T.rng_rand() + T.cast(s[threads - 1], "uint32") * 0

    return main


@pytest.mark.parametrize("target,backend", EMULATORS, ids=EMULATOR_IDS)
@pytest.mark.parametrize("generator", ["curandStatePhilox4_32_10_t", "curandStateMRG32k3a_t", "curandStateXORWOW_t"])
def test_init_under_a_guard(generator, target, backend):
    M, n, sentinel = 16, 9, 0xDEADBEEF
    a = np.full(M, sentinel, np.uint32)
    tilewright.compile(guarded_kernel(M, 42, True, generator), target=target, execution_backend=backend)(a, n)
    if generator.startswith("curandStatePhilox"):
        want = [word(42, 0, bx) for bx in range(n)]
    elif generator.startswith("curandStateXORWOW"):
        want = [xorwow_reference(42, 0, bx, 1)[0] for bx in range(n)]
    else:
        want = [min(int(mrg.step(*mrg.seeded(42, 0, bx)) * 1.000000048662), 2**32 - 1) for bx in range(n)]
    assert np.array_equal(a[:n], np.array(want, np.uint32))
    assert (a[n:] == sentinel).all()


@pytest.mark.parametrize("target,backend", EMULATORS, ids=EMULATOR_IDS)
def test_normal_draws_follow_box_muller(target, backend):
    """Pairs from two uniform draws: float32 and float64 (the last bits are the math library's)."""
    if target == GFX942:
        with pytest.raises(CompileError, match="dist='normal'.*not available in the HIP backend"):
            tilewright.compile(normal_kernel(), target=target, execution_backend=backend)
        return
    d, e = np.full(256, np.nan, np.float32), np.full(256, np.nan)
    tilewright.compile(normal_kernel(), target=target, execution_backend=backend)(d, e)
    g = PhiloxStates(1)
    g.init(np.array([0]), 3, 0, 0)
    ref32 = np.array([g.normal_f32(np.array([0]))[0] for _ in range(256)], np.float64)
    g.init(np.array([0]), 3, 0, 0)  # the kernel seeds again
    ref64 = np.array([g.normal_f64(np.array([0]))[0] for _ in range(256)])
    np.testing.assert_allclose(d, ref32, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(e, ref64, rtol=1e-12, atol=1e-12)
    u = np.array([uniform32(word(3, 0, 0))], np.float64)  # the first pair's radius
    assert abs(abs(d[0]) - np.sqrt(-2 * np.log(u[0])) * abs(np.sin(
        np.float32(word(3, 0, 1)) * 2.0**-32 * 6.2831855 + 2.0**-33 * 6.2831855))) < 1e-4
    assert abs(np.mean(e)) < 0.25 and 0.7 < np.std(e) < 1.3


def normal_kernel():
    @T.prim_func
    def main(D: T.Tensor((256,), "float32"), E: T.Tensor((256,), "float64")):
        with T.Kernel(1, threads=64):
            tx = T.get_thread_binding()
            T.rng_init(3, tx, 0)
            if tx == 0:
                for i in T.serial(256):
                    D[i] = T.rng_rand_float(dist="normal")
            T.rng_init(3, tx, 0)
            if tx == 0:
                for i in T.serial(256):
                    E[i] = T.rng_rand_float(bit=64, dist="normal")

    return main


def test_refusals():
    with pytest.raises(ValueError, match="unknown generator 'curandStateSobol32_t'"):
        @T.prim_func
        def sobol(A: T.Tensor((32,), "uint32")):
            with T.Kernel(1, threads=32):
                T.rng_init(1, generator="curandStateSobol32_t")
                A[0] = T.rng_rand()

    with pytest.raises(ValueError, match="bit must be 32 or 64"):
        @T.prim_func
        def bits(A: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32):
                T.rng_init(1)
                A[0] = T.rng_rand_float(bit=16)

    with pytest.raises(InterpError, match="tile interpreter has no threads"):
        tilewright.compile(per_thread_kernel(1), target="interpret")(np.zeros(384, np.uint32))

    from tilewright.interp.emulator.errors import EmulatorError

    @T.prim_func
    def unseeded(A: T.Tensor((32,), "uint32")):
        with T.Kernel(1, threads=32):
            tx = T.get_thread_binding()
            A[tx] = T.rng_rand()

    with pytest.raises(EmulatorError, match="before T.rng_init"):
        tilewright.compile(unseeded, target=CUDA, execution_backend="emulator")(np.zeros(32, np.uint32))


@needs_nvrtc
def test_cuda_compiles(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path))
    for func in (rand_1d(384, 42), normal_kernel(), guarded_kernel(16, 42, True), mrg_kernel(5), xorwow_kernel(5)):
        k = tilewright.compile(func, target=CUDA)
        assert k.get_code_object()[:4] == b"\x7fELF"
        assert "tw_rng_t tw_rng_state;" in k.get_kernel_source()


@needs_hip_compiler
def test_hip_compiles(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path))
    for func in (per_thread_kernel(42), guarded_kernel(16, 42, True), mrg_kernel(5), xorwow_kernel(5)):
        assert tilewright.compile(func, target=GFX942).get_code_object()[:4] == b"\x7fELF"


def test_on_gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU with a CUDA build of PyTorch")
    M, seed = 384, 42
    args = [torch.zeros(M, dtype=torch.uint32, device="cuda"), torch.full((M,), float("nan"), device="cuda"),
            torch.full((M,), float("nan"), dtype=torch.float64, device="cuda")]
    tilewright.compile(rand_1d(M, seed), target="cuda")(*args)
    ref = [np.zeros(M, np.uint32), np.full(M, np.nan, np.float32), np.full(M, np.nan)]
    tilewright.compile(rand_1d(M, seed), target=CUDA, execution_backend="emulator")(*ref)
    for got, want in zip(args, ref):
        assert np.array_equal(got.cpu().numpy(), want)
    d = torch.full((256,), float("nan"), device="cuda")
    e = torch.full((256,), float("nan"), dtype=torch.float64, device="cuda")
    tilewright.compile(normal_kernel(), target="cuda")(d, e)
    rd, re_ = np.full(256, np.nan, np.float32), np.full(256, np.nan)
    tilewright.compile(normal_kernel(), target=CUDA, execution_backend="emulator")(rd, re_)
    np.testing.assert_allclose(d.cpu().numpy(), rd, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(e.cpu().numpy(), re_, rtol=1e-12, atol=1e-12)


def test_mrg32k3a_and_xorwow_on_gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU with a CUDA build of PyTorch")
    n = 2 * 64 * 4
    mk = [torch.zeros(n, dtype=torch.uint32, device="cuda"), torch.full((n,), float("nan"), device="cuda"),
          torch.full((n,), float("nan"), dtype=torch.float64, device="cuda")]
    tilewright.compile(mrg_kernel(11), target="cuda")(*mk)
    ref = [np.zeros(n, np.uint32), np.full(n, np.nan, np.float32), np.full(n, np.nan)]
    tilewright.compile(mrg_kernel(11), target=CUDA, execution_backend="emulator")(*ref)
    for got, want in zip(mk, ref):
        assert np.array_equal(got.cpu().numpy(), want)
    n = 2 * 64 * 3
    xk = [torch.zeros(n, dtype=torch.uint32, device="cuda"),
          torch.full((n,), float("nan"), dtype=torch.float64, device="cuda")]
    tilewright.compile(xorwow_kernel(11), target="cuda")(*xk)
    ref = [np.zeros(n, np.uint32), np.full(n, np.nan)]
    tilewright.compile(xorwow_kernel(11), target=CUDA, execution_backend="emulator")(*ref)
    for got, want in zip(xk, ref):
        assert np.array_equal(got.cpu().numpy(), want)
