"""Causal attention candidates on the H200 (``TW_VARIANTS=causal python bench/attention_variants.py``):
``ops.attention`` on the issue's weakest causal rows (16x16x1024x128, 4x16x4096x64, 4x16x4096x128), bf16
and fp16, against SDPA's cuDNN backend, with the dispatch's module knobs set per column:

- "ops": as shipped;
- "pers <order>": the persistent kernel forced on (``attention_dispatch.PERSISTENT = True``, which
  "auto" picks only where an item has at most ``PERSISTENT_MAX_KEY_BLOCKS`` key blocks) with the
  causal item order ``PERSISTENT_ORDER`` (``attention_kernels.PERSISTENT_ORDERS``): "lf"
  longest_first, "hm" head_major_snake, "pairs" (query blocks i and nq - 1 - i back to back);
- "... exprs": the same with ``PERSISTENT_ITEM_VARS = False`` (the item coordinates repeated as
  expressions, as before session 9), the A/B of the int32 coordinate scalars (bf16 rows);
- "... 2st": ``HOPPER_SCORES_IN_REGISTERS = True`` (the sm_90a shared-memory fit without the score
  tile: two K/V stages at head dim 128 instead of one; d 64 has two either way, so d128 rows only);
- "... ov": the sm_90a pass configs with ``tw.attention_overlap`` (measured slower at d128 with one
  K/V stage: does it pay with two?); "... even": ``SPECIALIZE_EVEN`` (no row checks, one mask compare);
- "d64 MxN": head dim 64 only, ``HOPPER_D64_BLOCKS = (M, N)`` (128x192 with the fit of "2st", which
  keeps its two stages; other rows show "-").

Each output is checked against SDPA (math backend, float32) before it is timed; a wrong one prints
WRONG and shows nan.  The table goes under bench/results/ (name attention-causal)."""

from __future__ import annotations

import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from attention import sdpa  # noqa: E402
from common import bench_ms, save  # noqa: E402

import tilewright.ops as ops  # noqa: E402
from tilewright.ops import attention_dispatch as dispatch  # noqa: E402

SHAPES = [(16, 16, 1024, 128), (4, 16, 4096, 64), (4, 16, 4096, 128)]
DTYPES = [torch.bfloat16, torch.float16]
PERS = {"PERSISTENT": True}
TWO = {"HOPPER_SCORES_IN_REGISTERS": True}
OV = {**dispatch.HOPPER_CONFIGS, "tw.attention_overlap": True}  # (d128: the shipped configs with the overlap)
# (column, dispatch knobs, head dims it applies to, or "bf16" for bf16 rows only (a shorter run), or None for all)
COLUMNS = [("ops", {}, None),
           ("ops 2st", TWO, (128,)),
           ("pers lf", {**PERS, "PERSISTENT_ORDER": "longest_first"}, None),
           ("pers lf exprs", {**PERS, "PERSISTENT_ORDER": "longest_first", "PERSISTENT_ITEM_VARS": False}, "bf16"),
           ("pers hm", {**PERS, "PERSISTENT_ORDER": "head_major_snake"}, None),
           ("pers pairs", {**PERS, "PERSISTENT_ORDER": "pairs"}, None),
           ("pers hm 2st", {**PERS, **TWO, "PERSISTENT_ORDER": "head_major_snake"}, (128,)),
           ("pers pairs 2st", {**PERS, **TWO, "PERSISTENT_ORDER": "pairs"}, (128,)),
           ("ops 2st ov", {**TWO, "HOPPER_CONFIGS": OV}, (128,)),
           ("pers pairs 2st ov", {**PERS, **TWO, "PERSISTENT_ORDER": "pairs", "HOPPER_CONFIGS": OV}, (128,)),
           ("pers pairs 2st even", {**PERS, **TWO, "PERSISTENT_ORDER": "pairs", "SPECIALIZE_EVEN": True}, (128,)),
           ("d64 128x64", {"HOPPER_D64_BLOCKS": (128, 64)}, (64,)),
           ("d64 128x192", {**TWO, "HOPPER_D64_BLOCKS": (128, 192)}, (64,)),
           ("d64 128x192 pers pairs", {**PERS, **TWO, "PERSISTENT_ORDER": "pairs", "HOPPER_D64_BLOCKS": (128, 192)},
            (64,))]


def _err(x, ref) -> float:
    return float(((x.float() - ref.float()).abs() / (1 + ref.float().abs())).max())


def main() -> int:
    knobs = sorted({name for _, kn, _ in COLUMNS for name in kn})
    shipped = {name: getattr(dispatch, name) for name in knobs if hasattr(dispatch, name)}
    rows = ["| dtype | B,H,S,D | cuDNN | " + " | ".join(c[0] for c in COLUMNS) + " | best | best/cuDNN |",
            "|---|---|---|" + "---|" * (len(COLUMNS) + 2)]
    ratios = []
    for dtype in DTYPES:
        for b, h, s, d in SHAPES:
            g = torch.Generator(device="cuda").manual_seed(b * s + d)
            q, k, v = (torch.randn(b, h, s, d, device="cuda", generator=g, dtype=dtype) for _ in range(3))
            ref = sdpa(q.float(), k.float(), v.float(), True, "math")
            flops = 4 * b * h * s * s * d / 2
            tf = lambda ms: flops / ms / 1e9  # noqa: E731
            cudnn = tf(bench_ms(lambda: sdpa(q, k, v, True, "cudnn")))
            cells = []
            for name, kn, dims in COLUMNS:
                if dims == "bf16" and dtype != torch.bfloat16 or isinstance(dims, tuple) and d not in dims:
                    cells.append(None)
                    continue
                missing = [x for x in kn if not hasattr(dispatch, x)]
                if missing:  # a knob of another branch not merged: the column is not measurable here
                    print(f"  {name}: no attention_dispatch.{missing[0]}", flush=True)
                    cells.append(float("nan"))
                    continue
                for x, val in kn.items():
                    setattr(dispatch, x, val)
                # plans remember their kernels per call signature: without this every column would
                # time the first one's kernel
                dispatch.forget_plans()
                try:
                    out = ops.attention(q, k, v, causal=True)
                    e = _err(out, ref)
                    if e >= 2e-2:
                        print(f"  WRONG {name} {dtype} {b, h, s, d}: {e:.2e}", flush=True)
                    cells.append(tf(bench_ms(lambda: ops.attention(q, k, v, causal=True))) if e < 2e-2
                                 else float("nan"))
                except Exception as ex:  # noqa: BLE001
                    print(f"  {name} {b, h, s, d}: {type(ex).__name__}: {str(ex).splitlines()[0][:150]}", flush=True)
                    cells.append(float("nan"))
                finally:
                    for x, val in shipped.items():
                        setattr(dispatch, x, val)
                    dispatch.forget_plans()
            got = [(c, n) for c, (n, _, _) in zip(cells, COLUMNS) if c is not None and c == c]
            best, best_name = max(got, default=(float("nan"), "-"))
            ratios.append(best / cudnn)
            rows.append(f"| {str(dtype).split('.')[-1]} | {b},{h},{s},{d} | {cudnn:.0f} | "
                        + " | ".join("-" if c is None else f"{c:.0f}" for c in cells)
                        + f" | {best_name} | {best / cudnn:.2f} |")
            print(rows[-1], flush=True)
    gm = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    rows += ["", f"Causal TFLOP/s (4·B·H·S²·D / 2); best column over cuDNN: geometric mean {gm:.2f}x"]
    print("\n".join(rows))
    print("saved", save("attention-causal", rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
