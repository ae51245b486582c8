"""Session 11: a staged GEMM epilogue whose column chunks alternate between two shared buffers
(``GemmConfig.store_bufs=2``, ``kernels.gemm.staging_buffers``), and ``plan_tma_stores`` waiting only for the
store of two chunks back (``wait_group.read 1``).  On the sm_90a emulator against float64 with NaN-poisoned
outputs (ragged M, N and K, fp16 / bf16, bias and activation epilogues, B transposed); the emulator reporting
a write into a buffer a TMA store still reads when that wait is dropped; names, shared-memory accounting and
``gemm_configs.s11_candidates`` (timed on the H200, none won: off the candidate lists, the heuristic unchanged);
NVRTC builds without spills."""

import re

import pytest
from test_s10_gemm_candidates import _compile, run_on_the_emulator
from toolchains import needs_nvrtc

from tilewright.interp.emulator.errors import RaceError
from tilewright.ops import gemm_configs
from tilewright.ops.gemm_configs import GemmConfig
from tilewright.passes import plan_tma_stores

P = GemmConfig.parse
EMULATED = [
    # (config, M, N, K, dtype, trans_b, activation): ragged edges in every dimension, several tiles per block
    (P("persistent 128x192x64 s5 t256 g8 wgmma ws tma-store/32x2 c2x1"), 200, 584, 360, "bfloat16", False, "silu"),
    (P("persistent 128x192x64 s4 t256 g8 wgmma ws tma-store/64x2 c2x1"), 136, 392, 200, "float16", True, "relu"),
    (P("persistent 128x192x64 s5 t256 g8 wgmma ws tma-store/32x2"), 264, 400, 136, "float16", False, "none"),
    (P("persistent 128x256x64 s4 t256 g8 wgmma ws tma-store/64x2"), 300, 520, 200, "bfloat16", True, "relu"),
    (P("direct 128x192x64 s3 t256 wgmma ws tma-store/64x2"), 136, 328, 72, "float16", False, "silu"),
]


@pytest.mark.parametrize("cfg, M, N, K, dtype, trans_b, activation", EMULATED,
                         ids=lambda x: x.short().replace(" ", "_") if isinstance(x, GemmConfig) else None)
def test_double_staging_on_the_emulator(cfg, M, N, K, dtype, trans_b, activation):
    src = run_on_the_emulator(cfg, M, N, K, dtype, trans_b, activation)
    # the chunk written while the other buffer's store runs waits only for the one before that
    assert "cp.async.bulk.wait_group.read 1" in src


def test_one_buffer_of_chunks_still_waits_for_every_store():
    src = _compile(P("persistent 128x192x64 s4 t256 g8 wgmma ws tma-store/64 c2x1"), 392, 200).get_kernel_source()
    assert set(re.findall(r"wait_group\.read (\d+)", src)) == {"0"}


def test_a_missing_wait_between_the_buffers_is_reported(monkeypatch):
    """The emulator sees the alternation's hazard: without the wait for the store of two chunks back, a
    thread writes a buffer that store still reads."""
    real = plan_tma_stores._groups_newer
    monkeypatch.setattr(plan_tma_stores, "_groups_newer", lambda state, written: (
        None if (real(state, written) or 0) >= 1 else real(state, written)))
    with pytest.raises(RaceError, match="TMA store still reads"):
        run_on_the_emulator(P("persistent 128x192x64 s5 t256 g8 wgmma ws tma-store/32x2"), 136, 392, 200, "float16", False, "none")


def test_pending_store_state():
    a, b = object(), object()
    assert plan_tma_stores._groups_newer((a, b), [a]) == 1
    assert plan_tma_stores._groups_newer((a, b), [b]) == 0
    assert plan_tma_stores._groups_newer((a,), [b]) is None
    assert plan_tma_stores._groups_newer(plan_tma_stores.UNKNOWN, [b]) == 0
    assert plan_tma_stores._groups_newer(plan_tma_stores.UNKNOWN, []) is None  # (a statement writing none of them)
    assert plan_tma_stores._merge((a,), (a,)) == (a,)
    assert plan_tma_stores._merge((a,), (a, b)) == plan_tma_stores.UNKNOWN


def test_names_shared_memory_and_candidate_lists():
    for cfg, *_ in EMULATED:
        assert GemmConfig.parse(cfg.short()) == cfg
        assert GemmConfig.from_json(cfg.to_json()) == cfg
        assert gemm_configs.fit_shared(cfg, gemm_configs.H200_SHARED_BYTES) == cfg  # fits as named
    # two buffers count twice: five stages of 128x192 beside two 64-column buffers (32 KB) do not fit
    assert gemm_configs.fit_shared(P("persistent 128x192x64 s5 t256 g8 wgmma ws tma-store/64x2"),
                                   gemm_configs.H200_SHARED_BYTES).stages == 4
    assert P("persistent 128x192x64 s5 t256 g8 wgmma ws tma-store/32x2").staged_epilogue("float16") == (32, 2)
    assert P("persistent 128x192x64 s5 t256 g8 wgmma ws tma-store/32x2").staged_epilogue("float32") is False
    for bad in ({"tma_store": True, "store_bufs": 2}, {"tma_store": True, "store_cols": 64, "store_bufs": 3},
                {"store_cols": 64, "store_bufs": 2}):
        assert GemmConfig.from_json({"kind": "persistent", "block_N": 192, **bad}) is None, bad
    weak = gemm_configs.candidates(2000, 3000, 1000, "float16", "sm_90", 132)
    # none won on the H200 (2026-12-02 05:02 UTC): off the candidate lists, selectable by name
    assert not any(c in weak for c in gemm_configs.s11_candidates(2000, 3000, 1000))
    assert "persistent 128x192x64 s5 t256 g8 wgmma ws tma-store/32x2 c2x1" in \
        [c.short() for c in gemm_configs.s11_candidates(2000, 3000, 1000)]
    assert gemm_configs.s11_candidates(128, 8192, 8192) == []
    assert all(c.cluster == (1, 1) for c in gemm_configs.s11_candidates(1000, 192, 1000))
    assert not any(c.store_bufs == 2 for c in gemm_configs.candidates(2000, 3000, 1000, "float16", "sm_80", 108))
    assert gemm_configs.heuristic(2000, 3000, 1000, "float16", "sm_90", 132).store_bufs == 1


@needs_nvrtc
@pytest.mark.parametrize("cfg", [c for c, *_ in EMULATED], ids=lambda c: c.short().replace(" ", "_"))
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_double_staging_builds_without_spills(cfg, dtype):
    from tilewright.toolchain import nvrtc

    src = _compile(cfg, 3000, 1000, dtype, blocks=132).get_kernel_source()
    names = re.findall(r'__global__ void (?:__\w+__\([^)]*\) )*(\w+)\(', src)
    res = nvrtc.compile_cuda(src, "sm_90a", names).resources[names[0]]
    assert res["spills"] == 0 and res["local_bytes"] == 0, res
