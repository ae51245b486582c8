"""Profiler inputs as TileLang's ``TensorSupplyType`` says (``tilelang.utils.tensor``):

- ``Auto`` (the default): floats uniform in [-1, 1); unsigned integers in 0..2; bool 0/1; signed
  integers in -2..2; 8-bit floats from random int8 values in -128..127;
- ``Integer``: small random integers of the dtype (as for ``Auto``, floats included);
- ``Uniform`` / ``Normal`` / ``Randn``: uniform in [-1, 1) / normal(mean -1, std 1) / normal(0, 1),
  computed in float32 and rounded to the dtype (integer dtypes take ``Integer`` values: TileLang
  gives constant ones there, which would test nothing);
- ``Zero`` / ``One``: constant tensors (asked for explicitly).

On the GPU backend inputs are torch tensors made on the current CUDA/ROCm device with a seeded
``torch.Generator``; on the CPU backends NumPy arrays from a seeded NumPy generator.
"""

from __future__ import annotations

import numpy as np

from ..ir import dtype as dt


def _kind(supply) -> str:
    if supply is None:
        return "Auto"
    name = getattr(supply, "name", None) or str(supply)
    return name.rsplit(".", 1)[-1]


def _integers(dtype: str, lo: int, hi: int, shape, rng, on_device: bool):
    if dtype.startswith("uint"):
        lo, hi = 0, 3
    elif dtype == "bool":
        lo, hi = 0, 2
    elif dtype.startswith("float8"):
        lo, hi = -128, 128
    if on_device:
        import torch

        from ..binding.tensor_args import to_torch_dtype

        work = torch.int8 if dtype.startswith("float8") else torch.int64
        x = torch.randint(lo, hi, shape, generator=rng.torch, device="cuda", dtype=work)
        return x.to(to_torch_dtype(dtype))
    x = rng.numpy.integers(lo, hi, shape)
    if dtype.startswith("float8"):
        x = x.astype(np.int8).astype(np.float32)
    return x.astype(dt.to_numpy(dtype))


def _floats(kind: str, dtype: str, shape, rng, on_device: bool):
    if on_device:
        import torch

        from ..binding.tensor_args import to_torch_dtype

        g = rng.torch
        if kind == "Uniform" or kind == "Auto":
            x = torch.rand(shape, generator=g, device="cuda", dtype=torch.float32) * 2 - 1
        elif kind == "Normal":
            x = torch.randn(shape, generator=g, device="cuda", dtype=torch.float32) - 1
        else:
            x = torch.randn(shape, generator=g, device="cuda", dtype=torch.float32)
        return x.to(to_torch_dtype(dtype))
    g = rng.numpy
    if kind == "Uniform" or kind == "Auto":
        x = g.uniform(-1.0, 1.0, shape)
    elif kind == "Normal":
        x = g.normal(-1.0, 1.0, shape)
    else:
        x = g.standard_normal(shape)
    return x.astype(np.float32).astype(dt.to_numpy(dtype))


def _four_bit(dtype: str, shape: tuple, kind: str, rng, on_device: bool):
    """A 4-bit input: on the device, packed bytes of shape (..., n // 2) (ir/dtype.py); on the host, the
    unpacked ml_dtypes array.  Random codes, or every element 0 / 1."""
    codes = {"Zero": 0, "One": 2 if dtype == "float4_e2m1fn" else 1}.get(kind)
    logical = (np.full(shape, codes, np.uint8) if codes is not None
               else rng.numpy.integers(0, 16, shape).astype(np.uint8))
    if not on_device:
        from ..binding.packed import unpack

        packed = logical[..., 0::2] | (logical[..., 1::2] << 4)
        return unpack(packed, dtype)
    import torch

    from ..binding.tensor_args import to_torch_dtype

    packed = torch.from_numpy(np.ascontiguousarray(logical[..., 0::2] | (logical[..., 1::2] << 4)))
    return packed.to("cuda").view(to_torch_dtype(dtype))


def make_input(dtype: str, shape: tuple, supply, rng, on_device: bool):
    """One input tensor of ``dtype`` and ``shape`` as ``supply`` (a ``TensorSupplyType``, its
    name, or None for ``Auto``) says; ``rng`` holds the seeded generators."""
    kind = _kind(supply)
    if dt.is_subbyte(dtype):
        return _four_bit(dtype, shape, kind, rng, on_device)
    if kind in ("Zero", "One"):
        value = 0 if kind == "Zero" else 1
        if on_device:
            import torch

            from ..binding.tensor_args import to_torch_dtype

            return torch.full(shape, value, device="cuda", dtype=to_torch_dtype(dtype))
        return np.full(shape, value, dtype=dt.to_numpy(dtype))
    if kind not in ("Auto", "Integer", "Uniform", "Normal", "Randn"):
        raise ValueError(f"unknown tensor supply type {supply!r}; use a tilewright.TensorSupplyType member")
    is_plain_float = dtype.startswith(("float", "bfloat")) and not dtype.startswith("float8")
    if kind == "Integer" or not is_plain_float:
        return _integers(dtype, -2, 3, shape, rng, on_device)
    return _floats(kind, dtype, shape, rng, on_device)
