"""Session-9 fuzz templates on an NVIDIA GPU, through the fuzzer's own ``gpu`` backend (outputs
poisoned, float64 references): the kernel-level ones (clusters, T.alloc_var initial values under warp
specialization, T.Persistent) and the op-level ones (ops.matmul with a forced gemm_configs candidate,
ops.attention), each op called with a previous signature twice and then the checked one twice.  On
the GPU the ops keep *bound* fast plans for repeat calls (``_DensePlan``, ``_MatmulRun.from_pointers``,
``decode_kernels._DecodeRun``), which the CPU backends never make: a stale hit there shows only here.
Skipped without a CUDA GPU."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or getattr(torch.version, "hip", None):
    pytest.skip("needs an NVIDIA GPU with a CUDA build of PyTorch", allow_module_level=True)

from tilewright.fuzz.ops_cases import OPS  # noqa: E402
from tilewright.fuzz.runner import run_case  # noqa: E402
from tilewright.fuzz.templates import TEMPLATES  # noqa: E402
from tilewright.fuzz.templates_s9 import S9  # noqa: E402

CASES = {"ops_matmul": 24, "ops_attention": 24}


@pytest.mark.parametrize("name", [t.name for t in S9 + OPS])
def test_s9_template_cases_on_the_gpu(name):
    tpl = TEMPLATES[name]
    rng = np.random.default_rng(9_900)
    statuses = []
    for _ in range(CASES.get(name, 8)):
        p = dict(tpl.draw(rng), seed=int(rng.integers(2**31)))
        outcome = run_case(tpl.make(p), "gpu")
        assert outcome.status in ("ok", "refused"), (name, p, outcome)
        statuses.append(outcome.status)
    assert "ok" in statuses, (name, statuses)
