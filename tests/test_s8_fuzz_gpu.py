"""Session-8 fuzz work on an NVIDIA GPU: seeded cases of each session-8 fuzz template (user fragment
layouts, stores at other fragment positions, widened fragments, T.vectorized, fp8 conversions, copies
from views, clear=False reductions, tile atomics) through the fuzzer's own ``gpu`` backend (outputs
poisoned, float64 references), and the ragged accumulator-slice kernels of test_s8_fuzz_layouts.py
compiled for the GPU's own target.  Skipped without a CUDA GPU."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or getattr(torch.version, "hip", None):
    pytest.skip("needs an NVIDIA GPU with a CUDA build of PyTorch", allow_module_level=True)

import tilewright as tw  # noqa: E402
from tilewright.fuzz.runner import run_case  # noqa: E402
from tilewright.fuzz.templates import TEMPLATES  # noqa: E402
from tilewright.fuzz.templates_s8 import S8  # noqa: E402


@pytest.mark.parametrize("name", [t.name for t in S8])
def test_s8_template_cases_on_the_gpu(name):
    tpl = TEMPLATES[name]
    rng = np.random.default_rng(8_800)
    statuses = []
    for _ in range(6):
        p = dict(tpl.draw(rng), seed=int(rng.integers(2**31)))
        outcome = run_case(tpl.make(p), "gpu")
        assert outcome.status in ("ok", "refused"), (name, p, outcome)
        statuses.append(outcome.status)
    assert "ok" in statuses, (name, statuses)


@pytest.mark.parametrize("M,N,a,b,threads", [(16, 64, 15, 35, 128), (16, 64, 15, 35, 256), (64, 128, 45, 97, 256)])
def test_clear_a_ragged_slice_of_an_accumulator_on_the_gpu(M, N, a, b, threads):
    from test_s8_fuzz_layouts import clear_slice

    K = 16
    rng = np.random.default_rng(8_303)
    A = torch.from_numpy(rng.uniform(-1, 1, (M, K)).astype(np.float16)).cuda()
    B = torch.from_numpy(rng.uniform(-1, 1, (K, N)).astype(np.float16)).cuda()
    C = torch.full((M, N), float("nan"), device="cuda")
    R = torch.full((M,), float("nan"), device="cuda")
    tw.compile(clear_slice(M, N, K, a, b, threads), target="cuda")(A, B, C, R)
    torch.cuda.synchronize()
    want = A.cpu().numpy().astype(np.float64) @ B.cpu().numpy().astype(np.float64)
    want[:a, :b] = 0.0
    np.testing.assert_allclose(C.cpu().numpy(), want, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(R.cpu().numpy(), want.sum(axis=1), rtol=1e-3, atol=1e-2)
