"""The compiler's product is a picklable LaunchSpec: a kernel compiled in one process can be handed
to another (autotuner workers, multi-process compilation) and launched there without the compiler."""

from __future__ import annotations

import pickle

import pytest
from toolchains import needs_nvrtc

import tilewright
import tilewright.language as T
from tilewright.backends import BACKENDS, backend_for
from tilewright.errors import ArgumentError
from tilewright.kernels import matmul
from tilewright.runtime.launcher import Launcher
from tilewright.target.base import Target


@needs_nvrtc
def test_spec_pickles_and_launches_the_same_arguments_after_a_round_trip():
    m = T.dynamic("m")

    @T.prim_func
    def scale(A: T.Tensor((m, 64), "float32"), B: T.Tensor((m, 64), "float32"), s: T.float32):
        with T.Kernel(T.ceildiv(m, 16), threads=64) as bx:
            for i, j in T.Parallel(16, 64):
                if bx * 16 + i < m:
                    B[bx * 16 + i, j] = A[bx * 16 + i, j] * s

    spec = tilewright.compile(scale, target="cuda -arch=sm_90a").spec
    copy = pickle.loads(pickle.dumps(spec))
    assert copy.code_object == spec.code_object and copy.code_object[:4] == b"\x7fELF"
    assert copy.kernel_name == spec.kernel_name and copy.num_threads == 64
    assert copy.arg_types == ("ptr", "ptr", "f32", "i32") and copy.static_grid is None

    launches = []

    class Fake:  # what the launcher asks of a vendor runtime
        def load_function(self, code_object, name, dev):
            class Fn:
                def launch(self, *args):
                    launches.append(args)
            return Fn()

        def current_stream(self, dev):
            return 7

        def synchronize(self, dev):
            pass

    import numpy as np

    class Arg:  # a GPU tensor as the argument checks see one
        def __init__(self, n):
            self.__cuda_array_interface__ = {"shape": (n, 64), "typestr": "<f4", "data": (4096 * 16, False),
                                             "version": 3, "strides": None}

    Launcher(copy, Fake()).launch([Arg(40), Arg(40), 2.0])
    grid, block, smem, stream, types, values = launches[-1]
    assert grid == (3, 1, 1) and block == (64, 1, 1) and stream == 7 and values[-1] == 40
    assert np.isclose(values[2], 2.0)


def test_gemm_spec_of_an_emulated_kernel_pickles():
    k = tilewright.compile(matmul(128, 128, 64, 64, 64, 32), target="hip -arch=gfx942", execution_backend="emulator")
    copy = pickle.loads(pickle.dumps(k.spec))
    assert copy.vendor == "hip" and copy.arch == "gfx942" and copy.source == k.get_kernel_source()
    assert copy.static_grid == (2, 2, 1) and copy.shared_bytes == k.spec.shared_bytes > 0


def test_one_backend_record_per_vendor_and_no_cross_imports():
    assert set(BACKENDS) == {"cuda", "hip"}
    assert backend_for(Target.parse("hip -arch=gfx942")).device_runtime_module.endswith("hip_runtime")
    assert backend_for(Target.parse("cuda -arch=sm_80")).device_runtime_module.endswith("cuda_driver")
    with pytest.raises(ValueError, match="no GPU backend"):
        backend_for(Target.parse("interpret"))


@needs_nvrtc
def test_launches_go_to_the_device_of_the_arguments():
    """Device-index handling without a second GPU: arguments on device 1 load the kernel on device 1
    and launch on that device's current stream; arguments on two devices are refused, naming them."""
    m = T.dynamic("m")

    @T.prim_func
    def add1(A: T.Tensor((m,), "float32"), B: T.Tensor((m,), "float32")):
        with T.Kernel(T.ceildiv(m, 64), threads=64) as bx:
            for i in T.Parallel(64):
                if bx * 64 + i < m:
                    B[bx * 64 + i] = A[bx * 64 + i] + 1.0

    spec = tilewright.compile(add1, target="cuda -arch=sm_90a").spec
    loaded, launches = [], []

    class Fake:
        def load_function(self, code_object, name, dev):
            loaded.append(dev)

            class Fn:
                def launch(self, *args):
                    launches.append((dev, args[3]))
            return Fn()

        def current_stream(self, dev):
            return 100 + dev

        def synchronize(self, dev):
            pass

    class OnDevice:  # a GPU tensor as the binder sees one (DLPack-free: the CUDA array interface)
        def __init__(self, n, dev, ptr):
            self.dev = dev
            self.__cuda_array_interface__ = {"shape": (n,), "typestr": "<f4", "data": (ptr, False), "version": 3,
                                             "strides": None}

    from tilewright.binding import tensor_args

    devices = {4096: 1, 8192: 1, 12288: 0}
    tensor_args.pointer_device_resolvers.insert(0, devices.get)
    try:
        launcher = Launcher(spec, Fake())
        launcher.launch([OnDevice(100, 1, 4096), OnDevice(100, 1, 8192)])
        launcher.launch([OnDevice(100, 1, 4096), OnDevice(100, 1, 8192)])
        assert loaded == [1] and launches == [(1, 101), (1, 101)]  # loaded once per device, its stream
        with pytest.raises(tilewright.ArgumentError, match="B is on cuda:0 but earlier arguments are on cuda:1"):
            launcher.launch([OnDevice(100, 1, 4096), OnDevice(100, 0, 12288)])
    finally:
        tensor_args.pointer_device_resolvers.remove(devices.get)


@needs_nvrtc
def test_the_remembered_grid_follows_the_sizes_and_scalars_it_reads():
    """The launcher remembers a symbolic grid per value of what it reads (host time): a new size, or
    a scalar parameter of the grid expression, must give the new grid; an empty grid is refused."""
    m = T.dynamic("m")

    @T.prim_func
    def rows(A: T.Tensor((m, 64), "float32"), B: T.Tensor((m, 64), "float32"), step: T.int32):
        with T.Kernel(T.ceildiv(m, step), threads=64) as bx:
            for i, j in T.Parallel(16, 64):
                if bx * 16 + i < m:
                    B[bx * 16 + i, j] = A[bx * 16 + i, j]

    spec = tilewright.compile(rows, target="cuda -arch=sm_90a").spec
    launches = []

    class Fake:
        def load_function(self, code_object, name, dev):
            class Fn:
                def launch(self, *args):
                    launches.append(args[0])
            return Fn()

        def current_stream(self, dev):
            return 0

        def synchronize(self, dev):
            pass

    class Arg:
        def __init__(self, n):
            self.__cuda_array_interface__ = {"shape": (n, 64), "typestr": "<f4", "data": (4096 * 16, False),
                                             "version": 3, "strides": None}

    launcher = Launcher(spec, Fake())
    for n, step, grid in [(40, 16, 3), (40, 16, 3), (64, 16, 4), (40, 8, 5), (64, 16, 4)]:
        launcher.launch([Arg(n), Arg(n), step])
        assert launches[-1][0] == grid, (n, step)
    for _ in range(2):  # a zero grid dimension is an error every time (as in TileLang), never remembered
        with pytest.raises(ArgumentError, match="grid dimension x of T.Kernel is 0"):
            launcher.launch([Arg(0), Arg(0), 16])
