"""``LaunchSpec``: everything a runtime needs to launch one compiled kernel, and nothing else.

The compiler produces it; the runtimes (CUDA driver, HIP runtime), the disk cache, the autotuner's
worker processes and the JIT layer consume it.  It is plain data and pickles, so a kernel compiled
in one process can be launched in another without the compiler, and a runtime never needs to look
at passes, printers or the frontend.

Parameters are the prim_func's own parameter objects (global ``Buffer``s with dtype, shape and
strides; scalar ``Var``s), so the argument checks read the same declarations the kernel was
compiled from.  After the parameters the kernel takes, in order, one int32 per symbolic size
(``dyn_vars``) and one TMA descriptor per ``tensor_maps`` entry: the "hidden" parameters.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..ir import tile as t
from ..ir.expr import Const

# how each scalar parameter type travels to the kernel (see launch_args.ARG_TYPES)
_SCALAR_ARG_TYPES = {"float32": "f32", "float64": "f64", "int32": "i32", "int64": "i64", "uint32": "u32",
                     "bool": "i32", "int16": "i32", "int8": "i32", "uint8": "i32"}


@dataclass
class LaunchSpec:
    vendor: str  # "cuda" or "hip"
    arch: str  # "sm_90a", "gfx942", ...
    func_name: str  # the prim_func's name, for messages
    kernel_name: str  # the symbol in the code object
    code_object: bytes  # cubin or AMD code object; empty when only the emulator runs the kernel
    source: str  # the CUDA / HIP source the code object was compiled from
    num_threads: int
    shared_bytes: int  # dynamic shared memory / LDS per block (with a buffer sized at launch: the most it may be)
    grid: tuple  # 1-3 expressions over the scalar parameters and dyn_vars
    params: tuple  # Buffer (global) or Var (scalar), in call order
    dyn_vars: tuple = ()  # symbolic sizes, passed as int32 (int64 where declared so) after the parameters
    tensor_maps: tuple = ()  # runtime.tensor_maps.TensorMapSpec, passed after the sizes
    resources: dict = field(default_factory=dict)  # registers, shared_bytes, local_bytes, spills, ...
    toolchain: str = ""
    # a shared buffer sized at launch: (bytes expression over params and dyn_vars, buffer name); None: shared_bytes
    shared_at_launch: tuple | None = None
    # a thread-block cluster shape (three ints) the code object declares (__cluster_dims__); None: no cluster.
    # The launch needs a grid of whole clusters (checked per launch when the grid depends on the arguments)
    cluster_dims: tuple | None = None
    # launched with programmatic stream serialization (CUDA sm_90+): the kernel holds a griddepcontrol.wait
    # (``T.pdl_sync``) before anything that depends on the previous kernel, so it may start while that one runs
    programmatic: bool = False

    @property
    def arg_types(self) -> tuple:
        """The packing kind of every kernel argument, hidden ones included."""
        kinds = ["ptr" if isinstance(p, t.Buffer) else _SCALAR_ARG_TYPES.get(p.dtype, "f32") for p in self.params]
        kinds += ["i64" if v.dtype == "int64" else "i32" for v in self.dyn_vars]
        kinds += ["tmap"] * len(self.tensor_maps)
        return tuple(kinds)

    @property
    def static_grid(self) -> tuple | None:
        """The grid as three ints when it does not depend on any argument, else None."""
        consts = [g.value if isinstance(g, Const) and isinstance(g.value, int) else None for g in self.grid]
        if None in consts:
            return None
        return tuple(consts) + (1,) * (3 - len(consts))
