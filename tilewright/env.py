"""``tilelang.env``: TileLang's environment object, for the settings tilewright has.

``env.TILELANG_CACHE_DIR`` is tilewright's compile cache folder (``TILEWRIGHT_CACHE_DIR``, see
``config.py``) and ``env.TILELANG_TMP_DIR`` the folder of the compilers' temporary files
(``TILEWRIGHT_TMP_DIR``, else the system's); assigning either sets its variable for this process.  TileLang's other
variables configure its own compiler and have no meaning here: reading one is an AttributeError that
says so.
"""

from __future__ import annotations

import os
import tempfile

from . import config


class Environment:
    @property
    def TILELANG_CACHE_DIR(self) -> str:  # noqa: N802 - TileLang's name
        return str(config.get("cache_dir"))

    @TILELANG_CACHE_DIR.setter
    def TILELANG_CACHE_DIR(self, value) -> None:  # noqa: N802
        os.environ[config.KNOBS["cache_dir"].env] = str(value)

    @property
    def TILELANG_TMP_DIR(self) -> str:  # noqa: N802
        return str(config.get("tmp_dir") or tempfile.gettempdir())

    @TILELANG_TMP_DIR.setter
    def TILELANG_TMP_DIR(self, value) -> None:  # noqa: N802
        os.environ[config.KNOBS["tmp_dir"].env] = str(value)

    def __getattr__(self, name: str):
        raise AttributeError(f"tilelang.env.{name}: tilewright has no such setting (its settings are the "
                             "TILEWRIGHT_* environment variables in docs/configuration.md)")


env = Environment()

__all__ = ["Environment", "env"]
