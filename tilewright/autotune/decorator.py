"""``@tilewright.autotune(configs=...)`` stacked on ``@tilewright.jit`` (TileLang's spelling).

Calling the decorated function with the builder's fixed arguments (sizes, dtypes) tunes the
configuration keys and returns the fastest kernel; the outcome is memoized per arguments in the
process and persisted in the tuning cache.  When the call itself gives every configuration key,
nothing is tuned: that configuration is compiled, as a plain ``@jit`` call would (the keys may be
given by keyword or by position).
"""

from __future__ import annotations

import functools

from .tuner import AutoTuner, given_names


class _Autotuned:
    def __init__(self, fn, configs, profile_kw: dict):
        # first: update_wrapper copies the wrapped object's __dict__ (an eager @jit function's own `fn`,
        # `kw`...), which must not replace the attributes set below
        functools.update_wrapper(self, getattr(fn, "builder", fn))
        self.fn = fn  # a @jit function (its compile options are used) or a bare builder
        self.configs = configs
        self.profile_kw = profile_kw
        self.results: dict = {}

    def __call__(self, *args, **kwargs):
        keys = self._config_keys(args, kwargs)
        if keys and keys <= given_names(self.fn, args, kwargs):  # by keyword or by position
            return self._compile_directly(args, kwargs)
        memo = (args, tuple(sorted(kwargs.items())))
        try:
            hit = self.results.get(memo)
        except TypeError:  # unhashable arguments: tune every time
            hit, memo = None, None
        if hit is None:
            hit = self.tune(*args, **kwargs)
            if memo is not None:
                self.results[memo] = hit
        kernel = hit.kernel
        # TileLang's tuned kernel says what won: ``kernel.config`` and ``kernel.latency`` (ms)
        kernel.config, kernel.latency = hit.config, hit.latency
        return kernel

    def compile(self, *args, **kwargs):
        """TileLang's ``tuned.compile(...)``: with every tuned argument given, the kernel of that
        config, compiled without tuning (T.const sizes by keyword, ``M=1024``, as the @jit function's
        ``compile`` takes them); otherwise the tuned kernel for the arguments given, as a call is."""
        keys = self._config_keys(args, kwargs)
        if keys and keys <= given_names(self.fn, args, kwargs):
            direct = getattr(self.fn, "compile", None)
            return direct(*args, **kwargs) if direct is not None else self._compile_directly(args, kwargs)
        return self(*args, **kwargs)

    def tune(self, *args, **kwargs):
        """Run the tuner and return the whole ``AutotuneResult`` (best config, latency, report)."""
        tuner = AutoTuner(self.fn, self.configs).set_kernel_parameters(args, kwargs)
        tuner.set_compile_args(**self._compile_kw())
        tuner.set_profile_args(**self.profile_kw)
        return tuner.run()

    def _compile_kw(self) -> dict:
        kw = dict(getattr(self.fn, "kw", {}))
        return {k: kw[k] for k in ("out_idx", "target", "pass_configs", "optimize_level", "execution_backend")
                if k in kw}

    def _compile_directly(self, args, kwargs):
        if hasattr(self.fn, "kw"):
            return self.fn(*args, **kwargs)  # the @jit function compiles (memoized)
        from ..compiler import compile as tw_compile

        return tw_compile(self.fn(*args, **kwargs))

    def _config_keys(self, args, kwargs) -> set:
        if callable(self.configs):
            return set()  # the keys depend on the arguments: always tune
        return set().union(*(set(c) for c in self.configs)) if self.configs else set()


def autotune(func=None, *, configs=None, warmup: float = 25, rep: float = 100, timeout: float = 100,
             supply_type=None, ref_prog=None, supply_prog=None, rtol: float = 1e-2, atol: float = 1e-2,
             max_mismatched_ratio: float = 0.01, skip_check: bool = False, manual_check_prog=None,
             cache_input_tensors: bool = False, backend: str = "event"):
    """Decorator: tune ``configs`` (a list of dicts of builder arguments, or a function of the
    builder's fixed arguments returning one) of a ``@jit`` builder; see ``AutoTuner``."""
    if configs is None:
        raise TypeError("autotune needs configs=: a list of dicts of the builder's tunable arguments")
    profile_kw = dict(warmup=warmup, rep=rep, timeout=timeout, supply_type=supply_type, ref_prog=ref_prog,
                      supply_prog=supply_prog, rtol=rtol, atol=atol, max_mismatched_ratio=max_mismatched_ratio,
                      skip_check=skip_check, manual_check_prog=manual_check_prog,
                      cache_input_tensors=cache_input_tensors, backend=backend)

    def wrap(fn):
        return _Autotuned(fn, configs, profile_kw)

    return wrap(func) if func is not None else wrap
