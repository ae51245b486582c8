"""The mma.sync ceiling of this GPU: a kernel that only issues m16n8k16 fp16/fp32 mma.sync from
registers (no memory traffic in the loop), at several warps per SM and independent accumulator
chains per warp.  This is the roof the mma.sync GEMM is measured against.
``python bench/mma_peak.py`` on a GPU."""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import bench_ms  # noqa: E402

from tilewright.runtime import cuda_driver as cd  # noqa: E402
from tilewright.toolchain.nvrtc import compile_cuda  # noqa: E402

ITERS = 2048

SOURCE = r"""
extern "C" __global__ void __launch_bounds__(1024) mma_peak(float* out, int seed) {
  unsigned a0 = seed * 3 + threadIdx.x, a1 = a0 ^ 0x3c003c00u, a2 = a0 + 7, a3 = a0 * 5;
  unsigned b0 = a0 ^ 0x1234u, b1 = a1 + 11;
  float acc[CHAINS][4];
  #pragma unroll
  for (int c = 0; c < CHAINS; ++c) { acc[c][0] = acc[c][1] = acc[c][2] = acc[c][3] = 0.0f; }
  for (int i = 0; i < ITERS; ++i) {
    #pragma unroll
    for (int c = 0; c < CHAINS; ++c) {
      asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                   : "+f"(acc[c][0]), "+f"(acc[c][1]), "+f"(acc[c][2]), "+f"(acc[c][3])
                   : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
  }
  float s = 0.0f;
  #pragma unroll
  for (int c = 0; c < CHAINS; ++c) s += acc[c][0] + acc[c][1] + acc[c][2] + acc[c][3];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
"""

# A 64x64 warp tile as the GEMM issues it: 4 A fragments x 8 B fragments, 32 accumulators of 4,
# operands changing from one mma to the next (register-file traffic like the real mainloop).
TILE_SOURCE = r"""
extern "C" __global__ void __launch_bounds__(256) mma_tile(float* out, int seed) {
  unsigned a[4][4], b[8][2];
  #pragma unroll
  for (int i = 0; i < 4; ++i) for (int j = 0; j < 4; ++j) a[i][j] = (seed + threadIdx.x * 7 + i * 4 + j) * 0x9e3779b9u & 0x3bff3bffu;
  #pragma unroll
  for (int i = 0; i < 8; ++i) for (int j = 0; j < 2; ++j) b[i][j] = (seed + threadIdx.x * 5 + i * 2 + j) * 0x85ebca6bu & 0x3bff3bffu;
  float acc[4][8][4];
  #pragma unroll
  for (int m = 0; m < 4; ++m) for (int n = 0; n < 8; ++n) for (int r = 0; r < 4; ++r) acc[m][n][r] = 0.0f;
  for (int i = 0; i < ITERS; ++i) {
    #pragma unroll
    for (int m = 0; m < 4; ++m) {
      #pragma unroll
      for (int n = 0; n < 8; ++n) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(acc[m][n][0]), "+f"(acc[m][n][1]), "+f"(acc[m][n][2]), "+f"(acc[m][n][3])
                     : "r"(a[m][0]), "r"(a[m][1]), "r"(a[m][2]), "r"(a[m][3]), "r"(b[n][0]), "r"(b[n][1]));
      }
    }
  }
  float s = 0.0f;
  #pragma unroll
  for (int m = 0; m < 4; ++m) for (int n = 0; n < 8; ++n) s += acc[m][n][0] + acc[m][n][1] + acc[m][n][2] + acc[m][n][3];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
"""


def tile_rows(sms):
    binary = compile_cuda(TILE_SOURCE.replace("ITERS", str(ITERS // 4)), "sm_90a", ["mma_tile"])
    fn = cd.CudaModule(binary.cubin).function("mma_tile")
    rows = []
    for warps, blocks in ((4, 1), (8, 1), (4, 2)):
        threads = 32 * warps
        out = torch.empty(sms * blocks * threads, device="cuda")
        stream = torch.cuda.current_stream().cuda_stream

        def go():
            fn.launch((sms * blocks, 1, 1), (threads, 1, 1), 0, stream, ("ptr", "i32"), (out.data_ptr(), 1))

        ms = bench_ms(go)
        flops = 2.0 * 16 * 8 * 16 * 32 * (ITERS // 4) * warps * blocks * sms
        rows.append(f"| {warps * blocks} ({blocks} block(s) of {warps}) | 64x64 warp tile, "
                    f"{binary.resources['mma_tile']['registers']} registers | {flops / ms / 1e9:.0f} |")
    return rows


def main():
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = ["| warps per SM | chains per warp | TFLOP/s |", "|---|---|---|"]
    for chains in (4, 8, 16):
        src = SOURCE.replace("CHAINS", str(chains)).replace("ITERS", str(ITERS))
        binary = compile_cuda(src, "sm_90a", ["mma_peak"])
        module = cd.CudaModule(binary.cubin)
        fn = module.function("mma_peak")
        for warps in (4, 8, 16, 32):
            threads = 32 * min(warps, 32)
            out = torch.empty(sms * threads, device="cuda")
            stream = torch.cuda.current_stream().cuda_stream

            def go():
                fn.launch((sms, 1, 1), (threads, 1, 1), 0, stream, ("ptr", "i32"), (out.data_ptr(), 1))

            ms = bench_ms(go)
            flops = 2.0 * 16 * 8 * 16 * chains * ITERS * (threads // 32) * sms
            rows.append(f"| {warps} | {chains} | {flops / ms / 1e9:.0f} |")
    rows += tile_rows(sms)
    print("\n".join(rows))


if __name__ == "__main__":
    main()
