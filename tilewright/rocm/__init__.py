"""TileLang's ``tilelang.rocm`` package: ``tilewright.rocm.language`` is the language as seen from AMD GPUs."""
