"""TileLang's module path ``tilelang.utils`` (``from tilelang.utils.tensor import
torch_assert_close``): the tensor helpers tests use."""

from .tensor import TensorSupplyType, torch_assert_close  # noqa: F401
