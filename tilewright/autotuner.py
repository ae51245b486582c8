"""TileLang's module path ``tilelang.autotuner`` (``from tilelang.autotuner import autotune``):
the names of ``tilewright.autotune``."""

from .autotune import AutoTuner, AutotuneResult, autotune, get_autotune_inputs, set_autotune_inputs  # noqa: F401
