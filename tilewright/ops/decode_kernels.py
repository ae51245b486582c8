"""Flash-decoding for ``tilewright.ops.attention``: one query token per sequence against a long KV
(a padded cache or not), in tilewright's own language, built for memory bandwidth.

The general forward (``ops/attention_kernels.attention_fwd``) serves decoding with a 16-row query
block, 2 pipeline stages and a second launch that merges the split-KV partials.  Decoding reads
each key and value once and does little arithmetic with it, so what matters is how many bytes each
SM keeps in flight and how little fixed cost each block and launch adds:

- one block per (sequence, kv head, group slice, split): the query heads that share the kv head
  (GQA/MQA; ``group`` = heads / kv_heads, up to ``block_H`` of them) are the rows of the block, so
  the keys and values are read once for the whole group; the query tile is loaded once, straight
  into the registers of the first gemm's operand (no shared-memory round trip whose wait would
  hold back the first key blocks' copies: the loads are in flight while the pipeline starts);
- K and V of a key block are both copied at the top of the body, so that ``T.Pipelined`` issues
  both ``stages - 1`` key blocks ahead (3 or 4 stages: twice the general kernel's bytes in flight);
- the split-KV merge is fused: every block of a (sequence, kv head, slice) writes its normalized
  partial output and log-sum-exp, then counts itself on an int32 counter (an acq_rel atomic by one
  thread after a block barrier: the release half orders the block's partial stores before the
  count, CUTLASS's semaphore pattern); the block that counts last (previous value ``splits - 1``)
  reads the partials (the acquire half orders those reads after every other block's count), writes
  the output and LSE, and resets the counter to 0 for the next launch (the counters are zero when
  the host allocates them and every launch leaves them zero).  One launch instead of two.

The host side (``attention_decode``) plans per call signature, as ``attention_dispatch`` does: kernels,
configuration and split count once; a repeat call allocates the outputs and the partial workspace
and launches from pointers.  Counters are kept per (device, stream): launches on one stream run in
order, so one launch's counters are back at zero before the next starts.
"""

from __future__ import annotations

import math
from threading import get_ident as _get_ident

from .. import config
from .. import language as T
from ..jit.kernel import _SYNC_KEY, _SYNC_PROBE

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453


# Candidate variants of the kernel for the KV-4k fixed cost (issue 9), chosen by TILEWRIGHT_DECODE_VARIANT
# (comma-separated names; none by default) and timed side by side by bench/decode_splits.py, table 2.
# Where the cost is (batch 8, 32/8 heads, d 128 on an H200; bench/results/2026-12-01-1813-decode-splits-*,
# graph times): a straight line through KV 16k and 64k gives 4.52 TB/s streaming plus ~8 us a call,
# which also fits 4k (37.6 us against 38.0 measured) and 8k: the same fixed cost at every length, 21% of
# the call at 4k.  Counted without a GPU (sm_90a cubin of the default, nvdisasm): 96 registers, 69,760
# bytes of shared memory, so 3 blocks a SM, 396 slots; the heuristic's 4 splits launch 256 blocks
# (0.65 of a wave: 124 SMs hold 2, 8 hold 1), each with one 32 KB K+V tile in flight while it computes
# (2 stages: 8 MB in all, 1.8 us of HBM at 4.5 TB/s, so the steady state is saturated); a tile's
# compute has 9 block barriers.  The fixed part is then: the launch (~1 us in a graph: a vector add is
# 1.1 us a call), the first tile's unloaded latency, the last tile's compute, and the fused merge's
# chain of dependent L2 round trips at the very end (partial stores and fence, the counting atomic, the
# partials' loads in 6-9 dependent rounds at 4-8 splits (see "flatmerge"), then the output stores) during
# which no block reads HBM.  The variants each shave one of these:
# The budget at the bar (issue 9: 85% of the copy bandwidth, ~4.22 TB/s, so 3.59 TB/s), session 10, d 128, 2-byte
# K/V.  GQA (batch 8, 8 kv heads): K+V = 32 KiB a key, 134 MB at KV 4k -> 37.4 us a call at the bar, of which
# streaming at the measured 4.52 TB/s takes 29.7 us: 7.7 us left for every fixed cost against the ~8 us measured
# (launch ~1 us, the first tile's latency, the last tile's compute, the merge's dependent L2 round trips); 8k and
# longer have 15+ us to spare.  256 blocks of 16 key blocks (512 KB) at 4k: 124 SMs hold 2 and 8 hold 1 of the
# 396 slots (3 a SM).  MQA (batch 8, 1 kv head): 4 KiB a key, 67 MB at KV 16k -> 18.7 us at the bar, streaming
# 14.8 us: 3.9 us for the fixed cost, half of GQA's, so 85% at 16k needs a fixed cost no GPU run has shown (at 8 us:
# 69%); 64k (268 MB, 74.8 us) leaves 15 us.  The MQA block (cover: the 32 query rows of a kv head, Q.K^T as two
# m16 tiles over 2 x 2 warps, no padded rows, 32 MMAs a warp a key block) streams 8 (16k) or 32 (64k) key blocks
# at 32 splits; its merge reads 32 partials x 32 rows x 512 bytes (512 KB) a group.
# Session 11 (the H200 run of 05:21, bench/decode_splits.py --s11, CUDA graphs in 5 interleaved rounds): the GQA
# default 84.3 / 84.5% at KV 4k (bf16 / fp16; SDPA 86%), 95% at 8k, 108% at 64k; fp16 is not behind bf16 once the
# rounds interleave (session 10's 2-point gap was the run order: bench/attention.py times bf16 first), and the two
# sm_90a cubins are the same 1672 instructions but for the types of the MMA and the F2FP packing.  Every other split
# count and ring lost at every length (6 splits 79%, one block a SM at 64,4 / 64,5 / 128,3 81.5-83%, 64,3 82%,
# cp.async 83%, no split 49-61%): one 4-warp block streams at most ~33 GB/s (about 1 us of compute a 64-key tile), so
# a SM needs two of them, and what is left at 4k is the fixed cost itself (the first and last tiles' compute among it).
VARIANTS = {
    "wave": "split count: the most splits whose blocks all fit on the GPU at once (SMs x blocks per SM, "
            "estimated from shared memory, threads and registers) instead of 2 x SMs / groups",
    "flatmerge": "the fused merge with every partial load unconditional and unrolled (a row past the group "
                 "reads the group's last row; no select around a weight for the compiler to make a branch "
                 "of).  Dependent load rounds after the count, from the sm_90a SASS at 4/6/8 splits: 2/2/2 "
                 "(16+4, 32+4, 44+4 loads) against the default's 6/8/9 (a batch, then one L1 or L2 load at a "
                 "time under branches, then the last split's outputs)",
    "cpasync": "K and V by cp.async (16 bytes a thread) instead of TMA bulk tensor loads",
    "ws": "a warp-specialized producer warpgroup issues the TMA loads (tw.warp_specialize)",
    "cover": "block_H covers a group of more than 16 query heads (up to 64 at d <= 128, 32 above), so that "
             "each kv head's keys and values are read once instead of once per 16-row slice (MQA)",
    # Where the MQA time goes (session 9; batch 8, 32 query heads on 1 kv head, d 128, KV 16k: K+V 67 MB, 16 us at
    # copy bandwidth; counted without a GPU from the sm_90a resource report): the default makes two 16-row slices
    # a kv head, 16 groups x 16 splits = 256 blocks (118 registers, 69,760 bytes: 3 a SM, one wave), each
    # streaming 512 KB, and reads K/V twice (the two slices of a split are 16 blocks apart in launch order, so L2
    # may serve the second read); its merging block then reads 16 partials x 16 rows x 512 bytes (128 KB) in
    # 2-3 dependent L2 rounds a split.  "cover" (one 32-row block: the Q.K^T gemm is M = 32, two m16 MMA tiles,
    # no waste; 126 registers, 73,856 bytes, 3 a SM) reads K/V once but takes 33 splits for 8 groups, and its
    # merging block reads 33 x 32 x 512 bytes = 540 KB from L2 at one SM: measured 33% at 16k and 65% at 64k fit
    # 4.5 TB/s streaming plus ~30 us a call, against ~8 us for GQA, so the merge is the MQA cost.  Both fixes cut
    # the bytes one block merges: cmerge (over a cluster: 8 partials x 4 rows = 16 KB, then 4 x 4 rows) and fill
    # (fewer splits: 16 with cover, two clusters of 8).
    "cmerge": "the merge spread over a thread-block cluster (sm_90+) of c = 2..8 neighbouring splits of a "
              "group: after a cluster barrier, block r of the cluster merges rows r/c of the group's rows over "
              "the cluster's c partials (1/c of the rows, not all rows of all splits in one block); with more "
              "splits than c, each cluster leaves a partial of its rows and the last cluster to count (a counter "
              "per row slice) merges splits/c of those.  The split count is rounded down to a multiple of c",
    "tmerge": "the merge as a tree through global memory, no cluster: the splits of a group form sets of t = 2..8 "
              "neighbours (a power of two dividing the split count, as cmerge's clusters); the last block of a set "
              "to count (a counter per set) merges the set's t partials of all the block's rows into the set's first "
              "slot, then counts on the group's counter, and the last set merges the splits / t set partials.  The "
              "merging block reads t (then splits / t) partials, not all splits; unlike cmerge no cluster is "
              "launched (cluster launches of 8 are placed GPC by GPC: the 22:32 MQA run has cover,cmerge,fill, one "
              "block a SM, at half the rate of cover,flatmerge,fill, the same blocks without the cluster)",
    "w8": "8 warps (256 threads) a block instead of 4, each warp half the MMAs and softmax of a key block (a shorter "
          "compute between a block's TMA waits), without the producer warpgroup the compiler would add to a kernel "
          "of two warpgroups (which would make it 384 threads, one block a SM)",
    "fill": "split count: one block a SM (SMs // groups splits, at least 2, each range at least 4 key blocks) "
            "instead of 2 x SMs / groups: fewer partials to merge (MQA: 16 splits of 8 groups, not 33)",
    # Session 12.  A split call captured in a CUDA graph took zeroed merge counters of its own (torch.zeros: a
    # fill kernel in the graph before every decode kernel, and a node that holds back a programmatic launch); the
    # kernel leaves its counters zero, so the calls captured on one stream of one capture can share one zeroed
    # buffer (_capture_counters).  Measured (07:48): the fill cost 1.1-1.2 us of GPU time a call at KV 4k (40.6 ->
    # 39.4 us bf16, 38.2 -> 37.1 us fp16), and pdlwait on top another 0.1-0.3 us.
    "gcount": "a split call captured in a CUDA graph takes its merge counters from a zeroed buffer of its capture "
              "sequence and stream (one fill kernel a graph and stream) instead of a fill kernel of its own",
    "pdl": "programmatic dependent launch (sm_90+): the kernel starts with griddepcontrol.wait (T.pdl_sync: nothing "
           "is read or written before the previous kernel of the stream has finished) and then lets the next "
           "kernel's blocks start (T.pdl_trigger), so that a following decode call's launch and block placement "
           "overlap this call's tail (its last tiles and the merge); launched with programmatic stream serialization",
    "pdlwait": "as pdl without the trigger: the next kernel may start its blocks once this one's have exited (their "
               "placement overlaps the end of the grid, not its tail of merges)",
    # Session 13 (issue 9's bar at KV 4k bf16): what of the PDL overlap pdlwait leaves.  (The bf16 and fp16 sm_90a
    # cubins of the default, lazysum and pdllate,pdlpre have the same opcodes, counts and registers: 96 / 124 / 96;
    # bf16 4k sitting below fp16 in the 07:48 run, SDPA included, is not the kernel's code: --s13's position table.)
    # pdlpre and pdllate keep griddepcontrol.wait first for everything that reads global memory, so they cannot change
    # a result, only when blocks start.  Measured (08:41, --s13, 8 rounds in alternating order, bf16 / fp16; KV 4k /
    # 8k / 64k): the default 87.0 / 87.6, 97.4 / 96.5, 108.7 / 108.4% (SDPA 86.4 / 86.4% at 4k: the whole run ~6 points
    # above 07:48's, forward and reverse rounds within 0.3, so the graph's place in a round is not bf16's gap either);
    # pdlpre 87.3 / 87.4, 97.2 / 96.6, 108.7 / 108.4; lazysum 87.6 / 87.2, 97.4 / 96.8, 108.7 / 108.1; pdllate 84.7 /
    # 84.0, 94.0 / 92.6, 108.2 / 107.4 (with pdlpre the same; with lazysum too): no win of 0.5 points in both dtypes,
    # and any trigger before a block's exit still loses (here 2-3 points, during the merges; not explained).
    "pdlpre": "as pdlwait, with the block's set-up that reads nothing of the previous kernel ahead of the wait "
              "(passes/pdl_prologue, tw.pdl_prologue: the TMA ring's mbarrier init, its fence and block barrier, and a "
              "prefetch of the K/V tensor-map descriptors), so that it overlaps the previous kernel's tail",
    "pdllate": "as pdlwait, with the trigger (griddepcontrol.launch_dependents) after the block's last key block "
               "(before its partial stores and merge): the next kernel's launch and block placement overlap this "
               "one's merges, not its streaming (pdl's trigger at the top lost 15-24 points at every length)",
    "lazysum": "the softmax denominator kept per score element (a fragment like the scores, rescaled with the output "
               "and summed into once a key block) and reduced across the warps once after the last key block, not "
               "every key block: 3 of the 9 block barriers of a key block's compute gone (the row sum's exchange "
               "through shared memory), so the last tile's compute before the merge is shorter",
    # Session 14 (issue 9's bar with margin: >= 90% at KV 4k).  The arithmetic of a call at 4k: 256 blocks of 16 key
    # blocks (512 KB each), all resident at once (2 a SM on 124 SMs, 1 on 8: no second wave; the busiest SM streams
    # 3% more than the mean, which costs only if one SM's bandwidth were the limit, and 2 blocks a SM reach ~64 GB/s
    # against the ~35 GB/s a SM's share needs), so the work shape is not the loss.  134 MB at the 64k rate (4.59 TB/s)
    # is 29.2 us of the 36.5 us measured (08:41, bf16), and HBM idles between two calls
    # for the last key block's compute (~1 us), the merge's chain (partial stores, fence, the count, the set's loads,
    # the output stores), the grid's end and the wait's release, and the next call's first-block latency: every
    # read of the next call waits at griddepcontrol.wait.  A prefetch into L2 is no read in the memory model (a hint;
    # L2 is where every write lands), so it may go before the wait and fill that gap with the next call's first
    # bytes; the TMA copies after the wait then hit L2.  How early it runs depends on when the next grid's blocks
    # are placed: with pdlwait when the last block of this grid exits; with a trigger (pdl, pdllate) when every
    # block has triggered, into free slots (a third block on a SM: the placement pdl's loss may come from), so
    # "occ2" caps a SM at 2 blocks by shared memory: the next grid's blocks then only take the slots this grid's
    # blocks leave (3 of 4 of a set leave at their count, before the merge).
    "kvpre": "before T.pdl_sync, each block prefetches the first 2 key blocks (K and V) of its split's range into L2 "
             "(prefetch.global.L2, one 128-byte line a thread and step; the range from seq_k, a launch argument, so "
             "nothing is read before the wait; not with a cache of lengths, which live in memory), so that a call's "
             "first bytes stream while the previous call ends",
    "kvpre4": "kvpre with 4 key blocks (32 MB at batch 8 x 8 kv heads x 4 splits: most of L2)",
    # Measured (11:29, --s14, 7 rounds alternating, bf16 / fp16 at KV 4k, the default then gcount,pdlwait,tmerge at 85.0
    # / 84.9% and 85.1 / 85.8% in the two commands): kvpre 83.6 / 83.0, kvpre4 82.1 / 81.1, kvpre,pdllate 81.9 / 77.3,
    # kvpre,pdlpre 84.1 / 84.3, kvpre,occ2,pdllate 86.2 / 85.2 and kvpre4,occ2,pdllate 85.4 / 85.5 against
    # occ2,pdllate's 87.9 / 87.8, kvpre,occ2,pdl 86.9 / 87.3: the prefetch costs 1-3 points wherever it is added (not
    # explained: with pdlwait the next grid starts only as this one ends, so there is little to overlap; the extra L2
    # requests ahead of the TMA copies of the same lines may be the cost).  occ2 is what made a trigger pay (see
    # DEFAULT_VARIANT).
    "occ2": "12 KiB more shared memory a block (written once before the wait), so that an SM holds 2 decode blocks "
            "at d 128 instead of 3: a next grid launched by a trigger takes only the slots this grid's blocks leave",
}
PDL_WAIT = ("pdl", "pdlwait", "pdlpre", "pdllate")  # the variants whose kernel starts with T.pdl_sync
# "kvpre" / "kvpre4": key blocks of a split's range prefetched into L2 before the wait
PREFETCH_DEPTH = {"kvpre": 2, "kvpre4": 4}
OCC2_PAD = 12288  # "occ2": bytes of shared memory added to a block (d 128, 2 stages: 69,760 -> 82,048, 2 a SM)


def prefetch_depth(variant: tuple) -> int:
    """Key blocks a split prefetches into L2 ahead of its wait ("kvpre": 2, "kvpre4": 4; the most named; 0)."""
    return max((PREFETCH_DEPTH[v] for v in variant if v in PREFETCH_DEPTH), default=0)


# The variants a plan takes when TILEWRIGHT_DECODE_VARIANT is unset, by the query-head group a kv head serves
# ("mqa": more than 16, more than one 16-row block; "gqa": 16 or fewer, MHA included); "none" selects the plain kernel.
# MQA, the H200 run of 22:32 (session 9, batch 8, 32 heads on 1 kv head, d 128, GPU time in a graph): cover,cmerge
# 44% of the copy bandwidth at KV 16k and 62% at 64k against the plain kernel's 40% and 58% (fp16 and bf16 alike;
# cover alone 34% / 64-65%, the fill variants 21-46%).  GQA: cmerge alone lost 1-8 points at every length; with 2
# splits at 4 stages it won 2-3 points at KV 4k only (83% against 80-81%) and lost 1-2 at 16k-64k: not a default.
# Session 10 (the H200 run of 02:07, bf16, decode-splits-s10): GQA tmerge 82 / 93 / 100 / 105% at KV 4k / 8k / 16k /
# 64k against the default's 81 / 92 / 96 / 96% (w8 and tmerge,w8 70-89%: 8 warps lose); cmerge s=2 at 4 stages 83 /
# 93 / 98 / 103%.  MQA cover,tmerge 41% at 16k and 70% at 64k against cover,cmerge's 44% and 62% (cover,tmerge at 3
# stages 41 / 68%, with w8 39 / 63%, with wave 35 / 64%): a line through the two lengths gives cover,cmerge ~13.5 us
# of fixed cost and 3.0 TB/s streaming, cover,tmerge ~21 us and 3.9 TB/s (its one-block merge of 8 partials of 32
# rows is longer; the cluster launch streams slower), crossing near 26k keys: "mqa_long" (MQA_LONG_FROM keys of
# cache or more) takes cover,tmerge.  Defaults measured on the H200 only: a target without clusters (before sm_90,
# AMD) keeps the plain kernel (see decode_config).
# Session 12 (the H200 run of 07:48, bench/decode_splits.py --s12, CUDA graphs in 7 interleaved rounds, bf16 / fp16):
# GQA gcount,pdlwait 80.9 / 85.6% at KV 4k against the default's 77.8 / 82.7% (SDPA 80.4 / 84.2%; the whole run sat ~3
# points below session 11's at 4k bf16, SDPA too), 94.7 / 94.6% at 8k (91.8 / 92.9), 100.7% at 16k (99.6-99.7), 105.2
# / 104.6% at 64k (104.9 / 104.5); gcount alone 80.2 / 85.2, 93.9 / 94.5, 100.5, 105.1 / 103.9; pdl with the early
# trigger 65-84% (not explained; a guess: the next call's blocks take the free slots while this one streams and
# are left unevenly spread), pdl without gcount 79.8 / 81.9% at 4k (the fill kernels between the calls hold the
# programmatic launch back).
# MQA: cmerge,cover,gcount,pdl 46.7% at 16k (both dtypes) against the default's 44.4% (gcount alone 45.8; SDPA
# 56-60%); at 64k cover,tmerge,gcount 73.8 / 73.9% against 72.9 / 73.1% (with pdl 59%; the cmerge ones 63-64%).
# Session 13 (08:41, --s13): the GQA default at 87.0 / 87.6% at KV 4k, over issue 9's 85% in both dtypes (SDPA 86.4%);
# pdlpre, pdllate and lazysum stay candidates (see VARIANTS).
# Session 14 (11:29, --s14, 7 rounds in alternating order, bf16 / fp16; a run ~2 points below 08:41, SDPA 84.1 /
# 83.1-84.1% at 4k): occ2,pdllate 87.9 / 87.8% at KV 4k against gcount,pdlwait's 85.1 / 85.8% in the same command
# (spreads apart: 88-88 against 85-86), 96.1 / 96.0% at 8k against 94.9 / 94.9%: the GQA default since.  The late
# trigger that lost 2-3 points alone (s13) wins once a SM holds 2 blocks: the next grid's blocks then take the slots
# this grid's blocks leave, not third slots beside two streaming blocks.  kvpre lost everywhere (see VARIANTS).
# Confirmed at 12:04 (--s14, 7 rounds alternating, bf16 / fp16): the default 89.3 / 89.5% at KV 4k against the old
# one's 87.4 / 87.2% (SDPA 86.2 / 86.7%), 108.7 / 108.4% at 64k against 108.6 / 108.2% (a tie); occ2 with the early
# trigger 88.1 / 88.0 and 107.8 / 107.5, with pdlpre 88.9 / 88.5 and 108.5 / 108.3: neither replaces it.  MQA (KV 16k):
# occ2 with the cluster merge lost badly (32.4 / 33.4% against the default's 47.1%; not measured why, a guess: clusters
# of 8 at 2 blocks a SM no longer all fit their GPCs at once), so the MQA defaults stay.
# Round 1 of 15:45 (--s15, 7 rounds alternating, bf16 / fp16; bench/results/2026-12-02-1545-decode-splits-s15-*): MQA at
# KV 16k cmerge,cover,gcount,lazysum,pdl 48.6 / 48.6% (spread 48-49) against the default's 46.5 / 46.5% (46-47; SDPA
# 60.3 / 55.6%): lazysum (the row sums' exchange once, not every key block) pays on the 32-row MQA block, the MQA
# default below MQA_LONG_FROM since; the tree merge with occ2,pdllate 44.1%, the cluster merge with pdllate 46.6%,
# 32-key tiles at 3 stages 36.9%.  GQA at KV 4k: lazysum on the default 87.7 / 87.2% against 87.3 / 87.1% (under the
# 0.5-point bar in fp16: not taken), 64,3 without occ2 83.9 / 83.1%, 32,4 with occ2 82.9 / 79.8% (and 8-20 points lost
# at 8k-64k, wide spreads): the GQA default stays.
# Round 2 of 16:10 (--s15b, 7 rounds alternating, bf16 / fp16; 1610-decode-splits-s15b-*): MQA at KV 16k the new default
# 49.0 / 49.1% against the old one's 46.9 / 46.8% (lazysum confirmed), and on 2 warps (64,2,64: each warp 16 whole query
# rows, so the row max and sum stay within a warp; 15 block barriers against 23) 51.1 / 51.2% (spreads 51-51): the short
# MQA default's configuration at d 128 since (DEFAULT_CONFIG); SDPA 55.8 / 56.0%.  At 64k lazysum on the tree merge
# (cover,gcount,lazysum,tmerge) 78.3 / 78.2% against the long default's 74.6 / 74.3% (SDPA 70.3 / 70.4%, spread 69-79):
# the long MQA default since; on 2 warps 77.3 / 77.1% (4 warps kept there); the short default on 2 warps 73.7% at 64k
# and the tree at 16k 42.3 / 42.6% (39.7% on 2 warps), so the boundary stays between them (32k keys, not measured
# there). GQA at 4k: lazysum 89.9 / 90.0% against the default's 89.4 / 90.0% (8k 98.6 / 98.6 against 98.6 / 98.4): a
# second round without a 0.5-point win in fp16, so the GQA default stays.
DEFAULT_VARIANT = {"mqa": ("cmerge", "cover", "gcount", "lazysum", "pdl"),
                   "mqa_long": ("cover", "gcount", "lazysum", "tmerge"),
                   "gqa": ("gcount", "occ2", "pdllate", "tmerge")}
MQA_LONG_FROM = 32768
# and their configuration by (kind, head dim) ("block_N,stages[,threads]" as TILEWRIGHT_DECODE_CONFIG; none: the
# rule of decode_config) where neither variable is set, only with the kind's default variant (not on a target whose
# default is the plain kernel) and on blocks of at most DEFAULT_CONFIG_ROWS query rows (as measured: 32 rows on 2
# warps; 48- or 64-row cover blocks keep the rule)
DEFAULT_CONFIG: dict = {("mqa", 128): "64,2,64"}
DEFAULT_CONFIG_ROWS = 32


def _kind(group: int, seq_k: int | None = None) -> str:
    if group <= 16:
        return "gqa"
    return "mqa_long" if seq_k is not None and seq_k >= MQA_LONG_FROM else "mqa"


def decode_variant(group: int = 1, seq_k: int | None = None) -> tuple:
    """The candidate variants named by ``TILEWRIGHT_DECODE_VARIANT`` (sorted, for kernel cache keys); unset: the
    ``DEFAULT_VARIANT`` of the ``group`` of query heads a kv head serves (and, for MQA, of the ``seq_k`` keys of
    the cache when given); "none": no variant."""
    raw = config.get("decode_variant")
    if not raw:
        return DEFAULT_VARIANT[_kind(group, seq_k)]
    names = tuple(sorted({x.strip() for x in raw.split(",") if x.strip() and x.strip() != "none"}))
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise ValueError(f"TILEWRIGHT_DECODE_VARIANT={raw!r}: unknown {', '.join(unknown)}; expected a "
                         f"comma-separated subset of {', '.join(VARIANTS)} (or 'none': the plain kernel)")
    if "cmerge" in names and "ws" in names:  # (the producer warpgroup does not reach the merge's cluster barrier)
        raise ValueError(f"TILEWRIGHT_DECODE_VARIANT={raw!r}: cmerge and ws cannot be combined (the cluster barrier "
                         "of cmerge's merge waits for every warp, and ws's producer warps leave the loop early)")
    if "w8" in names and "ws" in names:
        raise ValueError(f"TILEWRIGHT_DECODE_VARIANT={raw!r}: w8 and ws cannot be combined (w8 is 8 warps without "
                         "a producer warpgroup, ws adds one)")
    return names


def decode_config(dim: int, smem: int, group: int = 1, target: str | None = None, seq_k: int | None = None) -> tuple:
    """(block_H, block_N, stages, threads, variant): 16 query rows (the smallest MMA M), key blocks of
    64 x dim (32 at d 256), 4 stages at d <= 64, 2 at d 65..128 and 3 above, 4 warps (2 where d is
    an odd multiple of 16); shrunk (stages to 2, block_N to 32, stages to 1) until a query tile, the
    K/V rings and the score scratch fit in ``smem`` bytes (AMD's 64 KiB LDS; the query tile now lives
    in registers, so this is conservative).  d 128 on an H200: 2 stages measured best of the sweep
    (64x2 against 64x3, 32x4, 128x2 and one- or two-warp blocks) at every KV length 4k-16k in fp16
    and bf16, 1-4% ahead of 3 stages (bench/results/2026-12-01-1547-decode-splits-* and -1659-*);
    d 64 and 256 are not measured.  ``TILEWRIGHT_DECODE_CONFIG`` ("block_N,stages[,threads]")
    overrides it for sweeps (bench/decode_splits.py); the shrinking still applies; with neither variable set,
    ``DEFAULT_CONFIG`` does where the default variant applies and the block has at most ``DEFAULT_CONFIG_ROWS`` rows
    (MQA at d 128 on sm_90a: 2 warps).  ``variant``: ``decode_variant(group)`` (candidates, ``DEFAULT_VARIANT`` by
    default); with "cover", ``block_H`` is the ``group`` of query heads a kv head serves rounded up to 16, at
    most 64 (32 at d > 128: 64 rows spill there).  With ``target`` (its string) and no clusters there, "cmerge"
    is dropped from a chosen variant and a default (measured on the H200 only) becomes the plain kernel.  ``seq_k``:
    the keys of the cache, which pick the MQA default ("mqa_long" from ``MQA_LONG_FROM``).  "occ2" is dropped where
    its 12 KiB would not fit beside the tiles in ``smem`` (AMD's 64 KiB LDS)."""
    variant = decode_variant(group, seq_k)
    if target is not None and variant and not _has_clusters(target):
        # a target without clusters: a chosen variant loses cmerge, a default (measured on sm_90a) is the plain one
        variant = tuple(v for v in variant if v != "cmerge") if config.get("decode_variant") else ()
    bH, bN, stages = 16, 64 if dim <= 128 else 32, 4 if dim <= 64 else 2 if dim <= 128 else 3
    if "cover" in variant:
        bH = max(16, min(64 if dim <= 128 else 32, -(-group // 16) * 16))
    # P V splits the head dim over the warps: 4 warps (2 waves of 64) need a multiple of 32 (the
    # MMA's n8 per NVIDIA warp, MFMA's 16 per AMD wave); an odd multiple of 16 (48, 80, 112, ...)
    # takes 2 warps (1 wave)
    # ("w8": 8 warps only where a block_H x block_N score tile splits over them: at d 256 (block_N 32) the
    # 16 x 32 tile has 4 warps' worth of m16n8 MMAs, and the planner refuses 8 warps, so it keeps 4)
    threads = (256 if "w8" in variant and bH * bN >= 16 * 64 else 128) if dim % 32 == 0 else 64
    env = config.get("decode_config")  # "block_N,stages[,threads]": sweeps on a GPU (bench/decode_splits.py)
    kind = _kind(group, seq_k)
    if not env and not config.get("decode_variant") and variant == DEFAULT_VARIANT[kind] and bH <= DEFAULT_CONFIG_ROWS:
        env = DEFAULT_CONFIG.get((kind, dim), "")
    if env:
        try:
            given = [int(x) for x in env.split(",")]
            bN, stages = given[:2]
            threads = given[2] if len(given) > 2 else threads
        except ValueError:
            raise ValueError(f"TILEWRIGHT_DECODE_CONFIG={env!r}: expected 'block_N,stages' or "
                             "'block_N,stages,threads' (integers, e.g. '64,3,128')") from None
    def tiles_bytes():  # (Q, the K/V ring, the score and probability tiles)
        return (bH + 2 * stages * bN) * dim * 2 + 2 * bH * bN * 4

    while tiles_bytes() > smem:
        if stages > 2:
            stages -= 1
        elif bN > 32:
            bN //= 2
        elif stages > 1:
            stages -= 1
        elif bN > 16:  # (16-key blocks do not split over AMD's 32-wide MFMA at two waves)
            bN //= 2
        else:
            break
    if "occ2" in variant and tiles_bytes() + OCC2_PAD > smem:
        variant = tuple(v for v in variant if v != "occ2")  # (a placement hint: never worth smaller tiles or no fit)
    return bH, bN, stages, threads, variant


def blocks_per_sm(dim: int, cfg: tuple, smem: int) -> int:
    """Blocks of configuration ``cfg`` (``decode_config``'s) one SM holds at once, estimated without
    compiling: shared memory (the K/V rings, the fp32 score scratch, the barriers and the driver's 1 KiB
    a block, against ``smem`` + 1 KiB a SM: 228 KiB on an H200, whose opt-in per block is 227 KiB),
    threads (2048 a SM) and registers (64K a SM at 128 a thread up to 16 x 256 or 32 x 128 output
    elements a block, 255 above: measured 96-127 below, 174 at 64 x 128; 123 warp-specialized, whose
    producer warpgroup adds 128 threads).  At d 128 on an H200: 3 (2 with 3 stages or "ws").  An
    underestimate only costs splits ("wave" stays within one wave)."""
    block_H, block_N, stages, threads, variant = cfg
    regs = 128 if block_H * dim <= 4096 else 255
    threads += 128 if "ws" in variant else 0
    shared = 2 * stages * block_N * dim * 2 + block_H * block_N * 4 + 1024 + (OCC2_PAD if "occ2" in variant else 0)
    return max(1, min((smem + 1024) // shared, 2048 // threads, 65536 // (threads * regs), 32))


def decode_splits(groups: int, key_blocks: int, forced, dim: int, cfg: tuple, smem: int, sms: int) -> int:
    """Split-KV ranges for ``groups`` blocks of (sequence, kv head, slice) over ``key_blocks`` key
    blocks: ``forced`` (num_splits) as given (at most one a key block); else the general heuristic
    (attention_dispatch._splits: 2 x SMs / groups, each range at least 4 key blocks); with the "wave"
    variant, the most splits whose blocks all fit on ``sms`` SMs at once (``blocks_per_sm``), each
    range at least 4 key blocks: one wave, no partial second one (at batch 8 x 8 kv heads on an H200:
    6 splits, 384 blocks of 396 slots, against the heuristic's 4: 256 blocks, 124 SMs holding 2 and
    8 holding 1; 8 splits, 512 blocks, is a wave and a third and measured 20% slower at KV 4k)."""
    from .attention_dispatch import _splits

    variant = cfg[4]
    if forced is not None:
        return _splits(groups, key_blocks, forced)
    if "fill" in variant and groups < sms and key_blocks >= 8:
        splits = max(1, min(max(2, sms // groups), key_blocks // 4, 64))
    elif "wave" not in variant:
        splits = _splits(groups, key_blocks, forced)
    elif key_blocks < 8:
        return 1
    else:
        splits = max(1, min(sms * blocks_per_sm(dim, cfg, smem) // groups, key_blocks // 4, 64))
    if ("cmerge" in variant or "tmerge" in variant) and splits > 1:  # whole clusters (sets) of up to 8 splits
        splits -= splits % min(8, 1 << (splits.bit_length() - 1))
    return splits


def merge_cluster(splits: int, variant: tuple) -> int:
    """The thread-block cluster of the "cmerge" merge: the most splits, a power of two up to 8, that
    divides ``splits`` (1: no cluster, the default merge)."""
    if "cmerge" not in variant or splits < 2:
        return 1
    return _set_of(splits)


def merge_set(splits: int, variant: tuple) -> int:
    """The splits of one set of the "tmerge" tree merge (as ``merge_cluster``; 1: not a tree merge).
    "cmerge" wins where both are named (the cluster merge needs no first-level counters)."""
    if "tmerge" not in variant or "cmerge" in variant or splits < 2:
        return 1
    return _set_of(splits)


def _set_of(splits: int) -> int:
    return next(c for c in (8, 4, 2, 1) if splits % c == 0)


def decode_for_target(cfg: tuple, target: str) -> tuple:
    """``cfg`` without the variants the target cannot run ("cmerge" needs clusters: sm_90 and newer)."""
    if "cmerge" not in cfg[4] or _has_clusters(target):
        return cfg
    return cfg[:4] + (tuple(v for v in cfg[4] if v != "cmerge"),)


def _has_clusters(target: str) -> bool:
    from ..target.base import Target

    return Target.parse(target).has("cluster")


def decode_counters(groups: int, splits: int, variant: tuple) -> int:
    """int32 merge counters a launch needs: one a group; with "cmerge" one a (group, row slice); with
    "tmerge" one a (group, set) and one a group for the second level."""
    tm = merge_set(splits, variant)
    if tm > 1:
        return groups * (splits // tm + 1)
    return groups * merge_cluster(splits, variant)


def decode_pass_configs(variant: tuple):
    """Compiler options of a variant: "ws" turns on the warp-specialized loop (a TMA producer
    warpgroup; by default only kernels of two or more consumer warpgroups get it), "w8" keeps it off
    for its two warpgroups; "pdlpre" turns on ``tw.pdl_prologue``; else None."""
    configs = {"tw.pdl_prologue": True} if "pdlpre" in variant else {}
    if "ws" in variant:
        configs["tw.warp_specialize"] = True
    elif "w8" in variant:
        configs["tw.warp_specialize"] = False
    return configs or None


def decode_fwd(heads, kv_heads, dim, dtype, has_cache, splits, k_hc, v_hc, block_H, block_N, stages, threads,
               variant=()):
    """One query token per sequence.  ``Q``/``Out``: (batch * heads, dim) rows (query head ``h`` of
    sequence ``b`` is row ``b * heads + h``); ``L``: (batch * heads,) float32.  K/V are 2-D row views
    as in ``attention_fwd``: key ``s`` of kv head ``g`` of sequence ``b`` is row ``b * k_rb + g * k_rh
    + s``, column ``g * dim`` when ``k_hc`` (a (batch, seq, heads, dim) tensor) else 0.  ``Lens``:
    the cache lengths when ``has_cache`` (else never read; every sequence has ``seq_k`` keys).
    With ``splits > 1``: ``Opart`` (splits * batch * heads, dim) and ``Lpart`` (splits * batch *
    heads,) float32 partials and ``Cnt`` (batch * kv_heads * slices,) int32 counters, zero on entry
    and left zero; with ``splits == 1`` they are never touched.  ``variant``: names of ``VARIANTS``
    (those that change the kernel: "flatmerge", "cpasync", "cmerge", "tmerge"; "ws" and "w8" are pass configs,
    ``decode_pass_configs``, "w8" also ``threads``).  With "tmerge", ``Cnt`` holds ``splits // merge_set + 1``
    counters a (sequence, kv head, slice): one a set, then the group's."""
    group = heads // kv_heads
    slices = -(-group // block_H)  # query-row blocks per kv head (group > block_H)
    accum = "float32"
    RQ, RK, RV, RP, NL, NC = (T.dynamic(n) for n in ("rq", "rk", "rv", "rp", "nl", "nc"))
    k_cols, v_cols = kv_heads * dim if k_hc else dim, kv_heads * dim if v_hc else dim
    fused = splits > 1
    cp_async, flat_merge = "cpasync" in variant, "flatmerge" in variant
    lazy_sum = "lazysum" in variant
    cm = merge_cluster(splits, variant)  # "cmerge": the cluster of splits that merges together (1: none)
    # rows a block of the cluster merges: the block's rows within the group (GQA 4: 4 of its 16), split c ways
    rpr = -(-min(group, block_H) // cm)
    rounds = splits // cm  # cluster partials per row slice (1: the cluster writes the output)
    tm = merge_set(splits, variant)  # "tmerge": splits a set of the tree merge (1: none)
    prefetch_blocks = prefetch_depth(variant)  # "kvpre": key blocks a split prefetches into L2 before the wait
    esize = 2 if dtype in ("float16", "bfloat16") else 4 if dtype == "float32" else 1
    pf_lines = max(1, dim * esize // 128)  # 128-byte lines a row of K (V)
    pf_elems = 128 // esize if dim * esize >= 128 else dim
    pf_steps = tuple(range(-(-prefetch_blocks * block_N * pf_lines // threads)))
    occupancy_pad = OCC2_PAD if "occ2" in variant else 0
    tsets = splits // tm  # sets of a group (1: the set's merge writes the output)

    @T.macro
    def cluster_merge(Opart, Lpart, mo, mm, mw, md, rows, first_slot, step, count, q_row, first, r0, nrows):
        """"cmerge", "tmerge": rows r0 .. r0 + nrows of the partials in slots first_slot + s * step (s < count),
        merged into mo (weighted sum), mm (max LSE, 0 where no slot has a key) and md (sum of weights); a row
        past the group reads the group's last row (computed, never stored), so every load is unconditional."""
        T.fill(mm, -T.infinity(accum))
        T.fill(md, 0)
        T.fill(mo, 0)
        for s in T.unroll(count):
            for i in T.Parallel(nrows):
                mm[i] = T.max(mm[i], Lpart[(first_slot + s * step) * rows + q_row + T.min(r0 + i, group - 1 - first)])
        for i in T.Parallel(nrows):
            mm[i] = T.if_then_else(mm[i] == -T.infinity(accum), 0, mm[i])
        for s in T.unroll(count):
            for i in T.Parallel(nrows):
                mw[i] = T.exp2((Lpart[(first_slot + s * step) * rows + q_row + T.min(r0 + i, group - 1 - first)]
                                - mm[i]) * LOG2E)  # (a slot without keys: exp2(-inf) = 0)
                md[i] = md[i] + mw[i]
            for i, j in T.Parallel(nrows, dim):
                mo[i, j] += Opart[(first_slot + s * step) * rows + q_row + T.min(r0 + i, group - 1 - first), j] * mw[i]

    @T.macro
    def l2_prefetch(K, V, part, kvh, bz, seq_k, k_rb, k_rh, v_rb, v_rh):
        """"kvpre": each thread prefetches lines of the first ``prefetch_blocks`` key blocks of split ``part``'s
        range (K and V rows of kv head ``kvh`` of sequence ``bz``; rows past ``seq_k`` or the range are left out),
        one 128-byte line a thread and step."""
        tx = T.get_thread_binding()
        blocks = T.ceildiv(seq_k, block_N)
        lo = part * T.ceildiv(blocks, splits)
        hi = T.min(lo + T.ceildiv(blocks, splits), blocks)
        for step in pf_steps:  # (a tuple: unrolled when traced, a line index per thread and step)
            line = step * threads + tx
            kb = lo + line // (block_N * pf_lines)
            r = kb * block_N + (line // pf_lines) % block_N  # the key (row of the head's cache)
            c = (line % pf_lines) * pf_elems  # first element of the line in the row
            if line < prefetch_blocks * block_N * pf_lines and kb < hi and r < seq_k:
                T.prefetch_l2(K[bz * k_rb + kvh * k_rh + r, (kvh * dim if k_hc else 0) + c])
                T.prefetch_l2(V[bz * v_rb + kvh * v_rh + r, (kvh * dim if v_hc else 0) + c])

    @T.macro
    def cluster_store(Out, L, mo, mm, md, q_row, first, r0, nrows):
        """The merged rows r0 .. r0 + nrows of ``cluster_merge`` as the output and LSE (0 and -inf without keys)."""
        for i, j in T.Parallel(nrows, dim):
            if first + r0 + i < group:
                Out[q_row + r0 + i, j] = T.if_then_else(md[i] > 0, mo[i, j] / md[i], 0)
        for i in T.Parallel(nrows):
            if first + r0 + i < group:
                L[q_row + r0 + i] = T.if_then_else(md[i] > 0, mm[i] + T.log2(md[i]) * LN2, -T.infinity(accum))

    @T.macro
    def set_store(Opart, Lpart, mo, mm, md, rows, slot, q_row, first, r0, nrows):
        """The merged rows r0 .. r0 + nrows of ``cluster_merge`` as the normalized partial of slot ``slot`` (for
        the next level of the merge)."""
        for i, j in T.Parallel(nrows, dim):
            if first + r0 + i < group:
                Opart[slot * rows + q_row + r0 + i, j] = T.if_then_else(md[i] > 0, mo[i, j] / md[i], 0)
        for i in T.Parallel(nrows):
            if first + r0 + i < group:
                Lpart[slot * rows + q_row + r0 + i] = T.if_then_else(md[i] > 0, mm[i] + T.log2(md[i]) * LN2,
                                                                     -T.infinity(accum))

    @T.prim_func
    def decode_fwd_kernel(Q: T.Tensor((RQ, dim), dtype), K: T.Tensor((RK, k_cols), dtype),
                          V: T.Tensor((RV, v_cols), dtype), Out: T.Tensor((RQ, dim), dtype),
                          L: T.Tensor((RQ,), accum), Opart: T.Tensor((RP, dim), accum), Lpart: T.Tensor((RP,), accum),
                          Cnt: T.Tensor((NC,), "int32"), Lens: T.Tensor((NL,), "int32"), nseq: T.int32,
                          seq_k: T.int32, scale: T.float32, k_rb: T.int32, k_rh: T.int32, v_rb: T.int32,
                          v_rh: T.int32):
        # the splits of one group are neighbours in launch order: they finish together, and the
        # last of them (the combiner) waits least
        with T.Kernel(splits, kv_heads * slices, nseq, threads=threads,
                      cluster_dims=(cm, 1, 1) if cm > 1 else None) as (part, by, bz):
            Q_f = T.alloc_fragment((block_H, dim), dtype)
            K_s = T.alloc_shared((block_N, dim), dtype)
            V_s = T.alloc_shared((block_N, dim), dtype)
            acc_s = T.alloc_fragment((block_H, block_N), accum)
            acc_s_cast = T.alloc_fragment((block_H, block_N), dtype)
            acc_o = T.alloc_fragment((block_H, dim), accum)
            m_cur = T.alloc_fragment((block_H,), accum)
            m_prev = T.alloc_fragment((block_H,), accum)
            m_use = T.alloc_fragment((block_H,), accum)
            rescale = T.alloc_fragment((block_H,), accum)
            row_sum = T.alloc_fragment((block_H,), accum)
            denom = T.alloc_fragment((block_H,), accum)
            if lazy_sum:  # ("lazysum": the denominator's terms per score element, summed across the warps at the end)
                sum_s = T.alloc_fragment((block_H, block_N), accum)
            if cm > 1:  # ("cmerge": the merged rows of this block)
                mo = T.alloc_fragment((rpr, dim), accum)
                mm = T.alloc_fragment((rpr,), accum)
                mw = T.alloc_fragment((rpr,), accum)
                md = T.alloc_fragment((rpr,), accum)

            if occupancy_pad:  # ("occ2": shared memory that caps the blocks a SM holds; written once, never read)
                pad = T.alloc_shared((occupancy_pad // 4,), accum)
                T.fill(pad, 0)
            if prefetch_blocks and not has_cache:
                # "kvpre": the first key blocks of this split's range into L2 before the wait (a hint: the TMA
                # copies after the wait read through L2, which every write of the previous kernel reaches).  The
                # range from seq_k, a launch argument: nothing read from memory before the wait
                l2_prefetch(K, V, part, by // slices, bz, seq_k, k_rb, k_rh, v_rb, v_rh)
            if any(v in variant for v in PDL_WAIT):
                T.pdl_sync()  # (first: every global access below may depend on the previous kernel)
                if "pdl" in variant:
                    T.pdl_trigger()
            kvh = by // slices
            first = (by % slices) * block_H  # first query row of this block within the group
            q_row = T.alloc_var("int32", 0)
            q_row = bz * heads + kvh * group + first
            scale_log2 = T.alloc_var(accum, 0)
            scale_log2 = scale * LOG2E  # exp(x * scale) = exp2(x * scale * log2(e))
            len_k = T.alloc_var("int32", 0)
            len_k = Lens[bz] if has_cache else seq_k
            per_part = T.ceildiv(T.ceildiv(len_k, block_N), splits)
            lo = T.alloc_var("int32", 0)
            hi = T.alloc_var("int32", 0)
            lo = part * per_part
            hi = T.max(T.min(lo + per_part, T.ceildiv(len_k, block_N)), lo)
            k_row = T.alloc_var("int32", 0)
            v_row = T.alloc_var("int32", 0)
            k_row = bz * k_rb + kvh * k_rh
            v_row = bz * v_rb + kvh * v_rh

            # rows past the group (another kv head's queries) are computed and never stored; rows
            # past the tensor are not read
            T.copy(Q[q_row, 0], Q_f)
            T.fill(acc_o, 0)
            T.fill(denom, 0)
            if lazy_sum:
                T.fill(sum_s, 0)
            T.fill(m_cur, -T.infinity(accum))
            for kb in T.Pipelined(lo, hi, num_stages=stages):
                # both copies first: the pipeline issues K and V of a key block stages - 1 blocks ahead
                T.copy(K[k_row + kb * block_N, kvh * dim if k_hc else 0], K_s, disable_tma=cp_async)
                T.copy(V[v_row + kb * block_N, kvh * dim if v_hc else 0], V_s, disable_tma=cp_async)
                T.gemm(Q_f, K_s, acc_s, transpose_B=True, clear_accum=True, policy=T.GemmWarpPolicy.FullRow)
                if (kb + 1) * block_N > len_k:  # the last key block: keys past the sequence are masked
                    for i, j in T.Parallel(block_H, block_N):
                        acc_s[i, j] = T.if_then_else(kb * block_N + j < len_k, acc_s[i, j], -T.infinity(accum))
                T.copy(m_cur, m_prev)
                T.reduce_max(acc_s, m_cur, dim=1, clear=False)
                for i in T.Parallel(block_H):
                    m_use[i] = T.if_then_else(m_cur[i] == -T.infinity(accum), 0, m_cur[i])
                    rescale[i] = T.exp2((m_prev[i] - m_use[i]) * scale_log2)
                for i, j in T.Parallel(block_H, dim):
                    acc_o[i, j] *= rescale[i]
                for i, j in T.Parallel(block_H, block_N):
                    acc_s[i, j] = T.__exp2(acc_s[i, j] * scale_log2 - m_use[i] * scale_log2)
                T.copy(acc_s, acc_s_cast)
                T.gemm(acc_s_cast, V_s, acc_o, policy=T.GemmWarpPolicy.FullRow)
                if lazy_sum:
                    for i, j in T.Parallel(block_H, block_N):
                        sum_s[i, j] = sum_s[i, j] * rescale[i] + acc_s[i, j]
                else:
                    T.reduce_sum(acc_s, row_sum, dim=1)
                    for i in T.Parallel(block_H):
                        denom[i] = denom[i] * rescale[i] + row_sum[i]
            if lazy_sum:
                T.reduce_sum(sum_s, denom, dim=1)
            if "pdllate" in variant:
                T.pdl_trigger()  # (every key block of this split read: the next call may place its blocks)
            # normalized output and log-sum-exp of this range (0 and -inf where it holds no key)
            for i, j in T.Parallel(block_H, dim):
                acc_o[i, j] = T.if_then_else(denom[i] > 0, acc_o[i, j] / denom[i], 0)
            for i in T.Parallel(block_H):
                m_use[i] = T.if_then_else(denom[i] > 0, (m_cur[i] * scale_log2 + T.log2(denom[i])) * LN2,
                                          -T.infinity(accum))
            if not fused:
                for i, j in T.Parallel(block_H, dim):
                    if first + i < group:
                        Out[q_row + i, j] = acc_o[i, j]
                for i in T.Parallel(block_H):
                    if first + i < group:
                        L[q_row + i] = m_use[i]
            else:
                # this split's partial (every merge below reads the partials of its group's splits)
                rows = nseq * heads
                for i, j in T.Parallel(block_H, dim):
                    if first + i < group:
                        Opart[part * rows + q_row + i, j] = acc_o[i, j]
                for i in T.Parallel(block_H):
                    if first + i < group:
                        Lpart[part * rows + q_row + i] = m_use[i]
                if cm > 1:
                    # the cluster barrier (arrive.release / wait.acquire) orders every block's partial stores
                    # before the reads of its peers: block r of the cluster then merges rows r0 .. r0 + rpr
                    T.cluster_sync()
                    rank = part % cm
                    base = part - rank  # the cluster's first split: its slot takes the cluster's partial
                    r0 = rank * rpr
                    cluster_merge(Opart, Lpart, mo, mm, mw, md, rows, base, 1, cm, q_row, first, r0, rpr)
                    if rounds == 1:
                        cluster_store(Out, L, mo, mm, md, q_row, first, r0, rpr)
                    else:
                        T.sync_threads()  # every thread's reads of the cluster's first slot precede the overwrite
                        set_store(Opart, Lpart, mo, mm, md, rows, base, q_row, first, r0, rpr)
                        # the last cluster to count for this row slice merges the clusters' partials
                        counter = (bz * kv_heads * slices + by) * cm + rank
                        T.sync_threads()
                        prev = T.atomic_add(Cnt[counter], 1, memory_order="acq_rel", return_prev=True)
                        if prev == rounds - 1:
                            cluster_merge(Opart, Lpart, mo, mm, mw, md, rows, 0, cm, rounds, q_row, first, r0, rpr)
                            cluster_store(Out, L, mo, mm, md, q_row, first, r0, rpr)
                            T.atomic_store(Cnt[counter], 0)  # for the next launch
                elif tm > 1:
                    # "tmerge": the last block of a set of tm splits to count merges the set's partials (every row
                    # of the block, loads unconditional as cmerge's) into the set's first slot; with more than one
                    # set, the last set to count on the group's counter merges the sets' partials.  The merged
                    # values reuse the accumulators (acc_o, m_cur, row_sum, denom), free once the partial is stored
                    grp = bz * kv_heads * slices + by
                    base = part - part % tm
                    counter = grp * (tsets + 1) + part // tm
                    T.sync_threads()  # every thread's partial stores precede the release below (barrier, then fence)
                    prev = T.atomic_add(Cnt[counter], 1, memory_order="acq_rel", return_prev=True)
                    if prev == tm - 1:
                        cluster_merge(Opart, Lpart, acc_o, m_cur, row_sum, denom, rows, base, 1, tm, q_row, first, 0,
                                      block_H)
                        T.atomic_store(Cnt[counter], 0)  # for the next launch (every block of the set has counted)
                        if tsets == 1:
                            cluster_store(Out, L, acc_o, m_cur, denom, q_row, first, 0, block_H)
                        else:
                            T.sync_threads()  # every thread's reads of the set's first slot precede the overwrite
                            set_store(Opart, Lpart, acc_o, m_cur, denom, rows, base, q_row, first, 0, block_H)
                            top = grp * (tsets + 1) + tsets
                            T.sync_threads()
                            prev_set = T.atomic_add(Cnt[top], 1, memory_order="acq_rel", return_prev=True)
                            if prev_set == tsets - 1:
                                cluster_merge(Opart, Lpart, acc_o, m_cur, row_sum, denom, rows, 0, tm, tsets, q_row,
                                              first, 0, block_H)
                                cluster_store(Out, L, acc_o, m_cur, denom, q_row, first, 0, block_H)
                                T.atomic_store(Cnt[top], 0)  # for the next launch
                else:
                    # merge: the block that counts last reads every split's partial of its rows
                    # O = sum_s w_s O_s / sum_s w_s with w_s = exp(L_s - max L), L = max L + log sum_s w_s
                    # (an empty range, L_s = -inf, weighs 0; rows with no key at all get 0 and -inf).
                    # The count is an atomic with a fence before (release: the block barrier makes every
                    # thread's partial stores precede it, so the fence orders them all before the count) and
                    # one after (acquire: the merging block's loads of the other partials follow the count
                    # that saw every other block's).  The PTX memory model needs both for the fence-and-
                    # relaxed-atomic pattern; only the merging block needs the second, which costs the
                    # others nothing measurable (thread 0 already waits for the atomic's return)
                    counter = bz * kv_heads * slices + by
                    T.sync_threads()
                    prev = T.atomic_add(Cnt[counter], 1, memory_order="acq_rel", return_prev=True)
                    if prev == splits - 1:
                        T.fill(m_cur, -T.infinity(accum))
                        T.fill(denom, 0)
                        T.fill(acc_o, 0)
                        if flat_merge:
                            # two unrolled passes (the max, then the weighted sum) with no load under a
                            # branch or depending on another's value (a row past the group reads the
                            # group's last row, unused) and no select around a weight (a split without
                            # keys weighs exp2(-inf) = 0 by itself; the max of a row without any is taken
                            # as 0): nothing for the compiler to turn into a branch around the loads
                            for s in T.unroll(splits):
                                for i in T.Parallel(block_H):
                                    m_cur[i] = T.max(m_cur[i], Lpart[s * rows + q_row + T.min(i, group - 1 - first)])
                            for i in T.Parallel(block_H):
                                m_use[i] = T.if_then_else(m_cur[i] == -T.infinity(accum), 0, m_cur[i])
                            for s in T.unroll(splits):
                                for i in T.Parallel(block_H):
                                    row_sum[i] = T.exp2((Lpart[s * rows + q_row + T.min(i, group - 1 - first)]
                                                         - m_use[i]) * LOG2E)
                                    denom[i] = denom[i] + row_sum[i]
                                for i, j in T.Parallel(block_H, dim):
                                    acc_o[i, j] += (Opart[s * rows + q_row + T.min(i, group - 1 - first), j]
                                                    * row_sum[i])
                        else:
                            for s in T.serial(splits):
                                for i in T.Parallel(block_H):
                                    if first + i < group:
                                        m_cur[i] = T.max(m_cur[i], Lpart[s * rows + q_row + i])
                            for s in T.serial(splits):
                                for i in T.Parallel(block_H):
                                    row_sum[i] = 0
                                    if first + i < group:
                                        m_use[i] = Lpart[s * rows + q_row + i]
                                        row_sum[i] = T.if_then_else(m_use[i] == -T.infinity(accum), 0,
                                                                    T.exp2((m_use[i] - m_cur[i]) * LOG2E))
                                    denom[i] = denom[i] + row_sum[i]
                                for i, j in T.Parallel(block_H, dim):
                                    if first + i < group:
                                        acc_o[i, j] += Opart[s * rows + q_row + i, j] * row_sum[i]
                        for i, j in T.Parallel(block_H, dim):
                            if first + i < group:
                                Out[q_row + i, j] = T.if_then_else(denom[i] > 0, acc_o[i, j] / denom[i], 0)
                        for i in T.Parallel(block_H):
                            if first + i < group:
                                L[q_row + i] = T.if_then_else(denom[i] > 0, m_cur[i] + T.log2(denom[i]) * LN2,
                                                              -T.infinity(accum))
                        T.atomic_store(Cnt[counter], 0)  # for the next launch (every block of this group has counted)

    return decode_fwd_kernel


# ---------------------------------------------------------------- host side
# ``attention_dispatch.attention_impl`` calls ``attention_decode`` first for dense calls unless
# ``KERNEL`` is "old" (TILEWRIGHT_DECODE_KERNEL=old), which keeps decoding on the general kernel and
# its combine launch (both paths are timed by bench/decode_splits.py, which switches this at run time).
KERNEL = config.get("decode_kernel")
# A repeat call's launch made by the compiled launcher's C call (``FixedCudaLaunch._compiled``:
# ``Launch.go(stream, ptrs)``, the pointer writes and cuLaunchKernel) from ``_DecodeRun.run`` itself,
# instead of through BoundKernel.launch_pointers -> FixedLaunch -> FixedCudaLaunch (three Python
# frames), where what those frames would check holds: the ``FixedLaunch`` the first repeat call
# packed for this plan's scalars (``_fixed_scalars is tail``), on the thread that owns its buffer, no
# TILEWRIGHT sync requested, and no TMA descriptor to rewrite (none, or the pointers they describe
# unchanged).  Anything else, or a C call that launched nothing (no compiled launcher: a TypeError;
# a driver error: nonzero), goes through the frames, which launch or explain.  False: always through
# them (bench/launch_overhead.py times both ways; attention_dispatch.DIRECT_LAUNCH: the prefill plan's).
# On: H200 2026-12-02 16:11 (fp16, 31 rounds, with the session-14 entries; docs/ops.md), decode 9.9 vs 10.8 us
# host time a call, one split 10.0 vs 10.4, return_lse 11.9 vs 13.1.
DIRECT_LAUNCH = True


_AD: list = []  # ops/attention_dispatch, found on first use (it imports this module)


def _ad():
    """ops/attention_dispatch, without an import statement per call (~0.4 us each on the host path)."""
    if not _AD:
        from . import attention_dispatch

        _AD.append(attention_dispatch)
    return _AD[0]


def _torch():
    return _ad()._torch()  # (its name: tests that poison its allocations poison these too)


class _DecodePlan:
    """What a call signature decides: the kernel, the split count and the scalar arguments."""

    __slots__ = ("dim", "fwd", "heads", "rows", "splits", "tail", "counters", "graph_counters")


_plans: dict = {}  # dense key (attention_dispatch._dense_key) -> _DecodePlan
_counters: dict = {}  # (device index, stream) -> int32 zeros (left zero by every launch)
_partials: dict = {}  # (device index, stream) -> float32 workspace of the split partials
_per_stream: dict = {}  # (device index, stream) -> (partials address, its elements, counters address, their count)
_dummies: dict = {}  # (device, dim) -> the never-read tensors of a launch without splits


def forget_plans() -> None:
    _plans.clear()


_current_stream: list = []  # the runtime's current_stream(device index), found on first use


def _device_index(device) -> int:
    """The index of a GPU device (the current one for "cuda" without an index); -1 for the CPU."""
    if device.type == "cpu":
        return -1
    index = device.index
    return index if index is not None else _torch().cuda.current_device()


def _stream(dev: int) -> int:
    """The current stream of device index ``dev`` as a number (0 on the CPU, ``dev`` -1: the
    interpreter runs in order)."""
    if dev < 0:
        return 0
    if not _current_stream:
        if _torch().version.hip:
            from ..runtime.hip_runtime import current_stream
        else:
            from ..runtime.cuda_driver import current_stream
        _current_stream.append(current_stream)
    return _current_stream[0](dev)


def _stream_workspace(device, dev: int, stream: int, numel: int, n: int) -> tuple:
    """(partials address, elements, counters address, count) for launches on ``stream`` of
    ``device`` needing ``numel`` float32 partials and ``n`` int32 counters.  One of each per
    (device, stream), reused by every launch there: launches of one stream run in order, each
    reads its partials within the launch and leaves its counters zero, so the next launch finds
    them as it needs them; another stream (which may run at the same time) gets its own.  Grown
    (replaced) when a launch needs more: the old tensors were allocated on this stream, so torch's
    allocator hands their memory to nothing that runs before this stream's launches finish."""
    key = (dev, stream)
    hit = _per_stream.get(key)
    if hit is not None and hit[1] >= numel and hit[3] >= n:
        return hit
    torch = _torch()
    if len(_per_stream) > 1024:  # (streams come and go: forget them all, as the allocator would)
        _per_stream.clear()
        _partials.clear()
        _counters.clear()
    part, cnt = _partials.get(key), _counters.get(key)
    if part is None or part.numel() < numel:
        part = _partials[key] = torch.empty(max(numel, 2 * (0 if part is None else part.numel())),
                                            dtype=torch.float32, device=device)
    if cnt is None or cnt.numel() < n:
        cnt = _counters[key] = torch.zeros(max(n, 2 * (0 if cnt is None else cnt.numel())), dtype=torch.int32,
                                           device=device)
    hit = _per_stream[key] = (part.data_ptr(), part.numel(), cnt.data_ptr(), cnt.numel())
    return hit


def _partials_and_counter(device, numel: int, n: int, per_capture: bool = False) -> tuple:
    """(float32 partials of ``numel`` elements, ``n`` int32 counters) as tensors, from the
    workspace of the current stream of ``device`` (``_stream_workspace``); new ones while a CUDA
    graph is being captured there (``_capturing``), the counters of the capture and stream
    (``_capture_counters``) when ``per_capture`` ("gcount")."""
    dev = _device_index(device)
    if _capturing(dev):
        torch = _torch()
        cnt = _capture_counters(device, dev, n) if per_capture else None
        return (torch.empty(numel, dtype=torch.float32, device=device),
                cnt if cnt is not None else torch.zeros(n, dtype=torch.int32, device=device))
    key = (dev, _stream(dev))
    _stream_workspace(device, dev, key[1], numel, n)
    return _partials[key][:numel], _counters[key][:n]


_graph_counters: dict = {}  # (device index, capture id, stream) -> (offset, count) in the device's pool ("gcount")
_counter_pools: dict = {}  # device index -> [int32 zeros made outside any capture, next free offset]
GRAPH_COUNTER_POOL = 1 << 18  # int32 counters a device keeps for captured split calls (1 MiB)


def graph_counter_pool(device, dev: int) -> None:
    """Make device ``dev``'s pool of zeroed counters for captured calls ("gcount"), once and outside
    any capture (a plan's first call that is not captured): made on the current stream, which is then
    waited for, so that a graph replayed on any stream finds it zero."""
    if dev < 0 or dev in _counter_pools or _torch().version.hip or _capturing(dev):
        return
    torch = _torch()
    pool = torch.zeros(GRAPH_COUNTER_POOL, dtype=torch.int32, device=device)
    torch.cuda.current_stream(device).synchronize()
    _counter_pools[dev] = [pool, 0]


def _capture_counters(device, dev: int, n: int):
    """``n`` zeroed int32 merge counters for a split call being captured on the current stream of
    ``device``, shared by every call captured on that stream in the same capture sequence ("gcount"):
    they replay in stream order, each leaving the counters zero, so the graph needs no fill kernel
    for them; a stream the capture forks into gets its own (its calls may run beside the others),
    and so does every capture (its graph may replay beside another's).  A slice of the device's
    pool (``graph_counter_pool``), never given to anything else (a graph replays the address for as
    long as it lives, and nothing says when it is destroyed).  None (the caller then makes zeros of
    its own, a fill kernel) where there is no pool, the pool is used up or the capture sequence
    cannot be told.  A call needing more counters than its stream's slice takes a new slice."""
    held = _counter_pools.get(dev)
    if held is None:
        return None
    from ..runtime.cuda_driver import capture_sequence

    stream = _stream(dev)
    seq = capture_sequence(stream)
    if seq is None:
        return None
    key = (dev, seq, stream)
    got = _graph_counters.get(key)
    if got is None or got[1] < n:
        pool, free = held
        if free + n > pool.numel():
            return None
        got = _graph_counters[key] = (free, n)
        held[1] = free + n
    return held[0][got[0]:got[0] + n]


_capture_query: list = []  # torch's "is the current stream capturing a graph?", found on first use


def _capturing(dev: int) -> bool:
    """Is a CUDA (HIP) graph being captured on the current stream (of the current device: torch's
    query)?  A capture takes its own partials and counters, allocated per call from the graph's
    memory pool as before the stream workspaces: a graph keeps the addresses it captured for every
    replay, and a stream workspace may be replaced (and its memory reused) by a later eager call
    that needs more, or be in use by eager calls on the capture stream while the graph replays."""
    query = _capture_function(dev)
    if query is None:
        return False
    try:
        return bool(query())
    except RuntimeError:  # (a build of torch without CUDA: nothing can be capturing)
        return False


def _stream_function(dev: int):
    """The cheapest callable giving the current stream of device index ``dev`` as ``_stream`` does:
    torch's raw-stream lookup once the CUDA runtime has settled it (no frames of ours around it),
    else ``_stream`` itself (HIP, the CPU, torch before CUDA is initialised)."""
    if dev >= 0 and not _torch().version.hip:
        from ..runtime.cuda_driver import current_stream_function

        settled = current_stream_function()
        if settled is not None:
            return settled
    return _stream


def _capture_function(dev: int):
    """``_capturing``'s query, for a caller that calls it per launch without ``_capturing``'s frame
    (None where nothing can be capturing: the CPU, a torch without the query)."""
    if dev < 0:
        return None
    if not _capture_query:
        _capture_query.append(getattr(_torch()._C, "_cuda_isCurrentStreamCapturing", None))
    return _capture_query[0]


def _dummy(device, dim: int):
    hit = _dummies.get((device, dim))
    if hit is None:
        torch = _torch()
        hit = _dummies[(device, dim)] = (torch.zeros((1, dim), dtype=torch.float32, device=device),
                                         torch.zeros(1, dtype=torch.float32, device=device),
                                         torch.zeros(1, dtype=torch.int32, device=device))
    return hit


def attention_decode(q, k, v, causal, scale, max_q, cache_lens, num_splits, want_lse=True):
    """``(out, lse)`` of a dense call with one query token (``ops.attention``'s result for it), or
    None for every other call (the general path).  Bad arguments raise the general path's
    ``ArgumentError`` (its checks run first).  ``want_lse=False`` allows lse None (a repeat call
    then lets the kernel write it to a scratch buffer).  A repeat call of a signature seen before
    is served by ``attention_dispatch.attention`` from the plan this leaves (``_DecodeRun``)."""
    ad = _ad()

    shape = getattr(q, "shape", None)
    if shape is None or len(shape) != 4 or shape[2] != 1:
        return None  # (first and cheaply: every dense call comes here)
    key = ad._dense_key(q, k, v, causal, scale, max_q, cache_lens, num_splits)
    if key is not None:
        fast = ad._dense_plans.get(key)
        if fast is not None:
            done = fast.run(q, k, v, cache_lens, want_lse)
            if done is not None:
                return done
    torch = _torch()
    if not isinstance(q, torch.Tensor):
        return None
    ad._check(q, k, v, causal, scale, None, None, max_q, cache_lens, num_splits)
    ad._check_lengths(q, k, None, None, cache_lens)
    B, H, _, D = q.shape
    if B * H == 0 or k.numel() == 0:
        return None  # (zeros and -inf: the general path)
    given = (q, k, v)
    q, k, v = (t if t.data_ptr() % 16 == 0 else t.clone() for t in (q, k, v))
    qv = q.reshape(B * H, D)
    qv = qv if qv.is_contiguous() else qv.contiguous()
    (kv, k_hc, k_rb, k_rh), (vv, v_hc, v_rb, v_rh) = ad._rows(k, False), ad._rows(v, False)
    plan = _plans.get(key) if key is not None else None
    if plan is None:
        plan = _make_plan(q, k, scale, num_splits, cache_lens is not None, k_hc, v_hc, (k_rb, k_rh, v_rb, v_rh))
        if key is not None:
            if len(_plans) > 4096:
                _plans.clear()
            _plans[key] = plan
    out = torch.empty((B, H, 1, D), dtype=q.dtype, device=q.device)
    lse = torch.empty((B, H, 1), dtype=torch.float32, device=q.device)
    lens = cache_lens.contiguous() if cache_lens is not None else ad._placeholder(torch.int32, q.device)
    if plan.splits == 1:
        opart, lpart, cnt = _dummy(q.device, D)
    else:
        ws, cnt = _partials_and_counter(q.device, plan.splits * B * H * (D + 1), plan.counters, plan.graph_counters)
        opart = ws[:plan.splits * B * H * D].view(plan.splits * B * H, D)
        lpart = ws[plan.splits * B * H * D:]
    plan.fwd(qv, kv, vv, out.view(B * H, D), lse.view(B * H), opart, lpart, cnt, lens, *plan.tail)
    if key is not None and plan.fwd.bound and all(
            x.data_ptr() == t.data_ptr() for x, t in zip((qv, kv, vv), given)) and (
            cache_lens is None or (cache_lens.is_contiguous() and cache_lens.device.type != "cpu")):
        ad._remember_plan(key, _DecodeRun(plan, given[0], torch))
    return out, lse


def _make_plan(q, k, scale, num_splits, has_cache, k_hc, v_hc, strides) -> _DecodePlan:
    ad = _ad()
    from .bound_kernel import BoundKernel

    B, H, _, D = q.shape
    Hkv, Sk = k.shape[1], k.shape[2]
    target = ad._target_of(q)  # (first: a device no kernel runs on, e.g. meta, gets its ArgumentError here,
    # before _shared_bytes asks torch.cuda about it)
    cfg = decode_config(D, ad._shared_bytes(q), H // Hkv, target, Sk)
    bH, bN = cfg[:2]
    slices = -(-(H // Hkv) // bH)
    plan = _DecodePlan()
    plan.splits = decode_splits(B * Hkv * slices, -(-Sk // bN), num_splits, D, cfg, ad._shared_bytes(q), ad._NUM_SMS)
    plan.counters = decode_counters(B * Hkv * slices, plan.splits, cfg[4])
    plan.graph_counters = "gcount" in cfg[4]
    if plan.graph_counters and plan.splits > 1:
        graph_counter_pool(q.device, _device_index(q.device))
    dtype = ad._dtype_name(q)
    flags = (H, Hkv, D, dtype, has_cache, plan.splits, k_hc, v_hc) + cfg
    # (through attention_dispatch's names: tests that compile its kernels for another target catch these too)
    plan.fwd = BoundKernel(ad._kernel(("decode",) + flags, lambda: decode_fwd(*flags), ad._target_of(q),
                                      pass_configs=decode_pass_configs(cfg[4])))
    scale = float(scale) if scale is not None else 1.0 / math.sqrt(D)
    plan.tail = (B, Sk, scale) + strides
    plan.dim, plan.heads, plan.rows = D, H, B * H
    return plan


class _DecodeRun:
    """A repeat call of a signature whose views are the given tensors (their metadata fixed by the
    key it is kept under: attention_dispatch._dense_key, which holds every tensor's type, dtype,
    shape, strides and device and every option), launched from pointers: one allocation (the
    output; the LSE too when it is wanted, else the kernel writes it to a never-read scratch
    buffer), the split partials and counters from the stream's workspace (``_stream_workspace``),
    the current stream looked up once and one launch.  Everything else is worked out here once."""

    __slots__ = ("capturing", "dev", "device", "extra", "fwd", "l_off", "lens", "make_lse", "n_counters", "numel",
                 "q_dense", "scratch", "split", "stream_of", "tail", "torch")

    def __init__(self, plan: _DecodePlan, q, torch):
        ad = _ad()
        self.fwd, self.tail = plan.fwd, plan.tail
        self.torch = torch  # (the module's at plan time: tests that poison its allocations poison these)
        self.device = q.device
        self.dev = _device_index(q.device)
        self.q_dense = q.is_contiguous()  # (the key holds q's strides: the same for every call of the plan)
        self.make_lse = None  # the LSE's allocation, made by the first call that wants the LSE (_lse_maker)
        self.scratch = ad._scratch_lse(plan.rows, q.device)  # never freed: its address stays valid
        self.lens = ad._placeholder(torch.int32, q.device).data_ptr()  # (kept alive by dispatch._placeholders)
        self.split = plan.splits > 1
        self.numel = plan.splits * plan.rows * (plan.dim + 1)
        self.l_off = plan.splits * plan.rows * plan.dim * 4  # the partial LSEs after the partial outputs
        self.n_counters = plan.counters
        self.extra = () if self.split else tuple(t.data_ptr() for t in _dummy(q.device, plan.dim))  # (never freed)
        # the split launch's per-call queries, looked up once (_capturing's and _stream's frames
        # cost ~0.14 us a call on this machine's CPU): which stream, is a graph being captured there
        self.capturing, self.stream_of = _capture_function(self.dev), _stream_function(self.dev)

    def _lse_maker(self, q):
        """The LSE's allocation: ``torch.empty_like`` of a template (jit/alloc_template.py: no
        keywords to parse per call)."""
        from ..jit.alloc_template import empty_maker

        torch = self.torch
        self.make_lse = empty_maker(torch, tuple(q.shape[:3]), torch.float32, self.device)
        return self.make_lse

    def run(self, q, k, v, cache_lens, want_lse=True):
        """(out, lse), lse None unless ``want_lse``; None for what the checked path handles (a start
        off a 16-byte boundary; the decode kernel switched off by ``KERNEL``)."""
        qp, kp, vp = q.data_ptr(), k.data_ptr(), v.data_ptr()
        cp = self.lens if cache_lens is None else cache_lens.data_ptr()
        if (qp | kp | vp | cp) & 15 or KERNEL == "old":
            return None
        torch = self.torch
        # (cheaper than shape + keywords; a contiguous q needs no format)
        out = torch.empty_like(q) if self.q_dense else torch.empty_like(q, memory_format=torch.contiguous_format)
        if want_lse:
            lse = (self.make_lse or self._lse_maker(q))()
            ep = lse.data_ptr()
        else:
            lse, ep = None, self.scratch
        if not self.split:
            ptrs = [qp, kp, vp, out.data_ptr(), ep, *self.extra, cp]
            # the compiled launch's C call from here (DIRECT_LAUNCH's comment: when); else through the frames
            fwd = self.fwd
            fl = fwd._fixed
            if (fl and fwd._fixed_scalars is self.tail and DIRECT_LAUNCH and fl._owner == _get_ident()
                    and _SYNC_KEY not in _SYNC_PROBE
                    and (fl._described is None or fl._described(ptrs) == fl._last_ptrs)):
                try:
                    if not fl.launch._compiled(fl._stream(fl.dev), ptrs):
                        return out, lse
                except Exception:  # noqa: BLE001 - (no compiled launch, or it launched nothing) the frames' path
                    pass
            fwd.launch_pointers(ptrs, self.tail)
            return out, lse
        dev, capturing = self.dev, self.capturing
        stream = self.stream_of(dev)  # (once: the workspace's key and the launch's stream)
        # Is a graph being captured there (_capturing, inline)?  Never on the legacy default
        # stream (0: CUDA and HIP refuse to capture on it, torch.cuda.graph says "non-default
        # stream"), the eager default: the query (a runtime call) only for another stream.
        if stream and capturing is not None:
            try:
                if capturing():
                    return None  # a graph capture: the checked path gives it partials and counters of its own
            except RuntimeError:  # (a build of torch without CUDA: nothing can be capturing)
                pass
        hit = _per_stream.get((dev, stream))  # (_stream_workspace's lookup, inline: a frame less per call)
        if hit is None or hit[1] < self.numel or hit[3] < self.n_counters:
            hit = _stream_workspace(self.device, dev, stream, self.numel, self.n_counters)
        wp, _, np_, _ = hit
        ptrs = [qp, kp, vp, out.data_ptr(), ep, wp, wp + self.l_off, np_, cp]
        fwd = self.fwd
        fl = fwd._fixed
        if (fl and fwd._fixed_scalars is self.tail and DIRECT_LAUNCH and dev >= 0 and fl._owner == _get_ident()
                and _SYNC_KEY not in _SYNC_PROBE
                and (fl._described is None or fl._described(ptrs) == fl._last_ptrs)):
            try:  # (as above; the stream is the one the workspace was taken for)
                if not fl.launch._compiled(stream, ptrs):
                    return out, lse
            except Exception:  # noqa: BLE001 - (no compiled launch, or it launched nothing) the frames' path
                pass
        fwd.launch_pointers(ptrs, self.tail, stream if dev >= 0 else None)
        return out, lse
