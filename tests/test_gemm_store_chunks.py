"""GEMM configurations with column-chunked TMA stores (``tma-store/N``): a chunk width the staging buffer's
TMA layout cannot hold is refused by name (``GemmConfig.parse``, ``from_json``, ``ops.matmul(config=)``)
with the rule, instead of building a kernel that quietly loses its TMA store to per-thread stores; and
the rule agrees with what ``plan_tma_stores`` actually does for each width that divides the tile."""

import dataclasses

import pytest
from test_s10_gemm_candidates import _compile

from tilewright.ops import gemm_configs
from tilewright.ops.gemm_configs import GemmConfig

TMA_STORE = "cp.async.bulk.tensor.2d.global.shared"


@pytest.mark.parametrize("cols", [8, 16, 24, 32, 48, 64, 96])
def test_the_width_rule_matches_the_tma_store_planner(cols):
    """Every multiple of 8 dividing 192: accepted exactly when the compiled kernel stores through TMA."""
    base = GemmConfig.parse("persistent 128x192x64 s4 t256 g8 wgmma ws tma-store")
    cfg = dataclasses.replace(base, store_cols=cols)
    refused = gemm_configs.refusal(cfg)
    src = _compile(cfg, 392, 200).get_kernel_source()
    assert (TMA_STORE in src) == (refused is None), (cols, refused)


@pytest.mark.parametrize("name", ["persistent 128x192x64 s4 t256 g8 wgmma ws tma-store/48",
                                  "direct 128x192x64 s3 t256 wgmma ws tma-store/96x2"])
def test_a_width_the_tma_cannot_hold_is_refused_with_the_rule(name):
    with pytest.raises(ValueError, match="chunk width of 8, 16, 32 or a multiple of 64"):
        GemmConfig.parse(name)
    d = {"kind": "persistent", "block_N": 192, "tma_store": True, "store_cols": 48}
    assert GemmConfig.from_json(d) is None  # a stored entry that no longer names a kernel: a miss


def test_other_refusals_say_what_to_change():
    with pytest.raises(ValueError, match="must divide block_N"):
        GemmConfig.parse("persistent 128x192x64 s4 t256 g8 wgmma ws tma-store/128")
    with pytest.raises(ValueError, match="two staging buffers"):
        GemmConfig.parse("persistent 128x192x64 s4 t256 g8 wgmma ws tma-store/192x2")
    with pytest.raises(ValueError, match="clusters"):
        GemmConfig.parse("streamk 128x128x64 s4 t256 wgmma ws c2x1")


def test_ops_matmul_refuses_such_a_config():
    torch = pytest.importorskip("torch")
    from tilewright.errors import ArgumentError
    from tilewright.ops.dispatch import matmul_impl

    cfg = dataclasses.replace(GemmConfig.parse("persistent 128x192x64 s4 t256 g8 wgmma ws tma-store"), store_cols=48)
    a, b = torch.randn(64, 64, dtype=torch.float16), torch.randn(64, 64, dtype=torch.float16)
    with pytest.raises(ArgumentError, match="chunk width"):
        matmul_impl(a, b, None, "none", None, config=cfg)
