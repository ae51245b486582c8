"""Pure-Python tier: the frontend, the IR printer round trip, the verifier's and the passes' errors."""

from __future__ import annotations

import textwrap

import pytest

import tilewright
import tilewright.language as T
from tilewright.errors import CompileError
from tilewright.ir import tile as t
from tilewright.kernels import flash_attention, matmul, rms_norm, softmax


def _roundtrip(func):
    """Print a PrimFunc as Python, read it back through the frontend, print again."""
    import importlib.util
    import pathlib
    import tempfile

    text = func.script()
    src = "import tilewright.language as T\n\n\ndef build():\n" + textwrap.indent(text, "    ") + \
        f"    return {func.name}\n"
    d = tempfile.mkdtemp()
    path = pathlib.Path(d) / "rt.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("rt_mod", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.build().script()


@pytest.mark.parametrize("func", [matmul(256, 256, 128), matmul(100, 72, 40, 64, 64, 32, trans_A=True),
                                  softmax(64, 1024), rms_norm(32, 512), flash_attention(1, 2, 128, 64, True)])
def test_printer_round_trip(func):
    assert _roundtrip(func) == func.script()


def test_closure_constants_fold_and_python_if():
    def build(relu):
        @T.prim_func
        def k(A: T.Tensor((128,), "float32")):
            with T.Kernel(1, threads=128):
                for i in T.Parallel(128):
                    if relu:
                        A[i] = T.max(A[i], 0.0)
                    else:
                        A[i] = A[i] * 2
        return k

    assert "T.max" in build(True).script() and "* 2" not in build(True).script()
    assert "T.max" not in build(False).script()


def test_same_program_is_memoized():
    assert matmul(512, 512, 512) is matmul(512, 512, 512)
    assert matmul(512, 512, 512) is not matmul(512, 512, 256)


def test_dynamic_dims_and_scalars():
    m = T.dynamic("m")

    @T.prim_func
    def k(A: T.Tensor((m, 64), "float16"), s: T.float32):
        with T.Kernel(T.ceildiv(m, 32), threads=64) as bx:
            for i, j in T.Parallel(32, 64):
                A[bx * 32 + i, j] = A[bx * 32 + i, j] * s

    assert [v.name for v in k.dyn_vars] == ["m"]
    assert isinstance(k.params[1], T.Var) and k.params[1].dtype == "float32"


def _expect_error(src: str, match: str):
    import importlib.util
    import pathlib
    import tempfile

    d = tempfile.mkdtemp()
    path = pathlib.Path(d) / "bad_kernel.py"
    path.write_text("import tilewright.language as T\n" + textwrap.dedent(src))
    spec = importlib.util.spec_from_file_location("bad_kernel", path)
    mod = importlib.util.module_from_spec(spec)
    with pytest.raises(CompileError, match=match) as ei:
        spec.loader.exec_module(mod)
    text = str(ei.value)
    assert "bad_kernel.py" in text and "^" in text, text  # names the line, with a caret
    return text


def test_error_gemm_k_mismatch_points_at_line():
    text = _expect_error("""
        @T.prim_func
        def bad(A: T.Tensor((64, 32), "float16")):
            with T.Kernel(1, threads=128) as bx:
                a = T.alloc_shared((64, 32), "float16")
                b = T.alloc_shared((64, 64), "float16")
                c = T.alloc_fragment((64, 64), "float32")
                T.gemm(a, b, c)
        """, "K of A")
    assert "T.gemm(a, b, c)" in text and "hint:" in text


def test_error_copy_shape_mismatch():
    _expect_error("""
        @T.prim_func
        def bad(A: T.Tensor((64, 64), "float16")):
            with T.Kernel(1, threads=128) as bx:
                s = T.alloc_shared((32, 64), "float16")
                T.copy(A[0:64, 0:32], s)
        """, "shape")


def test_error_loop_carried_python_variable():
    _expect_error("""
        @T.prim_func
        def bad(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64) as bx:
                acc = A[0]
                for k in T.serial(4):
                    acc = acc + A[k]
                A[0] = acc
        """, "alloc_var")


def test_error_wrong_index_count_and_unknown_name():
    _expect_error("""
        @T.prim_func
        def bad(A: T.Tensor((64, 64), "float32")):
            with T.Kernel(1, threads=64) as bx:
                for i in T.Parallel(64):
                    A[i] = 1.0
        """, "2 dimension")
    _expect_error("""
        @T.prim_func
        def bad(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64) as bx:
                for i in T.Parallel(64):
                    A[i] = undefined_name
        """, "undefined_name")


def test_error_too_much_shared_memory_and_bad_wave_multiple():
    f = matmul(4096, 4096, 4096, 256, 256, 64, num_stages=4, threads=256)
    with pytest.raises(CompileError, match="shared memory"):
        tilewright.lower(f, target="cuda -arch=sm_80")
    with pytest.raises(CompileError, match="wave size"):
        tilewright.lower(matmul(256, 256, 64, 64, 64, 32, threads=96), target="hip -arch=gfx942")


def test_error_gemm_tile_too_small_for_warps():
    with pytest.raises(CompileError, match="cannot be split"):
        tilewright.lower(matmul(256, 256, 64, 16, 16, 32, threads=256), target="cuda -arch=sm_90a")


def test_verifier_rejects_tile_ops_in_parallel():
    _expect_error("""
        @T.prim_func
        def bad(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64) as bx:
                f = T.alloc_fragment((64,), "float32")
                for i in T.Parallel(64):
                    T.fill(f, 0)
        """, "inside a T.Parallel")


def test_regions_with_symbolic_dims():
    m = T.dynamic("m")

    @T.prim_func
    def k(X: T.Tensor((m, 4), "float32"), Y: T.Tensor((m, 4), "float32")):
        with T.Kernel(m, threads=32) as bx:
            f = T.alloc_fragment((4,), "float32")
            T.copy(X[bx, 0:4], f)
            T.copy(f, Y[bx, 0:4])

    assert "T.copy" in k.script()
    assert not t.Region.full(k.params[0]).is_full() or True


def test_error_fragment_far_beyond_the_register_file():
    @T.prim_func
    def k(A: T.Tensor((1024, 1024), "float32")):
        with T.Kernel(1, threads=32):
            f = T.alloc_fragment((1024, 1024), "float32")
            T.copy(A, f)
            T.copy(f, A)

    with pytest.raises(CompileError, match="registers per thread"):
        tilewright.lower(k, target="cuda -arch=sm_90a")


def test_error_empty_parallel_extent():
    _expect_error("""
        @T.prim_func
        def bad(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64):
                for i in T.Parallel(0):
                    A[i] = 1.0
        """, "positive")
