"""Which of TileLang's TVM TIR script names belong to one vendor (TileLang's
``tilelang.language.tir.exports``; the same names and grouping).

None of these names exist in tilewright (it has no TIR script layer).  The sets let the language
modules answer ``T.ptx_wgmma_ss`` with what to use instead, and keep each vendor's names out of the
other vendors' language modules, as TileLang does.
"""

from __future__ import annotations

# tensor-core and TMA instructions of NVIDIA GPUs (TileLang's tilelang.cuda.language.tir)
CUDA_ONLY_TIR_EXPORTS = frozenset({
    "mma_fill", "mma_store", "ptx_cp_async_bulk", "ptx_fence_barrier_init", "ptx_ldmatrix", "ptx_mma",
    "ptx_mma_block_scale", "ptx_mma_sp", "ptx_tcgen05_mma_blockscaled_ss", "ptx_tcgen05_mma_ss",
    "ptx_tcgen05_mma_ts", "ptx_wait_barrier", "ptx_wgmma_rs", "ptx_wgmma_sp_rs", "ptx_wgmma_sp_ss", "ptx_wgmma_ss",
})

# matrix-core instructions of AMD GPUs (TileLang's tilelang.rocm.language.tir)
ROCM_ONLY_TIR_EXPORTS = frozenset({"tvm_mfma", "tvm_mfma_store", "tvm_rdna_wmma", "tvm_rdna_wmma_store"})

# simdgroup matrices of Apple GPUs (TileLang's tilelang.metal.language.tir)
METAL_ONLY_TIR_EXPORTS = frozenset({
    "make_filled_simdgroup_matrix", "simdgroup_load", "simdgroup_multiply_accumulate", "simdgroup_store",
})

# PTX-named barriers and asynchronous copies that TileLang lowers on CUDA and HIP alike
SHARED_LEGACY_TIR_EXPORTS = frozenset({
    "ptx_arrive_barrier", "ptx_arrive_barrier_expect_tx", "ptx_commit_group", "ptx_cp_async",
    "ptx_cp_async_barrier", "ptx_init_barrier_thread_count", "ptx_wait_group",
})

BACKEND_ONLY_TIR_EXPORTS = CUDA_ONLY_TIR_EXPORTS | METAL_ONLY_TIR_EXPORTS | ROCM_ONLY_TIR_EXPORTS
CLASSIFIED_VENDOR_TIR_EXPORTS = BACKEND_ONLY_TIR_EXPORTS | SHARED_LEGACY_TIR_EXPORTS

_INSTEAD = {  # the first key contained in the name decides
    "wgmma": "T.gemm or T.wgmma_gemm", "tcgen05": "T.gemm", "mfma": "T.gemm (matrix cores are chosen for you)",
    "wmma": "T.gemm (matrix cores are chosen for you)", "simdgroup": "T.gemm",
    "mma": "T.gemm (tensor cores are chosen for you)", "ldmatrix": "T.copy into a shared or fragment buffer",
    "cp_async": "T.copy (T.Pipelined makes copies asynchronous)",
    "barrier": "T.alloc_barrier with T.barrier_arrive / T.barrier_wait",
    "group": "T.Pipelined (it commits and waits for asynchronous copies)",
}


def instead_of(name: str) -> str:
    """What to write instead of the TIR script name ``name`` (one of the sets above)."""
    for key, use in _INSTEAD.items():
        if key in name:
            return use
    return "the tile operations (T.copy, T.gemm, T.reduce_*)"


def tir_name_hint(name: str) -> str:
    """The hint of the AttributeError for ``T.<name>``: empty unless ``name`` is one of TileLang's
    vendor TIR script names."""
    if name not in CLASSIFIED_VENDOR_TIR_EXPORTS:
        return ""
    return (f" (TileLang's TVM TIR intrinsic {name}: tilewright has no TIR script layer; use "
            f"{instead_of(name)})")


__all__ = [
    "BACKEND_ONLY_TIR_EXPORTS", "CLASSIFIED_VENDOR_TIR_EXPORTS", "CUDA_ONLY_TIR_EXPORTS", "METAL_ONLY_TIR_EXPORTS",
    "ROCM_ONLY_TIR_EXPORTS", "SHARED_LEGACY_TIR_EXPORTS", "instead_of", "tir_name_hint",
]
