"""The compiled launcher (``runtime/compiled_launch.py`` building ``runtime/fast_launch.c``) on a
machine without a GPU: the build and its cache, the silent fallback when there is no compiler or
the build fails, the knob, and every launch form against the stub driver (``bench/stubs/cudastub.c``,
which records grid, block, shared bytes, stream, the argument array and cuLaunchKernelEx's
attribute).  The launcher is built once for the whole module (one cache folder shared by the
subprocesses); the fallback tests use empty cache folders and compilers that cannot build it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tilewright.runtime import compiled_launch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STUBS = os.path.join(ROOT, "bench", "stubs")
CC = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang") or shutil.which("clang-19")

pytestmark = pytest.mark.skipif(CC is None or compiled_launch.python_include() is None,
                                reason="needs a C compiler and this Python's headers")

_PRELUDE = r"""
import ctypes, struct, sys
sys.path.insert(0, ROOT)
from tilewright.runtime import compiled_launch as cl, cuda_driver as cd
from tilewright.errors import ArgumentError
stub = ctypes.CDLL(STUB)
def count():
    return ctypes.c_ulonglong.in_dll(stub, "launches").value
def last():
    grid = list((ctypes.c_uint * 8).in_dll(stub, "last_launch"))[:7]
    return grid, ctypes.c_void_p.in_dll(stub, "last_stream").value or 0
def arg_bytes(types):
    sizes = {"ptr": 8, "i32": 4, "u32": 4, "f32": 4, "i64": 8, "u64": 8, "f64": 8, "tmap": 128}
    ptrs = (ctypes.c_void_p * len(types)).from_address(ctypes.c_void_p.in_dll(stub, "last_params").value)
    return [ctypes.string_at(p, sizes[t]) for p, t in zip(ptrs, types)]
"""


@pytest.fixture(scope="module")
def stub(tmp_path_factory):
    d = tmp_path_factory.mktemp("stub")
    subprocess.check_call([CC, "-O1", "-shared", "-fPIC", "-o", str(d / "libcuda.so.1"),
                           os.path.join(STUBS, "cudastub.c"), "-ldl"])
    return d


@pytest.fixture(scope="module")
def built_cache(tmp_path_factory):
    """A cache folder the first subprocess builds the launcher into (the others find it there)."""
    return tmp_path_factory.mktemp("launcher-cache")


def _run(body: str, stub, cache, **env) -> str:
    pytest.importorskip("cuda.bindings")
    code = f"ROOT = {ROOT!r}\nSTUB = {str(stub / 'libcuda.so.1')!r}\n" + _PRELUDE + body
    full = dict(os.environ, LD_LIBRARY_PATH=f"{stub}{os.pathsep}{os.environ.get('LD_LIBRARY_PATH', '')}",
                TILEWRIGHT_CACHE_DIR=str(cache), TILEWRIGHT_COMPILED_LAUNCH="1")
    full.pop("CC", None)
    full.update(env)
    proc = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


_EVERY_FORM = r"""
assert cl.status().startswith("in use ("), cl.status()
assert cd.launch_path() == "compiled"
fn = cd.load_function(b"\x7fELF" + bytes(100), "k", 0)
assert fn.compiled is not None
# the general launch: every argument kind packed by ArgPacker, launched by the C call
types = ("ptr", "i32", "u32", "f32", "ptr", "i64", "u64", "f64", "tmap")
values = (0x7F0000001000, -5, 3000000000, 1.5, 0x7F0000002000, -(1 << 40), (1 << 63) + 7, 0.25, bytes(range(128)))
n = count()
fn.launch((3, 2, 1), (128, 1, 1), 4096, 0x1234, types, values)
assert count() == n + 1  # one launch (not the compiled one and a fallback)
assert last() == ([3, 2, 1, 128, 1, 1, 4096], 0x1234), last()
want = [struct.pack("<Q", values[0]), struct.pack("<i", -5), struct.pack("<I", values[2]), struct.pack("<f", 1.5),
        struct.pack("<Q", values[4]), struct.pack("<q", values[5]), struct.pack("<Q", values[6]),
        struct.pack("<d", 0.25), values[8]]
assert arg_bytes(types) == want
# the packed launch: only the leading pointers change, the rest is as packed once
ftypes = ("ptr", "ptr", "i32", "tmap", "f32")
fixed = fn.fixed_launch((7, 1, 1), (256, 1, 1), 0, ftypes, [16, 32, -9, bytes(range(128, 256)), 2.5], 2)
assert fixed._compiled is not None
for ptrs in ([0x1000, 0x2000], (0xFFFFFFFFFFFFFFF0, 0)):
    n = count()
    fixed(ptrs, 0x55)
    assert count() == n + 1
    assert last() == ([7, 1, 1, 256, 1, 1, 0], 0x55), last()
    assert arg_bytes(ftypes) == [struct.pack("<Q", ptrs[0]), struct.pack("<Q", ptrs[1]), struct.pack("<i", -9),
                                 bytes(range(128, 256)), struct.pack("<f", 2.5)]
# a value that is not a pointer: nothing launched by C, the general path explains
n = count()
try:
    fixed(["x", 1], 0)
except ArgumentError as e:
    assert "cannot take" in str(e) or "cannot pack" in str(e), e
else:
    raise AssertionError("a bad pointer was launched")
assert count() == n
# Launch.go refuses a wrong count and a negative pointer before writing or launching
go = fixed._compiled
for bad in ([1], [1, 2, 3], [-1, 2]):
    try:
        go(0, bad)
    except (ValueError, OverflowError):
        pass
    else:
        raise AssertionError(bad)
assert count() == n
# a refusal by the driver (an error code): the general path launches (here: succeeds) exactly once
class Refusing:
    def __init__(self, real):
        self.real = real
    def launch_kernel(self, *a):
        return 719
n = count()
fixed._compiled = lambda stream, ptrs: 719
fixed([0x3000, 0x4000], 0x66)
assert count() == n + 1 and last()[1] == 0x66
assert arg_bytes(ftypes)[:2] == [struct.pack("<Q", 0x3000), struct.pack("<Q", 0x4000)]
fn.compiled = Refusing(fn.compiled)
fn.launch((1, 1, 1), (32, 1, 1), 0, 0x77, ("ptr",), (0x5000,))
assert count() == n + 2 and last() == ([1, 1, 1, 32, 1, 1, 0], 0x77)
# the programmatic launch (cuLaunchKernelEx with programmatic stream serialization)
pfn = cd.load_function(b"\x7fELF" + bytes(100), "k2", 0)
pfn.launch_programmatic()
assert pfn.compiled is not None and cl.has_launch_ex()
attr = (ctypes.c_int * 3).in_dll(stub, "last_ex_attr")
n = count()
pfn.launch((5, 1, 1), (384, 1, 1), 1024, 0x88, ("ptr", "i32"), (0xABC0, 77))
assert count() == n + 1 and last() == ([5, 1, 1, 384, 1, 1, 1024], 0x88), last()
assert list(attr) == [1, 6, 1], list(attr)  # one attribute: CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, on
assert arg_bytes(("ptr", "i32")) == [struct.pack("<Q", 0xABC0), struct.pack("<i", 77)]
pfixed = pfn.fixed_launch((2, 1, 1), (128, 1, 1), 0, ("ptr", "i32"), [16, 5], 1)
attr[0] = 0
pfixed([0xDEF0], 0x99)
assert count() == n + 2 and last() == ([2, 1, 1, 128, 1, 1, 0], 0x99) and list(attr) == [1, 6, 1]
# go_current: the stream from the lookup, the thread given only
import threading
assert fixed.current is None  # (no lookup given yet)
fixed.set_stream_lookup(lambda dev: 0xAB0 + dev, 3, threading.get_ident())
n = count()
assert fixed.current([0x8000, 0x9000]) == 0
assert count() == n + 1 and last() == ([7, 1, 1, 256, 1, 1, 0], 0xAB3)
assert arg_bytes(ftypes)[:3] == [struct.pack("<Q", 0x8000), struct.pack("<Q", 0x9000), struct.pack("<i", -9)]
got = []
t = threading.Thread(target=lambda: got.append(fixed.current([0xA000, 0xB000])))
t.start(); t.join()
assert got == [-2] and count() == n + 1  # another thread's call: nothing launched (FixedLaunch takes its path)
other = threading.Thread(target=lambda: None)
other.start(); other.join()
fixed.set_stream_lookup(lambda dev: 0xAB0, 0, other.ident)  # (another thread's launch: refused here)
assert fixed.current([0xA000, 0xB000]) == -2 and count() == n + 1
fixed.set_stream_lookup(lambda dev: 1 / 0, 0, threading.get_ident())
try:
    fixed.current([0xA000, 0xB000])
except ZeroDivisionError:
    pass
else:
    raise AssertionError("the lookup's error was lost")
assert count() == n + 1
# the measurement forms (bench/launch_overhead.py's pieces): each one launch of the same arguments
mod = cl.load()
extra = (ctypes.c_void_p * 2).in_dll(stub, "last_extra")
forms = [(0, "params"), (1, "extra"), (2, "ex")] + [(3, "params")] * bool(mod.bind_proc_address())
for form, how in forms:
    n = count()
    fixed.args.write_lead([0xC000, 0xD000])
    assert mod.launch_variant(form, fn._handle_int, 9, 1, 1, 64, 1, 1, 0, 0x44, fixed.args.address,
                              fixed.args.data_address, fixed.args.size) == 0
    assert count() == n + 1 and last() == ([9, 1, 1, 64, 1, 1, 0], 0x44), (form, last())
    if how == "extra":
        assert ctypes.c_void_p.in_dll(stub, "last_params").value is None
        assert list(extra) == [fixed.args.data_address, fixed.args.size], list(extra)
    else:
        assert arg_bytes(ftypes)[:3] == [struct.pack("<Q", 0xC000), struct.pack("<Q", 0xD000), struct.pack("<i", -9)]
assert fixed.args.size == fixed.args.offsets[-1] + 4  # (the packed bytes end with the last f32)
# switching one object's path (the bench's A/B)
assert fixed.use_compiled_launch(False) is False and fixed._compiled is None and fixed.current is None
n = count()
fixed([0x6000, 0x7000], 0)
assert count() == n + 1 and arg_bytes(ftypes)[0] == struct.pack("<Q", 0x6000)
assert fixed.use_compiled_launch(True) is True and fixed.current is not None
print("ok", cl.status())
"""


def test_every_launch_form_through_the_compiled_launcher(stub, built_cache):
    out = _run(_EVERY_FORM, stub, built_cache)
    assert out.startswith("ok in use (built: "), out
    assert os.path.isfile(out.split("built: ", 1)[1].split(")")[0])
    # a second process finds it in the cache (no second build)
    again = _run("print(cl.load() is not None, cl.status())", stub, built_cache)
    assert again.startswith("True in use (cached: "), again


def test_programmatic_config_matches_cuda_bindings_layout(stub, built_cache):
    """The CUlaunchConfig / CUlaunchAttribute the C side hands cuLaunchKernelEx, byte for byte
    against the same structures made by cuda-bindings (the real driver reads these)."""
    body = r"""
from cuda.bindings import driver
mod = cl.load()
ours_cfg, ours_attr = mod.config_layout((3, 4, 5), (6, 7, 8), 9, 0x1234)
attr = driver.CUlaunchAttribute()
attr.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
attr.value.programmaticStreamSerializationAllowed = 1
cfg = driver.CUlaunchConfig()
cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ, cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = 3, 4, 5, 6, 7, 8
cfg.sharedMemBytes, cfg.hStream, cfg.attrs, cfg.numAttrs = 9, driver.CUstream(0x1234), [attr], 1
theirs = bytearray(ctypes.string_at(cfg.getPtr(), len(ours_cfg)))
attrs_at = 40  # (the attribute array's address: ours is zeroed)
theirs_attr = ctypes.string_at(struct.unpack_from("<Q", theirs, attrs_at)[0], len(ours_attr))
theirs[attrs_at:attrs_at + 8] = bytes(8)
assert len(ours_cfg) == 56 and bytes(theirs) == ours_cfg, (bytes(theirs), ours_cfg)
assert theirs_attr[:12] == ours_attr[:12], (theirs_attr, ours_attr)
print("ok")
"""
    assert _run(body, stub, built_cache).strip() == "ok"


_FALLBACK = r"""
status = cl.status()
assert status.startswith(WANT), status
assert cl.load() is None
path = cd.launch_path()
assert path in ("typed", "bindings"), path
fn = cd.load_function(b"\x7fELF" + bytes(100), "k", 0)
assert fn.compiled is None
n = count()
fn.launch((2, 1, 1), (64, 1, 1), 0, 0x10, ("ptr", "i32"), (0x1230, 4))
assert count() == n + 1 and last() == ([2, 1, 1, 64, 1, 1, 0], 0x10)
fixed = fn.fixed_launch((2, 1, 1), (64, 1, 1), 0, ("ptr", "i32"), [16, 4], 1)
assert fixed._compiled is None and fixed.use_compiled_launch(True) is False
fixed([0x4560], 0)
assert count() == n + 2 and arg_bytes(("ptr", "i32")) == [struct.pack("<Q", 0x4560), struct.pack("<i", 4)]
from tilewright.cli.doctor import check_nvidia
line = [c for c in check_nvidia()[0] if c.name == "compiled launcher"]
assert line and line[0].detail.startswith(WANT), line
want_fix = "apt-get install gcc" if "no C compiler" in WANT else "TILEWRIGHT_COMPILED_LAUNCH=0"
assert want_fix in line[0].fix, line  # (the fix that suits the reason)
print("ok")
"""


@pytest.mark.parametrize("cc, want", [
    ("/nonexistent/cc", "not built: no C compiler"),
    ("false", "not built: false failed"),  # a compiler that fails: the build fails, launches do not
    (f"{CC} -DTW_NO_SUCH_HEADER -include tw_no_such_header.h", "not built: "),
])
def test_no_compiler_or_failed_build_falls_back(stub, tmp_path, cc, want):
    assert _run(f"WANT = {want!r}\n" + _FALLBACK, stub, tmp_path, CC=cc).strip() == "ok"
    assert not os.path.exists(tmp_path / "launcher") or not any(
        f.endswith(".so") for _, _, fs in os.walk(tmp_path / "launcher") for f in fs)
    if cc != "/nonexistent/cc":  # a build that ran and failed: the next process does not run it again
        again = _run(f"WANT = {'not built: ' + want.split(': ', 1)[1]!r}\n" + _FALLBACK, stub, tmp_path, CC=cc)
        assert again.strip() == "ok"
        marks = [f for f in os.listdir(tmp_path / "launcher") if f.endswith(".failed")]
        assert len(marks) == 1
        reason = _run("print(cl.status())", stub, tmp_path, CC=cc)
        assert "an earlier build; delete" in reason, reason


def test_knob_off_builds_nothing(stub, tmp_path):
    body = r"""
assert not cl.enabled() and cl.module() is None
assert cl.status().startswith("off"), cl.status()
assert cd.launch_path() in ("typed", "bindings")
fn = cd.load_function(b"\x7fELF" + bytes(100), "k", 0)
assert fn.compiled is None
print("ok")
"""
    assert _run(body, stub, tmp_path, TILEWRIGHT_COMPILED_LAUNCH="0").strip() == "ok"
    assert not (tmp_path / "launcher").exists()


def test_cache_key_follows_source_interpreter_and_compiler():
    key = compiled_launch.cache_key(["cc"], b"int x;")
    assert key == compiled_launch.cache_key(["cc"], b"int x;")
    assert key != compiled_launch.cache_key(["cc"], b"int y;")
    assert key != compiled_launch.cache_key(["clang"], b"int x;")
    assert compiled_launch.built_path(key).endswith(os.path.join("launcher", key, "tilewright_fast_launch")
                                                    + (compiled_launch.sysconfig.get_config_var("EXT_SUFFIX")
                                                       or ".so"))


def test_compiler_choice(monkeypatch):
    monkeypatch.setenv("CC", "/nonexistent/cc -O1")
    assert compiled_launch.compiler() is None
    monkeypatch.setenv("CC", f"{CC} -O1")
    assert compiled_launch.compiler() == [CC, "-O1"]
    monkeypatch.delenv("CC")
    assert compiled_launch.compiler() is not None


@pytest.mark.parametrize("status, fix", [
    ("not built: no C compiler (set CC, or install cc/gcc/clang)", "apt-get install gcc"),
    ("not built: no Python.h for this interpreter (/usr/include/python3.11)", "-dev"),
    ("not loaded: OSError: cannot load libcuda.so.1: no such file", ""),  # no driver: nothing to install for it
    ("not built: cc failed (1): error", "TILEWRIGHT_COMPILED_LAUNCH=0"),
])
def test_doctor_names_the_fix_for_the_reason(status, fix):
    from tilewright.cli.doctor import _launcher_fix

    got = _launcher_fix(status)
    assert (fix in got) if fix else got == "", (status, got)
