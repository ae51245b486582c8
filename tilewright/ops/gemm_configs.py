"""How ``tilewright.ops.matmul`` runs a shape: a shape heuristic per architecture, candidate lists
for tuning, and tuned winners kept in the persistent tuning cache (``autotune/cache.py``), which
override the heuristic.

A configuration (``GemmConfig``) names one of four library kernels (``kernels/gemm.py`` through
``ops/kernels.py``): ``direct`` (one block per output tile), ``splitk`` (the K range cut into
``splits`` slices, each a block of its own, then a reduction + epilogue kernel: for shapes with too
few output tiles to fill the GPU, e.g. decode M = 16..128 or K-heavy shapes), ``persistent``
(one block per SM looping over the tiles; sm_90 only, see ``matmul_persistent``; warp-specialized
there: ``passes/warp_specialize.py`` takes a K loop nested in the tile loop) and ``streamk`` (sm_90
only, ``matmul_streamk``: persistent, the full waves of tiles data-parallel and the tiles left over
cut into ``splits`` K slices spread over all SMs, then a fixup kernel: for tile counts that leave
the last wave part empty, e.g. 2000x3000 in 128x256 tiles, 1.45 waves).  ``tma_store``: C
leaves through a shared tile (``staged_epilogue`` of ``kernels/gemm.py``), on sm_90 as a TMA store
that overlaps what the block does next; its tile counts against the shared memory (``fit_shared``).
"""

from __future__ import annotations

import dataclasses
import functools

from ..autotune import cache as tuning_cache
from ..kernels.gemm import PDL_MODES

KINDS = ("direct", "splitk", "persistent", "streamk")


@dataclasses.dataclass(frozen=True)
class GemmConfig:
    kind: str = "direct"
    block_M: int = 128
    block_N: int = 128
    block_K: int = 32
    stages: int = 4
    threads: int = 128
    splits: int = 1          # splitk: slices of K; streamk: slices of each left-over tile
    atomic: bool = False     # splitk: fp32 atomics into one workspace slice (not bit-reproducible)
    group_M: int = 8         # persistent: tile rows per rasterization group
    wgmma: bool = False      # sm_90: tw.enable_wgmma
    ws: bool = False         # sm_90: tw.warp_specialize
    tma_store: bool = False  # C through a shared tile (a TMA store on sm_90); 16-bit outputs only
    # sm_90: thread-block clusters of (cx, cy) blocks: (2, 1) two neighbouring N tiles, whose A tile is
    # loaded once by TMA multicast; (1, 2) two neighbouring M tiles sharing B (direct only; CLUSTERS).
    # A persistent kernel's (2, 1) clusters walk pairs of N tiles in lockstep
    cluster: tuple = (1, 1)
    # tma_store: the C tile leaves in column chunks of this width through one block_M x store_cols shared
    # buffer (0: the whole tile at once; kernels.gemm.epilogue_chunks), so that a deeper ring fits beside it
    store_cols: int = 0
    # tma_store with store_cols: the chunks alternate between this many buffers (1 or 2); with two, a chunk is
    # written while the store of the one before still reads the other (kernels.gemm.staging_buffers)
    store_bufs: int = 1
    # direct + tma_store: the C tile takes the operand ring's memory once the mainloop is done with it
    # (passes/share_shared_memory places it there when the two do not fit one after the other), so it does
    # not count against the ring: four 48 KB stages and the whole 64 KB tile of 128x256 fit an H200
    c_in_ring: bool = False
    # persistent, sm_90a: two consumer warpgroups, each holding a whole block_M x block_N tile (threads=128: the
    # kernel is written for one), take the tiles of the schedule in turn, one's epilogue overlapping the other's
    # mainloop (passes/warp_specialize_pingpong.py); each keeps its own staged C tile
    pingpong: bool = False
    # programmatic dependent launch (sm_90; direct and persistent kernels, ``kernels.gemm.PDL_MODES``): "wait"
    # (the block waits for the previous kernel first: back-to-back calls overlap launch and block placement
    # with that kernel's tail), "pre" (the ring's mbarrier set-up and the descriptors' prefetch ahead of the
    # wait: ``tw.pdl_prologue``), "late" ("pre", and each block lets the next kernel start once its mainloop is
    # done: griddepcontrol.launch_dependents), "early" ("pre", and the trigger right after the wait); "" off
    pdl: str = ""
    # sm_90: the bytes a TMA load's descriptor asks L2 to fetch around each row of its box (pass config
    # ``tw.tma_l2_promotion``: 0, 64, 128, 256): 256 fetches the 128-byte B rows of a 64-wide tile's neighbour
    # along with its own (named ``l2p256``; 128, the default, is left out of the name)
    l2_promotion: int = 128

    def staged_epilogue(self, out_dtype: str):
        """``staged_epilogue`` of the kernels: False (plain stores: no TMA store, or an output that is not
        16-bit), True (the whole tile) or the chunk width."""
        if not self.tma_store or out_dtype not in ("float16", "bfloat16"):
            return False
        if not self.store_cols or self.store_cols >= self.block_N:
            return True
        return (self.store_cols, 2) if self.store_bufs == 2 else self.store_cols

    def pass_configs(self, arch: str) -> dict:
        if arch != "sm_90":
            return {}
        # both explicit: wgmma and warp specialization are the sm_90a defaults, and a configuration
        # says exactly which mainloop it was measured with
        return {"tw.enable_wgmma": self.wgmma, "tw.warp_specialize": self.ws,
                **({"tw.gemm_pingpong": True} if self.pingpong else {}),
                **({"tw.pdl_prologue": True} if self.pdl in ("pre", "late", "early") else {}),
                **({"tw.tma_l2_promotion": self.l2_promotion} if self.l2_promotion != 128 else {})}

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d) -> GemmConfig | None:
        """The stored form back, or None when it does not describe a configuration (a miss)."""
        try:
            d = dict(d)
            if "cluster" in d:
                d["cluster"] = tuple(d["cluster"])  # a JSON list
            cfg = cls(**d)
        except (TypeError, ValueError):
            return None
        return None if refusal(cfg) else cfg

    def short(self) -> str:
        s = f"{self.kind} {self.block_M}x{self.block_N}x{self.block_K} s{self.stages} t{self.threads}"
        if self.kind == "splitk":
            s += f" k/{self.splits}" + (" atomic" if self.atomic else "")
        if self.kind == "persistent":
            s += f" g{self.group_M}"
        if self.kind == "streamk":
            s += f" sk/{self.splits}"
        s += "".join(f" {n}" for n, on in (("wgmma", self.wgmma), ("ws", self.ws), ("tma-store", self.tma_store)) if on)
        s += f"/{self.store_cols}" if self.tma_store and self.store_cols else ""
        s += "x2" if self.tma_store and self.store_bufs == 2 else ""
        s += "/ring" if self.tma_store and self.c_in_ring else ""
        s += " pingpong" if self.pingpong else ""
        s += f" c{self.cluster[0]}x{self.cluster[1]}" if self.cluster != (1, 1) else ""
        s += f" pdl{self.pdl}" if self.pdl else ""
        return s + (f" l2p{self.l2_promotion}" if self.l2_promotion != 128 else "")

    @classmethod
    def parse(cls, text: str) -> GemmConfig:
        """The configuration ``short()`` printed (e.g. ``"direct 128x256x64 s3 t256 wgmma ws tma-store c2x1"``),
        to select one candidate by its name (bench/gemm.py prints them so)."""
        words = text.split()
        if not words or words[0] not in KINDS:
            raise ValueError(f"a GEMM configuration starts with its kind ({', '.join(KINDS)}): {text!r}")
        try:
            bm, bn, bk = (int(x) for x in words[1].split("x"))
            kw: dict = {"kind": words[0], "block_M": bm, "block_N": bn, "block_K": bk}
            for w in words[2:]:
                if w in ("wgmma", "ws", "atomic", "pingpong"):
                    kw[w] = True
                elif w.startswith("l2p"):  # l2p0, l2p64, l2p256
                    kw["l2_promotion"] = int(w[3:])
                elif w.startswith("pdl"):  # pdlwait, pdlpre, pdllate, pdlearly
                    if not w[3:] or w[3:] not in PDL_MODES:
                        raise ValueError(w)
                    kw["pdl"] = w[3:]
                elif w == "tma-store":
                    kw["tma_store"] = True
                elif w.startswith("tma-store/"):
                    kw["tma_store"] = True
                    for part in w.split("/")[1:]:
                        if part == "ring":
                            kw["c_in_ring"] = True
                        elif part.endswith("x2"):  # two buffers taken in turn
                            kw["store_cols"], kw["store_bufs"] = int(part[:-2]), 2
                        else:
                            kw["store_cols"] = int(part)
                elif w.startswith("sk/") or w.startswith("k/"):
                    kw["splits"] = int(w.split("/")[1])
                elif w[0] == "s":
                    kw["stages"] = int(w[1:])
                elif w[0] == "t":
                    kw["threads"] = int(w[1:])
                elif w[0] == "g":
                    kw["group_M"] = int(w[1:])
                elif w[0] == "c":
                    kw["cluster"] = tuple(int(x) for x in w[1:].split("x"))
                else:
                    raise ValueError(w)
        except (ValueError, IndexError) as e:
            raise ValueError(f"not a GEMM configuration: {text!r} ({e})") from None
        if kw["kind"] == "streamk":
            kw.setdefault("group_M", 0)  # (what streamk() makes; short() leaves it out)
        try:
            cfg = cls(**kw)
        except (TypeError, ValueError) as e:
            raise ValueError(f"not a GEMM configuration: {text!r} ({e})") from None
        why = refusal(cfg)
        if why:
            raise ValueError(f"not a GEMM configuration: {text!r}: {why}")
        return cfg


CLUSTERS = ((1, 1), (2, 1), (1, 2))


def refusal(cfg: GemmConfig) -> str | None:
    """Why ``cfg`` is not a configuration the kernels build as named, or None when it is."""
    if cfg.kind not in KINDS or cfg.splits < 1:
        return f"kind one of {', '.join(KINDS)} and splits >= 1"
    if cfg.cluster not in CLUSTERS or cfg.cluster != (1, 1) and cfg.kind not in ("direct", "persistent") \
            or cfg.kind == "persistent" and cfg.cluster == (1, 2):
        return "clusters 2x1 / 1x2 on direct kernels, 2x1 on persistent ones, none on the others"
    if cfg.store_cols:
        if not cfg.tma_store or cfg.kind not in ("direct", "persistent"):
            return "column chunks (tma-store/N) only with tma-store on direct or persistent kernels"
        if cfg.block_N % cfg.store_cols:
            return f"the chunk width {cfg.store_cols} must divide block_N {cfg.block_N}"
        # a chunk the TMA layout of the staging buffer holds (16-bit C: rows of 16, 32, 64 bytes or whole
        # 128-byte swizzle spans); another width (e.g. 48 or 96 columns) would quietly lose the TMA store
        # to per-thread stores and spill (checked against plan_tma_stores in tests/test_gemm_store_chunks.py)
        if cfg.store_cols not in (8, 16, 32) and cfg.store_cols % 64:
            return f"a chunk width of 8, 16, 32 or a multiple of 64 columns, not {cfg.store_cols}"
    if cfg.c_in_ring and (not cfg.tma_store or cfg.kind != "direct"):
        return "the C tile in the ring (tma-store/ring) only on direct kernels with tma-store"
    if cfg.pingpong and (cfg.kind != "persistent" or cfg.threads != 128 or not (cfg.wgmma and cfg.ws)):
        return "pingpong only on persistent wgmma ws kernels named with t128 (the threads of one consumer warpgroup)"
    if cfg.pdl and (cfg.pdl not in PDL_MODES or cfg.kind not in ("direct", "persistent")):
        return "pdl (pdlwait, pdlpre, pdllate, pdlearly) only on direct or persistent kernels"
    if cfg.l2_promotion not in (0, 64, 128, 256):
        return "an L2 promotion (l2pN) of 0, 64, 128 or 256 bytes"
    if cfg.store_bufs not in (1, 2) or cfg.store_bufs == 2 and (
            not cfg.store_cols or cfg.store_cols >= cfg.block_N or cfg.c_in_ring):
        return "two staging buffers (tma-store/Nx2) only with column chunks narrower than block_N, not in the ring"
    return None


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


H200_SHARED_BYTES = 227 * 1024  # what the CPU interpreter plans for (it mirrors an H200)


def fit_shared(cfg: GemmConfig, limit: int, elt_bytes: int = 2) -> GemmConfig:
    """``cfg`` with its operand ring shrunk until it fits ``limit`` bytes of shared memory / LDS
    (64 KiB on AMD, 99 KiB on consumer NVIDIA): first down to three stages, then halving block_K
    (to 32), then two stages.  A ``tma_store`` configuration also holds its 16-bit C tile (a
    128x256 tile is 64 KiB: four 128x256x64 stages no longer fit an H200, three do; in 128-column
    chunks, ``store_cols``, 32 KiB and four stages fit)."""
    def need(c):
        staged = c.block_M * (c.store_cols or c.block_N) * 2 * c.store_bufs if c.tma_store else 0
        staged *= 2 if c.pingpong else 1  # (each consumer warpgroup has its own)
        ring = c.stages * (c.block_M + c.block_N) * c.block_K * elt_bytes
        return max(ring, staged) if c.c_in_ring else ring + staged

    while need(cfg) > limit:
        if cfg.stages > 3:
            cfg = dataclasses.replace(cfg, stages=cfg.stages - 1)
        elif cfg.block_K > 32:
            cfg = dataclasses.replace(cfg, block_K=cfg.block_K // 2)
        elif cfg.stages > 2:
            cfg = dataclasses.replace(cfg, stages=cfg.stages - 1)
        else:
            break
    return cfg


def choose_splits(M: int, N: int, K: int, cfg: GemmConfig, num_sms: int, max_splits: int = 8) -> int:
    """Slices of K that bring the block count up to about one wave, each slice at least four K
    steps long (1 when the output tiles alone fill the GPU)."""
    tiles = _ceil(M, cfg.block_M) * _ceil(N, cfg.block_N)
    if tiles * 2 > num_sms:
        return 1
    return max(1, min(num_sms // tiles, _ceil(K, cfg.block_K) // 4, max_splits))


def streamk(M: int, N: int, K: int, base: GemmConfig, num_sms: int) -> GemmConfig | None:
    """``base``'s tiles as a data-parallel + stream-K configuration (``kind="streamk"``, the slices
    from ``kernels.gemm.streamk_plan``), or None when it would save the busiest block less than an
    eighth of its K steps (the tiles fill whole waves, or the last wave is nearly full: 8192x8192 in
    128x256 tiles is 15.5 waves, 252 steps instead of 256 would not pay for the fixup)."""
    from ..kernels.gemm import streamk_plan, streamk_steps

    tiles = _ceil(M, base.block_M) * _ceil(N, base.block_N)
    k_steps = _ceil(K, base.block_K)
    splits = streamk_plan(tiles, k_steps, num_sms)
    if 8 * streamk_steps(tiles, k_steps, num_sms, splits) > 7 * streamk_steps(tiles, k_steps, num_sms, 1):
        return None
    return dataclasses.replace(base, kind="streamk", splits=splits, group_M=0, tma_store=False)


# 128 x N x K with long K (128x8192x8192: 64 tiles of 128x128, 32 of 128x256 on 132 SMs): the
# configurations timed for it, the heuristic's first.  Each line says which measurement it rests on.
ROWS128_HOPPER = (
    # split-K, two K halves of 128x128 tiles: 0.79-0.80x cuBLAS (bench/results/2026-12-01-0835-gemm-*,
    # -0954-gemm-*; four quarters of 128x256 tiles, 256 threads: 0.58-0.60x in the same runs)
    GemmConfig("splitk", 128, 128, 64, 4, 128, splits=2, wgmma=True),
    # split-K, 64x256 tiles (two tile rows, so A is read by half as many blocks per column):
    # 0.69x (bench/results/2026-12-01-1411-gemm-weak-*, fp16)
    GemmConfig("splitk", 64, 256, 64, 4, 128, splits=2, wgmma=True),
    # data-parallel + stream-K (here all stream-K: less than one wave of tiles), one launch for the
    # slices and a fixup instead of split-K's partial + reduction over the whole of C: 0.70-0.72x
    # (128x128, 2 slices) and 0.60-0.61x (128x256, 4 slices) in -1411-gemm-weak; its tiles leave
    # through plain stores, which cost the persistent kernel half its speed before TMA stores
    GemmConfig("streamk", 128, 128, 64, 4, 128, splits=2, group_M=0, wgmma=True, ws=True),
    GemmConfig("streamk", 128, 256, 64, 4, 256, splits=4, group_M=0, wgmma=True, ws=True),
    # cuBLAS's tiles for this shape without its 1x2 cluster (128x64, 128 blocks, no split, 8 stages:
    # bench/results/2026-12-01-1522-ncu-*), two consumer warpgroups: 0.90-0.91x in -1526-gemm-weak-*
    # (the heuristic's choice now); one warpgroup 0.66x; the split-K halves warp-specialized 0.76x or
    # six stages deep 0.77x (kept off the list)
    GemmConfig("direct", 128, 64, 64, 8, 256, wgmma=True, ws=True),
    GemmConfig("direct", 128, 64, 64, 8, 128, wgmma=True),
    # not yet timed: the same with C by TMA store, a ninth stage, or 128-deep K steps
    GemmConfig("direct", 128, 64, 64, 8, 256, wgmma=True, ws=True, tma_store=True),
    GemmConfig("direct", 128, 64, 64, 9, 256, wgmma=True, ws=True),
    GemmConfig("direct", 128, 64, 128, 4, 256, wgmma=True, ws=True),
    # not yet timed: cuBLAS's tiles as they are in row-major terms.  cuBLAS computes C^T = B^T A^T, so its
    # 128x64 tiles with a 1x2 cluster (grid 2x64, -1522-ncu-weak-gemm-*) are 64 rows x 128 columns of C, the
    # pair two neighbouring N tiles sharing (multicasting) their 64-row A tile: each block streams a
    # 256-byte-wide strip of B (128-byte strips for 128x64 tiles) and the two M halves of a strip run side
    # by side, reading it from DRAM once.  Two consumer warpgroups of 64x64 each, or one of 64x128
    GemmConfig("direct", 64, 128, 64, 8, 256, wgmma=True, ws=True, tma_store=True),
    GemmConfig("direct", 64, 128, 64, 8, 128, wgmma=True, ws=True, tma_store=True),
    GemmConfig("direct", 64, 128, 64, 8, 256, wgmma=True, ws=True, tma_store=True, cluster=(2, 1)),
    GemmConfig("direct", 64, 128, 64, 8, 256, wgmma=True, ws=True, tma_store=True, cluster=(1, 2)),
)


def chunked_store_candidates() -> list[GemmConfig]:
    """sm_90, more than 128 rows: four stages with C leaving by TMA store in column chunks through a 32 KB
    buffer (``store_cols``), which with the whole 64 KB tile did not fit.  At 4096^3 the best were one
    128x256 block per tile with three stages and the whole tile by TMA store (680 TFLOP/s fp16), four
    stages and plain stores (656), three and plain (633): bench/results/2026-12-01-1926-gemm-weak-*.
    Not yet timed: candidates only."""
    def c(kind, bm, bn, cols, **kw):
        return GemmConfig(kind, bm, bn, 64, 4, 256, wgmma=True, ws=True, tma_store=True, store_cols=cols, **kw)

    return [c("direct", 128, 256, 128), c("direct", 128, 256, 64),
            # cuBLAS's kernel at 4096^3 computes C^T = B^T A^T in 256x128 tiles of C^T with a 1x2 cluster: 128x256
            # tiles of C whose cluster pairs two neighbouring M tiles sharing (multicasting) their B tile
            c("direct", 128, 256, 128, cluster=(1, 2)),
            # 256x128 tiles (each consumer warpgroup 128x128: two m64n128 wgmmas a k-step), 64-column chunks
            c("direct", 256, 128, 64),
            # persistent: the producer loads tile i + 1 while the consumers store tile i chunk by chunk
            c("persistent", 128, 256, 128, group_M=8), c("persistent", 256, 128, 64, group_M=8),
            # the whole tile at once, in the memory of the ring (idle after the mainloop of a direct kernel)
            GemmConfig("direct", 128, 256, 64, 4, 256, wgmma=True, ws=True, tma_store=True, c_in_ring=True),
            GemmConfig("direct", 256, 128, 64, 4, 256, wgmma=True, ws=True, tma_store=True, c_in_ring=True)]


def s10_candidates(M: int, N: int, K: int) -> list[GemmConfig]:
    """sm_90 candidates for the two shapes furthest below cuBLAS (issue 8), timed once (below), not the heuristic's.

    Short K over about two waves of tiles (2000x3000x1000: 16 K steps a tile, 256 tiles of 128x192 on 132
    SMs): every tiling of 2000x3000 leaves the busiest SM the same 128 * 192 * 2 output elements (two
    128x192 tiles, one 256x192 or 192x256, three 128x128), so what is left to win is the cost per tile --
    the ring's fill and the epilogue.  One 256x192 tile per block (one wave, 128 of 132 SMs; each consumer
    warpgroup 128x192, 192 accumulators a thread) pays them once instead of twice, with its A tile
    multicast to the neighbouring N tile (c2x1) or its B tile to the neighbouring M tile (c1x2), C leaving
    in 64-column chunks or, with a fourth stage, from the ring's memory; the persistent 128x192 pairs of
    the heuristic get a fifth stage, C leaving in 64-column chunks (16 KB) so that the ring fits beside
    it (and the same chunks at four stages, to tell the two changes apart).

    128 rows over many columns, long K (128x8192x8192, memory-bound on B): the heuristic's 128x64 tiles
    with their A tile multicast to the neighbouring N tile (c2x1: half the L2 reads of A, which is
    read by all 128 blocks), 128-deep K steps (half as many barrier round trips per byte) and one
    consumer warpgroup of 128x64 instead of two of 64x64.

    Timed on the H200 (mid-session run of 2026-12-02 02:07 UTC, TFLOP/s fp16 / bf16; cuBLAS 542 / 546 and
    469 / 475): at 2000x3000x1000 the heuristic's persistent 128x192 pairs 484 / 477, one 256x192 tile per
    block 467 / 476 (c2x1 470 / 483, c1x2 472 / 482, C in the ring 456 / 471), the pairs with 64-column
    chunks 461 / 454 (a fifth stage 441 / 449): no change there.  At 128x8192x8192 one consumer warpgroup
    423 / 437 against 411 / 432 for the heuristic's two: the heuristic's choice since."""
    def ws(kind, bm, bn, bk, stages, threads=256, **kw):
        return GemmConfig(kind, bm, bn, bk, stages, threads, wgmma=True, ws=True, tma_store=True, **kw)

    # (left off the list after that run, each losing in both dtypes: the 256x192 tile with C in the ring, the
    # persistent pairs with 64-column chunks at four or five stages, 128-deep K steps and A multicast for
    # 128 rows; their kernels stay tested in tests/test_s10_gemm_candidates.py)
    if M > 128:
        chunked = ws("direct", 256, 192, 64, 3, store_cols=64)
        return [chunked] + [dataclasses.replace(chunked, cluster=c) for c in ((2, 1), (1, 2))
                            if _ceil(N, 192) >= c[0] and _ceil(M, 256) >= c[1]]
    if M > 64:
        # (the heuristic's until that run: two consumer warpgroups of 64x64, for comparison)
        return [ws("direct", 128, 64, 64, 8)]
    return []


def s11_candidates(M: int, N: int, K: int) -> list[GemmConfig]:
    """sm_90 configurations of session 11 (issue 8), timed once and kept off ``candidates`` (none won): C in
    column chunks that alternate between two
    shared buffers (``store_bufs=2``: a chunk is written while the store of the one before still reads the
    other; the single buffer of ``store_cols`` waits for each chunk's store before the next).

    cuBLAS at 2000x3000x1000 runs our tiling (128x192 in C's terms, clusters of two sharing A) with five
    stages and 221 KB of shared memory (bench/results/2026-12-01-1522-ncu-weak-gemm-*): five 40 KB stages
    and two 128x32 chunk buffers (16 KB) are 216 KB.  Our fifth stage beside 64-column chunks in one buffer
    lost (441 / 449 TFLOP/s against 484 / 477, ``s10_candidates``): the chunks' serialized stores are what
    the second buffer removes.  Also the same double chunks at four stages (64 columns: two changes told
    apart), and for the many-wave shapes the heuristic's persistent 128x256 in 64-column chunk pairs.

    Timed on the H200 (mid-session run of 2026-12-02 05:02 UTC, one round, TFLOP/s fp16 / bf16): at
    2000x3000x1000 (cuBLAS 532 / 535) the heuristic's s4 pairs with the whole tile 474 / 473, s5 /32x2 c2x1
    441 / 442, s4 /64x2 c2x1 471 / 472, s5 /32x2 without the cluster 400 / 405, and the s10 control s5 /64
    (one buffer) c2x1 443 / 445: the second buffer changes nothing measurable, the fifth stage is what loses.
    At 4096^3 persistent 128x256 /64x2 727 / 748 against /128's 727 / 753; at 8192x8192x1024 s5 128x192 /32x2
    574 / 614 and 128x256 /64x2 664 / 691 against the heuristic's 671 / 697.  Selectable by name (``store_bufs``);
    the kernels stay tested (tests/test_s11_gemm_staging.py, tests/test_gpu_s11_gemm.py)."""
    def p(bm, bn, stages, cols, cluster=(1, 1)):
        return GemmConfig("persistent", bm, bn, 64, stages, 256, group_M=8, wgmma=True, ws=True, tma_store=True,
                          store_cols=cols, store_bufs=2, cluster=cluster)

    if M <= 128:
        return []
    pair = (2, 1) if _ceil(N, 192) >= 2 else (1, 1)
    return [p(128, 192, 5, 32, pair), p(128, 192, 4, 64, pair), p(128, 192, 5, 32), p(128, 256, 4, 64)]


def s12_candidates(M: int, N: int, K: int) -> list[GemmConfig]:
    """Session 12: ping-pong persistent GEMMs (``GemmConfig.pingpong``, passes/warp_specialize_pingpong.py): two
    consumer warpgroups each own a whole tile and take the block's tiles in turn, one's epilogue overlapping the
    other's mainloop -- the per-tile epilogue and ramp that 2000x3000x1000 (about two 128x192 tiles per SM) pays.
    128x128 tiles (128 accumulators a thread, four or five stages beside two 32 KB C tiles, or six beside two 16 KB
    buffers of 64-column chunks: the two warpgroups share one ring, so it runs deeper) and 128x192 (192
    accumulators: no spills without an activation; gelu_tanh spills, so not for those) in 64-column chunks, 64x256
    (128 accumulators, one m64n256 wgmma per K slice: less shared-memory traffic per flop than two m64n128); and
    128x128 and 128x192 in clusters of two blocks walking pairs of N tiles (A multicast) where the tiles are few.
    After the mid-session run (2026-12-02 07:48 UTC: ping-pong 128x192 won at 8192x8192x1024, lost where the tiles
    are few): 128x192 five stages deep beside 32-column chunks (a chunk's store waited for before the next: slower
    stores, which ping-pong hides, for a deeper ring), with and without clusters.
    Not yet run on a GPU: selectable by name only (bench/gemm.py --configs), off the candidate lists that tuning times
    until the H200 has run them."""
    def p(bn, stages, cols=0, bm=128):
        return GemmConfig("persistent", bm, bn, 64, stages, 128, group_M=8, wgmma=True, ws=True, tma_store=True,
                          store_cols=cols, pingpong=True)

    if M <= 128:
        return []
    out = [p(128, 4), p(128, 5), p(128, 6, 64), p(192, 4, 64), p(256, 4, bm=64), p(192, 5, 32)]
    if _ceil(M, 128) * _ceil(N, 128) <= 4 * 132 and _ceil(N, 128) >= 2:
        # few tiles per block, as where the heuristic's persistent 128x192 takes clusters of two (A multicast)
        out += [dataclasses.replace(c, cluster=(2, 1)) for c in (p(128, 4), p(192, 4, 64), p(192, 5, 32))]
    return out


def s14_candidates(M: int, N: int, K: int) -> list[GemmConfig]:
    """Session 14 (issue 8): configurations of the existing kernels for the shapes still below 0.95x cuBLAS, and
    the TMA descriptors' L2 promotion (``GemmConfig.l2_promotion``, named ``l2pN``).  Selectable by name, kept off
    ``candidates``: in the H200 run of 2026-12-02 15:43 UTC (bench/results/2026-12-02-1543-gemm-weak-*, four
    rounds, fp16 / bf16 TFLOP/s) each lost or tied in both dtypes:

    - 128x8192x8192 (the heuristic's ``direct 128x64x64 s8 t128 wgmma ws tma-store pdllate``: 431.5 / 445.9 in
      round 1): a ninth stage with C in the ring's memory 322.7 / 321.2 (0.61-0.68x cuBLAS in every round), A
      multicast under pdllate (c2x1) 404.9 / 413.5 (0.85-0.87x), 256-byte L2 promotion 430.6 / 444.5 (ties);
    - 2000x3000x1000 (the heuristic's ping-pong pairs, pdlearly: 500.1 / 503.6): l2p256 445.7 / 448.5 (0.82-0.84x
      in every round), five stages beside 32-column chunks 476.5 / 483.2;
    - 4096^3 (persistent 128x256, 732.1 / 758.5): l2p256 660.9 / 758.4, then 732 / 757.1, 706.8 / 741.4, 710.7 /
      701.5 (no win in both dtypes of any round).

    The run of 16:09 UTC (bench/results/2026-12-02-1609-gemm-weak-*, four rounds, each configuration timed twice
    a round, forwards then backwards): at 128x8192x8192 the heuristic's pdllate 450.7 / 456.6, 455.4 / 457.8,
    450.7 / 456.5, 451.8 / 453.3 against pdlearly 442.5 / 448.5, 454.7 / 457.6, 456.5 / 456.5, 454.1 / 455.8 and
    no L2 promotion (l2p0) 445.9 / 457.1, 454.1 / 458.9, 451.4 / 458.8, 452.5 / 454.4 (l2p64 alike): within 1%,
    neither ahead in both dtypes of every round, so no change; a 6-stage ring 401.7-430.3 and 128-deep K steps at
    4 stages 433.4-440.4 lost.  At 2000x3000x1000 the heuristic's pdlearly 502.8 / 512.4, 511.5 / 511.9, 511.9 /
    511.5, 510.8 / 511.5 led pdllate in all eight (round, dtype) pairs (498.7 / 510.8 ... 508.3 / 507.4); l2p0 and
    l2p64 tied with it (+-0.4%).  At 4096^3 whichever configuration was timed first read highest (the GPU's clocks
    fall under a sustained load: bench/gemm.py ``warm_up``), so l2p0 / l2p64 there are not told apart."""
    if M > 128:
        pairs = "persistent 128x192x64 s4 t128 g8 wgmma ws tma-store/64 pingpong c2x1 pdlearly"
        return [GemmConfig.parse(pairs + " l2p256"),
                GemmConfig.parse("persistent 128x192x64 s5 t128 g8 wgmma ws tma-store/32 pingpong c2x1 pdlearly"),
                GemmConfig.parse("persistent 128x256x64 s4 t256 g8 wgmma ws tma-store/128 l2p256")]
    if M > 64:
        return [GemmConfig.parse("direct 128x64x64 s6 t128 wgmma ws tma-store pdllate"),
                GemmConfig.parse("direct 128x64x128 s4 t128 wgmma ws tma-store pdllate"),
                GemmConfig.parse("direct 128x64x64 s9 t128 wgmma ws tma-store/ring pdllate"),
                GemmConfig.parse("direct 128x64x64 s8 t128 wgmma ws tma-store c2x1 pdllate"),
                GemmConfig.parse("direct 128x64x64 s8 t128 wgmma ws tma-store pdllate l2p256")]
    return []


def cluster_candidates(M: int, N: int, K: int) -> list[GemmConfig]:
    """sm_90 configurations whose blocks run in thread-block clusters of two, the shared operand tile
    loaded once per cluster by TMA multicast (``passes/cluster_multicast.py``): direct ones along x or
    y, persistent ones along x (pairs of N tiles, ``kernels.gemm.matmul_persistent``).  cuBLAS runs
    clusters of two at 4096^3 (256x128 tiles, bench/results/2026-12-01-1813-ncu-gemm-4096-*), 128x8192x8192
    and 2000x3000x1000 (-1522-ncu-weak-gemm-*).  Not yet timed: candidates only, never the heuristic's
    choice.  A cluster along an axis of a single tile would only double the grid: left out."""
    def ws(bm, bn, stages, tma_store=False):
        return GemmConfig("direct", bm, bn, 64, stages, 256, wgmma=True, ws=True, tma_store=tma_store)

    if M > 128:
        # the ops.matmul tile at 4096^3 (128x256) and cuBLAS's (256x128: two consumer warpgroups of
        # 128x128 each), C by TMA store (three stages) or a fourth stage instead
        tiles = [ws(128, 256, 3, True), ws(128, 256, 4), ws(256, 128, 3, True), ws(256, 128, 4)]
        clusters = [(2, 1), (1, 2)]
        # and the persistent kernels of the heuristic (128x192, TMA stores) and of 8192^3-like shapes,
        # their clusters walking pairs of N tiles
        persistent = [GemmConfig("persistent", 128, 192, 64, 4, 256, group_M=8, wgmma=True, ws=True, tma_store=True),
                      GemmConfig("persistent", 128, 256, 64, 3, 256, group_M=8, wgmma=True, ws=True, tma_store=True)]
        if _ceil(N, 128) >= 2:
            out_p = [dataclasses.replace(c, cluster=(2, 1)) for c in persistent]
        else:
            out_p = []
    elif M > 64:
        # a few rows (128x8192x8192): cuBLAS's 128x64 tiles in pairs of neighbouring N tiles sharing A
        tiles = [ws(128, 64, 8)]
        clusters = [(2, 1)]
        out_p = []
    else:
        return []
    out = []
    for c in tiles:
        for cx, cy in clusters:
            if _ceil(N, c.block_N) >= cx > 1 or _ceil(M, c.block_M) >= cy > 1:
                out.append(dataclasses.replace(c, cluster=(cx, cy)))
    return out + out_p


def s13_candidates(M: int, N: int, K: int, dtype: str = "float16", num_sms: int = 132) -> list[GemmConfig]:
    """sm_90: the heuristic's configuration for the shape with each other programmatic dependent launch mode
    (``GemmConfig.pdl``: none, "wait", "late", "early"), for back-to-back calls (a model's layers, the bench's
    CUDA graph of ten calls): the next call's launch, block placement and -- with "pre", "late", "early" -- its
    ring set-up overlap the tail of the one before.  Selectable by name (``pdlwait``, ``pdlpre``, ``pdllate``,
    ``pdlearly``).

    Timed in the mid-session H200 run of 2026-12-02 11:30 UTC (measure13, two rounds, fp16 / bf16) and the final
    one of 12:03 (measure13b, three rounds): at 128x8192x8192 pdllate won every pair (the heuristic's since;
    figures there), at 2000x3000x1000 pdlwait in the first run, pdlearly in every round of the second (the
    heuristic's since; figures there).  In the final run, at 8192x8192x1024 every mode lost to plain in at least
    two of six (round, dtype) pairs (pdlwait 627.8 / 673.4 against 672.1 / 730.7 in round 2), at 4096^3 likewise
    (pdlearly 665.9 / 723.6 against 675.1 / 751.3 in round 2): plain there.  In the first run at 8192x8192x1024
    pdlwait 706.3 / 736.1 and 694.7 / 719.1 TFLOP/s against 687.8 / 702.3 and 698.9 / 712.1 without, pdlpre and
    pdllate lost the second round (664.5 / 675.9, 649.1 / 731.3); at 4096^3
    every mode lost somewhere (pdlpre 662 against 689.1 fp16, pdlwait 717 against 761 bf16, round 2) -- the
    round-to-round spread there was 5%.  128x128 tiles for 128 rows (one block per tile, 64 blocks: half the L2
    reads of A) lost badly: 364-367 / 356-364 TFLOP/s with one consumer warpgroup, 336-338 / 328-336 with two,
    against 427-440 for the 128x64 tiles (ncu: the 128x64 kernel at 76.7% of DRAM bandwidth and 82.7% of L2,
    cuBLAS's at 79.5% and 83.6%): the bytes per SM, not the L2 reads of A, are the limit there (selectable by
    name, ``direct 128x128x64 s6 t128 wgmma ws tma-store``)."""
    base = heuristic(M, N, K, dtype, "sm_90", num_sms)
    if base.kind not in ("direct", "persistent"):
        return []
    return [dataclasses.replace(base, pdl=mode) for mode in ("", "wait", "late", "early") if mode != base.pdl]


def heuristic(M: int, N: int, K: int, dtype: str, arch: str, num_sms: int, smem_limit: int = H200_SHARED_BYTES,
              activation: str = "none", out_dtype: str | None = None) -> GemmConfig:
    """The configuration for a shape without a tuned entry (measured on an H200 for sm_90: see
    bench/results; elsewhere the mma.sync/MFMA table that was there before).  ``activation`` and
    ``out_dtype`` (None: ``dtype``) describe the epilogue: the ping-pong kernel is chosen only where its
    measured form applies (a 16-bit C by TMA store, and not gelu_tanh, whose polynomial spills beside
    the 192 accumulators of a 128x192 ping-pong tile)."""
    hopper = arch == "sm_90"
    if hopper and M <= 16 and _ceil(N, 64) >= num_sms * 9 // 10:
        # decode over enough columns to fill the GPU: thin deep blocks, no split (1.17-1.20x cuBLAS at
        # 16x8192x8192 in bench/results/2026-12-01-0835-gemm-* and -0954-gemm-*, split-K 1.09x)
        return fit_shared(GemmConfig("direct", 16, 64, 256, 4, 128), smem_limit)
    if hopper and 64 < M <= 128 and _ceil(N, 64) * 4 >= num_sms * 3:
        # a few rows over enough columns for about a wave of 128x64 tiles: one block per tile, no
        # split, an 8-deep ring and warp-specialized consumers (cuBLAS's tiles for 128x8192x8192, less
        # its cluster): 0.90x / 0.91x cuBLAS fp16 / bf16 against 0.79x / 0.80x for two K halves of
        # 128x128 tiles (bench/results/2026-12-01-1526-gemm-weak-*).  C leaves by TMA store (16 KB beside the
        # 192 KB ring): 425 TFLOP/s fp16 against 401 without at 128x8192x8192 (0.89x / 0.84x cuBLAS in the
        # mid-session H200 run of 2026-12-01 22:32 UTC, measure9; 423 / 417 in -1926-gemm-weak-*), while
        # cuBLAS's 64x128 tiles, with or without clusters, lost (0.69-0.83x).  One consumer warpgroup of 128x64
        # instead of two of 64x64 (threads=128): 423 / 437 TFLOP/s fp16 / bf16 against 411 / 432 for two, with
        # 128-deep K steps 420 / 424 and A multicast (c2x1) 391 / 397 (mid-session H200 run of 2026-12-02 02:07
        # UTC, measure10; cuBLAS 469 / 475 there).  Launched with programmatic dependent launch, the trigger after
        # the mainloop (pdllate): 439.9 / 438.5 TFLOP/s fp16 and 451.9 / 447.6 bf16 in two rounds against 431.6 /
        # 426.7 and 437.7 / 426.2 without (0.93-0.94x / 0.96-0.98x cuBLAS against 0.91 / 0.93x; pdlwait and
        # pdlpre in between), mid-session H200 run of 2026-12-02 11:30 UTC, measure13.  The final run (12:03 UTC,
        # three rounds) confirmed it: pdllate 451.3 / 448.9, 447.4 / 413.7, 447.2 / 443.3 against 443.4 / 442.3,
        # 440.1 / 439.3, 433.2 / 431.2 plain (the 413.7: measured first in its round, a place that run penalized);
        # pdlearly 453 / 448.9, 450.7 / 449, 444.1 / 445.2 -- not ahead of pdllate in every round, so not taken
        # (session 14, two H200 runs: pdlearly, L2 promotion 0 / 64 / 256 bytes, six or nine stages, A multicast
        # and 128-deep K steps tied or lost again: ``s14_candidates``)
        return fit_shared(GemmConfig("direct", 128, 64, 64, 8, 128, wgmma=True, ws=True, tma_store=True, pdl="late"),
                          smem_limit)
    if hopper and 64 < M <= 128 and _ceil(N, 128) < num_sms:
        # a few rows and fewer columns: K ranges of 128x128 tiles fill the GPU (two halves: 0.79-0.80x
        # at 128x8192x8192 in -0835-gemm-* and -0954-gemm-*, against 0.58-0.60x for four quarters of
        # 128x256 tiles)
        tile = fit_shared(GemmConfig("direct", 128, 128, 64, 4, 128, wgmma=True), smem_limit)
        splits = choose_splits(M, N, K, tile, num_sms)
        return dataclasses.replace(tile, kind="splitk", splits=splits) if splits > 1 else tile
    if M <= 16:
        base = GemmConfig("direct", 16, 128, 128, 4, 128)
    elif M <= 64:
        base = GemmConfig("direct", 64, 128, 64, 4, 128, wgmma=hopper)
    elif hopper:
        base = GemmConfig("direct", 128, 256, 64, 4, 256, wgmma=True, ws=True)
    elif M <= 128:
        base = GemmConfig("direct", 64, 128, 64, 4, 128)
    else:
        base = GemmConfig("direct", 128, 128, 32, 4, 128)
    base = fit_shared(base, smem_limit)
    splits = choose_splits(M, N, K, base, num_sms)
    if splits > 1:
        return dataclasses.replace(base, kind="splitk", splits=splits)
    if hopper and base.ws:
        if K <= 1024 and _ceil(M, 128) * _ceil(N, 128) >= 2 * num_sms:
            # persistent 128x192 blocks, each tile's TMA store and the next tile's loads overlapping its
            # mainloop, for short K over at least two waves of 128x128 tiles (many waves of tiles with long
            # K went here too until the chunked store below beat it at 8192^3)
            # (bench/results/2026-12-01-1526-gemm-weak-* and -1542-gemm-weak-*, TFLOP/s fp16 / bf16):
            # 8192x8192x1024  688 / 705 against 612 / 645 (persistent 128x256), 536 / 557 (one 128x256
            #                 block per tile)
            # 2000x3000x1000  437 / 431 against 367 / 368 (persistent 128x128), 298 / 302 (one block per
            #                 128x256 tile: 1.45 waves, where 128x192 tiles make 1.94)
            # With few tiles per block (at most 4 waves of 128x192), clusters of two blocks taking
            # neighbouring N tiles, A multicast: 2000x3000x1000 fp16 485 TFLOP/s against 436 without
            # (bench/results/2026-12-01-1926-gemm-weak-*), while at 8192^3 (21 waves) the cluster's
            # tile pairs lost (582 against 635), so only there.
            pairs = _ceil(M, 128) * _ceil(N, 192) <= 4 * num_sms and _ceil(N, 192) >= 2
            if _ceil(M, 128) * _ceil(N, 192) > 4 * num_sms and pingpong_epilogue(activation, out_dtype or dtype):
                # more than four waves of 128x192 tiles: two consumer warpgroups taking the tiles in turn, one's
                # epilogue under the other's mainloop (passes/warp_specialize_pingpong.py): 8192x8192x1024
                # 719.9 / 739.7 TFLOP/s fp16 / bf16 = 1.03x / 1.03x cuBLAS against 693.8 / 713.2 for the
                # persistent 128x192 of two warpgroups per tile below (mid-session H200 run of 2026-12-02 07:48
                # UTC, measure12).  Where the tiles are few it lost: 2000x3000x1000 429.8 / 429.3 against the
                # clusters' 483.2 / 477; and at 4096^3 (long K: 128x256 below) 660.8 / 653.5 against 748.2 / 778.2
                return fit_shared(GemmConfig("persistent", 128, 192, base.block_K, 4, 128, wgmma=True, ws=True,
                                             group_M=8, tma_store=True, store_cols=64, pingpong=True), smem_limit)
            if pairs and pingpong_epilogue(activation, out_dtype or dtype):
                # the clusters' tile pairs as ping-pong warpgroups too (final H200 run of 2026-12-02 08:42 UTC,
                # measure12b, TFLOP/s fp16 / bf16): 2000x3000x1000 483.4 / 484.1 against 468.7 / 471.5 for the
                # clusters of two warpgroups per tile below, 430.8 / 419.4 for ping-pong without clusters.  With
                # programmatic dependent launch, the trigger right after the wait (pdlearly; final H200 run of
                # 2026-12-02 12:03 UTC, measure13b, three rounds, TFLOP/s fp16 / bf16): 511.4 / 504.3, 492.1 / 477.5,
                # 485.5 / 472.5 against 497.9 / 484.5, 463 / 470.6, 479.3 / 466.1 without (+1.3-6.3%, every round),
                # pdllate 507 / 497.7, 488.3 / 474.1, 483.7 / 468.6, pdlwait 502.5 / 495.3, 470.6 / 471.9, 432.6 /
                # 414.8 (it was measured first in each round, the place that run penalized; in the 11:30 run it led
                # plain 4 of 4, pdllate lost once there).  Session 14 (H200 run of 16:09 UTC, four rounds, each timed
                # twice a round): pdlearly ahead of pdllate in all eight (round, dtype) pairs; L2 promotion 0 / 64
                # bytes tied, 256 lost 11%, five stages beside 32-column chunks lost (``s14_candidates``)
                return fit_shared(GemmConfig("persistent", 128, 192, base.block_K, 4, 128, wgmma=True, ws=True,
                                             group_M=8, tma_store=True, store_cols=64, pingpong=True, cluster=(2, 1),
                                             pdl="early"), smem_limit)
            return fit_shared(GemmConfig("persistent", 128, 192, base.block_K, 4, base.threads, wgmma=True, ws=True,
                                         group_M=8, tma_store=True, cluster=(2, 1) if pairs else (1, 1)),
                              smem_limit)
        # a few waves of 128x256 tiles (4096^3: 3.9): persistent blocks, four stages, C stored by TMA in two
        # 128-column chunks through a 32 KB buffer while the producer loads the next tile: 744 TFLOP/s fp16 =
        # 0.97x cuBLAS at 4096^3 against 693 (0.91x) for one block per tile with three stages and the whole
        # C tile, 712 for one block per tile with four stages and the chunks, 727 for persistent 256x128
        # tiles in 64-column chunks (mid-session H200 run of 2026-12-01 22:32 UTC, measure9).  Also for many
        # waves (8192^3, 21 waves of 128x192): 681 / 691 TFLOP/s fp16 / bf16 = 1.02x / 1.01x cuBLAS against
        # 627 / 648 for persistent 128x192 tiles (bench/results/2026-12-01-2315-gemm-*, the candidates timed)
        return fit_shared(GemmConfig("persistent", 128, 256, base.block_K, 4, base.threads, wgmma=True, ws=True,
                                     group_M=8, tma_store=True, store_cols=128), smem_limit)
    return base


def pingpong_epilogue(activation: str, out_dtype: str) -> bool:
    """Whether the heuristic's ping-pong kernel serves this epilogue (``heuristic``)."""
    return activation != "gelu_tanh" and out_dtype in ("float16", "bfloat16")


def candidates(M: int, N: int, K: int, dtype: str, arch: str, num_sms: int,
               smem_limit: int = H200_SHARED_BYTES) -> list[GemmConfig]:
    """Configurations worth timing for a shape (the heuristic's first); used by ``tune_matmul`` and
    bench/gemm.py."""
    hopper = arch == "sm_90"
    out = [heuristic(M, N, K, dtype, arch, num_sms, smem_limit)]
    if out[0].pdl:
        out.append(dataclasses.replace(out[0], pdl=""))  # (the same kernel launched plainly)
    if M <= 16:
        # decode: B streams from memory once; deeper rings keep more of it in flight per SM
        bases = [GemmConfig("direct", 16, 128, 128, 4, 128), GemmConfig("direct", 16, 64, 256, 4, 128),
                 GemmConfig("direct", 16, 256, 64, 4, 128)]
        if hopper:
            bases += [GemmConfig("direct", 16, 128, 128, 6, 128), GemmConfig("direct", 16, 64, 256, 5, 128)]
    elif M <= 128:
        bases = [GemmConfig("direct", 64, 128, 64, 4, 128, wgmma=hopper),
                 GemmConfig("direct", 128, 128, 64, 4, 128, wgmma=hopper)]
        if hopper:
            bases.append(GemmConfig("direct", 128, 256, 64, 4, 256, wgmma=True, ws=True))
    elif hopper:
        bases = [GemmConfig("direct", 128, 256, 64, 4, 256, wgmma=True, ws=True),
                 GemmConfig("direct", 128, 256, 64, 3, 256, wgmma=True, ws=True),
                 GemmConfig("direct", 128, 256, 64, 3, 256, wgmma=True, ws=True, tma_store=True),
                 GemmConfig("direct", 128, 128, 64, 4, 128, wgmma=True, ws=True),
                 # persistent + warp-specialized: the producer loads the next tile's K slices while
                 # the consumers run this tile's epilogue (short K, ragged shapes: the tail of one
                 # tile hides behind the next)
                 GemmConfig("persistent", 128, 128, 64, 4, 256, wgmma=True, ws=True, group_M=8),
                 GemmConfig("persistent", 128, 256, 64, 4, 256, wgmma=True, ws=True, group_M=8),
                 # ... and with the C tile stored by TMA while the next tile's mainloop runs
                 GemmConfig("persistent", 128, 128, 64, 4, 256, wgmma=True, ws=True, group_M=8, tma_store=True),
                 GemmConfig("persistent", 128, 256, 64, 3, 256, wgmma=True, ws=True, group_M=8, tma_store=True),
                 # tiles between 128x128 and 128x256, so that a ragged shape's tile count comes out near a
                 # whole number of waves (2000x3000: 256 tiles of 128x192, 264 of 192x128 = 2 x 132;
                 # cuBLAS takes 192x128 there, bench/results/2026-12-01-1522-ncu-*)
                 GemmConfig("persistent", 128, 192, 64, 4, 256, wgmma=True, ws=True, group_M=8, tma_store=True),
                 GemmConfig("persistent", 192, 128, 64, 4, 256, wgmma=True, ws=True, group_M=8, tma_store=True),
                 GemmConfig("persistent", 192, 128, 64, 4, 384, wgmma=True, ws=True, group_M=8, tma_store=True)]
        bases += chunked_store_candidates()
    else:
        bases = [GemmConfig("direct", 128, 128, 32, 4, 128), GemmConfig("direct", 128, 256, 32, 3, 256)]
    bases = [fit_shared(b, smem_limit) for b in bases]
    for b in bases:
        out.append(b)
        if b.kind != "direct":
            continue
        tiles = _ceil(M, b.block_M) * _ceil(N, b.block_N)
        s = choose_splits(M, N, K, b, num_sms)
        if s > 1:
            splits = {s, 2 * s}
        elif M <= 128 and K >= 1024:
            splits = {2}
        else:
            splits = set()
        derived = [dataclasses.replace(b, kind="splitk", splits=n) for n in sorted(splits) if n <= _ceil(K, b.block_K)]
        if b is bases[0] and M > 128 and num_sms < tiles < 2 * num_sms and _ceil(K, b.block_K) >= 8:
            # between one and two waves (e.g. 2000x3000 in 128x256 tiles): two K halves even out the
            # last wave, at the price of the fp32 partials' traffic (two-pass, or atomics in L2)
            derived += [dataclasses.replace(b, kind="splitk", splits=2),
                        dataclasses.replace(b, kind="splitk", splits=2, atomic=True)]
        # (a split-K form of an epilogue only the direct kernel has, chunked or in-ring TMA stores, is not one)
        out += [c for c in derived if refusal(c) is None]
    if hopper and 64 < M <= 128:
        for c in ROWS128_HOPPER:
            c = fit_shared(c, smem_limit)
            if c.kind == "streamk":
                c = streamk(M, N, K, c, num_sms)
            if c is not None and c.splits <= _ceil(K, c.block_K):
                out.append(c)
    if hopper and M > 128:
        # the left-over tiles cut into K slices (2000x3000x1000 in 128x256 tiles: one full wave,
        # then 60 tiles in 120 halves, 24 K steps on the busiest block instead of 32): 0.38-0.39x
        # cuBLAS in -1411-gemm-weak against 0.68-0.69x for persistent 128x128 with TMA stores
        for tile in (GemmConfig("direct", 128, 256, 64, 4, 256, wgmma=True, ws=True),
                     GemmConfig("direct", 128, 128, 64, 4, 128, wgmma=True, ws=True)):
            c = streamk(M, N, K, fit_shared(tile, smem_limit), num_sms)
            if c is not None:
                out.append(c)
    if hopper:
        out += [fit_shared(c, smem_limit) for c in cluster_candidates(M, N, K) + s10_candidates(M, N, K)]
    if not hopper:
        out = [c for c in out if c.kind not in ("persistent", "streamk")]
    seen, unique = set(), []
    for c in out:
        if c not in seen:
            seen.add(c)
            unique.append(c)
    return unique


# ---------------------------------------------------------------- the tuning cache
def m_bucket(M: int) -> int:
    """Tuned entries are shared by row counts of one bucket (16, 32, 64, ...): a model's token count
    changes from call to call."""
    b = 16
    while b < M:
        b *= 2
    return b


@functools.lru_cache(maxsize=1)
def _fingerprint() -> str:
    from ..compiler import _compiler_fingerprint

    return _compiler_fingerprint()


def cache_key(M, N, K, dtype, out_dtype, trans_a, trans_b, has_bias, activation, arch, device) -> str:
    return tuning_cache.key_of({"op": "tilewright.ops.matmul", "m": m_bucket(M), "n": N, "k": K, "dtype": dtype,
                                "out_dtype": out_dtype, "trans": [bool(trans_a), bool(trans_b)],
                                "bias": bool(has_bias), "activation": activation, "arch": arch, "device": device,
                                "compiler": _fingerprint()})


def tuned(key: str) -> GemmConfig | None:
    entry = tuning_cache.load(key)
    if entry is None or not isinstance(entry.get("best_config"), dict):
        return None
    return GemmConfig.from_json(entry["best_config"])


def store(key: str, best: GemmConfig, latency_ms: float, rows: list, arch: str, device: str) -> None:
    tuning_cache.store(key, {"best_config": best.to_json(), "best_latency_ms": latency_ms, "rows": rows,
                             "target": arch, "device": device})
