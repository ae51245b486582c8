"""The kernels of test_compat_item3.py on an NVIDIA GPU (issue 12, item 3): every test there that
runs through ``run_everywhere`` runs here on the GPU instead (compiled for the GPU's own target,
pipelining, TMA and warp specialization as they apply), with the same float64 references and
poisoned outputs; plus what only a launch shows: the dynamic shared memory a call asks for, over
and under the 48 KiB that needs the opt-in, and a fragment beyond the register file compiled by
the device compiler.  Skipped without a CUDA GPU."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or getattr(torch.version, "hip", None):
    pytest.skip("needs an NVIDIA GPU with a CUDA build of PyTorch", allow_module_level=True)

import test_compat_item3 as cpu  # noqa: E402

import tilewright as tw  # noqa: E402
from tilewright.errors import ArgumentError, TilewrightWarning  # noqa: E402


def run_on_gpu(func, make_args, check, targets=None):  # noqa: ARG001 (the GPU's own target)
    """``run_everywhere`` of the CPU tests, on the GPU: NumPy arguments go over as tensors (their
    strides kept), results come back into the same arrays before ``check``."""
    args = make_args()
    dev = [torch.from_numpy(a).cuda() if isinstance(a, np.ndarray) else a for a in args]
    tw.compile(func, target="cuda")(*dev)
    torch.cuda.synchronize()
    for a, d in zip(args, dev):
        if isinstance(a, np.ndarray):
            a[...] = d.cpu().numpy()
    check(args, "cuda")


GPU_CASES = [
    ("test_fill_and_copy_under_thread_condition", {}),
    ("test_gemm_and_reduce_under_thread_condition", {}),
    ("test_thread_binding_from_kernel_frame", {}),
    ("test_thread_condition_and_uniform_condition_together", {}),
    ("test_operand_copies_split_between_warpgroups_in_pipelined_gemm", {"stages": 0}),
    ("test_operand_copies_split_between_warpgroups_in_pipelined_gemm", {"stages": 2}),
    ("test_block_sparse_gemm_in_pipelined_loop", {"stages": 0}),
    ("test_block_sparse_gemm_in_pipelined_loop", {"stages": 2}),
    ("test_block_sparse_gemm_in_pipelined_loop", {"stages": 3}),
    ("test_tilelang_block_sparse_gemm", {"stages": 2, "size": (1024, 1024, 1024)}),
    ("test_tilelang_block_sparse_gemm", {"stages": 3, "size": (1024, 1024, 1024)}),
    ("test_partly_conditional_body_in_pipelined_loop", {"variant": "copy_cond"}),
    ("test_partly_conditional_body_in_pipelined_loop", {"variant": "gemm_cond"}),
    ("test_kernel_without_grid_is_one_block", {}),
    ("test_element_to_element_copy", {}),
    ("test_reduce_into_one_element_buffer_subscript", {}),
    ("test_reduce_into_scalar_var_seen_by_every_thread", {}),
    ("test_reduce_into_one_element_local", {}),
    ("test_parallel_over_kernel_argument", {}),
    ("test_parallel_over_symbolic_rows_through_shared", {}),
    ("test_parallel_over_two_symbolic_dims", {}),
    ("test_parallel_over_kernel_argument_in_each_warpgroup", {}),
    ("test_shared_buffer_sized_at_launch", {}),
    ("test_copy_of_symbolic_length_into_dynamic_shared", {}),
    ("test_tiles_of_a_dynamic_shared_buffer_through_fragments", {}),
    ("test_column_major_tensor_of_dynamic_size_both_directions", {}),
    ("test_pipelined_gemm_over_column_major_operand", {}),
    ("test_parallel_over_strided_tensor_of_dynamic_length", {}),
]


@pytest.mark.parametrize("name,kwargs", GPU_CASES, ids=[f"{n}{kw or ''}" for n, kw in GPU_CASES])
def test_item3_kernel_on_the_gpu(name, kwargs, monkeypatch):
    monkeypatch.setattr(cpu, "run_everywhere", run_on_gpu)
    getattr(cpu, name)(np.random.default_rng(12_3), **kwargs)


@pytest.mark.parametrize("rows", [10, 150, 800])
def test_dynamic_shared_memory_per_call(rows):
    """150 and 800 rows of 256 bytes need more than 48 KiB (the opt-in), 10 rows far less; a size
    over the GPU's shared memory is an ArgumentError naming the buffer, before any launch."""
    k = tw.compile(cpu.dynamic_rows_reversed(), target="cuda")
    a = torch.rand(rows, 64, device="cuda")
    b = torch.full((rows, 64), float("nan"), device="cuda")
    k(a, b, 2.0)
    torch.testing.assert_close(b.double(), a.double().flip(0) * 2.0)
    too_many = k.spec.shared_bytes // 256 + 1
    with pytest.raises(ArgumentError, match="shared buffer S"):
        k(torch.rand(too_many, 64, device="cuda"), torch.empty(too_many, 64, device="cuda"), 1.0)


def test_fragment_beyond_register_file_runs():
    """512 registers per thread (twice the register file: refused before): compiled by the device
    compiler with spills, and right."""
    import tilewright.language as T

    M, N = 128, 128

    @T.prim_func
    def k(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=32):
            F = T.alloc_fragment((M, N), "float32")
            T.copy(A, F)
            for i, j in T.Parallel(M, N):
                F[i, j] = F[i, j] * 3.0 + 1.0
            T.copy(F, B)

    with pytest.warns(TilewrightWarning, match="local memory"):
        kern = tw.compile(k, target="cuda")
    a = torch.rand(M, N, device="cuda")
    b = torch.full((M, N), float("nan"), device="cuda")
    kern(a, b)
    torch.testing.assert_close(b.double(), a.double() * 3.0 + 1.0)
