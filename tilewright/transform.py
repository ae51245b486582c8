"""TileLang's module path ``tilelang.transform`` for its pass-configuration keys
(``from tilelang.transform import PassConfigKey``).  TileLang's TVM passes themselves are not part
of tilewright: using one raises an AttributeError that names it."""

from .compat import PassConfigKey  # noqa: F401
