"""Session-9 host cuts of the JIT call path, on a machine without a GPU:

- ``Launcher.launch`` of a kernel whose parameters are all tensors of static shape keeps one
  argument buffer per device (``FixedLaunch``): every launch sends the driver, byte for byte, what
  packing every value sends (the new pointers each call), and every argument check still runs per
  call (a wrong shape, dtype, layout, start or device is refused with the checked path's error,
  never launched from the buffer);
- ``JITKernel`` ``out_idx`` outputs come from ``torch.empty_like`` of a zero-stride template
  (``jit/alloc_template.py``): a new contiguous tensor of the output's shape and dtype per call,
  whose pointer is the one launched; a template is only used where a probe proves torch's strides."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from test_host_fast_paths import ClaimsCuda  # noqa: E402
from test_s8_host_fixed import FakeRuntime, _expected  # noqa: E402

import tilewright  # noqa: E402
import tilewright.language as T  # noqa: E402
from tilewright.errors import ArgumentError  # noqa: E402
from tilewright.jit.alloc_template import empty_maker, empty_template  # noqa: E402
from tilewright.runtime.launcher import FixedLaunch, Launcher  # noqa: E402


def _fake(t):
    return t.as_subclass(ClaimsCuda)


def _add():
    @T.prim_func
    def add3(A: T.Tensor((256,), "float32"), B: T.Tensor((256,), "float32"), C: T.Tensor((256,), "float32")):
        with T.Kernel(2, threads=128) as bx:
            for i in T.Parallel(128):
                C[bx * 128 + i] = A[bx * 128 + i] + B[bx * 128 + i]

    return add3


@pytest.fixture(scope="module")
def add_kernel():
    return tilewright.compile(_add(), target="cuda -arch=sm_90")


def test_static_kernel_launches_from_one_buffer_with_each_calls_pointers(add_kernel):
    rt = FakeRuntime()
    rt.fn.types = add_kernel.spec.arg_types
    la = Launcher(add_kernel.spec, rt)
    calls = [[_fake(torch.randn(256)) for _ in range(3)] for _ in range(4)]
    calls.append(calls[0])  # back to the first pointers
    for args in calls:
        la.launch(list(args))
        got = rt.fn.driver_launches.pop()
        want = _expected(la, [a.data_ptr() for a in args], {}, 0)
        assert got == want[:3] + (0x77,) + want[4:]  # grid, block, shared, the bytes of this call's pointers
        assert want[0] == (2, 1, 1)
    assert isinstance(la._fixed[0], FixedLaunch)
    assert not rt.fn.general_launches


@pytest.mark.parametrize("bad", ["shape", "dtype", "stride", "start", "cpu", "not a tensor"])
def test_static_kernel_still_checks_every_call(add_kernel, bad):
    rt = FakeRuntime()
    rt.fn.types = add_kernel.spec.arg_types
    la = Launcher(add_kernel.spec, rt)
    good = [_fake(torch.randn(256)) for _ in range(3)]
    la.launch(list(good))  # the buffer is made
    assert len(rt.fn.driver_launches) == 1
    wrong = {
        "shape": _fake(torch.randn(255)),
        "dtype": _fake(torch.randn(256).double()),
        "stride": _fake(torch.randn(512)[::2]),
        "start": _fake(torch.randn(260)[1:257]),
        "cpu": torch.randn(256),
        "not a tensor": 3,
    }[bad]
    with pytest.raises(ArgumentError, match="A"):
        la.launch([wrong, good[1], good[2]])
    assert len(rt.fn.driver_launches) == 1 and not rt.fn.general_launches  # nothing launched
    la.launch(list(good))  # and the buffer still serves good calls
    assert len(rt.fn.driver_launches) == 2


def test_out_idx_outputs_are_new_tensors_whose_pointers_are_launched(add_kernel):
    k = tilewright.compile(_add(), out_idx=[-1], target="cuda -arch=sm_90")
    rt = FakeRuntime()
    rt.fn.types = k.spec.arg_types
    k._launcher = Launcher(k.spec, rt)
    seen = []
    for _ in range(3):
        a, b = _fake(torch.randn(256)), _fake(torch.randn(256))
        c = k(a, b)
        assert c.shape == (256,) and c.dtype == torch.float32 and c.is_contiguous()
        _, _, _, _, sent = rt.fn.driver_launches.pop()
        assert sent[16:24] == c.data_ptr().to_bytes(8, "little")  # the output's pointer, third argument
        assert sent[:8] == a.data_ptr().to_bytes(8, "little")
        seen.append(c)
    assert len({c.data_ptr() for c in seen}) == 3  # a new output each call (all still alive)
    assert list(k._makers) == [torch.device("cpu")]  # one allocation plan per device


@pytest.mark.parametrize("shape", [(1,), (7,), (3, 5), (2, 1, 4), (4, 32, 1), (2, 3, 1, 5), (1, 1, 1, 1, 2)])
@pytest.mark.parametrize("dtype", ["float16", "float32", "int32"])
def test_template_allocations_match_torch_empty(shape, dtype):
    dt = getattr(torch, dtype)
    template = empty_template(torch, shape, dt, torch.device("cpu"))
    assert template is not None and template.untyped_storage().nbytes() == template.element_size()
    want = torch.empty(shape, dtype=dt)
    made = [empty_maker(torch, shape, dt, torch.device("cpu"))() for _ in range(2)]
    for got in made:
        assert (got.shape, got.stride(), got.dtype, got.device) == (want.shape, want.stride(), want.dtype, want.device)
    assert made[0].data_ptr() != made[1].data_ptr()


@pytest.mark.parametrize("shape", [(), (0,), (3, 0), (0, 4, 2)])
def test_no_template_without_elements(shape):
    assert empty_template(torch, shape, torch.float32, torch.device("cpu")) is None
    got = empty_maker(torch, shape, torch.float32, torch.device("cpu"))()
    assert got.shape == shape and got.dtype == torch.float32


def test_a_template_whose_probe_disagrees_is_not_used():
    class OddTorch:  # torch whose empty_like would hand back another layout
        def __getattr__(self, name):
            return getattr(torch, name)

        @staticmethod
        def empty_like(t, **kw):
            return torch.empty(tuple(reversed(t.shape)), dtype=t.dtype).t()

    assert empty_template(OddTorch(), (4, 6), torch.float32, torch.device("cpu")) is None
    got = empty_maker(OddTorch(), (4, 6), torch.float32, torch.device("cpu"))()
    assert got.shape == (4, 6) and got.is_contiguous()
