"""Tiled GEMM: C = op(A) @ op(B) (+ optional ReLU), fp32 accumulation, pipelined copies.

``staged_epilogue=True`` writes C through a shared tile (``T.copy(C_local, C_shared)`` then
``T.copy(C_shared, C[...])``): on sm_90 that copy is a TMA store (``passes/plan_tma_stores``) that runs
asynchronously while the block goes on (the next tile's mainloop in the persistent kernel); elsewhere it
is a plain copy through shared memory.  It costs a ``block_M x block_N`` shared tile in ``out_dtype``.

``staged_epilogue=w`` (an int: columns, a multiple of 8 dividing ``block_N``) stages the tile in column
chunks of ``block_M x w`` through one smaller shared buffer instead: chunk ``c`` is written (stmatrix
from the accumulator's registers of those columns, ``passes/lower_store_matrix``), stored, and the
store waited for before chunk ``c + 1`` overwrites the buffer.  A 128x256 tile in 128x128 chunks needs
32 KB instead of 64 KB, so four 48 KB stages and the staging buffer fit an H200's 227 KB.

``staged_epilogue=(w, 2)``: the chunks alternate between two ``block_M x w`` buffers, so that chunk
``c + 1`` is written while chunk ``c``'s store still reads the other one (``plan_tma_stores`` then
waits only for the store of two chunks back, ``wait_group.read 1``): 128x192 tiles in 32-column chunks
take 16 KB, and a fifth 40 KB stage fits beside them."""

from __future__ import annotations

from .. import language as T


def cluster_grid(N, M, block_M, block_N, cluster=(1, 1)):
    """The (x, y) grid of one block per ``block_M x block_N`` tile, rounded up to whole thread-block
    clusters of ``cluster`` = (cx, cy) blocks (the extra blocks' tiles lie outside C: they load zeros
    and store nothing)."""
    cx, cy = cluster
    gx = T.ceildiv(N, block_N * cx) * cx if cx > 1 else T.ceildiv(N, block_N)
    gy = T.ceildiv(M, block_M * cy) * cy if cy > 1 else T.ceildiv(M, block_M)
    return gx, gy


def cluster_kernel_args(cluster=(1, 1), swizzle_panel=8):
    """``T.Kernel``'s ``cluster_dims`` (None: no cluster) and the ``T.use_swizzle`` order of a GEMM whose
    blocks form clusters of
    ``cluster`` = (cx, cy): two blocks along x (neighbouring N tiles) share their A tile, along y
    (neighbouring M tiles) their B tile, which ``warp_specialize`` then loads once per cluster by TMA
    multicast (``passes/cluster_multicast.py``, sm_90a) -- when the rasterization's fast axis is the
    cluster's (hence "col" order for a cluster along y)."""
    if tuple(cluster) == (1, 1):
        return None, "row"
    if sorted(cluster) != [1, 2] or swizzle_panel % 2:
        raise ValueError(f"GEMM clusters are (2, 1) or (1, 2), with an even swizzle panel; got {cluster}, "
                         f"panel {swizzle_panel}")
    # (a tuple, not keywords: closure values must be hashable for the prim_func memo)
    return (cluster[0], cluster[1], 1), "row" if cluster[0] == 2 else "col"


# Programmatic dependent launch of a GEMM (sm_90+; ``T.pdl_sync`` / ``T.pdl_trigger``, the launch through
# ``LaunchSpec.programmatic``): "" off; "wait": the block's first statement waits for the previous kernel of the
# stream (its launch and block placement overlap that kernel's tail); "pre": as "wait", with the TMA ring's
# mbarrier set-up and the descriptors' prefetch ahead of the wait (pass config ``tw.pdl_prologue``, set by
# ``ops.gemm_configs.GemmConfig.pass_configs``); "late": as "pre", and each block lets the next kernel start
# once its mainloop has read its last operand tile (``griddepcontrol.launch_dependents``); "early": as "pre",
# with the trigger right after the wait (the next kernel's blocks take SMs as this one's leave: they are all
# placed by then, since the next kernel starts only once every block of this one has triggered).
PDL_MODES = ("", "wait", "pre", "late", "early")


def check_pdl(pdl: str) -> None:
    if pdl not in PDL_MODES:
        raise ValueError(f"a GEMM's pdl mode is one of {PDL_MODES}, got {pdl!r}")


def staging_buffers(staged_epilogue) -> int:
    """How many shared buffers a staged epilogue's chunks alternate between: 2 for a ``(w, 2)`` pair, else 1."""
    if isinstance(staged_epilogue, tuple):
        if len(staged_epilogue) != 2 or staged_epilogue[1] not in (1, 2):
            raise ValueError(f"a staged epilogue of alternating buffers is (chunk width, 1 or 2); "
                             f"got {staged_epilogue}")
        return staged_epilogue[1]
    return 1


def epilogue_chunks(block_N: int, staged_epilogue) -> tuple:
    """(chunk width, column offsets of the chunks) of a staged epilogue (``staged_epilogue`` True: the
    whole tile, one chunk; a ``(w, buffers)`` pair: chunks of ``w``, see ``staging_buffers``)."""
    if isinstance(staged_epilogue, tuple):
        staging_buffers(staged_epilogue)  # (checks the pair)
        staged_epilogue = staged_epilogue[0]
    if staged_epilogue is True or staged_epilogue == block_N:
        return block_N, (0,)
    w = int(staged_epilogue)
    if w <= 0 or w % 8 or block_N % w:
        raise ValueError(f"a staged epilogue's chunk is a multiple of 8 columns dividing block_N={block_N}; "
                         f"got {staged_epilogue}")
    return w, tuple(range(0, block_N, w))


def alloc_staging(block_M, width, out_dtype, staged_epilogue) -> tuple:
    """The shared buffer(s) of a staged epilogue (``staging_buffers`` of them), for ``store_staged``."""
    return tuple(T.alloc_shared((block_M, width), out_dtype) for _ in range(staging_buffers(staged_epilogue)))


@T.macro
def store_staged(C_local, C_shared, C, row, col, chunks):
    """``C[row:, col:] = C_local`` through the shared buffer ``C_shared`` (or a tuple of buffers that the
    chunks take in turn, ``alloc_staging``), one column chunk at a time (``epilogue_chunks``; a single
    chunk is the plain ``T.copy`` pair)."""
    bufs = C_shared if isinstance(C_shared, tuple) else (C_shared,)
    if len(chunks) == 1:
        T.copy(C_local, bufs[0])
        T.copy(bufs[0], C[row, col])
    else:
        for n, c0 in enumerate(chunks):  # (a tuple: unrolled while the kernel is traced, offsets constant)
            buf = bufs[n % len(bufs)]
            for i, j in T.Parallel(buf.shape[0], buf.shape[1]):
                buf[i, j] = C_local[i, c0 + j]
            T.copy(buf, C[row, col + c0])


def matmul(M, N, K, block_M=128, block_N=128, block_K=32, dtype="float16", out_dtype=None, accum_dtype="float32",
           trans_A=False, trans_B=False, num_stages=3, threads=128, relu=False, swizzle_panel=8,
           staged_epilogue=False, cluster=(1, 1)):
    """``C[M, N] = op(A) @ op(B)``; A is (K, M) when ``trans_A``, B is (N, K) when ``trans_B``.
    M may be a ``T.dynamic`` size.  ``staged_epilogue``: C leaves through a shared tile (see above).
    ``cluster`` = (2, 1) or (1, 2): thread-block clusters of two blocks sharing an operand tile
    (``cluster_kernel_args``)."""
    out_dtype = out_dtype or dtype
    width, chunks = epilogue_chunks(block_N, staged_epilogue) if staged_epilogue else (block_N, (0,))
    cluster_dims, order = cluster_kernel_args(cluster, swizzle_panel or 2)
    gx, gy = cluster_grid(N, M, block_M, block_N, cluster)
    a_shape = (K, M) if trans_A else (M, K)
    b_shape = (N, K) if trans_B else (K, N)
    a_tile = (block_K, block_M) if trans_A else (block_M, block_K)
    b_tile = (block_N, block_K) if trans_B else (block_K, block_N)

    @T.prim_func
    def gemm(A: T.Tensor(a_shape, dtype), B: T.Tensor(b_shape, dtype), C: T.Tensor((M, N), out_dtype)):
        with T.Kernel(gx, gy, threads=threads, cluster_dims=cluster_dims) as (bx, by):
            A_shared = T.alloc_shared(a_tile, dtype)
            B_shared = T.alloc_shared(b_tile, dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            if staged_epilogue:
                C_shared = alloc_staging(block_M, width, out_dtype, staged_epilogue)
            if swizzle_panel:
                T.use_swizzle(panel_size=swizzle_panel, order=order)
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                if trans_A:
                    T.copy(A[k * block_K, by * block_M], A_shared)
                else:
                    T.copy(A[by * block_M, k * block_K], A_shared)
                if trans_B:
                    T.copy(B[bx * block_N, k * block_K], B_shared)
                else:
                    T.copy(B[k * block_K, bx * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local, transpose_A=trans_A, transpose_B=trans_B)
            if relu:
                for i, j in T.Parallel(block_M, block_N):
                    C_local[i, j] = T.max(C_local[i, j], 0)
            if staged_epilogue:
                store_staged(C_local, C_shared, C, by * block_M, bx * block_N, chunks)
            else:
                T.copy(C_local, C[by * block_M, bx * block_N])

    return gemm


# ---------------------------------------------------------------- epilogue math
ACTIVATIONS = ("none", "relu", "gelu_tanh", "silu")


def activate(x, activation: str):
    """An fp32 activation applied in an epilogue (``activation`` is one of ``ACTIVATIONS``)."""
    if activation == "relu":
        return T.max(x, 0.0)
    if activation == "silu":
        return x * T.sigmoid(x)
    if activation == "gelu_tanh":
        return 0.5 * x * (1.0 + T.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))
    return x


def _tiles(trans_A, trans_B, M, N, K, block_M, block_N, block_K):
    a_shape = (K, M) if trans_A else (M, K)
    b_shape = (N, K) if trans_B else (K, N)
    a_tile = (block_K, block_M) if trans_A else (block_M, block_K)
    b_tile = (block_N, block_K) if trans_B else (block_K, block_N)
    return a_shape, b_shape, a_tile, b_tile


# ---------------------------------------------------------------- split-K
def k_tiles_per_split(K, block_K, splits) -> int:
    """K steps of one split: the K range is cut into ``splits`` runs of whole ``block_K`` steps
    (the last run may be shorter, or empty: its out-of-range tiles read as zero)."""
    k_steps = -(-K // block_K)
    return -(-k_steps // splits)


def matmul_splitk(M, N, K, block_M=16, block_N=128, block_K=128, splits=2, dtype="float16", trans_A=False,
                  trans_B=False, num_stages=4, threads=128, atomic=False, swizzle_panel=0):
    """First pass of a split-K GEMM, for shapes with too few output tiles to fill the GPU (decode
    M = 16..128, K-heavy shapes): the grid is (N tiles, M tiles, ``splits``) and block ``z`` computes
    ``op(A)[:, Kz] @ op(B)[Kz, :]`` over its slice ``Kz`` of the reduction in fp32.

    ``atomic=False`` (deterministic): the partial goes to ``W[:, z, :]`` of an (M, splits, N) fp32
    workspace and ``splitk_reduce`` adds the slices in a fixed order.  ``atomic=True``: the partial
    is added with fp32 atomics into a zeroed (M, 1, N) workspace (less memory traffic, but the
    summation order, and so the last bits, vary from run to run); ``splitk_reduce(splits=1)`` then
    finishes.  The slice index is the middle dimension so that every stride is static and the
    reduction reads 16-byte vectors (a leading slice dimension would have the symbolic stride M*N)."""
    a_shape, b_shape, a_tile, b_tile = _tiles(trans_A, trans_B, M, N, K, block_M, block_N, block_K)
    kps = k_tiles_per_split(K, block_K, splits)
    ws_slices = 1 if atomic else splits

    @T.prim_func
    def gemm_splitk(A: T.Tensor(a_shape, dtype), B: T.Tensor(b_shape, dtype),
                    W: T.Tensor((M, ws_slices, N), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), splits, threads=threads) as (bx, by, bz):
            A_shared = T.alloc_shared(a_tile, dtype)
            B_shared = T.alloc_shared(b_tile, dtype)
            C_local = T.alloc_fragment((block_M, block_N), "float32")
            if swizzle_panel:
                T.use_swizzle(panel_size=swizzle_panel)
            T.clear(C_local)
            for k in T.Pipelined(kps, num_stages=num_stages):
                if trans_A:
                    T.copy(A[(bz * kps + k) * block_K, by * block_M], A_shared)
                else:
                    T.copy(A[by * block_M, (bz * kps + k) * block_K], A_shared)
                if trans_B:
                    T.copy(B[bx * block_N, (bz * kps + k) * block_K], B_shared)
                else:
                    T.copy(B[(bz * kps + k) * block_K, bx * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local, transpose_A=trans_A, transpose_B=trans_B)
            if atomic:
                T.atomic_add(W[by * block_M:(by + 1) * block_M, 0, bx * block_N:(bx + 1) * block_N], C_local)
            else:
                T.copy(C_local, W[by * block_M:(by + 1) * block_M, bz, bx * block_N:(bx + 1) * block_N])

    return gemm_splitk


def splitk_reduce(M, N, splits, out_dtype="float16", bias_dtype=None, activation="none", block_M=16, block_N=256,
                  threads=128):
    """Second pass of a split-K GEMM: ``C = act(sum_z W[:, z, :] + bias)`` cast to ``out_dtype``, the
    slices added in order 0, 1, ... (the same bits every run).  ``bias_dtype`` None: no bias (the
    ``Bias`` parameter is then a one-element placeholder)."""
    bias_len = N if bias_dtype else 1
    bias_dt = bias_dtype or "float32"

    @T.prim_func
    def gemm_splitk_reduce(W: T.Tensor((M, splits, N), "float32"), Bias: T.Tensor((bias_len,), bias_dt),
                           C: T.Tensor((M, N), out_dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            acc = T.alloc_fragment((block_M, block_N), "float32")
            part = T.alloc_fragment((block_M, block_N), "float32")
            T.copy(W[by * block_M:(by + 1) * block_M, 0, bx * block_N:(bx + 1) * block_N], acc)
            for z in T.serial(1, splits):
                T.copy(W[by * block_M:(by + 1) * block_M, z, bx * block_N:(bx + 1) * block_N], part)
                for i, j in T.Parallel(block_M, block_N):
                    acc[i, j] = acc[i, j] + part[i, j]
            if bias_dtype or activation != "none":
                for i, j in T.Parallel(block_M, block_N):
                    v = acc[i, j]
                    if bias_dtype:
                        v = v + T.cast(Bias[T.min(bx * block_N + j, N - 1)], "float32")
                    acc[i, j] = activate(v, activation)
            T.copy(acc, C[by * block_M, bx * block_N])

    return gemm_splitk_reduce


# ---------------------------------------------------------------- persistent
def matmul_persistent(M, N, K, block_M=128, block_N=256, block_K=64, dtype="float16", out_dtype=None,
                      trans_A=False, trans_B=False, num_stages=4, threads=256, num_blocks=132, group_M=8,
                      bias_dtype=None, activation="none", staged_epilogue=False, cluster=1, pdl=""):
    """A persistent GEMM: ``num_blocks`` blocks (the SM count) loop over the output tiles, block
    ``b`` taking tiles ``b, b + num_blocks, ...``, so that the grid is one wave and the prologue of
    a tile overlaps the tail of the one before on the same SM.  Tiles are visited in groups of
    ``group_M`` tile rows (column by column within a group) so that concurrently running tiles
    share operand panels in L2.  ``C = act(op(A) @ op(B) + bias)``.

    Correct on every target (TMA, cp.async or register-staged pipeline; the barrier before the
    next tile's prologue copies comes from ``insert_barriers``); ``tilewright.ops.matmul`` uses it on
    sm_90 only, where it was measured.  ``staged_epilogue``: C leaves through a shared tile, on sm_90
    as a TMA store of tile i that overlaps the mainloop of tile i + 1 (the store is waited for only
    before the shared tile is written again).

    ``cluster=2``: the blocks run in thread-block clusters of two (grid ``(2, num_blocks / 2)``) that walk
    the tiles in lockstep, a pair of neighbouring N tiles at a time (rank ``q`` takes tile ``2 j + q`` of
    pair ``j``): the pair's A tile is the same, and ``warp_specialize`` loads it once per cluster by TMA
    multicast (``passes/cluster_multicast.py``, sm_90a).

    ``pdl`` (``PDL_MODES``): the block waits for the previous kernel of the stream before anything else
    (``T.pdl_sync``); "late": it lets the next kernel start once the mainloop of its last tile is done; "early":
    right after the wait."""
    check_pdl(pdl)
    if cluster not in (1, 2) or num_blocks % cluster:
        raise ValueError(f"matmul_persistent: cluster is 1 or 2 and divides num_blocks, got {cluster}, {num_blocks}")
    out_dtype = out_dtype or dtype
    width, chunks = epilogue_chunks(block_N, staged_epilogue) if staged_epilogue else (block_N, (0,))
    a_shape, b_shape, a_tile, b_tile = _tiles(trans_A, trans_B, M, N, K, block_M, block_N, block_K)
    n_tiles = -(-N // block_N)
    m_tiles = T.ceildiv(M, block_M)
    bias_len = N if bias_dtype else 1
    bias_dt = bias_dtype or "float32"
    group = max(group_M, 1)
    # large fragments (64+ accumulators a thread) take the bias before the mainloop (see below);
    # small ones add it in the epilogue, where seeding cost a 16x64 tile of 128 threads a spill
    seed_bias = bool(bias_dtype) and block_M * block_N // threads >= 64

    n_units = n_tiles if cluster == 1 else -(-n_tiles // 2)  # what a walker takes: a tile, or a pair

    @T.macro
    def tile_loop(A, B, Bias, C, walker, walkers, rank):
        A_shared = T.alloc_shared(a_tile, dtype)
        B_shared = T.alloc_shared(b_tile, dtype)
        C_local = T.alloc_fragment((block_M, block_N), "float32")
        if staged_epilogue:
            C_shared = alloc_staging(block_M, width, out_dtype, staged_epilogue)
        # this walker's units (tiles, or pairs of N tiles): walker, walker + walkers, ... below
        # m_tiles * n_units (a uniform trip count per walker, so the pipeline inside needs no per-tile guard)
        for r in T.serial(T.ceildiv(m_tiles * n_units - walker, walkers)):
            tile = r * walkers + walker
            first_m = tile // (group * n_units) * group
            rows = T.min(m_tiles - first_m, group)
            tm = first_m + tile % (group * n_units) % rows
            if cluster == 1:
                tn = tile % (group * n_units) // rows
            else:
                tn = tile % (group * n_units) // rows * 2 + rank
            if seed_bias:
                # the bias seeds the accumulator: read before the mainloop, it is not live beside
                # the 128 accumulators of a 128x256 tile in the epilogue (where its loads, hoisted
                # by ptxas, spilled 408 bytes)
                for i, j in T.Parallel(block_M, block_N):
                    C_local[i, j] = T.cast(Bias[T.min(tn * block_N + j, N - 1)], "float32")
            else:
                T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                if trans_A:
                    T.copy(A[k * block_K, tm * block_M], A_shared)
                else:
                    T.copy(A[tm * block_M, k * block_K], A_shared)
                if trans_B:
                    T.copy(B[tn * block_N, k * block_K], B_shared)
                else:
                    T.copy(B[k * block_K, tn * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local, transpose_A=trans_A, transpose_B=trans_B)
            if pdl == "late":
                if r == T.ceildiv(m_tiles * n_units - walker, walkers) - 1:
                    T.pdl_trigger()  # (the block's last operand tile read: the next kernel may place its blocks)
            if (bias_dtype and not seed_bias) or activation != "none":
                for i, j in T.Parallel(block_M, block_N):
                    v = C_local[i, j]
                    if bias_dtype and not seed_bias:
                        v = v + T.cast(Bias[T.min(tn * block_N + j, N - 1)], "float32")
                    C_local[i, j] = activate(v, activation)
            if staged_epilogue:
                store_staged(C_local, C_shared, C, tm * block_M, tn * block_N, chunks)
            else:
                T.copy(C_local, C[tm * block_M, tn * block_N])

    if cluster == 1:
        @T.prim_func
        def gemm_persistent(A: T.Tensor(a_shape, dtype), B: T.Tensor(b_shape, dtype),
                            Bias: T.Tensor((bias_len,), bias_dt), C: T.Tensor((M, N), out_dtype)):
            with T.Kernel(num_blocks, threads=threads) as bid:
                if pdl:
                    T.pdl_sync()  # (first: A, B and Bias may be what the previous kernel writes, C what it reads)
                    if pdl == "early":
                        T.pdl_trigger()
                tile_loop(A, B, Bias, C, bid, num_blocks, 0)
    else:
        @T.prim_func
        def gemm_persistent(A: T.Tensor(a_shape, dtype), B: T.Tensor(b_shape, dtype),
                            Bias: T.Tensor((bias_len,), bias_dt), C: T.Tensor((M, N), out_dtype)):
            with T.Kernel(2, num_blocks // 2, threads=threads, cluster_dims=(2, 1, 1)) as (q, c):
                if pdl:
                    T.pdl_sync()
                    if pdl == "early":
                        T.pdl_trigger()
                tile_loop(A, B, Bias, C, c, num_blocks // 2, q)

    return gemm_persistent


# ---------------------------------------------------------------- data-parallel + stream-K hybrid
def streamk_plan(tiles: int, k_steps: int, num_blocks: int, max_splits: int = 4) -> int:
    """The K slices ``s`` (1..``max_splits``) the left-over tiles are cut into in ``matmul_streamk``,
    for ``tiles`` output tiles of ``k_steps`` K steps on ``num_blocks`` blocks: the one with the
    fewest K steps on the busiest block, ``w * k_steps + ceil(r * s / num_blocks) * ceil(k_steps / s)``
    (``w`` full waves, ``r`` tiles left over), ties to fewer slices (less partial traffic).  1 when the tiles
    fill whole waves (the kernel is then the plain persistent one).  E.g. 192 tiles of 16 steps on
    132 blocks: 32 steps at s = 1, 24 at s = 2 (one full wave, then 60 tiles in 120 halves); the
    ideal, every block the same share, is 23.3."""
    rest = tiles % num_blocks
    best = 1
    for s in range(2, max_splits + 1):
        if rest == 0 or k_steps < 2 * s:
            break
        if streamk_steps(tiles, k_steps, num_blocks, s) < streamk_steps(tiles, k_steps, num_blocks, best):
            best = s
    return best


def streamk_steps(tiles: int, k_steps: int, num_blocks: int, splits: int) -> int:
    """K steps of the busiest block of ``matmul_streamk`` (``streamk_plan``)."""
    waves, rest = divmod(tiles, num_blocks)
    return waves * k_steps + -(-rest * splits // num_blocks) * -(-k_steps // splits)


def _tile_coords(tile, m_tiles, n_tiles: int, group: int):
    """(tile row, tile column) of rasterized tile ``tile``: groups of ``group`` tile rows, column by
    column within a group (concurrent tiles share operand panels in L2); ``group`` 0 or 1: row by
    row (no division by the group's row count, which varies with a dynamic M: fewer registers for
    the index math)."""
    if group <= 1:
        return tile // n_tiles, tile % n_tiles
    first_m = tile // (group * n_tiles) * group
    rows = T.min(m_tiles - first_m, group)
    return first_m + tile % (group * n_tiles) % rows, tile % (group * n_tiles) // rows


def matmul_streamk(M, N, K, block_M=128, block_N=256, block_K=64, splits=2, dtype="float16", out_dtype=None,
                   trans_A=False, trans_B=False, num_stages=4, threads=256, num_blocks=132, group_M=0,
                   bias_dtype=None, activation="none"):
    """First kernel of a data-parallel + stream-K GEMM, for shapes whose tiles leave the last wave
    part empty (2000x3000 in 128x256 tiles: 192 tiles on 132 SMs, 1.45 waves) or fill less than
    one (128x8192: 32..64 tiles).  ``num_blocks`` persistent blocks; of the output tiles (rasterized
    as in ``matmul_persistent``) the ``w`` full waves are data-parallel: block ``b`` computes tiles
    ``b, b + num_blocks, ...`` whole (bias seeded into the accumulator, activation, store to C).
    The ``r`` tiles left over are cut into ``splits`` K slices of ``k_tiles_per_split`` steps, and
    these ``r * splits`` units are spread over all blocks; each unit's fp32 partial goes to slot
    ``(tile - w * num_blocks, z)`` of the workspace ``W[num_blocks, splits, block_M, block_N]``,
    and ``streamk_fixup`` adds the slices in order (the same bits every run), the bias and the
    activation, and stores C.  The K trip count is two-phase (whole tiles, then slices), which the
    warp-specialized ring follows (``passes/warp_specialize._tile_steps``).  ``streamk_plan``
    picks the slices; ``splits = 1`` is the persistent kernel (the fixup then has nothing to do)."""
    out_dtype = out_dtype or dtype
    a_shape, b_shape, a_tile, b_tile = _tiles(trans_A, trans_B, M, N, K, block_M, block_N, block_K)
    n_tiles = -(-N // block_N)
    m_tiles = T.ceildiv(M, block_M)
    k_steps = -(-K // block_K)
    kps = k_tiles_per_split(K, block_K, splits)
    bias_len = N if bias_dtype else 1
    bias_dt = bias_dtype or "float32"
    group = group_M
    S, s = num_blocks, splits

    @T.prim_func
    def gemm_streamk(A: T.Tensor(a_shape, dtype), B: T.Tensor(b_shape, dtype), Bias: T.Tensor((bias_len,), bias_dt),
                     C: T.Tensor((M, N), out_dtype), W: T.Tensor((num_blocks, splits, block_M, block_N), "float32")):
        with T.Kernel(num_blocks, threads=threads) as bid:
            A_shared = T.alloc_shared(a_tile, dtype)
            B_shared = T.alloc_shared(b_tile, dtype)
            C_local = T.alloc_fragment((block_M, block_N), "float32")
            waves = m_tiles * n_tiles // S
            rest = m_tiles * n_tiles - waves * S
            # this block's units: its data-parallel tiles (one per wave), then its share of the
            # stream-K units v = bid, bid + S, ... below rest * s
            for r in T.serial(waves + (rest * s - bid + S - 1) // S):
                dp = r < waves
                v = (r - waves) * S + bid
                tile = T.if_then_else(dp, r * S + bid, waves * S + v // s)
                k0 = T.if_then_else(dp, 0, v % s * kps)
                tm, tn = _tile_coords(tile, m_tiles, n_tiles, group)
                if dp:
                    if bias_dtype:
                        # seeded with the bias (as in matmul_persistent: no bias loads beside the
                        # accumulators at the end)
                        for i, j in T.Parallel(block_M, block_N):
                            C_local[i, j] = T.cast(Bias[T.min(tn * block_N + j, N - 1)], "float32")
                    else:
                        T.clear(C_local)
                else:
                    T.clear(C_local)
                for k in T.Pipelined(T.if_then_else(r < waves, k_steps, kps), num_stages=num_stages):
                    if trans_A:
                        T.copy(A[(k0 + k) * block_K, tm * block_M], A_shared)
                    else:
                        T.copy(A[tm * block_M, (k0 + k) * block_K], A_shared)
                    if trans_B:
                        T.copy(B[tn * block_N, (k0 + k) * block_K], B_shared)
                    else:
                        T.copy(B[(k0 + k) * block_K, tn * block_N], B_shared)
                    T.gemm(A_shared, B_shared, C_local, transpose_A=trans_A, transpose_B=trans_B)
                if dp:
                    if activation != "none":
                        for i, j in T.Parallel(block_M, block_N):
                            C_local[i, j] = activate(C_local[i, j], activation)
                    T.copy(C_local, C[tm * block_M, tn * block_N])
                else:
                    # slot (v // s, v % s), in range here (v < rest * s, rest < S): element stores,
                    # which a tile copy would guard one by one
                    for i, j in T.Parallel(block_M, block_N):
                        W[v // s, v % s, i, j] = C_local[i, j]

    return gemm_streamk


def streamk_fixup(M, N, block_M=128, block_N=256, splits=2, num_blocks=132, group_M=0, out_dtype="float16",
                  bias_dtype=None, activation="none", fix_M=16, threads=128):
    """Second kernel of ``matmul_streamk``: for each stream-K tile ``q`` (grid z; the blocks of
    ``q >= r`` have nothing to do), ``C = act(sum_z W[q, z] + bias)`` over ``fix_M`` rows x
    ``block_N`` columns per block, the slices added in order 0, 1, ..."""
    n_tiles = -(-N // block_N)
    m_tiles = T.ceildiv(M, block_M)
    bias_len = N if bias_dtype else 1
    bias_dt = bias_dtype or "float32"
    group = group_M
    S = num_blocks

    @T.prim_func
    def gemm_streamk_fixup(W: T.Tensor((num_blocks, splits, block_M, block_N), "float32"),
                           Bias: T.Tensor((bias_len,), bias_dt), C: T.Tensor((M, N), out_dtype)):
        with T.Kernel(block_M // fix_M, num_blocks, threads=threads) as (bx, q):
            acc = T.alloc_fragment((fix_M, block_N), "float32")
            part = T.alloc_fragment((fix_M, block_N), "float32")
            waves = m_tiles * n_tiles // S
            if q < m_tiles * n_tiles - waves * S:
                tm, tn = _tile_coords(waves * S + q, m_tiles, n_tiles, group)
                row = bx * fix_M
                T.copy(W[q, 0, row:row + fix_M, 0:block_N], acc)
                for z in T.serial(1, splits):
                    T.copy(W[q, z, row:row + fix_M, 0:block_N], part)
                    for i, j in T.Parallel(fix_M, block_N):
                        acc[i, j] = acc[i, j] + part[i, j]
                if bias_dtype or activation != "none":
                    for i, j in T.Parallel(fix_M, block_N):
                        v = acc[i, j]
                        if bias_dtype:
                            v = v + T.cast(Bias[T.min(tn * block_N + j, N - 1)], "float32")
                        acc[i, j] = activate(v, activation)
                T.copy(acc, C[tm * block_M + bx * fix_M, tn * block_N])

    return gemm_streamk_fixup
