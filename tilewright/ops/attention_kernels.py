"""The kernels behind ``tilewright.ops.attention``, in tilewright's own language.

``attention_fwd`` is one flash-attention forward (online softmax over key blocks) that serves every
mode of the operator, chosen by closure constants:

- dense batches: Q (B, H, Sq, D), K/V (B, Hkv, Sk, D), contiguous or (batch, seq, heads, dim)
  tensors seen through ``transpose(1, 2)``, both read in place as 2-D row views;
- variable-length batches (``varlen``): packed (total, heads, dim) tensors, each block's sequence
  given by ``cu_seqlens`` (start offsets; sequence ``b`` is rows ``cu[b] .. cu[b+1]``);
- a padded KV cache (``cache_lens``): the keys of batch ``b`` are its first ``lens[b]`` rows;
- split-KV (``splits > 1``, flash-decoding): the key blocks are cut into ``splits`` ranges, each
  block writes its normalized partial output (float32) and log-sum-exp, and ``attention_combine``
  merges them.

GQA/MQA: query head ``h`` reads key/value head ``h // group``.  Causal masking aligns the ends of
the query and key sequences (query ``i`` sees keys ``j <= i + Sk - Sq``), as flash-attn does; a row
that sees no key gets output 0 and log-sum-exp -inf.  Sizes that change from call to call (batch,
sequence lengths, row offsets) and the scale are kernel arguments, so one compiled kernel serves
every such call.
"""

from __future__ import annotations

from .. import language as T

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
# how a causal persistent kernel orders its work items and deals them to the blocks (attention_fwd's ``order``)
PERSISTENT_ORDERS = ("longest_first", "longest_first_snake", "head_major_snake", "pairs")
# 2**f on f in [-0.5, 0.5]: a cubic fitted for the least largest relative error (7.5e-5 in float32, against
# bf16's 3.9e-3 rounding of the probabilities it feeds); ``exp2_on_fma``
EXP2_CUBIC = (0.9999279975891113, 0.6932594180107117, 0.24261191487312317, 0.055180370807647705)
# the key-loop trims attention_fwd takes as keywords (see its docstring)
LOOP_TRIMS = ("fast_rescale", "mask_bound", "skip_rescale")
# "skip_rescale": the row max a key block's probabilities are taken against moves only when the block's max
# exceeds it by more than 2**this (so the probabilities stay below 2**8 = 256: no overflow in fp16/bf16 P or the
# float32 sums, the same relative rounding)
LAZY_MAX_LOG2 = 8.0
ROUND_MAGIC = 12582912.0  # 1.5 * 2**23: x + it rounds x (|x| < 2**22) to an integer in its low mantissa bits


def exp2_on_fma(x):
    """2**x for x <= 0 (a softmax's shifted scores) without the MUFU unit: x = j + f with j = round(x)
    and f in [-0.5, 0.5], 2**f by ``EXP2_CUBIC`` (three FFMA) and 2**j built in the exponent bits (j + 127
    << 23).  x below -127 (-inf: masked keys) is taken as -127, whose 2**j has the bits 0: exactly 0; a
    NaN stays NaN (the comparison is false for it and NaN * 2**j is NaN).  ``x`` must be an element
    load (``acc_s[i, j]``), read more than once here, not an expression to fold.  The idea (FlashAttention-4's
    on Blackwell): at head dim 64 the softmax's 2**x on MUFU (16 lanes per clock per SM) takes about as long
    as the block's two gemms.  On the H200 every share of it moved here was slower (nine instructions an
    element instead of one: attention_dispatch.HOPPER_D64_FMA_EXP2), so it is off."""
    xc = T.if_then_else(x < -127.0, -127.0, x)
    t = xc + ROUND_MAGIC
    f = xc - (t - ROUND_MAGIC)
    c0, c1, c2, c3 = EXP2_CUBIC
    poly = ((c3 * f + c2) * f + c1) * f + c0
    return poly * T.reinterpret((T.reinterpret(t, "uint32") << 23) + 0x3F800000, "float32")


def attention_fwd(heads, kv_heads, dim, dtype, out_dtype, causal, varlen, cache_lens, splits, q_hc, k_hc, v_hc,
                  o_hc, block_M, block_N, stages, threads, stage_out=False, even_q=False, even_k=False,
                  persistent=0, order="longest_first", item_vars=True, lean=False,
                  fma_exp2=None, pdl=False, fast_rescale=False, mask_bound=False, skip_rescale=False):
    """Tensors are 2-D row views with static strides, so that their tiles load with 16-byte
    vectors and cp.async: element (batch b, head h, position s, d) of Q is row
    ``b * q_rb + h * q_rh + s``, column ``h * dim + d`` when ``q_hc`` (heads in the columns: a
    (batch, seq, heads, dim) or packed tensor) else ``d`` (a (batch, heads, seq, dim) tensor);
    likewise K, V and the output O (whose split ``p`` starts at row ``p * o_rp``).  The LSE is a
    flat float32 tensor indexed ``p * l_rp + b * l_rb + h * l_rh + s * l_rs``.

    ``stage_out``: a block whose query rows all lie in its sequence writes its output tile through
    shared memory as one tile copy (wide, or TMA stores on sm_90a) instead of each thread storing
    its accumulator pairs under a row check; the caller sets it where the extra block_M x dim tile
    fits in shared memory.

    ``even_q`` / ``even_k``: the caller guarantees that every sequence's query / key length is a
    multiple of ``block_M`` / ``block_N`` (dense calls whose lengths divide the blocks), so the
    kernel has no tail handling: no key mask outside the causal diagonal (none at all without
    ``causal``: the key loop is the bare Q K^T, softmax, P V), and no row checks on the output and
    the LSE.  With other lengths such a kernel would read and write past the sequences: the
    dispatch only sets them where the lengths are known on the host.

    ``persistent``: when > 0, a persistent kernel of that many blocks (the SM count): block ``bid``
    takes the work items (query block, head, sequence and split) ``bid, bid + persistent, ...`` in a
    serial tile loop around the same per-item code, so that on sm_90a the warp-specialized producer
    loads the next item's Q, K and V while the consumers finish this item's epilogue
    (``passes/warp_specialize_persistent_loop.py``), and there is no partly empty last wave of
    blocks.  Causal: the items with the most key blocks come first (a longest-first order over the
    blocks' rounds); otherwise the query blocks of a head are adjacent (they share its keys in L2).

    ``order`` (causal persistent kernels; ``PERSISTENT_ORDERS``): how the causal items are ordered and
    dealt to the blocks.  "longest_first": as above, block ``bid`` taking item ``r * persistent + bid``
    in round ``r``; so block 0 gets the longest item of every round and the last block the shortest,
    a static imbalance (about 6% at 16 heads and 4k-16k keys).  "longest_first_snake": the same order,
    dealt back and forth (in odd rounds block ``bid`` takes ``r * persistent + persistent - 1 - bid``),
    so a block's long item of one round pairs with a short one in the next.  "head_major_snake": the
    query blocks of one (head, sequence, split) together (the longest first), heads in order, dealt
    back and forth: the blocks running at one time read few heads' keys (L2 reuse, as the grid
    kernel's launch order), at the price of a worse balance where a head's items are not a round.
    "pairs": query blocks ``i`` and ``nq - 1 - i`` of one (head, sequence, split) unit run back to back
    on one block (the long one first), pairs in unit order dealt a pair per block per two rounds, so
    that every pair has the same key blocks (nq + 1 with equal lengths) and the short item reads keys
    the long one just brought into L2; with an odd ``nq`` the units' middle blocks follow as singles,
    starting at the first block that had a pair fewer.

    ``item_vars`` (persistent kernels): each item's coordinates are computed once into int32 scalars
    (in both roles) that ``attend`` reads, instead of the order's arithmetic (64-bit divisions by the
    unit count) repeated in the causal mask and the epilogue's row checks.

    ``lean`` (``attention_dispatch.LEAN_LOOP``): the key loop's softmax without what only masking
    needs.  Without ``causal`` a row's running max is finite from the first key block on (every key
    block of the loop holds a key of the sequence, and every row sees all of them), so the guard
    that turns a max of -inf into 0 (no inf - inf) is left out; the rescale factor of the output
    takes the hardware's 2**x (ex2.approx.ftz) like the probabilities do (2**(-inf) is still 0 there).
    Results are the same up to that rounding; causal kernels keep the guard.

    ``fma_exp2`` (``attention_dispatch.HOPPER_D64_FMA_EXP2``): None, or (k, n): the probabilities of the
    key columns j with (j // 8) % n < k are computed by ``exp2_on_fma`` (the FMA pipe) instead of the
    hardware's 2**x; the shifted scores are first stored to the score tile (so that the cubic reads an
    element, and the two 2**x split by column: with wgmma's accumulator layout j // 8 is fixed per
    register, so each register takes one of the two).

    Key-loop trims (``LOOP_TRIMS``; ``attention_dispatch.HOPPER_D64_CAUSAL_TRIMS``), the same results up to
    rounding:

    - ``fast_rescale``: the output's rescale factor on the hardware's 2**x (ex2.approx.ftz, as the probabilities)
      with the -inf guard kept (``lean`` drops the guard too, so it is non-causal only): exp2f's range handling
      is several instructions a row each key block;
    - ``mask_bound`` (causal, ``even_k``): the diagonal block's mask compares the key column ``j`` against one
      per-row bound (``bx * block_M + i + shift - kb * block_N``, a fragment computed once per row) instead of
      recomputing both positions per element;
    - ``skip_rescale``: the running row max moves only when a key block's max exceeds it by more than
      ``LAZY_MAX_LOG2`` (base 2, after the scale; FlashAttention-4's conditional rescale), and the output's rescale
      multiply runs only in warps where some row's max moved (an ``if`` on a warp vote): after the first key blocks
      a row's max rarely moves that much, and the multiply is block_M x dim / threads FMUL a key block.  Exact
      (the output and the LSE use the max the probabilities were taken against), not only up to rounding."""
    if order not in PERSISTENT_ORDERS:
        raise ValueError(f"attention_fwd: order {order!r} is not one of {PERSISTENT_ORDERS}")
    group = heads // kv_heads
    accum = "float32"
    RQ, RK, RV, RO, RL = (T.dynamic(n) for n in ("rq", "rk", "rv", "ro", "rl"))
    NB, NL = T.dynamic("nb"), T.dynamic("nl")
    q_cols, k_cols, v_cols, o_cols = (heads * dim if q_hc else dim, kv_heads * dim if k_hc else dim,
                                      kv_heads * dim if v_hc else dim, heads * dim if o_hc else dim)

    @T.macro
    def tiles():
        """The block's shared tiles and fragments, in ``attend``'s order."""
        Q_s = T.alloc_shared((block_M, dim), dtype)
        K_s = T.alloc_shared((block_N, dim), dtype)
        V_s = T.alloc_shared((block_N, dim), dtype)
        O_s = T.alloc_shared((block_M, dim), out_dtype) if stage_out else None
        acc_s = T.alloc_fragment((block_M, block_N), accum)
        acc_s_cast = T.alloc_fragment((block_M, block_N), dtype)
        acc_o = T.alloc_fragment((block_M, dim), accum)
        m_cur = T.alloc_fragment((block_M,), accum)
        m_prev = T.alloc_fragment((block_M,), accum)
        m_use = T.alloc_fragment((block_M,), accum)
        rescale = T.alloc_fragment((block_M,), accum)
        row_sum = T.alloc_fragment((block_M,), accum)
        denom = T.alloc_fragment((block_M,), accum)
        bound = T.alloc_fragment((block_M,), "int32") if mask_bound else None
        return Q_s, K_s, V_s, O_s, acc_s, acc_s_cast, acc_o, m_cur, m_prev, m_use, rescale, row_sum, denom, bound

    @T.macro
    def attend(bx, by, bz, args, bufs):
        """One work item: query block ``bx`` of head ``by`` of (sequence, split) ``bz``; ``args``
        the kernel's arguments but ``nseq`` and ``max_q``, ``bufs`` the tiles of ``tiles()``."""
        (Q, K, V, Out, L, CuQ, CuK, seq_q, seq_k, scale, q_rb, q_rh, k_rb, k_rh, v_rb, v_rh, o_rp, o_rb, o_rh, l_rp,
         l_rb, l_rh, l_rs) = args
        Q_s, K_s, V_s, O_s, acc_s, acc_s_cast, acc_o, m_cur, m_prev, m_use, rescale, row_sum, denom, bound = bufs
        seq = bz // splits
        part = bz % splits
        kvh = by // group
        scale_log2 = T.alloc_var(accum)
        scale_log2 = scale * LOG2E  # exp(x * scale) = exp2(x * scale * log2(e))
        tb = T.alloc_var("int32")  # the tensor's batch index (0 for packed sequences)
        q0 = T.alloc_var("int32")  # first position of this sequence in Q/O/L
        k0 = T.alloc_var("int32")  # first position of this sequence in K/V
        len_q = T.alloc_var("int32")
        len_k = T.alloc_var("int32")
        if varlen:
            tb = 0
            q0 = CuQ[seq]
            k0 = CuK[seq]
            len_q = CuQ[seq + 1] - CuQ[seq]
            len_k = CuK[seq + 1] - CuK[seq]
        else:
            tb = seq
            q0 = 0
            k0 = 0
            len_q = seq_q
            len_k = CuK[seq] if cache_lens else seq_k
        shift = len_k - len_q  # causal: query i sees keys j <= i + shift
        key_end = T.alloc_var("int32")
        key_end = T.max(T.min(len_k, (bx + 1) * block_M + shift), 0) if causal else len_k
        # the keys every row of this block sees: tiles ending at or before it need no mask
        key_end_first = T.alloc_var("int32")
        key_end_first = T.min(len_k, bx * block_M + shift + 1) if causal else len_k
        per_part = T.ceildiv(T.ceildiv(len_k, block_N), splits)
        lo = T.alloc_var("int32")
        hi = T.alloc_var("int32")
        lo = part * per_part
        hi = T.max(T.min(lo + per_part, T.ceildiv(key_end, block_N)), lo)
        q_row = T.alloc_var("int32")
        k_row = T.alloc_var("int32")
        v_row = T.alloc_var("int32")
        q_row = tb * q_rb + by * q_rh + q0 + bx * block_M
        k_row = tb * k_rb + kvh * k_rh + k0
        v_row = tb * v_rb + kvh * v_rh + k0

        # rows past this sequence (another head's or sequence's) are read but never used:
        # their scores are masked and their outputs not stored
        T.copy(Q[q_row, by * dim if q_hc else 0], Q_s)
        T.fill(acc_o, 0)
        T.fill(denom, 0)
        T.fill(m_cur, -T.infinity(accum))
        if skip_rescale:  # (declared here: the overlap pass defers the rescale past the loop's end)
            moved = T.alloc_var("int32")
        for kb in T.Pipelined(lo, hi, num_stages=stages):
            T.copy(K[k_row + kb * block_N, kvh * dim if k_hc else 0], K_s)
            T.gemm(Q_s, K_s, acc_s, transpose_B=True, clear_accum=True, policy=T.GemmWarpPolicy.FullRow)
            # only the tiles crossing the end of the keys or (causal) the diagonal are masked; the
            # loop bound already skips the tiles entirely above the diagonal.  even_k: every tile
            # lies within the keys, so only the diagonal is (causal), or nothing
            if causal or not even_k:
                if (kb + 1) * block_N > key_end_first:
                    if causal and even_k and mask_bound:
                        for i in T.Parallel(block_M):
                            bound[i] = bx * block_M + i + shift - kb * block_N
                    for i, j in T.Parallel(block_M, block_N):
                        if causal and even_k and mask_bound:
                            acc_s[i, j] = T.if_then_else(j <= bound[i], acc_s[i, j], -T.infinity(accum))
                        elif causal and even_k:
                            acc_s[i, j] = T.if_then_else(kb * block_N + j <= bx * block_M + i + shift,
                                                         acc_s[i, j], -T.infinity(accum))
                        elif causal:
                            acc_s[i, j] = T.if_then_else(
                                (kb * block_N + j < len_k) and (kb * block_N + j <= bx * block_M + i + shift),
                                acc_s[i, j], -T.infinity(accum))
                        else:
                            acc_s[i, j] = T.if_then_else(kb * block_N + j < len_k, acc_s[i, j],
                                                         -T.infinity(accum))
            T.copy(m_cur, m_prev)
            T.reduce_max(acc_s, m_cur, dim=1, clear=False)
            for i in T.Parallel(block_M):
                if skip_rescale:  # the max used moves only by more than LAZY_MAX_LOG2 (see the docstring)
                    m_cur[i] = T.if_then_else((m_cur[i] - m_prev[i]) * scale_log2 > LAZY_MAX_LOG2, m_cur[i],
                                              m_prev[i])
                if lean and not causal:  # the max is finite (see the docstring): no guard
                    m_use[i] = m_cur[i]
                else:
                    # a row with every key so far masked keeps max -inf; subtract 0 instead (no inf - inf)
                    m_use[i] = T.if_then_else(m_cur[i] == -T.infinity(accum), 0, m_cur[i])
                if lean or fast_rescale:
                    rescale[i] = T.__exp2((m_prev[i] - m_use[i]) * scale_log2)
                else:
                    rescale[i] = T.exp2((m_prev[i] - m_use[i]) * scale_log2)
            if skip_rescale:
                moved = 0
                for i in T.Parallel(block_M):
                    if rescale[i] != 1.0:
                        moved = 1
                if T.any_sync(0xFFFFFFFF, moved != 0):
                    for i, j in T.Parallel(block_M, dim):
                        acc_o[i, j] *= rescale[i]
            else:
                for i, j in T.Parallel(block_M, dim):
                    acc_o[i, j] *= rescale[i]
            if fma_exp2 is None:
                for i, j in T.Parallel(block_M, block_N):
                    # the hardware's 2**x (ex2.approx.ftz on CUDA: one instruction; exp2f adds three
                    # for a denormal range these probabilities do not need)
                    acc_s[i, j] = T.__exp2(acc_s[i, j] * scale_log2 - m_use[i] * scale_log2)
            else:
                for i, j in T.Parallel(block_M, block_N):
                    acc_s[i, j] = acc_s[i, j] * scale_log2 - m_use[i] * scale_log2
                for i, j in T.Parallel(block_M, block_N):
                    acc_s[i, j] = T.if_then_else(j // 8 % fma_exp2[1] < fma_exp2[0], exp2_on_fma(acc_s[i, j]),
                                                 T.__exp2(acc_s[i, j]))
            T.copy(acc_s, acc_s_cast)
            T.copy(V[v_row + kb * block_N, kvh * dim if v_hc else 0], V_s)
            T.gemm(acc_s_cast, V_s, acc_o, policy=T.GemmWarpPolicy.FullRow)
            T.reduce_sum(acc_s, row_sum, dim=1)
            for i in T.Parallel(block_M):
                denom[i] = denom[i] * rescale[i] + row_sum[i]
        for i in T.Parallel(block_M):
            # one reciprocal per row and a multiply per element: a float division is a range check
            # and a call per element (64 of each per consumer thread at d 128)
            rescale[i] = T.if_then_else(denom[i] > 0, 1.0 / denom[i], 0)
            m_use[i] = T.if_then_else(denom[i] > 0, (m_cur[i] * scale_log2 + T.log2(denom[i])) * LN2,
                                      -T.infinity(accum))
        for i, j in T.Parallel(block_M, dim):
            acc_o[i, j] *= rescale[i]
        o_row = T.alloc_var("int32")
        o_row = part * o_rp + tb * o_rb + by * o_rh + q0 + bx * block_M
        if stage_out and even_q:
            T.copy(acc_o, O_s)
            T.copy(O_s, Out[o_row, by * dim if o_hc else 0])
        elif stage_out:
            if (bx + 1) * block_M <= len_q:
                T.copy(acc_o, O_s)
                T.copy(O_s, Out[o_row, by * dim if o_hc else 0])
            else:
                for i, j in T.Parallel(block_M, dim):
                    if bx * block_M + i < len_q:
                        Out[o_row + i, (by * dim if o_hc else 0) + j] = acc_o[i, j]
        elif even_q:
            for i, j in T.Parallel(block_M, dim):
                Out[o_row + i, (by * dim if o_hc else 0) + j] = acc_o[i, j]
        else:
            for i, j in T.Parallel(block_M, dim):
                if bx * block_M + i < len_q:  # rows past this sequence belong to another one
                    Out[o_row + i, (by * dim if o_hc else 0) + j] = acc_o[i, j]
        for i in T.Parallel(block_M):
            if even_q or bx * block_M + i < len_q:
                L[part * l_rp + tb * l_rb + by * l_rh + (q0 + bx * block_M + i) * l_rs] = m_use[i]

    @T.macro
    def item(bx, unit, args, bufs):
        """One work item of the persistent kernel: query block ``bx`` of (head, sequence, split) unit
        ``unit`` (head fastest).  ``item_vars``: the coordinates are first computed into int32 scalars
        (once per item, in both roles) so that ``attend``'s per-element masks and row checks read a
        register instead of repeating the order's arithmetic (64-bit divisions by the unit count)."""
        if item_vars:
            qb = T.alloc_var("int32")
            hd = T.alloc_var("int32")
            sq = T.alloc_var("int32")
            qb = bx
            hd = unit % heads
            sq = unit // heads
            attend(qb, hd, sq, args, bufs)
        else:
            attend(bx, unit % heads, unit // heads, args, bufs)

    if persistent:
        @T.prim_func
        def attention_fwd_kernel(Q: T.Tensor((RQ, q_cols), dtype), K: T.Tensor((RK, k_cols), dtype),
                                 V: T.Tensor((RV, v_cols), dtype), Out: T.Tensor((RO, o_cols), out_dtype),
                                 L: T.Tensor((RL,), accum), CuQ: T.Tensor((NB,), "int32"),
                                 CuK: T.Tensor((NL,), "int32"), nseq: T.int32, max_q: T.int32, seq_q: T.int32,
                                 seq_k: T.int32, scale: T.float32, q_rb: T.int32, q_rh: T.int32, k_rb: T.int32,
                                 k_rh: T.int32, v_rb: T.int32, v_rh: T.int32, o_rp: T.int32, o_rb: T.int32,
                                 o_rh: T.int32, l_rp: T.int32, l_rb: T.int32, l_rh: T.int32, l_rs: T.int32):
            with T.Kernel(persistent, threads=threads) as bid:
                if pdl:
                    T.pdl_sync()  # (first: every global access below may depend on the previous kernel)
                args = (Q, K, V, Out, L, CuQ, CuK, seq_q, seq_k, scale, q_rb, q_rh, k_rb, k_rh, v_rb, v_rh, o_rp,
                        o_rb, o_rh, l_rp, l_rb, l_rh, l_rs)
                bufs = tiles()
                nq = T.ceildiv(max_q, block_M)
                hz = heads * nseq * splits  # (head, sequence, split) units, each of nq query blocks
                items = nq * hz
                if causal and order == "pairs":
                    # query blocks i and nq - 1 - i of one unit in consecutive rounds of one block (nq + 1 key
                    # blocks a pair where the keys are as long as the queries), pairs in unit order; with an
                    # odd nq each unit's middle block is a single, dealt after the pairs from the first
                    # block that had one pair fewer
                    half = nq // 2
                    npairs = half * hz
                    pairs = T.ceildiv(T.max(npairs - bid, 0), persistent)
                    first = (bid + persistent - npairs % persistent) % persistent  # this block's place among singles
                    singles = T.ceildiv(T.max(nq % 2 * hz - first, 0), persistent)
                    for r in T.serial(2 * pairs + singles):
                        p = (r // 2) * persistent + bid  # the pair (in the pair rounds)
                        s = (r - 2 * pairs) * persistent + first  # the single (after them)
                        paired = r < 2 * pairs
                        item(T.if_then_else(paired, T.if_then_else(r % 2 == 0, nq - 1 - p % T.max(half, 1),
                                                                   p % T.max(half, 1)), half),
                             T.if_then_else(paired, p // T.max(half, 1), s), args, bufs)
                elif causal and order != "longest_first":
                    # dealt back and forth: in odd rounds block bid takes the round's item persistent - 1 - bid;
                    # a block runs the items of the full rounds and, where its place in the last round
                    # (``j_last``) is below the items left over, one more
                    j_last = bid + items // persistent % 2 * (persistent - 1 - 2 * bid)
                    for r in T.serial(T.ceildiv(items - j_last, persistent)):
                        w = r * persistent + bid + r % 2 * (persistent - 1 - 2 * bid)
                        if order == "head_major_snake":  # one unit's query blocks together, the longest first
                            item(nq - 1 - w % nq, w // nq, args, bufs)
                        else:
                            item(nq - 1 - w // hz, w % hz, args, bufs)
                else:
                    # work item w = r * persistent + bid: causal, items in order of query block (the longest
                    # first: the last round holds the short ones), then unit; a uniform trip count per block,
                    # so the key loop's pipeline needs no per-item guard
                    for r in T.serial(T.ceildiv(items - bid, persistent)):
                        if causal:
                            item(nq - 1 - (r * persistent + bid) // hz, (r * persistent + bid) % hz, args, bufs)
                        else:  # the query blocks of one head next to each other: they share its keys in L2
                            item((r * persistent + bid) % nq, (r * persistent + bid) // nq, args, bufs)

        return attention_fwd_kernel

    @T.prim_func
    def attention_fwd_kernel(Q: T.Tensor((RQ, q_cols), dtype), K: T.Tensor((RK, k_cols), dtype),
                             V: T.Tensor((RV, v_cols), dtype), Out: T.Tensor((RO, o_cols), out_dtype),
                             L: T.Tensor((RL,), accum), CuQ: T.Tensor((NB,), "int32"), CuK: T.Tensor((NL,), "int32"),
                             nseq: T.int32, max_q: T.int32, seq_q: T.int32, seq_k: T.int32, scale: T.float32,
                             q_rb: T.int32, q_rh: T.int32, k_rb: T.int32, k_rh: T.int32, v_rb: T.int32,
                             v_rh: T.int32, o_rp: T.int32, o_rb: T.int32, o_rh: T.int32, l_rp: T.int32,
                             l_rb: T.int32, l_rh: T.int32, l_rs: T.int32):
        with T.Kernel(T.ceildiv(max_q, block_M), heads, nseq * splits, threads=threads) as (bq, by, bz):
            if pdl:
                T.pdl_sync()  # (first: every global access below may depend on the previous kernel)
            # causal: the query blocks with the most keys are launched first, so the last wave holds
            # the short ones (a better tail); otherwise in order
            attend(T.ceildiv(max_q, block_M) - 1 - bq if causal else bq, by, bz,
                   (Q, K, V, Out, L, CuQ, CuK, seq_q, seq_k, scale, q_rb, q_rh, k_rb, k_rh, v_rb, v_rh, o_rp, o_rb,
                    o_rh, l_rp, l_rb, l_rh, l_rs), tiles())

    return attention_fwd_kernel


def attention_combine(splits, dim, dtype, block_R, threads):
    """Merge split-KV partials: ``O = sum_s exp(L_s - L) O_s`` with ``L = log sum_s exp(L_s)``.
    Rows are (batch, head, query) positions flattened in the output's memory order."""
    R = T.dynamic("r")
    accum = "float32"

    @T.prim_func
    def attention_combine_kernel(Opart: T.Tensor((splits, R, dim), accum), Lpart: T.Tensor((splits, R), accum),
                                 Out: T.Tensor((R, dim), dtype), L: T.Tensor((R,), accum)):
        with T.Kernel(T.ceildiv(R, block_R), threads=threads) as bx:
            lse = T.alloc_fragment((block_R,), accum)
            weight = T.alloc_fragment((block_R,), accum)
            part = T.alloc_fragment((block_R, dim), accum)
            acc = T.alloc_fragment((block_R, dim), accum)
            m = T.alloc_fragment((block_R,), accum)
            total = T.alloc_fragment((block_R,), accum)
            T.fill(m, -T.infinity(accum))
            for s in T.serial(splits):
                T.copy(Lpart[s, bx * block_R], lse)
                for i in T.Parallel(block_R):
                    m[i] = T.max(m[i], lse[i])
            T.fill(total, 0)
            T.fill(acc, 0)
            for s in T.serial(splits):
                T.copy(Lpart[s, bx * block_R], lse)
                T.copy(Opart[s, bx * block_R, 0], part)
                for i in T.Parallel(block_R):
                    # an empty split (lse -inf) weighs 0, also when every split is empty (m = -inf)
                    weight[i] = T.if_then_else(lse[i] == -T.infinity(accum), 0, T.exp2((lse[i] - m[i]) * LOG2E))
                    total[i] = total[i] + weight[i]
                for i, j in T.Parallel(block_R, dim):
                    acc[i, j] += part[i, j] * weight[i]
            for i, j in T.Parallel(block_R, dim):
                acc[i, j] = T.if_then_else(total[i] > 0, acc[i, j] / total[i], 0)
            for i in T.Parallel(block_R):
                m[i] = T.if_then_else(total[i] > 0, m[i] + T.log2(total[i]) * LN2, -T.infinity(accum))
            T.copy(acc, Out[bx * block_R, 0])
            T.copy(m, L[bx * block_R])

    return attention_combine_kernel
