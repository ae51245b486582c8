"""The session-12 decode candidates (bench/decode_splits.py ``S12_GQA`` / ``S12_MQA``): "gcount" (a captured split
call's merge counters from the device's pool, no fill kernel a call in the graph), "pdl" / "pdlwait" (programmatic
dependent launch: griddepcontrol.wait first, then launch_dependents or not).

In the CPU emulator of their per-thread code for sm_90a (TMA, mbarriers, clusters for cmerge) and sm_80 (cp.async;
no griddepcontrol there), against float64 on fresh random inputs with every allocation of the op poisoned (NaN):
GQA group 4 at head dim 128 and MQA 32 rows ("cover"), ragged cache lengths (0, lengths off the key block), the
LSE, fp16/bf16, the merge counters left at zero; what the compiler makes of ``T.pdl_sync`` / ``T.pdl_trigger``
(the instructions where the target has them, the launch spec's programmatic flag, nothing before the wait); the
capture counters' bookkeeping with the driver's capture query stood in; the H200 kernels built with NVRTC without
spills."""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")

from test_s8_decode_variants import SMEM, _run  # noqa: E402
from test_s9_decode_cmerge import emulate  # noqa: E402, F401  (the fixture)
from toolchains import needs_nvrtc  # noqa: E402

import tilewright  # noqa: E402
from tilewright import language as T  # noqa: E402

dk = importlib.import_module("tilewright.ops.decode_kernels")

SM90, SM80 = SMEM

CASES = [  # (B, H, Hkv, S, D, dtype, lens, splits), variant, target
    ((2, 8, 2, 600, 128, torch.bfloat16, [600, 131], 4), "tmerge,gcount,pdl", SM90),    # one set of 4, the default's
    ((2, 8, 2, 700, 128, torch.float16, [699, 0], 6), "tmerge,pdlwait", SM90),          # three sets of 2, empty seq
    ((2, 8, 2, 500, 128, torch.float16, [500, 1], 1), "tmerge,pdl", SM90),              # no split: no merge at all
    ((2, 8, 2, 600, 128, torch.bfloat16, [600, 70], 4), "tmerge,gcount,pdl", SM80),     # sm_80: no griddepcontrol
    ((2, 32, 1, 1100, 128, torch.float16, [1100, 300], 16), "cmerge,cover,gcount,pdl", SM90),  # MQA, clusters of 8
    ((2, 32, 1, 2100, 128, torch.bfloat16, [2100, 129], 16), "cover,tmerge,gcount,pdl", SM90),  # MQA, two sets of 8
]


@needs_nvrtc
@pytest.mark.parametrize("case, variant, target", CASES,
                         ids=["gqa-s4", "gqa-s6-wait", "gqa-s1", "sm80", "mqa-cmerge", "mqa-tmerge"])
def test_candidates_against_float64(emulate, case, variant, target):  # noqa: F811
    built = emulate(target, variant)
    _run(*case, seed=hash((variant, case[7])) % 1000)
    (key,) = built
    assert key[6] == case[7] and key[-1] == tuple(sorted(variant.split(",")))


def _source_of(variant, target, splits=4, heads=(32, 8), block_H=16):
    from tilewright.codegen.cuda import print_cuda
    from tilewright.passes.pipeline import PassContext, run_pipeline
    from tilewright.target import Target

    f = dk.decode_fwd(*heads, 128, "bfloat16", False, splits, False, False, block_H, 64, 2, 128, variant)
    return print_cuda(run_pipeline(f, PassContext(Target.parse(target), {"optimize_level": 2})))


@pytest.mark.parametrize("variant, wait, trigger", [(("pdl", "tmerge"), 1, 1), (("pdlwait", "tmerge"), 1, 0),
                                                    (("tmerge",), 0, 0)])
def test_griddepcontrol_comes_first_on_sm90(variant, wait, trigger):
    """The wait (and the trigger after it) before the kernel's first access to global memory; once each."""
    src = _source_of(variant, SM90)
    assert src.count("griddepcontrol.wait;") == wait
    assert src.count("griddepcontrol.launch_dependents;") == trigger
    if wait:
        body = src[src.index("griddepcontrol.wait;"):]
        before = src[:src.index("griddepcontrol.wait;")]
        kernel = before[before.index("__global__"):]
        for name in ("Q[", "Lens[", "K[", "V[", "Opart[", "Cnt["):
            assert name not in kernel, f"{name} used before the wait"
        assert "Q[" in body or "Q +" in body or "(Q" in body


def test_no_griddepcontrol_before_sm90():
    src = _source_of(("pdl", "tmerge"), SM80)
    assert "griddepcontrol." not in src.replace("// griddepcontrol.", "")


def _pdl_kernel(wait=True):
    @T.prim_func
    def main(A: T.Tensor((128,), "float32"), B: T.Tensor((128,), "float32")):
        with T.Kernel(2, threads=64) as (bx,):
            if wait:
                T.pdl_sync()
            T.pdl_trigger()
            for i in T.Parallel(64):
                B[bx * 64 + i] = A[bx * 64 + i] + 1.0

    return main


@needs_nvrtc
@pytest.mark.parametrize("target, wait, programmatic", [("cuda -arch=sm_90a", True, True),
                                                        ("cuda -arch=sm_90a", False, False),
                                                        ("cuda -arch=sm_80", True, False)])
def test_launch_spec_is_programmatic_where_the_kernel_waits(target, wait, programmatic):
    """A kernel with ``T.pdl_sync`` compiled for sm_90+ is launched with programmatic stream serialization;
    without the wait (a trigger alone) or before sm_90 it is launched as every other kernel."""
    import numpy as np

    k = tilewright.compile(_pdl_kernel(wait), target=target, execution_backend="emulator")
    assert k.spec.programmatic is programmatic
    a = np.random.default_rng(3).standard_normal(128).astype(np.float32)
    b = np.full(128, np.nan, np.float32)
    k(a, b)
    np.testing.assert_allclose(b, a.astype(np.float64) + 1, rtol=1e-6)


class _FakeFunction:
    """What ``CudaFunction.launch_programmatic`` reads of a function (the driver module stood in)."""

    def __init__(self, driver):
        self._driver = driver
        self._launch_fn = None
        self.typed_launch = object()
        self._typed_handle = 5


def test_programmatic_launch_passes_the_attribute():
    """``launch_programmatic`` makes a launch of the same call shape that passes cuLaunchKernelEx one config per
    (grid, block, shared, stream) with the programmatic-serialization attribute; the typed launch is off."""
    drv = pytest.importorskip("cuda.bindings.driver")
    from tilewright.runtime.cuda_driver import CudaFunction

    calls = []

    class Driver:
        CUlaunchAttribute, CUlaunchAttributeID, CUlaunchConfig, CUstream = (
            drv.CUlaunchAttribute, drv.CUlaunchAttributeID, drv.CUlaunchConfig, drv.CUstream)

        @staticmethod
        def cuLaunchKernelEx(cfg, handle, params, extra):
            calls.append((cfg, handle, params, extra))
            return (0,)

    fn = _FakeFunction(Driver)
    CudaFunction.launch_programmatic(fn)
    assert fn.typed_launch is None
    for stream in (7, 7, 9):
        assert fn._launch_fn("h", 4, 8, 8, 128, 1, 1, 70000, stream, 1234, 0) == (0,)
    (c1, h, p, e), (c2, *_), (c3, *_) = calls
    assert c1 is c2 and c3 is not c1 and (h, p, e) == ("h", 1234, 0)
    assert (c1.gridDimX, c1.gridDimY, c1.gridDimZ, c1.blockDimX, c1.sharedMemBytes) == (4, 8, 8, 128, 70000)
    assert int(c3.hStream) == 9 and c1.numAttrs == 1
    attr = c1.attrs[0]
    assert attr.id == drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    assert attr.value.programmaticStreamSerializationAllowed == 1


def test_capture_counters_a_slice_per_capture_and_stream(monkeypatch):
    """"gcount": calls captured on one stream of one capture share a slice of the pool; another stream or another
    capture gets a slice of its own; a call needing more gets a new slice; no pool, no capture id or a used-up
    pool: None (the caller makes zeros of its own)."""
    from tilewright.runtime import cuda_driver

    pool = torch.zeros(100, dtype=torch.int32)
    monkeypatch.setattr(dk, "_counter_pools", {0: [pool, 0]})
    monkeypatch.setattr(dk, "_graph_counters", {})
    state = {"stream": 7, "seq": 1}
    monkeypatch.setattr(dk, "_stream", lambda dev: state["stream"])
    monkeypatch.setattr(cuda_driver, "capture_sequence", lambda stream: state["seq"])

    a = dk._capture_counters("cpu", 0, 10)
    b = dk._capture_counters("cpu", 0, 10)
    assert a.data_ptr() == b.data_ptr() and a.numel() == 10
    state["stream"] = 8  # a stream the capture forked into
    c = dk._capture_counters("cpu", 0, 10)
    state["stream"], state["seq"] = 7, 2  # another capture
    d = dk._capture_counters("cpu", 0, 10)
    bigger = dk._capture_counters("cpu", 0, 30)
    starts = {t.data_ptr() for t in (a, c, d, bigger)}
    assert len(starts) == 4 and bigger.numel() == 30
    assert dk._counter_pools[0][1] == 60  # (10 + 10 + 10 + 30)
    assert dk._capture_counters("cpu", 0, 41) is None  # (a new slice of 41 would end at 101 > 100)
    assert dk._capture_counters("cpu", 0, 30).data_ptr() == bigger.data_ptr()
    assert dk._capture_counters("cpu", 1, 4) is None  # no pool on device 1
    state["seq"] = None
    assert dk._capture_counters("cpu", 0, 4) is None  # not capturing (or no answer)
    assert int(pool.abs().sum()) == 0


@needs_nvrtc
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("variant, splits, heads, block_H", [
    (("gcount", "pdl", "tmerge"), 4, (32, 8), 16), (("pdlwait", "tmerge"), 4, (32, 8), 16),
    (("cmerge", "cover", "gcount", "pdl"), 32, (32, 1), 32), (("cover", "gcount", "pdl", "tmerge"), 32, (32, 1), 32)])
def test_h200_kernels_build_without_spills(dtype, variant, splits, heads, block_H):
    """The benchmark's kernels (32 heads on 8 kv heads, or on 1 with "cover": 32-row blocks; d 128) for the H200:
    no spills, within 227 KiB."""
    from tilewright.codegen.cuda import print_cuda
    from tilewright.passes.pipeline import PassContext, run_pipeline
    from tilewright.target import Target
    from tilewright.toolchain import nvrtc

    f = dk.decode_fwd(*heads, 128, dtype, False, splits, False, False, block_H, 64, 2, 128, variant)
    k = run_pipeline(f, PassContext(Target.parse(SM90), {"optimize_level": 2}))
    assert k.shared_bytes <= SMEM[SM90]
    res = nvrtc.compile_cuda(print_cuda(k), "sm_90a", [k.name]).resources[k.name]
    assert res["spills"] == 0 and res["local_bytes"] == 0, res


def _captured_calls(variant, pool):
    """Two split calls of ``variant`` "captured" (the capture stood in, as test_s8_host_plans does: a repeat call's run
    hands the call to the checked path, as ``_DecodeRun.run`` does when its capture query says so, and the checked
    path's query says a capture is on; capture 42 on stream 7) after a planning call outside it, each checked against
    float64: (the ``zeros`` the captured calls made, the capture slices, the plan's counters)."""
    from test_s6_host_plans import PointerKernel
    from test_s8_host_plans import CountingTorch, _decode_ref, wrap_op_kernels

    from tilewright import ops
    from tilewright.runtime import cuda_driver

    ad = importlib.import_module("tilewright.ops.attention_dispatch")

    class ZerosCounting(CountingTorch):
        @staticmethod
        def zeros(*shape, **kw):
            CountingTorch.made.append("zeros")
            return torch.zeros(*shape, **kw)

    g = torch.Generator().manual_seed(12)
    q, k, v = (torch.randn(*s, generator=g).half() for s in ((1, 4, 1, 32), (1, 2, 300, 32), (1, 2, 300, 32)))
    want, _ = _decode_ref(q, k, v)
    with pytest.MonkeyPatch.context() as mp:
        wrap_op_kernels(mp, PointerKernel)
        mp.setattr(ad, "_torch", lambda: ZerosCounting())
        mp.setattr(dk, "_counter_pools", {-1: [pool, 0]})  # (the CPU's device index: the calls' tensors are there)
        mp.setattr(dk, "_graph_counters", {})
        mp.setattr(dk, "_stream", lambda dev: 7)
        mp.setattr(cuda_driver, "capture_sequence", lambda stream: 42)
        mp.setenv("TILEWRIGHT_DECODE_VARIANT", variant)
        ad.forget_plans()
        try:
            mp.setattr(dk, "_capturing", lambda dev: False)
            ops.attention(q, k, v, num_splits=4)  # (the plan, made outside the capture)
            mp.setattr(dk._DecodeRun, "run", lambda self, *args: None)
            mp.setattr(dk, "_capturing", lambda dev: True)
            CountingTorch.made.clear()
            for _ in range(2):
                got = ops.attention(q, k, v, num_splits=4)
                assert (got.double() - want).abs().max().item() < 2e-2
            (plan,) = dk._plans.values()
            return CountingTorch.made.count("zeros"), dict(dk._graph_counters), plan.counters
        finally:
            ad.forget_plans()


def test_a_captured_gcount_call_makes_no_zeros():
    """"gcount": the captured split calls take their counters from the pool's slice of their capture and stream (no
    ``zeros``, a fill kernel on a GPU, a call); the two calls share the slice and leave it zero.  Without gcount:
    zeros every call, the pool untouched."""
    pool = torch.zeros(1000, dtype=torch.int32)
    zeros, slices, n = _captured_calls("tmerge,gcount", pool)
    assert zeros == 0 and slices == {(-1, 42, 7): (0, n)} and n > 0
    assert int(pool.abs().sum()) == 0
    zeros, slices, _ = _captured_calls("tmerge", pool)
    assert zeros == 2 and slices == {}
