"""AMD matrix operands in LDS: vector reads, the operand layouts, and the emulator's bank-conflict
counter (tilewright/interp/emulator/bank_conflicts.py, passes/lower_gemm_amd.py,
passes/lower_copy_packed.py, ir/layout_packed.py)."""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest
from toolchains import hip_compiler_available

import tilewright
import tilewright.language as T
from tilewright.interp.emulator.bank_conflicts import CDNA3, NVIDIA, RDNA, BankCounter, count_bank_conflicts
from tilewright.ir.layout_packed import KPackedLayout, PaddedRowsLayout, SwizzledRowsLayout
from tilewright.kernels import flash_attention, matmul
from tilewright.ops import kernels as op_kernels

ARCHS = ("gfx942", "gfx90a", "gfx1100")


# ---------------------------------------------------------------- layouts


@pytest.mark.parametrize("make", [
    lambda: KPackedLayout((32, 128), "float16", 4),
    lambda: KPackedLayout((32, 128), "float16", 8, 256),
    lambda: KPackedLayout((3, 32, 128), "float16", 8, 256, "pad"),
    lambda: KPackedLayout((2, 64, 64), "bfloat16", 4, 128, "pad"),
    lambda: KPackedLayout((16, 48), "float16", 8),
    lambda: KPackedLayout((32, 64), "int8", 16),
    lambda: SwizzledRowsLayout((128, 32), "float16", 128),
    lambda: SwizzledRowsLayout((3, 64, 128), "float16", 256),
    lambda: SwizzledRowsLayout((64, 48), "float16", 256),
    lambda: PaddedRowsLayout((2, 64, 128), "float16"),
    lambda: PaddedRowsLayout((32, 64), "float32", 256),
])
def test_operand_layouts_are_one_to_one(make):
    lay = make()
    idx = np.indices(lay.shape).reshape(len(lay.shape), -1)
    off = np.asarray(lay.offset(tuple(idx)))
    assert len(np.unique(off)) == off.size
    assert off.min() >= 0 and off.max() < lay.numel


def test_packed_layout_keeps_columns_k_runs_adjacent():
    lay = KPackedLayout((32, 128), "float16", 8, 256)
    for n in (0, 5, 17, 127):
        offs = [lay.offset((k, n)) for k in range(8, 16)]
        assert offs == list(range(offs[0], offs[0] + 8)) and offs[0] % 8 == 0


# ---------------------------------------------------------------- bank-conflict model


class _Where:
    def text(self):
        return "test access"


def _count(model, byte_addrs, width, kind="read", lanes=None):
    """Extra cycles of one warp instruction: lane i accesses ``width`` bytes at ``byte_addrs[i]``."""
    addrs = np.asarray(byte_addrs, np.int64)
    n = model.warp_size
    st = SimpleNamespace(S=0, T=n, block=np.zeros(n, np.int64), tid=np.arange(n))
    lanes = np.arange(len(addrs)) if lanes is None else np.asarray(lanes)
    c = BankCounter(model)
    c.record(st, _Where(), "buf", addrs // 4, 4, width, lanes, kind)
    return c.report.extra_cycles


def test_bank_model_32bit_accesses():
    lanes = np.arange(32)
    assert _count(NVIDIA, lanes * 4, 4) == 0  # consecutive words
    assert _count(NVIDIA, np.zeros(32, int), 4) == 0  # one word: broadcast
    assert _count(NVIDIA, lanes * 128, 4) == 31  # one bank, 32 words, one phase
    assert _count(NVIDIA, lanes * 8, 4) == 1  # two lanes per bank
    # 64 banks (RDNA, WGP mode): words 32 apart are in different banks
    assert _count(RDNA, lanes * 128, 4) == 15


def test_bank_model_128bit_phases():
    lanes = np.arange(32)
    assert _count(NVIDIA, lanes * 16, 16) == 0
    assert _count(NVIDIA, lanes * 128, 16) == 4 * 7  # quarter-warp phases of 8 lanes, one bank group each
    # CDNA3 ds_read_b128: lanes {0-3, 20-23} are one phase, lanes 0 and 4 are not; two lanes
    # reading the same banks of different 128-byte rows
    assert _count(CDNA3, np.arange(64) * 16, 16) == 0
    assert _count(CDNA3, [0, 128], 16, "read", lanes=[0, 20]) == 1
    assert _count(CDNA3, [0, 128], 16, "read", lanes=[0, 4]) == 0
    assert _count(CDNA3, [0, 0], 16, "read", lanes=[0, 20]) == 0  # same words: broadcast
    # ds_write_b128: phases of 8 consecutive lanes
    assert _count(CDNA3, [0, 128], 16, "write", lanes=[0, 4]) == 1
    assert _count(CDNA3, [0, 128], 16, "write", lanes=[0, 20]) == 0


def _column_reader(col: bool, threads: int):
    @T.prim_func
    def k(A: T.Tensor((threads, 32), "float32"), B: T.Tensor((threads,), "float32")):
        with T.Kernel(1, threads=threads):
            S = T.alloc_shared((threads, 32), "float32")
            T.copy(A, S)
            for i in T.Parallel(threads):
                if col:
                    B[i] = S[i, 0]
                else:
                    B[i] = S[0, i % 32]

    return k


@pytest.mark.parametrize("target,threads", [("cuda", 32), ("hip -arch=gfx942", 64), ("hip -arch=gfx1100", 32)])
def test_counter_sees_column_reads_conflict(target, threads):
    rng = np.random.default_rng(0)
    for col in (True, False):
        kern = tilewright.compile(_column_reader(col, threads), target=target, execution_backend="emulator")
        a = rng.standard_normal((threads, 32)).astype(np.float32)
        b = np.full(threads, np.nan, np.float32)
        rep = count_bank_conflicts(kern, [a, b])
        np.testing.assert_array_equal(b, a[:, 0] if col else a[0, np.arange(threads) % 32])
        extra, accesses = rep.per_buffer()["S"]
        assert accesses > 0
        assert (extra > 0) == col, str(rep)
        assert "LDS bank conflicts:" in str(rep)


# ---------------------------------------------------------------- GEMMs on the emulator


def _gemm_case(kernel_fn, args_fn, M, N, K, ta, tb, dtype=np.float16):
    rng = np.random.default_rng(M + N + K + 2 * ta + tb)
    a = rng.standard_normal((K, M) if ta else (M, K)).astype(dtype)
    b = rng.standard_normal((N, K) if tb else (K, N)).astype(dtype)
    c = np.full((M, N), np.nan, dtype)
    ref = (a.astype(np.float64).T if ta else a.astype(np.float64)) @ (b.astype(np.float64).T if tb else
                                                                       b.astype(np.float64))
    return args_fn(a, b, c), c, ref


@pytest.mark.parametrize("arch", ("gfx942", "gfx1100"))  # gfx90a lowers exactly as gfx942 (same banks, MFMAs)
@pytest.mark.parametrize("ta,tb", [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_library_gemm_conflict_free_and_right(arch, ta, tb):
    M, N, K = 128, 128, 96
    kern = tilewright.compile(matmul(M, N, K, trans_A=bool(ta), trans_B=bool(tb), num_stages=2),
                              target=f"hip -arch={arch}", execution_backend="emulator")
    args, c, ref = _gemm_case(kern, lambda a, b, c: [a, b, c], M, N, K, ta, tb)
    rep = count_bank_conflicts(kern, args)
    assert np.max(np.abs(c.astype(np.float64) - ref)) <= 2e-3 * np.max(np.abs(ref))
    assert rep.extra_cycles == 0, str(rep)


@pytest.mark.parametrize("arch", ("gfx942", "gfx1100"))
@pytest.mark.parametrize("cfg,tb", [((64, 128, 64, 2, 128), 0), ((128, 128, 32, 4, 128), 1)])
def test_ops_matmul_kernel_conflict_free_and_right(arch, cfg, tb):
    M, N, K = cfg[0], 128, 128
    f = op_kernels.linear(N, K, "float16", "float16", False, bool(tb), False, "none", *cfg)
    kern = tilewright.compile(f, target=f"hip -arch={arch}", execution_backend="emulator")
    args, c, ref = _gemm_case(kern, lambda a, b, c: [a, b, np.zeros(1, np.float16), c], M, N, K, 0, tb)
    rep = count_bank_conflicts(kern, args, dyn={"m": M})
    assert np.max(np.abs(c.astype(np.float64) - ref)) <= 2e-3 * np.max(np.abs(ref))
    assert rep.extra_cycles == 0, str(rep)


def test_bf16_gemm_with_transposed_a_on_gfx942():
    import ml_dtypes

    M, N, K = 64, 64, 64
    kern = tilewright.compile(matmul(M, N, K, 64, 64, 32, dtype="bfloat16", trans_A=True, num_stages=2),
                              target="hip -arch=gfx942", execution_backend="emulator")
    args, c, ref = _gemm_case(kern, lambda a, b, c: [a, b, c], M, N, K, 1, 0, ml_dtypes.bfloat16)
    rep = count_bank_conflicts(kern, args)
    assert np.max(np.abs(c.astype(np.float64) - ref)) <= 1e-2 * np.max(np.abs(ref))
    assert rep.extra_cycles == 0, str(rep)


@pytest.mark.parametrize("arch", ("gfx942", "gfx1100"))
@pytest.mark.parametrize("split", ["rows", "columns"])
def test_k_packed_tile_filled_in_parts(arch, split):
    """Row bands of a K-packed B tile use the packed copy; a column range falls back to element
    stores; both give the right product."""
    M, N, K = 64, 64, 64

    @T.prim_func
    def k(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((M, K), "float16")
            B_s = T.alloc_shared((K, N), "float16")
            acc = T.alloc_fragment((M, N), "float32")
            T.copy(A, A_s)
            if split == "rows":
                T.copy(B[0:32, :], B_s[0:32, :])
                T.copy(B[32:64, :], B_s[32:64, :])
            else:
                T.copy(B[:, 0:32], B_s[:, 0:32])
                T.copy(B[:, 32:64], B_s[:, 32:64])
            T.gemm(A_s, B_s, acc, clear_accum=True)
            T.copy(acc, C)

    kern = tilewright.compile(k, target=f"hip -arch={arch}", execution_backend="emulator")
    rng = np.random.default_rng(5)
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = np.full((M, N), np.nan, np.float32)
    rep = count_bank_conflicts(kern, [a, b, c])
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert np.max(np.abs(c - ref)) <= 1e-3 * np.max(np.abs(ref))
    if split == "rows":
        assert rep.extra_cycles == 0, str(rep)


def _attention_ref(q, k, v, causal):
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    s = np.einsum("bshd,bthd->bhst", q, k) / np.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("bhst,bthd->bshd", p, v)


# head dim 128 takes smaller tiles on AMD: the default 64x64 tiles with two stages need 112 KiB of LDS
_ATTN = [(64, False, {}), (128, True, {"block_N": 32, "num_stages": 1})]


@pytest.mark.parametrize("arch", ("gfx942", "gfx1100"))
@pytest.mark.parametrize("dim,causal,cfg", _ATTN)
def test_attention_on_amd_emulator(arch, dim, causal, cfg):
    kern = tilewright.compile(flash_attention(1, 1, 128, dim, is_causal=causal, **cfg), target=f"hip -arch={arch}",
                              execution_backend="emulator")
    rng = np.random.default_rng(dim)
    q, k, v = (rng.standard_normal((1, 128, 1, dim)).astype(np.float16) for _ in range(3))
    o = np.full_like(q, np.nan)
    rep = count_bank_conflicts(kern, [q, k, v, o])
    ref = _attention_ref(q, k, v, causal)
    assert np.max(np.abs(o.astype(np.float64) - ref)) <= 3e-3 * np.max(np.abs(ref))
    for name in ("Q_shared", "K_shared", "V_shared"):  # the gemm operands
        assert rep.per_buffer()[name][0] == 0, str(rep)


def test_padding_falls_back_to_swizzle_when_lds_overflows():
    """gfx1100 pads 256-byte operand rows when the tiles fit; a kernel at the LDS limit keeps the
    XOR swizzle instead (lower_to_threads retries) and stays right and conflict-free."""
    M, N, K = 64, 64, 128

    @T.prim_func
    def k(A: T.Tensor((M, K), "float16"), B: T.Tensor((N, K), "float16"), C: T.Tensor((M, N), "float32"),
          F: T.Tensor((8000,), "float32")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((M, K), "float16")
            B_s = T.alloc_shared((N, K), "float16")
            filler = T.alloc_shared((8000,), "float32")  # 32000 bytes: 64 KiB with A_s and B_s, less 768
            acc = T.alloc_fragment((M, N), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.copy(F, filler)
            T.gemm(A_s, B_s, acc, transpose_B=True, clear_accum=True)
            T.copy(acc, C)
            T.copy(filler, F)

    kern = tilewright.compile(k, target="hip -arch=gfx1100", execution_backend="emulator")
    rng = np.random.default_rng(3)
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((N, K)).astype(np.float16)
    c = np.full((M, N), np.nan, np.float32)
    f = rng.standard_normal(8000).astype(np.float32)
    rep = count_bank_conflicts(kern, [a, b, c, f.copy()])
    ref = a.astype(np.float64) @ b.astype(np.float64).T
    assert np.max(np.abs(c - ref)) <= 1e-3 * np.max(np.abs(ref))
    assert rep.per_buffer()["A_s"][0] == 0 and rep.per_buffer()["B_s"][0] == 0, str(rep)
    assert kern.spec.shared_bytes <= 65536


# ---------------------------------------------------------------- code objects (clang-19)

needs_clang = pytest.mark.skipif(not hip_compiler_available(), reason="no HIP device compiler (clang-19)")
_SCALAR_LDS_READ = re.compile(r"\bds_(?:read|load)_(?:u16|i16|u8|i8|b16)\w*")
_VECTOR_LDS_READ = re.compile(r"\bds_(?:read|load)(?:2(?:st64)?)?_b(?:64|128)\b")


def _disassemble(kern):
    from tilewright.toolchain.hip import disassemble

    return disassemble(kern.get_code_object())


@needs_clang
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("ta,tb", [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_gemm_mainloop_reads_lds_in_vectors(arch, ta, tb):
    if arch != "gfx942" and ta != tb:
        pytest.skip("the mixed orientations once, on gfx942")
    kern = tilewright.compile(matmul(1024, 1024, 1024, trans_A=bool(ta), trans_B=bool(tb)),
                              target=f"hip -arch={arch}", execution_backend="emulator")
    dis = _disassemble(kern)
    assert re.search(r"\bv_(?:mfma|wmma)_", dis)
    assert _VECTOR_LDS_READ.search(dis), "no 64/128-bit LDS reads"
    assert not _SCALAR_LDS_READ.search(dis), _SCALAR_LDS_READ.findall(dis)[:4]
    assert kern.resource_usage["spills"] == 0, kern.resource_usage


@needs_clang
@pytest.mark.parametrize("arch", ARCHS)
def test_ops_matmul_kernel_reads_lds_in_vectors(arch):
    for cfg in ((64, 128, 64, 2, 128), (128, 128, 32, 4, 128))[(arch != "gfx942"):]:
        f = op_kernels.linear(4096, 4096, "bfloat16", "bfloat16", False, False, True, "silu", *cfg)
        kern = tilewright.compile(f, target=f"hip -arch={arch}", execution_backend="emulator")
        dis = _disassemble(kern)
        assert re.search(r"\bv_(?:mfma|wmma)_", dis)
        assert _VECTOR_LDS_READ.search(dis) and not _SCALAR_LDS_READ.search(dis)
        assert kern.resource_usage["spills"] == 0, kern.resource_usage


@needs_clang
@pytest.mark.parametrize("arch", ARCHS)
def test_attention_compiles_without_spills(arch):
    """(The norm kernels' AMD code objects are checked in test_hip_codegen.py.)"""
    for dim, causal, cfg in _ATTN:
        kern = tilewright.compile(flash_attention(2, 8, 1024, dim, is_causal=causal, **cfg),
                                  target=f"hip -arch={arch}", execution_backend="emulator")
        dis = _disassemble(kern)
        assert re.search(r"\bv_(?:mfma|wmma)_", dis)
        assert not _SCALAR_LDS_READ.search(dis), _SCALAR_LDS_READ.findall(dis)[:4]
        assert kern.resource_usage["spills"] == 0, (dim, causal, kern.resource_usage)
