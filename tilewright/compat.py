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

import numpy as np

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
    TL_SIMPLIFY_TRANSITIVELY_PROVE_INEQUALITIES = "transitively_prove_inequalities"
    TL_SIMPLIFY_CONVERT_BOOLEAN_TO_AND_OF_ORS = "convert_boolean_to_and_of_ors"
    TL_SIMPLIFY_APPLY_CONSTRAINTS_TO_BOOLEAN_BRANCHES = "apply_constraints_to_boolean_branches"
    TL_SIMPLIFY_PROPAGATE_KNOWNS_TO_PROVE_CONDITIONAL = "propagate_knowns_to_prove_conditional"
    TL_SIMPLIFY_PROPAGATE_KNOWNS_TO_SIMPLIFY_EXPRESSIONS = "propagate_knowns_to_simplify_expressions"
    TL_SIMPLIFY_ENABLE_LET_INLINE = "enable_simplify_let_inline"
    TL_DISABLE_BUFFER_INIT_CHECK = "tl.disable_buffer_init_check"
    TL_DISABLE_DATA_RACE_CHECK = "tl.disable_data_race_check"
    TL_DISABLE_PRELOWER_SEMANTIC_CHECK = "tl.disable_prelower_semantic_check"
    TL_DEVICE_COMPILE_FLAGS = "tl.device_compile_flags"
    TL_EMIT_LINE_DIRECTIVES = "tl.emit_line_directives"
    TL_ENABLE_REDUCER_PLAN_VERBOSE = "tl.enable_reducer_plan_verbose"
    TL_LAYOUT_COST_MODEL = "tl.layout_cost_model"
    TL_REDUCER_FORCE_BASELINE = "tl.reducer_force_baseline"
    TL_ENABLE_ASYNC_COPY = "tl.enable_async_copy"
    TL_ENABLE_LOWER_LDGSTG = "tl.enable_lower_ldgstg"
    TL_ENABLE_LOWER_LDGSTG_PREDICATED = "tl.enable_lower_ldgstg_predicated"
    TL_ENABLE_VECTORIZE_PLANNER_VERBOSE = "tl.enable_vectorize_planner_verbose"
    TL_DEBUG_MERGE_SHARED_MEMORY_ALLOCATIONS = "tl.debug_merge_shared_memory_allocations"
    TL_ENABLE_AGGRESSIVE_SHARED_MEMORY_MERGE = "tl.enable_aggressive_shared_memory_merge"
    TL_DISABLE_SHARED_MEMORY_REUSE = "tl.disable_shared_memory_reuse"
    TL_DISABLE_SHUFFLE_ELECT = "tl.disable_shuffle_elect"
    TL_DISABLE_LOOP_UNSWITCHING = "tl.disable_loop_unswitching"
    TL_LOOP_UNSWITCHING_ALLOW_NON_TRIVIAL_ELSE = "tl.loop_unswitching_allow_non_trivial_else"
    TL_IF_STMT_BINDING_INLINE_REPLAYABLE_BINDS = "tl.if_stmt_binding_inline_replayable_binds"
    TL_FORCE_LET_INLINE = "tl.force_let_inline"
    TL_AST_PRINT_ENABLE = "tl.ast_print_enable"
    TL_LAYOUT_VISUALIZATION_ENABLE = "tl.layout_visualization_enable"
    TL_LAYOUT_VISUALIZATION_FORMATS = "tl.layout_visualization_formats"
    TL_STORAGE_REWRITE_DETECT_INPLACE = "tl.storage_rewrite_detect_inplace"
    TL_DISABLE_OUT_OF_BOUND_WARNING = "tl.disable_out_of_bound_warning"
    TL_ENABLE_DUMP_IR = "tl.enable_dump_ir"
    TL_DUMP_IR_DIR = "tl.dump_ir_path"
    TL_PASS_PROFILE = "tl.pass_profile"
    TL_PASS_PROFILE_THRESHOLD_MS = "tl.pass_profile_threshold_ms"
    TIR_ENABLE_EQUIV_TERMS_IN_CSE = "tir.enable_equiv_terms_in_cse_tir"
    TIR_DISABLE_CSE = "tirx.disable_cse_tir"
    TIR_SIMPLIFY = "tirx.Simplify"
    TIR_DISABLE_STORAGE_REWRITE = "tirx.disable_storage_rewrite"
    TIR_DISABLE_VECTORIZE = "tirx.disable_vectorize"
    TIR_USE_ASYNC_COPY = "tirx.use_async_copy"
    TIR_ENABLE_DEBUG = "tirx.enable_debug"
    TIR_MERGE_STATIC_SMEM = "tirx.merge_static_smem"
    TIR_ADD_LOWER_PASS = "tirx.add_lower_pass"
    TIR_NOALIAS = "tirx.noalias"
    CUDA_KERNELS_OUTPUT_DIR = "cuda.kernels_output_dir"
    TW_DISABLE_GEMM_PREFETCH = "tw.disable_gemm_prefetch"
    TW_DISABLE_TMA = "tw.disable_tma"
    TW_ENABLE_WGMMA = "tw.enable_wgmma"
    TW_MIN_BLOCKS_PER_SM = "tw.min_blocks_per_sm"
    TW_WARP_SPECIALIZE = "tw.warp_specialize"
    TW_MMA_ORDER = "tw.mma_order"
    TW_PINGPONG = "tw.pingpong"  # attn-hopper: warp_specialize_loop's consumer ping-pong
    TW_ATTENTION_OVERLAP = "tw.attention_overlap"  # attn-overlap: passes/attention_overlap.py
    TW_FAST_MATH = "tw.fast_math"  # lowering_context.FAST_MATH (same as tl.enable_fast_math)
    TW_VERSION_MASKS = "tw.version_masks"  # passes/version_masks.py
    TW_SETMAXNREG = "tw.setmaxnreg"  # lower_to_threads (T.disable_warp_group_reg_alloc)
    TW_GEMM_PINGPONG = "tw.gemm_pingpong"  # passes/warp_specialize_pingpong.py
    TW_PDL_PROLOGUE = "tw.pdl_prologue"  # passes/pdl_prologue.py
    TW_TMA_L2_PROMOTION = "tw.tma_l2_promotion"  # runtime/tensor_maps.py
    TW_ATTENTION_OVERLAP_REGISTERS = "tw.attention_overlap_registers"  # passes/attention_overlap.py


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
    "tw.gemm_pingpong": "with tw.warp_specialize on sm_90a, a persistent GEMM written for one consumer warpgroup "
                        "gets two that take its tiles in turn (one's epilogue overlapping the other's mainloop)",
    "tw.attention_overlap": "with tw.warp_specialize on sm_90a, the attention loop issues P V of one key block "
                            "with Q K^T of the next and overlaps the softmax with it",
    "tw.attention_overlap_retire": "with tw.attention_overlap: 'end' (default) or 'top' of the loop body, where the "
                                   "P V in flight is waited for",
    "tw.attention_overlap_registers": "with tw.attention_overlap: the registers per consumer thread assumed besides "
                                      "the S, P and O tiles when deciding whether the loop fits (default 64)",
    "tl.enable_fast_math": "float32 exp, exp2, exp10, log, log2, log10, sin, cos, tan take their fast spellings "
                           "(T.__exp2 ...: the hardware approximation, a few ulp off, denormal results flushed on "
                           "CUDA); division, sqrt and the other arithmetic stay IEEE",
    "tw.fast_math": "same as tl.enable_fast_math",
    "tw.setmaxnreg": "false: warp-specialized kernels keep the launch's register budget in every warpgroup (no "
                     "setmaxnreg); T.disable_warp_group_reg_alloc() in a kernel sets it",
    "tw.version_masks": "false: no unmasked version of a T.Parallel store whose T.if_then_else mask holds for the "
                        "whole tile (passes/version_masks.py; on by default at optimize_level 2 on CUDA; "
                        "true: on AMD too)",
    "tw.pdl_prologue": "true: a kernel's TMA mbarrier set-up and descriptor prefetch go ahead of its T.pdl_sync "
                        "(passes/pdl_prologue.py; sm_90+)",
    "tw.tma_l2_promotion": "bytes (0, 64, 128 or 256; default 128) that a TMA load's descriptor asks L2 to fetch "
                           "around each row of its box (CUtensorMapL2promotion; runtime/tensor_maps.py)",
    "tw.reduce_tree": "true: each thread folds its registers of a T.reduce_* as a balanced tree (log2(n) dependent "
                      "steps instead of n; sums round differently)",
    "tw.uniform_ring": "true: the persistent attention kernel's consumers take the key loop's bounds and ring "
                       "position through a broadcast from lane 0 (CUDA), so ptxas keeps the wgmma descriptors in "
                       "uniform registers",
    "tw.wgmma_desc_fold": "true: a wgmma operand's shared-memory descriptor is printed as its tile base's descriptor "
                          "plus a constant (one add per K step instead of the address masked and shifted again)",
}

# TileLang's keys that change nothing here (their passes do not exist or their choice is fixed).
TILELANG_WITHOUT_EFFECT: dict[str, str] = {
    "tl.disable_safe_memory_legalize": "out-of-bounds global accesses are always masked",
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
    # TileLang's simplifier sub-options (fields of its tl.Simplify configuration)
    "transitively_prove_inequalities": "there is no TVM simplifier",
    "convert_boolean_to_and_of_ors": "there is no TVM simplifier",
    "apply_constraints_to_boolean_branches": "there is no TVM simplifier",
    "propagate_knowns_to_prove_conditional": "there is no TVM simplifier",
    "propagate_knowns_to_simplify_expressions": "there is no TVM simplifier",
    "enable_simplify_let_inline": "there is no TVM simplifier",
    "tl.disable_buffer_init_check": "there is no buffer-initialization check pass",
    "tl.disable_prelower_semantic_check": "tilewright's verifier always runs (its checks refuse wrong kernels)",
    "tl.emit_line_directives": "generated code carries no #line directives",
    "tl.enable_reducer_plan_verbose": "there is no reducer planner log",
    "tl.layout_cost_model": "layouts are chosen by tilewright's own inference",
    "tl.reducer_force_baseline": "reductions are lowered by tilewright's own plan",
    "tl.enable_lower_ldgstg": "global loads and stores are printed by tilewright's own code generator",
    "tl.enable_lower_ldgstg_predicated": "global loads and stores are printed by tilewright's own code generator",
    "tl.enable_vectorize_planner_verbose": "there is no vectorize-planner log",
    "tl.debug_merge_shared_memory_allocations": "shared buffers are placed by tilewright's own planner",
    "tl.loop_unswitching_allow_non_trivial_else": "there is no loop-unswitching pass",
    "tl.if_stmt_binding_inline_replayable_binds": "there is no TVM simplifier",
    "tl.layout_visualization_enable": "there is no layout visualizer",
    "tl.layout_visualization_formats": "there is no layout visualizer",
    "tl.storage_rewrite_detect_inplace": "there is no TVM storage rewrite",
    "tl.disable_out_of_bound_warning": "out-of-bounds accesses of global tiles are masked, with no warning",
    "tl.pass_profile": "set TILEWRIGHT_LOG=info for the compile times",
    "tl.pass_profile_threshold_ms": "set TILEWRIGHT_LOG=info for the compile times",
    # TileLang's TIR keys (``tirx.*`` in newer releases, ``tir.*`` in older ones)
    "tirx.disable_cse_tir": "there is no TVM CSE pass",
    "tirx.Simplify": "there is no TVM simplifier",
    "tirx.disable_storage_rewrite": "there is no TVM storage rewrite",
    "tirx.disable_vectorize": "vectorization follows the layouts (use coalesced_width= to bound it)",
    "tirx.use_async_copy": "global -> shared copies in a pipelined loop are always asynchronous",
    "tir.use_async_copy": "global -> shared copies in a pipelined loop are always asynchronous",
    "tirx.enable_debug": "there is no TVM debug mode",
    "tir.enable_debug": "there is no TVM debug mode",
    "tirx.merge_static_smem": "shared buffers are placed by tilewright's own planner",
    "tirx.add_lower_pass": "tilewright's pass pipeline takes no user passes",
    "tir.add_lower_pass": "tilewright's pass pipeline takes no user passes",
    "tirx.noalias": "kernel pointers are always treated as non-aliasing",
    "tir.Simplify": "there is no TVM simplifier",
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


# ---------------------------------------------------------------------------------------------
# execution backends: TileLang's names choose how its host wrapper is built (TVM FFI, Cython,
# ctypes, DLPack, NVRTC...); every one of them runs the same device kernel.  tilewright has one
# launcher, so they all mean "run on the device" here.  "emulator" and "interpret" are ours.

TILELANG_EXECUTION_BACKENDS = ("auto", "tvm_ffi", "cython", "ctypes", "dlpack", "nvrtc", "torch", "cutedsl")
OWN_EXECUTION_BACKENDS = ("emulator", "interpret")


def resolve_execution_backend(name) -> str | None:
    """``compile(..., execution_backend=name)`` -> None (the target's device launcher), "emulator"
    or "interpret"; an unknown name is a ``CompileError`` listing the accepted ones."""
    if name is None:
        return None
    key = str(name).lower()
    if key in OWN_EXECUTION_BACKENDS:
        return key
    if key in TILELANG_EXECUTION_BACKENDS:
        return None
    accepted = ", ".join(repr(n) for n in (None,) + OWN_EXECUTION_BACKENDS + TILELANG_EXECUTION_BACKENDS)
    raise CompileError(f"unknown execution_backend {name!r}",
                       hint=f"use one of {accepted} (TileLang's names all run the kernel on the device here)")


def cdiv(a, b):
    """Ceiling division ``(a + b - 1) // b`` (TileLang's ``tilelang.cdiv``): host integers, or
    kernel expressions inside a kernel (the same as ``T.ceildiv``)."""
    if isinstance(a, int) and isinstance(b, int):
        if b == 0:
            raise ZeroDivisionError("cdiv by zero")
        return -(-a // b)
    from .language import ceildiv

    return ceildiv(a, b)


# ---------------------------------------------------------------------------------------------
# TileLang's tolerant comparison (tilelang.testing.torch_assert_close, Profiler.assert_allclose)


def _as_float64(x) -> np.ndarray:
    if type(x).__module__.startswith("torch"):
        x = x.detach().cpu()
        if x.dtype.is_floating_point or x.dtype.is_complex:
            x = x.double() if not x.dtype.is_complex else x
        else:
            x = x.to(dtype=__import__("torch").float64)
        return x.numpy()
    a = np.asarray(x)
    return a if a.dtype.kind == "c" else a.astype(np.float64)


def assert_mostly_close(actual, expected, rtol: float = 1e-2, atol: float = 1e-3, max_mismatched_ratio: float = 0.001,
                        equal_nan: bool = True, verbose: bool = False, names=("actual", "reference")) -> bool:
    """Pass when at most ``int(numel * max_mismatched_ratio)`` elements fail
    ``|actual - expected| <= atol + rtol * |expected|`` (NaNs match NaNs when ``equal_nan``) — the
    semantics of TileLang's ``torch_assert_close``.  Shapes must agree.  Raises ``AssertionError``
    with the count and the first mismatch."""
    a, b = _as_float64(actual), _as_float64(expected)
    if a.shape != b.shape:
        raise AssertionError(f"The values for attribute 'shape' do not match: {a.shape} != {b.shape}.")
    with np.errstate(invalid="ignore", over="ignore"):
        bad = ~np.isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)
    n_bad, total = int(bad.sum()), a.size
    allowed = int(total * max_mismatched_ratio)
    if verbose:
        print(f"Number of mismatched elements: {n_bad} / {total} (allowed: {allowed})")
    if n_bad > allowed:
        idx = tuple(int(i) for i in np.unravel_index(int(np.argmax(bad.reshape(-1))), a.shape))
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.abs(a - b)
        raise AssertionError(
            f"Too many mismatched elements: {n_bad} > {allowed} ({max_mismatched_ratio * 100:.2f}% allowed, "
            f"got {n_bad / max(total, 1) * 100:.2f}%) at rtol={rtol}, atol={atol}. First mismatch at index "
            f"{list(idx)}: {names[0]}={a[idx]!r}, {names[1]}={b[idx]!r}; greatest absolute difference "
            f"{np.nanmax(diff) if diff.size else 0.0!r}")
    return True
