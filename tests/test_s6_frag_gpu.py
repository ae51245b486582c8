"""The kernels of test_s6_frag_tile_ops.py, test_s6_frag_fragments.py and test_s6_frag_shared_reuse.py
on an NVIDIA GPU (issue 12 item 3): every ``run_everywhere`` test there runs here on the GPU instead
(compiled for the GPU's own target), with the same float64 references and poisoned outputs; the
shared-memory sharing kernels run with torch tensors.  Skipped without a CUDA GPU."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or getattr(torch.version, "hip", None):
    pytest.skip("needs an NVIDIA GPU with a CUDA build of PyTorch", allow_module_level=True)

import test_s6_frag_fragments as frags  # noqa: E402
import test_s6_frag_shared_reuse as reuse  # noqa: E402
import test_s6_frag_tile_ops as ops  # noqa: E402
from test_compat_refusals_gpu import run_on_gpu  # noqa: E402

import tilewright as tw  # noqa: E402

CASES = [
    (ops, "test_fill_and_clear_of_one_element", {}),
    (ops, "test_tile_atomic_of_a_scalar_into_a_region", {"op": "add"}),
    (ops, "test_tile_atomic_of_a_scalar_into_a_region", {"op": "max"}),
    (ops, "test_tile_atomic_into_a_whole_buffer", {}),
    (ops, "test_scan_of_a_strided_region", {"op": "cumsum", "dim": 0, "reverse": False, "scope": "shared"}),
    (ops, "test_scan_of_a_strided_region", {"op": "cummax", "dim": 1, "reverse": True, "scope": "fragment"}),
    (ops, "test_scan_of_rows_at_an_offset", {"op": "cumsum", "dim": 0}),
    (ops, "test_cumsum_of_a_view", {}),
    (ops, "test_gemm_with_a_float32_fragment_operand", {"trans_b": False, "dtype": "float32"}),
    (ops, "test_gemm_with_a_float32_fragment_operand", {"trans_b": True, "dtype": "tfloat32"}),
    (ops, "test_copy_of_a_run_time_length_into_a_fixed_tile", {"n": 100}),
    (ops, "test_copy_of_a_run_time_length_into_a_fixed_tile", {"n": 1500}),
    (ops, "test_fill_of_a_slice_computed_in_the_kernel", {"lo": 5, "hi": 777}),
    (frags, "test_register_indexed_by_a_serial_loop_variable", {}),
    (frags, "test_reducer_over_fragment_rows_picked_by_serial_loops", {}),
    (frags, "test_serial_loop_inside_parallel_reads_a_fragment", {}),
    (frags, "test_fragment_rows_picked_by_a_pipelined_loop", {}),
    (frags, "test_fragment_index_read_at_run_time", {}),
]


@pytest.mark.parametrize("mod,name,kwargs", CASES, ids=[f"{n}{kw or ''}" for _, n, kw in CASES])
def test_s6_kernel_on_the_gpu(mod, name, kwargs, monkeypatch):
    monkeypatch.setattr(mod, "run_everywhere", run_on_gpu)
    fn = getattr(mod, name)
    if "rng" in fn.__code__.co_varnames[:fn.__code__.co_argcount]:
        kwargs = {"rng": np.random.default_rng(2026_1203), **kwargs}
    fn(**kwargs)


def _run(func, arrays):
    dev = [torch.from_numpy(np.ascontiguousarray(a)).cuda() for a in arrays]
    kern = tw.compile(func, target="cuda")
    kern(*dev)
    torch.cuda.synchronize()
    return kern, [d.cpu().numpy() for d in dev]


def test_shared_memory_sharing_on_the_gpu():
    rows = 256
    rng = np.random.default_rng(5)
    x, z = reuse.rand(rng, (rows, 128)), reuse.rand(rng, (rows, 128))
    kern, (_, _, y, w) = _run(reuse.two_phases(rows), [x, z, reuse.poisoned((rows, 128)), reuse.poisoned((rows, 128))])
    reuse.close(y, 2.0 * reuse.f64(x)[::-1])
    reuse.close(w, reuse.f64(z)[:, ::-1] + 1.0)


@pytest.mark.skipif(torch.cuda.is_available() and torch.cuda.get_device_capability() != (9, 0),
                    reason="the warp-specialized form is sm_90a's")
def test_warp_specialized_epilogue_sharing_on_the_gpu():
    M, N, K, bk, stages = 128, 256, 192, 64, 3
    rng = np.random.default_rng(6)
    a, b = reuse.rand(rng, (M, K), "float16"), reuse.rand(rng, (K, N), "float16")
    _, (_, _, c) = _run(reuse.gemm_with_staged_epilogue(M, N, K, bk, stages), [a, b, reuse.poisoned((M, N))])
    reuse.close(c, (reuse.f64(a) @ reuse.f64(b))[::-1] + 1.0, rtol=1e-3, atol=1e-3)
