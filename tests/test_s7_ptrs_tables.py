"""``T.make_tensor`` on an address computed inside the kernel: a pointer table entry (TileLang's
test_tilelang_language_ptr.py pointer_table_* and examples/grouped_gemm's fwd_ptr kernel).

On the CPU backends (the tile interpreter, and the emulator of the lowered sm_90a / gfx942 code) a table built
with ``tilewright.pointer_table`` or from CPU torch tensors' ``data_ptr()`` resolves to the host arrays; an
address inside no known array, a tensor running past the end of its array, or a misaligned address is an error
naming the tensor (interp/host_addresses.py).  Results against float64 NumPy references, outputs poisoned."""

from __future__ import annotations

import math

import numpy as np
import pytest
from toolchains import needs_hip_compiler, needs_nvrtc
from zoo import close, f64, poisoned

import tilewright as tw
import tilewright.language as T
from tilewright.errors import CompileError

BACKENDS = [("interpret", None, 1), ("cuda -arch=sm_90a", "emulator", 1), ("hip -arch=gfx942", "emulator", 2)]


def multi_copy(G, N, dtype="float16", threads=32):
    @T.prim_func
    def main(src_ptrs: T.Tensor([G], T.ptr), out: T.Tensor([G, N], dtype)):
        with T.Kernel(G, threads=threads) as bx:
            Src = T.make_tensor(src_ptrs[bx], (N,), dtype)
            for i in T.serial(N):
                out[bx, i] = Src[i] * 2

    return main


def grouped_matmul(sizes, N, K, block_M, block_N, block_K, threads, dtype="float16", accum="float32"):
    """TileLang's pointer_table_grouped_matmul: each block finds its group, then reads that group's tensors."""
    G, max_M = len(sizes), max(sizes)
    blocks = sum(math.ceil(s / block_M) for s in sizes)

    @T.prim_func
    def main(a_ptrs: T.Tensor([G], T.ptr), b_ptrs: T.Tensor([G], T.ptr), c_ptrs: T.Tensor([G], T.ptr),
             tile_offsets: T.Tensor([G], T.int32)):
        with T.Kernel(blocks, T.ceildiv(N, block_N), threads=threads) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_K, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum)
            g = T.alloc_var(dtype=T.int32)
            first = T.alloc_var(dtype=T.int32)
            g = 0
            first = 0
            for i in range(G):
                inside = bx >= tile_offsets[i]
                g = T.if_then_else(inside, i, g)
                first = T.if_then_else(inside, tile_offsets[i], first)
            m0 = (bx - first) * block_M
            A = T.make_tensor(a_ptrs[g], (max_M, K), dtype)
            B = T.make_tensor(b_ptrs[g], (K, N), dtype)
            C = T.make_tensor(c_ptrs[g], (max_M, N), dtype)
            T.clear(C_local)
            for ko in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
                T.copy(A[m0, ko * block_K], A_shared)
                T.copy(B[ko * block_K, by * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            T.copy(C_local, C[m0, by * block_N])

    return main


def _compile(func, target, backend):
    return tw.compile(func, target=target, execution_backend=backend)


@pytest.mark.parametrize("target,backend,scale", BACKENDS)
def test_pointer_table_multi_copy(target, backend, scale):
    G, N = 3, 64
    rng = np.random.default_rng(7)
    srcs = [rng.standard_normal(N).astype(np.float16) for _ in range(G)]
    out = poisoned((G, N), "float16")
    _compile(multi_copy(G, N, threads=32 * scale), target, backend)(tw.pointer_table(srcs), out)
    close(out, 2 * np.stack([f64(s) for s in srcs]), 0, 0)


@pytest.mark.parametrize("target,backend,scale", BACKENDS)
def test_pointer_table_grouped_matmul(target, backend, scale):
    sizes, N, K, bm, bn, bk = [8, 12, 17], 32, 48, 16, 16, 16
    rng = np.random.default_rng(11)
    offsets = np.cumsum([0] + [math.ceil(s / bm) for s in sizes[:-1]]).astype(np.int32)
    a_exact = [rng.standard_normal((s, K)).astype(np.float16) for s in sizes]
    bs = [rng.standard_normal((K, N)).astype(np.float16) for _ in sizes]
    As = [np.zeros((max(sizes), K), np.float16) for _ in sizes]
    for a, e in zip(As, a_exact):
        a[:len(e)] = e
    Cs = [poisoned((max(sizes), N), "float16") for _ in sizes]
    kern = _compile(grouped_matmul(sizes, N, K, bm, bn, bk, 32 * scale), target, backend)
    kern(tw.pointer_table(As), tw.pointer_table(bs), tw.pointer_table(Cs), offsets)
    for c, a, b in zip(Cs, a_exact, bs):
        close(c[:len(a)], f64(a) @ f64(b), 2e-2, 2e-2)


def test_table_of_torch_cpu_data_ptrs_resolves():
    """TileLang's way of building the table: ``torch.tensor([x.data_ptr() ...])`` (here CPU tensors)."""
    torch = pytest.importorskip("torch")
    G, N = 2, 64
    srcs = [torch.randn(N, dtype=torch.float16) for _ in range(G)]
    table = torch.tensor([s.data_ptr() for s in srcs], dtype=torch.int64)
    out = torch.full((G, N), float("nan"), dtype=torch.float16)
    tw.compile(multi_copy(G, N), target="interpret")(table, out)
    close(out.numpy(), 2 * np.stack([f64(s.numpy()) for s in srcs]), 0, 0)


def strided_columns(M, N):
    """A tensor with explicit strides at an address: column j of an (M, N) row-major matrix."""

    @T.prim_func
    def main(ptrs: T.Tensor([1], T.ptr), out: T.Tensor([N, M], "float32")):
        with T.Kernel(N, threads=32) as bx:
            At = T.make_tensor(ptrs[0], (N, M), "float32", strides=(1, N))
            for i in T.serial(M):
                out[bx, i] = At[bx, i] + 1

    return main


@pytest.mark.parametrize("target,backend", [("interpret", None), ("cuda -arch=sm_90a", "emulator")])
def test_explicit_strides_at_an_address(target, backend):
    M, N = 5, 3
    a = np.random.default_rng(3).standard_normal((M, N)).astype(np.float32)
    out = poisoned((N, M))
    _compile(strided_columns(M, N), target, backend)(tw.pointer_table([a]), out)
    close(out, f64(a).T + 1)


@pytest.mark.parametrize("target,backend", [("interpret", None), ("cuda -arch=sm_90a", "emulator")])
def test_unknown_address_is_an_error_not_a_wild_read(target, backend):
    kern = _compile(multi_copy(1, 64), target, backend)
    with pytest.raises(tw.errors.TilewrightError, match=r"address 0x10 of tensor Src .* is inside no array"):
        kern(np.array([16], np.int64), poisoned((1, 64), "float16"))


@pytest.mark.parametrize("target,backend", [("interpret", None), ("cuda -arch=sm_90a", "emulator")])
def test_tensor_past_the_end_of_its_array_is_an_error(target, backend):
    small = np.random.default_rng(1).standard_normal(32).astype(np.float16)  # 32 elements, the kernel reads 64
    kern = _compile(multi_copy(1, 64), target, backend)
    with pytest.raises(tw.errors.TilewrightError, match="runs past the end of the array it starts in"):
        kern(tw.pointer_table([small]), poisoned((1, 64), "float16"))
    table = tw.pointer_table([np.zeros(80, np.float16)]) + 1
    with pytest.raises(tw.errors.TilewrightError, match="not aligned to its 2-byte elements"):
        kern(table, poisoned((1, 64), "float16"))


def test_printed_ir_and_annotation():
    func = multi_copy(4, 8)
    assert func.buffer_map[func.params[0]].dtype == "int64" and list(func.params[0].shape) == [4]
    assert "Src = T.make_tensor(src_ptrs[bx], (8,), 'float16')" in func.script()


def test_address_must_be_a_64_bit_entry():
    with pytest.raises(CompileError, match="takes a 64-bit integer address"):
        @T.prim_func
        def bad(offs: T.Tensor([2], T.int32), out: T.Tensor([4], "float32")):
            with T.Kernel(1, threads=32):
                X = T.make_tensor(offs[0], (4,), "float32")
                out[0] = X[0]


@needs_nvrtc
def test_cuda_declares_a_typed_pointer_and_compiles():
    kern = tw.compile(grouped_matmul([8, 12, 17], 32, 32, 16, 16, 16, 32), target="cuda -arch=sm_90a")
    src = kern.get_kernel_source()
    assert "half* A = reinterpret_cast<half*>(a_ptrs[" in src
    assert kern.get_code_object()[:4] == b"\x7fELF"


@needs_hip_compiler
def test_hip_declares_a_typed_pointer_and_compiles():
    kern = tw.compile(multi_copy(3, 64, threads=64), target="hip -arch=gfx942")
    assert "* Src = reinterpret_cast<" in kern.get_kernel_source()
    assert kern.get_code_object()[:4] == b"\x7fELF"


def shared_accumulators(G, N):
    """Blocks bx and bx + 2 add into the same table entry: atomics through tensors at addresses."""

    @T.prim_func
    def main(dst_ptrs: T.Tensor([2], T.ptr), x: T.Tensor([G, N], "float32")):
        with T.Kernel(G, threads=64) as bx:
            D = T.make_tensor(dst_ptrs[bx % 2], (N,), "float32")
            for i in T.Parallel(N):
                T.atomic_add(D[i], x[bx, i])

    return main


@pytest.mark.parametrize("target,backend,scale", BACKENDS)
def test_atomics_through_table_entries(target, backend, scale):
    G, N = 4, 64
    x = np.random.default_rng(21).standard_normal((G, N)).astype(np.float32)
    start = np.random.default_rng(22).standard_normal((2, N)).astype(np.float32)
    outs = [start[0].copy(), start[1].copy()]
    _compile(shared_accumulators(G, N), target, backend)(tw.pointer_table(outs), x)
    close(outs[0], f64(start[0]) + f64(x[0]) + f64(x[2]))
    close(outs[1], f64(start[1]) + f64(x[1]) + f64(x[3]))


def test_make_tensor_on_an_address_inside_t_parallel_is_refused():
    with pytest.raises(CompileError, match="on an address inside T.Parallel is not supported"):
        @T.prim_func
        def bad(ptrs: T.Tensor([4], T.ptr), out: T.Tensor([4], "float32")):
            with T.Kernel(1, threads=32):
                for i in T.Parallel(4):
                    X = T.make_tensor(ptrs[i], (1,), "float32")
                    out[i] = X[0]
