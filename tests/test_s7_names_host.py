"""TileLang host-API names (issue 12 item 4): ``DType.type_code``, ``env.TILELANG_TMP_DIR`` (assignable,
where the compilers' temporary files go), the compile timeout of the HIP compiler process,
``T.copy(annotations=..., prefer_instruction=...)`` and several ``T.empty`` outputs of an eager
``@jit`` function returned as a list.  Kernels run in the tile interpreter and, lowered for
``sm_90a`` and ``gfx942``, on the thread-level emulator against float64 NumPy references with
NaN-poisoned outputs."""

from __future__ import annotations

import os
import stat
import warnings

import numpy as np
import pytest
from toolchains import needs_hip_compiler
from zoo import close, f64, poisoned, rand

import tilewright as tw
import tilewright.language as T
from tilewright import config
from tilewright.env import env
from tilewright.errors import CompileError, ToolchainError

BACKENDS = [("interpret", None), ("cuda -arch=sm_90a", "emulator"), ("hip -arch=gfx942", "emulator")]
IDS = ["interpret", "emulator-sm_90a", "emulator-gfx942"]


@pytest.fixture
def rng():
    return np.random.default_rng(4_242)


# ---------------------------------------------------------------------------------------- DType.type_code

@pytest.mark.parametrize("name,code", [
    ("int8", 0), ("int64", 0), ("int4", 0), ("uint8", 1), ("uint32", 1), ("float16", 2), ("float32", 2),
    ("float64", 2), ("bfloat16", 4), ("bool", 6), ("float8_e4m3fn", 10), ("float8_e4m3", 10),
    ("float8_e4m3fnuz", 11), ("float8_e5m2", 12), ("float8_e5m2fnuz", 13), ("float8_e8m0fnu", 14),
    ("float4_e2m1fn", 17), ("float16x2", 2), ("bfloat16x2", 4), ("float4_e2m1_unpacked", 131),
])
def test_type_code_is_dlpacks(name, code):
    assert getattr(T, name).type_code == code


def test_type_code_matches_torch_dlpack():
    torch = pytest.importorskip("torch")
    for name in ("int8", "uint8", "float16", "bfloat16", "float32", "float64", "int64", "bool"):
        t = torch.zeros(2, dtype=getattr(torch, name))
        # byte 4 of a DLTensor's dtype field is its code; torch exports the tensor's DLPack capsule
        assert T.dtype(name).type_code == _torch_dlpack_code(t), name


def _torch_dlpack_code(t) -> int:
    import ctypes

    capsule = t.__dlpack__()
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    managed = get(capsule, b"dltensor")
    # DLTensor: void* data; DLDevice device (2 x int32); int32 ndim; DLDataType dtype {uint8 code, bits; uint16 lanes}
    return ctypes.c_uint8.from_address(managed + 8 + 8 + 4).value


# ---------------------------------------------------------------------------------------- env.TILELANG_TMP_DIR

def test_tmp_dir_is_assignable_and_names_the_compilers_temporary_folder(monkeypatch, tmp_path):
    monkeypatch.delenv("TILEWRIGHT_TMP_DIR", raising=False)
    import tempfile

    assert env.TILELANG_TMP_DIR == tempfile.gettempdir()
    monkeypatch.setattr(env, "TILELANG_TMP_DIR", str(tmp_path / "tw-tmp"))  # what TileLang's tests do
    assert env.TILELANG_TMP_DIR == str(tmp_path / "tw-tmp") == config.get("tmp_dir")
    from tilewright.toolchain.hip import _work_dir

    d = _work_dir()
    assert os.path.dirname(d) == str(tmp_path / "tw-tmp") and os.path.isdir(d)


# ---------------------------------------------------------------------------------------- compile timeout

def test_timeout_setting_is_checked(monkeypatch):
    for raw in ("bad", "nan", "inf", "-1"):
        monkeypatch.setenv("TILEWRIGHT_COMPILE_TIMEOUT_SECONDS", raw)
        with pytest.raises(ValueError, match="TILEWRIGHT_COMPILE_TIMEOUT_SECONDS"):
            config.get("compile_timeout")
    monkeypatch.setenv("TILEWRIGHT_COMPILE_TIMEOUT_SECONDS", "1.5")
    assert config.get("compile_timeout") == 1.5
    monkeypatch.setenv("TILEWRIGHT_COMPILE_TIMEOUT_SECONDS", "0")
    from tilewright.toolchain.hip import _compile_timeout

    assert _compile_timeout() is None  # 0: no limit
    monkeypatch.delenv("TILEWRIGHT_COMPILE_TIMEOUT_SECONDS")
    assert _compile_timeout() == 900.0


@needs_hip_compiler
def test_a_hanging_hip_compiler_is_stopped(monkeypatch, tmp_path):
    """A clang that answers the version probes but hangs on the compile itself."""
    import shutil

    from tilewright.toolchain import hip

    real = hip.find_hip_compiler().path
    if not os.path.basename(real).startswith("clang"):
        pytest.skip("the HIP compiler here is not clang")
    fake = tmp_path / "clang-hangs"
    fake.write_text(f'#!/bin/sh\ncase "$*" in *--version*|*-print-targets*) exec {shutil.which(real) or real} "$@";; '
                    'esac\nexec sleep 30\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    lld = os.path.join(os.path.dirname(os.path.realpath(shutil.which(real) or real)), "lld")
    if os.path.exists(lld):  # the probe looks for lld next to the compiler
        (tmp_path / "lld").symlink_to(lld)
    monkeypatch.setenv("TILEWRIGHT_HIP_COMPILER", str(fake))
    monkeypatch.setenv("TILEWRIGHT_COMPILE_TIMEOUT_SECONDS", "0.5")
    monkeypatch.setenv("TILEWRIGHT_TMP_DIR", str(tmp_path / "work"))
    source = 'extern "C" __global__ void k(float* x) { x[0] = 1.0f; }\n'
    with pytest.raises(ToolchainError) as e:
        hip.compile_hip(source, "gfx942", ["k"])
    msg = str(e.value)
    assert "ran past 0.5 seconds and was stopped" in msg and "TILEWRIGHT_COMPILE_TIMEOUT_SECONDS" in msg
    assert e.value.repro and str(fake) in e.value.repro  # the command that hung
    assert e.value.source_path.startswith(str(tmp_path / "work")) and os.path.exists(e.value.source_path)


# ---------------------------------------------------------------------------------------- T.copy(annotations=...)

def elementwise_add(M, N, bm, bn, annotations=None, prefer=None):
    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            A_s = T.alloc_shared((bm, bn), "float32")
            B_s = T.alloc_shared((bm, bn), "float32")
            C_f = T.alloc_fragment((bm, bn), "float32")
            T.copy(A[by * bm, bx * bn], A_s, annotations=annotations, prefer_instruction=prefer)
            T.copy(B[by * bm, bx * bn], B_s, annotations=annotations)
            for i, j in T.Parallel(bm, bn):
                C_f[i, j] = A_s[i, j] + B_s[i, j]
            T.copy(C_f, C[by * bm, bx * bn])

    return main


@pytest.mark.parametrize("target,backend", BACKENDS, ids=IDS)
@pytest.mark.parametrize("annotations,prefer", [
    ({"prefer_instruction": "tma"}, None), ({"prefer_instruction": "sync", "coalesced_width": 2}, None),
    ({"eviction_policy": 1, "disable_tma": True}, "cp_async"), (None, "sync"),
], ids=["tma", "sync-width2", "evict-first", "prefer-sync"])
def test_copy_annotations(rng, target, backend, annotations, prefer):
    M, N = 96, 160  # ragged in both dimensions for 64 x 64 tiles
    a, b, c = rand(rng, (M, N)), rand(rng, (M, N)), poisoned((M, N))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kern = tw.compile(elementwise_add(M, N, 64, 64, annotations, prefer), target=target,
                          execution_backend=backend)
    kern(a, b, c)
    close(c, f64(a) + f64(b))


def test_tma_preference_is_a_hint_that_says_so():
    with pytest.warns(UserWarning, match=r"T.copy\(prefer_instruction='tma'\) has no effect"):
        tw.compile(elementwise_add(64, 64, 64, 64, {"prefer_instruction": "tma"}), target="interpret")


@pytest.mark.parametrize("annotations,prefer,match", [
    ({"prefer": "tma"}, None, r"unknown key\(s\) prefer"),
    ({"prefer_instruction": "ldmatrix"}, None, "must be 'tma', 'cp_async' or 'sync'"),
    (None, "bulk", "must be 'tma', 'cp_async' or 'sync'"),
    ([("prefer_instruction", "tma")], None, "takes a dict"),
])
def test_bad_copy_annotations_are_refused(annotations, prefer, match):
    with pytest.raises(CompileError, match=match):
        tw.compile(elementwise_add(64, 64, 64, 64, annotations, prefer), target="interpret")


def test_sync_preference_keeps_the_copy_off_tma():
    def pipelined(annotations):
        @T.prim_func
        def main(A: T.Tensor((256, 64), "float16"), B: T.Tensor((256, 64), "float16")):
            with T.Kernel(1, threads=128):
                A_s = T.alloc_shared((64, 64), "float16")
                for k in T.Pipelined(4, num_stages=2):
                    T.copy(A[k * 64, 0], A_s, annotations=annotations)
                    T.copy(A_s, B[k * 64, 0])

        return main

    tma = tw.compile(pipelined(None), target="cuda -arch=sm_90a", execution_backend="emulator")
    sync = tw.compile(pipelined({"prefer_instruction": "sync"}), target="cuda -arch=sm_90a",
                      execution_backend="emulator")
    assert "cp.async.bulk.tensor" in tma.get_kernel_source()
    assert "cp.async.bulk.tensor" not in sync.get_kernel_source()


