"""Decoding attention against the memory roof: ``ops.attention`` with one query token against KV
caches of 4k-64k tokens (grouped-query heads, as ``bench/attention.py``'s decode table), in GB/s
of K and V read and as a fraction of the copy bandwidth measured in the same run, for

- the old path (``TILEWRIGHT_DECODE_KERNEL=old``: the general attention kernel plus a combine launch) and
  the new flash-decoding kernel (``ops/decode_kernels.py``, the merge fused), each with the split
  heuristic's choice, against SDPA;
- table 1 (do_bench): the GQA candidate "cmerge,fill" at 4 stages (2 splits, clusters of 2; the forced split
  counts and configurations of session 8's runs, 1-25% behind the default, are left out);
- table 2 (GPU time): the candidate variants against the fixed cost at KV 4k (``TILEWRIGHT_DECODE_VARIANT``,
  ``ops/decode_kernels.VARIANTS``: "flatmerge" = the merge's loads all in flight together, "cmerge" = the
  merge spread over a thread-block cluster of the group's splits, "fill" = one block a SM), 2 splits at 4
  stages with and without the cluster;
- table 3, GPU time: MQA (32 query heads on one KV head), where the plain kernel's 16-row blocks ("none")
  read each KV head twice unless "cover" makes one 32-row block of the group, and the merging block reads
  every split's partial (many splits make a long merge): cmerge spreads it over clusters (the MQA default
  since the 22:32 run of session 9: cover,cmerge).

Table 1 times each call as ``bench_ms`` does (triton's do_bench: the L2 flushed by a 256 MB write
before every call, so a call also pays for writing back the flush's dirty lines: a cost of roughly
the same microseconds for every kernel, large against 30-40 us calls at KV 4k).  Table 2 is GPU
time alone: 20 calls captured in a CUDA graph, alternating between two KV caches so that none is
read from L2, replayed; no host time, no flush.

    python bench/decode_splits.py            # on a GPU (about 2 minutes on an H200)
    python bench/decode_splits.py --s10      # session 10's candidates alone: GPU-time tables only (~90 s)

    python bench/decode_splits.py --s11      # session 11's KV-4k candidates, interleaved rounds (~100 s)
    python bench/decode_splits.py --s12      # session 12's graph-level candidates (gcount, pdl), as --s11
    python bench/decode_splits.py --s13      # session 13's PDL candidates (pdlpre, pdllate), KV 4k/8k/64k, as --s11
    python bench/decode_splits.py --s14      # session 14's L2 prefetch before the wait (kvpre) and occ2, as --s13
    python bench/decode_splits.py --s15      # session 15's ring shapes / lazysum on the default, MQA merges, as --s14
    python bench/decode_splits.py --s15b     # its second round: lazysum (GQA again; MQA short and long caches)

``--s10`` (or DECODE_SPLITS=s10) times, in a CUDA graph as table 2, the GQA candidates (table S10-GQA) and the MQA
candidates (table S10-MQA) of ``S10_GQA`` / ``S10_MQA`` against SDPA and the default, skipping tables 1-3.

``--s11`` (or DECODE_SPLITS=s11) times the GQA candidates of ``S11_GQA`` (split count, stages, key-block size:
what each SM keeps in flight against the fixed cost at KV 4k) in both dtypes: every candidate is checked against
float64 and captured in a CUDA graph first, then all graphs are replayed in ``DECODE_S11_ROUNDS`` interleaved
rounds (every dtype, length and candidate once a round, so clock or thermal drift over the run, and the order of
the dtypes, fall on every column alike); a cell is the median over the rounds and the spread (min-max, % of the
copy bandwidth).  ``DECODE_S11_CANDS`` (comma-separated indexes into ``S11_GQA``), ``DECODE_S11_LENS`` and
``DECODE_S11_DTYPES`` narrow it; ``DECODE_S11_KIND=mqa`` times ``S11_MQA`` (one KV head, KV 16k and 64k) instead.
``--s12`` (or DECODE_SPLITS=s12) does the same for ``S12_GQA`` / ``S12_MQA`` with ``DECODE_S12_*`` variables, and
``--s13`` for ``S13_GQA`` / ``S13_MQA`` with ``DECODE_S13_*`` (GQA lengths 4k, 8k and 64k by default; 8 rounds, every
other one in reverse order, ``DECODE_S13_ORDER=forward`` for all in one order, and a second table of the medians of the
forward and of the reverse rounds apart: the place of a graph in the round, e.g. bf16 4k first in every forward round).
``--s14`` does the same for ``S14_GQA`` / ``S14_MQA`` with ``DECODE_S14_*`` (7 rounds, alternating), ``--s15`` for
``S15_GQA`` / ``S15_MQA`` with ``DECODE_S15_*`` (MQA: KV 16k alone), ``--s15b`` for ``S15B_GQA`` / ``S15B_MQA`` with
``DECODE_S15B_*`` (MQA: 16k and 64k).
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
# table 1 (do_bench, the L2 flushed): SDPA, old, new and the GQA candidate only.  (Split counts 1-32 forced and the
# configurations 64,3 / 32,4 / 128,2 / one- or two-warp blocks were 1-25% behind the default in every run up to
# 18:57 of session 8: left out.)
T1_VARIANTS = [("cmerge,fill", "64,4,128")]  # (variant, config): at batch 8 x 8 kv heads, 2 splits, clusters of 2
# table 2 (GPU time in a graph): the 18:57 run had wave, onepass, cpasync, ws and their combinations 1-4 points
# behind "new" at every length (left out); flatmerge (2 dependent load rounds in the merge instead of 6-9) is not
# measured yet; cmerge (session 9) spreads the merge over a cluster of the group's splits (4 splits: one cluster of
# 4, each block merging 4 of the 16 rows, no counter)
VARIANTS = ["flatmerge"]
# (variant, num_splits, config): 8 = one cluster of 8 (512 blocks: more than a wave); 6 = 3 clusters of 2; 2 with
# 4 stages = 128 blocks, one a SM with 3 tiles in flight, a cluster of 2 merging 2 rows of 2 partials each
# (the 22:32 run: cmerge at 4, 6 and 8 splits lost 1-15 points at every length; 2 splits at 4 stages won 2-3 at 4k
# only: is that the cluster's merge or one block a SM at 4 stages? fill alone gives the same 2 splits, no cluster)
FORCED = [("cmerge", 2, "64,4,128"), ("fill", None, "64,4,128"), ("none", 2, "64,4,128")]
# table 3 (MQA): (variant, num_splits, config).  The default (two 16-row slices a kv head, 16 groups, 16 splits)
# reads K/V twice; cover (one 32-row block, 8 groups, 33 splits) reads it once but its merging block reads
# 33 x 32 rows x 128 x 4 bytes (540 KB) from L2.  cmerge spreads that over clusters of 8 splits (each block merges
# 4 of the 32 rows of 8 partials, then the last cluster per row slice merges splits / 8 of those); fill takes one
# block a SM (16 splits with cover: two clusters; 8 without: one cluster, no counter); 4 stages keep 3 tiles a
# block in flight when a SM holds one block.
# (the 22:32 run: cover,cmerge 44% / 62% at 16k / 64k against the plain kernel's 40% / 58%: the MQA default since;
# the fill variants, one block a SM, 21-46%: left out)
MQA = [("none", None, None), (None, None, None), ("cover", None, None), ("cover,cmerge", None, "64,3,128"),
       ("cover,flatmerge", None, None), ("cover,cmerge", 16, None)]


# session 10 (--s10): (variant, num_splits, config) columns.  "tmerge": the merge as a tree through global memory,
# no cluster (sets of up to 8 splits); "w8": 8 warps a block.  The GQA reference "cmerge s=2 64,4,128" is the 22:32
# run's 83% at KV 4k (one block a SM at 4 stages, a cluster of 2).  The 02:07 run (bf16): tmerge 82/93/100/105% at
# 4k/8k/16k/64k against the default's 81/92/96/96% (the GQA default since); w8, tmerge,w8 70-89%; cmerge s=2
# 83/93/98/103%.
S10_GQA = [("tmerge", None, None), ("w8", None, None), ("tmerge,w8", None, None), ("cmerge", 2, "64,4,128")]
S10_GQA_LENS = [4096, 8192, 16384, 65536]
# MQA (32 query heads on 1 kv head): the default is cover,cmerge (clusters of 8); cover,tmerge is the same split
# count and merge shape without the cluster launch; 64,3: 3 stages (2 blocks a SM by shared memory, 2 tiles in
# flight each)
# (the 22:32 run: cover alone 34% / 65% at 16k / 64k, its one-block merge of 33 partials ~30 us: left out)
# "wave": the most splits a single wave holds (3 blocks a SM: 49 -> 48 splits, 6 sets of 8, 384 blocks).
# The 02:07 run (bf16, KV 16k / 64k): cover,cmerge 44 / 62%, cover,tmerge 41 / 70% (the MQA default from 32k keys
# since), at 3 stages 41 / 68%, with w8 39 / 63%, with wave 35 / 64%; SDPA 54 / 74%.
S10_MQA = [("cover,tmerge", None, None), ("cover,tmerge", None, "64,3"), ("cover,tmerge,w8", None, None),
           ("cover,tmerge,wave", None, None)]
# DECODE_S10_DTYPES=bfloat16 (or float16) halves the run (the compiles are most of it)
S10_DTYPES = [getattr(torch, n) for n in os.environ.get("DECODE_S10_DTYPES", "float16,bfloat16").split(",")]


# session 11 (--s11): (variant, num_splits, config).  At KV 4k the default (tmerge, 4 splits, 64 keys x 2 stages:
# 256 blocks, 2 a SM, 64-128 KB in flight a SM) spends ~8 us a call outside streaming; these trade the split count
# (blocks a SM, the merge's length) against the bytes each block keeps in flight:
#  6 splits: 384 blocks, 3 a SM on 128 SMs (one wave), a two-level merge (three sets of 2);
#  fill 64,4 / 64,5: 2 splits, one block a SM with 3 / 4 tiles (96 / 128 KB) ahead, one set of 2 to merge;
#  64,3: 4 splits, 2 a SM (shared memory) with 2 tiles ahead each;
#  fill 128,3: 2 splits, one block a SM, 128-key tiles (64 KB), 2 ahead: half the block barriers a byte;
#  s=1 64,5 / 128,3: no split at all (64 blocks, no partials, no merge), each SM streaming 2 MB alone;
#  cpasync: per-thread 16-byte cp.async instead of TMA bulk tensor loads.
# The H200 run of 05:21 (bench/results/2026-12-02-052*-decode-splits-s11-*, 5 interleaved rounds, KV 4k / 8k / 64k,
# bf16; fp16 within 0.5 point): the default 84.3 / 95.1 / 108.1% (SDPA 86.4 / 95.9 / 108.3%) beat every candidate at
# every length in both dtypes: s=6 79 / 90 / 107, fill 64,4 82.6 / 92.1 / 102.4, fill 64,5 81.5 / 91.3 / 101.7, 64,3
# 82.4 / 92.9 / 106.2, fill 128,3 83.2 / 93.2 / 105.7, s=1 64,5 49 / 51 / 53, s=1 128,3 61 / 64 / 67, cpasync 82.8 /
# 94.5 / 107.7.  One 4-warp block a SM streams at most ~33 GB/s (s=1: 2.09 TB/s over 64 SMs; fill at 64k: 4.32 TB/s
# over 128), about 1 us of compute a 64-key tile, so a SM needs its 2 blocks; the defaults stay.  Left selectable.
S11_GQA = [("tmerge", 6, None), ("tmerge,fill", None, "64,4"), ("tmerge,fill", None, "64,5"),
           ("tmerge", None, "64,3"), ("tmerge,fill", None, "128,3"), ("none", 1, "64,5"), ("none", 1, "128,3"),
           ("tmerge,cpasync", None, None)]
# MQA (DECODE_S11_KIND=mqa; 32 query heads on 1 kv head, one 32-row "cover" block a group, 8 groups): the defaults
# (cover,cmerge below 32k keys, cover,tmerge from there) take 32 splits at 2 a SM and merge 32 partials of 32 rows;
# these take half the splits (one block a SM, 4 or 5 stages, two sets of 8; at 32 rows the 128-key ring is held to 2
# stages by shared memory) or a quarter (64 blocks, one set of 8).  The 05:22 run (KV 16k / 64k, both dtypes alike):
# the default 44.5 / 73.3% (SDPA 55.9 / 69.7%) against 41 / 63, 41 / 62, 40 / 60 and 29 / 35%: the defaults stay.
S11_MQA = [("cover,tmerge,fill", None, "64,4"), ("cover,tmerge,fill", None, "64,5"), ("cover,tmerge", 16, None),
           ("cover,tmerge", 8, "64,5")]

# session 12 (--s12): (variant, num_splits, config).  Where KV 4k's ~8 us of fixed cost a call may go that no kernel
# change of session 11 touched: the graph itself.  A split call captured in a CUDA graph took zeroed merge counters
# of its own (torch.zeros: a fill kernel before every decode kernel in the graph, a launch and a drain of ~1-2 us
# of ~38 us); "gcount" takes them from a pool made before the capture (one slice a capture and stream: no fill
# kernel).  "pdl" launches the kernel with programmatic stream serialization, griddepcontrol.wait first (nothing
# read or written before the previous kernel has finished) and launch_dependents right after, so that the next
# decode call's blocks are placed while this one streams and start the moment it ends (its launch and ramp overlap
# the tail: the last tiles and the merges); "pdlwait" without the trigger (the next kernel's blocks are placed as
# this one's exit).  "tmerge,pdl" without gcount: the fill kernels between the calls hold the programmatic launch
# back (a kernel launched without the attribute), so it shows how much of pdl needs gcount.
# The H200 run of 07:48 (7 interleaved rounds, bf16 / fp16; KV 4k / 8k / 16k / 64k): the default 77.8 / 82.7, 91.8 /
# 92.9, 99.6 / 99.7, 104.9 / 104.5% (SDPA 80.4 / 84.2, 93.0 / 94.5, 99.7 / 99.6, 105.5 / 105.4); gcount 80.2 / 85.2,
# 93.9 / 94.5, 100.5, 105.1 / 103.9; gcount,pdl 65.5 / 70.9, 76.4 / 75.6, 78.7 / 78.3, 81.2 / 84.3; gcount,pdlwait
# 80.9 / 85.6, 94.7 / 94.6, 100.7 / 100.7, 105.2 / 104.6 (the GQA default since); pdl 79.8 / 81.9, 92.6 / 92.5, 99.5 /
# 99.4, 104.9 / 102.5.  MQA (16k / 64k, both dtypes within 0.1): default 44.4 / 73.0, cmerge,cover,gcount 45.8 / 63.2,
# with pdl 46.7 / 64.1 (the default below 32k keys since), cover,tmerge,gcount 42.5 / 73.8 (the default from 32k
# since), with pdl 35.2 / 59.0; SDPA 56-60 / 70-71.
S12_GQA = [("tmerge,gcount", None, None), ("tmerge,gcount,pdl", None, None), ("tmerge,gcount,pdlwait", None, None),
           ("tmerge,pdl", None, None)]
# session 13 (--s13): what of the programmatic-launch overlap the default (tmerge,gcount,pdlwait) leaves at KV 4k.
# "pdlpre": the block's set-up that reads nothing of the previous kernel (the TMA ring's mbarrier init, fence and
# barrier; a prefetch of the K/V tensor-map descriptors) ahead of griddepcontrol.wait (passes/pdl_prologue); "pdllate":
# launch_dependents after the block's last key block, so the next call's launch and placement overlap this one's
# merges (pdl's trigger at the top lost 15-24 points at every length in the 07:48 run); both together.  KV 4k and 8k
# for the bar, 64k for no loss (DECODE_S13_LENS).  "lazysum": the softmax denominator summed across the warps once
# after the loop instead of every key block (6 block barriers a key block instead of 9), alone and with both.
# The H200 run of 08:41 (8 rounds in alternating order, bf16 / fp16; KV 4k / 8k / 64k): the default 87.0 / 87.6, 97.4 /
# 96.5, 108.7 / 108.4% (SDPA 86.4 / 86.4, 97.1 / 96.1, 108.2 / 108.7); pdlpre 87.3 / 87.4, 97.2 / 96.6, 108.7 / 108.4;
# pdllate 84.7 / 84.0, 94.0 / 92.6, 108.2 / 107.4; pdllate,pdlpre 84.7 / 84.2, 94.1 / 92.6, 108.2 / 107.2; lazysum
# 87.6 / 87.2, 97.4 / 96.8, 108.7 / 108.1; lazysum,pdllate,pdlpre 85.1 / 84.3, 95.0 / 93.2, 108.2 / 104.4.  Forward and
# reverse rounds within 0.3 points at 4k (0.7 for fp16 pdllate): no position effect.  Defaults unchanged.  MQA not run.
S13_GQA = [("tmerge,gcount,pdlpre", None, None), ("tmerge,gcount,pdllate", None, None),
           ("tmerge,gcount,pdllate,pdlpre", None, None), ("tmerge,gcount,lazysum,pdlwait", None, None),
           ("tmerge,gcount,lazysum,pdllate,pdlpre", None, None)]
# MQA (DECODE_S13_KIND=mqa): the defaults with the prologue ahead of the wait, and the short-cache one with lazysum
S13_MQA = [("cmerge,cover,gcount,pdl,pdlpre", None, None), ("cover,gcount,pdlpre,tmerge", None, None),
           ("cmerge,cover,gcount,lazysum,pdl", None, None)]
# session 14 (--s14): the HBM idle time between two calls at KV 4k (the last key block's compute, the merge, the grid's
# end, the wait's release and the next call's first-block latency: every read waits at griddepcontrol.wait).  "kvpre"
# ("kvpre4"): the first 2 (4) key blocks of each split's range prefetched into L2 before the wait (a hint, no read in
# the memory model), so the next call's first bytes stream while this one ends; with pdlwait the next grid is placed
# when this one's last block exits, with pdllate when every block has read its last key block (the merges overlap).
# "occ2": 2 blocks a SM (12 KiB more shared memory), so that the next grid's blocks only take the slots this grid
# leaves (pdl and pdllate alone lost 2-24 points; a third block on a SM is one guess why).  Indexes 0-3 were the first
# command of the 11:29 run, 4-7 the second.  The H200 run of 11:29 (7 rounds alternating, bf16 / fp16 at KV 4k; the
# default then, gcount,pdlwait, 85.0 / 84.9 and 85.1 / 85.8% in the two commands, SDPA 84.1 / 83.1-84.1):
# occ2,pdllate 87.9 / 87.8% (8k 96.1 / 96.0 against 94.9 / 94.9; the GQA default since), kvpre,occ2,pdl 86.9 / 87.3,
# kvpre,occ2,pdllate 86.2 / 85.2, kvpre4,occ2,pdllate 85.4 / 85.5, kvpre,pdlpre 84.1 / 84.3, kvpre 83.6 / 83.0,
# kvpre4 82.1 / 81.1, kvpre,pdllate 81.9 / 77.3: the prefetch lost wherever it was added; occ2 made the late trigger
# pay.
# Indexes 8-10 (the final run): the old default against the new one at 4k and 64k (64k was not measured for occ2), and
# occ2 with the early trigger or the moved prologue, now that the next grid's blocks are placed while this one ends.
# The final run (12:04, bf16 / fp16, KV 4k / 64k): the new default 89.3 / 89.5, 108.7 / 108.4% against the old one's
# 87.4 / 87.2, 108.6 / 108.2 (SDPA 86.2 / 86.7, 108.6 / 108.3); occ2,pdl 88.1 / 88.0, 107.8 / 107.5; occ2,pdllate,pdlpre
# 88.9 / 88.5, 108.5 / 108.3.  MQA at 16k: the default 47.1% (SDPA 55.9 / 56.5) against occ2,pdl 32.4% and occ2,pdllate
# 33.3 / 33.4%: occ2 does not suit the cluster merge.
S14_GQA = [("tmerge,gcount,pdlwait,kvpre", None, None), ("tmerge,gcount,pdlwait,kvpre4", None, None),
           ("tmerge,gcount,kvpre,pdllate", None, None), ("tmerge,gcount,kvpre,occ2,pdllate", None, None),
           ("tmerge,gcount,kvpre,occ2,pdl", None, None), ("tmerge,gcount,occ2,pdllate", None, None),
           ("tmerge,gcount,kvpre4,occ2,pdllate", None, None), ("tmerge,gcount,kvpre,pdlpre", None, None),
           ("tmerge,gcount,pdlwait", None, None), ("tmerge,gcount,occ2,pdl", None, None),
           ("tmerge,gcount,occ2,pdllate,pdlpre", None, None)]
# MQA (DECODE_S14_KIND=mqa; KV 16k, 32 heads on 1 kv head): the short-cache default (cmerge,cover,gcount,pdl: an early
# trigger with 3 blocks a SM, 46.7% in session 12, SDPA 56%) with occ2, and with the late trigger instead
S14_MQA = [("cmerge,cover,gcount,occ2,pdl", None, None), ("cmerge,cover,gcount,occ2,pdllate", None, None)]
# session 15 (--s15): the KV-4k tail of the default (gcount,occ2,pdllate,tmerge at 64 keys x 2 stages, 89.3 / 89.5% at
# 12:04) and the MQA gap to SDPA (47% against 56% at 16k).  GQA: 0 = 2 blocks a SM by a 3-stage ring instead of the
# occ2 pad (2 tiles ahead a block, not 1); 1 = 32-key tiles at 4 stages (3 tiles of 16 KB ahead, and the last tile's
# compute before the merge half as long); 2 = lazysum on the default (3 fewer block barriers a key block); 3 = 1 and 2.
S15_GQA = [("gcount,pdllate,tmerge", None, "64,3"), ("gcount,occ2,pdllate,tmerge", None, "32,4"),
           ("gcount,lazysum,occ2,pdllate,tmerge", None, None), ("gcount,lazysum,occ2,pdllate,tmerge", None, "32,4")]
# MQA (DECODE_S15_KIND=mqa; KV 16k, where the gap to SDPA is): the GQA default's recipe on the tree merge (occ2
# lost only beside the cluster merge at 12:04), the late trigger without occ2 on the cluster merge, lazysum on the
# short-cache default (never measured for MQA: its 32-row block has twice GQA's softmax a key block), and 32-key tiles
# on it at 3 stages (half the last tile's compute; 3 or more blocks a SM as the default, where 32,4 would make 2).
S15_MQA = [("cover,gcount,occ2,pdllate,tmerge", None, None), ("cmerge,cover,gcount,pdllate", None, None),
           ("cmerge,cover,gcount,lazysum,pdl", None, None), ("cmerge,cover,gcount,pdl", None, "32,3")]
# Round 1 (15:45, bf16 / fp16): GQA 4k the default 87.3 / 87.1%, lazysum on it 87.7 / 87.2, 64,3 83.9 / 83.1, 32,4 82.9
# / 79.8 (8-20 points lost at 8k-64k), both 84.1 / 83.1; MQA 16k the default 46.5 / 46.5%, cmerge,cover,gcount,
# lazysum,pdl 48.6 / 48.6 (the MQA default since), tree,occ2,pdllate 44.1, cluster,pdllate 46.6, 32,3 36.9; SDPA 60 /
# 56. Round 2 (--s15b; DECODE_S15B_*): lazysum on the GQA default again (under 0.5 points in fp16 in round 1); MQA at
# 16k and 64k: the old short-cache default (against the new one, "new" at 16k), lazysum on the long-cache default (the
# tree merge: "new" at 64k), the new short-cache default with the late trigger, and both lazysum ones on 2 warps
# (64,2,64: each warp 16 whole query rows, so the row max and sum stay within a warp; 15 block barriers in the sm_90a
# kernel against 23 at 4 warps, 238 registers, 3 blocks a SM by shared memory).
# Round 2 (16:10, bf16 / fp16): GQA 4k lazysum 89.9 / 90.0% against 89.4 / 90.0% (not taken: no 0.5 in fp16); MQA 16k
# the new default 49.0 / 49.1% against the old 46.9 / 46.8%, on 2 warps 51.1 / 51.2% (the short MQA default at d 128
# since), the tree with lazysum 42.3 / 42.6%, with pdllate 48.9 / 49.2%; MQA 64k the tree with lazysum 78.3 / 78.2%
# against the long default's 74.6 / 74.3% (the long MQA default since), on 2 warps 77.3 / 77.1%; SDPA 56% / 70%.
S15B_GQA = [("gcount,lazysum,occ2,pdllate,tmerge", None, None)]
S15B_MQA = [("cmerge,cover,gcount,pdl", None, None), ("cover,gcount,lazysum,tmerge", None, None),
            ("cmerge,cover,gcount,lazysum,pdllate", None, None), ("cmerge,cover,gcount,lazysum,pdl", None, "64,2,64"),
            ("cover,gcount,lazysum,tmerge", None, "64,2,64")]
# MQA (DECODE_S12_KIND=mqa): the defaults (cover,cmerge below 32k keys, cover,tmerge from there) with gcount, and
# with pdl (the cluster launch of cmerge takes the attribute as well)
S12_MQA = [("cmerge,cover,gcount", None, None), ("cmerge,cover,gcount,pdl", None, None),
           ("cover,tmerge,gcount", None, None), ("cover,tmerge,gcount,pdl", None, None)]


def label(v, n, c) -> str:
    return "new" + (f" {v}" if v else "") + (f" s={n}" if n else "") + (f" {c}" if c else "")


def s10_table(roof: float, mqa: bool) -> list:
    """Session 10: GPU time in a CUDA graph (two caches alternated), the default and the candidates of ``S10_MQA``
    (MQA: 1 KV head) or ``S10_GQA`` (``HKV`` KV heads); every candidate checked against float64 first."""
    hkv, cands, lens = (1, S10_MQA, (16384, 65536)) if mqa else (HKV, S10_GQA, S10_GQA_LENS)
    rows = [f"S10-{'MQA' if mqa else 'GQA'}, GPU time in a CUDA graph (two KV caches alternated): batch {B}, {H} query "
            f"heads, {hkv} KV heads, head dim {D}; GB/s of K and V read once (fraction of the copy bandwidth "
            f"{roof:.0f} GB/s); s=N: num_splits forced.", "",
            "| dtype | KV | SDPA | new | " + " | ".join(label(*c) for c in cands) + " |",
            "|---|---|---|---|" + "---|" * len(cands)]
    for dtype in S10_DTYPES:
        for L in lens:
            g = torch.Generator(device="cuda").manual_seed(L + hkv)
            q = torch.randn(B, H, 1, D, device="cuda", dtype=dtype, generator=g)
            kvs = [tuple(torch.randn(B, hkv, L, D, device="cuda", dtype=dtype, generator=g) for _ in range(2))
                   for _ in range(2)]
            gb = 2 * B * hkv * L * D * q.element_size() / 1e9
            ref = F.scaled_dot_product_attention(q.double(), kvs[0][0].double(), kvs[0][1].double(), enable_gqa=True)

            def rate(fn) -> str:
                err = ((fn(*kvs[0]).double() - ref).abs() / (1 + ref.abs())).max().item()
                if not err < 2e-2:
                    return f"WRONG {err:.2g}"
                r = gb / graph_ms([lambda kv=kv: fn(*kv) for kv in kvs]) * 1e3
                return f"{r:.0f} ({r / roof:.0%})"

            row = [rate(lambda kk, vv: F.scaled_dot_product_attention(q, kk, vv, enable_gqa=True))]
            use("new")
            row.append(rate(lambda kk, vv: ops.attention(q, kk, vv)))
            for v, n, c in cands:
                use("new", c, v)
                row.append(guarded(lambda n=n: rate(lambda kk, vv: ops.attention(q, kk, vv, num_splits=n))))
            use("new")
            rows.append(f"| {str(dtype)[6:]} | {L} | " + " | ".join(row) + " |")
            print(rows[-1], flush=True)
    chosen = dict.fromkeys(v for v, n, c in cands if n is None)
    rows += ["", f"Split counts at KV {', '.join(map(str, lens))}: " + "; ".join(
        f"{v or 'new'}: {chosen_splits(v, hkv, lens)}" for v in [None] + list(chosen))]
    return rows


def s11_table(roof: float, tag: str = "S11") -> list:
    """Session 11 (``tag`` "S11"), 12 ("S12") or 13 ("S13"): the GQA candidates of ``S11_GQA`` (``S12_GQA``,
    ``S13_GQA``) against SDPA and the default, GPU time in CUDA graphs replayed in interleaved rounds (the module
    docstring); every candidate checked against float64 before it is timed.  ``DECODE_<tag>_KIND=mqa``: the MQA table
    (``S11_MQA`` / ``S12_MQA`` / ``S13_MQA``)."""
    import statistics

    env = f"DECODE_{tag}_"
    mqa = os.environ.get(env + "KIND") == "mqa"
    tables = {"S11": (S11_GQA, S11_MQA), "S12": (S12_GQA, S12_MQA), "S13": (S13_GQA, S13_MQA),
              "S14": (S14_GQA, S14_MQA), "S15": (S15_GQA, S15_MQA), "S15B": (S15B_GQA, S15B_MQA)}[tag]
    late = tag in ("S13", "S14", "S15", "S15B")  # (KV 4k/8k/64k, alternating rounds)
    hkv, table = (1, tables[1]) if mqa else (HKV, tables[0])
    pick = os.environ.get(env + "CANDS")
    cands = [table[int(i)] for i in pick.split(",")] if pick else table
    gqa_lens = "4096,8192,65536" if late else "4096,8192,16384,65536"
    mqa_lens = "16384" if tag == "S15" else "16384,65536"
    lens = [int(x) for x in os.environ.get(env + "LENS", mqa_lens if mqa else gqa_lens).split(",")]
    dtypes = [getattr(torch, n) for n in os.environ.get(env + "DTYPES", "bfloat16,float16").split(",")]
    rounds = int(os.environ.get(env + "ROUNDS", "8" if tag == "S13" else "7"))  # (S14: 7 rounds, alternating)
    # "alternate" (S13's default): odd rounds replay the graphs in reverse order, so that a graph's place in the round
    # (bf16 4k first in every forward round) is not part of its median; the position table compares the two halves
    alternate = os.environ.get(env + "ORDER", "alternate" if late else "forward") == "alternate"
    cols = ["SDPA", "new"] + [label(*c) for c in cands]
    graphs, cells, gbs = {}, {}, {}  # (dtype, L, column) -> CUDA graph / text instead of a rate; (dtype, L) -> GB
    inputs = []  # every graph's q and KV caches: a graph replays their addresses, so they live until the timing ends
    for dtype in dtypes:
        for L in lens:
            g = torch.Generator(device="cuda").manual_seed(L)
            q = torch.randn(B, H, 1, D, device="cuda", dtype=dtype, generator=g)
            kvs = [tuple(torch.randn(B, hkv, L, D, device="cuda", dtype=dtype, generator=g) for _ in range(2))
                   for _ in range(2)]
            gbs[dtype, L] = 2 * B * hkv * L * D * q.element_size() / 1e9
            inputs.append((q, kvs))
            ref = F.scaled_dot_product_attention(q.double(), kvs[0][0].double(), kvs[0][1].double(), enable_gqa=True)
            for col, (v, n, c) in zip(cols, [(None, None, None)] * 2 + cands):
                if col == "SDPA":
                    def fn(kk, vv, q=q):
                        return F.scaled_dot_product_attention(q, kk, vv, enable_gqa=True)
                else:
                    use("new", c, v)

                    def fn(kk, vv, q=q, n=n):
                        return ops.attention(q, kk, vv, num_splits=n)
                try:
                    err = ((fn(*kvs[0]).double() - ref).abs() / (1 + ref.abs())).max().item()
                    if err < 2e-2:
                        graphs[dtype, L, col] = captured([lambda kv=kv, fn=fn: fn(*kv) for kv in kvs])
                    else:
                        cells[dtype, L, col] = f"WRONG {err:.2g}"
                except Exception as e:  # noqa: BLE001 - reported in the table
                    cells[dtype, L, col] = f"ERROR {type(e).__name__}: {str(e)[:80]}".replace("|", "/").replace(
                        "\n", " ")
                use("new")
            del ref
            print(f"captured {str(dtype)[6:]} {L}", flush=True)
    times: dict = {key: [] for key in graphs}
    order = list(graphs.items())
    for i in range(rounds):
        for key, graph in (order[::-1] if alternate and i % 2 else order):
            times[key].append(replay_ms(graph))
    del inputs
    rows = [f"{tag}-{'MQA' if mqa else 'GQA'}, GPU time in a CUDA graph (two KV caches alternated), median of {rounds} "
            f"interleaved rounds (min-max): batch {B}, {H} query heads, {hkv} KV heads, head dim {D}; GB/s of K and V "
            f"read (% of the copy bandwidth {roof:.0f} GB/s); s=N: num_splits forced.", "",
            "| dtype | KV | " + " | ".join(cols) + " |", "|---|---|" + "---|" * len(cols)]
    for dtype in dtypes:
        for L in lens:
            row = []
            for col in cols:
                if (dtype, L, col) in cells:
                    row.append(cells[dtype, L, col])
                    continue
                rates = [gbs[dtype, L] / ms * 1e3 for ms in times[dtype, L, col]]
                r = statistics.median(rates)
                row.append(f"{r:.0f} ({r / roof:.1%}, {min(rates) / roof:.0%}-{max(rates) / roof:.0%})")
            rows.append(f"| {str(dtype)[6:]} | {L} | " + " | ".join(row) + " |")
    if alternate and rounds > 1:
        timed = [c for c in cols if all((d, n, c) in times for d in dtypes for n in lens)]
        rows += position_table(times, gbs, roof, dtypes, lens, timed)
    chosen = dict.fromkeys((v, c) for v, n, c in cands if n is None)
    rows += ["", f"Split counts at KV {', '.join(map(str, lens))}: " + "; ".join(
        f"{label(v, None, c)}: {chosen_splits(v, hkv, lens, c)}" for v, c in [(None, None)] + list(chosen))]
    return rows


def position_table(times, gbs, roof, dtypes, lens, cols) -> list:
    """% of the copy bandwidth of ``cols`` as medians over the forward rounds (even) and the reverse ones (odd)
    apart: a difference the two orders share with SDPA is the graph's place in the round, not the kernel."""
    import statistics

    def pct(dtype, L, col, half):
        ms = times[dtype, L, col][half::2]
        return f"{statistics.median(gbs[dtype, L] / m * 1e3 for m in ms) / roof:.1%}"

    rows = ["", "Position check (median of the forward rounds / of the reverse rounds):", "",
            "| dtype | KV | " + " | ".join(f"{c} fwd / rev" for c in cols) + " |", "|---|---|" + "---|" * len(cols)]
    for dtype in dtypes:
        for L in lens:
            rows.append(f"| {str(dtype)[6:]} | {L} | " + " | ".join(
                f"{pct(dtype, L, c, 0)} / {pct(dtype, L, c, 1)}" for c in cols) + " |")
    return rows


def captured(calls):
    """A CUDA graph of 20 calls of ``calls`` (alternated), each run once first (compiles, plans)."""
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
    return g


def replay_ms(g) -> float:
    """GPU ms per call of a graph of ``captured``: 5 replays (100 calls) after one unmeasured."""
    g.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        g.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 100


def use(kernel: str, config: str | None = None, variant: str | None = None) -> None:
    """Select the decode path (and the new kernel's configuration and variant) for the calls that follow."""
    decode_kernels.KERNEL = kernel
    for name, value in (("TILEWRIGHT_DECODE_CONFIG", config), ("TILEWRIGHT_DECODE_VARIANT", variant)):
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    attention_dispatch.forget_plans()  # plans remember their configuration


def chosen_splits(variant: str | None, hkv: int = HKV, lens=tuple(LENS), config: str | None = None) -> str:
    """The split counts ``variant`` (at ``config``) gives the benchmark's shape (``hkv`` KV heads) at each KV length
    in ``lens``, as the plans choose them."""
    use("new", config, variant)
    smem = attention_dispatch._shared_bytes(torch.empty(1, device="cuda"))
    got = []
    for L in lens:  # (the configuration by length: the default's MQA kind changes at MQA_LONG_FROM keys)
        cfg = decode_kernels.decode_config(D, smem, H // hkv, None, L)
        groups = B * hkv * -(-(H // hkv) // cfg[0])
        n = decode_kernels.decode_splits(groups, -(-L // cfg[1]), None, D, cfg, smem, attention_dispatch._NUM_SMS)
        got.append(f"{n} (cluster {decode_kernels.merge_cluster(n, cfg[4])})" if "cmerge" in cfg[4] else str(n))
    use("new")
    return ", ".join(got)


def guarded(cell) -> str:
    """``cell()``, or what a candidate raised (one failing candidate leaves the rest of the run standing)."""
    try:
        return cell()
    except Exception as e:  # noqa: BLE001 - reported in the table
        return f"ERROR {type(e).__name__}: {str(e)[:80]}".replace("|", "/").replace("\n", " ")


def graph_ms(calls) -> float:
    """GPU ms per call of ``calls`` (alternated), 20 calls captured in a CUDA graph and replayed."""
    return replay_ms(captured(calls))


def mqa_table(roof: float) -> list:
    """Table 3: MQA, batch 8, 32 query heads on 1 KV head, GPU time in a CUDA graph (two caches alternated)."""
    labels = ["new" + (f" {v}" if v else "") + (f" s={n}" if n else "") + (f" {c}" if c else "") for v, n, c in MQA]
    rows = [f"MQA decoding, GPU time in a CUDA graph: batch {B}, {H} query heads, 1 KV head, head dim {D}; GB/s of "
            f"K and V read once (fraction of the copy bandwidth {roof:.0f} GB/s); s=N: num_splits forced.", "",
            "| dtype | KV | SDPA | old | " + " | ".join(labels) + " |", "|---|---|---|---|" + "---|" * len(MQA)]
    for dtype in (torch.float16, torch.bfloat16):
        for L in (16384, 65536):
            g = torch.Generator(device="cuda").manual_seed(L + 1)
            q = torch.randn(B, H, 1, D, device="cuda", dtype=dtype, generator=g)
            kvs = [tuple(torch.randn(B, 1, L, D, device="cuda", dtype=dtype, generator=g) for _ in range(2))
                   for _ in range(2)]
            gb = 2 * B * L * D * q.element_size() / 1e9
            ref = F.scaled_dot_product_attention(q.double(), kvs[0][0].double(), kvs[0][1].double(), enable_gqa=True)

            def rate(fn) -> str:
                err = ((fn(*kvs[0]).double() - ref).abs() / (1 + ref.abs())).max().item()
                if not err < 2e-2:
                    return f"WRONG {err:.2g}"
                r = gb / graph_ms([lambda kv=kv: fn(*kv) for kv in kvs]) * 1e3
                return f"{r:.0f} ({r / roof:.0%})"

            row = [rate(lambda kk, vv: F.scaled_dot_product_attention(q, kk, vv, enable_gqa=True))]
            use("old")
            row.append(rate(lambda kk, vv: ops.attention(q, kk, vv)))
            for v, n, c in MQA:
                use("new", c, v)
                row.append(guarded(lambda n=n: rate(lambda kk, vv: ops.attention(q, kk, vv, num_splits=n))))
            use("new")
            rows.append(f"| {str(dtype)[6:]} | {L} | " + " | ".join(row) + " |")
            print(rows[-1], flush=True)
    chosen = dict.fromkeys(v for v, n, c in MQA if n is None)  # (None: the default, cover,cmerge)
    rows += ["", "Split counts (cluster of the merge) the variants chose at KV 16384, 65536: " + "; ".join(
        f"{v or 'new'}: {chosen_splits(v, 1, (16384, 65536))}" for v in chosen)]
    return rows


def main() -> None:
    roof = copy_bandwidth("cuda", False)
    for tag in ("S11", "S12", "S13", "S14", "S15", "S15B"):
        if f"--{tag.lower()}" in sys.argv or os.environ.get("DECODE_SPLITS") == tag.lower():
            rows = s11_table(roof, tag)
            print("\n".join(rows))
            # (the kind and the candidates in the name: two commands of one minute must not overwrite each other's
            # file)
            name = f"decode-splits-{tag.lower()}-" + os.environ.get(f"DECODE_{tag}_KIND", "gqa") + "".join(
                f"-{c}" for c in os.environ.get(f"DECODE_{tag}_CANDS", "").split(",") if c)
            print("saved", save(name, rows))
            return
    if "--s10" in sys.argv or os.environ.get("DECODE_SPLITS") == "s10":
        rows = s10_table(roof, False) + [""] + s10_table(roof, True)
        print("\n".join(rows))
        print("saved", save("decode-splits-s10", rows))
        return
    head = (f"batch {B}, {H} query heads, {HKV} KV heads, head dim {D}; GB/s of K and V read (fraction of the "
            f"copy bandwidth {roof:.0f} GB/s)")
    t1 = [f"Decoding, do_bench per call (L2 flushed before each call): {head}; old/new = the old path / the new "
          "kernel with the heuristic's splits.", "",
          "| dtype | KV | SDPA | old | new | " + " | ".join(f"new {v} {c}" for v, c in T1_VARIANTS) + " |",
          "|---|---|---|---|---|" + "---|" * len(T1_VARIANTS)]
    t2 = [f"Decoding, GPU time in a CUDA graph (two KV caches alternated, no flush, no host time): {head}.", "",
          "| dtype | KV | SDPA | old | new | " + " | ".join(f"new {v}" for v in VARIANTS) + " | "
          + " | ".join(f"new {v}" + (f" s={s}" if s else "") + (f" {c}" if c else "") for v, s, c in FORCED) + " |",
          "|---|---|---|---|---|" + "---|" * (len(VARIANTS) + len(FORCED))]
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
            for variant, config in T1_VARIANTS:
                use("new", config, variant)
                cells.append(guarded(lambda: rate(ours)))
            use("new")
            t1.append(f"| {str(dtype)[6:]} | {L} | " + " | ".join(cells) + " |")
            print(t1[-1], flush=True)

            def graph_rate(fn) -> str:
                r = gb / graph_ms([lambda kv=kv: fn(*kv) for kv in kvs]) * 1e3
                return f"{r:.0f} ({r / roof:.0%})"

            def checked_graph_rate(fn) -> str:  # (a candidate is timed only once it gives the right answer)
                out = fn()
                err = ((out.double() - ref).abs() / (1 + ref.abs())).max().item()
                return graph_rate(fn) if err < 2e-2 else f"WRONG {err:.2g}"

            row = [graph_rate(sdpa)]
            for kernel in ("old", "new"):
                use(kernel)
                row.append(graph_rate(ours))
            for variant in VARIANTS:
                use("new", None, variant)
                row.append(guarded(lambda: checked_graph_rate(ours)))
            for variant, n, config in FORCED:
                use("new", config, variant)
                row.append(guarded(lambda n=n: checked_graph_rate(lambda kk=k, vv=v: ours(kk, vv, n))))
            use("new")
            t2.append(f"| {str(dtype)[6:]} | {L} | " + " | ".join(row) + " |")
            print(t2[-1], flush=True)
    t2 += ["", "Split counts the heuristic / the variants chose (KV 4096 .. 65536): " + "; ".join(
        f"{v or 'new'}: {chosen_splits(v)}" for v in [None] + VARIANTS)]
    rows = t1 + [""] + t2 + [""] + mqa_table(roof)
    print("\n".join(rows))
    print("saved", save("decode-splits", rows))


if __name__ == "__main__":
    main()
