"""``tilewright.language.common`` (TileLang's ``tilelang.language.common``): the vendor-neutral names of
the language, the same objects as ``tilewright.language`` (see ``language/dialects.py``)."""

from .dialects import module_hooks as _module_hooks

__tilelang_dialect__ = "common"
__getattr__, __dir__ = _module_hooks(__tilelang_dialect__)
