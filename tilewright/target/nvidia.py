"""NVIDIA architectures: sm_80 (A100), sm_86/sm_89 (Ampere/Ada consumer), sm_90/sm_90a (H100/H200),
sm_100a (B200) and sm_120a (RTX 50) as far as the sm_80/sm_90 paths go.

Feature flags follow the PTX ISA's requirements exactly:

* ``tma`` (cp.async.bulk.tensor), ``mbarrier`` transaction counts and ``cluster`` (thread-block clusters:
  ``__cluster_dims__``, ``barrier.cluster``, ``mapa``, TMA ``.multicast::cluster``): sm_90 and newer;
* ``wgmma`` and ``setmaxnreg``: sm_90a only (architecture-specific features of Hopper, not carried
  forward: sm_100a has ``tcgen05`` instead and sm_120a has neither);
* ``tcgen05`` (fifth-generation tensor cores, tensor memory): sm_100a / sm_101a / sm_103a.
"""

from __future__ import annotations

import re

from ..errors import TargetError
from .base import Target
from .matrix import mma_sync_m16n8k16

# shared memory a block may opt into (bytes), from the CUDA programming guide's compute capability table
_MAX_SHARED = {80: 163 * 1024, 86: 99 * 1024, 87: 163 * 1024, 89: 99 * 1024, 90: 227 * 1024, 100: 227 * 1024,
               120: 99 * 1024}


def nvidia_target(arch: str) -> Target:
    m = re.fullmatch(r"sm_(\d+)([a-z]?)", str(arch))
    if not m:
        raise TargetError(f"unknown NVIDIA architecture {arch!r}; write e.g. 'sm_80' or 'sm_90a'")
    cc = int(m.group(1))
    if cc < 80:
        raise TargetError(
            f"{arch} is older than sm_80; tilewright's CUDA path needs cp.async and mma.sync m16n8k16 (Ampere or newer)"
        )
    features = ["mma.sync", "ldmatrix", "cp.async"]
    async_copy = ["cp.async"]
    arch_specific = m.group(2) == "a"
    if cc >= 90:
        features += ["tma", "mbarrier", "cluster"]
        async_copy.append("tma")
    if cc == 90 and arch_specific:
        features += ["wgmma", "setmaxnreg"]
    if cc in (100, 101, 103) and arch_specific:
        features.append("tcgen05")
    return Target(
        kind="cuda",
        arch=arch,
        vendor="nvidia",
        warp_size=32,
        max_threads_per_block=1024,
        max_shared_bytes=_MAX_SHARED.get(cc, 99 * 1024),
        registers_per_thread=255,
        register_file_per_sm=65536,
        num_simds=4,
        matrix_instrs=(mma_sync_m16n8k16("float16"), mma_sync_m16n8k16("bfloat16")),
        async_copy=tuple(async_copy),
        features=tuple(features),
    )
