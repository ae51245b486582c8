"""TileLang's ``tilelang.language.tir``: its layer of TVM TIR script names (``T.ptx_mma``,
``T.tvm_mfma``, ``T.simdgroup_load``...).  tilewright has no TIR script layer -- kernels are written
with tile operations (``T.gemm``, ``T.copy``...) and lowered by our own passes -- so this package holds
only ``exports``: which of those names belong to which vendor, used to tell a ported kernel that names
one what to write instead (``language/dialects.py``)."""
