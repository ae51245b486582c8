"""The session-13 decode candidates (bench/decode_splits.py ``S13_GQA`` / ``S13_MQA``) on a CUDA GPU, against float64
with the op's allocations poisoned (NaN): "pdlpre" (mbarrier set-up and tensor-map prefetch ahead of
griddepcontrol.wait), "pdllate" (the trigger after the block's last key block) and "lazysum" (the denominator reduced
across the warps once, after the loop).  The benchmarks' shapes (batch 8,
32 heads on 8 kv heads at KV 4k, or on 1 at KV 16k; d 128), a ragged cache with an empty sequence and lengths off
the key block; repeat calls from pointers; many calls back to back without a synchronization (a late trigger lets
the next call's blocks start while this one merges: each must still wait for it); a CUDA graph of GQA and MQA calls
replayed with new inputs, the capture pool's counters back at zero.  Skipped without a GPU."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from test_s12_decode_gpu import test_against_float64 as _against_float64  # noqa: E402
from test_s12_decode_gpu import test_back_to_back_calls as _back_to_back  # noqa: E402
from test_s12_decode_gpu import test_graph_of_two_shapes_replayed as _graph_of_two_shapes  # noqa: E402

CANDIDATES = ["tmerge,gcount,pdlpre", "tmerge,gcount,pdllate", "tmerge,gcount,pdllate,pdlpre",
              "tmerge,gcount,lazysum,pdlwait", "tmerge,gcount,lazysum,pdllate,pdlpre",
              "cmerge,cover,gcount,pdl,pdlpre", "cover,gcount,pdlpre,tmerge",
              "cmerge,cover,gcount,lazysum,pdl"]  # (the last three MQA: one kv head)


@pytest.mark.parametrize("variant", CANDIDATES)
@pytest.mark.parametrize("B, S, lens, dtype", [
    (8, 4096, None, torch.bfloat16),                      # the benchmark's shape (MQA: KV 16k)
    (4, 4096, [4096, 0, 1, 2049], torch.float16),         # ragged, an empty sequence, lengths off the key block
])
def test_against_float64(monkeypatch, variant, B, S, lens, dtype):
    _against_float64(monkeypatch, variant, B, S, lens, dtype)  # (session 12's check: repeat calls from pointers)


@pytest.mark.parametrize("variant", ["tmerge,gcount,pdllate,pdlpre", "tmerge,gcount,pdllate",
                                     "tmerge,gcount,lazysum,pdllate,pdlpre", "cmerge,cover,gcount,pdl,pdlpre"])
def test_back_to_back_calls(monkeypatch, variant):
    """session 12's eight calls launched without a synchronization between them (each reuses the stream's partials
    and counters while the previous call's merges may still run; a late trigger places it during them)."""
    _back_to_back(monkeypatch, variant)


@pytest.mark.parametrize("gqa, mqa", [("tmerge,gcount,lazysum,pdllate,pdlpre", "cover,gcount,pdlpre,tmerge"),
                                      ("tmerge,gcount,pdllate", "cmerge,cover,gcount,pdl,pdlpre")])
def test_graph_replayed(monkeypatch, gqa, mqa):
    """session 12's capture of six GQA / MQA calls (two shapes, one capture and stream) with these candidates."""
    _graph_of_two_shapes(monkeypatch, gqa, mqa)
