"""Argument buffers packed once per plan (``launch_args.FixedArgs``, ``cuda_driver.FixedCudaLaunch``,
``launcher.FixedLaunch``, ``BoundKernel.launch_pointers``) send the driver, byte for byte, what
packing every value per launch sends: the new pointers, the plan's scalars and sizes, and the TMA
descriptors of the new pointers (rewritten when the pointers they describe change); a buffer made
for some scalars is never used for others; a launch from another thread does not touch the
buffer; a launch the driver refuses goes through the general path (which retries or explains)."""

from __future__ import annotations

import ctypes
import threading

import pytest

torch = pytest.importorskip("torch")

from test_host_fast_paths import ClaimsCuda  # noqa: E402

import tilewright  # noqa: E402
import tilewright.language as T  # noqa: E402
from tilewright.ops.bound_kernel import BoundKernel  # noqa: E402
from tilewright.runtime.cuda_driver import FixedCudaLaunch  # noqa: E402
from tilewright.runtime.launch_args import ArgPacker, FixedArgs  # noqa: E402
from tilewright.runtime.launcher import FixedLaunch, Launcher  # noqa: E402


def _fake(t):
    return t.as_subclass(ClaimsCuda)


def _sent(address: int, arg_types) -> bytes:
    """The bytes a driver reads through the ``void*[]`` at ``address`` (each argument at its pointer)."""
    packer = ArgPacker(arg_types)
    ptrs = (ctypes.c_void_p * len(arg_types)).from_address(address)
    out = bytearray(packer.size)
    for i, off in enumerate(packer.offsets):
        size = packer.struct.size if i == len(arg_types) - 1 else packer.offsets[i + 1] - off
        size = min(size, packer.size - off)
        out[off:off + size] = ctypes.string_at(ptrs[i], size)
    return bytes(out)


def _packed(arg_types, values) -> bytes:
    packer = ArgPacker(arg_types)
    buf = bytearray(packer.size)
    packer.struct.pack_into(buf, 0, *values)
    return bytes(buf)


class FakeCudaFunction:
    """``CudaFunction`` as ``FixedCudaLaunch`` uses it: records each driver launch (with the bytes
    the driver would read) and each general-path launch; ``refuse`` launches fail once each."""

    handle = 0x5150
    _success = 0

    def __init__(self):
        self.driver_launches, self.general_launches, self.refuse = [], [], 0
        self.types = None

    def _launch_fn(self, handle, gx, gy, gz, bx, by, bz, shared, stream, address, extra):
        if self.refuse:
            self.refuse -= 1
            return (1,)
        self.driver_launches.append(((gx, gy, gz), (bx, by, bz), shared, stream, _sent(address, self.types)))
        return (0,)

    def launch(self, grid, block, shared, stream, arg_types, values):
        self.general_launches.append((tuple(grid), tuple(block), shared, stream, _packed(arg_types, values)))

    def fixed_launch(self, grid, block, shared, arg_types, values, n_lead):
        self.types = arg_types
        args = FixedArgs.make(ArgPacker(arg_types), values, n_lead)
        return None if args is None else FixedCudaLaunch(self, grid, block, shared, arg_types, args)


class FakeRuntime:
    def __init__(self):
        self.fn = FakeCudaFunction()

    def load_function(self, code_object, name, dev):
        return self.fn

    def current_stream(self, dev):
        return 0x77

    def synchronize(self, dev):
        pass


class FakeMaps:
    """A TMA encoder without the driver: a descriptor is 128 bytes made from the pointer and the
    sizes, cached per (pointers, sizes) as the real encoder caches them."""

    def __init__(self, specs):
        self.specs = specs
        self.cache: dict = {}
        self.encodes = 0

    def encode(self, values, dyn, dyn_items=None):
        key = (tuple(values[sp.param_index] for sp in self.specs), tuple(dyn.items()))
        hit = self.cache.get(key)
        if hit is None:
            self.encodes += 1
            hit = self.cache[key] = [(values[sp.param_index] ^ (7 * sum(dyn.values()))).to_bytes(8, "little") * 16
                                     for sp in self.specs]
        return hit


def _tma_kernel():
    m = T.dynamic("m")

    @T.prim_func
    def scale_tiles(A: T.Tensor((m, 64), "float16"), B: T.Tensor((m, 64), "float16"), s: T.float32):
        with T.Kernel(T.ceildiv(m, 64), threads=128) as bx:
            S = T.alloc_shared((64, 64), "float16")
            T.copy(A[bx * 64, 0], S)
            for i, j in T.Parallel(64, 64):
                S[i, j] = S[i, j] * s
            T.copy(S, B[bx * 64, 0])

    k = tilewright.compile(scale_tiles, target="cuda -arch=sm_90a")
    assert k.spec.tensor_maps, "the test needs a kernel whose loads go through TMA"
    return k


def _expected(la, values, dyn, dev):
    """What the general launch path sends for ``values``: (grid, block, shared, stream, bytes)."""
    rt = la.runtime
    before = len(rt.fn.general_launches)
    la.launch_bound(list(values), dyn, dev)
    assert len(rt.fn.general_launches) == before + 1
    return rt.fn.general_launches.pop()


# ---------------------------------------------------------------- FixedArgs
def test_fixed_args_hold_what_a_full_pack_holds():
    types = ("ptr", "ptr", "ptr", "i32", "f32", "i64", "i32", "tmap")
    values = [16, 32, 48, -5, 0.25, 2**40, 7, bytes(range(128))]
    args = FixedArgs.make(ArgPacker(types), values, 3)
    assert bytes(args.mv) == _packed(types, values)
    args.write_lead([1 << 33, 2 << 33, 3 << 33])
    args.write(7, bytes(range(1, 129)))
    want = [1 << 33, 2 << 33, 3 << 33, -5, 0.25, 2**40, 7, bytes(range(1, 129))]
    assert bytes(args.mv) == _packed(types, want) and args.values[7] == want[7]
    assert _sent(args.address, types) == _packed(types, want)


def test_fixed_args_refuse_leading_values_that_are_not_pointer_slots():
    assert FixedArgs.make(ArgPacker(("i32", "ptr")), [1, 16], 1) is None  # a scalar first
    assert FixedArgs.make(ArgPacker(("ptr", "i32")), [16, 1], 2) is None  # a scalar among the pointers
    assert FixedArgs.make(ArgPacker(("ptr",)), [16], 2) is None  # more pointers than values
    assert FixedArgs.make(ArgPacker(("ptr", "i32")), [16], 1) is None  # a value missing


# ---------------------------------------------------------------- FixedLaunch (with TMA descriptors)
def test_fixed_launch_sends_what_the_general_path_sends_as_pointers_change():
    k = _tma_kernel()
    rt = FakeRuntime()
    la = Launcher(k.spec, rt)
    la.tensor_maps = maps = FakeMaps(la.tensor_maps.specs)
    a, b = _fake(torch.randn(130, 64).half()), _fake(torch.randn(130, 64).half())
    values, dyn, dev = la.bind([a, b, 0.5])
    prepared = la.prepare(values, dyn, dev)
    fixed = prepared.fixed(list(values), 2)
    assert isinstance(fixed, FixedLaunch)
    fresh = [_fake(torch.randn(130, 64).half()) for _ in range(3)]
    # the pointers of a, the others, a again: each descriptor follows the pointer it describes
    for x, y in ((a, b), (fresh[0], fresh[1]), (fresh[2], b), (a, fresh[0]), (a, b)):
        ptrs = [x.data_ptr(), y.data_ptr()]
        fixed(list(ptrs))
        got = rt.fn.driver_launches.pop()
        want = _expected(la, ptrs + [0.5], dyn, dev)
        assert got == want[:3] + (0x77,) + want[4:]
        assert want[0] == (3, 1, 1)
    assert not rt.fn.general_launches
    assert maps.encodes == 3  # one descriptor per distinct pointer of A: later launches of one find it cached


def test_fixed_launch_from_another_thread_leaves_the_buffer_alone():
    k = _tma_kernel()
    rt = FakeRuntime()
    la = Launcher(k.spec, rt)
    la.tensor_maps = FakeMaps(la.tensor_maps.specs)
    a, b, c = (_fake(torch.randn(64, 64).half()) for _ in range(3))
    values, dyn, dev = la.bind([a, b, 2.0])
    fixed = la.prepare(values, dyn, dev).fixed(list(values), 2)
    before = bytes(fixed.launch.args.mv)
    done = []

    def other():
        fixed([c.data_ptr(), b.data_ptr()])
        done.append(True)

    th = threading.Thread(target=other)
    th.start()
    th.join()
    assert done and bytes(fixed.launch.args.mv) == before  # the owner's buffer untouched
    assert not rt.fn.driver_launches and len(rt.fn.general_launches) == 1  # the per-thread packing path
    assert rt.fn.general_launches[0] == _expected(la, [c.data_ptr(), b.data_ptr(), 2.0], dyn, dev)


def test_a_refused_fixed_launch_goes_through_the_general_path():
    k = _tma_kernel()
    rt = FakeRuntime()
    la = Launcher(k.spec, rt)
    la.tensor_maps = FakeMaps(la.tensor_maps.specs)
    a, b = _fake(torch.randn(64, 64).half()), _fake(torch.randn(64, 64).half())
    values, dyn, dev = la.bind([a, b, 2.0])
    fixed = la.prepare(values, dyn, dev).fixed(list(values), 2)
    c = _fake(torch.randn(64, 64).half())
    rt.fn.refuse = 1
    fixed([c.data_ptr(), b.data_ptr()], 0x99)
    assert not rt.fn.driver_launches
    got = rt.fn.general_launches.pop()
    want = _expected(la, [c.data_ptr(), b.data_ptr(), 2.0], dyn, dev)
    assert got == want[:3] + (0x99,) + want[4:]


def test_no_fixed_launch_where_a_descriptor_describes_a_value_past_the_pointers():
    k = _tma_kernel()
    la = Launcher(k.spec, FakeRuntime())
    la.tensor_maps = FakeMaps(la.tensor_maps.specs)
    a, b = _fake(torch.randn(64, 64).half()), _fake(torch.randn(64, 64).half())
    values, dyn, dev = la.bind([a, b, 2.0])
    prepared = la.prepare(values, dyn, dev)
    assert prepared.fixed(list(values), 0) is None  # A (described by a descriptor) would not be rewritten


# ---------------------------------------------------------------- BoundKernel.launch_pointers
def test_launch_pointers_packs_once_per_scalars_object():
    k = _tma_kernel()
    rt = FakeRuntime()
    k._launcher = la = Launcher(k.spec, rt)
    la.tensor_maps = FakeMaps(la.tensor_maps.specs)
    bound = BoundKernel(k)
    a, b = _fake(torch.randn(64, 64).half()), _fake(torch.randn(64, 64).half())
    bound(a, b, 2.0)  # binds (every check) and launches through launch_bound
    rt.fn.general_launches.clear()
    _, dyn, dev = la.bind([a, b, 2.0])
    half, double = (0.5,), (2.0,)
    for scalars in (double, double, half, half, double):
        c = _fake(torch.randn(64, 64).half())
        bound.launch_pointers([c.data_ptr(), b.data_ptr()], scalars)
        got = rt.fn.driver_launches.pop()
        want = _expected(la, [c.data_ptr(), b.data_ptr(), scalars[0]], dyn, dev)
        assert got == want[:3] + (0x77,) + want[4:]
    assert not rt.fn.general_launches


def test_launch_pointers_leaves_other_grid_scalars_to_launch_bound():
    n_var = T.dynamic("m")

    @T.prim_func
    def rows(A: T.Tensor((n_var, 32), "float32"), B: T.Tensor((n_var, 32), "float32"), g: T.int32):
        with T.Kernel(g, threads=32) as bx:
            for j in T.Parallel(32):
                B[bx, j] = A[bx, j] + 1.0

    k = tilewright.compile(rows, target="cuda -arch=sm_90a")
    rt = FakeRuntime()
    k._launcher = Launcher(k.spec, rt)
    bound = BoundKernel(k)
    a, b = _fake(torch.randn(8, 32)), _fake(torch.randn(8, 32))
    bound(a, b, 4)
    grids = []
    for g in ((4,), (6,), (4,)):  # the grid reads g: a buffer is made only for the bound call's value
        bound.launch_pointers([a.data_ptr(), b.data_ptr()], g)
        grids.append((rt.fn.driver_launches or rt.fn.general_launches).pop()[0])
    assert grids == [(4, 1, 1), (6, 1, 1), (4, 1, 1)]


def test_launch_pointers_on_a_runtime_without_fixed_launches():
    from test_host_fast_paths import FakeRuntime as PlainRuntime  # its function has launch only (as HIP's)

    k = _tma_kernel()
    rt = PlainRuntime()
    k._launcher = la = Launcher(k.spec, rt)
    la.tensor_maps = FakeMaps(la.tensor_maps.specs)
    bound = BoundKernel(k)
    a, b = _fake(torch.randn(64, 64).half()), _fake(torch.randn(64, 64).half())
    bound(a, b, 2.0)
    scalars = (2.0,)
    for _ in range(3):
        c = _fake(torch.randn(64, 64).half())
        bound.launch_pointers([c.data_ptr(), b.data_ptr()], scalars)
        grid, block, shared, stream, types, values = rt.fn.launches[-1]
        assert tuple(values[:3]) == (c.data_ptr(), b.data_ptr(), 2.0) and stream == 0x77
        ptrs = [c.data_ptr(), b.data_ptr()]
        assert list(values[4:]) == la.tensor_maps.encode(ptrs, {v: 64 for v in k.spec.dyn_vars})
