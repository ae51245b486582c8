"""The CUDA driver layer: argument packing (no GPU needed) and, on a machine with a GPU, loading
cubins and launching kernels.  Without libcuda or a GPU the GPU tests skip."""

from __future__ import annotations

import ctypes
import struct
import threading

import numpy as np
import pytest
from test_nvrtc import MMA_KERNEL  # the warp-level mma kernel NVRTC builds there, launched here

from tilewright.errors import ArgumentError, RuntimeLaunchError
from tilewright.runtime import cuda_driver as cd


# ---------------------------------------------------------------- no GPU needed
def _read_params(addr: int, arg_types) -> list:
    """Read back what a packer wrote, through the void** array as the driver would."""
    ptrs = (ctypes.c_void_p * len(arg_types)).from_address(addr)
    out = []
    for i, t in enumerate(arg_types):
        code, size = cd.ARG_TYPES[t]
        out.append(struct.unpack("<" + code, ctypes.string_at(ptrs[i], size))[0])
    return out


def test_packer_layout_is_naturally_aligned():
    p = cd._ArgPacker(("i32", "ptr", "f32", "f64", "u32", "i64"))
    assert p.offsets == (0, 8, 16, 24, 32, 40)
    assert p.size == 48


def test_packer_round_trip():
    types = ("ptr", "i32", "u32", "i64", "f32", "f64", "u64")
    values = (0x7F00DEADBEEF, -5, 4_000_000_000, -(2**40), 1.5, -2.25, 2**63 + 1)
    p = cd._ArgPacker(types)
    addr = p.pack(values)
    assert _read_params(addr, types) == list(values)
    # A second launch reuses the same buffers.
    assert p.pack((1, 2, 3, 4, 5.0, 6.0, 7)) == addr
    assert _read_params(addr, types) == [1, 2, 3, 4, 5.0, 6.0, 7]


def test_packer_accepts_numpy_scalars():
    p = cd._ArgPacker(("i32", "f32"))
    assert _read_params(p.pack((np.int64(7), np.float32(0.5))), ("i32", "f32")) == [7, 0.5]


def test_packer_buffers_are_per_thread():
    p = cd._ArgPacker(("i32",))
    here = p.pack((1,))
    there = []
    th = threading.Thread(target=lambda: there.append(p.pack((2,))))
    th.start()
    th.join()
    assert there[0] != here
    assert _read_params(here, ("i32",)) == [1]


@pytest.mark.parametrize(
    ("types", "values", "match"),
    [
        (("i32",), (2**31,), "argument 0 \\(i32\\)"),
        (("u32",), (-1,), "argument 0 \\(u32\\)"),
        (("i32", "ptr"), (1, "x"), "argument 1 \\(ptr\\)"),
        (("i32",), (1.5,), "argument 0"),
        (("i32", "i32"), (1,), "takes 2 argument"),
    ],
)
def test_packer_errors(types, values, match):
    with pytest.raises(ArgumentError, match=match):
        cd._ArgPacker(types).pack(values)


def test_unknown_arg_type():
    with pytest.raises(ArgumentError, match="f16"):
        cd._ArgPacker(("f16",))


@pytest.mark.parametrize("setting", ["", "0", "1", "off", "yes"])
@pytest.mark.parametrize("available", [False, True])
def test_launch_path_follows_the_setting_and_what_cuda_bindings_has(monkeypatch, setting, available):
    """TILEWRIGHT_TYPED_LAUNCH: unset -> TYPED_LAUNCH_DEFAULT, "0"/"off" -> the classic call, "1"/"yes"
    -> the typed one; the typed call only where cuda-bindings has it (13.3.1 has none: classic)."""
    typed = object()
    monkeypatch.setattr(cd, "_typed_call", [typed if available else None])
    monkeypatch.setenv("TILEWRIGHT_TYPED_LAUNCH", setting)
    monkeypatch.setenv("TILEWRIGHT_COMPILED_LAUNCH", "0")  # (first where on: tests/test_s13_compiled_launch.py)
    wanted = cd.TYPED_LAUNCH_DEFAULT if setting == "" else setting in ("1", "yes")
    assert cd._typed_launch_kernel() is (typed if wanted and available else None)
    assert cd.launch_path() == ("typed" if wanted and available else "bindings")


def test_torch_stream_without_torch_initialised_cuda():
    assert cd.current_stream_of_torch(0) == 0 or cd.device_count() > 0


def test_errors_only_when_used_without_a_driver():
    if cd.driver_available():
        pytest.skip("this machine has a CUDA driver")
    assert cd.device_count() == 0
    assert cd.pointer_device_index(0x1000) is None
    with pytest.raises(RuntimeLaunchError):
        cd.CudaModule(b"\x7fELF", 0)
    with pytest.raises(RuntimeLaunchError):
        cd.device_compute_capability(0)


# ---------------------------------------------------------------- GPU tests
gpu = pytest.mark.skipif(cd.device_count() == 0, reason="no CUDA GPU / libcuda on this machine")

KERNELS = r"""
#include <cuda_fp16.h>

extern "C" __global__ void echo_args(double* out, int a, unsigned b, long long c, float d, double e,
                                     const float* p) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    out[0] = a; out[1] = b; out[2] = (double)c; out[3] = d; out[4] = e; out[5] = p[3];
  }
}

extern "C" __global__ void axpy(float* y, const float* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += a * x[i];
}

extern "C" __global__ void big_smem(float* out, int n) {
  extern __shared__ float buf[];  // n floats of dynamic shared memory
  for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = (float)(i & 7);  // sums stay exact in fp32
  __syncthreads();
  if (threadIdx.x == 0) { float s = 0.f; for (int i = 0; i < n; ++i) s += buf[i]; out[0] = s; }
}

extern "C" __global__ void static_and_dynamic(float* out, int n) {
  __shared__ float fixed[1024];  // 4 KiB static: the default dynamic limit drops to 44 KiB
  extern __shared__ float dyn[];
  fixed[threadIdx.x] = 1.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) dyn[i] = 2.f;
  __syncthreads();
  if (threadIdx.x == 0) out[0] = fixed[5] + dyn[n - 1];
}

extern "C" __global__ void no_args() {}

""" + MMA_KERNEL
KERNEL_NAMES = ["echo_args", "axpy", "big_smem", "static_and_dynamic", "no_args", "mma_16x8x16"]


@pytest.fixture(scope="module")
def binary():
    from tilewright.toolchain.nvrtc import compile_cuda

    major, minor = cd.device_compute_capability(0)
    arch = f"sm_{major}{minor}" + ("a" if major >= 9 else "")  # the arch-specific variant enables every feature
    return compile_cuda(KERNELS, arch, KERNEL_NAMES)


@pytest.fixture(scope="module")
def module(binary):
    mod = cd.CudaModule(binary.cubin, 0)
    yield mod
    mod.close()


class DeviceArray:
    """Minimal device buffer for tests that must not depend on torch."""

    def __init__(self, host: np.ndarray):
        self.host = np.ascontiguousarray(host)
        self.ptr = cd.mem_alloc(self.host.nbytes)
        cd.memcpy_htod(self.ptr, self.host)

    def get(self) -> np.ndarray:
        out = np.empty_like(self.host)
        cd.memcpy_dtoh(out, self.ptr)
        return out

    def free(self):
        cd.mem_free(self.ptr)


@gpu
def test_device_queries():
    assert cd.driver_available()
    major, _ = cd.device_compute_capability(0)
    assert major >= 7
    assert cd.device_name(0)
    assert cd.device_attribute(0, "MAX_THREADS_PER_BLOCK") == 1024
    with pytest.raises(RuntimeLaunchError, match="does not exist"):
        cd.device_compute_capability(cd.device_count())


@gpu
def test_all_argument_kinds_reach_the_kernel(module):
    out = DeviceArray(np.zeros(6, np.float64))
    src = DeviceArray(np.arange(8, dtype=np.float32) * 0.5)
    fn = module.function("echo_args")
    types = ("ptr", "i32", "u32", "i64", "f32", "f64", "ptr")
    fn.launch((1, 1, 1), (32, 1, 1), 0, 0, types, (out.ptr, -7, 3_000_000_000, -(2**40), 0.25, 1e300, src.ptr))
    cd.synchronize(0)
    np.testing.assert_array_equal(out.get(), [-7, 3_000_000_000, -(2**40), 0.25, 1e300, 1.5])
    module.function("no_args").launch((1, 1, 1), (1, 1, 1), 0, 0, (), ())
    cd.synchronize(0)
    out.free()
    src.free()


@gpu
def test_axpy_on_a_stream(module):
    from cuda.bindings import driver

    n = 100_003
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    y = np.ones(n, np.float32)
    dx, dy = DeviceArray(x), DeviceArray(y)
    err, stream = driver.cuStreamCreate(0)
    assert err == driver.CUresult.CUDA_SUCCESS
    fn = module.function("axpy")
    fn.launch(((n + 255) // 256, 1, 1), (256, 1, 1), 0, int(stream), ("ptr", "ptr", "f32", "i32"),
              (dy.ptr, dx.ptr, 2.0, n))  # fmt: skip
    driver.cuStreamSynchronize(stream)
    np.testing.assert_allclose(dy.get(), y + 2.0 * x, rtol=1e-6)
    driver.cuStreamDestroy(stream)
    dx.free()
    dy.free()


@gpu
def test_tensor_core_kernel_computes_a_matmul(module):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((16, 16)).astype(np.float16)
    bt = rng.standard_normal((8, 16)).astype(np.float16)
    da, db, dc = DeviceArray(a), DeviceArray(bt), DeviceArray(np.zeros((16, 8), np.float32))
    module.function("mma_16x8x16").launch((1, 1, 1), (32, 1, 1), 0, 0, ("ptr", "ptr", "ptr"), (da.ptr, db.ptr, dc.ptr))
    cd.synchronize(0)
    expect = a.astype(np.float32) @ bt.astype(np.float32).T
    np.testing.assert_allclose(dc.get(), expect, rtol=1e-3, atol=1e-3)
    for d in (da, db, dc):
        d.free()


@gpu
def test_dynamic_shared_memory_above_48k(module):
    optin = cd.device_attribute(0, "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN")
    if optin <= 48 * 1024:
        pytest.skip("this GPU cannot opt in to more than 48 KiB of shared memory")
    n = (min(optin, 200 * 1024)) // 4
    out = DeviceArray(np.zeros(1, np.float32))
    fn = module.function("big_smem")
    with pytest.raises(RuntimeLaunchError):
        fn.set_max_dynamic_shared(optin + 4096)  # more than the device allows: a clear error
    fn.launch((1, 1, 1), (256, 1, 1), n * 4, 0, ("ptr", "i32"), (out.ptr, n))  # opts in by itself
    cd.synchronize(0)
    assert out.get()[0] == sum(i & 7 for i in range(n))
    assert fn.attribute("MAX_DYNAMIC_SHARED_SIZE_BYTES") >= n * 4
    out.free()


@gpu
def test_dynamic_shared_memory_below_48k_with_static_shared(module):
    out = DeviceArray(np.zeros(1, np.float32))
    fn = module.function("static_and_dynamic")
    assert fn.attribute("MAX_DYNAMIC_SHARED_SIZE_BYTES") == 48 * 1024 - 4096
    n = 46 * 1024 // 4  # 46 KiB: under 48 KiB, yet over this kernel's default limit
    fn.launch((1, 1, 1), (256, 1, 1), n * 4, 0, ("ptr", "i32"), (out.ptr, n))
    cd.synchronize(0)
    assert out.get()[0] == 3.0
    out.free()


@gpu
def test_driver_attributes_agree_with_the_cubin_reader(module, binary):
    for name in KERNEL_NAMES:
        attrs = module.function(name).attributes()
        res = binary.resources[name]
        assert attrs["registers"] == res["registers"], name
        assert attrs["shared_bytes"] == res["shared_bytes"], name
        assert attrs["local_bytes"] == res["local_bytes"], name


@gpu
def test_launch_errors_are_explained(module):
    fn = module.function("axpy")
    with pytest.raises(RuntimeLaunchError, match=r"cuLaunchKernel failed for kernel 'axpy'.*CUDA_ERROR_INVALID_VALUE"):
        fn.launch((1, 1, 1), (2048, 1, 1), 0, 0, ("ptr", "ptr", "f32", "i32"), (0, 0, 1.0, 0))
    with pytest.raises(RuntimeLaunchError, match="no_such_kernel"):
        module.function("no_such_kernel")
    with pytest.raises(ArgumentError):
        fn.launch((1, 1, 1), (32, 1, 1), 0, 0, ("ptr", "ptr", "f32", "i32"), (0, 0, 1.0))


@gpu
def test_wrong_architecture_cubin_is_a_clear_error():
    from tilewright.toolchain.nvrtc import compile_cuda

    # SASS runs only within its major architecture: sm_75 code cannot load on sm_8x/9x, nor sm_90 on older.
    major, _ = cd.device_compute_capability(0)
    other = "sm_75" if major >= 8 else "sm_90"
    cubin = compile_cuda('extern "C" __global__ void k() {}', other, ["k"]).cubin
    with pytest.raises(RuntimeLaunchError, match="cuModuleLoadData"):
        cd.CudaModule(cubin, 0)


@gpu
def test_launch_from_a_new_thread_and_under_a_foreign_context(module):
    from cuda.bindings import driver

    out = DeviceArray(np.zeros(4, np.float32))
    x = DeviceArray(np.ones(4, np.float32))
    fn = module.function("axpy")
    types = ("ptr", "ptr", "f32", "i32")
    errors = []

    def worker():
        try:
            fn.launch((1, 1, 1), (32, 1, 1), 0, 0, types, (out.ptr, x.ptr, 1.0, 4))
            cd.synchronize(0)
        except Exception as exc:  # noqa: BLE001 - reported to the main thread
            errors.append(exc)

    th = threading.Thread(target=worker)  # no context is current in a new thread
    th.start()
    th.join()
    assert not errors
    np.testing.assert_array_equal(out.get(), [1, 1, 1, 1])

    # Another context current on this thread: the launch must still go to ours.
    err, dev = driver.cuDeviceGet(0)
    try:
        err, foreign = driver.cuCtxCreate(None, 0, dev)  # CUDA 13 signature (with creation parameters)
    except TypeError:
        err, foreign = driver.cuCtxCreate(0, dev)  # CUDA 12
    assert err == driver.CUresult.CUDA_SUCCESS
    try:
        fn.launch((1, 1, 1), (32, 1, 1), 0, 0, types, (out.ptr, x.ptr, 1.0, 4))
        err, current = driver.cuCtxGetCurrent()
        assert int(current) == int(foreign)  # we restored the caller's context
    finally:
        driver.cuCtxDestroy(foreign)
    cd.synchronize(0)
    np.testing.assert_array_equal(out.get(), [2, 2, 2, 2])
    out.free()
    x.free()


@gpu
def test_module_close_and_reload(binary):
    mod = cd.CudaModule(binary.cubin, 0)
    fn = mod.function("no_args")
    fn.launch((1, 1, 1), (1, 1, 1), 0, 0, (), ())
    cd.synchronize(0)
    mod.close()
    mod.close()  # idempotent
    with pytest.raises(RuntimeLaunchError, match="closed"):
        mod.function("axpy")
    with cd.CudaModule(binary.cubin, 0) as again:
        again.function("no_args").launch((1, 1, 1), (1, 1, 1), 0, 0, (), ())
    cd.synchronize(0)


@gpu
def test_shares_memory_and_streams_with_torch(module):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    from tilewright.binding.tensor_args import describe_arg

    x = torch.arange(1000, device="cuda", dtype=torch.float32)
    y = torch.zeros(1000, device="cuda", dtype=torch.float32)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        stream = cd.current_stream_of_torch(0)
        assert stream == s.cuda_stream != 0
        ty, tx = describe_arg(y), describe_arg(x)
        assert (ty.device_type, ty.device_index) == ("cuda", 0)
        module.function("axpy").launch((4, 1, 1), (256, 1, 1), 0, stream, ("ptr", "ptr", "f32", "i32"),
                                       (ty.ptr, tx.ptr, 3.0, 1000))  # fmt: skip
    s.synchronize()
    assert torch.equal(y, 3.0 * x)
