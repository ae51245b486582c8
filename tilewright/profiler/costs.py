"""Work of the library operators (``tilewright.ops``): floating-point operations and the bytes a
kernel must move at the least (every input read once, every output written once), for achieved
TFLOP/s and GB/s.  Element-wise work counts one operation per arithmetic step of the definition."""

from __future__ import annotations


def matmul(M: int, N: int, K: int, itemsize: int) -> tuple[float, float]:
    return 2.0 * M * N * K, float((M * K + K * N + M * N) * itemsize)


def attention(B: int, H: int, Sq: int, Sk: int, D: int, itemsize: int, causal: bool = False,
              kv_heads: int | None = None) -> tuple[float, float]:
    """Two matrix products (q k^T and p v), 4 B H Sq Sk D; causal (Sq == Sk) does about half."""
    kv = kv_heads or H
    pairs = Sq * Sk if not causal else Sq * Sk - Sq * (Sq - 1) / 2 if Sq <= Sk else Sq * Sk / 2
    flops = 4.0 * B * H * pairs * D
    return flops, float((2 * B * H * Sq * D + 2 * B * kv * Sk * D) * itemsize)


def softmax(rows: int, cols: int, itemsize: int) -> tuple[float, float]:
    # max, subtract, exp, sum, divide per element
    return 5.0 * rows * cols, float(2 * rows * cols * itemsize)


def rms_norm(rows: int, cols: int, itemsize: int) -> tuple[float, float]:
    # square, sum, scale by the reciprocal root, multiply by the weight
    return 4.0 * rows * cols, float((2 * rows * cols + cols) * itemsize)


def layer_norm(rows: int, cols: int, itemsize: int) -> tuple[float, float]:
    # sum, subtract the mean, square, sum, scale, multiply by the weight, add the bias
    return 7.0 * rows * cols, float((2 * rows * cols + 2 * cols) * itemsize)
