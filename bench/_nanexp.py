import sys, numpy as np, torch
sys.path.insert(0, "."); sys.path.insert(0, "tests")
import tilewright, tilewright.language as T
import test_reduce_nan as nan_cpu
for col in (4, 7):
    for thr in (128, 32):
        a = np.random.rand(8, 64).astype(np.float32); a[1, col] = np.nan
        k = tilewright.compile(nan_cpu.nan_reduce("max", 8, 64, "float32", thr, True, True), target="cuda")
        A = torch.tensor(a, device="cuda"); B = torch.full((8,), -7.0, device="cuda")
        k(A, B); torch.cuda.synchronize()
        print("col", col, "threads", thr, "row1 ->", B[1].item(), flush=True)
src = tilewright.compile(nan_cpu.nan_reduce("max", 8, 64, "float32", 128, True, True), target="cuda").get_kernel_source()
import re
print("\n".join(l for l in src.splitlines() if "isnan" in l)[:600])
