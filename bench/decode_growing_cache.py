"""Host time of decoding with a growing KV cache, as a transformers ``DynamicCache`` grows it.

A decoding step of a model calls the attention once per layer with one query token against a KV
cache that is one token longer than at the last step (``torch.cat`` makes a new tensor each
step): every layer of a step has the same shapes, every step new ones.  So a library that keys
its launch plans by shape plans afresh once per step.  This times, per step, ``--layers`` calls of
``ops.attention`` (and of SDPA, the same loop) on a cache grown by one token per step, against
the same loop on a cache whose length does not change (every call a repeat), and prints what a
step costs on the host (wall time with one synchronize per step; the kernels are a few us each)
and, with ``--profile``, the top functions of the tilewright loop by own time.

``python bench/decode_growing_cache.py [--steps 64] [--layers 16] [--profile]`` (a GPU; on the CPU it
runs the tile interpreter: ``--batch 1 --heads 2 --kv-heads 1 --start 16 --steps 2 --layers 2``).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tilewright import ops  # noqa: E402


def _sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def step_loop(attn, q, k0, v0, steps: int, layers: int, grow: bool) -> float:
    """us per step (the mean over ``steps``): ``layers`` attention calls per step, K/V one token longer
    each step when ``grow``."""
    k, v = k0, v0
    extra_k, extra_v = k0[:, :, :1], v0[:, :, :1]
    _sync(q.device)
    t0 = time.perf_counter()
    for _ in range(steps):
        if grow:
            k, v = torch.cat([k, extra_k], 2), torch.cat([v, extra_v], 2)
        for _ in range(layers):
            attn(q, k, v)
        _sync(q.device)
    return (time.perf_counter() - t0) / steps * 1e6


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--start", type=int, default=2048)
    p.add_argument("--steps", type=int, default=64)
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--profile", action="store_true")
    a = p.parse_args(argv)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dt = torch.float16  # (host time does not depend on it; fp16 output rounding stays well inside the check)
    g = torch.Generator(device="cpu").manual_seed(0)
    q = torch.randn(a.batch, a.heads, 1, a.dim, generator=g).to(dev, dt)
    k0 = torch.randn(a.batch, a.kv_heads, a.start, a.dim, generator=g).to(dev, dt)
    v0 = torch.randn(a.batch, a.kv_heads, a.start, a.dim, generator=g).to(dev, dt)
    tw = ops.attention

    def sdpa(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)

    # correctness of the loop's calls at one grown length (against float64), then warm-up: every
    # kernel of the lengths timed compiled (the first pass over the same lengths)
    kk, vv = torch.cat([k0, k0[:, :, :3]], 2), torch.cat([v0, v0[:, :, :3]], 2)
    out = torch.full_like(q, float("nan"))
    out.copy_(tw(q, kk, vv))
    grp = a.heads // a.kv_heads
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.double(), kk.double().repeat_interleave(grp, 1), vv.double().repeat_interleave(grp, 1))
    err = float((out.double() - ref).abs().max() / ref.abs().max())
    assert err < 3e-3, f"ops.attention differs from float64 by {err:.2e}"
    rows = []
    for name, fn in (("ops.attention", tw), ("SDPA", sdpa)):
        step_loop(fn, q, k0, v0, a.steps, a.layers, True)  # warm-up (compiles) over the lengths timed
        fixed = min(step_loop(fn, q, k0, v0, a.steps, a.layers, False) for _ in range(3))
        grow = min(step_loop(fn, q, k0, v0, a.steps, a.layers, True) for _ in range(3))
        rows.append((name, fixed, grow))
    if a.profile:
        prof = cProfile.Profile()
        prof.enable()
        step_loop(tw, q, k0, v0, a.steps, a.layers, True)
        prof.disable()
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(18)
        print(s.getvalue())
    print(f"decode with a growing cache: batch {a.batch}, heads {a.heads}/{a.kv_heads}, dim {a.dim}, KV "
          f"{a.start}..{a.start + a.steps}, {a.layers} calls a step, fp16, {dev}; max rel err {err:.1e}\n")
    print("| attention | us a step, fixed length | us a step, growing cache | growing / fixed |")
    print("|---|---|---|---|")
    for name, fixed, grow in rows:
        print(f"| {name} | {fixed:.0f} | {grow:.0f} | {grow / fixed:.2f} |")
    print(f"\nops.attention / SDPA, growing cache: {rows[0][2] / rows[1][2]:.2f}x")


if __name__ == "__main__":
    main()
