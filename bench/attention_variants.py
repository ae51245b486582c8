"""Which sm_90a attention loop is fastest: the user-level flash-attention program
(``tilewright.kernels.flash_attention``) compiled with wgmma only (the sm_90a default), with the
warp-specialized loop (``tw.warp_specialize``), with ping-pong between its two consumer
warpgroups (``tw.pingpong``), with intra-warpgroup pipelining (``tw.attention_overlap``: P V of
one key block issued with Q K^T of the next, the softmax overlapping it) and with both, at two block
shapes; and ``ops.attention`` as shipped, with ping-pong, with the overlap and with both, each also
with ``attention_dispatch.SPECIALIZE_EVEN`` ("even": lengths that divide the blocks take a kernel
without tail handling, whose key loop is the user program's) and with ``attention_dispatch.PERSISTENT``
("pers": one block per SM looping over the work items; "lf-snake" / "hm-snake": its causal item
orders ``attention_dispatch.PERSISTENT_ORDER`` "longest_first_snake" / "head_major_snake", the same
kernel as "ops pers" without causal) — against SDPA's cuDNN backend, bf16,
on the issue's shapes.  Each output is checked against SDPA (math
backend, float32) before it is timed.  ``python bench/attention_variants.py`` on the H200; the
table goes under bench/results/.  ``TW_VARIANTS=short`` keeps one user-program column (the default
schedule) besides the ops ones; ``TW_VARIANTS=pers`` that column, "ops", "ops even" and the
persistent ones; ``TW_VARIANTS=order`` only "ops", "ops pers" and the persistent item orders;
``TW_VARIANTS=lean`` its own table (``lean_main``): ``attention_dispatch.LEAN_LOOP`` and the flash-attn
input layout against the shipped kernel and the user program, at 4k and 16k tokens, head dim 128 and 64;
``TW_VARIANTS=layout`` that table's "user", "ops" and "ops bshd" columns at 1x16x16384x128 non-causal only;
``TW_VARIANTS=regs`` the table with ``attention_dispatch.HOPPER_SCORES_IN_REGISTERS`` on for every call
("regs": two K/V stages at d 128) alone, with the overlap, with ping-pong and with both;
``TW_VARIANTS=s10`` session 10's candidates (``s10_main``: ping-pong for causal and head dim 64 calls, two
stages for short causal ones, the grid kernel against the persistent one, 128 x 192 blocks at head dim 64);
``TW_VARIANTS=s11`` session 11's (``s11_main``: the softmax's reductions as trees, part of the 2**x on the FMA
pipe at head dim 64, the persistent causal order at d 128), bf16 and fp16, each interleaved with cuDNN;
``TW_VARIANTS=s12`` session 12's (``s12_main``: 4x16x4096x64 causal and not: the output stored without staging,
the folded wgmma descriptors, three K/V stages, the grid kernel and the persistent orders), likewise;
``TW_VARIANTS=s13`` session 13's (``s13_main``: the persistent causal kernel's ring position broadcast from lane 0,
alone, with the folded descriptors and with the head-major order), likewise;
``TW_VARIANTS=s14`` session 14's (``s14_main``: 192-row query blocks at head dim 64, causal and not, and programmatic
dependent launch), timed by do_bench and in a CUDA graph of back-to-back calls."""

from __future__ import annotations

import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from attention import _nan_on_failure, sdpa  # noqa: E402
from common import bench_ms, graph_us, save  # noqa: E402

import tilewright  # noqa: E402
import tilewright.ops as ops  # noqa: E402
from tilewright.kernels import flash_attention  # noqa: E402
from tilewright.ops import attention_dispatch  # noqa: E402

SHAPES = [(16, 16, 1024, 128), (4, 16, 4096, 128), (1, 16, 16384, 128), (4, 16, 4096, 64)]
WS = {"tw.warp_specialize": True}
VARIANTS = [("wgmma 128x128", (128, 128, 2, 256), {}),
            ("ws 128x128", (128, 128, 2, 256), WS),
            ("ws+pp 128x128", (128, 128, 2, 256), {**WS, "tw.pingpong": True}),
            ("ws+ov 128x128", (128, 128, 2, 256), {**WS, "tw.attention_overlap": True}),
            ("ws+pp+ov 128x128", (128, 128, 2, 256), {**WS, "tw.pingpong": True, "tw.attention_overlap": True}),
            ("ws 128x64", (128, 64, 2, 256), WS),
            ("ws+pp 128x64", (128, 64, 2, 256), {**WS, "tw.pingpong": True}),
            ("ws+ov 128x64", (128, 64, 2, 256), {**WS, "tw.attention_overlap": True})]
if os.environ.get("TW_VARIANTS") == "short":  # one user-program column (the default schedule) and the ops ones
    VARIANTS = [v for v in VARIANTS if v[0] == "ws+pp+ov 128x128"]
# ops.attention with its sm_90a pass configs (attention_dispatch.HOPPER_CONFIGS) changed so, and
# attention_dispatch.SPECIALIZE_EVEN set so ("even": the kernel without tail handling where the lengths
# divide the blocks, as all of SHAPES do)
PP, OV = {"tw.pingpong": True}, {"tw.attention_overlap": True}
# (name, pass configs, SPECIALIZE_EVEN, PERSISTENT[, PERSISTENT_ORDER]): "pers" is the persistent kernel
# (one block per SM looping over the work items: attention_dispatch.PERSISTENT), its causal items in the
# order PERSISTENT_ORDER ("longest_first" unless given)
OPS_VARIANTS = [("ops", {}, False, False), ("ops+pp", PP, False, False), ("ops+ov", OV, False, False),
                ("ops+pp+ov", {**PP, **OV}, False, False), ("ops even", {}, True, False),
                ("ops even+pp", PP, True, False), ("ops even+ov", OV, True, False),
                ("ops even+pp+ov", {**PP, **OV}, True, False),
                ("ops pers", {}, False, True), ("ops pers+pp", PP, False, True), ("ops pers+ov", OV, False, True),
                ("ops pers+pp+ov", {**PP, **OV}, False, True), ("ops even pers", {}, True, True),
                ("ops even pers+pp+ov", {**PP, **OV}, True, True),
                ("ops pers lf-snake", {}, False, True, "longest_first_snake"),
                ("ops pers hm-snake", {}, False, True, "head_major_snake")]
if os.environ.get("TW_VARIANTS") == "pers":  # the shipped kernel and the persistent ones only
    VARIANTS = [v for v in VARIANTS if v[0] == "ws+pp+ov 128x128"]
    OPS_VARIANTS = [v for v in OPS_VARIANTS if v[0] in ("ops", "ops even") or "pers" in v[0]]
if os.environ.get("TW_VARIANTS") == "order":  # the grid kernel, the persistent one and its causal item orders
    VARIANTS = []
    OPS_VARIANTS = [v for v in OPS_VARIANTS if v[0] in ("ops", "ops pers") or "snake" in v[0]]


if os.environ.get("TW_VARIANTS") == "causal":  # the causal candidates: bench/attention_causal_variants.py
    from attention_causal_variants import main as causal_main  # noqa: E402

    sys.exit(causal_main())


def _err(x, ref) -> float:
    return float(((x.float() - ref.float()).abs() / (1 + ref.float().abs())).max())


def main() -> int:
    rows = ["| B,H,S,D | causal | cuDNN | " + " | ".join([n for n, _, _ in VARIANTS] + [v[0] for v in OPS_VARIANTS])
            + " | best/cuDNN |",
            "|---|---|---|" + "---|" * (len(VARIANTS) + len(OPS_VARIANTS) + 1)]
    shipped = dict(attention_dispatch.HOPPER_CONFIGS)
    shipped_d64 = dict(attention_dispatch.HOPPER_D64_OVERRIDES)
    shipped_even = attention_dispatch.SPECIALIZE_EVEN
    shipped_pers = attention_dispatch.PERSISTENT
    shipped_order = attention_dispatch.PERSISTENT_ORDER
    best_ratios = []
    for b, h, s, d in SHAPES:
        for causal in (False, True):
            g = torch.Generator(device="cuda").manual_seed(b * s + d)
            q, k, v = (torch.randn(b, h, s, d, device="cuda", generator=g, dtype=torch.bfloat16) for _ in range(3))
            ref = sdpa(q.float(), k.float(), v.float(), causal, "math")
            flops = 4 * b * h * s * s * d / (2 if causal else 1)
            tf = lambda ms: flops / ms / 1e9  # noqa: E731
            cudnn = tf(bench_ms(lambda: sdpa(q, k, v, causal, "cudnn")))
            cells = []
            qs, ks, vs = (t.transpose(1, 2).contiguous() for t in (q, k, v))  # the program takes (B, S, H, D)
            for name, (bm, bn, st, thr), pc in VARIANTS:
                try:
                    kern = tilewright.compile(flash_attention(b, h, s, d, causal, bm, bn, st, thr, "bfloat16"),
                                              out_idx=[-1], pass_configs=pc or None)
                    out = kern(qs, ks, vs)
                    e = _err(out.transpose(1, 2), ref)
                    cells.append(tf(bench_ms(lambda: kern(qs, ks, vs))) if e < 2e-2 else float("nan"))
                    if e >= 2e-2:
                        print(f"  WRONG {name} {b, h, s, d, causal}: {e:.2e}", flush=True)
                except Exception as ex:  # noqa: BLE001
                    print(f"  {name} {b, h, s, d, causal}: {type(ex).__name__}: {str(ex).splitlines()[0][:150]}")
                    cells.append(float("nan"))
            for name, pc, even, pers, *order in OPS_VARIANTS:
                attention_dispatch.HOPPER_CONFIGS.clear()
                attention_dispatch.HOPPER_CONFIGS.update({**shipped, **pc})
                attention_dispatch.HOPPER_D64_OVERRIDES.clear()  # the variant decides at every head dim
                if not pc:  # "ops" and "ops even": the shipped configs, the d64 overlap included
                    attention_dispatch.HOPPER_D64_OVERRIDES.update(shipped_d64)
                attention_dispatch.SPECIALIZE_EVEN = even
                attention_dispatch.PERSISTENT = pers
                attention_dispatch.PERSISTENT_ORDER = order[0] if order else "longest_first"
                # plans remember their kernels per call signature, and a dense repeat call launches
                # its plan's kernel from pointers (_dense_plans): without this every variant after
                # the first would time the first one's kernel
                attention_dispatch.forget_plans()
                out = ops.attention(q, k, v, causal=causal)
                e = _err(out, ref)
                if e >= 2e-2:
                    print(f"  WRONG {name} {b, h, s, d, causal}: {e:.2e}", flush=True)
                cells.append(tf(bench_ms(lambda: ops.attention(q, k, v, causal=causal))) if e < 2e-2 else float("nan"))
            attention_dispatch.HOPPER_CONFIGS.clear()
            attention_dispatch.HOPPER_CONFIGS.update(shipped)
            attention_dispatch.HOPPER_D64_OVERRIDES.update(shipped_d64)
            attention_dispatch.SPECIALIZE_EVEN = shipped_even
            attention_dispatch.PERSISTENT = shipped_pers
            attention_dispatch.PERSISTENT_ORDER = shipped_order
            attention_dispatch.forget_plans()
            best = max((c for c in cells if c == c), default=float("nan"))
            best_ratios.append(best / cudnn)
            rows.append(f"| {b},{h},{s},{d} | {'yes' if causal else 'no'} | {cudnn:.0f} | "
                        + " | ".join(f"{c:.0f}" for c in cells) + f" | {best / cudnn:.2f} |")
            print(rows[-1], flush=True)
    gm = math.exp(sum(math.log(r) for r in best_ratios) / len(best_ratios))
    rows += ["", f"TFLOP/s (4·B·H·S²·D, halved when causal), bf16; best of the tilewright columns over cuDNN: "
             f"geometric mean {gm:.2f}x"]
    print("\n".join(rows))
    print("saved", save("attention-variants", rows))
    return 0


# ---------------------------------------------------------------- TW_VARIANTS=lean (issue 9: the key loop)
# attention_dispatch.LEAN_LOOP (the loop without the -inf guard where nothing can be masked: attention_fwd's
# ``lean``) against the shipped kernel, each with the shipped pass configs and with ping-pong + overlap, and
# ops.attention given the flash-attn layout the user program reads ((B, S, H, D) seen through transpose(1, 2):
# "bshd") to tell the layout's share of the gap from the kernel's, and the overlap rotated ("top"); the user
# program (its default schedule, ws+pp+ov, and rotated) is the bar.  Rows: 4k and 16k, d 128 and 64, causal and not.
LEAN_SHAPES = [(4, 16, 4096, 128), (1, 16, 16384, 128), (4, 16, 4096, 64), (1, 16, 16384, 64)]
# (name, pass configs added to the shipped ones (None: the shipped ones, d64 overrides included), LEAN_LOOP, bshd);
# "top": tw.attention_overlap_retire = "top" (passes/attention_overlap.py: the P V in flight waited for at the
# top of the next iteration, where ptxas cannot hoist the wait above the softmax)
TOP = {"tw.attention_overlap_retire": "top"}
LEAN_VARIANTS = [("ops", None, False, False), ("ops lean", None, True, False),
                 ("ops+pp+ov", {**PP, **OV}, False, False), ("ops lean+pp+ov", {**PP, **OV}, True, False),
                 ("ops+pp+ov top", {**PP, **OV, **TOP}, False, False),
                 ("ops lean+pp+ov top", {**PP, **OV, **TOP}, True, False),
                 ("ops lean+ov top", {**OV, **TOP}, True, False),
                 ("ops bshd", None, False, True), ("ops lean bshd+pp+ov top", {**PP, **OV, **TOP}, True, True)]
# the user program: its default schedule (ws+pp+ov) as shipped and with the rotated overlap
USER_VARIANTS = [("user", {}), ("user top", TOP)]
LEAN_CAUSAL = (False, True)
SHIPPED_REGS = attention_dispatch.HOPPER_SCORES_IN_REGISTERS
if os.environ.get("TW_VARIANTS") == "layout":  # under a minute: does the input layout make the 16k gap?
    LEAN_SHAPES, LEAN_CAUSAL = [(1, 16, 16384, 128)], (False,)
    USER_VARIANTS = USER_VARIANTS[:1]
    LEAN_VARIANTS = [v for v in LEAN_VARIANTS if v[0] in ("ops", "ops bshd")]
# TW_VARIANTS=regs: attention_dispatch.HOPPER_SCORES_IN_REGISTERS = True for every call (a fifth field True:
# the shared-memory fit without the score tile, so d 128 keeps two K/V stages as the user program has; the
# shipped "long causal" gives non-causal d 128 one stage), alone and with the overlap and ping-pong
if os.environ.get("TW_VARIANTS") == "regs":
    LEAN_SHAPES = [(16, 16, 1024, 128), (4, 16, 4096, 128), (1, 16, 16384, 128), (4, 16, 4096, 64)]
    USER_VARIANTS = USER_VARIANTS[:1]
    LEAN_VARIANTS = [("ops", None, False, False), ("ops regs", None, False, False, True),
                     ("ops regs+ov", OV, False, False, True), ("ops regs+pp+ov", {**PP, **OV}, False, False, True),
                     ("ops regs+pp", PP, False, False, True), ("ops regs no-ov", {"tw.attention_overlap": False},
                                                                False, False, True)]
    LEAN_CAUSAL = (False,)


def _ops_as(pc, lean, shipped, shipped_d64, regs=None):
    """Set attention_dispatch for one variant (forgetting the plans, which remember their kernels);
    ``regs``: HOPPER_SCORES_IN_REGISTERS (None: as shipped)."""
    attention_dispatch.HOPPER_SCORES_IN_REGISTERS = SHIPPED_REGS if regs is None else regs
    attention_dispatch.HOPPER_CONFIGS.clear()
    attention_dispatch.HOPPER_CONFIGS.update({**shipped, **(pc or {})})
    attention_dispatch.HOPPER_D64_OVERRIDES.clear()
    if pc is None:
        attention_dispatch.HOPPER_D64_OVERRIDES.update(shipped_d64)
    attention_dispatch.LEAN_LOOP = lean
    attention_dispatch.forget_plans()


def lean_main() -> int:
    names = [u[0] for u in USER_VARIANTS] + [v[0] for v in LEAN_VARIANTS]
    rows = ["| B,H,S,D | causal | cuDNN | " + " | ".join(names) + " | ops/cuDNN | best ops/cuDNN | best ops/user |",
            "|---|---|---|" + "---|" * (len(names) + 3)]
    shipped = dict(attention_dispatch.HOPPER_CONFIGS)
    shipped_d64 = dict(attention_dispatch.HOPPER_D64_OVERRIDES)
    shipped_lean = attention_dispatch.LEAN_LOOP
    for b, h, s, d in LEAN_SHAPES:
        for causal in LEAN_CAUSAL:
            g = torch.Generator(device="cuda").manual_seed(b * s + d)
            q, k, v = (torch.randn(b, h, s, d, device="cuda", generator=g, dtype=torch.bfloat16) for _ in range(3))
            ref = sdpa(q.float(), k.float(), v.float(), causal, "math")
            flops = 4 * b * h * s * s * d / (2 if causal else 1)
            tf = lambda ms: flops / ms / 1e9  # noqa: E731
            cudnn = tf(bench_ms(lambda: sdpa(q, k, v, causal, "cudnn")))
            qs, ks, vs = (t.transpose(1, 2).contiguous() for t in (q, k, v))  # (B, S, H, D)
            cells = []
            for uname, upc in USER_VARIANTS:
                try:
                    kern = tilewright.compile(flash_attention(b, h, s, d, causal, 128, 128, 2, 256, "bfloat16"),
                                              out_idx=[-1], pass_configs=upc or None)
                    e = _err(kern(qs, ks, vs).transpose(1, 2), ref)
                    cells.append(tf(bench_ms(lambda: kern(qs, ks, vs))) if e < 2e-2 else float("nan"))
                    if e >= 2e-2:
                        print(f"  WRONG {uname} {b, h, s, d, causal}: {e:.2e}", flush=True)
                except Exception as ex:  # noqa: BLE001
                    print(f"  {uname} {b, h, s, d, causal}: {type(ex).__name__}: {str(ex).splitlines()[0][:150]}")
                    cells.append(float("nan"))
            for name, pc, lean, bshd, *regs in LEAN_VARIANTS:
                _ops_as(pc, lean, shipped, shipped_d64, *regs)
                args = tuple(t.transpose(1, 2) for t in (qs, ks, vs)) if bshd else (q, k, v)
                out = ops.attention(*args, causal=causal)
                e = _err(out, ref)
                if e >= 2e-2:
                    print(f"  WRONG {name} {b, h, s, d, causal}: {e:.2e}", flush=True)
                cells.append(tf(bench_ms(lambda: ops.attention(*args, causal=causal))) if e < 2e-2 else float("nan"))
            _ops_as(None, shipped_lean, shipped, shipped_d64)
            nu = len(USER_VARIANTS)
            best = max((c for c in cells[nu:] if c == c), default=float("nan"))
            user = max((c for c in cells[:nu] if c == c), default=float("nan"))
            rows.append(f"| {b},{h},{s},{d} | {'yes' if causal else 'no'} | {cudnn:.0f} | "
                        + " | ".join(f"{c:.0f}" for c in cells)
                        + f" | {cells[nu] / cudnn:.2f} | {best / cudnn:.2f} | {best / user:.2f} |")
            print(rows[-1], flush=True)
    rows += ["", "TFLOP/s (4·B·H·S²·D, halved when causal), bf16; ops = ops.attention (shipped configs unless "
             "+pp+ov), lean = attention_dispatch.LEAN_LOOP, top = tw.attention_overlap_retire \"top\", "
             "bshd = (B, S, H, D) inputs seen through transpose(1, 2); best ops/user: over the user program's best "
             "column"]
    print("\n".join(rows))
    print("saved", save("attention-variants-" + os.environ.get("TW_VARIANTS", "lean"), rows))
    return 0


# ---------------------------------------------------------------- TW_VARIANTS=s10 (session 10's candidates)
# ops.attention with attention_dispatch's module knobs set per column, each column only on the rows whose
# kernel it changes ("-" elsewhere): every issue-9 shape, causal and not, bf16.
#   "pp": ping-pong with the overlap where it is not on yet: long causal d 128 (HOPPER_LONG_CAUSAL_OVERRIDES),
#         short causal d 128 with two K/V stages (HOPPER_SHORT_CAUSAL_OVERRIDES) and head dim 64
#         (HOPPER_D64_OVERRIDES); the three knobs touch disjoint rows, so one column reads as three candidates;
#   "short ov" / "short 2st": short causal d 128 with two stages and the overlap only / no overlap;
#   "pp even": "pp" with SPECIALIZE_EVEN (no tail handling: every shape here divides the blocks), all rows;
#   "grid" / "grid pp": PERSISTENT = False (the grid kernel) where "auto" takes the persistent one, as shipped
#         and with "pp";
#   "d64 192 pp" / "d64 192 ov": head dim 64 with 128 x 192 blocks (two stages: the fit without the score
#         tile) with ping-pong + overlap / the overlap only;
#   "nc 176": non-causal d 128 with 128 x 176 blocks (HOPPER_NONCAUSAL_BLOCK_N: FlashAttention-3's tile), the
#         grid kernel;
#   "d64 3wg": head dim 64 with 192 x 128 blocks (FlashAttention-3's query block at d 64): three consumer
#         warpgroups, so no ping-pong (two only), and the overlap declines (its register budget); the grid
#         kernel (the persistent causal one spills 244 bytes at 160 registers per consumer thread).
S10_SHAPES = [(16, 16, 1024, 128), (4, 16, 4096, 128), (1, 16, 16384, 128), (4, 16, 4096, 64)]
S10_PP = {"HOPPER_LONG_CAUSAL_OVERRIDES": {**OV, **PP}, "HOPPER_SHORT_CAUSAL_OVERRIDES": {**OV, **PP},
          "HOPPER_D64_OVERRIDES": {**OV, **PP}}
D64_192 = {"HOPPER_D64_BLOCKS": (128, 192), "HOPPER_SCORES_IN_REGISTERS": True}


def _rows_causal_d128(s, d, causal):
    return causal and d == 128


def _rows_pp(s, d, causal):
    return d == 64 or causal


def _rows_short(s, d, causal):
    return causal and d == 128 and s <= 1024


def _rows_persistent(s, d, causal):  # where PERSISTENT "auto" takes the persistent kernel (block_N 128)
    return s // 128 <= (attention_dispatch.PERSISTENT_MAX_KEY_BLOCKS_CAUSAL if causal
                        else attention_dispatch.PERSISTENT_MAX_KEY_BLOCKS)


# (column, knobs, rows it changes: None for all)
S10_COLUMNS = [("ops", {}, None),
               ("pp", S10_PP, _rows_pp),
               ("short ov", {"HOPPER_SHORT_CAUSAL_OVERRIDES": OV}, _rows_short),
               ("short 2st", {"HOPPER_SHORT_CAUSAL_OVERRIDES": {}}, _rows_short),
               ("pp even", {**S10_PP, "SPECIALIZE_EVEN": True}, None),
               ("grid", {"PERSISTENT": False}, _rows_persistent),
               ("grid pp", {**S10_PP, "PERSISTENT": False}, lambda s, d, c: _rows_persistent(s, d, c) and c),
               ("d64 192 pp", {**D64_192, "HOPPER_D64_OVERRIDES": {**OV, **PP}}, lambda s, d, c: d == 64),
               ("d64 192 ov", {**D64_192, "HOPPER_D64_OVERRIDES": OV}, lambda s, d, c: d == 64),
               ("nc 176", {"HOPPER_NONCAUSAL_BLOCK_N": 176}, lambda s, d, c: d == 128 and not c),
               ("d64 3wg", {"HOPPER_D64_BLOCKS": (192, 128), "HOPPER_SCORES_IN_REGISTERS": True, "PERSISTENT": False},
                lambda s, d, c: d == 64)]


def s10_main() -> int:
    knobs = sorted({name for _, kn, _ in S10_COLUMNS for name in kn})
    shipped = {name: getattr(attention_dispatch, name) for name in knobs}
    rows = ["| B,H,S,D | causal | cuDNN | " + " | ".join(c[0] for c in S10_COLUMNS) + " | best | best/cuDNN |",
            "|---|---|---|" + "---|" * (len(S10_COLUMNS) + 2)]
    ratios = []
    for b, h, s, d in S10_SHAPES:
        for causal in (False, True):
            g = torch.Generator(device="cuda").manual_seed(b * s + d)
            q, k, v = (torch.randn(b, h, s, d, device="cuda", generator=g, dtype=torch.bfloat16) for _ in range(3))
            ref = sdpa(q.float(), k.float(), v.float(), causal, "math")
            flops = 4 * b * h * s * s * d / (2 if causal else 1)
            tf = lambda ms: flops / ms / 1e9  # noqa: E731
            cudnn = tf(bench_ms(lambda: sdpa(q, k, v, causal, "cudnn")))
            cells = []
            for name, kn, applies in S10_COLUMNS:
                if applies is not None and not applies(s, d, causal):
                    cells.append(None)
                    continue
                for knob, value in kn.items():
                    setattr(attention_dispatch, knob, value)
                attention_dispatch.forget_plans()  # plans remember their kernels
                try:
                    out = ops.attention(q, k, v, causal=causal)
                    e = _err(out, ref)
                    if e >= 2e-2:
                        print(f"  WRONG {name} {b, h, s, d, causal}: {e:.2e}", flush=True)
                    cells.append(tf(bench_ms(lambda: ops.attention(q, k, v, causal=causal))) if e < 2e-2
                                 else float("nan"))
                except Exception as ex:  # noqa: BLE001
                    print(f"  {name} {b, h, s, d, causal}: {type(ex).__name__}: {str(ex).splitlines()[0][:150]}")
                    cells.append(float("nan"))
                finally:
                    for knob, value in shipped.items():
                        setattr(attention_dispatch, knob, value)
                    attention_dispatch.forget_plans()
            got = [(c, S10_COLUMNS[i][0]) for i, c in enumerate(cells) if c is not None and c == c]
            best, best_name = max(got, default=(float("nan"), "-"))
            ratios.append(best / cudnn)
            rows.append(f"| {b},{h},{s},{d} | {'yes' if causal else 'no'} | {cudnn:.0f} | "
                        + " | ".join("-" if c is None else f"{c:.0f}" for c in cells)
                        + f" | {best_name} | {best / cudnn:.2f} |")
            print(rows[-1], flush=True)
    gm = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    rows += ["", "TFLOP/s (4·B·H·S²·D, halved when causal), bf16; \"-\": the column's knobs do not change that "
             f"row's kernel; best column over cuDNN: geometric mean {gm:.2f}x"]
    print("\n".join(rows))
    print("saved", save("attention-variants-s10", rows))
    return 0


# ---------------------------------------------------------------- TW_VARIANTS=s11 (session 11's candidates)
# Interleaved: in each of S11_ROUNDS rounds cuDNN, then every column, on one row and dtype; the cells are the
# rounds' TFLOP/s ("a/b") and the ratio of their mean to cuDNN's.  TW_S11_ROWS: "d64" (4x16x4096x64, causal and
# not) or "d128" (16x16x1024x128 and 4x16x4096x128 causal); TW_S11_DTYPES: "bf16", "fp16" or both (default).
#   "tree":     tw.reduce_tree (passes/lower_reduce.py: the softmax's row max and sum folded as balanced trees,
#               depth 5 instead of 31 dependent FMNMX/FADD per row at 128-key blocks), over the row's configs;
#   "fma 1/8", "fma 1/4", "fma 3/8": attention_dispatch.HOPPER_D64_FMA_EXP2 (1, 8) / (1, 4) / (3, 8): that
#               share of the probabilities' 2**x on the FMA pipe (a cubic) instead of MUFU;
#   "tree fma 1/4", and the same without ping-pong ("... no-pp": the overlap only, both warpgroups' softmax
#               sharing MUFU at once);
#   "3wg tree fma 1/4": non-causal d 64 on 192 x 128 blocks (HOPPER_D64_NONCAUSAL_BLOCKS: three consumer
#               warpgroups, a wash alone in session 10) with the tree and the cubic;
#   "hm-snake": PERSISTENT_ORDER "head_major_snake" (d 128 causal: 1024 and 4096 keys are persistent, in "pairs");
#   "grid": PERSISTENT False (1024 keys).
# The H200 run of 2026-12-02 05:02 UTC (ratios to cuDNN, bf16 / fp16): d64 non-causal ops 0.937/0.944, tree
# 0.987/0.990, fma 1/8 0.926/0.924, 1/4 0.868/0.877, 3/8 0.855/0.866, tree fma 1/4 0.878/0.873, its no-pp
# 0.828/0.842, 3wg 0.858/0.866; causal ops 0.906/0.913, tree 0.921/0.925, the rest below ops.  d128 causal 1k:
# ops 0.964/0.965, tree 0.965/0.967, hm-snake 0.994/0.978, grid 0.854/0.857; 4k: ops 1.018/0.990, tree
# 0.859/0.854, hm-snake 0.971/0.967.  Taken: tree at d 64 (HOPPER_D64_OVERRIDES), hm-snake for short causal
# calls (attention_dispatch.PERSISTENT_ORDER_SHORT_CAUSAL); the "ops" column now includes both.
TREE = {"tw.reduce_tree": True}
S11_D64 = {**OV, **PP}  # the shipped HOPPER_D64_OVERRIDES


def _d64(s, d, c):
    return d == 64


def _d128(s, d, c):
    return d == 128


S11_COLUMNS = [("ops", {}, None),
               ("tree", {"HOPPER_D64_OVERRIDES": {**S11_D64, **TREE},
                         "HOPPER_CONFIGS": {**attention_dispatch.HOPPER_CONFIGS, **TREE}}, None),
               ("fma 1/8", {"HOPPER_D64_FMA_EXP2": (1, 8)}, _d64),
               ("fma 1/4", {"HOPPER_D64_FMA_EXP2": (1, 4)}, _d64),
               ("fma 3/8", {"HOPPER_D64_FMA_EXP2": (3, 8)}, _d64),
               ("tree fma 1/4", {"HOPPER_D64_OVERRIDES": {**S11_D64, **TREE}, "HOPPER_D64_FMA_EXP2": (1, 4)}, _d64),
               ("tree fma 1/4 no-pp", {"HOPPER_D64_OVERRIDES": {**OV, **TREE}, "HOPPER_D64_FMA_EXP2": (1, 4)}, _d64),
               ("3wg tree fma 1/4", {"HOPPER_D64_NONCAUSAL_BLOCKS": (192, 128), "HOPPER_D64_FMA_EXP2": (1, 4),
                                     "HOPPER_D64_OVERRIDES": {**S11_D64, **TREE}}, lambda s, d, c: d == 64 and not c),
               ("hm-snake", {"PERSISTENT_ORDER": "head_major_snake"}, _d128),
               ("grid", {"PERSISTENT": False}, lambda s, d, c: d == 128 and s <= 1024)]
S11_ROWS = {"d64": [(4, 16, 4096, 64, False), (4, 16, 4096, 64, True)],
            "d128": [(16, 16, 1024, 128, True), (4, 16, 4096, 128, True)]}
S11_ROUNDS = 2


def _timed(name, kn, q, k, v, causal, ref, tf, timer=bench_ms):
    """TFLOP/s of ops.attention with ``kn`` set on attention_dispatch (checked first), the knobs restored;
    ``timer``: milliseconds a call of a function (``bench_ms``, or ``graph_ms``: back to back in a CUDA graph)."""
    shipped = {knob: getattr(attention_dispatch, knob) for knob in kn}
    for knob, value in kn.items():
        setattr(attention_dispatch, knob, value)
    attention_dispatch.forget_plans()  # plans remember their kernels
    try:
        e = _err(ops.attention(q, k, v, causal=causal), ref)
        if e >= 2e-2:
            print(f"  WRONG {name} {tuple(q.shape)} causal={causal}: {e:.2e}", flush=True)
            return float("nan")
        return tf(timer(lambda: ops.attention(q, k, v, causal=causal)))
    except Exception as ex:  # noqa: BLE001
        print(f"  {name} {tuple(q.shape)}: {type(ex).__name__}: {str(ex).splitlines()[0][:150]}")
        return float("nan")
    finally:
        for knob, value in shipped.items():
            setattr(attention_dispatch, knob, value)
        attention_dispatch.forget_plans()


def interleaved_table(name, columns, row_shapes, rounds, dtypes, timer=bench_ms, how="") -> int:
    """One interleaved table: per dtype and row, ``rounds`` rounds of cuDNN then every column that applies to
    the row (``_timed``, timed by ``timer``, which ``how`` describes); cells "a/b (mean / cuDNN's mean)"; printed
    and saved under bench/results/ as ``name``."""
    cols = [c for c in columns if c[2] is None or any(c[2](s, d, ca) for _, _, s, d, ca in row_shapes)]
    rows = ["| dtype | B,H,S,D | causal | cuDNN | " + " | ".join(c[0] for c in cols) + " | best/cuDNN |",
            "|---|---|---|---|" + "---|" * (len(cols) + 1)]
    for dt in dtypes:
        for b, h, s, d, causal in row_shapes:
            g = torch.Generator(device="cuda").manual_seed(b * s + d)
            q, k, v = (torch.randn(b, h, s, d, device="cuda", generator=g, dtype=dt) for _ in range(3))
            ref = sdpa(q.float(), k.float(), v.float(), causal, "math")
            flops = 4 * b * h * s * s * d / (2 if causal else 1)
            tf = lambda ms: flops / ms / 1e9  # noqa: E731
            res = {"cuDNN": []} | {c[0]: [] for c in cols}
            for _round in range(rounds):
                res["cuDNN"].append(_nan_on_failure(lambda: tf(timer(lambda: sdpa(q, k, v, causal, "cudnn")))))
                for col, kn, applies in cols:
                    if applies is None or applies(s, d, causal):
                        res[col].append(_timed(col, kn, q, k, v, causal, ref, tf, timer))
            base = sum(res["cuDNN"]) / len(res["cuDNN"])
            cells, best = [], 0.0
            for col in res:
                xs = res[col]
                if not xs:
                    cells.append("-")
                    continue
                ratio = sum(xs) / len(xs) / base
                best = max(best, ratio) if col != "cuDNN" and ratio == ratio else best
                cells.append("/".join(f"{x:.0f}" for x in xs) + ("" if col == "cuDNN" else f" ({ratio:.3f})"))
            rows.append(f"| {str(dt)[6:]} | {b},{h},{s},{d} | {'yes' if causal else 'no'} | " + " | ".join(cells)
                        + f" | {best:.3f} |")
            print(rows[-1], flush=True)
    rows += ["", f"TFLOP/s per round (cuDNN and each column alternated, {rounds} rounds), (mean / cuDNN's mean); "
             "\"-\": the column does not change that row's kernel" + (f"; {how}" if how else "")]
    print("\n".join(rows))
    print("saved", save(name, rows))
    return 0


def _dtypes(env: str) -> list:
    return {"bf16": [torch.bfloat16], "fp16": [torch.float16]}.get(os.environ.get(env, ""),
                                                                  [torch.bfloat16, torch.float16])


def s11_main() -> int:
    which = os.environ.get("TW_S11_ROWS", "d64")
    return interleaved_table(f"attention-variants-s11-{which}-{os.environ.get('TW_S11_DTYPES', 'both')}", S11_COLUMNS,
                             S11_ROWS[which], S11_ROUNDS, _dtypes("TW_S11_DTYPES"))


# ---------------------------------------------------------------- TW_VARIANTS=s12 (session 12's candidates)
# Issue 9's last gap: 4x16x4096x64 causal at 0.91 / 0.95 of cuDNN (bf16 / fp16) while non-causal d 64 is at 0.99 /
# 0.98.  The SASS of the two d 64 key loops (NVRTC, sm_90a) is the same length outside the diagonal block (490 vs
# 485 instructions a key block a consumer thread; the diagonal block's mask adds 160: 64 ISETP, 64 FSEL, 31 IMAD,
# one block in 16.5 on average), so the loss is per work item: 2048 items of 1..32 key blocks.  Columns (the rows
# each changes; interleaved with cuDNN, TW_S12_ROUNDS rounds, TW_S12_DTYPES as TW_S11_DTYPES):
#   "direct":   HOPPER_D64_STAGE_OUT False: each consumer thread stores its output pairs, no shared-memory staging,
#               so no block-wide barrier per item that makes the ping-pong warpgroups wait for each other (both rows);
#   "grid":     PERSISTENT_MAX_KEY_BLOCKS_CAUSAL 16: 4k causal on the grid kernel (longest query blocks first);
#   "grid direct"; "lf-snake", "hm-snake": PERSISTENT_ORDER "longest_first_snake" / "head_major_snake" for the
#               persistent kernel (shipped: "pairs"); "direct hm-snake";
#   "fold":     tw.wgmma_desc_fold in HOPPER_D64_OVERRIDES (passes/lower_gemm.py: one descriptor computation per
#               gemm tile, an add per K step: the d 64 key loop 485 -> 447 SASS instructions) (both rows);
#   "direct fold": both (both rows);
#   "3st", "direct 3st": HOPPER_D64_STAGES 3, a third K/V stage (a key block at d 64 is about an L2 round trip of
#               its tiles, so two stages give the producer little lead), alone and with "direct" (both rows).
# The H200 run of 2026-12-02 07:46 UTC (ratios to cuDNN, bf16 / fp16): causal ops 0.904/0.923, direct 0.933/0.957,
# fold 0.912/0.932, direct fold 0.892/0.916, 3st 0.914/0.931, direct 3st 0.908/0.911, grid 0.906/0.918, grid direct
# 0.895/0.911, lf-snake 0.904/0.912, hm-snake 0.908/0.931, direct hm-snake 0.936/0.953; non-causal ops 0.980/0.979,
# direct 0.972/0.966, fold 0.892/0.901, direct fold 0.877/0.887, 3st 0.954/0.943, direct 3st 0.924/0.921.  Taken:
# the direct store for causal d 64 (HOPPER_D64_STAGE_OUT "noncausal"), so "ops" now has it on the causal row and
# "staged" is the earlier kernel there.
S12_ROWS = [(4, 16, 4096, 64, True), (4, 16, 4096, 64, False)]
DIRECT = {"HOPPER_D64_STAGE_OUT": False}
FOLD = {"HOPPER_D64_OVERRIDES": {**attention_dispatch.HOPPER_D64_OVERRIDES, "tw.wgmma_desc_fold": True}}


def _causal(s, d, c):
    return c


S12_COLUMNS = [("ops", {}, None),
               ("staged", {"HOPPER_D64_STAGE_OUT": True}, _causal),
               ("direct", DIRECT, None),
               ("fold", FOLD, None),
               ("direct fold", {**DIRECT, **FOLD}, None),
               ("3st", {"HOPPER_D64_STAGES": 3}, None),
               ("direct 3st", {**DIRECT, "HOPPER_D64_STAGES": 3}, None),
               ("grid", {"PERSISTENT_MAX_KEY_BLOCKS_CAUSAL": 16}, _causal),
               ("grid direct", {**DIRECT, "PERSISTENT_MAX_KEY_BLOCKS_CAUSAL": 16}, _causal),
               ("lf-snake", {"PERSISTENT_ORDER": "longest_first_snake"}, _causal),
               ("hm-snake", {"PERSISTENT_ORDER": "head_major_snake"}, _causal),
               ("direct hm-snake", {**DIRECT, "PERSISTENT_ORDER": "head_major_snake"}, _causal)]


def session_main(tag: str, columns, rows, rounds: int) -> int:
    """A session's interleaved table: TW_<TAG>_COLUMNS (a comma-separated subset of the columns, default all),
    TW_<TAG>_ROUNDS (default ``rounds``), TW_<TAG>_DTYPES (bf16, fp16 or both)."""
    env = f"TW_{tag.upper()}_"
    keep = os.environ.get(env + "COLUMNS")
    cols = [c for c in columns if keep is None or c[0] in keep.split(",")]
    return interleaved_table(f"attention-variants-{tag}-{os.environ.get(env + 'DTYPES', 'both')}", cols, rows,
                             int(os.environ.get(env + "ROUNDS", str(rounds))), _dtypes(env + "DTYPES"))


def s12_main() -> int:
    return session_main("s12", S12_COLUMNS, S12_ROWS, 2)


# ---------------------------------------------------------------- TW_VARIANTS=s13 (session 13's candidates)
# The causal d 64 kernel is the persistent one, whose key loop ptxas compiles with the ring slot and the wgmma
# descriptors in vector registers (32 R2UR moves a key block) because the ring position runs across work items.
# Columns (interleaved with cuDNN, TW_S13_ROUNDS rounds, TW_S13_DTYPES as TW_S11_DTYPES):
#   "uniform":      tw.uniform_ring in HOPPER_D64_OVERRIDES: the ring position broadcast from lane 0 once a key
#                   step (passes/warp_specialize_persistent_loop.py), so ptxas keeps the descriptors uniform (the
#                   causal key loop 696 -> 687 SASS instructions; bench/attention_sass.py);
#   "uniform fold": with tw.wgmma_desc_fold too (696 -> 650, as short as the grid kernel's 649; the fold alone:
#                   680, still with the 32 R2UR);
#   "uniform hm-snake": "uniform" with PERSISTENT_ORDER "head_major_snake" (tied the shipped "pairs" in s12).
# The non-causal row (the grid kernel: none of these change it) is timed with "ops" as the run's anchor.
# The H200 run of 2026-12-02 08:41 UTC (ratios to cuDNN, bf16 / fp16, three rounds): causal ops 0.926/0.943, uniform
# 0.914/0.936, uniform fold 0.842/0.880, uniform hm-snake 0.923/0.959; non-causal ops 0.980/0.975.  Nothing taken:
# the shorter loops lost (as the fold alone did non-causal in s12).
UNIFORM = {"HOPPER_D64_OVERRIDES": {**attention_dispatch.HOPPER_D64_OVERRIDES, "tw.uniform_ring": True}}
UNIFORM_FOLD = {"HOPPER_D64_OVERRIDES": {**attention_dispatch.HOPPER_D64_OVERRIDES, "tw.uniform_ring": True,
                                         "tw.wgmma_desc_fold": True}}
S13_COLUMNS = [("ops", {}, None),
               ("uniform", UNIFORM, _causal),
               ("uniform fold", UNIFORM_FOLD, _causal),
               ("uniform hm-snake", {**UNIFORM, "PERSISTENT_ORDER": "head_major_snake"}, _causal)]


def s13_main() -> int:
    return session_main("s13", S13_COLUMNS, S12_ROWS, 3)


# ---------------------------------------------------------------- TW_VARIANTS=s14 (session 14's candidates)
# Issue 9's rows below cuDNN: 4x16x4096x64 causal (0.97 / 0.97 in the 08:58 table of record) and non-causal bf16
# (0.99), 16x16x1024x128 causal (0.99 / 0.99).  Columns (interleaved with cuDNN, TW_S14_ROUNDS rounds,
# TW_S14_DTYPES as TW_S11_DTYPES, TW_S14_COLUMNS a subset):
#   "3wg":          HOPPER_D64_NONCAUSAL_BLOCKS (192, 128): non-causal d 64 on three consumer warpgroups (the grid
#                   kernel; a wash at 04:16 before the tree reductions, lost with the FMA 2**x in s11);
#   "3wg ov":       "3wg" with HOPPER_D64_3WG_OVERLAP: the intra-warpgroup overlap, which the 160 registers of a
#                   consumer thread otherwise decline (tw.attention_overlap_registers 32; lengths dividing the blocks);
#   "3wg causal":   HOPPER_D64_CAUSAL_BLOCKS (192, 128): causal d 64 likewise (grid kernel, direct store): 1408
#                   work items instead of 2048, each K/V tile read once per 192 query rows;
#   "3wg causal staged": with the staged TMA output store (no ping-pong offset between the warpgroups to wait out);
#   "3wg causal n64": HOPPER_D64_CAUSAL_BLOCKS (192, 64): the key blocks halved, so that the overlap fits (S + P + O
#                   80 registers of the 160; at 192 x 128 causal it spilled), grid kernel;
#   "3wg causal n64 pers": the same on the persistent kernel ("pairs"; HOPPER_D64_CAUSAL_PERSISTENT), FA3's form;
#   "pdl":          PREFILL_PDL: griddepcontrol.wait first, programmatic launch (every row);
#   "3wg pdl":      both 192-row knobs and PDL (d 64 rows; only with TW_S14_COLUMNS naming it).
# Timed twice: do_bench with its L2 flush (a memset between the calls, which PDL can only overlap with the
# memset's tail) and ``graph_ms``: 20 calls back to back in a CUDA graph (cuDNN's calls captured the same way),
# where a programmatic launch overlaps the previous call's tail.  TW_S14_TIMERS: "bench", "graph" or both.
# For the final run of session 14 also "fma 1/8", "fma 1/4": HOPPER_D64_FMA_EXP2 (1, 8) / (1, 4) (that share of the
# probabilities' 2**x on the FMA pipe: attention_kernels.exp2_on_fma), last measured in s11 before the tree reductions
# and the direct causal store; TW_S14_ROWS "d64" keeps the two d 64 rows (the cubic changes no d 128 kernel).
# Then (issue 9, fewer instructions in the causal d 64 key loop; attention_kernels.LOOP_TRIMS): "trim rescale", "trim
# mask", "trim both": HOPPER_D64_CAUSAL_TRIMS ("fast_rescale",) / ("mask_bound",) / both; "trim skip": ("skip_rescale",)
# (the running max moves only by more than 2**8, the output's rescale skipped by warps where no row's max moved);
# "trim all": the three; "trim mask skip": mask_bound and skip_rescale; "trim skip nc": HOPPER_D64_NONCAUSAL_TRIMS
# ("skip_rescale",) on the non-causal row.
# The H200 run of 2026-12-02 15:44 UTC (three rounds, ratios to cuDNN bf16 / fp16; the third "ops" round read low in
# both dtypes, 354 and 324): causal ops 0.912/0.911, trim rescale 0.917/0.927, trim mask 0.931/0.947, trim both
# 0.916/0.924 (rounds 1-2 alone: ops 380/374 and 375/371, mask 381/378 and 374/375: within the noise).  16:08 UTC
# (four rounds): ops 0.928/0.921, trim mask 0.929/0.931, trim skip 0.945/0.940, trim mask skip 0.942/0.942; non-causal
# ops 0.987/0.988, trim skip nc 0.938/0.951.  Taken: mask_bound + skip_rescale for causal d 64 (the "ops" column since);
# "no trims": HOPPER_D64_CAUSAL_TRIMS () (the kernel shipped before).
# The H200 run of 2026-12-02 11:28 UTC (ratios to cuDNN, bf16 / fp16; do_bench, then the CUDA graph): causal ops
# 0.936/0.953 and 0.943/0.945, 3wg causal 0.839/0.868 and 0.852/0.854, 3wg causal staged 0.834/0.868 and
# 0.852/0.863, pdl 0.936/0.953 and 0.932/0.937; non-causal ops 0.978/0.987 and 0.991/0.981, 3wg 0.948/0.959 and
# 0.954/0.940, 3wg ov 0.948/0.956 and 0.961/0.954, pdl 0.971/0.980 and 0.982/0.980; 16x16x1024x128 causal ops
# 0.983/0.965 and 0.991/0.990, pdl 0.996/0.966 and 0.986/0.986.  Nothing taken (the n64 columns came after that run).
S14_ROWS = [(4, 16, 4096, 64, True), (4, 16, 4096, 64, False), (16, 16, 1024, 128, True)]
WG3 = {"HOPPER_D64_NONCAUSAL_BLOCKS": (192, 128), "HOPPER_D64_CAUSAL_BLOCKS": (192, 128)}
PDL = {"PREFILL_PDL": True}


def _d64_not_causal(s, d, c):
    return d == 64 and not c


def _d64_causal(s, d, c):
    return d == 64 and c


S14_COLUMNS = [("ops", {}, None),
               ("3wg", {"HOPPER_D64_NONCAUSAL_BLOCKS": (192, 128)}, _d64_not_causal),
               ("3wg ov", {"HOPPER_D64_NONCAUSAL_BLOCKS": (192, 128), "HOPPER_D64_3WG_OVERLAP": True},
                _d64_not_causal),
               ("3wg causal", {"HOPPER_D64_CAUSAL_BLOCKS": (192, 128)}, _d64_causal),
               ("3wg causal staged", {"HOPPER_D64_CAUSAL_BLOCKS": (192, 128), "HOPPER_D64_STAGE_OUT": True},
                _d64_causal),
               ("3wg causal n64", {"HOPPER_D64_CAUSAL_BLOCKS": (192, 64)}, _d64_causal),
               ("3wg causal n64 pers", {"HOPPER_D64_CAUSAL_BLOCKS": (192, 64), "HOPPER_D64_CAUSAL_PERSISTENT": True},
                _d64_causal),
               ("pdl", PDL, None),
               ("3wg pdl", {**WG3, **PDL}, _d64),
               ("fma 1/8", {"HOPPER_D64_FMA_EXP2": (1, 8)}, _d64),
               ("fma 1/4", {"HOPPER_D64_FMA_EXP2": (1, 4)}, _d64),
               ("trim rescale", {"HOPPER_D64_CAUSAL_TRIMS": ("fast_rescale",)}, _d64_causal),
               ("trim mask", {"HOPPER_D64_CAUSAL_TRIMS": ("mask_bound",)}, _d64_causal),
               ("trim both", {"HOPPER_D64_CAUSAL_TRIMS": ("fast_rescale", "mask_bound")}, _d64_causal),
               ("trim skip", {"HOPPER_D64_CAUSAL_TRIMS": ("skip_rescale",)}, _d64_causal),
               ("trim all", {"HOPPER_D64_CAUSAL_TRIMS": ("fast_rescale", "mask_bound", "skip_rescale")}, _d64_causal),
               ("trim mask skip", {"HOPPER_D64_CAUSAL_TRIMS": ("mask_bound", "skip_rescale")}, _d64_causal),
               ("trim skip nc", {"HOPPER_D64_NONCAUSAL_TRIMS": ("skip_rescale",)}, _d64_not_causal),
               ("no trims", {"HOPPER_D64_CAUSAL_TRIMS": ()}, _d64_causal)]
S14_DEFAULT_COLUMNS = ("ops,3wg,3wg ov,3wg causal,3wg causal staged,3wg causal n64,3wg causal n64 pers,"
                       "pdl")  # ("3wg pdl" when asked for)


def graph_ms(fn) -> float:
    """Milliseconds a call, 20 calls back to back in one CUDA graph (common.graph_us: no host time, no flush)."""
    return graph_us(fn) / 1e3


def s14_main() -> int:
    env = "TW_S14_"
    keep = os.environ.get(env + "COLUMNS", S14_DEFAULT_COLUMNS).split(",")
    cols = [c for c in S14_COLUMNS if c[0] in keep]
    rows = [r for r in S14_ROWS if os.environ.get(env + "ROWS") != "d64" or r[3] == 64]
    rounds = int(os.environ.get(env + "ROUNDS", "2"))
    which = os.environ.get(env + "TIMERS", "both")
    tag = os.environ.get(env + "DTYPES", "both")
    if which in ("bench", "both"):
        interleaved_table(f"attention-variants-s14-{tag}", cols, rows, rounds, _dtypes(env + "DTYPES"),
                          how="do_bench with an L2 flush between calls")
    if which in ("graph", "both"):
        interleaved_table(f"attention-variants-s14-graph-{tag}", cols, rows, rounds, _dtypes(env + "DTYPES"),
                          graph_ms, "GPU time of 20 back-to-back calls in a CUDA graph (no flush), cuDNN's too")
    return 0


if __name__ == "__main__":
    if os.environ.get("TW_VARIANTS") == "s14":
        sys.exit(s14_main())
    if os.environ.get("TW_VARIANTS") == "s13":
        sys.exit(s13_main())
    if os.environ.get("TW_VARIANTS") == "s11":
        sys.exit(s11_main())
    if os.environ.get("TW_VARIANTS") == "s12":
        sys.exit(s12_main())
    if os.environ.get("TW_VARIANTS") == "s10":
        sys.exit(s10_main())
    sys.exit(lean_main() if os.environ.get("TW_VARIANTS") in ("lean", "layout", "regs") else main())
