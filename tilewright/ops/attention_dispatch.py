"""``tilewright.ops.attention``: argument checks, configuration choice and launches of the
attention kernels (``ops/attention_kernels.py``)."""

from __future__ import annotations

import math
from threading import get_ident as _get_ident

from ..errors import ArgumentError
from ..jit.alloc_template import empty_maker
from ..jit.kernel import _SYNC_KEY, _SYNC_PROBE
from . import attention_kernels as ak
from . import decode_kernels
from .bound_kernel import BoundKernel
from .dispatch import _check_tensor, _dtype_name, _kernel, _placeholder, _same_device, _target_of, _torch, _wants_grad
from .plan_dict import PlanDict

_NUM_SMS = 132  # the split-KV heuristic aims at filling an H200; a guess elsewhere, and only a speed matter


def attention(q, k, v, causal: bool = False, scale=None, return_lse: bool = False, *, cu_seqlens_q=None,
              cu_seqlens_k=None, max_seqlen_q=None, cache_seqlens=None, num_splits=None):
    """Scaled dot-product attention ``softmax(q k^T * scale) v`` (forward only).

    Dense: ``q`` (batch, heads, seq_q, dim), ``k``/``v`` (batch, kv_heads, seq_k, dim), as
    ``torch.nn.functional.scaled_dot_product_attention``; flash-attn's (batch, seq, heads, dim)
    tensors are read in place through ``x.transpose(1, 2)``.  ``kv_heads`` divides ``heads``
    (MHA, GQA, MQA).  Returns (batch, heads, seq_q, dim) in q's dtype (fp16 or bf16).

    Varlen (``cu_seqlens_q``, ``cu_seqlens_k``: int32 (n + 1,) cumulative lengths): packed
    ``q`` (total_q, heads, dim), ``k``/``v`` (total_k, kv_heads, dim), as flash_attn_varlen_func;
    returns (total_q, heads, dim).  ``max_seqlen_q`` avoids reading the lengths back to the host.

    ``cache_seqlens`` (int32 (batch,)): k/v are a padded KV cache and batch ``b`` uses its first
    ``cache_seqlens[b]`` keys.  ``causal`` aligns the ends (query i sees keys j <= i + Sk - Sq).
    ``scale`` defaults to 1/sqrt(dim).  ``return_lse`` also returns the float32 log-sum-exp of the
    scaled scores, (batch, heads, seq_q) ((heads, total_q) for varlen); rows without keys give
    output 0 and lse -inf.  ``num_splits`` forces the number of split-KV ranges (flash-decoding);
    by default it is chosen from the shapes."""
    # A repeat dense call whose key equals the last call's (the common case: a model's layers call
    # with one signature), served in this frame: no frames for the key, the lookup, the option
    # normalisation and the autograd test (~0.1 us each on the H200's host).  Anything else (another
    # key, an option of another type, tracing, autograd, a plan that declines) takes ``_attention``,
    # which checks as before; the key is ``_dense_key``'s, item for item (tests/test_s14_host_entry.py).
    # (torch.compile: is_compiling first, which dynamo folds to True, so that nothing of the memo is traced)
    torch = _torch_ref[0]
    plans = _dense_plans
    last = plans.last
    if (torch is not None and FAST_ENTRY and not torch.compiler.is_compiling() and last[2] is plans.stamp
            and cu_seqlens_q is None and cu_seqlens_k is None):
        try:
            key = (q.__class__, q.dtype, q.shape, q.stride(), q.device, k.__class__, k.dtype, k.shape, k.stride(),
                   k.device, v.__class__, v.dtype, v.shape, v.stride(), v.device, causal.__class__, causal,
                   scale.__class__, scale, max_seqlen_q.__class__, max_seqlen_q, num_splits.__class__, num_splits)
            if cache_seqlens is not None:
                key += (cache_seqlens.__class__, cache_seqlens.dtype, cache_seqlens.shape, cache_seqlens.stride(),
                        cache_seqlens.device)
            hit = key == last[0]
        except Exception:  # noqa: BLE001 - (not tensors, options that cannot compare: _attention explains)
            hit = False
        # (a hit's tensors are of the plan's class, which has requires_grad; stamp re-read: a clear
        # between the read of ``last`` and here makes it stale)
        if hit and last[2] is plans.stamp:
            if not (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)):
                done = last[1].run(q, k, v, cache_seqlens, return_lse)
                if done is not None:
                    return done if return_lse else done[0]
    return _attention(q, k, v, causal, scale, return_lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, cache_seqlens,
                      num_splits)


# True: ``attention`` serves a repeat of the last dense call's key in its own frame (above); False: every
# call through ``_attention`` (the path before; bench/launch_overhead.py times both ways).  Alone within noise on
# the H200 (15:46: decode 17.6 vs 17.9 us); with DIRECT_LAUNCH the pair won every row at 16:11 (docs/ops.md).
FAST_ENTRY = True
_torch_ref: list = [None]  # torch, once a call of ``_attention`` has imported it (before: every call there)


def _attention(q, k, v, causal, scale, return_lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, cache_seqlens,
               num_splits):
    """``attention`` for every call its in-frame repeat path does not serve: options normalised,
    tracing and autograd through the custom op, the plan lookup, else the checked path."""
    if scale.__class__ is not float and scale is not None:
        scale = _plain_number(scale, float, "scale")
    if max_seqlen_q.__class__ is not int and max_seqlen_q is not None:
        max_seqlen_q = _plain_number(max_seqlen_q, int, "max_seqlen_q")
    if num_splits.__class__ is not int and num_splits is not None:
        num_splits = _plain_number(num_splits, int, "num_splits")
    torch = _torch_ref[0] = _torch()
    if torch.compiler.is_compiling() or (torch.is_grad_enabled() and _wants_grad(q, k, v)):
        # traced, or under autograd (which then says there is no backward instead of dropping the graph)
        out, lse = torch.ops.tilewright.attention(q, k, v, causal, scale, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                                  cache_seqlens, num_splits)
    elif cu_seqlens_q is None and cu_seqlens_k is None:
        # a repeat dense call: one lookup keyed on everything its checks and plan read, then the
        # allocations and the launches (``_DensePlan``, ``decode_kernels._DecodeRun``)
        key = _dense_key(q, k, v, causal, scale, max_seqlen_q, cache_seqlens, num_splits, hashed=False)
        try:  # (the last call's key compared first, else a lookup, which hashes the key: an option
            # that cannot be hashed or compared raises here, and then there is no plan)
            fast = _dense_plans.find(key)
        except (TypeError, ValueError, RuntimeError):
            fast = None
        done = fast.run(q, k, v, cache_seqlens, return_lse) if fast is not None else None
        if done is None:
            done = attention_impl(q, k, v, causal, scale, None, None, max_seqlen_q, cache_seqlens, num_splits,
                                  want_lse=return_lse)
        return done if return_lse else done[0]
    else:
        out, lse = attention_impl(q, k, v, causal, scale, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, cache_seqlens,
                                  num_splits, want_lse=return_lse)
    return (out, lse) if return_lse else out


def _plain_number(x, kind, name):
    """``x`` as a plain ``kind`` when it is a number of a subclass (a numpy scalar, a user's float
    type): the plan memos compare option values, and a subclass's ``==`` may raise or lie.  Anything
    else is returned as it is, for the checks to explain (a bool, a string, a tensor)."""
    import numbers

    if isinstance(x, bool) or not isinstance(x, numbers.Real if kind is float else numbers.Integral):
        return x
    try:
        plain = kind(x)
    except Exception as e:  # a number type whose conversion fails: say so rather than pass it on
        raise ArgumentError(f"{name} must convert to a plain {kind.__name__}; {x!r} raised {e!r}") from None
    return plain


def output_shapes(q, cu_seqlens_q):
    """(output shape, lse shape): for the fake implementation and the launches alike."""
    if cu_seqlens_q is not None:
        return tuple(q.shape), (q.shape[1], q.shape[0])
    return tuple(q.shape), tuple(q.shape[:3])


def _config(dim: int, rows: int) -> tuple:
    """(block_M, block_N, stages, threads) by head dim (the register file holds a block_M x dim
    float accumulator); few query rows (decoding) take thin blocks."""
    if rows <= 16:
        return 16, 64 if dim <= 128 else 32, 2, 128
    if dim <= 128 and rows > 64:
        return 128, 64, 2, 256  # 128 threads spill at dim 128 (sm_90, measured by resource_usage)
    if dim <= 128:
        return 64, 64, 2, 128
    return 64, 32, 2, 256  # dim 256: 128 threads spill


# sm_90a (H100/H200): both gemms on wgmma (Q K^T from shared memory, P V with P from registers) and
# the key loop warp-specialized: a TMA producer warpgroup fills 2-stage K and V rings, two consumer
# warpgroups (64 query rows each) compute; setmaxnreg moves registers to the consumers.
# ``tw.pingpong`` (the consumer warpgroups taking turns at their gemms) is not on until measured;
# ``tw.attention_overlap`` (P V of one key block issued with Q K^T of the next, the softmax between:
# passes/attention_overlap.py) neither: set it True here once measured faster.
HOPPER_CONFIGS = {"tw.enable_wgmma": True, "tw.warp_specialize": True, "tw.attention_overlap": False}
# head dim 64: the overlap measured faster for ops' kernels (bench/results/2026-12-01-0954-attention-
# variants: 410 vs 386 TFLOP/s dense, 341 vs 318 causal, bf16 4x16x4096x64); at 128 it was slower.
HOPPER_D64_OVERRIDES = {"tw.attention_overlap": True, "tw.pingpong": True, "tw.reduce_tree": True}
# tw.wgmma_desc_fold (the descriptors of a gemm's K steps as one base plus constants: the d 64 key loop 485 -> 447 SASS
# instructions a key block) measured slower on the H200 (session 12, 07:46 UTC, TW_VARIANTS=s12, 4x16x4096x64 TFLOP/s):
# non-causal bf16 413/411 vs 455/450, fp16 411/403 vs 451/435; causal 376/375 vs 373/372 bf16, 375/369 vs 371/365
# fp16 (within the rounds' spread), and with the direct store below it (369/366, 367/364) lost to the store alone
# (385/384, 383/380).  Not here.
# tw.uniform_ring (the persistent kernel's ring position broadcast from lane 0 each key step, so ptxas keeps the wgmma
# descriptors in uniform registers: the causal d 64 key loop 696 -> 687 SASS instructions, 650 with the fold too)
# measured slower as well, session 13, H200 08:41 UTC (TW_VARIANTS=s13, 4x16x4096x64 causal, three rounds, TFLOP/s):
# bf16 375/375/373 vs 381/381/377, fp16 373/364/359 vs 378/370/355; with the fold 345/345/344 and 344/344/342; with
# head_major_snake 378/379/378 and 377/373/372 (split: behind in bf16, ahead in fp16).  Not here.
# ping-pong on top (H200, bench/results/2026-12-02-0207-attention-variants-s10, bf16 4x16x4096x64): causal 347 ->
# 371 TFLOP/s, non-causal 431 -> 432.
# tw.reduce_tree (the softmax's row max and sum folded as trees, not chains of 31 dependent FMNMX/FADD) on top:
# H200 session-11 run (05:02 UTC, attention-variants s11, two alternated rounds, TFLOP/s, 4x16x4096x64) non-causal
# bf16 457/448 vs 433/425 (cuDNN 463/453), fp16 448/436 vs 426/417 (450/444); causal bf16 372/369 vs 366/364
# (409/397), fp16 369/365 vs 365/360 (404/390).  At d 128 it lost at 4096 causal keys (451/442 vs 538/520 bf16)
# and tied at 1024: not there.
# dense calls whose query/key lengths are multiples of the blocks take a kernel without tail handling
# (attention_fwd's even_q/even_k: no key mask outside the causal diagonal, no row checks on the output);
# on: measured on the H200 with the session-10 configurations (bench/results/2026-12-02-0207-attention-variants-
# s10, bf16 TFLOP/s, "pp even" column against "pp"/"ops"): non-causal d 128 1024 533 -> 580, 4096 582 -> 611, 16384
# 612 -> 635; causal 16384 605 -> 625, 1024 398 -> 408; 4096 causal and d 64 within 2% (515 vs 520, 365 vs 371).
# Takes effect for new plans.
SPECIALIZE_EVEN = True
# the persistent forward kernel (attention_fwd's ``persistent``: one block per SM looping over the work
# items, the producer loading the next item during this one's epilogue) on the sm_90a path.  True: always,
# False: never, "auto": where a work item has at most PERSISTENT_MAX_KEY_BLOCKS key blocks, i.e. where
# each block's fixed cost (Q load, pipeline fill, epilogue) weighs most.  Measured on the H200
# (bench/results/2026-12-01-1856-attention-variants-*, bf16 TFLOP/s, grid kernel -> persistent):
# 16x16x1024x128 (8 key blocks) 454 -> 515 non-causal, 327 -> 338 causal; 4x16x4096x128 539 -> 549 and
# 474 -> 449 causal; 1x16x16384x128 558 -> 551 and 554 -> 496; 4x16x4096x64 430 -> 403.  Takes effect
# for new plans.
PERSISTENT = "auto"
PERSISTENT_MAX_KEY_BLOCKS = 8
# the same bound for causal calls (whose items have 1 .. n key blocks, so that a block's fixed costs and
# the balance of its items weigh more than without the mask).  32: 4k keys at block_N 128 (H200 run 22:35,
# bf16 causal 4x16x4096x128: persistent "pairs" 507 TFLOP/s vs the grid kernel 484; with the long-causal
# configuration below 521 vs 517; d64 355 vs 354); 16k stays on the grid kernel (persistent 444-513 vs
# 540 at 21:29).  16: the session-10 run (bench/results/2026-12-02-0207-attention-variants-s10) had 4k on the
# grid kernel ahead, 534 vs 515 TFLOP/s persistent at d 128 (d 64 with ping-pong: 367 vs 371); 1024 keys stay
# persistent (grid 329 vs 389).  Back to 32 after a paired check with every other session-10 default on
# (bench/results/2026-12-02-0252-attention-causal4k-NVIDIA-H200, three rounds alternated, TFLOP/s): persistent
# ahead in each round, bf16 526/514/493 vs grid 517/500/485, fp16 509/502/484 vs 502/481/455 (cuDNN 533/521/524,
# 510/506/501).  Takes effect for new plans.
PERSISTENT_MAX_KEY_BLOCKS_CAUSAL = 32
# how the causal persistent kernel orders and deals its work items (attention_kernels.PERSISTENT_ORDERS):
# "longest_first" (dealt in rounds: block b always gets the b-th longest of each round), "longest_first_snake"
# (dealt back and forth: balanced), "head_major_snake" (one head's query blocks together: L2 reuse of its
# keys) and "pairs" (query blocks i and nq-1-i of a head back to back on one block: the L2 reuse of
# head-major and equal work per pair at any length).  "pairs", measured on the H200 (bf16 causal TFLOP/s,
# 22:35 run): 16x16x1024x128 390 (head_major_snake 397, longest_first 334, cuDNN 429), 4x16x4096x128 507
# (500, 446; 532); head_major_snake's balance breaks where a head's items are not a round (1x16x16384x128
# at 21:29: 393 vs 513 for longest_first_snake), which pairs avoid.  Takes effect for new plans.
PERSISTENT_ORDER = "pairs"
# the order of short causal calls at d 65..128 (items of at most PERSISTENT_MAX_KEY_BLOCKS key blocks: 1024 keys),
# over PERSISTENT_ORDER; None: PERSISTENT_ORDER.  "head_major_snake" measured ahead of "pairs" there on the H200
# (session-11 run, 05:02 UTC, attention-variants s11, two alternated rounds, TFLOP/s): 16x16x1024x128 causal bf16
# 412/411 vs 406/392 (cuDNN 421/407), fp16 402/391 vs 391/391 (410/400); at 4096 keys it lost (510/499 vs 538/520
# bf16), so long causal calls keep PERSISTENT_ORDER.  Takes effect for new plans.
PERSISTENT_ORDER_SHORT_CAUSAL = "head_major_snake"
# the persistent kernel computes each item's coordinates (query block, head, sequence) into int32 scalars
# once per item (attention_fwd's ``item_vars``) instead of repeating the order's arithmetic, 64-bit
# divisions included, in the causal mask and the epilogue's row checks.  Takes effect for new plans.
PERSISTENT_ITEM_VARS = True
# the sm_90a path's shared-memory fit without the float32 score tile, which wgmma keeps in registers
# (``_fit_shared(scores=False)``, counting Q, the K/V rings and the staged output tile instead): head
# dim 128 then keeps the two K/V stages of ``_hopper_config`` (the fit with the score tile cut them to
# one: 131.6 KB of shared memory per block in ncu of the S=1024 kernel, stalls on the K/V loads), and
# d 256 too.  True: always; "long causal": causal calls at d <= 128 whose items have more than
# PERSISTENT_MAX_KEY_BLOCKS key blocks (with HOPPER_LONG_CAUSAL_OVERRIDES), the only calls measured: H200
# 22:35, bf16 causal 4x16x4096x128 with the overlap 521 TFLOP/s persistent (507 with one stage and no
# overlap), 517 on the grid kernel (484); at 1024 keys it did not pay (382-389 vs 390).  Takes effect for
# new plans.
HOPPER_SCORES_IN_REGISTERS = "long causal"
# the sm_90a pass configs over HOPPER_CONFIGS for those long causal calls at d 65..128 (d <= 64 has the
# overlap anyway: HOPPER_D64_OVERRIDES): the overlap pays with two K/V stages (above), not with one.
HOPPER_LONG_CAUSAL_OVERRIDES = {"tw.attention_overlap": True}
# non-causal calls at d 65..128 on the sm_90a path: the fit without the score tile (two K/V stages, as
# the user program has: with the tile d 128 got one) and these pass configs over HOPPER_CONFIGS; None:
# as causal calls.  Measured on the H200 (bench/results/2026-12-02-0050-attention-variants-regs, bf16
# TFLOP/s, one stage shipped -> two stages with ping-pong and the overlap; cuDNN): 16x16x1024x128 517 ->
# 547 (596), 4x16x4096x128 550 -> 604 (622), 1x16x16384x128 560 -> 615 (618).  Two stages alone gave
# 501/545/558, with the overlap only 502/521/585, with ping-pong only 473/514/488.  Takes effect for new plans.
HOPPER_NONCAUSAL_OVERRIDES = {"tw.pingpong": True, "tw.attention_overlap": True}
# the key block (block_N) of those non-causal calls: 128, or wider (FlashAttention-3's sm_90 tile for d 128
# non-causal is 128 x 176: fewer key blocks, each softmax's fixed cost over more keys).  A wider block takes
# the grid kernel (the persistent kernel's second Q slot does not fit beside two stages of 176 keys), whose
# staged output tile reuses Q's shared memory (Q is dead after the key loop), so the fit leaves it out;
# split calls keep 128.  Measured slower on the H200 (bench/results/2026-12-02-0207-attention-variants-s10, bf16
# TFLOP/s, 176 vs 128): 426 vs 533 at 1024 keys, 497 vs 582 at 4096, 490 vs 612 at 16384.  Takes effect for new plans.
HOPPER_NONCAUSAL_BLOCK_N = 128
# short causal calls at d 65..128 on the sm_90a path (items of at most PERSISTENT_MAX_KEY_BLOCKS key blocks:
# 1024 keys at block_N 128, the persistent "pairs" kernel): None keeps the fit with the score tile (one K/V
# stage at d 128) and HOPPER_CONFIGS; a dict takes the fit without the score tile (two stages) and these pass
# configs over HOPPER_CONFIGS, as non-causal calls do.  Measured on the H200 (bench/results/2026-12-02-0207-
# attention-variants-s10, bf16 16x16x1024x128 causal TFLOP/s): one stage 389, two stages 390, with the overlap
# 384, with ping-pong and the overlap 398 (408 with SPECIALIZE_EVEN; cuDNN 423).  Takes effect for new plans.
HOPPER_SHORT_CAUSAL_OVERRIDES = {"tw.pingpong": True, "tw.attention_overlap": True}
# head dim <= 64 on the sm_90a path: (block_M, block_N); block_M 128 = two consumer warpgroups.
HOPPER_D64_BLOCKS = (128, 128)
# head dim <= 64 on the sm_90a path: the K/V ring's stages (before the shared-memory fit).  At d 64 a key block
# takes ~1.2 us of a block's time, about an L2 round trip of a 16 KB TMA tile, so two stages leave the producer
# little lead; 3 measured slower on the H200 (session 12, 07:46 UTC, TW_VARIANTS=s12, 4x16x4096x64 TFLOP/s bf16 / fp16:
# causal 376/377 and 373/370 vs 373/372 and 371/365 staged, 386/362 and 380/347 vs 385/384 and 383/380 with the direct
# store; non-causal 451/431 and 440/413 vs 455/450 and 451/435).  Takes effect for new plans.
HOPPER_D64_STAGES = 2
# non-causal calls at head dim <= 64: 192 x 128 blocks (FlashAttention-3's query block there): three consumer
# warpgroups (no ping-pong: it takes two), the fit without the score tile (two stages), the grid kernel (the
# persistent causal one spilled; non-causal not measured).  H200 (bench/results/2026-12-02-0207-attention-variants-
# s10, bf16 4x16x4096x64): 449 TFLOP/s vs 432 with 128 x 128 and ping-pong (cuDNN 463); causal lost (358 vs 371).
# None (HOPPER_D64_BLOCKS) until the tests that pin d 64 non-causal blocks have run with it (no time left in
# session 10); (192, 128) to take it.  Lost since the tree reductions: session 14, H200 11:28 UTC (TW_VARIANTS=s14,
# two rounds alternated with cuDNN, ratio of the means to cuDNN's, bf16 / fp16): do_bench 0.948 / 0.959 against the
# shipped 0.978 / 0.987, in a CUDA graph 0.954 / 0.940 against 0.991 / 0.981.  Takes effect for new plans.
HOPPER_D64_NONCAUSAL_BLOCKS = None
# causal calls at head dim <= 64: None (HOPPER_D64_BLOCKS), or (192, 128): three consumer warpgroups as above, on the
# grid kernel (the persistent one spilled at the 160 registers a consumer thread gets: 48-312 bytes, NVRTC sm_90a; the
# intra-warpgroup overlap declines it, and would spill), with the direct output store (HOPPER_D64_STAGE_OUT
# "noncausal"); or (192, 64): the overlap fits (see HOPPER_D64_CAUSAL_PERSISTENT).  Fewer work items (4x16x4096:
# 1408 instead of 2048), each K/V tile read once per 192 query rows; the diagonal crosses two 128-key blocks.  The
# grid kernel at 192 x 128 lost in session 10 (358 vs 371 TFLOP/s bf16) before the tree and the direct store.
# Session 14 ("3wg causal" in bench/attention_variants.py TW_VARIANTS=s14, H200 11:28 UTC, ratios to cuDNN bf16 / fp16):
# 192 x 128 lost clearly, 0.839 / 0.868 (staged store 0.834 / 0.868) against the shipped 0.936 / 0.953 (do_bench; in a
# CUDA graph 0.852 / 0.854 against 0.943 / 0.945).  Takes effect for new plans.
HOPPER_D64_CAUSAL_BLOCKS = None
# with HOPPER_D64_CAUSAL_BLOCKS: the persistent kernel (PERSISTENT_ORDER) at any key count instead of the grid one.
# Its 192 x 128 form spilled; 192 x 64 (S + P + O = 80 registers of the 160) builds without spills in either kernel
# and takes the intra-warpgroup overlap (FlashAttention-3's sm_90 causal d 64 is persistent, 192 x 128).  Session 14
# candidate ("3wg causal n64 pers"; "3wg causal n64" the grid kernel).  Takes effect for new plans.
HOPPER_D64_CAUSAL_PERSISTENT = False
# those 192 x 128 non-causal blocks (HOPPER_D64_NONCAUSAL_BLOCKS) with the intra-warpgroup overlap (attention_overlap)
# where the lengths divide the blocks: at the 160 registers of a consumer thread the overlap's fit declines them
# (S + P + O = 128 plus its estimate of 64 others), so without this they run with neither the overlap nor ping-pong
# (two warpgroups only); the pass config tw.attention_overlap_registers 32 takes them, built without spills when the
# kernel has no tail handling (ragged lengths, and causal, spilled 28-72 bytes: those keep the loop as it was).
# Session 14 ("3wg ov" in TW_VARIANTS=s14, H200 11:28 UTC, 4x16x4096x64 non-causal, ratios to cuDNN bf16 / fp16): no
# better than "3wg" without it, 0.948 / 0.956 against the shipped 0.978 / 0.987 (CUDA graph 0.961 / 0.954 against
# 0.991 / 0.981): with three warpgroups the overlap does not make up for ping-pong.  Takes effect for new plans.
HOPPER_D64_3WG_OVERLAP = False
# programmatic dependent launch for the sm_90a forward kernels (attention_fwd's ``pdl``: griddepcontrol.wait
# first, both warp-specialized roles; with tw.pdl_prologue the tensor-map prefetch before it): in back-to-back
# calls (a model's layers, CUDA graphs) the next kernel's launch and block placement overlap the previous one's
# tail.  No trigger: the previous kernel's blocks release the next as they exit.  Decode has it by default
# (decode_kernels "pdlwait").  Session 14 ("pdl" in TW_VARIANTS=s14, H200 11:28 UTC, two rounds, ratios to cuDNN
# bf16 / fp16, against the shipped): neutral to slightly behind.  do_bench: 4k d 64 causal 0.936 / 0.953 (the same),
# non-causal 0.971 / 0.980 (0.978 / 0.987), 16x16x1024x128 causal 0.996 / 0.966 (0.983 / 0.965); 20 back-to-back calls
# in a CUDA graph: 0.932 / 0.937 (0.943 / 0.945), 0.982 / 0.980 (0.991 / 0.981), 0.986 / 0.986 (0.991 / 0.990).  Off.
# Takes effect for new plans.
PREFILL_PDL = False
# the forward kernels' key loop without the softmax's -inf guard where no row can see only masked keys
# (attention_fwd's ``lean``: non-causal), its output rescale on the hardware's 2**x (11 of ~695 SASS
# instructions per key block at d 128).  Off: measured at noise level on the H200 (TW_VARIANTS=lean, 22:34 UTC:
# 536 vs 558 TFLOP/s at 4x16x4096x128, 560 vs 567 at 16k, 362 vs 353 at d 64 causal).  Takes effect for new plans.
LEAN_LOOP = False
# head dim <= 64 on the sm_90a path: part of the softmax's 2**x on the FMA pipe (attention_fwd's ``fma_exp2``, a
# cubic: ``attention_kernels.exp2_on_fma``).  There a block's two gemms per key block take about as long on the
# tensor cores as its 128 x 128 exponentials on MUFU (16 lanes per clock per SM), and ping-pong runs one warpgroup's
# softmax under the other's gemms, so the softmax's length bounds the loop.  None: all on MUFU; (k, n): the key
# columns j with (j // 8) % n < k on the FMA pipe ((1, 4): 16 of a consumer thread's 64 scores).  Measured slower on
# the H200 (session-11 run, 05:02 UTC, TW_VARIANTS=s11, bf16 4x16x4096x64 TFLOP/s, shipped 433/425 non-causal and
# 366/364 causal): (1, 8) 428/420 and 363/360, (1, 4) 401/394 and 352/348, (3, 8) 392/391 and 337/337, with the tree
# 421/383 (457/448 without the cubic); fp16 alike: MUFU is not what bounds the loop.  Off.  Takes effect for new plans.
HOPPER_D64_FMA_EXP2 = None
# head dim <= 64 on the sm_90a path: the output tile staged through shared memory and stored by TMA (True), or each
# consumer thread storing its accumulator pairs to global memory (False), or staged for non-causal calls only
# ("noncausal").  The staged store has both consumer warpgroups meet at two block-wide barriers per tile (the
# previous TMA store must have read the tile before it is overwritten, and the store waits for both halves); with
# ping-pong one warpgroup runs half a key block behind the other, so each work item ends with the first waiting for
# the second and both restart in step: a fixed cost per item that weighs twice as much at 4k causal (16.5 key blocks
# an item on average) as non-causal (32).  "noncausal" from the H200 run of session 12 (07:46 UTC, TW_VARIANTS=s12,
# two rounds alternated with cuDNN, TFLOP/s, 4x16x4096x64): causal staged -> direct bf16 373/372 -> 385/384 (0.904 ->
# 0.933 of cuDNN), fp16 371/365 -> 383/380 (0.923 -> 0.957); non-causal it lost a little (bf16 455/450 -> 455/444,
# fp16 451/435 -> 443/430), so non-causal calls keep the staged store.  Takes effect for new plans.
HOPPER_D64_STAGE_OUT = "noncausal"
# causal calls at head dim <= 64 on the sm_90a path: key-loop trims (names from attention_kernels.LOOP_TRIMS, passed
# to attention_fwd as keywords): "fast_rescale" (the output's rescale factor on ex2.approx.ftz, the -inf guard kept:
# 690 instead of 696 SASS instructions in bench/attention_sass.py's causal persistent direct-store loop),
# "mask_bound" (the diagonal block's mask as one compare of the key column against a per-row bound: 688) and
# "skip_rescale" (the running row max moves only by more than 2**8, and warps where no row's max moved branch around
# the output's 32 rescale FMULs a key block; 708 static, 32 fewer where the branch is taken).  H200, session 14
# (TW_VARIANTS=s14, 4x16x4096x64 causal, TFLOP/s per round alternated with cuDNN, bf16 / fp16): 15:44 UTC, three
# rounds: shipped 380/374/354 and 375/371/324, fast_rescale 376/376/362 and 370/366/352, mask_bound 381/378/372 and
# 374/375/363, both 374/372/367 and 368/361/357; 16:08 UTC, four rounds: shipped 385/385/372/385 and 383/380/348/377
# (0.928 / 0.921 of cuDNN), mask_bound 384/384/377/383 and 384/376/366/377 (0.929 / 0.931), skip_rescale 393/387/387/388
# and 389/379/376/374 (0.945 / 0.940), mask_bound + skip_rescale 390/388/386/385 and 391/385/381/364 (0.942 / 0.942,
# medians 387 vs 385 and 383 vs 378.5): taken, a small win near the rounds' spread.  skip_rescale's gain depends on
# how often a row's max moves by more than 2**8 after the first key blocks (rarely on these random inputs); where
# it moves every block the multiply runs as before, after a vote.  Takes effect for new plans.
HOPPER_D64_CAUSAL_TRIMS = ("mask_bound", "skip_rescale")
# the same for non-causal calls at head dim <= 64 ("mask_bound" changes nothing there: no diagonal).  skip_rescale
# lost there (16:08 UTC above, 4x16x4096x64 non-causal: 430/430/427/429 and 431/423/416/420 against the shipped
# 461/453/449/442 and 449/435/435/437: 0.938 / 0.951 of cuDNN against 0.987 / 0.988).  Off.
HOPPER_D64_NONCAUSAL_TRIMS = ()


def _hopper_config(dim: int, rows: int):
    """(block_M, block_N, stages, threads) for the sm_90a path, or None where it does not pay
    (decoding and short queries: fewer than 128 rows leave a consumer warpgroup idle).  block_M is
    128 = two consumer warpgroups of 64 rows (wgmma's M); block_N 128 up to d = 128 (per consumer
    thread: S 64 + P 32 + O d/2 registers, within the 232 setmaxnreg gives) and 64 at d = 256 (O
    alone is 128 registers; shared memory: Q 64 KiB + two K and two V slots of 32 KiB)."""
    if rows <= 64:
        return None
    if dim <= 64:
        return (*HOPPER_D64_BLOCKS, HOPPER_D64_STAGES, 2 * HOPPER_D64_BLOCKS[0])
    return (128, 128 if dim <= 128 else 64, 2, 256)


def _per_device(query):
    """``query(t)`` remembered per ``t.device`` (device properties do not change)."""
    memo: dict = {}

    def remembered(t):
        hit = memo.get(t.device)
        if hit is None:
            hit = memo[t.device] = query(t)
        return hit

    remembered.__doc__ = query.__doc__
    return remembered


@_per_device
def _is_hopper(t) -> bool:
    """Does ``t``'s device take the sm_90a path (wgmma, TMA, setmaxnreg)?"""
    torch = _torch()
    if t.device.type != "cuda" or torch.version.hip:
        return False
    return torch.cuda.get_device_capability(t.device) == (9, 0)


def _fit_shared(cfg: tuple, dim: int, smem: int, scores: bool = True, out_tile: bool = False,
                out_bytes: int = 2) -> tuple:
    """Shrink stages, then block_N, then block_M until Q, the K/V ring and the score tile fit
    in ``smem`` bytes of shared memory (AMD's 64 KiB LDS, smaller NVIDIA parts).  ``scores=False``:
    the scores live in registers (wgmma) and take no shared memory; ``out_tile``: a block_M x dim
    output tile of ``out_bytes`` per element is staged there too (``stage_out``; 4: a split call's
    float32 partials), and 1 KiB is kept for the mbarriers."""
    bM, bN, stages, threads = cfg

    def need(bM, bN, stages):
        if not scores:
            return (bM + 2 * stages * bN) * dim * 2 + (bM * dim * out_bytes if out_tile else 0) + 1024
        return (bM + 2 * stages * bN) * dim * 2 + 2 * bM * bN * 4  # scores: fp32 tile + layout scratch

    while need(bM, bN, stages) > smem:
        if stages > 1:
            stages -= 1
        elif bN > 32:
            bN //= 2
        elif bM > 16:
            bM, threads = bM // 2, 128  # fewer rows: 4 warps (8 would split N below the MMA size)
        else:
            break
    return bM, bN, stages, threads


@_per_device
def _sm_count(t) -> int:
    """Multiprocessors of ``t``'s device (the persistent kernel's grid); CPU tensors plan for an H200."""
    if t.device.type == "cpu":
        return _NUM_SMS
    return _torch().cuda.get_device_properties(t.device).multi_processor_count


@_per_device
def _shared_bytes(t) -> int:
    """Shared memory per block the device allows; CPU tensors (the interpreter) plan for an H200."""
    torch = _torch()
    if t.device.type == "cpu":
        return 232448
    props = torch.cuda.get_device_properties(t.device)
    optin = getattr(props, "shared_memory_per_block_optin", 0)
    return optin or (65536 if torch.version.hip else 101376)


def _check_int(name: str, t, n=None):
    torch = _torch()
    if not isinstance(t, torch.Tensor) or t.dtype != torch.int32 or t.dim() != 1:
        raise ArgumentError(f"{name} must be a 1-D torch.int32 tensor, got "
                            f"{getattr(t, 'dtype', type(t).__name__)} of shape {tuple(getattr(t, 'shape', ()))}")
    if n is not None and t.shape[0] != n:
        raise ArgumentError(f"{name} has {t.shape[0]} elements; expected {n}")


def _rows(t, packed: bool) -> tuple:
    """(2-D view, heads in the columns?, rows per batch, rows per head) of q, k or v, with static
    strides so that the kernels load whole vectors: a (batch, heads, seq, dim) tensor is
    (batch*heads*seq, dim); a (batch, seq, heads, dim) one seen through ``transpose(1, 2)`` and a
    packed (total, heads, dim) one are (rows, heads*dim).  Other layouts (and broadcasts) are copied."""
    if packed:
        t = t if t.is_contiguous() else t.contiguous()
        return t.view(t.shape[0], t.shape[1] * t.shape[2]), True, 0, 0
    B, H, S, D = t.shape
    if not t.is_contiguous() and t.transpose(1, 2).is_contiguous():
        return t.transpose(1, 2).reshape(B * S, H * D), True, S, 0
    t = t if t.is_contiguous() else t.contiguous()
    return t.view(B * H * S, D), False, H * S, S


def _check_arguments(q, k, v, causal, scale, cu_q, cu_k, max_q, cache_lens, num_splits):
    varlen = cu_q is not None or cu_k is not None
    nd = 3 if varlen else 4
    names = "(total, heads, dim)" if varlen else "(batch, heads, seq, dim)"
    for name, t in (("q", q), ("k", k), ("v", v)):
        _check_tensor(name, t, None, ("float16", "bfloat16"))
        if t.dim() != nd:
            raise ArgumentError(f"{name} must be {names}, got shape {tuple(t.shape)}"
                                + ("" if varlen else " (packed tensors need cu_seqlens_q and cu_seqlens_k)"))
    if not (q.dtype == k.dtype == v.dtype):
        raise ArgumentError(f"q, k and v must have one dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
    if k.shape != v.shape:
        raise ArgumentError(f"k has shape {tuple(k.shape)} and v {tuple(v.shape)}; they must match")
    hd = 1
    H, Hkv, D = q.shape[hd], k.shape[hd], q.shape[-1]
    if not varlen and (k.shape[0] != q.shape[0]):
        raise ArgumentError(f"q has batch {q.shape[0]} and k {k.shape[0]}; they must match")
    if k.shape[-1] != D:
        raise ArgumentError(f"q has head dim {D} and k {k.shape[-1]}; they must match")
    if D % 16 or not 16 <= D <= 256:
        raise ArgumentError(f"head dim {D} is not supported: use a multiple of 16 from 16 to 256 (64, 128, 256)")
    if Hkv == 0 or H % Hkv:
        raise ArgumentError(f"k/v have {Hkv} heads, which must divide q's {H} heads (GQA/MQA)")
    if not isinstance(causal, bool):
        raise ArgumentError(f"causal must be a bool, got {causal!r}")
    if scale is not None and not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0):
        raise ArgumentError(f"scale must be a positive finite number or None, got {scale!r}")
    if num_splits is not None and not (isinstance(num_splits, int) and 1 <= num_splits <= 128):
        raise ArgumentError(f"num_splits must be an int from 1 to 128 or None, got {num_splits!r}")
    if varlen:
        if cu_q is None or cu_k is None:
            raise ArgumentError("variable-length attention needs both cu_seqlens_q and cu_seqlens_k")
        if cache_lens is not None:
            raise ArgumentError("cache_seqlens applies to dense (batch, heads, seq, dim) tensors, not with cu_seqlens")
        _check_int("cu_seqlens_q", cu_q)
        _check_int("cu_seqlens_k", cu_k, cu_q.shape[0])
        if cu_q.shape[0] < 1:
            raise ArgumentError("cu_seqlens_q must have at least one element (0)")
        if max_q is not None and not (isinstance(max_q, int) and max_q >= 0):
            raise ArgumentError(f"max_seqlen_q must be a non-negative int or None, got {max_q!r}")
    else:
        if max_q is not None:
            raise ArgumentError("max_seqlen_q is for variable-length batches (with cu_seqlens_q)")
        if cache_lens is not None:
            _check_int("cache_seqlens", cache_lens, q.shape[0])
    _same_device(q=q, k=k, v=v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, cache_seqlens=cache_lens)


def _check_lengths(q, k, cu_q, cu_k, cache_lens):
    """Values of the length tensors (host reads: skipped while tracing and on GPU tensors, where a
    read would synchronize; the kernels then trust them, as flash-attn does)."""
    torch = _torch()
    if q.device.type != "cpu" or torch.compiler.is_compiling():
        return
    for name, cu, total in (("cu_seqlens_q", cu_q, q.shape[0]), ("cu_seqlens_k", cu_k, k.shape[0])):
        if cu is not None:
            if cu[0].item() != 0 or bool((cu[1:] < cu[:-1]).any()) or cu[-1].item() > total:
                raise ArgumentError(f"{name} must start at 0, never decrease and end at most at {total} "
                                    f"(the packed length); got {cu.tolist()}")
    if cache_lens is not None and (bool((cache_lens < 0).any()) or bool((cache_lens > k.shape[2]).any())):
        raise ArgumentError(f"cache_seqlens must lie in 0..{k.shape[2]} (the cache length); got {cache_lens.tolist()}")


def _splits(blocks: int, key_blocks: int, forced) -> int:
    """Split-KV ranges: enough blocks to fill the GPU when the (batch, head, query block) grid is
    small and the keys are long (decoding), each range at least 4 key blocks long."""
    if forced is not None:
        return max(1, min(forced, key_blocks))
    if blocks >= _NUM_SMS or key_blocks < 8:
        return 1
    return max(1, min(2 * _NUM_SMS // blocks, key_blocks // 4, 64))


def attention_impl(q, k, v, causal, scale, cu_q, cu_k, max_q, cache_lens, num_splits, want_lse=True):
    """(out, lse); ``want_lse=False`` allows lse None (a repeat dense call then lets the kernels
    write the LSE to a scratch buffer instead of allocating it)."""
    if cu_q is None and cu_k is None and decode_kernels.KERNEL != "old":  # one query token: flash-decoding
        done = decode_kernels.attention_decode(q, k, v, causal, scale, max_q, cache_lens, num_splits, want_lse)
        if done is not None:
            return done
    dense_key = None
    if cu_q is None and cu_k is None:
        dense_key = _dense_key(q, k, v, causal, scale, max_q, cache_lens, num_splits, hashed=False)
        try:  # (the lookup hashes the key: an unhashable option raises here, and then there is no plan)
            fast = _dense_plans.get(dense_key) if dense_key is not None else None
        except TypeError:
            dense_key = fast = None
        if fast is not None:
            done = fast.run(q, k, v, cache_lens, want_lse)
            if done is not None:
                return done
    torch = _torch()
    _check(q, k, v, causal, scale, cu_q, cu_k, max_q, cache_lens, num_splits)
    _check_lengths(q, k, cu_q, cu_k, cache_lens)
    varlen = cu_q is not None
    out_shape, lse_shape = output_shapes(q, cu_q)
    out = torch.empty(out_shape, dtype=q.dtype, device=q.device)
    lse = torch.empty(lse_shape, dtype=torch.float32, device=q.device)
    if varlen:
        nseq = cu_q.shape[0] - 1
        if max_q is None:
            max_q = int((cu_q[1:] - cu_q[:-1]).max().item()) if nseq > 0 else 0
    else:
        nseq, max_q = q.shape[0], q.shape[2]
    if out.numel() == 0 or nseq == 0 or max_q == 0 or k.numel() == 0:
        lse.fill_(-math.inf)
        return out.zero_(), lse
    # tiles load as 16-byte vectors or TMA boxes: a view starting off a 16-byte boundary is copied
    given = (q, k, v)
    q, k, v = (t if t.data_ptr() % 16 == 0 else t.clone() for t in (q, k, v))
    plan = _launch_plan(q, k, v, causal, scale, varlen, nseq, max_q, cache_lens is not None, num_splits)
    qx = q.reshape(plan.q_shape) if plan.q_shape else q
    qv, kv, vv = (_rows(t, varlen)[0] for t in (qx, k, v))
    if dense_key is not None:
        _remember_dense(dense_key, plan, given, (qv, kv, vv), out, lse, cache_lens)
    dummy = _placeholder(torch.int32, q.device)  # never read (made once per device: no fill kernel per call)
    cu_q_arg = cu_q.contiguous() if varlen else dummy
    cu_k_arg = cu_k.contiguous() if varlen else (cache_lens.contiguous() if cache_lens is not None else dummy)
    head = (nseq,) + plan.head
    l_rb, l_rh, l_rs = plan.lse_strides
    splits, o_rows, D = plan.splits, plan.o_rows, plan.dim
    if splits == 1:
        plan.fwd(qv, kv, vv, out.view(o_rows, -1), lse.view(-1), cu_q_arg, cu_k_arg, *head, 0, *plan.o_strides, 0,
                 l_rb, l_rh, l_rs)
        return out, lse
    opart = torch.empty((splits,) + tuple(out.shape), dtype=torch.float32, device=q.device)
    lpart = torch.empty((splits,) + tuple(out.shape[:-1]), dtype=torch.float32, device=q.device)
    if varlen:  # partial LSEs in (token, head) order, like the output rows
        l_rb, l_rh, l_rs = 0, 1, out.shape[1]
    plan.fwd(qv, kv, vv, opart.view(splits * o_rows, -1), lpart.view(-1), cu_q_arg, cu_k_arg, *head, o_rows,
             *plan.o_strides, lpart[0].numel(), l_rb, l_rh, l_rs)
    rows = out.numel() // D
    # dense: lse (batch, heads, seq) is in the output's row order, so the combine writes it directly
    # (no extra buffer and copy kernel per call); varlen's (heads, total) is the transpose
    lse_rows = torch.empty(rows, dtype=torch.float32, device=q.device) if varlen else lse.view(rows)
    plan.combine(opart.view(splits, rows, D), lpart.view(splits, rows), out.view(rows, D), lse_rows)
    if varlen:
        lse.copy_(lse_rows.view(out.shape[0], out.shape[1]).t())
    return out, lse


class _Plan:
    """What a call's shapes decide (kernels, configuration, split count, the scalar arguments that
    do not change from call to call), made once per signature (``_launch_plan``)."""

    __slots__ = ("combine", "dim", "fwd", "head", "lse_strides", "o_rows", "o_strides", "q_shape", "splits")


_plans: dict = {}


def _launch_plan(q, k, v, causal, scale, varlen, nseq, max_q, has_cache, num_splits) -> _Plan:
    """The ``_Plan`` of a call, remembered per signature: shapes, strides, dtype, device and options
    (the data pointers are the call's own).  Looking up kernels, configurations and the split count
    was a quarter of a decode call's host time."""
    key = (q.shape, q.stride(), k.shape, k.stride(), v.stride(), q.dtype, q.device, causal, scale, varlen, nseq,
           max_q, has_cache, num_splits)
    try:
        hit = _plans.get(key)
    except TypeError:  # an unhashable scale: no memo
        return _make_plan(q, k, v, causal, scale, varlen, nseq, max_q, has_cache, num_splits)
    if hit is None:
        hit = _make_plan(q, k, v, causal, scale, varlen, nseq, max_q, has_cache, num_splits)
        if len(_plans) > 4096:
            _plans.clear()
        _plans[key] = hit
    return hit


def _make_plan(q, k, v, causal, scale, varlen, nseq, max_q, has_cache, num_splits) -> _Plan:
    plan = _Plan()
    H, Hkv, D = q.shape[1], k.shape[1], q.shape[-1]
    scale = float(scale) if scale is not None else 1.0 / math.sqrt(D)
    if varlen:
        keys_hint, seq_k = k.shape[0] // max(nseq, 1), 0
    else:
        keys_hint = seq_k = k.shape[2]
    group = H // Hkv
    plan.q_shape = None
    qx = q
    if not varlen and max_q == 1 and group > 1:
        # decoding with GQA/MQA: the group's query heads become the rows of one kv head's block
        # (one query row: causal masks nothing).
        plan.q_shape = (nseq, Hkv, group, D)
        qx = q.reshape(plan.q_shape)
        H, max_q, causal, group = Hkv, group, False, 1
    seq_q = 0 if varlen else max_q
    (_, q_hc, q_rb, q_rh), (_, k_hc, k_rb, k_rh), (_, v_hc, v_rb, v_rh) = (_rows(t, varlen) for t in (qx, k, v))
    # the output: (batch, heads, seq, dim) or packed (total, heads, dim), contiguous
    o_hc, o_rb, o_rh = (True, 0, 0) if varlen else (False, H * max_q, max_q)
    plan.o_rows = (q.numel() // (q.shape[1] * D)) if varlen else q.numel() // D
    hopper = _hopper_config(D, max_q) if _is_hopper(q) else None
    wide_d64 = HOPPER_D64_CAUSAL_BLOCKS if causal else HOPPER_D64_NONCAUSAL_BLOCKS  # (three consumer warpgroups)
    three_wg = bool(hopper) and D <= 64 and wide_d64 is not None
    if three_wg:
        hopper = (*wide_d64, 2, 2 * wide_d64[0])
    configs = ({**HOPPER_CONFIGS, **HOPPER_D64_OVERRIDES} if D <= 64 else HOPPER_CONFIGS) if hopper else None
    if configs and PREFILL_PDL:
        configs = {**configs, "tw.pdl_prologue": True}
    # causal with longer keys than the persistent bound (and d <= 128): two K/V stages and the overlap
    long_causal = bool(hopper) and causal and D <= 128 and -(-keys_hint // hopper[1]) > PERSISTENT_MAX_KEY_BLOCKS
    if long_causal and D > 64:
        configs = {**configs, **HOPPER_LONG_CAUSAL_OVERRIDES}
    noncausal = bool(hopper) and not causal and 64 < D <= 128 and HOPPER_NONCAUSAL_OVERRIDES is not None
    if noncausal:
        configs = {**configs, **HOPPER_NONCAUSAL_OVERRIDES}
    short_causal = (bool(hopper) and causal and 64 < D <= 128 and not long_causal
                    and HOPPER_SHORT_CAUSAL_OVERRIDES is not None)
    if short_causal:
        configs = {**configs, **HOPPER_SHORT_CAUSAL_OVERRIDES}
    # the output tile staged through shared memory: it fits beside Q and the K/V rings up to d 128
    stage_out = bool(hopper) and D <= 128 and (D > 64 or HOPPER_D64_STAGE_OUT is True
                                                or HOPPER_D64_STAGE_OUT == "noncausal" and not causal)
    # (a d 64 ring of other than two stages: fitted without the score tile too, which wgmma keeps in registers)
    in_regs = bool(hopper) and (HOPPER_SCORES_IN_REGISTERS is True or noncausal or short_causal or three_wg
                                or D <= 64 and HOPPER_D64_STAGES != 2
                                or HOPPER_SCORES_IN_REGISTERS == "long causal" and long_causal)
    # (the split count depends on the blocks, the output dtype on the split count (float32 partials when
    # split) and the staged output tile's size on the dtype: a split call is fitted again for 4-byte
    # outputs, in which either dtype fits)
    cfg = hopper or _config(D, max_q)
    wide = noncausal and HOPPER_NONCAUSAL_BLOCK_N != cfg[1]  # (the grid kernel only: see the knob)
    if wide:
        bM, bN, stages, threads = _fit_shared((cfg[0], HOPPER_NONCAUSAL_BLOCK_N, *cfg[2:]), D, _shared_bytes(q),
                                              scores=False)
        splits = _splits(nseq * H * -(-max_q // bM), -(-keys_hint // bN), num_splits)
        wide = splits == 1 and stages == cfg[2]
    if not wide:
        bM, bN, stages, threads = _fit_shared(cfg, D, _shared_bytes(q), scores=not in_regs,
                                              out_tile=in_regs and stage_out)
        splits = _splits(nseq * H * -(-max_q // bM), -(-keys_hint // bN), num_splits)
    if splits > 1 and in_regs and stage_out:
        bM, bN, stages, threads = _fit_shared(cfg, D, _shared_bytes(q), scores=False, out_tile=True, out_bytes=4)
        splits = _splits(nseq * H * -(-max_q // bM), -(-keys_hint // bN), num_splits)
    dtype = _dtype_name(q)
    target = _target_of(q)
    out_dtype = dtype if splits == 1 else "float32"
    flags = (causal, varlen, has_cache, splits, q_hc, k_hc, v_hc, o_hc, bM, bN, stages, threads)
    # lengths known here (dense, no cache) that divide the blocks: no tail handling in the kernel
    even = SPECIALIZE_EVEN and not varlen and not has_cache
    even_qk = (even and max_q % bM == 0, even and seq_k % bN == 0)
    few_keys = -(-keys_hint // bN) <= (PERSISTENT_MAX_KEY_BLOCKS_CAUSAL if causal else PERSISTENT_MAX_KEY_BLOCKS)
    lean = ("lean",) if LEAN_LOOP else ()  # (an empty key suffix when off: the cache keys stay as they were)
    if three_wg and not causal and HOPPER_D64_3WG_OVERLAP and all(even_qk) and splits == 1 and bM == wide_d64[0]:
        configs = {**configs, "tw.attention_overlap_registers": 32}  # (the kernel NVRTC built without spills)
    fma_exp2 = HOPPER_D64_FMA_EXP2 if configs and D <= 64 else None
    lean += (("fma_exp2", fma_exp2),) if fma_exp2 else ()
    knob = "HOPPER_D64_CAUSAL_TRIMS" if causal else "HOPPER_D64_NONCAUSAL_TRIMS"
    trims = tuple(globals()[knob]) if configs and D <= 64 else ()
    bad = [x for x in trims if x not in ak.LOOP_TRIMS]
    if bad:
        raise ValueError(f"attention_dispatch.{knob}: {bad} not in {ak.LOOP_TRIMS}")
    # (before the persistent grid and order in the key, which tests read from its end; empty when off)
    suffix = (("trims",) + tuple(sorted(trims)),) if trims else ()
    # (their blocks' persistent kernels do not fit or were not measured; HOPPER_D64_CAUSAL_PERSISTENT: causal 3wg
    # persistent whatever the key count)
    three_wg_persistent = three_wg and causal and HOPPER_D64_CAUSAL_PERSISTENT
    grid_only = wide or three_wg and not three_wg_persistent
    few_keys = few_keys or three_wg_persistent
    # (short causal: as ``short_causal`` without its knob)
    order = (PERSISTENT_ORDER_SHORT_CAUSAL if PERSISTENT_ORDER_SHORT_CAUSAL and bool(hopper) and causal
             and 64 < D <= 128 and not long_causal else PERSISTENT_ORDER)
    persistent = _sm_count(q) if configs and not grid_only and (PERSISTENT is True or PERSISTENT == "auto"
                                                                and few_keys) else 0
    # (an empty key suffix with the default: the cache keys stay as they were)
    suffix += ("item exprs",) if persistent and not PERSISTENT_ITEM_VARS else ()
    if configs:
        fwd = _kernel(("attention", H, Hkv, D, dtype, out_dtype, "sm_90a", tuple(sorted(configs.items())), stage_out)
                      + flags + even_qk + suffix + ((persistent, order) if persistent else ()) + lean,
                      lambda: ak.attention_fwd(H, Hkv, D, dtype, out_dtype, *flags, stage_out=stage_out,
                                               even_q=even_qk[0], even_k=even_qk[1], persistent=persistent,
                                               order=order, item_vars=PERSISTENT_ITEM_VARS,
                                               lean=LEAN_LOOP, fma_exp2=fma_exp2,
                                               pdl=bool(PREFILL_PDL), **dict.fromkeys(trims, True)),
                      target, pass_configs=configs)
    else:
        fwd = _kernel(("attention", H, Hkv, D, dtype, out_dtype) + flags + even_qk + lean,
                      lambda: ak.attention_fwd(H, Hkv, D, dtype, out_dtype, *flags, even_q=even_qk[0],
                                               even_k=even_qk[1], lean=LEAN_LOOP), target)
    plan.fwd = BoundKernel(fwd)  # the plan's key fixes every argument's metadata: only pointers change
    plan.combine = None
    if splits > 1:
        bR, cthreads = 16, 128
        plan.combine = BoundKernel(_kernel(("attention_combine", splits, D, dtype, bR, cthreads),
                                           lambda: ak.attention_combine(splits, D, dtype, bR, cthreads), target))
    # the LSE: (batch, heads, seq) or (heads, total); split partials in the output's row order
    plan.lse_strides = (0, q.shape[0], 1) if varlen else (H * max_q, max_q, 1)
    plan.head = (max_q, seq_q, seq_k, scale, q_rb, q_rh, k_rb, k_rh, v_rb, v_rh)
    plan.o_strides = (o_rb, o_rh)
    plan.splits, plan.dim = splits, D
    return plan


# ---------------------------------------------------------------- host time of a repeat call
# Wrappers (kept apart from the functions above so that their edits merge cleanly): a call whose
# argument metadata was checked before skips the checks, and device queries are made once per device.
def _meta(t):
    """What ``_check`` reads of an argument: for a tensor its type, dtype, shape and device."""
    if t is None:
        return None
    try:
        return (t.__class__, t.dtype, t.shape, t.device)
    except AttributeError:
        return (t.__class__, t)  # a scalar by value (unhashable values are checked every call)


_checked: dict = {}  # argument metadata -> True: _check passed for it


def forget_plans() -> None:
    """Forget the checked signatures and the launch plans (``dispatch.forget_plans``)."""
    _torch_ref[0] = None  # (the torch a test patched in goes with its plans: the next call looks it up)
    _checked.clear()
    _plans.clear()
    _dense_plans.clear()
    decode_kernels.forget_plans()


def _check(q, k, v, causal, scale, cu_q, cu_k, max_q, cache_lens, num_splits):
    """``_check_arguments``, skipped for argument metadata that passed it before (a repeat call)."""
    key = (_meta(q), _meta(k), _meta(v), _meta(causal), _meta(scale), _meta(cu_q), _meta(cu_k), _meta(max_q),
           _meta(cache_lens), _meta(num_splits))
    try:
        if key in _checked:
            return
    except TypeError:  # an unhashable argument: no memo
        return _check_arguments(q, k, v, causal, scale, cu_q, cu_k, max_q, cache_lens, num_splits)
    _check_arguments(q, k, v, causal, scale, cu_q, cu_k, max_q, cache_lens, num_splits)
    if len(_checked) > 4096:
        _checked.clear()
    _checked[key] = True


# ---------------------------------------------------------------- a dense call from pointers
def _dense_key(q, k, v, causal, scale, max_q, cache_lens, num_splits, hashed=True):
    """Everything ``_check`` and ``_launch_plan`` read of a dense call (per tensor its type, dtype,
    shape, strides and device; per option its type and value), or None when an argument is not a
    tensor or cannot be a key (the general path explains).  ``hashed=False``: the caller's lookup
    finds out whether it can be a key (hashing a 23-element key twice was ~0.4 us)."""
    try:
        key = (q.__class__, q.dtype, q.shape, q.stride(), q.device, k.__class__, k.dtype, k.shape, k.stride(),
               k.device, v.__class__, v.dtype, v.shape, v.stride(), v.device, causal.__class__, causal,
               scale.__class__, scale, max_q.__class__, max_q, num_splits.__class__, num_splits)
        if cache_lens is not None:
            key += (cache_lens.__class__, cache_lens.dtype, cache_lens.shape, cache_lens.stride(), cache_lens.device)
        if hashed:
            hash(key)
        return key
    except (AttributeError, TypeError):
        return None


class _DensePlan:
    """A dense call whose launches are bound (``BoundKernel.bound``: the device backend), made by a
    call of the general path that passed the checks.  A repeat call allocates the outputs (and one
    workspace for the split partials) and launches from pointers: the views the general path makes
    (``_rows``) start where the given tensors start (a plan is kept only for a signature where they
    do, which the strides decide), so a tensor's own pointer is its view's."""

    __slots__ = ("dummy", "l_off", "make_lse", "make_ws", "plan", "q_dense", "scratch", "tail", "torch", "ws_numel")

    def run(self, q, k, v, cache_lens, want_lse=True):
        """(out, lse), or None for what the general path handles (a start off a 16-byte boundary);
        lse is None when not ``want_lse``: the kernels write it to ``_lse_scratch`` (one allocation
        less per call, ~1.5 us of host time on a GPU)."""
        qp, kp, vp = q.data_ptr(), k.data_ptr(), v.data_ptr()
        cp = self.dummy if cache_lens is None else cache_lens.data_ptr()
        if (qp | kp | vp | cp) & 15:
            return None
        torch = self.torch  # (the module's at plan time: tests that poison its allocations poison these)
        # (cheaper than shape + keywords; a contiguous q, which the plan's key proves, needs no format)
        out = torch.empty_like(q) if self.q_dense else torch.empty_like(q, memory_format=torch.contiguous_format)
        if want_lse:
            lse = self.make_lse()  # (empty_like of a template: no keywords to parse)
            ep = lse.data_ptr()
        else:
            lse, ep = None, self.scratch
        plan = self.plan
        if not self.ws_numel:
            ptrs = [qp, kp, vp, out.data_ptr(), ep, self.dummy, cp]
            # the compiled launch's C call from here, as decode_kernels.DIRECT_LAUNCH's comment says when
            fwd = plan.fwd
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
        ws = self.make_ws()  # the split partials, output then LSE
        wp = ws.data_ptr()
        lp = wp + self.l_off
        plan.fwd.launch_pointers([qp, kp, vp, wp, lp, self.dummy, cp], self.tail)
        plan.combine.launch_pointers([wp, lp, out.data_ptr(), ep], ())
        return out, lse


# True: ``_DensePlan.run`` launches a one-kernel plan through the compiled launcher's C call itself
# (decode_kernels.DIRECT_LAUNCH's comment); False: through BoundKernel.launch_pointers' frames.  On: H200
# 2026-12-02 16:11 (fp16), prefill 10.1 vs 10.9 us with FAST_ENTRY (docs/ops.md).
DIRECT_LAUNCH = True

# _dense_key -> _DensePlan or decode_kernels._DecodeRun (repeat calls from pointers; the last call's key first)
_dense_plans = PlanDict()
_lse_scratch: dict = {}  # device -> float32 buffers, the largest last


def _scratch_lse(numel: int, device) -> int:
    """The address of a float32 buffer of at least ``numel`` elements on ``device`` where a call
    that does not return its LSE lets the kernels write it.  Nothing reads it, so calls (on any
    stream) may share it; a buffer is never freed (a kernel on another stream may still be writing
    it, and a freed block could be handed to a tensor), and each new one at least doubles, so they
    hold at most twice the largest LSE."""
    bufs = _lse_scratch.setdefault(device, [])
    if not bufs or bufs[-1].numel() < numel:
        size = max(numel, 2 * bufs[-1].numel() if bufs else 0, 64)
        bufs.append(_torch().empty(size, dtype=_torch().float32, device=device))
    return bufs[-1].data_ptr()


def _remember_dense(key, plan, given, views, out, lse, cache_lens) -> None:
    """After the general path launched a dense call: keep a ``_DensePlan`` when its launches are
    bound and every view starts where the given tensor does (no copy was made)."""
    if not plan.fwd.bound or (plan.combine is not None and not plan.combine.bound):
        return  # the first call of a plan binds during this call: the next call finds it bound
    for t, view in zip(given, views):
        if view.data_ptr() != t.data_ptr() or view.untyped_storage().data_ptr() != t.untyped_storage().data_ptr():
            return  # a layout that is copied every call (the general path does it)
    if cache_lens is not None and (not cache_lens.is_contiguous() or cache_lens.device.type == "cpu"):
        return  # (on the CPU _check_lengths reads the lengths every call)
    torch = _torch()
    fast = _DensePlan()
    fast.plan, fast.torch = plan, torch
    # the allocations of a repeat call (jit/alloc_template.py: ~1 us of host time less each than
    # torch.empty with keywords); made through the plan's torch (tests that poison it poison these)
    fast.make_lse = empty_maker(torch, lse.shape, torch.float32, out.device)
    fast.q_dense = given[0].is_contiguous()  # (the key holds q's strides: the same for every call of the plan)
    fast.scratch = _scratch_lse(lse.numel(), out.device)
    fast.dummy = _placeholder(torch.int32, out.device).data_ptr()  # kept alive by dispatch._placeholders
    nseq = given[0].shape[0]
    l_rb, l_rh, l_rs = plan.lse_strides
    if plan.splits == 1:
        fast.ws_numel, fast.l_off = 0, 0
        fast.tail = (nseq,) + plan.head + (0,) + plan.o_strides + (0, l_rb, l_rh, l_rs)
    else:
        rows = out.numel() // plan.dim
        fast.ws_numel = plan.splits * (out.numel() + rows)
        fast.make_ws = empty_maker(torch, (fast.ws_numel,), torch.float32, out.device)
        fast.l_off = plan.splits * out.numel() * 4  # a multiple of 64 bytes: the head dim is a multiple of 16
        fast.tail = (nseq,) + plan.head + (plan.o_rows,) + plan.o_strides + (rows, l_rb, l_rh, l_rs)
    _remember_plan(key, fast)


def _remember_plan(key, run) -> None:
    """Keep ``run`` (a ``_DensePlan`` or a ``decode_kernels._DecodeRun``: a ``run(q, k, v,
    cache_lens, want_lse)`` giving (out, lse) or None) for repeat calls of the dense key ``key``."""
    if len(_dense_plans) > 4096:
        _dense_plans.clear()
    _dense_plans[key] = run
