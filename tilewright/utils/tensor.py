"""TileLang's ``tilelang.utils.tensor``: the supply types and the tolerant comparison."""

from ..compat import TensorSupplyType  # noqa: F401
from ..testing import torch_assert_close  # noqa: F401
