"""The kernels of test_s7_frag_*.py on an NVIDIA GPU: program-given fragment layouts (partial-thread
reductions), loops that store to a fragment at positions other than their own, and fragments widened to
the loops that index them -- each with the same float64 references and poisoned outputs as on the CPU,
compiled for the GPU's own target.  Skipped without a CUDA GPU."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or getattr(torch.version, "hip", None):
    pytest.skip("needs an NVIDIA GPU with a CUDA build of PyTorch", allow_module_level=True)

import test_s7_frag_store_layouts as stores  # noqa: E402
import test_s7_frag_user_layouts as user  # noqa: E402
import test_s7_frag_widen as widen  # noqa: E402
from test_compat_refusals_gpu import run_on_gpu  # noqa: E402

CASES = [
    (user, "test_partial_thread_reduction", {"rows": 4, "width": 512, "threads": 128, "offset": 0}),
    (user, "test_partial_thread_reduction", {"rows": 2, "width": 512, "threads": 128, "offset": 32}),
    (user, "test_two_groups_of_threads", {"block_threads": 128}),
    (user, "test_two_groups_of_threads", {"block_threads": 256}),
    (user, "test_discontiguous_layout_without_reduction", {}),
    (user, "test_absmax_over_reshaped_user_layout", {}),
    (user, "test_identity_layout_on_a_dtype_changing_view", {}),
    (stores, "test_clear_a_slice_of_an_accumulator", {"M": 128, "N": 128, "K": 64, "bk": 32, "cw": None}),
    (stores, "test_clear_a_slice_of_an_accumulator", {"M": 64, "N": 64, "K": 32, "bk": 16, "cw": 2}),
    (stores, "test_transpose_of_an_accumulator", {}),
    (stores, "test_update_through_a_reshaped_accumulator", {}),
    (widen, "test_fragment_indexed_past_its_shape_by_parallel_loops", {"heads": 8}),
]


def _gpu_only(func, make_args, check, targets=None, out_idx=None):
    run_on_gpu(func, make_args, check, out_idx=out_idx)


@pytest.mark.parametrize("mod,name,kwargs", CASES, ids=[f"{n}{kw or ''}" for _, n, kw in CASES])
def test_on_the_gpu(mod, name, kwargs, monkeypatch):
    monkeypatch.setattr(mod, "run_everywhere", _gpu_only)
    getattr(mod, name)(rng=np.random.default_rng(2026_12), **kwargs)


def test_holders_on_the_gpu():
    """Each element records the thread that wrote it: the one the T.Fragment names."""
    shape, fn = (4, 512), (lambda i, j: (32 + j // 8, i * 8 + j % 8))
    kern = user.tw.compile(user.holder_of_each_element(fn, shape, 128), target="cuda")
    out = torch.full(shape, float("nan"), device="cuda")
    kern(out)
    torch.cuda.synchronize()
    i, j = np.indices(shape)
    np.testing.assert_array_equal(out.cpu().numpy(), fn(i, j)[0].astype(np.float32))
