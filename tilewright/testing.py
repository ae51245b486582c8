"""TileLang's ``tilelang.testing`` helpers, so that its tests and examples run with only their
imports changed: the ``requires_*`` skip decorators, ``torch_assert_close`` (a comparison that
tolerates a given fraction of mismatched elements), ``set_random_seed``, ``main`` and the
performance-regression helpers ``process_func`` / ``regression``.

The decorators skip by what this machine has, asked of PyTorch (imported lazily: tilewright does
not depend on it).  ``TILEWRIGHT_TESTING_ASSUME_CUDA=9.0`` makes them behave as if a CUDA device of
that compute capability were present — for measuring, on a machine without a GPU, which tests
compile (``scripts/tilelang_tests.py --assume-gpu``); the GPU parts of such tests then fail.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import random
import sys

import numpy as np

from .compat import assert_mostly_close

ASSUME_CUDA_ENV = "TILEWRIGHT_TESTING_ASSUME_CUDA"

__all__ = [
    "main", "set_random_seed", "torch_assert_close", "requires_cuda", "requires_rocm", "requires_cdna",
    "requires_cuda_or_cdna", "requires_gfx950", "requires_metal", "requires_llvm", "requires_package",
    "requires_cuda_compute_version", "requires_cuda_compute_version_ge", "requires_cuda_compute_version_gt",
    "requires_cuda_compute_version_eq", "requires_cuda_compute_version_lt", "requires_cuda_compute_version_le",
    "process_func", "regression",
]


# ------------------------------------------------------------------------------ what this machine has


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def cuda_compute_version() -> tuple | None:
    """(major, minor) of CUDA device 0, the assumed one (``TILEWRIGHT_TESTING_ASSUME_CUDA``), or None."""
    assumed = os.environ.get(ASSUME_CUDA_ENV)
    if assumed:
        major, _, minor = assumed.partition(".")
        return int(major), int(minor or 0)
    torch = _torch()
    if torch is None or getattr(torch.version, "hip", None) or not torch.cuda.is_available():
        return None
    return tuple(torch.cuda.get_device_capability(0))


def _rocm_arch() -> str | None:
    torch = _torch()
    if torch is None or not getattr(torch.version, "hip", None) or not torch.cuda.is_available():
        return None
    return str(torch.cuda.get_device_properties(0).gcnArchName).split(":")[0]


def _skip_unless(condition: bool, reason: str):
    import pytest

    return pytest.mark.skipif(not condition, reason=reason)


# ------------------------------------------------------------------------------ skip decorators


def requires_cuda(func):
    return _skip_unless(cuda_compute_version() is not None, "needs a CUDA GPU")(func)


def requires_rocm(func):
    return _skip_unless(_rocm_arch() is not None, "needs a ROCm GPU")(func)


def requires_cdna(func):
    arch = _rocm_arch() or ""
    return _skip_unless(arch.startswith("gfx9"), "needs a CDNA (gfx9xx) ROCm GPU")(func)


def requires_cuda_or_cdna(func):
    ok = cuda_compute_version() is not None or (_rocm_arch() or "").startswith("gfx9")
    return _skip_unless(ok, "needs a CUDA or CDNA ROCm GPU")(func)


def requires_gfx950(func):
    return _skip_unless(_rocm_arch() == "gfx950", "needs a gfx950 GPU")(func)


def requires_metal(func):
    return _skip_unless(False, "tilewright has no Metal backend")(func)


def requires_llvm(func):
    return _skip_unless(False, "tilewright has no LLVM CPU backend (use target='interpret')")(func)


def requires_package(*names):
    missing = [n for n in names if importlib.util.find_spec(n) is None]

    def wrap(func):
        return _skip_unless(not missing, f"needs the package(s) {', '.join(missing)}")(func)

    return wrap


_COMPARE = {"ge": tuple.__ge__, "gt": tuple.__gt__, "le": tuple.__le__, "lt": tuple.__lt__, "eq": tuple.__eq__}


def requires_cuda_compute_version(major_version, minor_version=0, mode="ge"):
    """Skip unless a CUDA device's compute capability compares ``mode`` to (major, minor)."""
    if mode not in _COMPARE:
        raise ValueError(f"mode must be one of {', '.join(_COMPARE)}, got {mode!r}")
    have = cuda_compute_version()
    want = (int(major_version), int(minor_version))
    ok = have is not None and _COMPARE[mode](tuple(have), want)
    reason = f"needs CUDA compute capability {mode} {want[0]}.{want[1]}, have {have}"

    def wrap(func):
        return _skip_unless(ok, reason)(func)

    return wrap


def requires_cuda_compute_version_ge(major_version, minor_version=0):
    return requires_cuda_compute_version(major_version, minor_version, "ge")


def requires_cuda_compute_version_gt(major_version, minor_version=0):
    return requires_cuda_compute_version(major_version, minor_version, "gt")


def requires_cuda_compute_version_eq(major_version, minor_version=0):
    return requires_cuda_compute_version(major_version, minor_version, "eq")


def requires_cuda_compute_version_lt(major_version, minor_version=0):
    return requires_cuda_compute_version(major_version, minor_version, "lt")


def requires_cuda_compute_version_le(major_version, minor_version=0):
    return requires_cuda_compute_version(major_version, minor_version, "le")


# ------------------------------------------------------------------------------ running and comparing


def main():
    """Run the calling test file with pytest (TileLang's ``tilelang.testing.main()``)."""
    import pytest

    test_file = inspect.getsourcefile(sys._getframe(1))
    sys.exit(pytest.main([test_file] + sys.argv[1:]))


def set_random_seed(seed: int = 42) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch = _torch()
    if torch is not None:
        torch.manual_seed(seed)


def torch_assert_close(tensor_a, tensor_b, rtol=1e-2, atol=1e-3, max_mismatched_ratio=0.001, verbose: bool = False,
                       equal_nan: bool = True, check_device: bool = True, check_dtype: bool = True,
                       check_layout: bool = True, check_stride: bool = False, base_name: str = "LHS",
                       ref_name: str = "RHS"):
    """TileLang's comparison: shapes (and, when asked, device and dtype) must agree; then at most
    ``int(numel * max_mismatched_ratio)`` elements may fail ``|a - b| <= atol + rtol * |b|``."""
    if check_dtype and getattr(tensor_a, "dtype", None) != getattr(tensor_b, "dtype", None) \
            and type(tensor_a).__module__.startswith("torch") and type(tensor_b).__module__.startswith("torch"):
        raise AssertionError(f"The values for attribute 'dtype' do not match: {tensor_a.dtype} != {tensor_b.dtype}.")
    if check_device and hasattr(tensor_a, "device") and hasattr(tensor_b, "device") \
            and str(tensor_a.device) != str(tensor_b.device):
        raise AssertionError(f"The values for attribute 'device' do not match: {tensor_a.device} != {tensor_b.device}.")
    return assert_mostly_close(tensor_a, tensor_b, rtol=rtol, atol=atol, max_mismatched_ratio=max_mismatched_ratio,
                               equal_nan=equal_nan, verbose=verbose, names=(base_name, ref_name))


# ------------------------------------------------------------------------------ performance regression helpers

_PERF_RESULTS: list = []


def process_func(func, name=None, /, **kwargs) -> None:
    """Run one benchmark function (it returns a latency) and keep its result for ``regression``."""
    value = func(**kwargs)
    _PERF_RESULTS.append((name or getattr(func, "__name__", "func"), value))


def regression(prefixes=("regression_",), verbose: bool = True) -> None:
    """Call every function of the calling module whose name starts with one of ``prefixes``."""
    module = inspect.getmodule(sys._getframe(1))
    for attr in sorted(vars(module)):
        fn = getattr(module, attr)
        if callable(fn) and attr.startswith(tuple(prefixes)):
            fn()
    if verbose:
        for name, value in _PERF_RESULTS:
            print(f"{name}: {value}")


# ------------------------------------------------------------------------------ imports of TileLang's tests
# scripts/tilelang_tests.py rewrites TileLang's imports into these two calls, so that a name
# tilewright lacks fails the tests that use it rather than every test of the file.


class MissingName:
    """What a TVM name, or a TileLang name tilewright does not have, is in a TileLang test run
    against tilewright: naming it works; using it (calling, indexing, iterating) raises an
    AttributeError that names it, which the harness counts as a missing name."""

    def __init__(self, path: str):
        self._path = path

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return MissingName(f"{self._path}.{name}")

    def _fail(self, *args, **kwargs):
        what = "TVM is" if self._path.split(".")[0] == "tvm" else "it is"
        raise AttributeError(f"{what} not part of tilewright: {self._path} is used")

    __call__ = __getitem__ = __iter__ = _fail

    def __mro_entries__(self, bases):  # `class X(missing_base)`
        self._fail()

    def __repr__(self) -> str:
        return f"<{self._path}: not part of tilewright>"


def _tilelang_spelling(module: str) -> str:
    return "tilelang" + module[len("tilewright"):] if module.startswith("tilewright") else module


class _TilelangAlias:
    """A finder that makes ``tilelang.x`` the very module ``tilewright.x``, so that TileLang's tests
    that name modules in strings (``importlib.import_module("tilelang.cpu.language")``) get ours, as
    their import statements do once rewritten.  Only installed by the rewritten imports below (a
    TileLang test run): a real TileLang installed next to tilewright is otherwise left alone."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "tilelang" and not fullname.startswith("tilelang."):
            return None
        import importlib

        try:
            module = importlib.import_module("tilewright" + fullname[len("tilelang"):])
        except ModuleNotFoundError as e:
            if (e.name or "").startswith("tilewright"):
                return None  # "No module named 'tilelang.x'": tilewright has no such module
            raise
        return importlib.util.spec_from_loader(fullname, _AliasLoader(module),
                                               is_package=hasattr(module, "__path__"))


class _AliasLoader:
    def __init__(self, module):
        self.module = module

    def create_module(self, spec):
        return self.module

    def exec_module(self, module):
        pass  # already executed under its tilewright name


def alias_tilelang() -> None:
    """Install the ``tilelang`` -> ``tilewright`` module alias (``_TilelangAlias``) once."""
    if not any(isinstance(f, _TilelangAlias) for f in sys.meta_path):
        sys.meta_path.insert(0, _TilelangAlias())


def lenient_import(module: str):
    """``import tilelang.x as y``: the module ``tilewright.x``, or a ``MissingName`` (TVM, or a
    module tilewright does not have)."""
    import importlib

    alias_tilelang()

    if module.split(".")[0] != "tvm":
        try:
            return importlib.import_module(module)
        except ModuleNotFoundError as e:
            if not (e.name or "").startswith("tilewright"):
                raise  # a third-party package a tilewright module needs: a real error
    return MissingName(_tilelang_spelling(module))


def lenient_from(module: str, name: str):
    """``from tilelang.x import name``: the name from ``tilewright.x`` (an attribute or a
    submodule), or a ``MissingName``."""
    import importlib

    mod = lenient_import(module)
    if isinstance(mod, MissingName):
        return getattr(mod, name)
    if hasattr(mod, name):
        return getattr(mod, name)
    try:
        return importlib.import_module(f"{module}.{name}")
    except ModuleNotFoundError as e:
        if not (e.name or "").startswith("tilewright"):
            raise
    return MissingName(f"{_tilelang_spelling(module)}.{name}")


tvm_stand_in = MissingName("tvm")
