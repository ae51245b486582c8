"""Decoding attention against the memory roof: ``ops.attention`` with one query token against KV
caches of 4k-64k tokens (grouped-query heads, as ``bench/attention.py``'s decode table), in GB/s
of K and V read and as a fraction of the copy bandwidth measured in the same run, for

- the old path (``TILEWRIGHT_DECODE_KERNEL=old``: the general attention kernel plus a combine launch) and
  the new flash-decoding kernel (``ops/decode_kernels.py``, the merge fused), each with the split
  heuristic's choice, against SDPA;
- the new kernel with ``num_splits`` forced over a range (is the heuristic's choice the best?);
- the new kernel's configurations (``TILEWRIGHT_DECODE_CONFIG`` = block_N,stages,threads) with the
  heuristic's splits (which one should be the default?).

Table 1 times each call as ``bench_ms`` does (triton's do_bench: the L2 flushed by a 256 MB write
before every call, so a call also pays for writing back the flush's dirty lines: a cost of roughly
the same microseconds for every kernel, large against 30-40 us calls at KV 4k).  Table 2 is GPU
time alone: 20 calls captured in a CUDA graph, alternating between two KV caches so that none is
read from L2, replayed; no host time, no flush.

    python bench/decode_splits.py            # on a GPU (a few minutes on an H200)
"""

from __future__ import annotations

import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from attention import copy_bandwidth  # noqa: E402
from common import bench_ms, save  # noqa: E402

from tilewright import ops  # noqa: E402
from tilewright.ops import attention_dispatch, decode_kernels  # noqa: E402

B, H, HKV, D = 8, 32, 8, 128
LENS = [4096, 8192, 16384, 65536]
SPLITS = [1, 2, 4, 8, 16, 32]
CONFIGS = ["64,3,128", "64,2,128", "32,4,128", "128,2,128", "64,3,64", "64,3,32", "32,6,32"]


def use(kernel: str, config: str | None = None) -> None:
    """Select the decode path (and the new kernel's configuration) for the calls that follow."""
    decode_kernels.KERNEL = kernel
    if config is None:
        os.environ.pop("TILEWRIGHT_DECODE_CONFIG", None)
    else:
        os.environ["TILEWRIGHT_DECODE_CONFIG"] = config
    attention_dispatch.forget_plans()  # plans remember their configuration


def graph_ms(calls) -> float:
    """GPU ms per call of ``calls`` (alternated), 20 calls captured in a CUDA graph and replayed."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for fn in calls:
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(20):
            calls[i % len(calls)]()
    g.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        g.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 100


def main() -> None:
    roof = copy_bandwidth("cuda", False)
    head = (f"batch {B}, {H} query heads, {HKV} KV heads, head dim {D}; GB/s of K and V read (fraction of the "
            f"copy bandwidth {roof:.0f} GB/s)")
    t1 = [f"Decoding, do_bench per call (L2 flushed before each call): {head}; old/new = the old path / the new "
          "kernel with the heuristic's splits; new s=N: splits forced; the configurations (block_N,stages,threads) "
          "with the heuristic's splits.", "",
          "| dtype | KV | SDPA | old | new | " + " | ".join(f"new s={s}" for s in SPLITS) + " | "
          + " | ".join(CONFIGS) + " | best config |",
          "|---|---|---|---|---|" + "---|" * (len(SPLITS) + len(CONFIGS) + 1)]
    t2 = [f"Decoding, GPU time in a CUDA graph (two KV caches alternated, no flush, no host time): {head}.", "",
          "| dtype | KV | SDPA | old | new | new, best config of table 1 |", "|---|---|---|---|---|---|"]
    for dtype in (torch.float16, torch.bfloat16):
        for L in LENS:
            g = torch.Generator(device="cuda").manual_seed(L)
            q = torch.randn(B, H, 1, D, device="cuda", dtype=dtype, generator=g)
            kvs = [tuple(torch.randn(B, HKV, L, D, device="cuda", dtype=dtype, generator=g) for _ in range(2))
                   for _ in range(2)]
            k, v = kvs[0]
            gb = 2 * B * HKV * L * D * k.element_size() / 1e9
            ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), enable_gqa=True)

            def rate(fn) -> str:
                out = fn()
                err = ((out.double() - ref).abs() / (1 + ref.abs())).max().item()
                if not err < 2e-2:
                    return f"WRONG {err:.2g}"
                r = gb / bench_ms(fn) * 1e3
                return f"{r:.0f} ({r / roof:.0%})"

            def sdpa(kk=k, vv=v):
                return F.scaled_dot_product_attention(q, kk, vv, enable_gqa=True)

            def ours(kk=k, vv=v, s=None):
                return ops.attention(q, kk, vv, num_splits=s)

            cells = [rate(sdpa)]
            use("old")
            cells.append(rate(ours))
            use("new")
            cells.append(rate(ours))
            cells += [rate(lambda s=s: ours(s=s)) for s in SPLITS]
            per = []
            for c in CONFIGS:
                use("new", c)
                per.append(rate(ours))
            vals = [float(c.split()[0]) if not c.startswith("WRONG") else 0.0 for c in per]
            best = CONFIGS[max(range(len(CONFIGS)), key=vals.__getitem__)]
            t1.append(f"| {str(dtype)[6:]} | {L} | " + " | ".join(cells + per) + f" | {best} |")
            print(t1[-1], flush=True)

            def graph_rate(fn) -> str:
                r = gb / graph_ms([lambda kv=kv: fn(*kv) for kv in kvs]) * 1e3
                return f"{r:.0f} ({r / roof:.0%})"

            row = [graph_rate(sdpa)]
            for kernel, config in (("old", None), ("new", None), ("new", best)):
                use(kernel, config)
                row.append(graph_rate(ours))
            use("new")
            t2.append(f"| {str(dtype)[6:]} | {L} | " + " | ".join(row) + " |")
            print(t2[-1], flush=True)
    rows = t1 + [""] + t2
    print("\n".join(rows))
    print("saved", save("decode-splits", rows))


if __name__ == "__main__":
    main()
