"""The HIP printer end to end: T-language kernels lowered for AMD targets, printed, compiled to code objects.

Each kernel is lowered for gfx90a (CDNA2), gfx942 (CDNA3), gfx1100 (RDNA3) and gfx1201 (RDNA4), printed
with ``print_hip`` and compiled with ``compile_hip``.  The checks are what can be judged without a GPU:
the matrix kernels really use MFMA (CDNA) / WMMA (RDNA) instructions, the instruction named by each
``MatrixInstr`` record is in the disassembly, nothing spills or uses scratch (local arrays stay in
registers), the wave size and work-group size in the metadata are the target's, and all LDS is dynamic.

Lowering and printing run in the main thread (the frontend is not meant for threads); the clang runs
and disassemblies run in a small thread pool, started for every selected case before the first test
needs one.  Without a HIP-capable compiler the compile tests are skipped; the printer-only tests run.
"""

from __future__ import annotations

import math
import os
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import pytest
import zoo

import tilewright.language as T
from tilewright.codegen.hip import print_hip
from tilewright.errors import InternalError, TilewrightError, ToolchainError
from tilewright.ir import expr as E
from tilewright.ir import thread as th
from tilewright.ir import tile as t
from tilewright.ir.expr import FLOAT_INTRINSICS
from tilewright.ir.visitor import walk
from tilewright.kernels import softmax
from tilewright.passes.pipeline import PassContext, run_pipeline
from tilewright.target.base import Target
from tilewright.toolchain.hip import compile_hip, disassemble, find_hip_compiler, find_llvm_tool

ARCHS = ("gfx90a", "gfx942", "gfx1100", "gfx1201")
CDNA = ("gfx90a", "gfx942")

# ---------------------------------------------------------------------------------------------
# Kernels (from zoo.py, shared with the interpreter and emulator tests; row softmax is the library's)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    make: object  # () -> PrimFunc
    mma_types: tuple = ()  # (a, b, acc) dtypes of its T.gemm: a matrix instruction is required where one exists


def tilelang_attention(p_in_registers):
    """Attention as in TileLang's example: both gemms FullRow, the V tile loaded with the K tile."""
    return zoo.flash_attention(200, 64, 64, 64, p_in_registers, policy=T.GemmWarpPolicy.FullRow, v_with_k=True)


F16, BF16 = ("float16", "float16", "float32"), ("bfloat16", "bfloat16", "float32")
CASES = {
    "elementwise_ragged": Case(lambda: zoo.elementwise_activation(1000, 128)),
    "copy_shared_ragged": Case(lambda: zoo.tiled_copy(1000, 500, 128, 64)),
    "gemm_f16_nn": Case(lambda: zoo.matmul(100, 72, 40, 64, 64, 32, "float16"), F16),
    "gemm_f16_nt": Case(lambda: zoo.matmul(100, 72, 40, 64, 64, 32, "float16", trans_b=True), F16),
    "gemm_f16_tn": Case(lambda: zoo.matmul(100, 72, 40, 64, 64, 32, "float16", trans_a=True), F16),
    "gemm_f16_tt_bias_relu": Case(
        lambda: zoo.matmul(100, 72, 40, 64, 64, 32, "float16", trans_a=True, trans_b=True, epilogue="bias_relu"), F16),
    "gemm_bf16_nn_bias_relu": Case(lambda: zoo.matmul(100, 72, 40, 64, 64, 32, "bfloat16", epilogue="bias_relu"), BF16),
    "gemm_bf16_tt": Case(lambda: zoo.matmul(100, 72, 40, 64, 64, 32, "bfloat16", trans_a=True, trans_b=True), BF16),
    "gemm_f16_pipelined2": Case(lambda: zoo.matmul(256, 256, 256, 128, 128, 32, "float16", stages=2), F16),
    "gemm_f16_pipelined3": Case(
        lambda: zoo.matmul(512, 512, 512, 128, 128, 32, "float16", out_dtype="float32", stages=3, threads=256), F16),
    "gemm_f32": Case(lambda: zoo.matmul(100, 72, 40, 64, 64, 32, "float32"), ("float32", "float32", "float32")),
    "gemm_int8": Case(lambda: zoo.int8_gemm(70, 50, 96, 64, 32, 32), ("int8", "int8", "int32")),
    "splitk_gemm_atomic": Case(lambda: zoo.splitk_gemm(90, 80, 128, 64, 64, 32, 2), F16),
    "row_softmax": Case(lambda: softmax(64, 1024, 4)),
    "rmsnorm": Case(lambda: zoo.rmsnorm(37, 256, 8)),
    "column_sum": Case(lambda: zoo.column_sum(333, 100, 64, 32, "peeled")),
    "attention_p_shared": Case(lambda: tilelang_attention(p_in_registers=False), F16),
    "attention_p_fragment": Case(lambda: tilelang_attention(p_in_registers=True), F16),
}


def _params():
    return [pytest.param(name, arch, id=f"{name}-{arch}") for name in CASES for arch in ARCHS]


# ---------------------------------------------------------------------------------------------
# Building: lower + print here, compile + disassemble in a pool.
# ---------------------------------------------------------------------------------------------


@dataclass
class Build:
    target: Target
    kernel: th.ThreadKernel
    source: str
    future: object  # -> (HipBinary, disassembly)


_BUILDS: dict = {}
_POOL: list = []


def _compile(source: str, arch: str, name: str):
    binary = compile_hip(source, arch, [name])
    return binary, disassemble(binary.code_object)


def _build(case: str, arch: str) -> Build:
    key = (case, arch)
    if key not in _BUILDS:
        try:
            target = Target.parse(f"hip -arch={arch}")
            kernel = run_pipeline(CASES[case].make(), PassContext(target))
            source = print_hip(kernel)
        except TilewrightError as exc:
            _BUILDS[key] = exc
        else:
            if not _POOL:
                _POOL.append(ThreadPoolExecutor(max_workers=max(2, min(8, os.cpu_count() or 2))))
            _BUILDS[key] = Build(target, kernel, source, _POOL[0].submit(_compile, source, arch, kernel.name))
    value = _BUILDS[key]
    if isinstance(value, Exception):
        raise value
    return value


@pytest.fixture(scope="module")
def hip_toolchain():
    try:
        find_hip_compiler()
    except ToolchainError as exc:
        pytest.skip(f"no HIP device compiler: {str(exc).splitlines()[0]}")
    if find_llvm_tool("llvm-objdump") is None:
        pytest.skip("no llvm-objdump to disassemble AMDGPU code objects")
    yield
    for pool in _POOL:
        pool.shutdown(wait=False, cancel_futures=True)
    _POOL.clear()
    _BUILDS.clear()


@pytest.fixture(scope="module")
def prefetched(request, hip_toolchain):
    """Start the compiles of every selected (case, arch) at once, so they overlap."""
    for item in request.session.items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if item.module is request.module and "case" in params and "arch" in params:
            try:
                _build(params["case"], params["arch"])
            except TilewrightError:
                pass  # the test itself re-raises it


def _matrix_key(name: str) -> str:
    """Builtin or disassembly spelling -> one comparable key: ``__builtin_amdgcn_mfma_f32_32x32x8bf16_1k``,
    ``v_mfma_f32_32x32x8_bf16`` -> ``mfmaf3232x32x8bf16``."""
    name = name.removeprefix("__builtin_amdgcn_").removeprefix("v_")
    name = re.sub(r"_(?:1k|w32|w64|gfx12)(?=_|$)", "", name)
    return name.replace("_", "")


def _check_build(b: Build, mma_types: tuple) -> dict:
    binary, dis = b.future.result()
    k, target = b.kernel, b.target
    res = binary.resources[k.name]
    assert res["spills"] == 0, res
    assert res["scratch_bytes"] == 0, res
    assert not res["dynamic_stack"], res
    assert res["wavefront_size"] == target.warp_size == (64 if target.arch in CDNA else 32), res
    assert res["max_flat_workgroup_size"] == k.num_threads, res
    # all LDS is the dynamic tw_smem, sized at launch; it must fit the target
    assert res["lds_bytes"] == 0 and k.shared_bytes <= target.max_shared_bytes, (res, k.shared_bytes)
    assert "s_swappc" not in dis and "scratch_" not in dis, "calls or scratch accesses in the code"
    instrs = []
    walk(k.body, lambda s: instrs.append(s.instr) if isinstance(s, th.MatrixMultiply) else None)
    used = {_matrix_key(m) for m in re.findall(r"\bv_(?:mfma|wmma)\w*", dis)}
    for mi in {mi.name: mi for mi in instrs}.values():
        assert _matrix_key(mi.mnemonic) in used, f"{mi.mnemonic} not in the disassembly ({sorted(used)})"
    if mma_types and target.matrix_instr_for(*mma_types):
        assert instrs, "the gemm was not lowered to matrix instructions"
        assert re.search(r"\bv_mfma_" if target.arch in CDNA else r"\bv_wmma_", dis)
    return res


# ---------------------------------------------------------------------------------------------
# Compile tests
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case,arch", _params())
def test_kernel_compiles_for_amd(case, arch, prefetched):
    b = _build(case, arch)
    _check_build(b, CASES[case].mma_types)


def _hand_kernel(name, params, body, num_threads=64):
    tx = E.Var("tx", "int32", "thread")
    return th.ThreadKernel(name=name, params=params, dyn_vars=[], grid=(E.as_expr(1),), num_threads=num_threads,
                           shared_bytes=0, body=body, thread_var=tx, block_vars=(E.Var("bx", "int32", "block"),))


def _math_kernel(arch: str) -> th.ThreadKernel:
    """Every float intrinsic, float constants, wave shuffles of every width and type, and atomics."""
    target = Target.parse(f"hip -arch={arch}")
    xs = t.Buffer("xs", (64,), "float32", "global")
    hs = t.Buffer("hs", (64,), "float16", "global")
    bs = t.Buffer("bs", (64,), "bfloat16", "global")
    ys = t.Buffer("ys", (128,), "float32", "global")
    ds = t.Buffer("ds", (64,), "float64", "global")
    ints = t.Buffer("ints", (64,), "int32", "global")
    longs = t.Buffer("longs", (64,), "int64", "global")
    kernel = _hand_kernel("math_kernel", [xs, hs, bs, ys, ds, ints, longs], None)
    tx = kernel.thread_var
    x, h, b = E.Load(xs, (tx,)), E.Load(hs, (tx,)), E.Load(bs, (tx,))
    d, i, q = E.Load(ds, (tx,)), E.Load(ints, (tx,)), E.Load(longs, (tx,))
    stmts = []
    for n, fn in enumerate(sorted(FLOAT_INTRINSICS - {"isnan", "isinf"})):
        args = (x, x) if fn == "pow" else (x, x, x) if fn == "fma" else (x,)
        arg = E.Call(fn, args, "float32")
        stmts.append(t.BufferStore(ys, (tx * 0 + n,), E.Cast("float32", E.Call(fn, (h,) * len(args), "float16"))))
        stmts.append(t.BufferStore(ys, (tx,), arg))
    inf, nan = E.Const(math.inf, "float32"), E.Const(math.nan, "float32")
    minus_inf = E.Const(-math.inf, "float32")
    stmts.append(t.BufferStore(ys, (tx,), E.Select(E.Call("isnan", (x,), "bool"), inf, minus_inf, "float32")))
    fmod = E.BinOp("%", x, E.Const(3.0, "float32"), "float32")
    stmts.append(t.BufferStore(ys, (tx + 64,), E.Select(E.Call("isinf", (h,), "bool"), nan, fmod, "float32")))
    stmts.append(t.BufferStore(hs, (tx,), E.Const(-math.inf, "float16")))
    stmts.append(t.BufferStore(ds, (tx,), E.Call("sqrt", (d,), "float64")))
    ws = target.warp_size
    for mask in (1, 2, 4, 8, 16, 32)[: int(math.log2(ws))]:
        stmts.append(t.BufferStore(xs, (tx,), E.Shuffle(x, mask, ws)))
        stmts.append(t.BufferStore(hs, (tx,), E.Shuffle(h, mask, ws)))
        stmts.append(t.BufferStore(bs, (tx,), E.Shuffle(b, mask, ws)))
        stmts.append(t.BufferStore(ds, (tx,), E.Shuffle(d, mask, ws)))
        stmts.append(t.BufferStore(ints, (tx,), E.Shuffle(i, mask, ws)))
        stmts.append(t.BufferStore(longs, (tx,), E.Shuffle(q, mask, ws)))
    stmts.append(t.BufferStore(xs, (tx,), E.Shuffle(x, 2, 4)))  # a sub-wave width
    for op in ("add", "max", "min"):
        stmts.append(th.AtomicRMW(op, ys, E.as_expr(0), x))
        stmts.append(th.AtomicRMW(op, ints, E.as_expr(0), i))
    stmts.append(th.AtomicRMW("add", ds, E.as_expr(0), d))
    kernel.body = t.SeqStmt(stmts)
    kernel.target = target
    return kernel


@pytest.mark.parametrize("arch", ARCHS)
def test_math_shuffles_atomics_compile_without_device_libraries(arch, hip_toolchain):
    kernel = _math_kernel(arch)
    src = print_hip(kernel)
    assert "threadIdx" not in src.split("end of printer helpers")[1]
    binary, dis = _compile(src, arch, kernel.name)
    res = binary.resources[kernel.name]
    assert res["spills"] == 0 and res["scratch_bytes"] == 0
    assert "s_swappc" not in dis  # no calls: everything is inline (no ocml)
    assert "ds_bpermute_b32" in dis


def test_async_copy_fallback_is_synchronous(hip_toolchain):
    # No AMD target has cp.async; pretend one does to get AsyncCopy/AsyncCommit/AsyncWait nodes.
    base = Target.parse("hip -arch=gfx942")
    target = replace(base, features=(*base.features, "cp.async"))
    kernel = run_pipeline(zoo.matmul(256, 256, 256, 64, 64, 32, "float16", stages=3), PassContext(target))
    nodes = []
    walk(kernel.body, lambda s: nodes.append(type(s).__name__))
    assert "AsyncCopy" in nodes and "AsyncWait" in nodes
    src = print_hip(kernel)
    assert "cp.async fallback" in src and "asm" not in src.split("end of printer helpers")[1]
    binary, dis = _compile(src, "gfx942", kernel.name)
    assert binary.resources[kernel.name]["scratch_bytes"] == 0
    assert "v_mfma" in dis


# ---------------------------------------------------------------------------------------------
# Printer-only tests (no compiler needed)
# ---------------------------------------------------------------------------------------------


def test_printed_source_uses_the_prelude():
    kernel = run_pipeline(zoo.matmul(100, 72, 40, 64, 64, 32, "float16"), PassContext(Target.parse("hip -arch=gfx942")))
    src = print_hip(kernel)
    head, body = src.split("// ---- end of printer helpers ----")
    assert "TILEWRIGHT_HIP_PRELUDE" in head
    assert "TW_DYNAMIC_SHARED(unsigned char, tw_smem);" in body.split("extern \"C\"")[0]  # file scope
    assert 'extern "C" __global__ TW_LAUNCH_BOUNDS(128) void gemm_kernel(' in body
    assert "tw_thread_idx_x()" in body and "tw_syncthreads();" in body
    assert "__builtin_amdgcn_mfma_f32_32x32x8f16(tw_a, tw_b, tw_c, 0, 0, 0)" in body
    for cuda_only in ("threadIdx", "__syncthreads", "__shfl", "asm", "half2", "uint4"):
        assert cuda_only not in body, cuda_only


def test_load_matrix_is_an_internal_error():
    src = t.Buffer("src", (256,), "float16", "shared")
    dst = t.Buffer("dst", (8,), "float16", "local")
    kernel = _hand_kernel("lm", [], t.SeqStmt([th.LocalDecl(dst), th.LoadMatrix(dst, 0, src, E.as_expr(0), 4)]))
    kernel.target = Target.parse("hip -arch=gfx942")
    with pytest.raises(InternalError, match="ldmatrix"):
        print_hip(kernel)


def test_fp8_values_print_as_bytes_with_conversions():
    import ml_dtypes
    import numpy as np

    x = t.Buffer("x", (64,), "float8_e4m3fnuz", "global")
    y = t.Buffer("y", (64,), "float32", "global")
    body = t.SeqStmt([
        t.BufferStore(x, (E.as_expr(0),), E.cast("float8_e4m3fnuz", 1.5)),
        t.BufferStore(y, (E.as_expr(1),), E.cast("float32", E.Load(x, (E.as_expr(2),)) * E.Load(x, (E.as_expr(3),)))),
    ])
    kernel = _hand_kernel("f8", [x, y], body)
    kernel.target = Target.parse("hip -arch=gfx942")
    src = print_hip(kernel)
    byte = int(np.array([1.5], np.float32).astype(ml_dtypes.float8_e4m3fnuz).view(np.uint8)[0])
    assert f"((unsigned char){byte:#04x})" in src  # constants are pre-encoded bytes
    assert "tw_e4m3fnuz_to_f32(" in src and "tw_f32_to_e4m3fnuz(" in src  # math goes through float32
    assert "unsigned char* __restrict__ x" in src


