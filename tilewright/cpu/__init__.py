"""TileLang's ``tilelang.cpu`` package: ``tilewright.cpu.language`` is the language as seen from CPUs."""
