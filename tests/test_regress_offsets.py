"""Regressions of issue 11, items 5 and 11: element offsets that can pass 2^31 are 64-bit in the
generated code (and 32-bit where they provably cannot), a tensor too large for the compiled code is
refused at launch, the emulator evaluates offsets with 64-bit semantics and flags where 32-bit
code would overflow; and an odd-width softmax no longer makes NVRTC unroll one 127-step loop per
register (a structural check of the generated code, no timing)."""

import numpy as np
import pytest
import zoo
from zoo import close, poisoned, rand

from tilewright.compiler import print_source as _print
from tilewright.interp.emulator import run_thread_kernel
from tilewright.ir import thread as th
from tilewright.ir import tile as t
from tilewright.ir.expr import const_value
from tilewright.kernels import softmax
from tilewright.passes.pipeline import PassContext, run_pipeline
from tilewright.target.base import Target

CUDA, GFX942, GFX1100 = "cuda -arch=sm_90a", "hip -arch=gfx942", "hip -arch=gfx1100"


def lower(func, target: str) -> th.ThreadKernel:
    return run_pipeline(func, PassContext(Target.parse(target)))


@pytest.fixture
def rng():
    return np.random.default_rng(20261201)


# ============================================================================================
# item 11: softmax over an odd row width


def unrolled_size(s) -> int:
    """Statements the C compiler sees once loops of constant trip count are unrolled (what made
    NVRTC slow: 64 loops of 127 steps on the (32, 127) softmax)."""
    if s is None:
        return 0
    if isinstance(s, t.SeqStmt):
        return sum(unrolled_size(x) for x in s.stmts)
    if isinstance(s, t.IfThenElse):
        return 1 + unrolled_size(s.then_body) + unrolled_size(s.else_body)
    if isinstance(s, t.For):
        n = const_value(s.extent)
        return 1 + (n if isinstance(n, int) else 1) * unrolled_size(s.body)
    return 1


def loops(s) -> int:
    if isinstance(s, t.SeqStmt):
        return sum(loops(x) for x in s.stmts)
    if isinstance(s, t.IfThenElse):
        return loops(s.then_body) + (loops(s.else_body) if s.else_body is not None else 0)
    if isinstance(s, t.For):
        return 1 + loops(s.body)
    return 0


@pytest.mark.parametrize("target", [CUDA, GFX942, GFX1100])
def test_odd_width_softmax_code_is_not_pathological(target):
    odd, even = lower(softmax(32, 127, 32), target), lower(softmax(32, 128, 32), target)
    # each reduction folds each row once: one loop per reduction, not one per register
    assert loops(odd.body) <= 2
    assert unrolled_size(odd.body) <= 3 * unrolled_size(even.body)
    tgt = Target.parse(target)
    assert len(_print(odd, tgt)) <= 2 * len(_print(even, tgt))


@pytest.mark.parametrize("target", [CUDA, GFX942, GFX1100])
@pytest.mark.parametrize("M, N, bm", [(32, 127, 32), (40, 127, 32), (5, 300, 2)])
def test_odd_width_softmax_is_right(rng, target, M, N, bm):
    k = lower(softmax(M, N, bm), target)
    x, y = rand(rng, (M, N), lo=-5, hi=5), poisoned((M, N))
    run_thread_kernel(k, [x, y], check_races=True)
    close(y, zoo.softmax_ref(x), rtol=1e-5, atol=1e-7)


# ============================================================================================
# item 5: element offsets past 2^31


BIG = 2**31 + 2**20  # elements: past int32 (4 GiB of float16, 8 GiB of float32)


def global_offsets(kernel: th.ThreadKernel) -> list:
    """(buffer name, offset expression) of every global access in the thread code."""
    from tilewright.ir import expr as E
    from tilewright.ir.visitor import walk, walk_expr

    found = []

    def on_expr(x):
        if isinstance(x, E.Load) and x.buffer.scope == "global":
            found.append((x.buffer.name, x.indices[0]))

    def on_stmt(s):
        for f in ("indices", "src_index", "dst_index", "index", "value", "cond", "pred"):
            v = getattr(s, f, None)
            for x in (v if isinstance(v, tuple) else (v,)):
                if isinstance(x, E.Expr):
                    walk_expr(x, on_expr)
        if isinstance(s, t.BufferStore) and s.buffer.scope == "global":
            found.append((s.buffer.name, s.indices[0]))
        for buf, f in (("src", "src_index"), ("dst", "dst_index"), ("buffer", "index")):
            b = getattr(s, buf, None)
            if isinstance(s, (th.VecCopy, th.AsyncCopy, th.AtomicRMW)) and b is not None and b.scope == "global":
                found.append((b.name, getattr(s, f)))

    walk(kernel.body, on_stmt)
    return found


SMALL_STATIC = {
    "elementwise": lambda: zoo.elementwise(1000, 128),
    "copy": lambda: zoo.tiled_copy(1000, 500, 128, 64),
    "gemm": lambda: zoo.matmul(256, 256, 256, 128, 128, 32, "float16", stages=2),
    "softmax": lambda: softmax(64, 1024, 4),
    "transpose": lambda: zoo.transpose(300, 200, 64, 32),
    "convert": lambda: zoo.convert_copy(130, 70, 64, 32),
    "gemm_int8": lambda: zoo.int8_gemm(70, 50, 96, 64, 32, 32),
    "splitk_atomic": lambda: zoo.splitk_gemm(90, 80, 128, 64, 64, 32, 2),
    "online_softmax": lambda: zoo.online_softmax(50, 300, 16, 64),
    "rmsnorm": lambda: zoo.rmsnorm(37, 256, 8),
    "column_sum": lambda: zoo.column_sum(333, 100, 64, 32, "peeled"),
    "attention": lambda: zoo.flash_attention(200, 64, 64, 64),
    # 2^31 - 2^20 elements: below the limit, and every masked-out position too
    "copy_near_limit": lambda: zoo.tiled_copy(2**15, 2**16 - 32, 64, 64),
}


@pytest.mark.parametrize("target", [CUDA, "cuda -arch=sm_80", GFX942, GFX1100])
@pytest.mark.parametrize("name", SMALL_STATIC)
def test_small_static_shapes_keep_32_bit_offsets(target, name):
    k = lower(SMALL_STATIC[name](), target)
    offs = global_offsets(k)
    assert offs
    assert all(off.dtype == "int32" for _, off in offs), [(n, str(o)) for n, o in offs if o.dtype != "int32"]
    # (in the kernel: the wgmma descriptor helper before it builds its 64-bit descriptor on purpose)
    assert "long long)" not in _print(k, Target.parse(target)).split("__global__", 1)[-1]


@pytest.mark.parametrize("target", [CUDA, GFX942, GFX1100])
def test_large_static_tensor_gets_64_bit_offsets(target):
    k = lower(zoo.elementwise_activation(BIG + 5, 1024), target)  # ragged: the bound check too
    offs = global_offsets(k)
    assert {n for n, _ in offs} == {"A", "B", "C"}
    assert all(off.dtype == "int64" for _, off in offs)
    src = _print(k, Target.parse(target))
    assert f"{BIG + 5}LL" in src  # the bound is a 64-bit constant compared in 64 bits
    assert ")) * 1024LL)" in src  # the block's start: block index (converted to 64 bits) times 1024


@pytest.mark.parametrize("target", [CUDA, GFX942])
def test_dynamic_shape_gets_64_bit_offsets_and_is_right(rng, target):
    k = lower(zoo.dynamic_rows(64, 16), target)
    offs = global_offsets(k)
    assert offs and all(off.dtype == "int64" for _, off in offs)
    m = 37
    x, y = rand(rng, (m, 64)), poisoned((m, 64))
    run_thread_kernel(k, [x, y], check_races=True)
    close(y, 2.0 * x.astype(np.float64) + m)


def gather_rows(rows):
    """``Y[i, j] = X[row * 4096 + i * 64 + j]`` for a scalar ``row``: a 32-bit offset whose range the
    compiler cannot bound (X is small and static, so it stays 32-bit)."""
    import tilewright.language as T

    @T.prim_func
    def gather(X: T.Tensor((rows * 4096,), "float32"), Y: T.Tensor((64, 64), "float32"), row: T.int32):
        with T.Kernel(1, threads=128):
            for i, j in T.Parallel(64, 64):
                Y[i, j] = X[row * 4096 + i * 64 + j]

    return gather


@pytest.mark.parametrize("target", [CUDA, GFX942])
def test_emulator_flags_32_bit_overflow(rng, target):
    from tilewright.interp.emulator import EmulatorError

    k = lower(gather_rows(4), target)
    x = rand(rng, (4 * 4096,))
    y = poisoned((64, 64))
    run_thread_kernel(k, [x, y, 3])
    close(y, x[3 * 4096:4 * 4096].reshape(64, 64).astype(np.float64))
    # row * 4096 = 2^32 wraps to 0 in a C int: an in-bounds, wrong address.  The emulator evaluates
    # exactly and refuses instead of reading X[0..4095]
    with pytest.raises(EmulatorError, match="32-bit integer overflow"):
        run_thread_kernel(k, [x, poisoned((64, 64)), 2**20])


def tail_copy(n, block):
    """``Y[i] = 2 * X[n - 4 * block + i]``: the last ``4 * block`` elements of a large X."""
    import tilewright.language as T

    @T.prim_func
    def tail(X: T.Tensor((n,), "float16"), Y: T.Tensor((4 * block,), "float32")):
        with T.Kernel(4, threads=128) as bx:
            for i in T.Parallel(block):
                Y[bx * block + i] = T.cast(X[n - 4 * block + bx * block + i], "float32") * 2.0

    return tail


def test_emulator_reads_past_2_31_elements(tmp_path, rng):
    """A 4 GiB float16 tensor, as a sparse file (only the pages read are real): the emulator addresses
    its last elements with 64-bit offsets."""
    k = lower(tail_copy(BIG, 256), CUDA)
    assert all(off.dtype == "int64" for n, off in global_offsets(k) if n == "X")
    x = np.memmap(tmp_path / "big.f16", dtype=np.float16, mode="w+", shape=(BIG,))
    tail = rand(rng, (1024,), "float16")
    x[BIG - 1024:] = tail
    x[:1024] = rand(rng, (1024,), "float16")  # what a wrapped offset would read
    y = poisoned((1024,))
    run_thread_kernel(k, [x, y])
    close(y, 2.0 * tail.astype(np.float64))
    del x


def test_launch_refuses_dynamic_size_past_int32():
    import tilewright
    from tilewright.errors import ArgumentError
    from tilewright.runtime.launcher import check_dynamic_sizes

    f = zoo.dynamic_rows(64, 16)
    kern = tilewright.compile(f, target=CUDA, execution_backend="emulator")
    m = f.dyn_vars[0] if hasattr(f, "dyn_vars") else None
    with pytest.raises(ArgumentError, match="dimension 0 of argument X.*0..2147483647"):
        check_dynamic_sizes(kern.func.name, kern.func.params, {m: 2**31})
    check_dynamic_sizes(kern.func.name, kern.func.params, {m: 2**31 - 1})
    # end to end (the binder refuses it first): 8 GiB of address space, never touched
    g = zoo.dynamic_rows(1, 16)
    kern = tilewright.compile(g, target=CUDA, execution_backend="emulator")
    big = np.empty((2**31, 1), np.float32)
    with pytest.raises(ArgumentError, match="2147483648"):
        kern(big, big)


def test_tma_copy_refuses_a_dimension_past_its_coordinates():
    from tilewright.errors import CompileError
    from tilewright.kernels import matmul

    # K = 2^31 + 64 along A's rows: TMA box coordinates are signed 32-bit
    with pytest.raises(CompileError, match="32-bit coordinates"):
        lower(matmul(128, 64, 2**31 + 64, 128, 64, 32), CUDA)
    k = lower(matmul(128, 64, 2**31 + 64, 128, 64, 32), "cuda -arch=sm_80")  # cp.async: 64-bit offsets
    assert any(off.dtype == "int64" for n, off in global_offsets(k) if n == "A")
