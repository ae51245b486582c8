"""``tilewright.ops.attention`` on the sm_90a path (wgmma for both gemms, a TMA producer warpgroup,
two consumer warpgroups, setmaxnreg) run by the CPU emulator against float64: the code an H200
runs, on CPU tensors, with every output allocation poisoned (NaN).  Dense MHA/GQA, causal with
separate query and key lengths, ragged lengths, head dims 64/128/256, fp16/bf16, log-sum-exp,
variable-length batches, a padded KV cache and split-KV all go through it."""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")

from test_ops_attention import (  # noqa: E402
    _close,
    _close_lse,
    _PoisonedTorch,
    _rand,
    _varlen_case,
    reference,
)

import tilewright  # noqa: E402
from tilewright import ops  # noqa: E402
from tilewright.ir import thread as th  # noqa: E402
from tilewright.ir.visitor import walk  # noqa: E402

dispatch = importlib.import_module("tilewright.ops.attention_dispatch")
SM90A = "cuda -arch=sm_90a"


@pytest.fixture
def hopper(monkeypatch):
    """ops.attention as on an H200, its kernels compiled for sm_90a and run by the emulator; the
    kernels used are recorded."""
    used = []

    def compile_for_emulator(key, build, _target, pass_configs=None):
        k = tilewright.compile(build(), target=SM90A, execution_backend="emulator", pass_configs=pass_configs)
        used.append((key, pass_configs, k))
        return k

    monkeypatch.setattr(dispatch, "_torch", lambda: _PoisonedTorch())
    monkeypatch.setattr(dispatch, "_kernel", compile_for_emulator)
    monkeypatch.setattr(dispatch, "_is_hopper", lambda t: True)
    monkeypatch.setattr(dispatch, "_shared_bytes", lambda t: 232448)
    return used


def _hopper_kernel(used):
    """The one attention kernel of the last call that took the sm_90a path; checks its shape."""
    ks = [k for key, cfg, k in used if key[0] == "attention" and cfg
          and all(cfg.get(n) == v for n, v in dispatch.HOPPER_CONFIGS.items() if n != "tw.attention_overlap")]
    assert ks, "the sm_90a path was not taken"
    k = ks[-1]
    assert k.num_threads == 384  # a producer warpgroup and two consumer warpgroups
    src = k.get_kernel_source()
    assert "wgmma.mma_async" in src and "mma.sync" not in src and "setmaxnreg.inc" in src
    return k


@pytest.mark.parametrize("B, H, Hkv, Sq, Sk, D, causal, dtype", [
    (1, 2, 1, 130, 200, 128, True, torch.float16),     # GQA, causal aligned to the end, ragged
    (1, 1, 1, 200, 130, 128, True, torch.bfloat16),    # more queries than keys: first rows see nothing
    (2, 2, 2, 129, 77, 64, False, torch.float16),      # one key tile, ragged, d = 64
    (1, 2, 1, 100, 150, 256, True, torch.bfloat16),    # d = 256 (128 x 64 blocks)
    (1, 1, 1, 256, 256, 64, True, torch.float16),      # whole tiles: only the diagonal tiles are masked
])
def test_dense_on_the_sm90a_path(hopper, B, H, Hkv, Sq, Sk, D, causal, dtype):
    g = torch.Generator().manual_seed(Sq + Sk + D)
    q, k, v = _rand(g, B, H, Sq, D, dtype=dtype), _rand(g, B, Hkv, Sk, D, dtype=dtype), _rand(g, B, Hkv, Sk, D,
                                                                                             dtype=dtype)
    out, lse = ops.attention(q, k, v, causal=causal, return_lse=True)
    want, want_lse = reference(q, k, v, causal)
    _close(out, want, tol=3e-3 if dtype == torch.float16 else 1e-2)
    _close_lse(lse, want_lse)
    _hopper_kernel(hopper)


def test_flash_attn_layout_varlen_and_kv_cache_on_the_sm90a_path(hopper):
    g = torch.Generator().manual_seed(31)
    # (batch, seq, heads, dim) tensors read in place through transpose(1, 2)
    q, k, v = (_rand(g, 1, 150, 2, 64).transpose(1, 2) for _ in range(3))
    _close(ops.attention(q, k, v, causal=True), reference(q, k, v, True)[0])
    _hopper_kernel(hopper)
    # variable-length batches
    lens_q, lens_k = [70, 0, 140], [90, 30, 100]
    q, k, v, cu_q, cu_k = _varlen_case(g, lens_q, lens_k, 2, 1, 64)
    out = ops.attention(q, k, v, causal=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    for b in range(len(lens_q)):
        qs, ks = slice(int(cu_q[b]), int(cu_q[b + 1])), slice(int(cu_k[b]), int(cu_k[b + 1]))
        if lens_q[b]:
            want, _ = reference(q[qs].transpose(0, 1)[None], k[ks].transpose(0, 1)[None],
                                v[ks].transpose(0, 1)[None], True)
            _close(out[qs], want[0].transpose(0, 1))
    _hopper_kernel(hopper)
    # a padded KV cache, prefill of 80 queries, split in two key ranges
    q, k, v = _rand(g, 2, 2, 80, 64), _rand(g, 2, 1, 200, 64), _rand(g, 2, 1, 200, 64)
    lens = torch.tensor([200, 93], dtype=torch.int32)
    out, lse = ops.attention(q, k, v, causal=True, return_lse=True, cache_seqlens=lens, num_splits=2)
    want, want_lse = reference(q, k, v, True, kv_len=lens.tolist())
    _close(out, want)
    _close_lse(lse, want_lse)
    _hopper_kernel(hopper)


def test_decoding_keeps_the_thin_blocks(hopper):
    """One query token: the sm_90a path would leave a consumer warpgroup idle; the measured thin
    configuration (mma.sync) is kept."""
    g = torch.Generator().manual_seed(32)
    q, k, v = _rand(g, 1, 4, 1, 128), _rand(g, 1, 2, 300, 128), _rand(g, 1, 2, 300, 128)
    _close(ops.attention(q, k, v), reference(q, k, v, False)[0])
    assert all(cfg is None for _, cfg, _ in hopper)


def test_the_hopper_kernel_is_warp_specialized_with_a_register_split(hopper):
    g = torch.Generator().manual_seed(33)
    q, k, v = (_rand(g, 1, 1, 130, 128) for _ in range(3))
    ops.attention(q, k, v)
    k = _hopper_kernel(hopper)
    regs = []
    walk(k.thread_kernel.body, lambda s: regs.append((s.count, s.increase)) if isinstance(s, th.SetMaxNReg) else None)
    assert sorted(regs) == [(40, False), (232, True)]


def test_pingpong_configuration_of_the_sm90a_path(hopper, monkeypatch):
    """``tw.pingpong`` on top (off by default until measured): same answers, turns in the kernel."""
    monkeypatch.setattr(dispatch, "HOPPER_CONFIGS", {**dispatch.HOPPER_CONFIGS, "tw.pingpong": True})
    monkeypatch.setattr(dispatch, "HOPPER_SHORT_CAUSAL_OVERRIDES", None)  # (its default adds the overlap)
    g = torch.Generator().manual_seed(34)
    q, k, v = _rand(g, 1, 2, 200, 128), _rand(g, 1, 1, 333, 128), _rand(g, 1, 1, 333, 128)
    out, lse = ops.attention(q, k, v, causal=True, return_lse=True)
    want, want_lse = reference(q, k, v, True)
    _close(out, want)
    _close_lse(lse, want_lse)
    src = _hopper_kernel(hopper).get_kernel_source()
    assert src.count("bar.arrive") == 3


def test_staged_output_tile_is_ordered_between_its_two_copies():
    """The sm_90a kernel writes a full block's output through shared memory under a run-time
    condition on the block's rows.  Its consumer warpgroups compute that condition from values the
    producer partition also computes for itself; barrier insertion must still see it as uniform
    among the consumers and order the stmatrix writes before the tile's reads (it once did not:
    a race the emulator reported, which on the GPU would store a half-written tile)."""
    from tilewright.ops import attention_kernels as ak

    fn = ak.attention_fwd(2, 1, 128, "float16", "float16", True, False, False, 1, False, False, False, False,
                          128, 128, 2, 256, stage_out=True)
    src = tilewright.compile(fn, target=SM90A, pass_configs={"tw.enable_wgmma": True, "tw.warp_specialize": True,
                                                             "tw.attention_overlap": False}).get_kernel_source()
    last_write = src.rindex("stmatrix.sync.aligned")
    first_read = src.index("&O_s[", src.index("\n", last_write))
    between = src[last_write:first_read]
    assert "bar.sync" in between or "__syncthreads" in between or "bar_sync" in between, between[-400:]
