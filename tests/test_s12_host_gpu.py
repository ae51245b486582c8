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
from test_s10_host_gpu import _every_op, _inputs, _rms  # noqa: E402

import tilewright  # noqa: E402
import tilewright.language as T  # noqa: E402
from tilewright import ops  # noqa: E402
from tilewright.errors import ArgumentError, RuntimeLaunchError  # noqa: E402
from tilewright.runtime import cuda_driver  # noqa: E402

PATHS = ["bindings"] + (["typed"] if cuda_driver.typed_launch_call() is not None else [])


def _switch(path: str) -> None:
    objs = cuda_driver.launch_objects()
    assert objs
    for o in objs:
        assert o.use_typed_launch(path == "typed") == (path == "typed")


@pytest.fixture
def restore_paths():
    yield
    default = cuda_driver.launch_path()
    for o in cuda_driver.launch_objects():
        o.use_typed_launch(default == "typed")


@pytest.mark.usefixtures("poisoned", "restore_paths")
@pytest.mark.parametrize("path", PATHS)
def test_every_op_through_each_launch_path(path):
    torch.manual_seed(120)
    w, b, g, kv, kp = _inputs()
    x = torch.randn(64, 1024, device="cuda").half()
    q, qp = torch.randn(4, 32, 1, 128, device="cuda").half(), torch.randn(1, 8, 128, 64, device="cuda").half()
    _every_op(x, w, b, g, q, kv, qp, kp)  # plans made (and their packed launches)
    _switch(path)
    side = torch.cuda.Stream()
    for where in ("current", "side", "current", "side"):
        x = torch.randn(64, 1024, device="cuda").half()
        q = torch.randn(4, 32, 1, 128, device="cuda").half()
        qp = torch.randn(1, 8, 128, 64, device="cuda").half()
        if where == "side":
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                _every_op(x, w, b, g, q, kv, qp, kp)
            torch.cuda.current_stream().wait_stream(side)
        else:
            _every_op(x, w, b, g, q, kv, qp, kp)
    torch.cuda.synchronize()


@pytest.mark.usefixtures("poisoned", "restore_paths")
@pytest.mark.parametrize("path", PATHS)
def test_graph_capture_through_each_launch_path(path):
    x = torch.randn(64, 1024, device="cuda").half()
    w = torch.randn(1024, device="cuda").half()
    for _ in range(3):  # plans made and bound before the capture
        ops.softmax(x), ops.rms_norm(x, w)
    _switch(path)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        sm, rn = ops.softmax(x), ops.rms_norm(x, w)
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    _close(sm, torch.softmax(x.double(), -1), 2e-3)
    _close(rn, _rms(x.double(), w), 2e-2)


@pytest.mark.usefixtures("restore_paths")
@pytest.mark.parametrize("path", PATHS)
def test_a_refused_launch_is_explained_on_each_path(path):
    @T.prim_func
    def add(A: T.Tensor((1024,), "float32"), B: T.Tensor((1024,), "float32"), C: T.Tensor((1024,), "float32")):
        with T.Kernel(1, threads=128):
            for i in T.Parallel(1024):
                C[i] = A[i] + B[i]

    k = tilewright.compile(add, target="cuda")
    a, b = torch.randn(1024, device="cuda"), torch.randn(1024, device="cuda")
    c = torch.full((1024,), float("nan"), device="cuda")
    k(a, b, c)
    fn = k.launcher.function(0)
    assert fn.use_typed_launch(path == "typed") == (path == "typed")
    values = (a.data_ptr(), b.data_ptr(), c.data_ptr())
    with pytest.raises((RuntimeLaunchError, ArgumentError), match="block"):
        fn.launch((1, 1, 1), (4096, 1, 1), 0, 0, k.spec.arg_types, values)  # over 1024 threads a block
    c.fill_(float("nan"))
    fn.launch((1, 1, 1), (128, 1, 1), 0, 0, k.spec.arg_types, values)
    torch.cuda.synchronize()
    _close(c, a.double() + b.double(), 1e-6)
