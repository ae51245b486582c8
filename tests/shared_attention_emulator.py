"""What the CPU tests of the persistent attention forward share (test_s8_attnp_persistent.py,
test_s8_attn2_persistent_order.py, test_s9_causal_pairs.py and the later ones that import these names
from test_s8_attnp_persistent.py): ``ops.attention`` as on an H200 with a grid of a few blocks, its
kernels run by the cooperative emulator (or the tile interpreter), and the checks of a dense call, a
packed (varlen) call and a split-KV call on a padded cache against float64 with poisoned outputs.
Not a test file; its importers skip without torch before importing it."""

from __future__ import annotations

import importlib

import torch
from test_ops_attention import _close, _close_lse, _PoisonedTorch, _rand, _varlen_case, reference

import tilewright
from tilewright import ops

dispatch = importlib.import_module("tilewright.ops.attention_dispatch")
SM90A = "cuda -arch=sm_90a"
BLOCKS = 3  # the persistent grid in these tests: a few blocks, each with several items


def persistent_on_cpu(monkeypatch, blocks=BLOCKS, target=SM90A, backend="emulator"):
    """ops.attention as on an H200 with the persistent kernel on and ``blocks`` multiprocessors, its
    kernels compiled for ``target`` and run on the CPU (the emulator, or the tile interpreter with
    ``target="interpret", backend=None``), outputs poisoned; yields the list of kernels used (key,
    pass configs, kernel)."""
    used = []

    def compile_on_cpu(key, build, _target, pass_configs=None):
        k = tilewright.compile(build(), target=target, execution_backend=backend, pass_configs=pass_configs)
        used.append((key, pass_configs, k))
        return k

    monkeypatch.setattr(dispatch, "_torch", lambda: _PoisonedTorch())
    monkeypatch.setattr(dispatch, "_kernel", compile_on_cpu)
    monkeypatch.setattr(dispatch, "_is_hopper", lambda t: True)
    monkeypatch.setattr(dispatch, "_shared_bytes", lambda t: 232448)
    monkeypatch.setattr(dispatch, "_sm_count", lambda t: blocks)
    monkeypatch.setattr(dispatch, "PERSISTENT", True)
    dispatch.forget_plans()
    try:
        yield used
    finally:
        dispatch.forget_plans()


def persistent_kernel(used):
    """The persistent attention kernel of the last sm_90a call; checks that it is one (a grid of
    ``BLOCKS`` blocks) and warp-specialized in the persistent form (Q's ring has an ``empty``
    barrier: the producer refills it for a later item)."""
    ks = [k for key, cfg, k in used if key[0] == "attention" and cfg]
    assert ks, "the sm_90a path was not taken"
    k = ks[-1]
    assert [int(str(x)) for x in k.thread_kernel.grid] == [BLOCKS]
    src = k.get_kernel_source()
    assert k.num_threads == 384 and "wgmma.mma_async" in src and "setmaxnreg.inc" in src
    assert "Q_s_empty" in src and "cp.async.bulk.tensor" in src
    return k


def items(B, H, Sq, bm=128, splits=1):
    """The persistent grid's work items: (batch, head, query block, split) tuples."""
    return B * H * -(-Sq // bm) * splits


def check_varlen(q, k, v, cu_q, cu_k, lens_q, out, lse, causal):
    """Each packed sequence's rows of ``out`` / ``lse`` against float64 (no row left poisoned)."""
    assert not out.isnan().any()
    for b in range(len(lens_q)):
        qs, ks = slice(int(cu_q[b]), int(cu_q[b + 1])), slice(int(cu_k[b]), int(cu_k[b + 1]))
        if lens_q[b]:
            want, want_lse = reference(q[qs].transpose(0, 1)[None], k[ks].transpose(0, 1)[None],
                                       v[ks].transpose(0, 1)[None], causal)
            _close(out[qs], want[0].transpose(0, 1))
            _close_lse(lse[:, qs], want_lse[0])


# ---------------------------------------------------------------- one call each, checked
def dense_call(B, H, Hkv, Sq, Sk, D, causal, dtype, seed):
    """A dense (B, H, S, D) call on inputs seeded by ``seed``, GQA/MQA by ``Hkv``, its output and LSE
    checked against float64."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = _rand(g, B, H, Sq, D, dtype=dtype), _rand(g, B, Hkv, Sk, D, dtype=dtype), \
        _rand(g, B, Hkv, Sk, D, dtype=dtype)
    out, lse = ops.attention(q, k, v, causal=causal, return_lse=True)
    want, want_lse = reference(q, k, v, causal)
    _close(out, want, tol=3e-3 if dtype == torch.float16 else 1e-2)
    _close_lse(lse, want_lse)


def check_dense(used, B, H, Hkv, Sq, Sk, D, causal, dtype, seed):
    """``dense_call``; returns the persistent kernel that ran it (checked to be one)."""
    dense_call(B, H, Hkv, Sq, Sk, D, causal, dtype, seed)
    return persistent_kernel(used)


def check_packed(used, seed, causal):
    """Packed sequences, one of them empty, GQA (2 heads on 1, d 64): items whose key loops have 0, 1
    and 2 steps; returns the persistent kernel that ran them."""
    g = torch.Generator().manual_seed(seed)
    lens_q, lens_k = [70, 0, 140, 200], [90, 30, 250, 0]
    q, k, v, cu_q, cu_k = _varlen_case(g, lens_q, lens_k, 2, 1, 64)
    out, lse = ops.attention(q, k, v, causal=causal, return_lse=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    check_varlen(q, k, v, cu_q, cu_k, lens_q, out, lse, causal)
    return persistent_kernel(used)


def check_split_kv(used, seed, dim=128):
    """A causal call on a padded KV cache (key counts 300 and 93) in two split-KV ranges per (batch, head,
    query block), the partial outputs merged by the combine; returns the persistent kernel that ran it."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = _rand(g, 2, 2, 80, dim), _rand(g, 2, 1, 300, dim), _rand(g, 2, 1, 300, dim)
    lens = torch.tensor([300, 93], dtype=torch.int32)
    out, lse = ops.attention(q, k, v, causal=True, return_lse=True, cache_seqlens=lens, num_splits=2)
    want, want_lse = reference(q, k, v, True, kv_len=lens.tolist())
    _close(out, want)
    _close_lse(lse, want_lse)
    return persistent_kernel(used)
