"""``tilewright.rocm.language`` (TileLang's ``tilelang.rocm.language``): the names of the language the rocm
dialect has, the same objects as ``tilewright.language`` (see ``tilewright/language/dialects.py``)."""

from ..language.dialects import module_hooks as _module_hooks

__tilelang_dialect__ = "rocm"
__getattr__, __dir__ = _module_hooks(__tilelang_dialect__)
