"""Session 12's launch paths on a GPU: every op (tests/test_s10_host_gpu's set, against float64
with poisoned outputs, fresh inputs each round, on the current stream and a side stream) launched
through cuda-bindings' ``driver.cuLaunchKernel`` and through its typed ``launch_kernel`` (where
this cuda-bindings has it: 13.5.0, not 13.3.1), switched in one process as
bench/launch_overhead.py ``--paths both`` switches them; a CUDA-graph capture through each; a launch
the driver refuses still gets the explained error.  Skipped without a CUDA GPU."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or getattr(torch.version, "hip", None):
    pytest.skip("needs an NVIDIA GPU with a CUDA build of PyTorch", allow_module_level=True)

from test_s6_host_gpu import _close, poisoned  # noqa: E402,F401 - poisoned: a fixture (the ops' outputs NaN)
from test_s10_host_gpu import (  # noqa: E402
    _every_op,
    _every_op_on,
    _inputs,
    _rows_captured_and_replayed,
    _vector_add,
)

import tilewright  # noqa: E402
from tilewright.errors import ArgumentError, RuntimeLaunchError  # noqa: E402
from tilewright.runtime import cuda_driver  # noqa: E402

PATHS = ["bindings"] + (["typed"] if cuda_driver.typed_launch_call() is not None else [])


def _switch(path: str) -> None:
    objs = cuda_driver.launch_objects()
    assert objs
    for o in objs:
        o.use_compiled_launch(False)  # (the compiled launcher goes first where on: tests/test_s13_host_gpu.py)
        assert o.use_typed_launch(path == "typed") == (path == "typed")


@pytest.fixture
def restore_paths():
    yield
    default = cuda_driver.launch_path()
    for o in cuda_driver.launch_objects():
        o.use_typed_launch(cuda_driver._typed_launch_kernel() is not None)
        o.use_compiled_launch(default == "compiled")


@pytest.mark.usefixtures("poisoned", "restore_paths")
@pytest.mark.parametrize("path", PATHS)
def test_every_op_through_each_launch_path(path):
    _every_op_after(lambda: _switch(path), seed=120)


def _every_op_after(switch, seed: int) -> None:
    """Every op planned, ``switch()`` (the launch objects onto one path), then every op in four
    rounds of fresh inputs on the current and a side stream, against float64."""
    torch.manual_seed(seed)
    w, b, g, kv, kp = _inputs()
    x = torch.randn(64, 1024, device="cuda").half()
    q, qp = torch.randn(4, 32, 1, 128, device="cuda").half(), torch.randn(1, 8, 128, 64, device="cuda").half()
    _every_op(x, w, b, g, q, kv, qp, kp)  # plans made (and their packed launches)
    switch()
    _every_op_on(("current", "side", "current", "side"), w, b, g, kv, kp)


@pytest.mark.usefixtures("poisoned", "restore_paths")
@pytest.mark.parametrize("path", PATHS)
def test_graph_capture_through_each_launch_path(path):
    _rows_captured_and_replayed(lambda: _switch(path))


@pytest.mark.usefixtures("restore_paths")
@pytest.mark.parametrize("path", PATHS)
def test_a_refused_launch_is_explained_on_each_path(path):
    def select(fn):
        fn.use_compiled_launch(False)
        assert fn.use_typed_launch(path == "typed") == (path == "typed")

    _refused_launch_explained(select)


def _refused_launch_explained(select) -> None:
    """A vector add's function put on a path by ``select(fn)``: a launch of 4096 threads a block is
    refused with the explained error, a right one then adds right."""
    k = tilewright.compile(_vector_add(), target="cuda")
    a, b = torch.randn(1024, device="cuda"), torch.randn(1024, device="cuda")
    c = torch.full((1024,), float("nan"), device="cuda")
    k(a, b, c)
    fn = k.launcher.function(0)
    select(fn)
    values = (a.data_ptr(), b.data_ptr(), c.data_ptr())
    with pytest.raises((RuntimeLaunchError, ArgumentError), match="block"):
        fn.launch((1, 1, 1), (4096, 1, 1), 0, 0, k.spec.arg_types, values)  # over 1024 threads a block
    c.fill_(float("nan"))
    fn.launch((1, 1, 1), (128, 1, 1), 0, 0, k.spec.arg_types, values)
    torch.cuda.synchronize()
    _close(c, a.double() + b.double(), 1e-6)
