"""TileLang's per-vendor language modules as TileLang's own tests reach them: by name in a string
(``importlib.import_module("tilelang.rocm.language")``, through the alias the rewritten imports
install), with TileLang's vendor-only names kept out of the other vendors' modules, and TileLang's TVM
TIR script names answered with what to write instead."""

import importlib
import sys

import pytest

import tilewright.language as T
from tilewright.language.dialects import CUDA_ONLY
from tilewright.language.tir import exports
from tilewright.testing import _AliasLoader, _TilelangAlias, alias_tilelang

# TileLang's dialect test's own lists of vendor-only names
TILELANG_CUDA_ONLY_NAMES = {"ClusterKernel", "CUDASourceCodeKernel", "pdl_trigger", "rng_init", "tcgen05_mma",
                            "tma_copy", "wgmma_mma", "ws"}
NON_CUDA = ["cpu", "metal", "rocm", "webgpu"]


def _tilewright_modules():
    return {name: m for name, m in sys.modules.items() if name == "tilewright" or name.startswith("tilewright.")}


def _alias_for_a_while(monkeypatch):
    """The alias until resumed, and then what importing through it changed put back: the finder,
    the ``tilelang.*`` entries of sys.modules, and the ``__spec__`` of each tilewright module handed out
    under a tilelang name (the import system sets it to the alias's spec, ``tilelang.x``, whose loader
    is the alias's: left so, a later ``importlib.reload`` or ``importlib.resources`` of that module
    would look for it as ``tilelang.x``)."""
    def create_module(loader, spec):  # the module as it is before the import system sets its __spec__
        module = real_create_module(loader, spec)
        monkeypatch.setattr(module, "__spec__", module.__spec__)  # (restored when monkeypatch undoes)
        return module

    real_create_module = _AliasLoader.create_module
    monkeypatch.setattr(_AliasLoader, "create_module", create_module)
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    alias_tilelang()
    yield
    for name in [m for m in sys.modules if m == "tilelang" or m.startswith("tilelang.")]:
        del sys.modules[name]  # (the specs and the finder: when monkeypatch undoes its changes)


@pytest.fixture
def tilelang_alias(monkeypatch):
    yield from _alias_for_a_while(monkeypatch)


def test_tilelang_module_names_are_tilewright_modules(tilelang_alias):
    import tilewright
    import tilewright.cpu.language

    assert importlib.import_module("tilelang") is tilewright
    assert importlib.import_module("tilelang.language") is T
    assert importlib.import_module("tilelang.cpu.language") is tilewright.cpu.language
    assert importlib.import_module("tilelang.language.tir.exports") is exports
    with pytest.raises(ModuleNotFoundError, match="tilelang.no_such_module"):
        importlib.import_module("tilelang.no_such_module")
    alias_tilelang()  # installed once
    assert sum(isinstance(f, _TilelangAlias) for f in sys.meta_path) == 1


def test_the_alias_is_gone_after_its_test(monkeypatch):
    """What the fixture above takes back: after it, no tilelang module, no finder and every tilewright
    module under its own name and spec, as a test in another file expects."""
    fixture = _alias_for_a_while(monkeypatch)
    next(fixture)
    assert importlib.import_module("tilelang.language.tir.exports") is exports
    assert exports.__spec__.name == "tilelang.language.tir.exports"  # what the import system did
    next(fixture, None)
    monkeypatch.undo()
    assert not any(isinstance(f, _TilelangAlias) for f in sys.meta_path)
    assert not [m for m in sys.modules if m == "tilelang" or m.startswith("tilelang.")]
    assert all(m.__spec__.name == name for name, m in _tilewright_modules().items())


def test_importing_tilewright_installs_no_alias():
    import tilewright  # noqa: F401
    import tilewright.testing  # noqa: F401

    assert not any(isinstance(f, _TilelangAlias) for f in sys.meta_path)


@pytest.mark.parametrize("dialect", NON_CUDA)
def test_non_cuda_dialects_leave_out_tilelangs_cuda_only_names(dialect):
    module = importlib.import_module(f"tilewright.{dialect}.language")
    names = set(module.__all__)
    assert TILELANG_CUDA_ONLY_NAMES.isdisjoint(names) and CUDA_ONLY.isdisjoint(names)
    assert exports.CUDA_ONLY_TIR_EXPORTS.isdisjoint(names) and exports.ROCM_ONLY_TIR_EXPORTS.isdisjoint(names)
    # what the CUDA dialect has on top of them is exactly the CUDA-only names tilewright has
    assert set(T.__all__) - names == CUDA_ONLY & set(T.__all__)
    with pytest.raises(AttributeError, match=r"'rng_init' \(a CUDA-only name, as in TileLang: use tilewright.language"):
        module.rng_init  # noqa: B018


def test_cuda_dialect_is_the_default_language_with_every_name():
    cuda = importlib.import_module("tilewright.cuda.language")
    have = TILELANG_CUDA_ONLY_NAMES - {"tcgen05_mma"}  # tcgen05 (Blackwell) is not part of tilewright
    assert have <= set(cuda.__all__) and set(cuda.__all__) == set(T.__all__)
    assert {"print", "device_assert", "rng_rand", "CUDASourceCodeKernel"} <= set(cuda.__all__)
    assert "no_set_max_nreg" in importlib.import_module("tilewright.language.common").__all__  # common in TileLang


def test_tir_export_sets_are_tilelangs_grouping():
    assert exports.BACKEND_ONLY_TIR_EXPORTS == (exports.CUDA_ONLY_TIR_EXPORTS | exports.ROCM_ONLY_TIR_EXPORTS
                                                | exports.METAL_ONLY_TIR_EXPORTS)
    assert exports.CLASSIFIED_VENDOR_TIR_EXPORTS == exports.BACKEND_ONLY_TIR_EXPORTS | exports.SHARED_LEGACY_TIR_EXPORTS
    assert {"ptx_wgmma_ss", "ptx_ldmatrix"} <= exports.CUDA_ONLY_TIR_EXPORTS
    assert "ptx_cp_async" in exports.SHARED_LEGACY_TIR_EXPORTS and "tvm_mfma" in exports.ROCM_ONLY_TIR_EXPORTS
    for name in exports.CLASSIFIED_VENDOR_TIR_EXPORTS:  # none of them exists in any language module
        assert not hasattr(T, name)


@pytest.mark.parametrize("module,name,use", [
    ("tilewright.language", "ptx_wgmma_ss", "T.gemm or T.wgmma_gemm"),
    ("tilewright.language", "ptx_mma", "T.gemm (tensor cores"),
    ("tilewright.rocm.language", "tvm_mfma", "T.gemm (matrix cores"),
    ("tilewright.cuda.language", "ptx_cp_async", "T.copy (T.Pipelined"),
    ("tilewright.metal.language", "simdgroup_load", "T.gemm"),
    ("tilewright.language", "ptx_wait_group", "T.Pipelined"),
])
def test_tir_script_names_say_what_to_use_instead(module, name, use):
    with pytest.raises(AttributeError) as e:
        getattr(importlib.import_module(module), name)
    assert f"TileLang's TVM TIR intrinsic {name}" in str(e.value) and use in str(e.value)
    # and the names it recommends exist
    for spelled in ("gemm", "wgmma_gemm", "copy", "Pipelined", "alloc_barrier", "barrier_arrive", "barrier_wait"):
        assert hasattr(T, spelled)


def test_unknown_names_keep_a_plain_message():
    with pytest.raises(AttributeError) as e:
        T.no_such_name  # noqa: B018
    assert str(e.value) == "module 'tilewright.language' has no attribute 'no_such_name'"
