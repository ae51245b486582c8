"""``par_compile``: compile many kernels at once (TileLang's ``tilelang.par_compile`` and
``jit_function.par_compile(configs)``).

Results come back in the order given; with ``ignore_error=True`` a kernel that fails to compile
is ``None`` (and a warning names its index and the error) instead of raising.  The kernels are
compiled one after another: tilewright's compiler is Python code holding the interpreter lock,
so threads would not overlap its work — ``num_workers`` changes nothing but is accepted so that
TileLang programs run unchanged.
"""

from __future__ import annotations

import warnings

from ..errors import TilewrightWarning


def compile_each(thunks, ignore_error: bool = False) -> list:
    """Call each ``thunk()`` (a compile) in order; see the module docstring for ``ignore_error``."""
    results = []
    for i, thunk in enumerate(thunks):
        if not ignore_error:
            results.append(thunk())
            continue
        try:
            results.append(thunk())
        except Exception as e:  # noqa: BLE001 - TileLang's ignore_error: any failure becomes None
            warnings.warn(f"par_compile: compiling kernel {i} failed: {type(e).__name__}: {e}", TilewrightWarning,
                          stacklevel=3)
            results.append(None)
    return results


def config_call(fn, cfg):
    """``fn(*cfg)`` for a tuple config, ``fn(**cfg)`` for a dict (TileLang's two config forms)."""
    if isinstance(cfg, tuple):
        return lambda: fn(*cfg)
    if isinstance(cfg, dict):
        return lambda: fn(**cfg)
    raise ValueError(f"Invalid config type: {type(cfg).__name__}, expected tuple or dict")


def par_compile(funcs, out_idx=None, execution_backend=None, target="auto", target_host=None, verbose=False,
                pass_configs=None, compile_flags=None, num_workers=None, ignore_error: bool = False) -> list:
    """Compile each prim_func of ``funcs`` with the same options (``tilewright.compile``'s)."""
    from ..compiler import compile as compile_one

    kw = dict(out_idx=out_idx, execution_backend=execution_backend, target=target if target is not None else "auto",
              pass_configs=pass_configs, verbose=bool(verbose))
    if target_host is not None:
        kw["target_host"] = target_host
    if compile_flags:
        warnings.warn("par_compile(compile_flags=) has no effect in tilewright: it chooses the device compiler "
                      "flags; remove it", TilewrightWarning, stacklevel=2)
    funcs = list(funcs)
    return compile_each([lambda f=f: compile_one(f, **kw) for f in funcs], ignore_error)
