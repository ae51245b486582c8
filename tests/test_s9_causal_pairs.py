"""The causal persistent attention forward's "pairs" item order (``attention_dispatch.PERSISTENT_ORDER =
"pairs"``: query blocks i and nq - 1 - i of one (head, sequence, split) unit run back to back on one
block, so every block's pair has the same number of key blocks; an odd nq's middle blocks dealt as
singles after the pairs) and the item coordinates kept in int32 scalars (``PERSISTENT_ITEM_VARS``,
on by default; off: the order's arithmetic repeated where ``attend`` reads them).  Run by the
cooperative emulator on sm_90a (which checks the mbarrier protocol) against float64 with poisoned
outputs (an item that no block runs leaves NaN), with grids of a few blocks so that blocks run
different numbers of pairs and singles; and on the tile interpreter over a range of grid sizes and
query-block counts (odd and even), every item count modulo the grid."""

from __future__ import annotations

import importlib
import re

import pytest

torch = pytest.importorskip("torch")

from shared_attention_emulator import SM90A, check_dense, check_packed, check_split_kv, persistent_on_cpu  # noqa: E402
from test_ops_attention import _close, _close_lse, _rand, reference  # noqa: E402
from toolchains import needs_nvrtc  # noqa: E402

from tilewright import ops  # noqa: E402
from tilewright.ops import attention_kernels as ak  # noqa: E402

dispatch = importlib.import_module("tilewright.ops.attention_dispatch")


@pytest.fixture
def pairs(monkeypatch):
    monkeypatch.setattr(dispatch, "PERSISTENT_ORDER", "pairs")
    monkeypatch.setattr(dispatch, "PERSISTENT_ORDER_SHORT_CAUSAL", None)  # (short causal calls in pairs too)
    yield from persistent_on_cpu(monkeypatch)


@pytest.mark.parametrize("B, H, Hkv, Sq, Sk, D, causal, dtype", [
    (1, 2, 1, 400, 333, 128, True, torch.float16),    # GQA, ragged, nq 4: 4 pairs on 3 blocks, Sk < Sq
    (1, 5, 1, 256, 256, 64, True, torch.bfloat16),    # MQA, whole tiles, nq 2: 5 pairs on 3 blocks
    (1, 1, 1, 300, 520, 64, True, torch.float16),     # nq 3 (odd): 1 pair + 1 single; more keys than queries
    (2, 1, 1, 100, 180, 64, True, torch.bfloat16),    # nq 1: no pairs, 2 singles on 3 blocks
    (1, 2, 2, 129, 77, 64, False, torch.float16),     # non-causal (the order is not used), ragged
])
def test_dense_pairs(pairs, B, H, Hkv, Sq, Sk, D, causal, dtype):
    check_dense(pairs, B, H, Hkv, Sq, Sk, D, causal, dtype, Sq + Sk + D)
    assert any(key[0] == "attention" and "pairs" in key for key, cfg, _ in pairs if cfg)


def test_varlen_pairs(pairs):
    """Packed sequences, one empty, GQA: the unit count is the batch's, the items of 0, 1 and 2
    key steps (max_q 200: nq 2, one pair per unit)."""
    check_packed(pairs, 61, True)


def test_split_kv_pairs(pairs):
    """Two split-KV ranges per (batch, head, query block) and a padded cache: units are (head,
    sequence, split), nq 1 (singles only)."""
    check_split_kv(pairs, 62)


@pytest.mark.parametrize("order", ["longest_first", "pairs"])
def test_item_coordinates_as_expressions(monkeypatch, order):
    """``PERSISTENT_ITEM_VARS = False`` (the coordinates repeated as expressions) gives the same
    answers; the scalars are in the kernel only when on."""
    monkeypatch.setattr(dispatch, "PERSISTENT_ORDER", order)
    monkeypatch.setattr(dispatch, "PERSISTENT_ITEM_VARS", False)
    setup = persistent_on_cpu(monkeypatch)
    used = next(setup)
    try:
        src = check_dense(used, 1, 3, 1, 300, 300, 64, True, torch.float16, 63).get_kernel_source()
        assert not re.search(r"\bqb\b", src)
    finally:
        setup.close()


@pytest.mark.parametrize("blocks", [1, 2, 4, 5, 7, 13, 40])
@pytest.mark.parametrize("Sq", [500, 600])
def test_every_item_runs_once_on_the_interpreter(monkeypatch, blocks, Sq):
    """The tile interpreter, 2 batches x 3 heads x 4 (Sq 500: 6 pairs per batch) or 5 (Sq 600: 6
    pairs and 3 singles per batch) query blocks on grids of 1 to 40 blocks (more blocks than pairs):
    every output row right (none left poisoned)."""
    monkeypatch.setattr(dispatch, "PERSISTENT_ORDER", "pairs")
    setup = persistent_on_cpu(monkeypatch, blocks, target="interpret", backend=None)
    next(setup)
    try:
        g = torch.Generator().manual_seed(64 + blocks + Sq)
        q, k, v = _rand(g, 2, 3, Sq, 64), _rand(g, 2, 3, Sq - 70, 64), _rand(g, 2, 3, Sq - 70, 64)
        out, lse = ops.attention(q, k, v, causal=True, return_lse=True)
        want, want_lse = reference(q, k, v, True)
        _close(out, want)
        _close_lse(lse, want_lse)
    finally:
        setup.close()


@needs_nvrtc
@pytest.mark.parametrize("order, item_vars", [("pairs", True), ("longest_first", True), ("longest_first", False)])
def test_h200_kernels_build_without_spills(order, item_vars):
    """The H200 kernels (132 blocks, 16 heads, d 128, causal, shipped configs) build with NVRTC
    without spills; with ``item_vars`` the causal mask reads the query block from a scalar."""
    from tilewright.codegen.cuda import print_cuda
    from tilewright.passes.pipeline import PassContext, run_pipeline
    from tilewright.target import Target
    from tilewright.toolchain import nvrtc

    f = ak.attention_fwd(16, 16, 128, "bfloat16", "bfloat16", True, False, False, 1, False, False, False, False, 128,
                         128, 2, 256, stage_out=True, persistent=132, order=order, item_vars=item_vars)
    k = run_pipeline(f, PassContext(Target.parse(SM90A), {"optimize_level": 2, **dispatch.HOPPER_CONFIGS}))
    src = print_cuda(k)
    assert k.num_threads == 384 and "Q_s_empty" in src and "setmaxnreg" in src
    assert ("qb * 128" in src) == item_vars
    res = nvrtc.compile_cuda(src, "sm_90a", [k.name]).resources[k.name]
    assert res["spills"] == 0 and res["local_bytes"] == 0, res
