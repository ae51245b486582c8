"""TileLang's ``tilelang.metal`` package: ``tilewright.metal.language`` is the language as seen from Apple GPUs."""
