"""Generated CUDA/HIP source of the test zoo and tilewright.kernels on four targets, as JSON
{case|target|options: source} — run in two checkouts and compare with ``--diff`` to show what a
compiler change did to the generated code.

    python scripts/source_snapshot.py before.json        (in the old checkout)
    python scripts/source_snapshot.py after.json         (in the new one)
    python scripts/source_snapshot.py --diff before.json after.json > report.md
"""

from __future__ import annotations

import difflib
import json
import os
import sys

TARGETS = ["cuda -arch=sm_80", "cuda -arch=sm_90a", "hip -arch=gfx942", "hip -arch=gfx1100"]


def cases():
    sys.path.insert(0, os.path.join(os.getcwd(), "tests"))  # run from the checkout root
    import zoo

    import tilewright.language as T
    from tilewright.kernels import flash_attention, matmul, rms_norm, softmax

    return {
        "elementwise": lambda: zoo.elementwise_activation(1000, 128),
        "elementwise_fragments": lambda: zoo.elementwise_fragments(1000, 128),
        "tiled_copy": lambda: zoo.tiled_copy(1000, 500, 128, 64),
        "transpose": lambda: zoo.transpose(256, 128, 64, 64),
        "convert_copy": lambda: zoo.convert_copy(256, 128, 64, 64),
        "gemm_nn": lambda: zoo.matmul(100, 72, 40, 64, 64, 32, "float16"),
        "gemm_nt": lambda: zoo.matmul(100, 72, 40, 64, 64, 32, "float16", trans_b=True),
        "gemm_tt_bias_relu": lambda: zoo.matmul(100, 72, 40, 64, 64, 32, "bfloat16", trans_a=True, trans_b=True,
                                                epilogue="bias_relu"),
        "gemm_pipelined": lambda: zoo.matmul(512, 512, 512, 128, 128, 32, "float16", out_dtype="float32", stages=3,
                                             threads=256),
        "gemm_ragged_pipelined": lambda: zoo.matmul(200, 136, 72, 64, 64, 32, "float16", stages=2),
        "gemm_f32": lambda: zoo.matmul(100, 72, 40, 64, 64, 32, "float32"),
        "gemm_int8": lambda: zoo.int8_gemm(70, 50, 96, 64, 32, 32),
        "splitk": lambda: zoo.splitk_gemm(90, 80, 128, 64, 64, 32, 2),
        "online_softmax": lambda: zoo.online_softmax(64, 1000, 4, 256),
        "rmsnorm": lambda: zoo.rmsnorm(37, 256, 8),
        "layernorm": lambda: zoo.layernorm(37, 256, 8),
        "attention_p_in_registers": lambda: zoo.flash_attention(200, 64, 64, 64, True,
                                                                policy=T.GemmWarpPolicy.FullRow, v_with_k=True),
        "attention_square_256": lambda: zoo.flash_attention(256, 128, 64, 64, True, threads=256),
        "column_sum": lambda: zoo.column_sum(333, 100, 64, 32),
        "row_reductions": lambda: zoo.row_reductions(64, 128, ("sum", "max")),
        "atomic_sum": lambda: zoo.atomic_sum(1000, 128, True),
        "dynamic_rows": lambda: zoo.dynamic_rows(128, 16),
        "kernels.matmul": lambda: matmul(1024, 1024, 1024),
        "kernels.matmul_128x256": lambda: matmul(512, 512, 512, 128, 256, 64, num_stages=3, threads=256),
        "kernels.matmul_bf16_ragged": lambda: matmul(1000, 1000, 1000, 64, 64, 32, dtype="bfloat16"),
        "kernels.flash_attention": lambda: flash_attention(2, 4, 256, 64),
        "kernels.flash_attention_causal": lambda: flash_attention(1, 2, 200, 128, is_causal=True),
        "kernels.softmax": lambda: softmax(64, 1024, 4),
        "kernels.softmax_8192": lambda: softmax(64, 8192),
        "kernels.rms_norm": lambda: rms_norm(64, 1024, 2),
    }


def snapshot(path: str) -> None:
    import tilewright

    out = {}
    for name, make in cases().items():
        for tgt in TARGETS:
            for label, pc in (("default", None), ("no_tma", {"tw.disable_tma": True})):
                if label == "no_tma" and "sm_90" not in tgt:
                    continue
                try:
                    k = tilewright.compile(make(), target=tgt, execution_backend="emulator", pass_configs=pc)
                    out[f"{name}|{tgt}|{label}"] = k.get_kernel_source()
                except Exception as e:  # noqa: BLE001 - recorded: a case that no longer compiles is a finding
                    out[f"{name}|{tgt}|{label}"] = f"ERROR {type(e).__name__}: {str(e).splitlines()[0]}"
    with open(path, "w") as f:
        json.dump(out, f, indent=0, sort_keys=True)


def report(before_path: str, after_path: str) -> str:
    before, after = json.load(open(before_path)), json.load(open(after_path))
    same = [k for k in before if after.get(k) == before[k]]
    changed = [k for k in before if k in after and after[k] != before[k]]
    lines = [f"{len(before)} kernels x targets: {len(same)} identical, {len(changed)} changed", ""]
    for k in changed:
        diff = list(difflib.unified_diff(before[k].splitlines(), after[k].splitlines(), "before", "after",
                                         lineterm="", n=1))
        lines += [f"## {k} ({sum(1 for d in diff if d[:1] in '+-') - 2} lines differ)", "", "```diff",
                  *diff[:60], *(["..."] if len(diff) > 60 else []), "```", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1] == "--diff":
        print(report(sys.argv[2], sys.argv[3]))
    else:
        snapshot(sys.argv[1])
