"""Attention benchmark, all in one run: the forward pass of a user-level TileLang-style
flash-attention program (``tilewright.kernels.flash_attention``, its block configuration chosen by
the autotuner) and of ``tilewright.ops.attention``, against torch SDPA's flash and cuDNN backends
and FlashAttention-2 when it is installed, in TFLOP/s and as ratios to cuDNN; then a decoding table
(one query token against a KV cache of 4k-64k tokens, grouped-query heads) in GB/s against the
memory roof, the copy bandwidth measured in the same run.

    python bench/attention.py            # a GPU: both tables, bf16 and fp16 (a few minutes on an H200)
    python bench/attention.py --quick    # the CPU: tiny shapes in the tile interpreter, end to end
    python bench/attention.py --no-user  # ops.attention against SDPA only (no autotuning of the user program)
    python bench/attention.py --fast-math --dtypes bfloat16  # the user program with tl.enable_fast_math

The tables are saved under bench/results/ (``--no-save`` to skip).  Each tilewright output is
compared with SDPA's before it is timed (the ``err`` columns: the largest |out - SDPA| / (1 + |SDPA|);
above 2e-2 the output is reported as wrong and not timed).
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import bench_ms, graph_us, save  # noqa: E402

import tilewright  # noqa: E402
from tilewright import ops  # noqa: E402
from tilewright.kernels import flash_attention  # noqa: E402

# B, H, S, D (every one causal and not)
SHAPES = [(16, 16, 1024, 128), (4, 16, 4096, 128), (1, 16, 16384, 128), (4, 16, 4096, 64)]
# (block_M, block_N, num_stages, threads) tried for the user program
CONFIGS = [(128, 64, 2, 256), (64, 64, 2, 128), (128, 128, 2, 256)]
# decoding: batch, query heads, KV heads, head dim; KV lengths
DECODE = (8, 32, 8, 128)
DECODE_LENS = [4096, 8192, 16384, 32768, 65536]

QUICK_SHAPES = [(1, 2, 128, 32), (2, 2, 96, 16)]  # 96: a length that is not a multiple of the block
QUICK_CONFIGS = [(64, 64, 2, 128), (32, 32, 2, 128)]
QUICK_DECODE = (2, 4, 2, 32)
QUICK_DECODE_LENS = [256, 512]

TUNE_TIMEOUT = 60  # s for compiling the candidates of one shape (one compile takes a few seconds)
_autotuner_ok = [True]  # set False when the autotuner fails once: the run then compiles in process
WRONG = 2e-2  # an output further than this from SDPA's is reported as wrong (and not timed)


def _nan_on_failure(fn):
    """fn() or NaN: a backend may be missing (cuDNN before torch 2.5, flash-attn not installed, the CPU)."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001
        print(f"  (unavailable: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})", flush=True)
        return float("nan")


def sdpa(q, k, v, causal, backend=None):
    """torch SDPA on (B, H, S, D) tensors, restricted to one backend (None: torch's choice)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    gqa = dict(enable_gqa=True) if k.shape[1] != q.shape[1] else {}
    if backend is None:
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, **gqa)
    be = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}[backend]
    with sdpa_kernel(be):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, **gqa)


def flash_attn2():
    """flash_attn.flash_attn_func when installed (it takes (B, S, H, D) tensors), else None."""
    try:
        from flash_attn import flash_attn_func

        return flash_attn_func
    except Exception:  # noqa: BLE001 - not installed, or built for another torch
        return None


def _err(x, ref) -> float:
    """max |x - ref| / (1 + |ref|): absolute for small values, relative for large ones (bf16 rounds
    an output near 4 by 0.016)."""
    ref = ref.float()
    return float(((x.float() - ref).abs() / (1 + ref.abs())).max())


def _f(x: float) -> str:
    """A rate for the table: whole numbers on a GPU, three digits for the CPU's tiny ones."""
    return f"{x:.1f}" if x != x or x >= 10 else f"{x:.3g}"


def _target(quick: bool) -> str:
    return "interpret" if quick else "auto"


def tune_user_program(b, h, s, d, causal, dtype, configs, q4, k4, v4, ref4, quick):
    """The user program's best configuration: the autotuner (parallel compiles, L2-flushed timing,
    a check against SDPA); an in-process loop over the configurations if the autotuner fails.
    Returns (kernel, config, note)."""
    from tilewright.autotune import AutoTuner, set_autotune_inputs

    cfgs = [dict(block_M=m, block_N=n, num_stages=st, threads=t) for m, n, st, t in configs]
    if not _autotuner_ok[0]:
        return _tune_in_process(b, h, s, d, causal, dtype, configs, q4, k4, v4, ref4, quick)

    def ref_prog(q, k, v):
        return sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal).transpose(1, 2)

    try:
        tuner = (AutoTuner.from_kernel(flash_attention, cfgs)
                 .set_kernel_parameters((b, h, s, d, causal), dict(dtype=dtype))
                 .set_compile_args(out_idx=[3], target=_target(quick))
                 .set_profile_args(ref_prog=ref_prog, rtol=WRONG, atol=WRONG, warmup=5 if quick else 25,
                                   rep=10 if quick else 100, timeout=TUNE_TIMEOUT))
        with set_autotune_inputs(q4, k4, v4):
            res = tuner.run()
        if any("did not finish" in str(r.get("reason", "")) for r in res.rows):
            # a stuck compile worker costs TUNE_TIMEOUT per shape: the rest of the run compiles here
            _autotuner_ok[0] = False
            print("  autotuner: a compile worker timed out; later shapes compile in this process", flush=True)
        c = res.config
        return res.kernel, (c["block_M"], c["block_N"], c["num_stages"], c["threads"]), ""
    except tilewright.TilewrightError as e:
        if "no configuration" in str(e):  # every candidate refused or wrong: the reasons are in the message
            print(f"  user program: {str(e).splitlines()[0]}", flush=True)
            return None, None, "no configuration"
        _autotuner_ok[0] = False
        print(f"  autotuner: {type(e).__name__}: {str(e).splitlines()[0]}; this and later shapes compile in this "
              "process", flush=True)
    except Exception as e:  # noqa: BLE001
        _autotuner_ok[0] = False
        print(f"  autotuner: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}; "
              "this and later shapes compile in this process", flush=True)
    return _tune_in_process(b, h, s, d, causal, dtype, configs, q4, k4, v4, ref4, quick)


def _tune_in_process(b, h, s, d, causal, dtype, configs, q4, k4, v4, ref4, quick):
    """The configurations compiled and timed one after the other in this process."""
    best = None
    for cfg in configs:
        try:
            kern = tilewright.compile(flash_attention(b, h, s, d, causal, *cfg, dtype=dtype), out_idx=[3],
                                      target=_target(quick))
            o = kern(q4, k4, v4)
        except tilewright.TilewrightError as e:
            print(f"  config {cfg} failed: {str(e).splitlines()[0]}", flush=True)
            continue
        if not _err(o, ref4) < WRONG:
            print(f"  WRONG RESULT: user program, config {cfg}, error {_err(o, ref4):.3g}", flush=True)
            continue
        ms = bench_ms(lambda: kern(q4, k4, v4))
        if best is None or ms < best[0]:
            best = (ms, kern, cfg)
    return (best[1], best[2], "in process") if best else (None, None, "in process")


def forward_table(shapes, configs, dtypes, quick, device, user=True) -> tuple:
    rows = ["| dtype | B,H,S,D | causal | SDPA flash | SDPA cuDNN | FA2 | user program | ops.attention | "
            "user/cuDNN | ops/cuDNN | ops/flash | ops err | user config |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    ratios = {"user": [], "ops": []}
    fa2 = flash_attn2()
    for dtype in dtypes:
        tdt = getattr(torch, dtype)
        for (b, h, s, d) in shapes:
            for causal in (False, True):
                print(f"{dtype} {b}x{h}x{s}x{d} causal={causal}", flush=True)
                tf = 4 * b * h * s * s * d / (2 if causal else 1) / 1e9  # GFLOP: TFLOP/s = tf / ms
                g = torch.Generator(device=device).manual_seed(b * s + d + causal)
                q4, k4, v4 = (torch.randn(b, s, h, d, device=device, dtype=tdt, generator=g) for _ in range(3))
                q, k, v = (x.transpose(1, 2).contiguous() for x in (q4, k4, v4))  # SDPA's (B, H, S, D)
                ref = sdpa(q, k, v, causal)
                ref4 = ref.transpose(1, 2)
                res = {be: _nan_on_failure(lambda be=be: tf / bench_ms(lambda: sdpa(q, k, v, causal, be)))
                       for be in ("flash", "cudnn")}
                res["fa2"] = (_nan_on_failure(lambda: tf / bench_ms(lambda: fa2(q4, k4, v4, causal=causal)))
                              if fa2 is not None and device == "cuda" else float("nan"))
                kern, cfg = None, None
                if user:  # (its autotuning compiles three configurations a row: most of the run time)
                    kern, cfg, _ = tune_user_program(b, h, s, d, causal, dtype, configs, q4, k4, v4, ref4, quick)
                res["user"] = tf / bench_ms(lambda: kern(q4, k4, v4)) if kern is not None else float("nan")
                out = ops.attention(q, k, v, causal=causal)
                err = _err(out, ref)
                if err < WRONG:
                    res["ops"] = tf / bench_ms(lambda: ops.attention(q, k, v, causal=causal))
                else:
                    print(f"  WRONG RESULT: ops.attention, error {err:.3g}", flush=True)
                    res["ops"] = float("nan")
                base = res["cudnn"] if res["cudnn"] == res["cudnn"] else res["flash"]  # cuDNN, else flash
                for name in ("user", "ops"):
                    if res[name] == res[name] and base == base:
                        ratios[name].append(res[name] / base)
                rows.append(f"| {dtype} | {b},{h},{s},{d} | {'yes' if causal else 'no'} | {_f(res['flash'])} | "
                            f"{_f(res['cudnn'])} | {_f(res['fa2'])} | {_f(res['user'])} | {_f(res['ops'])} | "
                            f"{res['user'] / res['cudnn']:.2f} | {res['ops'] / res['cudnn']:.2f} | "
                            f"{res['ops'] / res['flash']:.2f} | {err:.1e} | {cfg or '-'} |")
                print(rows[-1], flush=True)
    gm = {n: math.exp(sum(map(math.log, r)) / len(r)) if r else float("nan") for n, r in ratios.items()}
    rows += ["", "TFLOP/s (4·B·H·S²·D, halved when causal); ratios to cuDNN (to SDPA flash where cuDNN is "
             "missing). Geometric means: user program "
             f"{gm['user']:.2f}x, ops.attention {gm['ops']:.2f}x (over {len(ratios['ops'])} rows)."]
    return rows, gm


# the configuration the autotuner picked for the user program per (head dim, causal) on the H200 (0418 run)
USER_PICKED = {(128, False): (128, 128, 2, 256), (128, True): (128, 128, 2, 256), (64, False): (128, 128, 2, 256),
               (64, True): (64, 64, 2, 128)}


def fast_math_table(shapes, dtypes, quick, device) -> list:
    """The user program unchanged but for ``pass_configs={"tl.enable_fast_math": True}`` next to itself
    without it (at the configuration the autotuner picks, USER_PICKED) and cuDNN, each checked against
    SDPA before it is timed."""
    rows = ["| dtype | B,H,S,D | causal | SDPA cuDNN | user program | user + tl.enable_fast_math | user/cuDNN | "
            "fast/cuDNN | fast err | config |", "|---|---|---|---|---|---|---|---|---|---|"]
    ratios = {"user": [], "fast": []}
    for dtype in dtypes:
        tdt = getattr(torch, dtype)
        for (b, h, s, d) in shapes:
            for causal in (False, True):
                tf = 4 * b * h * s * s * d / (2 if causal else 1) / 1e9
                g = torch.Generator(device=device).manual_seed(b * s + d + causal + 7)
                q4, k4, v4 = (torch.randn(b, s, h, d, device=device, dtype=tdt, generator=g) for _ in range(3))
                q, k, v = (x.transpose(1, 2).contiguous() for x in (q4, k4, v4))
                ref4 = sdpa(q, k, v, causal).transpose(1, 2)
                cfg = QUICK_CONFIGS[0] if quick else USER_PICKED[(d, causal)]
                res, err = {"cudnn": _nan_on_failure(lambda: tf / bench_ms(lambda: sdpa(q, k, v, causal, "cudnn")))}, {}
                for name, pc in (("user", None), ("fast", {"tl.enable_fast_math": True})):
                    kern = tilewright.compile(flash_attention(b, h, s, d, causal, *cfg, dtype=dtype), out_idx=[3],
                                              target=_target(quick), pass_configs=pc)
                    err[name] = _err(kern(q4, k4, v4), ref4)
                    ok = err[name] < WRONG
                    if not ok:
                        print(f"  WRONG RESULT: {name}, error {err[name]:.3g}", flush=True)
                    res[name] = tf / bench_ms(lambda kern=kern: kern(q4, k4, v4)) if ok else float("nan")
                base = res["cudnn"] if res["cudnn"] == res["cudnn"] else float("nan")
                for name in ratios:
                    if res[name] == res[name] and base == base:
                        ratios[name].append(res[name] / base)
                rows.append(f"| {dtype} | {b},{h},{s},{d} | {'yes' if causal else 'no'} | {_f(res['cudnn'])} | "
                            f"{_f(res['user'])} | {_f(res['fast'])} | {res['user'] / base:.2f} | "
                            f"{res['fast'] / base:.2f} | {err['fast']:.1e} | {cfg} |")
                print(rows[-1], flush=True)
    gm = {n: math.exp(sum(map(math.log, r)) / len(r)) if r else float("nan") for n, r in ratios.items()}
    rows += ["", f"TFLOP/s; geometric means vs cuDNN: user program {gm['user']:.2f}x, with tl.enable_fast_math "
             f"{gm['fast']:.2f}x (over {len(ratios['fast'])} rows)."]
    return rows


def copy_bandwidth(device, quick) -> float:
    """GB/s of a device-to-device copy (bytes read + written): the memory roof of this run."""
    n = (1 << 22) if quick else (1 << 30)
    a = torch.randn(n // 2, device=device, dtype=torch.float16)
    b = torch.empty_like(a)
    gb = 2 * a.numel() * a.element_size() / 1e9
    bw = gb / bench_ms(lambda: b.copy_(a)) * 1e3
    return bw


def _graph_rate(fn, caches, gb) -> float:
    """GB/s from the GPU time alone: calls captured in a CUDA graph (common.graph_us), alternating
    between two KV caches each larger than the 50 MB L2, so no call finds its K/V cached and no
    host time or flush kernel is in the figure."""
    turn = itertools.cycle(caches)
    return gb * 1e6 / graph_us(lambda: fn(*next(turn)))


def decode_table(shape, lens, dtypes, quick, device, roof) -> list:
    B, H, Hkv, D = shape
    rows = [f"Decoding: batch {B}, {H} query heads, {Hkv} KV heads, head dim {D}, one query token; GB/s of K and V "
            f"read (the output and q are negligible); memory roof = copy bandwidth {roof:.0f} GB/s. Headline columns: "
            "GPU time in a CUDA graph, two KV caches alternated (no host time, K/V never in L2); 'flushed': "
            "do_bench per call with an L2 flush (a memset) before each, which also times the flush's dirty lines "
            "being written back while the kernel reads.", "",
            "| dtype | KV length | ops.attention GB/s | of roof | SDPA best GB/s | of roof | ops/SDPA | "
            "ops flushed | SDPA flushed (default / flash / cuDNN) | ops err |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for dtype in dtypes:
        tdt = getattr(torch, dtype)
        for L in lens:
            print(f"decode {dtype} kv={L}", flush=True)
            g = torch.Generator(device=device).manual_seed(L)
            q = torch.randn(B, H, 1, D, device=device, dtype=tdt, generator=g)
            caches = [tuple(torch.randn(B, Hkv, L, D, device=device, dtype=tdt, generator=g) for _ in range(2))
                      for _ in range(1 if quick else 2)]
            k, v = caches[0]
            gb = 2 * B * Hkv * L * D * k.element_size() / 1e9
            ref = sdpa(q, k, v, False)
            out = ops.attention(q, k, v)
            err = _err(out, ref)
            if not err < WRONG:
                print(f"  WRONG RESULT: ops.attention decode, error {err:.3g}", flush=True)
            ok = err < WRONG
            tw_f = gb / bench_ms(lambda: ops.attention(q, k, v)) * 1e3 if ok else float("nan")
            sd_f = {be: _nan_on_failure(lambda be=be: gb / bench_ms(lambda: sdpa(q, k, v, False, be)) * 1e3)
                    for be in (None, "flash", "cudnn")}
            if quick:  # no CUDA graphs on the CPU: the flushed figures stand in
                tw, sd = tw_f, max((x for x in sd_f.values() if x == x), default=float("nan"))
            else:
                tw = _graph_rate(lambda kk, vv: ops.attention(q, kk, vv), caches, gb) if ok else float("nan")
                sd = max((x for x in (_nan_on_failure(lambda be=be: _graph_rate(
                    lambda kk, vv, be=be: sdpa(q, kk, vv, False, be), caches, gb)) for be in (None, "flash", "cudnn"))
                          if x == x), default=float("nan"))
            rows.append(f"| {dtype} | {L} | {_f(tw)} | {tw / roof:.0%} | {_f(sd)} | {sd / roof:.0%} | {tw / sd:.2f} | "
                        f"{_f(tw_f)} ({tw_f / roof:.0%}) | {_f(sd_f[None])} / {_f(sd_f['flash'])} / "
                        f"{_f(sd_f['cudnn'])} | {err:.1e} |")
            print(rows[-1], flush=True)
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="the CPU: tiny shapes in the tile interpreter")
    p.add_argument("--dtypes", default="bfloat16,float16")
    p.add_argument("--no-decode", action="store_true")
    p.add_argument("--no-user", action="store_true", help="ops.attention and SDPA only (no user-level program)")
    p.add_argument("--no-forward", action="store_true")
    p.add_argument("--fast-math", action="store_true",
                   help="only the user program with and without tl.enable_fast_math, against cuDNN")
    p.add_argument("--no-save", action="store_true")
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    device = "cpu" if a.quick else "cuda"
    if not a.quick and not torch.cuda.is_available():
        raise SystemExit("no GPU: run with --quick (tiny shapes in the CPU interpreter)")
    dtypes = [x.strip() for x in a.dtypes.split(",") if x.strip()]
    rows = []
    if a.fast_math:
        rows = fast_math_table(QUICK_SHAPES if a.quick else SHAPES, dtypes, a.quick, device)
        rows += ["", f"Run time {time.perf_counter() - t0:.0f} s."]
        print("\n".join(rows))
        if not a.no_save:
            print("saved", save("attention-fast-math-quick" if a.quick else "attention-fast-math", rows))
        return rows
    if not a.no_forward:
        fwd, _ = forward_table(QUICK_SHAPES if a.quick else SHAPES, QUICK_CONFIGS if a.quick else CONFIGS, dtypes,
                               a.quick, device, user=not a.no_user)
        rows += fwd
    if not a.no_decode:
        roof = copy_bandwidth(device, a.quick)
        rows += [""] + decode_table(QUICK_DECODE if a.quick else DECODE, QUICK_DECODE_LENS if a.quick else DECODE_LENS,
                                    dtypes, a.quick, device, roof)
    rows += ["", f"Run time {time.perf_counter() - t0:.0f} s."]
    if a.quick:
        rows = ["CPU (--quick): the tile interpreter on tiny shapes; the numbers are not performance", ""] + rows
    print("\n".join(rows))
    if not a.no_save:
        print("saved", save("attention-quick" if a.quick else "attention", rows))
    return rows


if __name__ == "__main__":
    main()
