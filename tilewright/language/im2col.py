"""TileLang's ``T.im2col(img, col, nhw_step, c_step, kernel, stride, dilation, pad)`` (and its old
name ``T.c2d_im2col``): one tile of the im2col matrix of a 2-D convolution, gathered into ``col``.

``img`` is an NHWC global tensor (N, H, W, C); ``col`` a (pixels, channels) tile.  Row ``i`` of the
tile is output pixel ``p = nhw_step * pixels + i`` (p = (n * OH + oh) * OW + ow), column ``j`` is
``k = c_step * channels + j`` (k = (kh * kernel + kw) * C + c: the order of (KH, KW, C, F) weights
flattened), and the element is ``img[n, oh * stride - pad + kh * dilation, ow * stride - pad +
kw * dilation, c]``, zero where that is padding or past the last pixel / column -- what TileLang's
Hopper TMA im2col load fills the tile with.  Here it is an element loop (``T.Parallel``) on every
target, with no restriction on the channel count.
"""

from __future__ import annotations

import builtins as _builtins

from ..frontend import builder as _b
from ..ir import expr as _e
from ..ir import tile as _t


def im2col(img, col, nhw_step, c_step, kernel, stride, dilation, pad, eviction_policy=None, annotations=None):
    b = _b.current()
    if not isinstance(img, _t.Buffer) or img.scope != "global" or len(img.shape) != 4:
        raise _b.error(f"T.im2col: the image must be an (N, H, W, C) kernel tensor, got {img!r}")
    if not isinstance(col, _t.Buffer) or len(col.shape) != 2 or col.scope not in ("shared", "fragment", "local"):
        raise _b.error(f"T.im2col: the column tile must be a 2-D shared or fragment buffer, got {col!r}")
    for name, v, least in (("kernel", kernel, 1), ("stride", stride, 1), ("dilation", dilation, 1), ("pad", pad, 0)):
        if not isinstance(v, _builtins.int) or isinstance(v, _builtins.bool) or v < least:
            raise _b.error(f"T.im2col({name}=...) must be an int >= {least}, got {v!r}")
    if eviction_policy not in (None, "evict_normal", "evict_first", "evict_last"):
        raise _b.error(f"T.im2col(eviction_policy=...) must be 'evict_normal', 'evict_first' or 'evict_last', got "
                       f"{eviction_policy!r}")
    if annotations is not None and not isinstance(annotations, dict):
        raise _b.error(f"T.im2col(annotations=...) takes a dict, got {annotations!r}")
    n_img, h, w, c = img.shape
    if not all(isinstance(x, _builtins.int) for x in (h, w, c)):
        raise _b.error("T.im2col: the image's H, W and C must be compile-time sizes")
    oh = (h + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1
    ow = (w + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1
    rows, cols = col.shape
    i, j = (_e.Var(b.fresh(x), "int32", kind="loop") for x in ("i", "j"))
    p = _e.as_expr(nhw_step) * rows + i
    k = _e.as_expr(c_step) * cols + j
    n, y, x = p // (oh * ow), p // ow % oh, p % ow
    kh, kw, ch = k // (kernel * c), k // c % kernel, k % c
    ih = y * stride - pad + kh * dilation
    iw = x * stride - pad + kw * dilation
    inside = (n < n_img) & (k < kernel * kernel * c) & (ih >= 0) & (ih < h) & (iw >= 0) & (iw < w)
    value = _e.select(inside, _e.Load(img, (n, ih, iw, ch)), _e.Const(0, img.dtype))
    store = _t.BufferStore(col, (i, j), _e.cast(col.dtype, value), loc=b.loc)
    b.emit(_t.ParallelFor((i, j), (rows, cols), store, loc=b.loc))


c2d_im2col = im2col

__all__ = ["im2col", "c2d_im2col"]
