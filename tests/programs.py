"""Assorted programs of the kinds users write (dynamic K, integer math, 3-D loops, per-thread locals,
fragment transposes, abs-max reductions with atomics), each checked on the interpreter and on the
emulator for an NVIDIA and an AMD target against NumPy."""

from __future__ import annotations

import tilewright.language as T


def dyn_k_gemm(M, N, bm=64, bn=64, bk=32):
    K = T.dynamic("K")
    @T.prim_func
    def g(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            As = T.alloc_shared((bm, bk), "float16")
            Bs = T.alloc_shared((bk, bn), "float16")
            Cf = T.alloc_fragment((bm, bn), "float32")
            T.clear(Cf)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=2):
                T.copy(A[by * bm, k * bk], As)
                T.copy(B[k * bk, bx * bn], Bs)
                T.gemm(As, Bs, Cf)
            T.copy(Cf, C[by * bm, bx * bn])
    return g

def int_ops(N=1000):
    @T.prim_func
    def f(A: T.Tensor((N,), "int32"), B: T.Tensor((N,), "int32")):
        with T.Kernel(T.ceildiv(N, 256), threads=128) as bx:
            for i in T.Parallel(256):
                if bx * 256 + i < N:
                    B[bx * 256 + i] = A[bx * 256 + i] // 3 + A[bx * 256 + i] % 5 * 2
    return f

def par3(D0=4, D1=8, D2=32):
    @T.prim_func
    def f(A: T.Tensor((D0, D1, D2), "float32"), B: T.Tensor((D0, D1, D2), "float32")):
        with T.Kernel(1, threads=64):
            for i, j, k in T.Parallel(D0, D1, D2):
                B[i, j, k] = A[i, j, k] * (i + 1) + j - k
    return f

def per_thread_local(N=128 * 8):
    @T.prim_func
    def f(A: T.Tensor((N,), "float32"), B: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            tx = T.get_thread_binding()
            acc = T.alloc_local((1,), "float32")
            acc[0] = 0.0
            for k in T.serial(8):
                acc[0] += A[k * 128 + tx]
            B[tx] = acc[0]
    return f

def frag_transpose(M=64, N=32):
    @T.prim_func
    def f(A: T.Tensor((M, N), "float32"), B: T.Tensor((N, M), "float32")):
        with T.Kernel(1, threads=128):
            a = T.alloc_fragment((M, N), "float32")
            b = T.alloc_fragment((N, M), "float32")
            T.copy(A, a)
            for j, i in T.Parallel(N, M):
                b[j, i] = a[i, j]
            T.copy(b, B)
    return f

def absmax_rows(M=16, N=256):
    @T.prim_func
    def f(A: T.Tensor((M, N), "float32"), R: T.Tensor((M,), "float32"), G: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=128):
            a = T.alloc_fragment((M, N), "float32")
            r = T.alloc_fragment((M,), "float32")
            T.copy(A, a)
            T.reduce_absmax(a, r, dim=1)
            T.copy(r, R)
            for i in T.Parallel(M):
                T.atomic_max(G[0], r[i])
    return f


def relu(x):
    return T.max(x, 0.0)


def multi_output(N=256):
    """Two outputs (out_idx), a Python helper in the body, an alloc_var counted with ``+=`` and an
    atomic done once per block."""

    @T.prim_func
    def k(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32"), C: T.Tensor((N,), "float32"),
          D: T.Tensor((1,), "float32")):
        with T.Kernel(N // 128, threads=128) as bx:
            cnt = T.alloc_var("float32", 0)
            s = T.alloc_shared((128,), "float32")
            T.copy(A[bx * 128:(bx + 1) * 128], s)
            for i in T.Parallel(128):
                B[bx * 128 + i] = relu(s[i])
                C[bx * 128 + i] = s[i] * 2
            for _ in T.serial(4):
                cnt += 1.0
            T.atomic_add(D[0], cnt)

    return k


def python_forms(N=300):
    """Chained comparisons, ``not``, a conditional expression on kernel values, an annotated
    assignment, tuple assignment of constants and ``A.shape`` inside the body."""

    @T.prim_func
    def k(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32"), lo: T.float32):
        with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
            bm, half = 128, 64
            scale: T.float32 = 2.0
            for i in T.Parallel(bm):
                g = bx * bm + i
                if 0 <= g < A.shape[0] and not (g == 5):
                    x = A[g]
                    B[g] = (x * scale if x > lo else lo) + T.if_then_else(i < half, 1.0, -1.0)

    return k


def sliced_gemm(M=64, N=64, K=64):
    """Gemms on slices of shared tiles chosen by a serial loop variable, then ``clear_accum``."""

    @T.prim_func
    def k(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32"),
          D: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128):
            As = T.alloc_shared((M, K), "float16")
            Bs = T.alloc_shared((K, N), "float16")
            acc = T.alloc_fragment((M, N), "float32")
            T.copy(A, As)
            T.copy(B, Bs)
            T.clear(acc)
            for kk in T.serial(K // 16):
                T.gemm(As[:, kk * 16:(kk + 1) * 16], Bs[kk * 16:(kk + 1) * 16, :], acc)
            T.copy(acc, C)
            T.gemm(As[:, 0:16], Bs[0:16, :], acc, clear_accum=True)
            T.copy(acc, D)

    return k


def swapped_loop_order(M=32, N=48):
    """A T.Parallel whose variables run in the other order than the fragment's dimensions."""

    @T.prim_func
    def k(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float16")):
        with T.Kernel(1, threads=128):
            f = T.alloc_fragment((M, N), "float32")
            T.copy(A, f)
            for j, i in T.Parallel(N, M):
                B[i, j] = T.cast(f[i, j] * 3.0, "float16")

    return k


def fragment_3d(D0=2, D1=16, D2=32):
    """A 3-D fragment squared elementwise and reduced along its last dimension."""

    @T.prim_func
    def k(A: T.Tensor((D0, D1, D2), "float32"), S: T.Tensor((D0, D1), "float32")):
        with T.Kernel(1, threads=128):
            f = T.alloc_fragment((D0, D1, D2), "float32")
            s = T.alloc_fragment((D0, D1), "float32")
            T.copy(A, f)
            for a, b, c in T.Parallel(D0, D1, D2):
                f[a, b, c] = f[a, b, c] * f[a, b, c]
            T.reduce_sum(f, s, dim=2)
            T.copy(s, S)

    return k
