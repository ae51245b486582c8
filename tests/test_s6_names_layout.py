"""``T.annotate_layout`` with a ``T.Layout`` on a global tensor (TileLang's permuted dQ accumulator in
its attention backward examples): accepted and not applied, because every kernel addresses the tensor
by logical indices — an accumulation kernel and a post-processing kernel that both annotate it give
the values of the same program without the annotation."""

import logging

import numpy as np
import pytest
from zoo import close, f64, poisoned, rand

import tilewright
import tilewright.language as T
from tilewright.errors import CompileError

B, S, H, D = 2, 32, 2, 16


def dq_layout(dQ):
    return T.Layout(dQ.shape, lambda b, l, h, d: [b, l // 8, h, d // 8, (d % 2), 4 * (l % 8) + (d % 8) // 2])


def accumulate(blk=8):
    """dQ[b, l, h, :] += X[b, l, h, :] * w[k] for k in 0..3, by atomic adds from 4 blocks."""

    @T.prim_func
    def acc(X: T.Tensor((B, S, H, D), "float32"), w: T.Tensor((4,), "float32"),
            dQ: T.Tensor((B, S, H, D), "float32")):
        with T.Kernel(S // blk, H * 4, B, threads=128) as (bx, byk, bz):
            T.annotate_layout({dQ: dq_layout(dQ)})
            for i, j in T.Parallel(blk, D):
                T.atomic_add(dQ[bz, bx * blk + i, byk // 4, j], X[bz, bx * blk + i, byk // 4, j] * w[byk % 4])

    return acc


def postprocess(blk=8):
    @T.prim_func
    def post(dQ: T.Tensor((B, S, H, D), "float32"), out: T.Tensor((B, S, H, D), "float16")):
        with T.Kernel(S // blk, H, B, threads=128) as (bx, by, bz):
            T.annotate_layout({dQ: dq_layout(dQ)})
            T.copy(dQ[bz, bx * blk:(bx + 1) * blk, by, :], out[bz, bx * blk:(bx + 1) * blk, by, :])

    return post


@pytest.mark.parametrize("target,backend", [("interpret", None), ("cuda -arch=sm_90a", "emulator"),
                                            ("hip -arch=gfx942", "emulator")])
def test_annotated_global_accumulator_through_two_kernels(target, backend):
    rng = np.random.default_rng(64)
    x, w = rand(rng, (B, S, H, D)), rand(rng, (4,))
    dq = np.zeros((B, S, H, D), np.float32)  # the caller zeroes the accumulator, as the examples do
    out = poisoned((B, S, H, D), "float16")
    acc = tilewright.compile(accumulate(), target=target, execution_backend=backend)
    post = tilewright.compile(postprocess(), target=target, execution_backend=backend)
    acc(x, w, dq)
    post(dq, out)
    want = f64(x) * f64(w).sum()
    close(dq, want, rtol=1e-5, atol=1e-6)
    close(out, want, rtol=1e-3, atol=1e-3)


def test_the_unapplied_layout_is_logged(caplog):
    with caplog.at_level(logging.INFO, logger="tilewright"):
        @T.prim_func
        def glob(dQ: T.Tensor((2, 16, 2, 16), "float32")):
            with T.Kernel(1, threads=64):
                T.annotate_layout({dQ: dq_layout(dQ)})
                dQ[0, 0, 0, 0] = 1.0

    assert any("global tensor dQ" in r.getMessage() and "not applied" in r.getMessage() for r in caplog.records)


def test_global_layout_that_does_not_fit_is_refused():
    with pytest.raises(CompileError, match="the layout of dQ has shape"):
        @T.prim_func
        def wrong_shape(dQ: T.Tensor((2, 16, 2, 16), "float32")):
            with T.Kernel(1, threads=64):
                T.annotate_layout({dQ: T.Layout((2, 16, 16), lambda b, s, d: [b, s, d])})
                dQ[0, 0, 0, 0] = 1.0
    with pytest.raises(CompileError, match="takes 3 indices"):
        @T.prim_func
        def wrong_arity(dQ: T.Tensor((2, 16, 2, 16), "float32")):
            with T.Kernel(1, threads=64):
                T.annotate_layout({dQ: T.Layout(dQ.shape, lambda b, s, d: [b, s, d])})
                dQ[0, 0, 0, 0] = 1.0
