"""A small library of ready kernels written in the T language (GEMM, softmax, norms, attention).

Each builder returns a ``@T.prim_func``; ``tilewright.compile`` or ``@tilewright.jit`` turns it into
a callable kernel.  They double as examples of the language.
"""

from .attention import flash_attention  # noqa: F401
from .gemm import matmul, matmul_persistent, matmul_splitk, splitk_reduce  # noqa: F401
from .norms import rms_norm, softmax  # noqa: F401
