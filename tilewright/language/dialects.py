"""TileLang's per-vendor language modules: ``tilelang.cuda.language``, ``tilelang.rocm.language``,
``tilelang.cpu.language``, ``tilelang.metal.language``, ``tilelang.webgpu.language`` and the
vendor-neutral ``tilelang.language.common``; ``tilelang.language`` itself is the CUDA facade.

tilewright has one language for every target, so every dialect module hands out the very objects of
``tilewright.language`` (``cuda.language.copy is language.copy``); what differs is which names each
dialect has.  The CUDA dialect has all of them; the others leave out the names of CUDA-only hardware
features (thread-block clusters, TMA, wgmma, warpgroup register reallocation, programmatic dependent
launch) and the other names TileLang keeps in its CUDA dialect (``CUDA_ONLY``).  None of TileLang's
ROCm-only names (its MFMA/WMMA intrinsic emitters) exist here, so the ROCm dialect is the common
surface.  TileLang's TVM TIR script names (``T.ptx_mma``, ``T.tvm_mfma``) do not exist here at all:
asking a dialect module for one says what to use instead (``language/tir/exports.py``).  Each
module's ``__all__`` is computed when asked for, so names added to ``tilewright.language`` later are
listed too, and ``__tilelang_dialect__`` names the dialect.
"""

from __future__ import annotations

import types

from .tir.exports import tir_name_hint

# names of tilewright.language that TileLang has only in its CUDA dialect (tilelang.cuda.language: its
# CUDA API list and its cluster, pdl, print, random, warpgroup and intrinsics modules).  The ones that
# tilewright also runs on AMD GPUs (T.print, T.device_assert, T.rng_*, T.named_barrier_arrive) are listed
# all the same: these modules reproduce TileLang's, and tilewright.language has every name for every target.
CUDA_ONLY = frozenset({
    "ClusterKernel", "CUDASourceCodeKernel", "cluster_sync", "cluster_arrive", "cluster_wait",
    "block_rank_in_cluster", "alloc_cluster_barrier", "clc_try_cancel", "clc_is_canceled", "clc_get_first_ctaid_x",
    "clc_get_first_ctaid_y", "clc_get_first_ctaid_z",
    "pdl_trigger", "pdl_sync", "tma_copy", "tma_store_wait", "ws", "WarpSpecialize", "wgmma_gemm", "wgmma_mma",
    "wait_wgmma", "set_max_nreg", "inc_max_nreg", "dec_max_nreg", "disable_warp_group_reg_alloc",
    "fence_proxy_async", "annotate_l2_hit_ratio", "named_barrier_arrive",
    "print", "device_assert", "rng_init", "rng_rand", "rng_rand_float",
})
ROCM_ONLY: frozenset = frozenset()

DIALECTS = ("cuda", "rocm", "common", "cpu", "metal", "webgpu")
_NOT_LANGUAGE = {"annotations", "TilewrightWarning"}  # module plumbing, not part of the T.* surface


def language_names() -> list:
    """The public names of ``tilewright.language`` (the fast-math ``__exp``-style names included)."""
    from .. import language

    out = []
    for name, value in vars(language).items():
        if isinstance(value, types.ModuleType) or name in _NOT_LANGUAGE:
            continue
        dunder_math = name.startswith("__") and not name.endswith("__")
        if dunder_math or not name.startswith("_"):
            out.append(name)
    return sorted(out)


def names_of(dialect: str) -> list:
    if dialect not in DIALECTS:
        raise ValueError(f"unknown language dialect {dialect!r}; the dialects are {', '.join(DIALECTS)}")
    names = language_names()
    if dialect == "cuda":
        return names
    left_out = CUDA_ONLY if dialect != "rocm" else CUDA_ONLY - ROCM_ONLY
    return [n for n in names if n not in left_out]


def module_hooks(dialect: str):
    """``(__getattr__, __dir__)`` for a dialect module: its names resolve to ``tilewright.language``'s
    objects; a name the dialect does not have is an AttributeError that says which dialect has it."""

    def __getattr__(name: str):  # noqa: N807 - the module hook
        from .. import language

        if name == "__all__":
            return names_of(dialect)
        if name in names_of(dialect):
            return getattr(language, name)
        hint = " (a CUDA-only name, as in TileLang: use tilewright.language or tilewright.cuda.language)" \
            if name in CUDA_ONLY and hasattr(language, name) else tir_name_hint(name)
        raise AttributeError(f"module 'tilewright.{_module_path(dialect)}' has no attribute {name!r}{hint}")

    def __dir__():  # noqa: N807 - the module hook
        return names_of(dialect) + ["__tilelang_dialect__"]

    return __getattr__, __dir__


def _module_path(dialect: str) -> str:
    return "language.common" if dialect == "common" else f"{dialect}.language"
