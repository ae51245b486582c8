"""TileLang's ``tilelang.cuda`` package: ``tilewright.cuda.language`` is the language as seen from NVIDIA GPUs."""
