"""Session 13's compiled launcher on a GPU (``runtime/compiled_launch``, ``runtime/fast_launch.c``):
every op (tests/test_s10_host_gpu's set: row ops, matmul, prefill and decode attention, the
decode kernels' programmatic launches among them) switched onto it as bench/launch_overhead.py
``--paths compiled`` switches them, against float64 with poisoned outputs, fresh inputs each
round, on the current stream and a side stream; every compiled launch checked to have launched
(a refusal would fall back silently to cuda-bindings, which these tests must not take for a
pass); a CUDA-graph capture and replay; the bare C calls (plain and programmatic) against float64;
a launch the driver refuses still explained.  Skipped without a CUDA GPU, and where the launcher
cannot be built here (the skip says why)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or getattr(torch.version, "hip", None):
    pytest.skip("needs an NVIDIA GPU with a CUDA build of PyTorch", allow_module_level=True)

from test_s6_host_gpu import _close, poisoned  # noqa: E402,F401 - poisoned: a fixture (the ops' outputs NaN)
from test_s10_host_gpu import _rows_captured_and_replayed, _vector_add  # noqa: E402
from test_s12_host_gpu import _every_op_after, _refused_launch_explained  # noqa: E402

import tilewright  # noqa: E402
from tilewright.runtime import compiled_launch, cuda_driver  # noqa: E402


@pytest.fixture(scope="module")
def compiled():
    mod = compiled_launch.load()
    if mod is None:
        pytest.skip(f"the compiled launcher is not available here: {compiled_launch.status()}")
    return mod


class _Counted:
    """A launch object's compiled call, counting launches and every refusal (non-zero CUresult;
    -2 from go_current: called from another thread than the launch's, which these tests never do)."""

    def __init__(self, real, log: dict):
        self.real, self.log = real, log

    def __call__(self, *args):  # (FixedCudaLaunch's Launch.go / go_current)
        r = self.real(*args)
        self.log["calls"] += 1
        self.log["refused"] += r != 0
        return r


class _CountedModule:
    """A function's compiled launcher module with its ``launch_kernel`` counted (``_Counted``); the
    rest of the module as it is (a packed launch made later builds its ``Launch`` from it)."""

    def __init__(self, module, log: dict):
        self.module, self.launch_kernel = module, _Counted(module.launch_kernel, log)

    def __getattr__(self, name):
        return getattr(self.module, name)


def _switch_to_compiled(log: dict) -> None:
    """Every loaded kernel's launches onto the compiled launcher, each counted in ``log``."""
    objs = cuda_driver.launch_objects()
    assert objs
    for o in objs:
        assert o.use_compiled_launch(True), o
        if isinstance(o, cuda_driver.FixedCudaLaunch):
            o._compiled = _Counted(o._compiled, log)
            if o.current is not None:  # (go_current: FixedLaunch's whole launch in one C call)
                o.current = _Counted(o.current, log)
        else:
            o.compiled = _CountedModule(o.compiled, log)


@pytest.fixture
def restore_paths():
    yield
    on = cuda_driver.launch_path() == "compiled"
    for o in cuda_driver.launch_objects():
        o.use_compiled_launch(on)


@pytest.mark.usefixtures("poisoned", "restore_paths")
def test_every_op_through_the_compiled_launcher(compiled):
    log = {"calls": 0, "refused": 0}
    _every_op_after(lambda: _switch_to_compiled(log), seed=130)
    assert log["calls"] > 0 and log["refused"] == 0, log


@pytest.mark.usefixtures("poisoned", "restore_paths")
def test_graph_capture_through_the_compiled_launcher(compiled):
    log = {"calls": 0, "refused": 0}
    _rows_captured_and_replayed(lambda: _switch_to_compiled(log))
    assert log["calls"] > 0 and log["refused"] == 0, log


def test_bare_calls_plain_and_programmatic(compiled):
    """``launch_kernel`` and ``Launch.go`` on a kernel loaded twice, once launched programmatically
    (cuLaunchKernelEx with programmatic stream serialization): each returns 0 and adds right."""
    k = tilewright.compile(_vector_add(), target="cuda")
    a, b = torch.randn(1024, device="cuda"), torch.randn(1024, device="cuda")
    k(a, b, torch.empty_like(a))
    stream = torch.cuda.current_stream().cuda_stream
    for programmatic in (False, True):
        fn = cuda_driver.load_function(k.spec.code_object, k.spec.kernel_name, 0)
        if programmatic:
            fn.launch_programmatic()
            if not compiled_launch.has_launch_ex():
                pytest.skip("this driver has no cuLaunchKernelEx")
        c = torch.full((1024,), float("nan"), device="cuda")
        fixed = fn.fixed_launch((1, 1, 1), (128, 1, 1), 0, k.spec.arg_types, [a.data_ptr(), b.data_ptr(),
                                                                              c.data_ptr()], 2)
        assert compiled.launch_kernel(fn._handle_int, 1, 1, 1, 128, 1, 1, 0, stream, fixed.args.address,
                                      programmatic) == 0
        torch.cuda.synchronize()
        _close(c, a.double() + b.double(), 1e-6)
        c.fill_(float("nan"))
        a2 = torch.randn(1024, device="cuda")
        go = compiled.Launch(fn._handle_int, (1, 1, 1), (128, 1, 1), 0, fixed.args.data_address, fixed.args.address,
                             2, programmatic, fixed.args).go
        assert go(stream, [a2.data_ptr(), b.data_ptr()]) == 0
        torch.cuda.synchronize()
        _close(c, a2.double() + b.double(), 1e-6)


@pytest.mark.usefixtures("restore_paths")
def test_a_refused_launch_is_explained(compiled):
    _refused_launch_explained(lambda fn: fn.use_compiled_launch(True) or pytest.fail("not on the compiled path"))
