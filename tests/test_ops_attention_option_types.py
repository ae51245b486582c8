"""ops.attention takes its numeric options (scale, max_seqlen_q, num_splits) as plain Python numbers
or as number subclasses (NumPy scalars, a user's float type), computing the same result; the plan
memos compare option values, so a subclass whose ``==`` raises must not reach them (it crashed the
decode path with the subclass's own exception).  A number whose conversion fails is an ArgumentError.
CPU tensors run in the tile interpreter; results against float64."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tilewright import ops  # noqa: E402
from tilewright.errors import ArgumentError  # noqa: E402


class _NoCompare(float):
    """A float whose comparisons raise (hash stays float's, so memo lookups would compare it)."""

    __hash__ = float.__hash__

    def __eq__(self, other):
        raise ValueError("this number does not compare")


class _NoConvert(float):
    def __float__(self):
        raise OverflowError("this number does not convert")


def _rand(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).half()


def _reference(q, k, v, scale):
    s = q.double() @ k.double().transpose(-1, -2) * scale
    return torch.softmax(s, -1) @ v.double()


@pytest.mark.parametrize("seq_q", [1, 9])  # the decode path (one query token) and the general one
def test_number_subclass_scale_gives_the_plain_result(seq_q):
    q, k, v = _rand(1, 2, seq_q, 64, seed=seq_q), _rand(1, 2, 40, 64, seed=2), _rand(1, 2, 40, 64, seed=3)
    ref = _reference(q, k, v, 0.125)
    for scale in (_NoCompare(0.125), _NoCompare(0.125), np.float32(0.125), 0.125):  # repeats reach the memos
        out = ops.attention(q, k, v, scale=scale)
        assert float((out.double() - ref).abs().max() / ref.abs().max()) < 3e-3, scale


def test_numpy_integer_options_are_plain_ints():
    q, k, v = _rand(1, 2, 1, 64, seed=4), _rand(1, 2, 300, 64, seed=5), _rand(1, 2, 300, 64, seed=6)
    out = ops.attention(q, k, v, num_splits=np.int64(3))  # (max_seqlen_q: varlen only, test_ops_varlen)
    ref = _reference(q, k, v, 1 / math.sqrt(64))
    assert float((out.double() - ref).abs().max() / ref.abs().max()) < 3e-3


def test_unconvertible_number_is_an_argument_error():
    q, k = _rand(1, 2, 4, 64, seed=7), _rand(1, 2, 8, 64, seed=8)
    with pytest.raises(ArgumentError, match="scale must convert to a plain float"):
        ops.attention(q, k, k, scale=_NoConvert(0.5))
    with pytest.raises(ArgumentError, match="num_splits must be an int"):
        ops.attention(q, k, k, num_splits=np.float64(2.0))  # a float stays a float: the check names it
