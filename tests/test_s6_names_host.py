"""TileLang host-side names: ``tilelang.DataType``, ``tilelang.env``, ``tuned.compile(...)`` of an
autotuned eager function, and ``T.CUDASourceCodeKernel`` (compiled by NVRTC; refused elsewhere).
Running the source kernel is in test_s6_names_gpu.py."""

import os
import tempfile

import numpy as np
import pytest
from toolchains import needs_nvrtc
from zoo import close, f64, rand

import tilewright
import tilewright.language as T
from tilewright.errors import CompileError

COPY_SOURCE = """
extern "C" __global__ void external_copy(float* A, float* B, int n) {
    int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n) {
        B[i] = A[i] * 2.0f;
    }
}
"""


def source_kernel(source, entry_name="external_copy"):
    N = T.dynamic("N")

    @T.prim_func
    def main(A: T.Tensor((N,), T.float32), B: T.Tensor((N,), T.float32)):
        T.CUDASourceCodeKernel(T.ceildiv(N, 128), threads=128, source_code_or_path=source, entry_name=entry_name)

    return main


def test_data_type_bits():
    assert tilewright.DataType("float16").bits == 16
    assert tilewright.DataType(T.bfloat16).bits == 16
    assert tilewright.DataType("int8").bits == 8 and tilewright.DataType("float32").bits == 32


def test_env_cache_dir_is_tilewrights(monkeypatch, tmp_path):
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path / "a"))
    assert tilewright.env.TILELANG_CACHE_DIR == str(tmp_path / "a")
    # the folder of the compilers' temporary files (TILEWRIGHT_TMP_DIR, else the system's: test_s7_names_host)
    assert tilewright.env.TILELANG_TMP_DIR == (os.environ.get("TILEWRIGHT_TMP_DIR") or tempfile.gettempdir())
    tilewright.env.TILELANG_CACHE_DIR = str(tmp_path / "b")
    assert os.environ["TILEWRIGHT_CACHE_DIR"] == str(tmp_path / "b")
    with pytest.raises(AttributeError, match="no such setting"):
        tilewright.env.TILELANG_PRINT_ON_COMPILATION  # noqa: B018


def test_autotuned_compile_with_every_tuned_argument():
    rng = np.random.default_rng(67)
    @tilewright.autotune(configs=[{"block_M": 16, "block_N": 32}, {"block_M": 32, "block_N": 16}])
    @tilewright.jit(target="interpret")
    def shift(A, block_M, block_N):
        M, N = T.const("M, N")
        A: T.Tensor((M, N), "float32")
        B = T.empty((M, N), "float32")
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            for i, j in T.Parallel(block_M, block_N):
                B[by * block_M + i, bx * block_N + j] = A[by * block_M + i, bx * block_N + j] * 0.5 - 1.0
        return B

    kernel = shift.compile(M=48, N=64, block_M=16, block_N=32)
    a = rand(rng, (48, 64))
    close(kernel(a), f64(a) * 0.5 - 1.0)


def test_source_kernel_entry_must_exist():
    with pytest.raises(CompileError, match="Available entries: external_copy"):
        source_kernel(COPY_SOURCE, entry_name="main_kernel")


@pytest.mark.parametrize("target,backend", [("interpret", None), ("hip -arch=gfx942", None),
                                            ("cuda -arch=sm_90a", "emulator")])
def test_source_kernel_is_refused_where_cuda_source_cannot_run(target, backend):
    with pytest.raises(CompileError, match="T.CUDASourceCodeKernel"):
        tilewright.compile(source_kernel(COPY_SOURCE), target=target, execution_backend=backend)


@needs_nvrtc
def test_source_kernel_compiles_with_nvrtc(tmp_path):
    kernel = tilewright.compile(source_kernel(COPY_SOURCE), target="cuda -arch=sm_90a")
    assert "B[i] = A[i] * 2.0f;" in kernel.get_kernel_source()
    assert kernel.spec.kernel_name == "external_copy" and kernel.spec.code_object
    assert kernel.spec.arg_types == ("ptr", "ptr", "i32")
    path = tmp_path / "copy.cu"
    path.write_text(COPY_SOURCE)
    from_file = tilewright.compile(source_kernel(path), target="cuda -arch=sm_90a")
    assert from_file.get_kernel_source() == COPY_SOURCE
