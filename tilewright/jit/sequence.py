"""``KernelSequence``: the kernels of one prim_func with several ``T.Kernel`` blocks, called as one.

Each block was compiled on its own (``frontend.kernel_sequence.split_kernels``); a call allocates
the ``out_idx`` outputs once, then launches the kernels one after another, in source order, on the
same arguments.  On the GPU they go to one stream, so each starts after the previous one has
finished and sees all it wrote; the CPU backends run them in turn.
"""

from __future__ import annotations

from ..errors import ArgumentError


class KernelSequence:
    def __init__(self, func, kernels: list):
        self.func = func
        self.kernels = kernels
        first = kernels[0]
        self.target = first.target
        self.out_idx = first.out_idx
        self.options = first.options
        self.backend = first.backend
        self.params = list(func.params)
        self.compile_seconds = sum(k.compile_seconds for k in kernels)

    def __call__(self, *args, stream=None):
        n_in = len(self.params) - len(self.out_idx)
        if len(args) == n_in and self.out_idx:
            full = self.kernels[0]._with_outputs(args)
        elif len(args) == len(self.params):
            full = list(args)
        else:
            raise ArgumentError(f"{self.func.name} takes {n_in} input(s)" + (
                f" (or all {len(self.params)} arguments)" if self.out_idx else "") + f"; {len(args)} were given")
        for k in self.kernels:
            k(*full, stream=stream)
        if not self.out_idx:
            return None
        if len(self.out_idx) == 1:
            return full[self.out_idx[0]]
        return [full[i] for i in self.out_idx]

    # ------------------------------------------------------------------ what was built
    @property
    def source(self) -> str:
        return self.get_kernel_source()

    @property
    def kernel_name(self) -> str:
        return self.kernels[0].kernel_name

    def get_kernel_source(self, kernel_only: bool = True) -> str:
        """The sources of the kernels, in launch order."""
        return "\n\n".join(k.get_kernel_source(kernel_only) for k in self.kernels)

    def get_host_source(self) -> str:
        return ""

    @property
    def resource_usage(self) -> list:
        return [k.resource_usage for k in self.kernels]

    def get_profiler(self, tensor_supply_type=None):
        from ..profiler import Profiler

        return Profiler(self, tensor_supply_type)

    def run_once(self, func=None):
        return self.get_profiler().run_once(func)

    def __repr__(self) -> str:
        return f"<KernelSequence {self.func.name}: {len(self.kernels)} kernels target={self.target} " \
               f"backend={self.backend}>"
