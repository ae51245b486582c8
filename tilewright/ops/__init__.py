"""Ready operators on torch tensors: ``matmul``, ``softmax``, ``rms_norm`` (with an optional fused
residual add), ``layer_norm`` and ``attention`` (flash attention: GQA/MQA, causal, varlen, KV cache,
split-KV decoding), written in tilewright's language (``ops/kernels.py``).

Each call checks its arguments (``ArgumentError`` naming the argument), picks a configuration from
the shapes, compiles once per configuration (row counts are symbolic, so a new batch size reuses
the kernel) and launches on the tensors' device: a GPU, or the CPU through the tile interpreter.
The operators are also registered with ``torch.library`` as ``torch.ops.tilewright.*`` with fake
(meta) implementations, so ``torch.compile(fullgraph=True)`` captures models that use them without
graph breaks (see ``ops/registry.py``); in eager mode the public functions call the kernels
directly, which keeps the host cost of a call small.
"""

from __future__ import annotations

from .attention_dispatch import attention  # noqa: F401
from .dispatch import forget_plans, layer_norm, matmul, rms_norm, softmax, tune_matmul  # noqa: F401
from .registry import register  # noqa: F401

register()
