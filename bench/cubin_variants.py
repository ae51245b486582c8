"""Time hand-edited variants of a generated GEMM kernel, side by side with cuBLAS (a diagnosis aid).

Code-generation ideas are cheapest to test as text edits of tilewright's own CUDA output, compiled
to cubins on the CPU machine (where the SASS can be read) and carried to the GPU.  The manifest is
a JSON list of ``{"name", "cubin", "grid", "block", "shared_bytes", "shape": [M, N, K], "dtype"}``;
every kernel takes ``(A, B, C)`` row-major.  Each result is checked against a float32 matmul on
fresh random inputs with C poisoned first; entries marked ``"diagnostic": true`` (a barrier or a
load removed on purpose, to price it) are timed even when wrong, and their error is shown.
``python bench/cubin_variants.py manifest.json``.
"""

from __future__ import annotations

import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import bench_ms  # noqa: E402

from tilewright.runtime import cuda_driver as cd  # noqa: E402


def main(manifest_path: str):
    folder = os.path.dirname(os.path.abspath(manifest_path))
    entries = json.load(open(manifest_path))
    rows = ["| variant | TFLOP/s | ratio to cuBLAS | rel err |", "|---|---|---|---|"]
    refs = {}
    for ent in entries:
        m, n, k = ent["shape"]
        td = getattr(torch, ent.get("dtype", "float16"))
        key = (m, n, k, td)
        if key not in refs:
            a, b = torch.randn(m, k, device="cuda", dtype=td), torch.randn(k, n, device="cuda", dtype=td)
            ms = bench_ms(lambda: torch.matmul(a, b))
            refs[key] = (a, b, a.float() @ b.float(), 2 * m * n * k / ms / 1e9)
            rows.append(f"| cuBLAS {m}x{n}x{k} {td} | {refs[key][3]:.0f} | 1.000 | |")
        a, b, ref, ref_tf = refs[key]
        c = torch.full((m, n), float("nan"), device="cuda", dtype=td)
        module = cd.CudaModule(open(os.path.join(folder, ent["cubin"]), "rb").read())
        fn = module.function(ent.get("kernel", "gemm_kernel"))
        stream = torch.cuda.current_stream().cuda_stream

        def go():
            fn.launch(tuple(ent["grid"]), tuple(ent["block"]), ent["shared_bytes"], stream,
                      ("ptr", "ptr", "ptr"), (a.data_ptr(), b.data_ptr(), c.data_ptr()))

        go()
        torch.cuda.synchronize()
        err = ((c.float() - ref).norm() / ref.norm()).item()
        if not err < 1e-2 and not ent.get("diagnostic"):
            rows.append(f"| {ent['name']} | WRONG | | {err:.3g} |")
            continue
        tf = 2 * m * n * k / bench_ms(go) / 1e9
        rows.append(f"| {ent['name']} | {tf:.0f} | {tf / ref_tf:.3f} | {err:.2g} |")
        print(rows[-1], flush=True)
    print("\n".join(rows))


if __name__ == "__main__":
    main(sys.argv[1])
