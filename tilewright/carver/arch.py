"""``tilelang.carver.arch.driver``: facts of the current CUDA / ROCm device, asked of PyTorch
(imported when a query is made)."""

from __future__ import annotations

import types


def _props(device_id: int):
    try:
        import torch
    except ImportError:
        raise RuntimeError("device queries need PyTorch with a CUDA or ROCm device (CUDA driver not reachable)") \
            from None
    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA or ROCm device is available: the CUDA driver reports no GPU")
    return torch.cuda.get_device_properties(device_id)


def _scaled(n_bytes: int, format: str) -> int:
    scale = {"bytes": 1, "kb": 1024, "mb": 1024 * 1024}
    if format not in scale:
        raise RuntimeError("Invalid format. Must be one of: bytes, kb, mb")
    return n_bytes // scale[format]


def get_cuda_device_properties(device_id: int = 0):
    return _props(device_id)


def get_device_name(device_id: int = 0) -> str:
    return _props(device_id).name


def get_num_sms(device_id: int = 0) -> int:
    """Streaming multiprocessors (NVIDIA) or compute units (AMD) of the device."""
    return int(_props(device_id).multi_processor_count)


def get_shared_memory_per_block(device_id: int = 0, format: str = "bytes") -> int:
    return _scaled(int(_props(device_id).shared_memory_per_block), format)


def get_max_dynamic_shared_size_bytes(device_id: int = 0, format: str = "bytes") -> int:
    """Shared memory a block may opt in to (``sharedMemPerBlockOptin``)."""
    p = _props(device_id)
    return _scaled(int(getattr(p, "shared_memory_per_block_optin", p.shared_memory_per_block)), format)


def get_registers_per_block(device_id: int = 0) -> int:
    p = _props(device_id)
    return int(getattr(p, "regs_per_multiprocessor", 65536))


def get_persisting_l2_cache_max_size(device_id: int = 0) -> int:
    return int(getattr(_props(device_id), "L2_cache_size", 0))


driver = types.SimpleNamespace(
    get_cuda_device_properties=get_cuda_device_properties, get_device_name=get_device_name, get_num_sms=get_num_sms,
    get_shared_memory_per_block=get_shared_memory_per_block,
    get_max_dynamic_shared_size_bytes=get_max_dynamic_shared_size_bytes,
    get_registers_per_block=get_registers_per_block, get_persisting_l2_cache_max_size=get_persisting_l2_cache_max_size)
