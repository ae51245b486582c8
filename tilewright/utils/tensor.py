"""TileLang's ``tilelang.utils.tensor``: the supply types and the tolerant comparison."""

from ..compat import TensorSupplyType  # noqa: F401
from ..testing import torch_assert_close  # noqa: F401


def get_tensor_supply(supply_type=TensorSupplyType.Integer):
    """A function making one input tensor for a parameter (anything with ``shape`` and ``dtype``:
    a kernel's ``T.Tensor`` parameter, or a torch tensor to imitate) as ``supply_type`` says — on
    the GPU when there is one (torch tensors), else NumPy arrays (see ``profiler/supply.py``)."""
    from ..profiler import _gpu_present, _Rng
    from ..profiler.supply import make_input

    def get_tensor(param):
        dtype = str(param.dtype).replace("torch.", "")
        shape = tuple(int(s) for s in param.shape)
        on_device = _gpu_present()
        return make_input(dtype, shape, supply_type, _Rng(0, on_device), on_device)

    return get_tensor
