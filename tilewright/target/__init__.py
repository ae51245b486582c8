"""GPU targets: ``Target.parse(...)``, ``Target.current()``."""

from .base import Target  # noqa: F401
