"""SASS instruction counts of the sm_90a attention key loop, per candidate (a CPU-side diagnosis aid: NVRTC and
nvdisasm, no GPU).  Builds ``ops.attention``'s forward kernel at 16 heads, bf16, dense even lengths, with the
shipped sm_90a pass configs of the head dim (or a candidate's), disassembles it and finds the key loop: the
smallest backward branch whose body holds both gemms' HGMMAs.  Prints one markdown row per kernel: the loop's
instruction count and its largest opcode classes; for causal kernels the loop includes the diagonal block's
mask branch (its ISETP/FSEL), which runs in one key block of each work item.

``python bench/attention_sass.py [--dim 64] [--save]``; ``--save`` writes the table under bench/results/."""

from __future__ import annotations

import argparse
import collections
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tilewright.ops import attention_dispatch as dispatch  # noqa: E402
from tilewright.ops import attention_kernels as ak  # noqa: E402

# (name, causal, persistent, attention_fwd keywords, pass configs over the head dim's shipped ones)
KERNELS = [("non-causal grid", False, 0, {}, {}),
           ("non-causal persistent", False, 132, {}, {}),
           ("causal grid", True, 0, {}, {}),
           ("causal persistent", True, 132, {}, {}),
           ("non-causal grid, fold", False, 0, {}, {"tw.wgmma_desc_fold": True}),
           ("causal persistent, fold", True, 132, {}, {"tw.wgmma_desc_fold": True}),
           ("causal persistent, direct", True, 132, {"stage_out": False}, {}),
           ("causal persistent, 3 stages", True, 132, {"stages": 3}, {}),
           ("causal persistent, direct, uniform", True, 132, {"stage_out": False}, {"tw.uniform_ring": True}),
           ("causal persistent, direct, uniform, fold", True, 132, {"stage_out": False},
            {"tw.uniform_ring": True, "tw.wgmma_desc_fold": True}),
           ("non-causal persistent, uniform", False, 132, {}, {"tw.uniform_ring": True})]


def _nvdisasm() -> str:
    """nvdisasm from $TW_NVDISASM, PATH or the nvidia-cuda-nvdisasm wheel."""
    cands = [os.environ.get("TW_NVDISASM"), shutil.which("nvdisasm")]
    for site in sys.path:
        cands += glob.glob(os.path.join(site, "nvidia", "*", "bin", "nvdisasm"))
    tool = next((c for c in cands if c and os.access(c, os.X_OK)), None)
    if tool is None:
        raise SystemExit("no nvdisasm (the nvidia-cuda-nvdisasm wheel, or TW_NVDISASM)")
    return tool


def key_loop(sass: str) -> list[str]:
    """The opcodes of the smallest loop (a label and a later branch back to it) holding HGMMAs of both shapes."""
    lines = sass.splitlines()
    labels = {m.group(1): i for i, line in enumerate(lines) if (m := re.match(r"\s*(\.L_x_\d+):", line))}
    ops = [m.group(2) if (m := re.search(r"\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Za-z0-9_.]+)", line)) else None
           for line in lines]
    best = None
    for i, line in enumerate(lines):
        m = re.search(r"BRA `?\(?(\.L_x_\d+)", line)
        if not m or labels.get(m.group(1), i) >= i:
            continue
        body = [op for op in ops[labels[m.group(1)]:i + 1] if op]
        shapes = {op.split(".")[1] for op in body if op.startswith("HGMMA")}
        if len(shapes) >= 2 and (best is None or len(body) < len(best)):
            best = body
    return best or []


def row(name, causal, persistent, kw, extra, dim) -> str:
    from tilewright.codegen.cuda import print_cuda
    from tilewright.passes.pipeline import PassContext, run_pipeline
    from tilewright.target import Target
    from tilewright.toolchain import nvrtc

    stages = kw.pop("stages", 2)
    f = ak.attention_fwd(16, 16, dim, "bfloat16", "bfloat16", causal, False, False, 1, False, False, False, False,
                         128, 128, stages, 256, stage_out=kw.pop("stage_out", True), even_q=True, even_k=True,
                         persistent=persistent, order="pairs", **kw)
    shipped = {**dispatch.HOPPER_CONFIGS, **(dispatch.HOPPER_D64_OVERRIDES if dim <= 64 else
                                             dispatch.HOPPER_NONCAUSAL_OVERRIDES if not causal else
                                             dispatch.HOPPER_LONG_CAUSAL_OVERRIDES)}
    k = run_pipeline(f, PassContext(Target.parse("cuda -arch=sm_90a"), {"optimize_level": 2, **shipped, **extra}))
    binary = nvrtc.compile_cuda(print_cuda(k), "sm_90a", [k.name])
    res = binary.resources[k.name]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.cubin")
        with open(path, "wb") as fh:
            fh.write(binary.cubin)
        sass = subprocess.run([_nvdisasm(), "-c", path], capture_output=True, text=True, check=True).stdout
    loop = key_loop(sass)
    top = collections.Counter(op.split(".")[0] for op in loop).most_common(12)
    return (f"| {name} | {res['registers']} | {res['spills']} | {len(loop)} | "
            + ", ".join(f"{op} {n}" for op, n in top) + " |")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--save", action="store_true")
    args = ap.parse_args()
    rows = [f"Key loop of the sm_90a attention forward, head dim {args.dim}, bf16, 128x128 blocks, even lengths "
            "(NVRTC sm_90a, nvdisasm; instructions of one consumer thread per key block)", "",
            "| kernel | registers | spills | loop instructions | largest classes |", "|---|---|---|---|---|"]
    for name, causal, persistent, kw, extra in KERNELS:
        rows.append(row(name, causal, persistent, dict(kw), extra, args.dim))
        print(rows[-1], flush=True)
    if args.save:
        from common import save
        print("saved", save(f"attention-sass-d{args.dim}", rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
