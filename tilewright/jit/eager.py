"""``@tilewright.jit`` on an eager-style function (TileLang >= 0.1.8): the function is the kernel.

Calling it with tensors binds its ``T.const`` sizes from their shapes, reads the body into a
``PrimFunc`` (``frontend.eager``), compiles it (once per distinct set of shapes, dtypes and
compile-time values; ``T.dynamic`` sizes stay symbolic, so the compiler's text memo serves every
value with one kernel) and runs it, returning the ``T.empty`` outputs.  ``.compile(**sizes)``,
``.get_tir``, ``.get_kernel_source`` and ``.par_compile`` take the same arguments, where a tensor may
be left out (declared in the body) or given as a ``T.Tensor(shape, dtype)`` spec.
"""

from __future__ import annotations

import functools
import inspect

from ..errors import ArgumentError
from ..frontend.eager import NOT_GIVEN, discover_sizes, is_tensor_like, read_eager
from ..language import Tensor


class EagerJitFunction:
    def __init__(self, fn, compile_kw: dict):
        self.fn = fn
        self.kw = dict(compile_kw)
        # outputs are the returned T.empty tensors; out_idx names output parameters of a function
        # that returns nothing (they are then allocated by the call, as with a prim_func)
        self.out_idx = self.kw.pop("out_idx", None)
        self.signature = inspect.signature(fn)
        self._memo: dict = {}
        functools.update_wrapper(self, fn)

    # ------------------------------------------------------------------ arguments
    def _split(self, args, kwargs) -> tuple:
        """(parameter name -> value, T.const size name -> int) of a call."""
        params = self.signature.parameters
        sizes = {k: v for k, v in kwargs.items() if k not in params}
        for k, v in sizes.items():
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ArgumentError(f"{self.fn.__name__}: size {k}={v!r} must be a positive int (keywords that are "
                                    "not parameters give T.const sizes)")
        try:
            bound = self.signature.bind_partial(*args, **{k: v for k, v in kwargs.items() if k in params})
        except TypeError as e:
            raise ArgumentError(f"{self.fn.__name__}: {e}") from None
        arguments = {}
        for name, p in params.items():
            if name in bound.arguments:
                arguments[name] = bound.arguments[name]
            elif p.default is not inspect.Parameter.empty:
                arguments[name] = p.default
            else:
                arguments[name] = NOT_GIVEN
        return arguments, sizes

    def _specialize(self, args, kwargs):
        arguments, sizes = self._split(args, kwargs)
        key = (tuple((n, _arg_key(v)) for n, v in arguments.items()), tuple(sorted(sizes.items())))
        try:
            hit = self._memo.get(key)
        except TypeError:  # an unhashable compile-time value: no memo
            hit, key = None, None
        if hit is None:
            bound = discover_sizes(self.fn, arguments, sizes)
            func, info = read_eager(self.fn, arguments, bound)
            hit = (func, info)
            if key is not None:
                self._memo[key] = hit
        return arguments, hit[0], hit[1]

    def _kernel(self, func, info):
        from ..compiler import compile

        return compile(func, out_idx=self._out_idx(info), **self.kw)

    def _out_idx(self, info):
        return info.out_idx if info.out_idx or self.out_idx is None else self.out_idx

    # ------------------------------------------------------------------ the API
    def __call__(self, *args, **kwargs):
        arguments, func, info = self._specialize(args, kwargs)
        kernel = self._kernel(func, info)
        outs = kernel.out_idx  # normalized by compile
        runtime = []
        for i, n in enumerate(info.runtime_names):
            v = arguments[n]
            if v is NOT_GIVEN and i in outs:
                continue  # allocated by the kernel call
            if v is NOT_GIVEN:
                raise ArgumentError(f"{self.fn.__name__}: missing argument {n}")
            if isinstance(v, Tensor):
                raise ArgumentError(f"{self.fn.__name__}: argument {n} is a T.Tensor spec; calls take real tensors "
                                    "(use .compile(...) for a spec)")
            runtime.append(v)
        result = kernel(*runtime)  # outputs no input tensor tells the device of: on the current GPU (jit.kernel)
        # as TileLang: one output is the tensor, several a list (also for `return B, C`)
        return result if outs else None

    def compile(self, *args, **kwargs):
        """The compiled ``JITKernel`` for these arguments: tensors (or ``T.Tensor`` specs, or left out
        when the body declares them), compile-time values, and T.const sizes by name (``M=1024``)."""
        _, func, info = self._specialize(args, kwargs)
        return self._kernel(func, info)

    def par_compile(self, configs, num_workers=None, ignore_error: bool = False) -> list:
        """``.compile`` of each config (a dict of arguments or a tuple of positional ones), in
        order; see ``jit/parallel.py``."""
        from .parallel import compile_each, config_call

        return compile_each([config_call(self.compile, c) for c in configs], ignore_error)

    def get_tir(self, *args, **kwargs):
        """The ``PrimFunc`` read for these arguments."""
        return self._specialize(args, kwargs)[1]

    def get_kernel_source(self, *args, **kwargs) -> str:
        return self.compile(*args, **kwargs).get_kernel_source()


def _arg_key(v):
    if v is NOT_GIVEN:
        return ("-",)
    if is_tensor_like(v):
        try:
            shape = tuple(int(s) for s in v.shape)
        except (TypeError, ValueError):
            shape = tuple(repr(s) for s in v.shape)
        return ("tensor", shape, str(v.dtype))
    if hasattr(v, "item") and getattr(v, "shape", None) == ():
        v = v.item()  # a NumPy scalar: keyed by its value
    return ("value", type(v).__name__, v)

