"""Python AST of a prim_func -> Tile IR."""

from . import regions  # noqa: F401  (installs the subscript rule of buffers)
