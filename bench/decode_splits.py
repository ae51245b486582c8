"""Split-KV sweep for decoding: ``ops.attention`` with ``num_splits`` forced over a range, against
the automatic choice and SDPA, one query token against KV caches of 4k-64k tokens (grouped-query
heads, as ``bench/attention.py``'s decode table), in GB/s of K and V read and as a fraction of the
copy bandwidth measured in the same run.  It shows where the split heuristic
(``ops/attention_dispatch._splits``) leaves bandwidth unused.

    python bench/decode_splits.py            # on a GPU (about a minute on an H200)
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

B, H, HKV, D = 8, 32, 8, 128
LENS = [4096, 8192, 16384, 65536]
SPLITS = [1, 2, 4, 8, 12, 16, 24, 32, 48, 64]


def main() -> None:
    roof = copy_bandwidth("cuda", False)
    rows = [f"Decoding: batch {B}, {H} query heads, {HKV} KV heads, head dim {D}; GB/s of K and V read "
            f"(fraction of the copy bandwidth {roof:.0f} GB/s); auto = the heuristic's choice.", "",
            "| dtype | KV | SDPA | auto | " + " | ".join(f"s={s}" for s in SPLITS) + " | best s |",
            "|---|---|---|---|" + "---|" * (len(SPLITS) + 1)]
    for dtype in (torch.float16, torch.bfloat16):
        for L in LENS:
            g = torch.Generator(device="cuda").manual_seed(L)
            q = torch.randn(B, H, 1, D, device="cuda", dtype=dtype, generator=g)
            k, v = (torch.randn(B, HKV, L, D, device="cuda", dtype=dtype, generator=g) for _ in range(2))
            gb = 2 * B * HKV * L * D * k.element_size() / 1e9
            ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), enable_gqa=True)

            def rate(fn) -> str:
                out = fn()
                err = ((out.double() - ref).abs() / (1 + ref.abs())).max().item()
                if not err < 2e-2:
                    return f"WRONG {err:.2g}"
                r = gb / bench_ms(fn) * 1e3
                return f"{r:.0f} ({r / roof:.0%})"

            cells = [rate(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)),
                     rate(lambda: ops.attention(q, k, v))]
            per = [rate(lambda s=s: ops.attention(q, k, v, num_splits=s)) for s in SPLITS]
            vals = [float(c.split()[0]) if not c.startswith("WRONG") else 0.0 for c in per]
            best = SPLITS[max(range(len(SPLITS)), key=vals.__getitem__)]
            rows.append(f"| {str(dtype)[6:]} | {L} | " + " | ".join(cells + per) + f" | {best} |")
            print(rows[-1], flush=True)
    print("\n".join(rows))
    print("saved", save("decode-splits", rows))


if __name__ == "__main__":
    main()
