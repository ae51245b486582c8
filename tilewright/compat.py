"""Names TileLang programs use on the package (``tilelang.PassConfigKey``, ``TensorSupplyType``,
``disable_cache``) so that they run unchanged but for their imports, and the registry of
``pass_configs`` keys: every key is either read by the pipeline (``HONOURED``), a TileLang key that
has no effect here (``TILELANG_WITHOUT_EFFECT``: a warning says so), or an error naming the close
matches — a misspelt key must never be dropped in silence.  A pass that reads a new key registers
it in ``HONOURED``."""

from __future__ import annotations

import difflib
import enum
import os
import warnings

from .errors import CompileError, TilewrightWarning


class PassConfigKey(str, enum.Enum):
    """``pass_configs`` keys: the ``tw.*`` keys tilewright reads, and TileLang's (see
    ``HONOURED`` / ``TILELANG_WITHOUT_EFFECT`` for which of those act here)."""

    TL_DISABLE_TMA_LOWER = "tl.disable_tma_lower"
    TL_DISABLE_WARP_SPECIALIZED = "tl.disable_warp_specialized"
    TL_DISABLE_SAFE_MEMORY_ACCESS = "tl.disable_safe_memory_legalize"
    TL_ENABLE_FAST_MATH = "tl.enable_fast_math"
    TL_DISABLE_DYNAMIC_TAIL_SPLIT = "tl.disable_dynamic_tail_split"
    TL_DYNAMIC_ALIGNMENT = "tl.dynamic_alignment"
    TL_CONFIG_INDEX_BITWIDTH = "tl.config_index_bitwidth"
    TL_PTXAS_REGISTER_USAGE_LEVEL = "tl.ptxas_register_usage_level"
    TL_ENABLE_PTXAS_VERBOSE_OUTPUT = "tl.enable_ptxas_verbose_output"
    TL_DISABLE_WGMMA = "tl.disable_wgmma"
    TL_DISABLE_THREAD_STORAGE_SYNC = "tl.disable_thread_storage_sync"
    TL_DISABLE_VECTORIZE_256 = "tl.disable_vectorize_256"
    TL_SIMPLIFY = "tl.Simplify"
    TW_DISABLE_GEMM_PREFETCH = "tw.disable_gemm_prefetch"
    TW_DISABLE_TMA = "tw.disable_tma"
    TW_ENABLE_WGMMA = "tw.enable_wgmma"
    TW_MIN_BLOCKS_PER_SM = "tw.min_blocks_per_sm"
    TW_WARP_SPECIALIZE = "tw.warp_specialize"
    TW_MMA_ORDER = "tw.mma_order"
    TW_PINGPONG = "tw.pingpong"  # attn-hopper: warp_specialize_loop's consumer ping-pong


HONOURED: dict[str, str] = {
    "tw.disable_gemm_prefetch": "turn off the operand-prefetching GEMM mainloop",
    "tw.disable_tma": "pipelined global -> shared copies use cp.async instead of TMA",
    "tw.warp_specialize": "true: warp-specialize TMA GEMM mainloops on any TMA target (sm_90); false: never "
                          "(on by default on sm_90a)",
    "tw.enable_wgmma": "true: force wgmma.mma_async on sm_90a where possible even with tl.disable_wgmma; false: "
                       "mma.sync (wgmma is the default on sm_90a)",
    "tw.min_blocks_per_sm": "the occupancy the register budget is planned for (__launch_bounds__)",
    "tw.mma_order": "order of the matrix instructions of a gemm ('serpentine', 'n_outer')",
    "tl.disable_tma_lower": "same as tw.disable_tma (and no warp specialization, which needs TMA)",
    "tl.disable_warp_specialized": "no automatic warp specialization of T.Pipelined GEMM mainloops on sm_90a",
    "tl.disable_wgmma": "gemms on sm_90a use mma.sync instead of wgmma.mma_async",
    "tw.pingpong": "with tw.warp_specialize, two consumer warpgroups of a loop take turns at their gemms (sm_90)",
}

# TileLang's keys that change nothing here (their passes do not exist or their choice is fixed).
TILELANG_WITHOUT_EFFECT: dict[str, str] = {
    "tl.disable_safe_memory_legalize": "out-of-bounds global accesses are always masked",
    "tl.enable_fast_math": "math functions follow the target's default (precise) implementations",
    "tl.disable_dynamic_tail_split": "there is no tail-split pass",
    "tl.dynamic_alignment": "vector widths are derived from the shapes and strides themselves",
    "tl.config_index_bitwidth": "indices are 32-bit, promoted to 64-bit where a tensor needs it",
    "tl.ptxas_register_usage_level": "use tw.min_blocks_per_sm to steer the register budget",
    "tl.enable_ptxas_verbose_output": "set TILEWRIGHT_DUMP_DIR to see the compiler log",
    "tl.disable_thread_storage_sync": "barriers are always inserted where shared memory needs them",
    "tl.disable_vectorize_256": "vector accesses are at most 16 bytes",
    "tl.Simplify": "there is no TVM simplifier",
    "tl.disable_data_race_check": "there is no data-race check pass",
    "tl.device_compile_flags": "tilewright chooses the device compiler flags",
    "tl.enable_async_copy": "global -> shared copies in a pipelined loop are always asynchronous",
    "tl.disable_shuffle_elect": "there is no shuffle-elect pass",
    "tl.disable_loop_unswitching": "there is no loop-unswitching pass",
    "tl.force_let_inline": "there is no TVM simplifier",
    "tl.enable_dump_ir": "set TILEWRIGHT_DUMP_DIR to dump the IR after every pass",
    "tl.dump_ir_path": "set TILEWRIGHT_DUMP_DIR to dump the IR after every pass",
    "tl.ast_print_enable": "set TILEWRIGHT_DUMP_DIR to dump the IR after every pass",
    "tl.enable_aggressive_shared_memory_merge": "shared buffers are placed by tilewright's own planner",
    "tl.disable_shared_memory_reuse": "shared buffers are placed by tilewright's own planner",
    "tir.enable_equiv_terms_in_cse_tir": "there is no TVM CSE pass",
    "tir.disable_cse_tir": "there is no TVM CSE pass",
    "tir.disable_vectorize": "vectorization follows the layouts (use coalesced_width= to bound it)",
    "tir.disable_storage_rewrite": "there is no TVM storage rewrite",
    "tir.merge_static_smem": "shared buffers are placed by tilewright's own planner",
    "tir.noalias": "kernel pointers are always treated as non-aliasing",
    "cuda.kernels_output_dir": "set TILEWRIGHT_DUMP_DIR to see the generated source",
}


def check_pass_configs(opts: dict) -> None:
    """Refuse unknown ``pass_configs`` keys (naming the close matches and the known keys) and warn
    once per call about TileLang keys that have no effect here.  ``opts`` maps key strings to
    values; the compiler's own entries (``optimize_level``, ``backend``) are skipped."""
    known = list(HONOURED) + list(TILELANG_WITHOUT_EFFECT)
    for key in opts:
        if key in ("optimize_level", "backend") or key in HONOURED:
            continue
        if key in TILELANG_WITHOUT_EFFECT:
            warnings.warn(f"pass_configs key {key!r} has no effect in tilewright: {TILELANG_WITHOUT_EFFECT[key]}; "
                          "remove it to silence this warning", TilewrightWarning, stacklevel=3)
            continue
        close = difflib.get_close_matches(key, known, n=3, cutoff=0.6)
        did_you_mean = f"did you mean {', '.join(repr(c) for c in close)}? " if close else ""
        raise CompileError(f"unknown pass_configs key {key!r}",
                           hint=f"{did_you_mean}keys read by tilewright: {', '.join(sorted(HONOURED))}; "
                           f"TileLang keys accepted without effect: {', '.join(sorted(TILELANG_WITHOUT_EFFECT))}")


class TensorSupplyType(enum.Enum):
    """How ``get_profiler`` makes inputs; tilewright always uses fresh random normal values for
    floats (never zeros) and small random integers."""

    Integer = 1
    Uniform = 2
    Normal = 3
    Randn = 4
    Zero = 5
    One = 6
    Auto = 7


def disable_cache() -> None:
    """Compile every kernel afresh from now on (also ``TILEWRIGHT_DISABLE_CACHE=1``)."""
    os.environ["TILEWRIGHT_DISABLE_CACHE"] = "1"


def enable_cache() -> None:
    os.environ.pop("TILEWRIGHT_DISABLE_CACHE", None)
