"""NVRTC compilation to cubin: tensor-core PTX for sm_80 / sm_90a, resource reporting, error reports."""

from __future__ import annotations

import os

import pytest

from tilewright.errors import ToolchainError
from tilewright.toolchain import nvrtc
from tilewright.toolchain.cubin import list_cubin_kernels

pytest.importorskip("cuda.bindings.nvrtc")


@pytest.fixture(scope="module", autouse=True)
def _need_nvrtc():
    try:
        nvrtc.nvrtc_version()
    except ToolchainError as exc:
        pytest.skip(f"NVRTC is not usable here: {exc}")


# One warp computes C[16x8] = A[16x16] @ B[16x8] with the Ampere tensor-core path: cp.async
# global->shared, ldmatrix shared->registers, mma.sync m16n8k16.  B is stored transposed (Bt[n][k]).
MMA_KERNEL = r"""
extern "C" __global__ void __launch_bounds__(32)
mma_16x8x16(const __half* __restrict__ A, const __half* __restrict__ Bt, float* __restrict__ C) {
  __shared__ __align__(128) __half sA[16 * 16];
  __shared__ __align__(128) __half sB[8 * 16];
  const int lane = threadIdx.x;
  unsigned dst = (unsigned)__cvta_generic_to_shared(sA + lane * 8);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(dst), "l"(A + lane * 8));
  if (lane < 16) {
    dst = (unsigned)__cvta_generic_to_shared(sB + lane * 8);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(dst), "l"(Bt + lane * 8));
  }
  asm volatile("cp.async.commit_group;\n" ::);
  asm volatile("cp.async.wait_group 0;\n" ::);
  __syncthreads();

  unsigned a[4], b[2];
  unsigned a_addr = (unsigned)__cvta_generic_to_shared(sA + (lane % 16) * 16 + (lane / 16) * 8);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3]) : "r"(a_addr));
  unsigned b_addr = (unsigned)__cvta_generic_to_shared(sB + (lane % 8) * 16 + ((lane / 8) % 2) * 8);
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(b[0]), "=r"(b[1]) : "r"(b_addr));
  float c[4] = {0.f, 0.f, 0.f, 0.f};
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
               "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  const int row = lane / 4, col = (lane % 4) * 2;
  C[row * 8 + col] = c[0];
  C[row * 8 + col + 1] = c[1];
  C[(row + 8) * 8 + col] = c[2];
  C[(row + 8) * 8 + col + 1] = c[3];
}
"""
MMA_SOURCE = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>

""" + MMA_KERNEL + r"""
extern "C" __global__ void scale_bf16(__nv_bfloat16* x, float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = __float2bfloat16(__bfloat162float(x[i]) * s);
}
"""


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_compile_tensor_core_kernel(arch, tmp_path):
    binary = nvrtc.compile_cuda(MMA_SOURCE, arch, ["mma_16x8x16", "scale_bf16"], dump_dir=str(tmp_path))
    assert binary.cubin[:4] == b"\x7fELF"
    assert binary.arch == arch
    assert binary.toolchain == nvrtc.nvrtc_version()
    assert binary.toolchain.startswith("nvrtc ")
    assert binary.compile_seconds > 0
    assert set(list_cubin_kernels(binary.cubin)) == {"mma_16x8x16", "scale_bf16"}
    for name in ("mma_16x8x16", "scale_bf16"):
        res = binary.resources[name]
        assert set(res) == {"registers", "shared_bytes", "local_bytes", "spills", "spill_stores", "spill_loads"}
        assert 0 < res["registers"] <= 255
        assert res["spills"] == 0 and res["local_bytes"] == 0
    # 16x16 + 8x16 halves of static shared memory, whatever the architecture reserves besides.
    assert binary.resources["mma_16x8x16"]["shared_bytes"] == (256 + 128) * 2
    assert binary.resources["scale_bf16"]["shared_bytes"] == 0
    assert "Used" in binary.log and "registers" in binary.log  # ptxas -v output came through
    # dump_dir holds the source, the cubin and the log.
    assert (tmp_path / "kernel.cu").read_text() == MMA_SOURCE
    assert (tmp_path / "kernel.cubin").read_bytes() == binary.cubin
    assert (tmp_path / "kernel.log").read_text() == binary.log


def test_arch_spellings_and_compile_time():
    src = 'extern "C" __global__ void k(float* x) { x[threadIdx.x] *= 2.f; }'
    assert nvrtc.compile_cuda(src, "90a", ["k"]).arch == "sm_90a"
    assert nvrtc.compile_cuda(src, "sm80", ["k"]).arch == "sm_80"
    # Small kernels must stay cheap to compile (the autotuner compiles many).  Generous bound: CI machines vary.
    headers = "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n"
    binary = nvrtc.compile_cuda(headers + src, "sm_80", ["k"])
    assert binary.compile_seconds < 5.0


def test_spills_are_reported():
    # 128 live floats per thread under a 32-register cap must spill.
    src = r"""
    extern "C" __global__ void hot(float* x, int n) {
      float acc[128];
      #pragma unroll
      for (int i = 0; i < 128; ++i) acc[i] = x[i * n + threadIdx.x];
      #pragma unroll
      for (int r = 0; r < 4; ++r)
        #pragma unroll
        for (int i = 0; i < 128; ++i) acc[i] = acc[i] * acc[(i + 7 * r + 1) % 128] + 1.0f;
      #pragma unroll
      for (int i = 0; i < 128; ++i) x[i * n + threadIdx.x] = acc[i];
    }
    """
    binary = nvrtc.compile_cuda(src, "sm_80", ["hot"], options=("--maxrregcount=32",))
    res = binary.resources["hot"]
    assert res["registers"] <= 32
    assert res["spill_stores"] > 0 and res["spill_loads"] > 0
    assert res["spills"] == res["spill_stores"] + res["spill_loads"]
    assert res["local_bytes"] > 0


def test_syntax_error_reports_log_source_and_repro(tmp_path):
    src = 'extern "C" __global__ void broken(float* x) { x[0] = ; }\n'
    with pytest.raises(ToolchainError) as info:
        nvrtc.compile_cuda(src, "sm_80", ["broken"], dump_dir=str(tmp_path), filename="broken.cu")
    err = info.value
    assert "expected an expression" in err.log
    assert err.source_path == str(tmp_path / "broken.cu")
    assert os.path.exists(err.source_path)
    assert "nvcc -cubin -arch=sm_80" in err.repro
    assert "compile_cuda" in err.repro
    text = str(err)
    assert err.source_path in text and "expected an expression" in text and "nvcc" in text


def test_syntax_error_without_dump_dir_writes_a_temp_file():
    with pytest.raises(ToolchainError) as info:
        nvrtc.compile_cuda("this is not C++", "sm_90a", [])
    path = info.value.source_path
    assert path and os.path.isfile(path)
    with open(path) as f:
        assert f.read() == "this is not C++"


def test_missing_kernel_name_is_an_error():
    src = '__global__ void mangled(float* x) { x[0] = 1.f; }'  # no extern "C": the name is mangled
    with pytest.raises(ToolchainError, match='extern "C"'):
        nvrtc.compile_cuda(src, "sm_80", ["mangled"])


@pytest.mark.parametrize("arch", ["compute_90", "sm_10", "gfx942", ""])
def test_bad_architectures(arch):
    with pytest.raises(ToolchainError):
        nvrtc.compile_cuda('extern "C" __global__ void k() {}', arch, ["k"])


def test_bad_option_is_a_toolchain_error():
    with pytest.raises(ToolchainError):
        nvrtc.compile_cuda('extern "C" __global__ void k() {}', "sm_80", ["k"], options=("--no-such-option",))


def test_include_dirs_have_the_half_headers():
    dirs = nvrtc.cuda_include_dirs()
    assert dirs
    assert any(os.path.isfile(os.path.join(d, "cuda_fp16.h")) for d in dirs)
    assert 80 in nvrtc.supported_archs() and 90 in nvrtc.supported_archs()
