"""Autotuning: ``@tilewright.autotune(configs=...)`` over ``@tilewright.jit``, and ``AutoTuner``
for the programmatic form (TileLang's API on tilewright's engine: parallel compile workers,
resource pruning, L2-flushed timing, reference checks and a persistent tuning cache)."""

from .decorator import autotune  # noqa: F401
from .inputs import get_autotune_inputs, set_autotune_inputs  # noqa: F401
from .tuner import AutoTuner, AutotuneResult  # noqa: F401
