"""The session-11 fuzz templates (tilewright/fuzz/ops_cases_s11.py: the sm_90a defaults of session 10 at
the sizes where they switch) on an NVIDIA GPU through the fuzzer's ``gpu`` backend (allocations poisoned,
float64 references, each op called with a previous signature twice, then the checked one twice): attention
with the shipped key-block bound (1024 / 1025 keys causal), decode with the default merges, the MQA switch
at the shipped MQA_LONG_FROM (32767 / 32768 cache keys), GEMM at the 128-row heuristic and the persistent
kernel with and without warp specialization.  Skipped without a CUDA GPU."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or getattr(torch.version, "hip", None):
    pytest.skip("needs an NVIDIA GPU with a CUDA build of PyTorch", allow_module_level=True)

from shared_fuzz import assert_some_case_ran, run_quick_cases  # noqa: E402

from tilewright.fuzz import ops_cases  # noqa: E402
from tilewright.fuzz.ops_cases_s11 import OPS_S11  # noqa: E402
from tilewright.fuzz.runner import run_case  # noqa: E402
from tilewright.fuzz.templates import TEMPLATES  # noqa: E402
from tilewright.ops import decode_kernels as dk  # noqa: E402

GPU = ("gpu",)


def _shipped_bound(p):
    """The key-block bound as shipped (the emulator's runs lower it to 2 for time): a causal draw's keys moved
    from around 2 blocks to around 8 (the same offset: one below, at, one above or a block above)."""
    if p["kb"] != 8 and p["causal"]:
        p["sk"] += (8 - p["kb"]) * 128
    p["kb"] = 8


def _gpu_gemm_sizes(p):
    """The GEMM sizes for the GPU's own SM count (the emulator's runs plan for 2-5 SMs): 100+ column tiles of
    64 for the 128-row heuristic, hundreds of tiles (not a multiple of 132) for the persistent kernel."""
    if p["form"] == "heuristic":
        p["n"] += 6336
    else:
        p["m"], p["n"] = p["m"] + 1900, p["n"] + 900


ADJUST = {"ops_attention_s10def": _shipped_bound, "ops_matmul_s10def": _gpu_gemm_sizes}


@pytest.mark.parametrize("name", [t.name for t in OPS_S11])
def test_s11_template_cases_on_the_gpu(name):
    seen = run_quick_cases(name, GPU, 10, 11_100, adjust=ADJUST.get(name))
    assert_some_case_ran(name, seen, GPU)


@pytest.mark.parametrize("sk", [32767, 32768])
@pytest.mark.parametrize("splits", [None, 8])
def test_mqa_decode_at_the_shipped_long_cache_boundary(sk, splits):
    tpl = TEMPLATES["ops_decode_s10def"]
    p = {"mode": "decode", "b": 2, "hkv": 1, "group": 32, "sq": 1, "sk": sk, "d": 128, "causal": False,
         "dtype": "bfloat16", "splits": splits, "lse": True, "persistent": "auto", "sms": 132, "variant": None,
         "change": "data", "mqa_from": None, "seed": sk}
    outcome = run_case(tpl.make(p), "gpu")
    assert outcome.status == "ok", (p, outcome)
    variants = {key[-1] for key, _ in ops_cases.BUILT if key[0] == "decode"}
    assert variants == {dk.DEFAULT_VARIANT["mqa_long" if sk >= 32768 else "mqa"]}, variants
