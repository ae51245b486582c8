"""The HIP runtime layer against a fake libamdhip64: argument packing, launches, device queries, errors.

No AMD GPU or ROCm is needed: the fake has the same function names as the real library and
records what it was called with.  Out-parameters arrive as ``ctypes.pointer`` objects.
"""

from __future__ import annotations

import ctypes
import struct
import subprocess
import sys

import pytest

from tilewright.errors import ArgumentError, RuntimeLaunchError
from tilewright.runtime import hip_runtime as hr

GCN_ARCH_OFFSET = 1160  # offsetof(hipDeviceProp_tR0600, gcnArchName) on x86-64


class FakeHip:
    """Just enough of libamdhip64 for HipModule / HipFunction / device queries."""

    def __init__(self, devices=("gfx942:sramecc+:xnack-",), init_rc=0, arch_offset=GCN_ARCH_OFFSET):
        self.devices = list(devices)
        self.init_rc = init_rc
        self.arch_offset = arch_offset
        self.current = 0
        self.loaded: dict[int, bytes] = {}
        self.launches: list[dict] = []
        self.unloaded: list[int] = []
        self.set_device_calls: list[int] = []
        self.fail: dict[str, int] = {}  # function name -> error code to return
        self.static_lds = 0
        self.max_shared = 64 * 1024

    # devices
    def hipInit(self, flags):
        return self.init_rc

    def hipGetDeviceCount(self, n):
        n[0] = len(self.devices)
        return 0

    def hipGetDevice(self, d):
        d[0] = self.current
        return 0

    def hipSetDevice(self, d):
        self.set_device_calls.append(d)
        if not 0 <= d < len(self.devices):
            return 101
        self.current = d
        return 0

    def hipDeviceGetAttribute(self, value, attr, device):
        value[0] = {74: self.max_shared, 87: 64, 63: 304}.get(attr, 0)
        return 0

    def hipGetDevicePropertiesR0600(self, buf, device):
        name = self.devices[device].encode()
        ctypes.memmove(ctypes.addressof(buf) + 0, b"AMD Instinct MI300X\0", 20)
        ctypes.memmove(ctypes.addressof(buf) + self.arch_offset, name + b"\0", len(name) + 1)
        return 0

    def hipGetErrorName(self, rc):
        return {
            101: b"hipErrorInvalidDevice",
            209: b"hipErrorNoBinaryForGpu",
            701: b"hipErrorLaunchOutOfResources",
        }.get(rc, b"hipErrorUnknown")

    def hipGetErrorString(self, rc):
        return b"some explanation"

    # modules
    def hipModuleLoadData(self, module, image):
        if "hipModuleLoadData" in self.fail:
            return self.fail["hipModuleLoadData"]
        handle = 0x1000 + len(self.loaded)
        self.loaded[handle] = ctypes.string_at(image, 4)
        module[0] = handle
        return 0

    def hipModuleGetFunction(self, func, module, name):
        if name == b"missing":
            return 500  # hipErrorNotFound
        func[0] = 0x2000 + len(name)
        return 0

    def hipModuleUnload(self, module):
        self.unloaded.append(module.value if hasattr(module, "value") else module)
        return 0

    def hipFuncGetAttribute(self, value, attr, func):
        value[0] = {1: self.static_lds, 4: 40}.get(attr, 0)
        return 0

    def hipModuleLaunchKernel(self, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        self.launches.append(
            {
                "f": f.value if hasattr(f, "value") else f,
                "grid": (gx, gy, gz),
                "block": (bx, by, bz),
                "shared": shared,
                "stream": stream.value or 0,
                "params": params,
                "device": self.current,
            }
        )
        if "hipModuleLaunchKernel" in self.fail:
            code = self.fail["hipModuleLaunchKernel"]
            if code == 101 and self.current == self.launch_ok_on:
                return 0
            return code
        return 0

    launch_ok_on = None


def read_params(params, types):
    """Decode a launch's void*[] the way the runtime does: one pointer per argument."""
    out = []
    for i, t in enumerate(types):
        code, size = hr.ARG_TYPES[t]
        out.append(struct.unpack("<" + code, ctypes.string_at(params[i], size))[0])
    return out


@pytest.fixture
def fake():
    return FakeHip()


@pytest.fixture
def rt(fake):
    return hr.HipRuntime(fake)


CODE = b"\x7fELF" + b"\0" * 60


def test_device_queries(rt, fake):
    assert rt.device_count() == 1
    assert rt.device_target_id(0) == "gfx942:sramecc+:xnack-"
    assert rt.device_attribute(0, "MAX_SHARED_MEMORY_PER_BLOCK") == 64 * 1024
    assert rt.device_attribute(0, "warp_size") == 64
    with pytest.raises(RuntimeLaunchError, match="device 3 does not exist"):
        rt.device_target_id(3)
    with pytest.raises(ArgumentError, match="unknown HIP device attribute"):
        rt.device_attribute(0, "NOPE")


def test_arch_name_is_found_when_the_struct_layout_moves():
    rt = hr.HipRuntime(FakeHip(devices=("gfx1100",), arch_offset=1500))
    assert rt.device_target_id(0) == "gfx1100"


def test_module_functions_set_the_process_runtime(fake):
    hr.set_runtime(hr.HipRuntime(fake))
    try:
        assert hr.device_count() == 1
        assert hr.device_arch(0) == "gfx942"
    finally:
        hr.set_runtime(None)


def test_no_device_means_zero_devices():
    rt = hr.HipRuntime(FakeHip(init_rc=100))  # hipErrorNoDevice from hipInit
    assert rt.device_count() == 0
    with pytest.raises(RuntimeLaunchError, match="has 0 HIP device"):
        hr.HipModule(CODE, 0, runtime=rt)


def test_load_launch_unload(rt, fake):
    mod = hr.HipModule(CODE, 0, runtime=rt)
    assert fake.loaded[mod.handle.value] == b"\x7fELF"
    fn = mod.function("elementwise")
    assert mod.function("elementwise") is fn  # cached
    types = ("ptr", "i32", "u32", "i64", "u64", "f32", "f64", "ptr")
    values = (0xDEAD0000, -5, 7, -(1 << 40), 1 << 63, 1.5, -2.25, 0)
    fn.launch((4, 2), 256, 0, 0x77, types, values)
    launch = fake.launches[-1]
    assert launch["grid"] == (4, 2, 1) and launch["block"] == (256, 1, 1)
    assert launch["shared"] == 0 and launch["stream"] == 0x77
    assert read_params(launch["params"], types) == list(values)
    # The second launch of the same signature reuses the buffers, with the new values.
    fn.launch((1, 1, 1), (64, 1, 1), 0, None, types, (1, 2, 3, 4, 5, 6.0, 7.0, 8))
    assert read_params(fake.launches[-1]["params"], types) == [1, 2, 3, 4, 5, 6.0, 7.0, 8]
    assert fake.launches[-1]["stream"] == 0
    mod.close()
    assert fake.unloaded == [0x1000]
    with pytest.raises(RuntimeLaunchError, match="closed"):
        mod.function("other")


def test_launch_without_arguments(rt, fake):
    fn = hr.HipModule(CODE, 0, runtime=rt).function("k")
    fn.launch(1, 64, 0, 0, (), ())
    assert fake.launches[-1]["params"] is None


def test_argument_errors(rt):
    fn = hr.HipModule(CODE, 0, runtime=rt).function("k")
    with pytest.raises(ArgumentError, match="unknown kernel argument type 'f16'"):
        fn.launch(1, 64, 0, 0, ("f16",), (1.0,))
    with pytest.raises(ArgumentError, match="takes 2 argument"):
        fn.launch(1, 64, 0, 0, ("ptr", "i32"), (0,))
    with pytest.raises(ArgumentError, match=r"argument 1 \(i32\) cannot take 4294967296"):
        fn.launch(1, 64, 0, 0, ("ptr", "i32"), (0, 1 << 32))
    with pytest.raises(ArgumentError, match=r"argument 0 \(ptr\) cannot take -1"):
        fn.launch(1, 64, 0, 0, ("ptr",), (-1,))
    with pytest.raises(ArgumentError, match="block must be"):
        fn.launch(1, (0, 1), 0, 0, (), ())
    with pytest.raises(ArgumentError, match="grid must be"):
        fn.launch((1, 1, 1, 1), 64, 0, 0, (), ())


def test_load_error_names_the_device_arch(rt, fake):
    fake.fail["hipModuleLoadData"] = 209
    with pytest.raises(RuntimeLaunchError) as info:
        hr.HipModule(CODE, 0, runtime=rt)
    text = str(info.value)
    assert "hipModuleLoadData failed: hipErrorNoBinaryForGpu" in text and "gfx942:sramecc+:xnack-" in text


def test_missing_function_hint(rt):
    mod = hr.HipModule(CODE, 0, runtime=rt)
    with pytest.raises(RuntimeLaunchError, match=r'extern "C"'):
        mod.function("missing")


def test_launch_failure_message(rt, fake):
    fn = hr.HipModule(CODE, 0, runtime=rt).function("k")
    fake.fail["hipModuleLaunchKernel"] = 701
    with pytest.raises(RuntimeLaunchError) as info:
        fn.launch((2, 1, 1), (1024, 1, 1), 0, 0, ("i32",), (1,))
    text = str(info.value)
    assert "'k'" in text and "hipErrorLaunchOutOfResources" in text and "__launch_bounds__" in text


def test_launch_retries_on_the_module_device():
    fake = FakeHip(devices=("gfx942", "gfx942"))
    rt = hr.HipRuntime(fake)
    fn = hr.HipModule(CODE, 1, runtime=rt).function("k")
    assert fake.current == 0  # loading on device 1 restored the current device
    fake.fail["hipModuleLaunchKernel"] = 101  # wrong device current...
    fake.launch_ok_on = 1  # ...until device 1 is current
    fn.launch(1, 64, 0, 0, (), ())
    assert [launch["device"] for launch in fake.launches] == [0, 1]
    assert fake.current == 0


def test_dynamic_lds_limit(rt, fake):
    fn = hr.HipModule(CODE, 0, runtime=rt).function("k")
    fake.static_lds = 16 * 1024
    fn.set_max_dynamic_shared(48 * 1024)  # 16 KiB static + 48 KiB dynamic = 64 KiB: fits
    fn.launch(1, 64, 48 * 1024, 0, (), ())
    assert fake.launches[-1]["shared"] == 48 * 1024
    with pytest.raises(RuntimeLaunchError, match="cannot have 49153 bytes of dynamic LDS"):
        fn.launch(1, 64, 48 * 1024 + 1, 0, (), ())


def test_init_failure_is_reported():
    rt = hr.HipRuntime(FakeHip(init_rc=35))  # hipErrorInsufficientDriver
    assert rt.device_count() == 0
    with pytest.raises(RuntimeLaunchError, match=r"hipInit failed: .*\(35\)"):
        hr.HipModule(CODE, 0, runtime=rt)


def test_runtime_error_without_name_functions():
    class Bare:
        def hipInit(self, flags):
            return 0

        def hipGetDeviceCount(self, n):
            return 3  # hipErrorNotInitialized: no devices

    rt = hr.HipRuntime(Bare())
    assert rt.device_count() == 0
    with pytest.raises(RuntimeLaunchError, match=r"hipX failed: HIP error \(7\)"):
        rt.check(7, "hipX")


def test_missing_library_is_reported(monkeypatch, tmp_path):
    monkeypatch.setenv(hr.ENV_RUNTIME_LIB, str(tmp_path / "libamdhip64.so"))
    monkeypatch.setattr(hr, "_candidate_paths", lambda: [str(tmp_path / "libamdhip64.so"), "libnot-a-real-lib.so"])
    with pytest.raises(RuntimeLaunchError, match="libamdhip64"):
        hr.load_hip_library()
    hr.set_runtime(None)
    try:
        assert hr.device_count() == 0  # no runtime: zero devices, no exception
        with pytest.raises(RuntimeLaunchError, match="rocm"):
            hr.get_runtime()
    finally:
        hr.set_runtime(None)


def test_import_loads_no_gpu_library():
    """Importing the module must load neither libamdhip64 nor any CUDA library."""
    code = (
        "import sys, tilewright.runtime.hip_runtime\n"
        "maps = open('/proc/self/maps').read()\n"
        "assert 'amdhip64' not in maps and 'libcuda' not in maps, maps\n"
        "assert not any(m.startswith('cuda') for m in sys.modules), [m for m in sys.modules if 'cuda' in m]\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


# A C stand-in for libamdhip64, so that the real ctypes path (argtypes, pointer marshalling, the
# void*[] of arguments) is exercised: the fake decodes a (ptr, i32, f32, f64, i64) launch in C.
FAKE_LIBAMDHIP64_C = r"""
#include <stdint.h>
#include <string.h>
static int current = 0;
int hipInit(unsigned flags) { return 0; }
int hipGetDeviceCount(int* n) { *n = 2; return 0; }
int hipGetDevice(int* d) { *d = current; return 0; }
int hipSetDevice(int d) { if (d < 0 || d > 1) return 101; current = d; return 0; }
int hipDeviceGetAttribute(int* v, int attr, int dev) { *v = attr == 74 ? 65536 : 0; return 0; }
int hipGetDevicePropertiesR0600(void* p, int dev) {
  memset(p, 0, 1472);
  strcpy((char*)p, "AMD Instinct MI300X");
  strcpy((char*)p + 1160, dev ? "gfx90a:sramecc+:xnack-" : "gfx942:sramecc+:xnack-");
  return 0;
}
const char* hipGetErrorName(int e) { return e == 209 ? "hipErrorNoBinaryForGpu" : "hipErrorUnknown"; }
const char* hipGetErrorString(int e) { return "fake explanation"; }
int loaded_on = -1;
int hipModuleLoadData(void** m, const void* image) {
  if (memcmp(image, "\x7f" "ELF", 4)) return 209;
  loaded_on = current;
  *m = (void*)0x1234;
  return 0;
}
int hipModuleUnload(void* m) { return m == (void*)0x1234 ? 0 : 400; }
int hipModuleGetFunction(void** f, void* m, const char* name) {
  if (m != (void*)0x1234 || strcmp(name, "k")) return 500;
  *f = (void*)0x5678;
  return 0;
}
int hipFuncGetAttribute(int* v, int attr, void* f) { *v = 0; return 0; }
uint64_t got_ptr; int32_t got_i32; float got_f32; double got_f64; int64_t got_i64;
unsigned got_dims[7]; uint64_t got_stream; int launched_on = -1;
int hipModuleLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                          unsigned shared, void* stream, void** params, void** extra) {
  if (f != (void*)0x5678 || extra) return 98;
  unsigned dims[7] = {gx, gy, gz, bx, by, bz, shared};
  memcpy(got_dims, dims, sizeof dims);
  got_stream = (uint64_t)stream;
  memcpy(&got_ptr, params[0], 8); memcpy(&got_i32, params[1], 4); memcpy(&got_f32, params[2], 4);
  memcpy(&got_f64, params[3], 8); memcpy(&got_i64, params[4], 8);
  launched_on = current;
  return 0;
}
"""


@pytest.fixture(scope="module")
def c_fake_lib(tmp_path_factory):
    import shutil

    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler to build the stand-in libamdhip64")
    d = tmp_path_factory.mktemp("fakehip")
    (d / "fake.c").write_text(FAKE_LIBAMDHIP64_C)
    so = d / "libamdhip64.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(so), str(d / "fake.c")], check=True)
    return ctypes.CDLL(str(so)), str(so)


def test_ctypes_path_against_a_c_library(c_fake_lib):
    lib, path = c_fake_lib
    rt = hr.HipRuntime(lib, path)
    assert rt.device_count() == 2
    assert rt.device_target_id(1) == "gfx90a:sramecc+:xnack-"
    mod = hr.HipModule(CODE, 1, runtime=rt)
    assert ctypes.c_int.in_dll(lib, "loaded_on").value == 1 and rt.get_device() == 0
    fn = mod.function("k")
    types = ("ptr", "i32", "f32", "f64", "i64")
    fn.launch((3, 2, 1), (128, 2, 1), 1024, 0xABC, types, (0x7F0000001000, -3, 0.5, 1e300, -(1 << 50)))
    assert ctypes.c_uint64.in_dll(lib, "got_ptr").value == 0x7F0000001000
    assert ctypes.c_int32.in_dll(lib, "got_i32").value == -3
    assert ctypes.c_float.in_dll(lib, "got_f32").value == 0.5
    assert ctypes.c_double.in_dll(lib, "got_f64").value == 1e300
    assert ctypes.c_int64.in_dll(lib, "got_i64").value == -(1 << 50)
    assert list((ctypes.c_uint * 7).in_dll(lib, "got_dims")) == [3, 2, 1, 128, 2, 1, 1024]
    assert ctypes.c_uint64.in_dll(lib, "got_stream").value == 0xABC
    with pytest.raises(RuntimeLaunchError, match='(?s)hipModuleGetFunction.*extern "C"'):
        mod.function("other")
    mod.close()
    with pytest.raises(RuntimeLaunchError, match="(?s)hipErrorNoBinaryForGpu: fake explanation.*gfx942"):
        hr.HipModule(b"not an elf", 0, runtime=rt)
