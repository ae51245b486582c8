"""tilewright: a tile-level GPU kernel language and compiler for NVIDIA (CUDA) and AMD (ROCm/HIP).

``import tilewright as tilelang`` / ``import tilewright.language as T`` run TileLang-style kernels.
"""

from . import config, language, layout, math, target  # noqa: F401
from .autotune import AutoTuner, autotune, set_autotune_inputs  # noqa: F401
from .compat import PassConfigKey, TensorSupplyType, cdiv, disable_cache, enable_cache  # noqa: F401
from .compiler import compile, jit, lower  # noqa: F401
from .env import env  # noqa: F401  (TileLang's tilelang.env object: env.py)
from .errors import (  # noqa: F401
    ArgumentError,
    CompileError,
    InternalError,
    TilewrightError,
    TilewrightWarning,
    ToolchainError,
)
from .interp.host_addresses import pointer_table  # noqa: F401  (T.make_tensor on table entries, on the CPU)
from .jit import JITKernel  # noqa: F401
from .jit.parallel import par_compile  # noqa: F401
from .math import next_power_of_2  # noqa: F401  (TileLang exports it at the top level too)
from .profiler import Profiler  # noqa: F401

# The one version string: pyproject.toml reads it from this line (setuptools dynamic version); the
# disk-cache keys and `tilewright --version` use it.
__version__ = "0.1.0"

config.configure_logging()
lazy_jit = jit  # TileLang's name for the eager-JIT decorator
DataType = language.DType  # TileLang's tilelang.DataType (TVM's): DataType("float16").bits
