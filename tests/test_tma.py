"""The TMA path (sm_90): which copies take it, what the CUDA source and the cache record, and the
host-side descriptor checks (the descriptors themselves are encoded by the CUDA driver, so their
bytes are exercised by tests/test_gpu.py on a GPU)."""

from __future__ import annotations

import numpy as np
import pytest

import tilewright
from tilewright import compiler
from tilewright.compiler import lower
from tilewright.compiler import print_source as _print
from tilewright.errors import ArgumentError, TilewrightError
from tilewright.ir import thread as th
from tilewright.ir.layout import SharedLayout, tma_boxes
from tilewright.ir.visitor import walk
from tilewright.kernels import flash_attention, matmul
from tilewright.runtime.launch_args import ArgPacker
from tilewright.runtime.tensor_maps import TensorMapEncoder, TensorMapSpec, specs_of
from tilewright.target import Target

SM90, SM80 = "cuda -arch=sm_90a", "cuda -arch=sm_80"


def _nodes(kernel, cls):
    out = []
    walk(kernel.body, lambda s: out.append(s) if isinstance(s, cls) else None)
    return out


def test_sm90_gemm_loads_through_tma_and_sm80_through_cp_async():
    k90 = lower(matmul(512, 512, 512, 128, 128, 32, num_stages=3), SM90)
    assert [(tm.param.name, tm.box, tm.swizzle) for tm in k90.tensor_maps] == [("A", (128, 32), 64),
                                                                            ("B", (32, 64), 128)]
    # warp-specialized by default: the producer's loop issues the 3 boxes of a stage (B's 256-byte
    # rows take two); without it, the prologue's stages are unrolled
    assert len(_nodes(k90, th.TmaLoad)) == 3 and k90.num_threads == 128 + 128
    assert not _nodes(k90, th.AsyncCopy)
    from tilewright.passes.pipeline import PassContext, run_pipeline

    plain = run_pipeline(matmul(512, 512, 512, 128, 128, 32, num_stages=3),
                         PassContext(Target.parse(SM90), {"tl.disable_warp_specialized": True}))
    assert len(_nodes(plain, th.TmaLoad)) == 3 * 3 and plain.num_threads == 128
    k80 = lower(matmul(512, 512, 512, 128, 128, 32, num_stages=3), SM80)
    assert not k80.tensor_maps and _nodes(k80, th.AsyncCopy)


def test_tma_is_skipped_where_it_cannot_apply():
    # A's rows are 500 bytes: not a multiple of 16, which TMA strides must be
    k = lower(matmul(200, 136, 250, 128, 128, 32, num_stages=3), SM90)
    assert not k.tensor_maps and _nodes(k, th.AsyncCopy)
    # turned off by the user (our key or TileLang's)
    from tilewright.passes.pipeline import PassContext, run_pipeline

    for key in ("tw.disable_tma", "tl.disable_tma_lower"):
        k = run_pipeline(matmul(512, 512, 512, 128, 128, 32), PassContext(Target.parse(SM90), {key: True}))
        assert not k.tensor_maps


def test_cuda_source_of_a_tma_kernel():
    k = lower(matmul(512, 512, 512, 128, 128, 32, num_stages=3), SM90)
    src = _print(k, Target.parse(SM90))
    assert "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes" in src
    assert "const __grid_constant__ tw_tensor_map_t tw_tmap0" in src and "tw_tmap1" in src
    assert "mbarrier.try_wait.parity" in src and "__align__(1024)" in src
    assert "cp.async.cg" not in src


def test_attention_streams_k_and_v_through_tma():
    k = lower(flash_attention(1, 2, 256, 128, False, 64, 64, 2, 128), SM90)
    # (and the output tile leaves through a TMA store: plan_tma_stores)
    assert [(tm.param.name, tm.box) for tm in k.tensor_maps] == [("K", (1, 64, 1, 64)), ("V", (1, 64, 1, 64)),
                                                                  ("Output", (1, 64, 1, 64))]


def test_tma_layout_matches_the_ldmatrix_swizzle_and_blocks_wide_rows():
    r, c = np.meshgrid(np.arange(64), np.arange(32), indexing="ij")
    assert (SharedLayout((64, 32), "float16", tma=True).offset((r, c))
            == SharedLayout((64, 32), "float16", swizzle=True).offset((r, c))).all()
    wide = SharedLayout((32, 128), "float16", tma=True)
    assert wide.tma_swizzle == 128 and wide.block_cols == 64 and tma_boxes((32, 128), "float16") == (2, 64)
    r, c = np.meshgrid(np.arange(32), np.arange(128), indexing="ij")
    offs = wide.offset((r, c))
    assert np.unique(offs).size == 32 * 128 and offs.max() == 32 * 128 - 1
    assert (offs[:, 64:] >= 32 * 64).all()  # the second column block follows the first


def test_descriptor_checks_and_cache(monkeypatch):
    from tilewright.runtime import tensor_maps as tmod

    k = lower(matmul(512, 512, 512, 128, 128, 32, num_stages=3), SM90)
    specs = specs_of(k)
    assert [TensorMapSpec.from_json(s.to_json()).to_json() for s in specs] == [s.to_json() for s in specs]
    calls = []
    monkeypatch.setattr(tmod, "_encode_tiled", lambda spec, ptr, shape, strides, where:
                        calls.append((ptr, shape, strides)) or bytes([len(calls)]) * 128)
    enc = TensorMapEncoder(specs, k.params, "gemm")
    out = enc.encode([4096, 8192, 0], {})
    assert [len(x) for x in out] == [128, 128] and calls == [(4096, (512, 512), (512, 1)),
                                                              (8192, (512, 512), (512, 1))]
    enc.encode([4096, 8192, 0], {})
    assert len(calls) == 2, "the same tensors reuse their descriptors"
    with pytest.raises(ArgumentError, match="16-byte aligned.*tw.disable_tma"):
        enc.encode([4104, 8192, 0], {})


def test_packer_takes_descriptors_by_value():
    p = ArgPacker(("ptr", "i32", "tmap"))
    assert p.offsets == (0, 8, 128) and p.size == 256
    assert p.pack_address([1, 2, bytes(range(128))])


def test_export_refuses_tma_kernels_with_a_hint(tmp_path):
    k = tilewright.compile(matmul(256, 256, 128, 64, 64, 32), target=SM90, execution_backend="emulator")
    with pytest.raises(TilewrightError, match="tw.disable_tma"):
        k.export(str(tmp_path / "ext"))


def test_tma_kernel_compiles_and_caches_its_descriptors(tmp_path, monkeypatch):
    pytest.importorskip("cuda.bindings.nvrtc")
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path))
    f = matmul(512, 512, 512, 128, 128, 32, num_stages=3)
    k1 = tilewright.compile(f, target=SM90)
    assert k1._arg_types[-2:] == ("tmap", "tmap") and k1.resource_usage["spills"] == 0
    compiler._memo_by_obj.clear()
    compiler._memo_by_text.clear()
    k2 = tilewright.compile(f, target=SM90)  # from the disk cache
    assert k2._arg_types == k1._arg_types and [s.to_json() for s in k2._tma.specs] == \
        [s.to_json() for s in k1._tma.specs]


@pytest.mark.parametrize("case", ["fp32_simt", "dynamic_m", "tile_larger_than_tensor", "fp8"])
def test_tma_gemms_match_float64_on_the_emulator(case):
    """Kernels whose pipelined copies take TMA on sm_90, run per thread on the CPU (race checks on)."""
    import ml_dtypes

    import tilewright.language as T
    from tilewright.interp.emulator import run_thread_kernel

    rng = np.random.default_rng(7)
    if case == "fp32_simt":
        M, N, K, f, dtype, out = 128, 128, 96, matmul(128, 128, 96, 64, 64, 32, dtype="float32", num_stages=3), \
            np.float32, np.float32
    elif case == "dynamic_m":
        M, N, K = 100, 128, 128
        f, dtype, out = matmul(T.dynamic("m"), N, K, 64, 64, 32, num_stages=3), np.float16, np.float16
    elif case == "tile_larger_than_tensor":
        M, N, K, f, dtype, out = 40, 48, 64, matmul(40, 48, 64, 128, 128, 32, num_stages=2), np.float16, np.float16
    else:
        M, N, K = 64, 64, 128
        f = matmul(M, N, K, 64, 64, 64, dtype="float8_e4m3fn", out_dtype="float32", num_stages=2)
        dtype, out = ml_dtypes.float8_e4m3fn, np.float32
    k = lower(f, SM90)
    assert k.tensor_maps
    a = rng.standard_normal((M, K)).astype(dtype)
    b = rng.standard_normal((K, N)).astype(dtype)
    c = np.full((M, N), np.nan, out)
    run_thread_kernel(k, [a, b, c], check_races=True)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert np.abs(c.astype(np.float64) - ref).max() <= 1e-2 * np.abs(ref).max()


def _pipelined_row_sum(M, N, bm, stages=3):
    """``out[j] = sum_i A[i, j]`` streaming (bm, N) tiles of A through a pipelined shared ring."""
    import tilewright.language as T

    @T.prim_func
    def colsum(A: T.Tensor((M, N), "float16"), out: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=128):
            tile = T.alloc_shared((bm, N), "float16")
            acc = T.alloc_fragment((N,), "float32")
            part = T.alloc_fragment((bm, N), "float32")
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(M, bm), num_stages=stages):
                T.copy(A[k * bm, 0], tile)
                T.copy(tile, part)
                T.reduce_sum(part, acc, dim=0, clear=False)
            T.copy(acc, out)

    return colsum


@pytest.mark.parametrize("bm,uses_tma", [(8, True), (4, False)])
def test_tiles_of_fewer_than_8_rows_stay_on_cp_async(bm, uses_tma):
    """TMA swizzles by address bits with an 8-row period: shorter tiles would land misplaced."""
    from tilewright.interp.emulator import run_thread_kernel

    M, N = 40, 64
    k = lower(_pipelined_row_sum(M, N, bm), SM90)
    assert bool(k.tensor_maps) == uses_tma
    a = np.random.default_rng(3).standard_normal((M, N)).astype(np.float16)
    out = np.full(N, np.nan, np.float32)
    run_thread_kernel(k, [a, out], check_races=True)
    np.testing.assert_allclose(out, a.astype(np.float64).sum(0), rtol=1e-3, atol=1e-3)


def test_descriptors_of_a_dynamic_shape_follow_the_bound_size(monkeypatch):
    import tilewright.language as T
    from tilewright.runtime import tensor_maps as tmod

    m = T.dynamic("m")
    k = lower(matmul(m, 256, 128, 64, 64, 32, num_stages=3), SM90)
    calls = []
    monkeypatch.setattr(tmod, "_encode_tiled", lambda spec, ptr, shape, strides, where:
                        calls.append(shape) or bytes(128))
    enc = TensorMapEncoder(specs_of(k), k.params, "gemm")
    assert not enc._static
    enc.encode([4096, 8192, 0], {m: 200})
    enc.encode([4096, 8192, 0], {m: 200})
    enc.encode([4096, 8192, 0], {m: 300})  # same buffer, new size: A's descriptor is encoded again
    assert calls == [(200, 128), (128, 256), (300, 128)]
