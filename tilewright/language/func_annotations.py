"""TileLang's function-level annotations written inside the kernel function:

* ``T.annotate_pass_configs({PassConfigKey.X: value})``: compile options of this function, as
  ``pass_configs=`` of ``tilewright.compile`` gives them (an explicit ``pass_configs=`` entry wins).
* ``T.annotate_compile_flags(["--use_fast_math"])``: device compiler flags.  tilewright chooses the
  device compiler's flags itself, so they act as the ``tl.device_compile_flags`` pass config does
  (a warning that they change nothing).

Both are recorded in ``PrimFunc.attrs`` under TileLang's keys (``tilelang_pass_configs``,
``tilelang_compile_flags``), where ``tilewright.compile`` reads them.  Like TileLang's they may stand
anywhere at the top of the function, before or after the parameters' declarations.
"""

from __future__ import annotations

import enum

from ..frontend import builder as _b


def _record(key: str, value) -> None:
    b = _b.current()
    b.__dict__.setdefault("func_attrs", {})[key] = value


def merge_pass_configs(configs: dict) -> None:
    """Add ``configs`` to the function's recorded pass configs (later entries win)."""
    b = _b.current()
    attrs = b.__dict__.setdefault("func_attrs", {})
    attrs["tilelang_pass_configs"] = {**attrs.get("tilelang_pass_configs", {}), **configs}


def annotate_pass_configs(configs: dict) -> None:
    """``T.annotate_pass_configs({...})`` (see the module docstring)."""
    if not isinstance(configs, dict):
        raise _b.error(f"T.annotate_pass_configs takes a dict of pass configs, got {configs!r}")
    merge_pass_configs({k.value if isinstance(k, enum.Enum) else str(k): v for k, v in configs.items()})


def annotate_compile_flags(flags) -> None:
    """``T.annotate_compile_flags([...])`` (see the module docstring)."""
    if isinstance(flags, str):
        flags = [flags]
    if not isinstance(flags, (list, tuple)) or not all(isinstance(f, str) for f in flags):
        raise _b.error(f"T.annotate_compile_flags takes a list of flag strings, got {flags!r}")
    _record("tilelang_compile_flags", list(flags))


__all__ = ["annotate_pass_configs", "annotate_compile_flags"]
