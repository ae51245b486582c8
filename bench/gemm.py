"""GEMM benchmark, side by side on the issue-8 shapes (fp16 and bf16):

- cuBLAS (``torch.matmul``),
- Triton (``bench/triton_gemm.py``, five-configuration autotune; left out without triton),
- the user-written TileLang-style kernel (``tilewright.kernels.matmul``) at its best configuration,
  among them ones whose C leaves through shared memory as a TileLang user writes it
  (``T.copy(C_local, C_shared); T.copy(C_shared, C[...])``: a TMA store on sm_90, label "staged"),
- ``tilewright.ops.matmul`` as a user calls it (tuned entry or shape heuristic), and the best of its
  candidate configurations (direct / split-K / persistent: ``ops/gemm_configs.candidates``), which
  is then kept in the tuning cache so later ``ops.matmul`` calls of that shape use it.

TFLOP/s and ratios to cuBLAS; every result is checked against a float64 reference with its output
poisoned (NaN) first.  Times are GPU times of CUDA-graph replays of back-to-back calls (``--timer
do_bench`` for triton's do_bench of eager calls instead), after a second of cuBLAS calls per shape (``--warmup``:
every contender timed at the clocks of a sustained load), ops.matmul and each candidate twice per round, forwards
then backwards, in an order that rotates from round to round (``--passes``), cuBLAS first and last: each keeps its
best time.  Before timing, every tilewright kernel
is compiled in parallel worker processes (filling the disk cache), so a run takes a few minutes.

``python bench/gemm.py`` on a GPU (results under bench/results/); ``--quick`` runs two tiny shapes
(on the CPU through the tile interpreter when there is no GPU: a check that the script works).
``--weak`` times only the two shapes furthest below cuBLAS (2000x3000x1000 and 128x8192x8192):
cuBLAS, ``ops.matmul`` as called (the heuristic) and every candidate configuration (among them the
data-parallel + stream-K ones), each listed with its ratio to cuBLAS (no Triton, no user kernel).
``--configs "A;B;..."`` (or the environment variable ``TW_GEMM_CONFIGS``) times exactly these candidate
configurations, named as the tables print them (``GemmConfig.short``), instead of the whole candidate
list: a short device run for a few new candidates beside the ones they must beat.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import triton_gemm  # noqa: E402
from common import bench_ms, output_rounding, save  # noqa: E402

import tilewright  # noqa: E402
from tilewright.kernels import matmul as user_matmul  # noqa: E402
from tilewright.ops import dispatch, gemm_configs  # noqa: E402
from tilewright.ops import kernels as ops_kernels  # noqa: E402

SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (16, 8192, 8192), (128, 8192, 8192), (8192, 8192, 1024),
          (2000, 3000, 1000)]
QUICK_SHAPES = [(64, 96, 128), (16, 128, 2048)]  # the second takes split-K
WEAK_SHAPES = [(2000, 3000, 1000), (128, 8192, 8192)]  # tiles that fill the GPU badly (bench/results/*-0954-gemm-*)
WGMMA_WS = {"tw.enable_wgmma": True, "tw.warp_specialize": True}
WGMMA = {"tw.enable_wgmma": True}


def user_configs(m: int) -> list:
    """(block_M, block_N, block_K, stages, threads, pass configs, staged epilogue) tried for the
    user-written kernel.  A staged 128x256 tile holds its 64 KiB C tile: three stages, not four."""
    if m <= 16:
        return [(16, 128, 128, 4, 128, {}, False), (16, 64, 256, 4, 128, {}, False), (16, 256, 64, 4, 128, {}, False)]
    if m <= 128:
        return [(64, 128, 64, 4, 128, WGMMA, False), (128, 128, 64, 4, 128, WGMMA, False),
                (128, 256, 64, 4, 256, WGMMA_WS, False), (128, 128, 32, 4, 128, {}, False),
                (64, 128, 64, 4, 128, WGMMA, True), (128, 256, 64, 3, 256, WGMMA_WS, True),
                (128, 64, 64, 8, 256, WGMMA_WS, False)]  # cuBLAS's 128x8192x8192 tiles (ncu, 2026-12-01)
    return [(128, 256, 64, 4, 256, WGMMA_WS, False), (128, 256, 64, 3, 256, WGMMA_WS, False),
            (128, 128, 64, 4, 128, WGMMA_WS, False), (128, 128, 32, 4, 128, {}, False),
            (128, 256, 64, 3, 256, WGMMA_WS, True), (128, 128, 64, 4, 128, WGMMA_WS, True),
            (128, 192, 64, 4, 256, WGMMA_WS, True)]  # ops.matmul's persistent tiles, one block per tile here


def user_kernel(m, n, k, dtype, bm, bn, bk, st, thr, staged):
    return user_matmul(m, n, k, bm, bn, bk, dtype=dtype, num_stages=st, threads=thr, staged_epilogue=staged)


def tflops(m, n, k, ms):
    return 2 * m * n * k / ms / 1e9


# ---------------------------------------------------------------- timing
def graph_ms(fn, calls: int = 10, replays: int = 10) -> float:
    """Milliseconds per call: a CUDA graph of ``calls`` back-to-back calls, replayed; the median."""
    fn()
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(replays):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        graph.replay()
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e) / calls)
    ts.sort()
    return ts[len(ts) // 2]


def cpu_ms(fn, reps: int = 3) -> float:
    fn()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) * 1e3 / reps


def make_timer(kind: str, on_gpu: bool):
    if not on_gpu:
        return cpu_ms
    if kind == "do_bench":
        return bench_ms

    def timer(fn):
        try:
            return graph_ms(fn)
        except Exception as e:  # noqa: BLE001 (a call that cannot be captured is timed eagerly)
            print(f"    (graph capture failed: {type(e).__name__}: {str(e).splitlines()[0][:120]}; eager timing)")
            torch.cuda.synchronize()
            return bench_ms(fn)

    return timer


# ---------------------------------------------------------------- parallel compilation
_JOBS: list = []


def _compile_job(i: int) -> str:
    build, pass_configs, target = _JOBS[i]
    try:
        tilewright.compile(build(), target=target, pass_configs=pass_configs or None)
        return ""
    except Exception as e:  # noqa: BLE001 (reported; the timing loop reports it again at its config)
        return f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"


def precompile(jobs: list, workers: int, timeout: int = 240) -> None:
    """Compile ``(build, pass_configs, target)`` jobs in forked workers: the disk cache then
    answers the timing loop's compiles.  Workers touch no GPU."""
    if workers <= 1 or not jobs or "fork" not in multiprocessing.get_all_start_methods():
        return
    _JOBS[:] = jobs
    t0 = time.perf_counter()
    pool = multiprocessing.get_context("fork").Pool(workers)
    try:
        errors = [e for e in pool.map_async(_compile_job, range(len(jobs)), chunksize=1).get(timeout) if e]
        note = f" ({len(errors)} refused)" if errors else ""
    except multiprocessing.TimeoutError:
        note = f" -- stopped after {timeout} s; the rest compile in the timing loop"
    finally:
        pool.terminate()  # also ends a worker stuck in a toolchain
        pool.join()
        _JOBS.clear()
    print(f"precompiled {len(jobs)} kernels in {time.perf_counter() - t0:.0f} s on {workers} workers{note}",
          flush=True)


def ops_jobs(m, n, k, dtype, cfg, arch, num_sms, target):
    """The kernels ``ops.matmul`` compiles for ``cfg`` (as ``dispatch._launch_matmul`` builds them)."""
    tiles = (cfg.block_M, cfg.block_N, cfg.block_K, cfg.stages, cfg.threads)
    pc = cfg.pass_configs(arch)
    staged = cfg.staged_epilogue(dtype)  # as dispatch._plan decides (output = input dtype)
    if cfg.kind == "splitk":
        slices = 1 if cfg.atomic else cfg.splits
        return [(lambda: ops_kernels.linear_splitk(n, k, dtype, False, False, *tiles, cfg.splits, cfg.atomic), pc,
                 target), (lambda: ops_kernels.splitk_epilogue(n, slices, dtype, None, "none"), {}, target)]
    if cfg.kind == "streamk":
        return [(lambda: ops_kernels.linear_streamk(n, k, dtype, dtype, False, False, False, "none", *tiles, num_sms,
                                                    cfg.splits), pc, target),
                (lambda: ops_kernels.streamk_epilogue(n, cfg.block_M, cfg.block_N, cfg.splits, num_sms, dtype, None,
                                                      "none"), {}, target)]
    if cfg.kind == "persistent":
        pair = cfg.cluster[0]  # (as dispatch._plan: clusters of two take an even number of blocks)
        return [(lambda: ops_kernels.linear_persistent(n, k, dtype, dtype, False, False, False, "none", *tiles,
                                                       num_sms // pair * pair, cfg.group_M, staged, pair, cfg.pdl),
                 pc, target)]
    return [(lambda: ops_kernels.linear(n, k, dtype, dtype, False, False, False, "none", *tiles, staged, cfg.cluster,
                                        cfg.pdl), pc, target)]


# ---------------------------------------------------------------- one shape
def rel_err(got, ref) -> float:
    return (got.double() - ref).abs().max().item() / (ref.abs().max().item() + 1e-12)


def shape_candidates(m, n, k, dtype, arch, num_sms, smem, only=None) -> list:
    """The candidate configurations timed for a shape: those of ``only`` (``parse_configs``) for this shape
    when it names any, else ``gemm_configs.candidates``."""
    if only:
        out = []
        for shape, cfg in only:
            if shape is None or shape == (m, n, k):
                out += [cfg] if cfg != "s13" else [gemm_configs.heuristic(m, n, k, dtype, arch, num_sms, smem),
                                                   *gemm_configs.s13_candidates(m, n, k, dtype, num_sms)]
        return out
    return gemm_configs.candidates(m, n, k, dtype, arch, num_sms, smem)


def parse_configs(text: str | None) -> list:
    """``--configs`` / ``TW_GEMM_CONFIGS``: configuration names separated by ';', each optionally after
    ``MxNxK=`` (that shape only; without it, every shape): [(shape or None, GemmConfig)].  The word ``s13``
    stands for the shape's heuristic choice and ``gemm_configs.s13_candidates`` (kept as the string)."""
    out = []
    for item in (text or "").split(";"):
        shape, _, name = item.strip().rpartition("=")
        if name.strip():
            out.append((tuple(int(x) for x in shape.lower().split("x")) if shape.strip() else None,
                        "s13" if name.strip() == "s13" else gemm_configs.GemmConfig.parse(name.strip())))
    return out


def rotated(items: list, rnd: int) -> list:
    """``items`` started ``rnd - 1`` places further on (round 1: as they are): what is timed first in a shape
    reads low on the H200 (bench/results/2026-12-02-1203-gemm-weak-*: 413.7 against 443-449 TFLOP/s for the same
    kernel elsewhere in the run), so each round puts a different contender there."""
    if not items:
        return items
    r = (rnd - 1) % len(items)
    return items[r:] + items[:r]


def warm_up(fn, seconds: float) -> None:
    """Call ``fn`` back to back for about ``seconds`` (GPU): the clocks settle to what a sustained load gets before
    anything is timed.  Without it the first contender of a shape, cuBLAS, was timed on a cooler GPU than the
    rest: at 4096^3 cuBLAS's second timing, after the candidates, read 5-10% below its first (747 -> 672, 780 ->
    735 TFLOP/s fp16 / bf16 in bench/results/2026-12-02-1543-gemm-weak-*), while at the memory-bound 128x8192^2 the
    two agreed (472.8 / 472.6)."""
    if seconds <= 0:
        return
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(10):
            fn()
        torch.cuda.synchronize()


def timing_order(n: int, passes: int) -> list:
    """Indices of ``n`` contenders in the order they are timed: ``passes`` passes, every other one backwards, so
    that a contender timed early in one pass is timed late in the next (each keeps its best time): the place in
    the order moved a kernel's time by up to 10% on the H200 (bench/results/2026-12-02-1543-gemm-weak-*: 383.6
    against 441-446 TFLOP/s for the same 128x8192x8192 kernel, timed first in its round)."""
    out = []
    for p in range(max(1, passes)):
        out += range(n) if p % 2 == 0 else range(n - 1, -1, -1)
    return out


def run_shape(m, n, k, dtype, device, timer, arch, num_sms, smem, target, tol, ops_only=False, per_config=None,
              only=None, rnd=1, passes=2, warmup_s=0.0):
    """The contenders on one shape: {name: (ms, label)}; ``ops_only``: cuBLAS and ops.matmul only;
    ``per_config`` (a list) receives (config, ms or None) for every candidate configuration (``only``:
    these configurations instead of the shape's candidate list).  ``rnd``: the round, which rotates the order in
    which ops.matmul and the candidates are timed (``rotated``), ``passes`` the times each is timed (forwards,
    backwards, ...: ``timing_order``; its best time kept); cuBLAS is timed first and again after them, its faster
    time kept (a reference no slower than either timing); before it, ``warmup_s`` seconds of cuBLAS calls
    (``warm_up``)."""
    td = getattr(torch, dtype)
    g = torch.Generator(device=device).manual_seed(m * 31 + n * 7 + k)
    a = torch.randn(m, k, device=device, dtype=td, generator=g)
    b = torch.randn(k, n, device=device, dtype=td, generator=g)
    ref = a.double() @ b.double()
    res = {}

    def attempt(name, fn, out, label):
        """Run once with ``out`` poisoned, check, time; record the best per contender name."""
        try:
            out.fill_(float("nan"))
            fn()
            err = rel_err(out, ref)
            if not err <= tol + output_rounding(out.dtype):
                print(f"  WRONG RESULT {name} {label}: relative error {err:.2e}", flush=True)
                return None
            ms = timer(fn)
        except Exception as e:  # noqa: BLE001 (one failing contender must not end the benchmark)
            print(f"  {name} {label} failed: {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}",
                  flush=True)
            return None
        print(f"  {m}x{n}x{k} {dtype} {name:12s} {tflops(m, n, k, ms):7.4g} TFLOP/s  {ms * 1e3:9.1f} us  {label}",
              flush=True)
        if name not in res or ms < res[name][0]:
            res[name] = (ms, label)
        return ms

    c_ref = torch.empty(m, n, device=device, dtype=td)
    if device == "cuda":
        warm_up(lambda: torch.matmul(a, b, out=c_ref), warmup_s)
    attempt("cuBLAS", lambda: torch.matmul(a, b, out=c_ref), c_ref, "torch.matmul")
    if triton_gemm.matmul is not None and device == "cuda" and not ops_only:
        c_tr = torch.empty(m, n, device=device, dtype=td)
        triton_gemm.matmul(a, b, c_tr)  # autotunes here, outside the timing
        attempt("Triton", lambda: triton_gemm.matmul(a, b, c_tr), c_tr, triton_gemm.best_config())
    c_user = torch.empty(m, n, device=device, dtype=td)
    for bm, bn, bk, st, thr, pc, staged in ([] if ops_only else user_configs(m)):
        pc = pc if arch == "sm_90" else {}
        label = f"{bm}x{bn}x{bk} s{st} t{thr}" + (" " + "+".join(k.split(".")[1] for k in pc) if pc else "")
        label += " staged" if staged else ""
        try:
            kern = tilewright.compile(user_kernel(m, n, k, dtype, bm, bn, bk, st, thr, staged),
                                      target=target, pass_configs=pc or None)
        except tilewright.TilewrightError as e:
            print(f"  user kernel {label} refused: {str(e).splitlines()[0]}", flush=True)
            continue
        attempt("user kernel", lambda kern=kern: kern(a, b, c_user), c_user, label)
    c_ops = torch.empty(m, n, device=device, dtype=td)
    called = dispatch.matmul_config(m, n, k, a)
    order = rotated([None, *shape_candidates(m, n, k, dtype, arch, num_sms, smem, only)], rnd)
    best: dict = {}  # candidate index -> its best time over the passes (None: failed)
    for i in timing_order(len(order), passes):
        cfg = order[i]
        if cfg is None:  # ops.matmul as a user calls it
            attempt("ops.matmul", lambda: dispatch.matmul_impl(a, b, None, "none", None, out=c_ops), c_ops,
                    called.short())
            continue
        if i in best and best[i] is None:
            continue  # (failed or wrong once: not again)
        ms = attempt("ops best", lambda cfg=cfg: dispatch.matmul_impl(a, b, None, "none", None, config=cfg, out=c_ops),
                     c_ops, cfg.short())
        best[i] = ms if i not in best or ms is None else min(ms, best[i])
    rows = [(order[i], best[i], "") for i in range(len(order)) if order[i] is not None]
    if per_config is not None:
        per_config += [(cfg, ms) for cfg, ms, _ in rows]
    attempt("cuBLAS", lambda: torch.matmul(a, b, out=c_ref), c_ref, "torch.matmul (again)")
    timed = [r for r in rows if r[1] is not None]
    if timed and device == "cuda":
        best = min(timed, key=lambda r: r[1])
        dispatch.record_tuned(a, b, None, "none", None, best[0], best[1], rows)  # later calls use the winner
    return res


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="two tiny shapes (the CPU interpreter when there is no GPU)")
    p.add_argument("--dtypes", default="float16,bfloat16", help="comma-separated (default: float16,bfloat16)")
    p.add_argument("--shapes", default=None, help="MxNxK,... instead of the issue-8 shapes")
    p.add_argument("--weak", action="store_true",
                   help="the two weak shapes only: cuBLAS, ops.matmul and every candidate side by side")
    p.add_argument("--configs", default=os.environ.get("TW_GEMM_CONFIGS"),
                   help="';'-separated configurations (as the tables name them) to time instead of every candidate "
                        "(default: $TW_GEMM_CONFIGS)")
    p.add_argument("--rounds", type=int, default=1,
                   help="time every shape and dtype this many times, round after round (the level of a run moves: "
                        "candidates are compared within a round); the summary takes the last round")
    p.add_argument("--passes", type=int, default=2,
                   help="time ops.matmul and each candidate this many times within a round, every other pass in "
                        "reverse order, and keep the best (default 2; cuBLAS: first and last, the best kept)")
    p.add_argument("--warmup", type=float, default=1.0,
                   help="seconds of back-to-back cuBLAS calls before each shape's timings, so that every contender "
                        "is timed at the clocks of a sustained load (default 1; 0: none)")
    p.add_argument("--timer", choices=("graph", "do_bench"), default="graph",
                   help="graph: CUDA-graph replays (GPU time); do_bench: triton.testing.do_bench of eager calls")
    p.add_argument("--workers", type=int, default=max(1, min(14, (os.cpu_count() or 2) - 2)),
                   help="processes compiling kernels before the timing (default: CPUs - 2, at most 14)")
    p.add_argument("--no-compile-times", action="store_true", help="skip the cold/warm compile-time line")
    args = p.parse_args(argv)
    only = parse_configs(args.configs)

    on_gpu = torch.cuda.is_available()
    device = "cuda" if on_gpu else "cpu"
    if not on_gpu and not args.quick:
        p.error("no GPU here: run with --quick (the tile interpreter on tiny shapes)")
    if args.shapes:
        shapes = [tuple(int(x) for x in s.lower().split("x")) for s in args.shapes.split(",")]
    else:
        shapes = QUICK_SHAPES if args.quick else WEAK_SHAPES if args.weak else SHAPES
    dtypes = args.dtypes.split(",")
    probe = torch.empty(1, device=device, dtype=torch.float16)
    arch, num_sms, device_name = dispatch._arch_of(probe)
    smem = dispatch.shared_limit(probe)
    target = str(tilewright.target.Target.current()) if on_gpu else "interpret"
    timer = make_timer(args.timer, on_gpu)
    # the bound, relative to the largest output against float64, beyond the rounding of the
    # exact result to the output dtype (half an ulp: 2^-11 for fp16, 2^-8 for bf16, which alone is
    # more than 2e-3 and is what cuBLAS's bf16 outputs carry as well)
    tol = 2e-3
    print(f"device {device_name} ({arch}, {num_sms} SMs), target {target}, timer "
          f"{args.timer if on_gpu else 'cpu'}, triton {'yes' if triton_gemm.matmul is not None else 'no'}",
          flush=True)

    if on_gpu:
        jobs = []
        for dtype in dtypes:
            for (m, n, k) in shapes:
                for bm, bn, bk, st, thr, pc, staged in ([] if args.weak else user_configs(m)):
                    jobs.append((lambda m=m, n=n, k=k, bm=bm, bn=bn, bk=bk, st=st, thr=thr, dtype=dtype, sg=staged:
                                 user_kernel(m, n, k, dtype, bm, bn, bk, st, thr, sg),
                                 pc if arch == "sm_90" else {}, target))
                for cfg in shape_candidates(m, n, k, dtype, arch, num_sms, smem, only):
                    jobs += ops_jobs(m, n, k, dtype, cfg, arch, num_sms, target)
        precompile(jobs, args.workers)

    names = ["cuBLAS", "Triton", "user kernel", "ops.matmul", "ops best"]
    rows = ["| M×N×K | dtype | " + " | ".join(f"{x} TFLOP/s" for x in names) +
            " | user/cuBLAS | ops/cuBLAS | best/cuBLAS | Triton/cuBLAS | user config | ops.matmul config "
            "| best ops config |",
            "|" + "---|" * (2 + len(names) + 7)]
    ratios = {"user kernel": [], "ops.matmul": [], "ops best": [], "Triton": []}
    candidate_rows = ["", "Every candidate configuration (ops best = the fastest of these):", "",
                      "| round | M×N×K | dtype | config | TFLOP/s | ratio to cuBLAS |", "|---|---|---|---|---|---|"]
    t_start = time.perf_counter()
    runs = [(r, dtype, shape) for r in range(1, max(1, args.rounds) + 1) for dtype in dtypes for shape in shapes]
    for rnd, dtype, (m, n, k) in runs:
        per_config = []
        res = run_shape(m, n, k, dtype, device, timer, arch, num_sms, smem, target, tol if on_gpu else 2e-2,
                        ops_only=args.weak, per_config=per_config, only=only, rnd=rnd, passes=args.passes,
                        warmup_s=args.warmup)
        tf = {x: (tflops(m, n, k, res[x][0]) if x in res else None) for x in names}
        ref = tf["cuBLAS"]
        for cfg, ms in per_config:
            cell = "failed" if ms is None else f"{tflops(m, n, k, ms):.4g} | " + (
                f"{tflops(m, n, k, ms) / ref:.2f}" if ref else "-")
            candidate_rows.append(f"| {rnd} | {m}×{n}×{k} | {dtype} | {cfg.short()} | {cell} |")
        if rnd < max(1, args.rounds):
            continue  # (the summary table: the last round)

        def ratio(x, tf=tf, ref=ref):
            if tf[x] is None or not ref:
                return "-"
            ratios[x].append(tf[x] / ref)
            return f"{tf[x] / ref:.2f}"

        cells = [f"{tf[x]:.4g}" if tf[x] is not None else "-" for x in names]
        rs = [ratio(x) for x in ("user kernel", "ops.matmul", "ops best", "Triton")]
        labels = [res[x][1] if x in res else "-" for x in ("user kernel", "ops.matmul", "ops best")]
        rows.append(f"| {m}×{n}×{k} | {dtype} | " + " | ".join(cells + rs + labels) + " |")
        print(rows[-1], flush=True)
    summary = []
    for x, rs in ratios.items():
        if rs:
            gm = math.exp(sum(math.log(r) for r in rs) / len(rs))
            summary.append(f"{x} vs cuBLAS: geometric mean {gm:.2f}x, min {min(rs):.2f}x over {len(rs)} rows")
    wall = time.perf_counter() - t_start
    rows += ["", f"Timer: {args.timer if on_gpu else 'cpu (interpreter)'}; correctness: relative error vs float64 "
                 f"<= {tol if on_gpu else 2e-2} with NaN-poisoned outputs; wall time {wall:.0f} s", ""] + summary
    if args.weak or only:
        rows += candidate_rows
    if on_gpu and not args.no_compile_times and not args.quick and not args.weak:
        rows += ["", compile_times()]
    print("\n".join(rows))
    if on_gpu:
        print("saved", save("gemm-weak" if args.weak else "gemm", rows))
    else:
        print("(CPU quick run: not saved)")


def compile_times() -> str:
    """Cold compile (fresh cache folder, fresh process) and repeated compile in one process."""
    code = r"""
import os, sys, time
sys.path.insert(0, {root!r})
t0 = time.perf_counter()
import tilewright
from tilewright.kernels import matmul
t1 = time.perf_counter()
k = tilewright.compile(matmul(4096, 4096, 4096, 128, 256, 32, threads=256), target="cuda")
t2 = time.perf_counter()
reps = []
for _ in range(20):
    s = time.perf_counter()
    tilewright.compile(matmul(4096, 4096, 4096, 128, 256, 32, threads=256), target="cuda")
    reps.append(time.perf_counter() - s)
reps.sort()
print(f"{{t1 - t0:.3f}} {{t2 - t1:.3f}} {{reps[len(reps) // 2] * 1e3:.3f}}")
"""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, TILEWRIGHT_CACHE_DIR=d)
        out_cold = subprocess.check_output([sys.executable, "-c", code.format(root=root)], env=env, text=True).split()
        out_warm = subprocess.check_output([sys.executable, "-c", code.format(root=root)], env=env, text=True).split()
    return (f"Compile (GEMM 128x256x32, 256 threads): import {out_cold[0]} s; cold compile {out_cold[1]} s; "
            f"disk-cache hit in a fresh process {out_warm[1]} s; repeated compile in one process "
            f"{out_cold[2]} ms (median of 20)")


if __name__ == "__main__":
    main()
