"""The kernels of test_compat_refusals.py on an NVIDIA GPU (issue 12: kernels TileLang accepts that
were refused): every test there that runs through ``run_everywhere`` runs here on the GPU instead
(compiled for the GPU's own target), with the same float64 references and poisoned outputs; plus what
only a launch shows: a tensor of 2**32 elements addressed through an int64 size, the per-call
``T.assume`` check and the zero-grid refusal on the device launcher, and ``T.alloc_global`` workspaces
allocated on the arguments' device.  Skipped without a CUDA GPU."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or getattr(torch.version, "hip", None):
    pytest.skip("needs an NVIDIA GPU with a CUDA build of PyTorch", allow_module_level=True)

import test_compat_refusals as cpu  # noqa: E402

import tilewright as tw  # noqa: E402
from tilewright.errors import ArgumentError  # noqa: E402


def run_on_gpu(func, make_args, check, targets=None, out_idx=None):  # noqa: ARG001 (the GPU's own target)
    """``run_everywhere`` of the CPU tests, on the GPU: NumPy arguments go over as tensors, results
    come back into the same arrays (or are appended, with ``out_idx``) before ``check``."""
    args = make_args()
    dev = [_to_device(a) if isinstance(a, np.ndarray) else a for a in args]
    out = tw.compile(func, target="cuda", out_idx=out_idx)(*dev)
    torch.cuda.synchronize()
    for a, d in zip(args, dev):
        if isinstance(a, np.ndarray):
            a[...] = _to_host(d)
    if out_idx is not None:
        args = args + [_to_host(o) for o in (out if isinstance(out, list) else [out])]
    check(args)


_BF16 = np.dtype(tw.ir.dtype.to_numpy("bfloat16"))


def _to_device(a: np.ndarray):
    """A NumPy array as a CUDA tensor; ml_dtypes' bfloat16 (which torch.from_numpy refuses) by its bits."""
    a = np.ascontiguousarray(a)
    if a.dtype == _BF16:
        return torch.from_numpy(a.view(np.uint16)).cuda().view(torch.bfloat16)
    return torch.from_numpy(a).cuda()


def _to_host(t):
    """A CUDA tensor back as a NumPy array (bfloat16 by its bits, as ml_dtypes' bfloat16)."""
    if t.dtype == torch.bfloat16:
        return t.cpu().view(torch.uint16).numpy().view(_BF16)
    return t.cpu().numpy()


GPU_CASES = [
    ("test_reshape_of_a_kernel_parameter", {"how": "reshape", "dtype": "float32"}),
    ("test_reshape_of_a_kernel_parameter", {"how": "view", "dtype": "float16"}),
    ("test_copy_through_a_view_of_an_on_chip_buffer", {"scope": "shared"}),
    ("test_copy_through_a_view_of_an_on_chip_buffer", {"scope": "fragment"}),
    ("test_transpose_in_shared_memory", {"M": 128, "N": 128, "bm": 64, "bn": 64}),
    ("test_transpose_in_shared_memory", {"M": 128, "N": 64, "bm": 64, "bn": 32}),
    ("test_alloc_global_workspace_with_out_idx", {}),
    ("test_alloc_global_workspace_outputs_passed", {}),
    ("test_alloc_global_sized_by_a_dynamic_dimension", {}),
    ("test_atomic_add_use_tma_gives_the_same_sums", {"rows": 16, "cols": 16, "repeats": 16}),
    ("test_atomic_add_use_tma_gives_the_same_sums", {"rows": 16, "cols": 24, "repeats": 1}),
    ("test_atomic_add_return_prev_in_parallel_loop", {"bm": 8, "bn": 16, "dtype": "float32"}),
    ("test_atomic_add_return_prev_in_parallel_loop", {"bm": 4, "bn": 8, "dtype": "float32"}),
    ("test_atomic_add_return_prev_in_parallel_loop", {"bm": 8, "bn": 16, "dtype": "float16"}),
    ("test_atomic_addx_return_prev", {"n": 2, "let_bound": True}),
    ("test_atomic_addx_return_prev", {"n": 4, "let_bound": False}),
    ("test_slice_whose_start_is_not_affine", {}),
    ("test_tma_copy_from_shared_to_global_needs_no_barrier", {"stages": 2}),
    ("test_tma_copy_from_shared_to_global_needs_no_barrier", {"stages": 3}),
    ("test_block_mask_fragment_steers_tile_copies", {"stages": 1}),
    ("test_block_mask_fragment_steers_tile_copies", {"stages": 2}),
    ("test_int64_dynamic_size_runs_for_small_sizes", {"size": 2048}),
]


@pytest.mark.parametrize("name,kwargs", GPU_CASES, ids=[f"{n}{kw or ''}" for n, kw in GPU_CASES])
def test_refused_kernel_on_the_gpu(name, kwargs, monkeypatch):
    monkeypatch.setattr(cpu, "run_everywhere", run_on_gpu)
    fn = getattr(cpu, name)
    if "rng" in fn.__code__.co_varnames[:fn.__code__.co_argcount]:
        kwargs = {"rng": np.random.default_rng(2026_12), **kwargs}
    fn(**kwargs)


def test_int64_size_fills_two_to_the_32_elements():
    """2**32 bfloat16 elements (8 GiB): the offsets pass 2**31 and the size is a 64-bit parameter."""
    n = 2**32
    free, _ = torch.cuda.mem_get_info()
    if free < n * 2 + (1 << 30):
        pytest.skip("needs 9 GiB of free GPU memory")
    x = torch.zeros(n, dtype=torch.bfloat16, device="cuda")
    tw.compile(cpu.fill_symbolic(1.0, "bfloat16"), target="cuda")(x)
    assert x.min().item() == 1.0 and x.max().item() == 1.0
    del x
    torch.cuda.empty_cache()


def test_assume_and_zero_grid_on_the_device_launcher():
    kern = tw.compile(cpu.assume_kernel(), target="cuda")
    a = torch.full((8,), float("nan"), device="cuda")
    kern(a)
    torch.cuda.synchronize()
    assert (a == 1).all()
    with pytest.raises(RuntimeError, match=r"Assume: N % 4 == 0"):
        kern(torch.empty(6, device="cuda"))
    zero = tw.compile(cpu.zero_grid(), target="cuda")
    out = torch.full((4,), float("nan"), device="cuda")
    zero(out)
    torch.cuda.synchronize()
    assert (out == 1).all()
    with pytest.raises(ArgumentError, match="grid dimension x of T.Kernel is 0"):
        zero(torch.zeros(0, device="cuda"))
