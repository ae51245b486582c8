"""The causal persistent attention forward's candidate item orders (``attention_dispatch.PERSISTENT_ORDER``,
``attention_fwd(order=...)``): "longest_first_snake" (the longest-first items dealt back and forth over
the blocks) and "head_major_snake" (one head's query blocks together, dealt back and forth).  Run by
the cooperative emulator on sm_90a against float64 with poisoned outputs (an item that no block runs
leaves NaN), with grids of a few blocks so that the last round is partly empty, its place in the back
and forth both ways (an odd and an even number of full rounds) and fewer items than blocks; and on
the tile interpreter over a range of grid sizes, every item count modulo the grid."""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")

from shared_attention_emulator import BLOCKS, SM90A, check_dense, check_packed, check_split_kv, persistent_on_cpu  # noqa: E402
from shared_attention_emulator import items as _items  # noqa: E402
from shared_attention_emulator import persistent_kernel as _persistent_kernel  # noqa: E402
from test_ops_attention import _close, _close_lse, _rand, reference  # noqa: E402
from toolchains import needs_nvrtc  # noqa: E402

from tilewright import ops  # noqa: E402
from tilewright.ops import attention_kernels as ak  # noqa: E402

dispatch = importlib.import_module("tilewright.ops.attention_dispatch")
CANDIDATES = ["longest_first_snake", "head_major_snake"]


@pytest.fixture
def persistent(monkeypatch):
    yield from persistent_on_cpu(monkeypatch)


@pytest.fixture(params=CANDIDATES)
def order(request, monkeypatch):
    monkeypatch.setattr(dispatch, "PERSISTENT_ORDER", request.param)
    monkeypatch.setattr(dispatch, "PERSISTENT_ORDER_SHORT_CAUSAL", None)  # (every call in the order under test)
    dispatch.forget_plans()
    return request.param


def test_the_default_is_unchanged():
    assert dispatch.PERSISTENT_ORDER == "pairs"  # (the H200 run of session 9: test_s9_causal_pairs.py)
    assert set(CANDIDATES) | {"longest_first"} <= set(ak.PERSISTENT_ORDERS)  # ("pairs": test_s9_causal_pairs.py)


@pytest.mark.parametrize("B, H, Hkv, Sq, Sk, D, causal, dtype", [
    (1, 2, 1, 400, 333, 128, True, torch.float16),    # GQA, ragged: 8 items = 2 full rounds (even) + 2
    (1, 5, 1, 256, 256, 64, True, torch.bfloat16),    # MQA, whole tiles: 10 items = 3 full rounds (odd) + 1
    (1, 1, 1, 520, 130, 128, True, torch.bfloat16),   # more queries than keys, first rows see nothing: 5 items
    (1, 2, 2, 129, 77, 64, False, torch.float16),     # non-causal (the order is not used), ragged: 4 items
])
def test_dense_orders(persistent, order, B, H, Hkv, Sq, Sk, D, causal, dtype):
    assert _items(B, H, Sq) % BLOCKS
    check_dense(persistent, B, H, Hkv, Sq, Sk, D, causal, dtype, Sq + Sk + D + len(order))
    assert any(key[0] == "attention" and order in key for key, cfg, _ in persistent if cfg)


def test_fewer_items_than_blocks(persistent, order):
    """2 items on 3 blocks: no full round, the third block runs nothing."""
    g = torch.Generator().manual_seed(50)
    q, k, v = _rand(g, 1, 2, 100, 64), _rand(g, 1, 1, 180, 64), _rand(g, 1, 1, 180, 64)
    out, lse = ops.attention(q, k, v, causal=True, return_lse=True)
    want, want_lse = reference(q, k, v, True)
    _close(out, want)
    _close_lse(lse, want_lse)
    _persistent_kernel(persistent)


def test_varlen_orders(persistent, order):
    """Packed sequences, one empty, GQA: items of 0, 1 and 2 key steps dealt back and forth."""
    check_packed(persistent, 51, True)


def test_split_kv_orders(persistent, order):
    """Two split-KV ranges per (batch, head, query block) and a padded cache: 8 items."""
    check_split_kv(persistent, 52)


@pytest.mark.parametrize("blocks", [2, 4, 5, 7, 13])
def test_every_item_runs_once_on_the_interpreter(monkeypatch, order, blocks):
    """The tile interpreter, 2 batches x 3 heads x 4 query blocks = 24 items on grids of 2 to 13
    blocks (full rounds odd and even, remainders 0 to 4, one grid with fewer rounds than items per
    head): every output row right (none left poisoned)."""
    setup = persistent_on_cpu(monkeypatch, blocks, target="interpret", backend=None)
    next(setup)
    try:
        g = torch.Generator().manual_seed(53 + blocks)
        q, k, v = _rand(g, 2, 3, 500, 64), _rand(g, 2, 3, 430, 64), _rand(g, 2, 3, 430, 64)
        out, lse = ops.attention(q, k, v, causal=True, return_lse=True)
        want, want_lse = reference(q, k, v, True)
        _close(out, want)
        _close_lse(lse, want_lse)
    finally:
        setup.close()  # forgets the plans


def test_an_unknown_order_is_refused():
    with pytest.raises(ValueError, match="head_major_snake"):
        ak.attention_fwd(2, 1, 64, "float16", "float16", True, False, False, 1, False, False, False, False, 128, 64,
                         2, 256, persistent=132, order="random")


@needs_nvrtc
@pytest.mark.parametrize("order_name", CANDIDATES)
def test_h200_kernels_build_without_spills(order_name):
    """The H200 kernels of the candidate orders (132 blocks, 16 heads, d 128, causal, shipped configs)
    are warp-specialized in the persistent form and build with NVRTC without spills."""
    from tilewright.codegen.cuda import print_cuda
    from tilewright.passes.pipeline import PassContext, run_pipeline
    from tilewright.target import Target
    from tilewright.toolchain import nvrtc

    f = ak.attention_fwd(16, 16, 128, "bfloat16", "bfloat16", True, False, False, 1, False, False, False, False, 128,
                         128, 2, 256, stage_out=True, persistent=132, order=order_name)
    k = run_pipeline(f, PassContext(Target.parse(SM90A), {"optimize_level": 2, **dispatch.HOPPER_CONFIGS}))
    src = print_cuda(k)
    assert k.num_threads == 384 and "Q_s_empty" in src and "setmaxnreg" in src
    assert k.shared_bytes <= 232448
    res = nvrtc.compile_cuda(src, "sm_90a", [k.name]).resources[k.name]
    assert res["spills"] == 0 and res["local_bytes"] == 0, res
