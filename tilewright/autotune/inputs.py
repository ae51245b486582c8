"""``set_autotune_inputs``: the tensors a tuning run times its candidates on.

Inside ``with set_autotune_inputs(a, b, c):`` every tuning run uses exactly these arguments (all of
the kernel's parameters, outputs included, or only its inputs when it has ``out_idx`` outputs)
instead of fresh random ones — for kernels whose speed depends on the data (sparsity, masks) or
that take scalar parameters no generator can invent.
"""

from __future__ import annotations

import contextlib
import threading

_local = threading.local()


@contextlib.contextmanager
def set_autotune_inputs(*tensors):
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    previous = getattr(_local, "inputs", None)
    _local.inputs = tuple(tensors)
    try:
        yield
    finally:
        _local.inputs = previous


def get_autotune_inputs():
    """The tensors of the innermost ``set_autotune_inputs`` block, or None."""
    return getattr(_local, "inputs", None)
