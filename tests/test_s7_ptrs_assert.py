"""``T.device_assert(cond, msg)`` on a run-time condition (TileLang issue 2307): every executing thread checks it;
the interpreter and the emulator raise DeviceAssertError naming the message, block and thread of the first
failing one; CUDA prints that and traps, HIP traps.  A passing assert changes no result."""

from __future__ import annotations

import numpy as np
import pytest
from toolchains import needs_hip_compiler, needs_nvrtc
from zoo import close, f64, poisoned

import tilewright as tw
import tilewright.language as T
from tilewright.interp.device_assert import DeviceAssertError

BACKENDS = [("interpret", None, 1), ("cuda -arch=sm_90a", "emulator", 1), ("hip -arch=gfx942", "emulator", 2)]


def finite_scores(threads=32):
    """issue 2307: the assert reads a fragment in a partitioned T.Parallel loop under a condition."""

    @T.prim_func
    def main(score: T.Tensor((16,), T.float32), out: T.Tensor((16,), T.float32)):
        with T.Kernel(1, threads=threads):
            frag = T.alloc_fragment(32, T.float32)
            for i in T.Parallel(32):
                if i < 16:
                    frag[i] = score[i]
                else:
                    frag[i] = T.infinity(T.float32)
            for i in T.Parallel(32):
                if i < 16:
                    T.device_assert(T.isfinite(frag[i]), "score must be finite")
            for i in T.Parallel(16):
                out[i] = frag[i] * 3

    return main


def in_range(n, threads=32):
    """A scalar-thread assert on an index read from the input, with the block in the message."""

    @T.prim_func
    def main(idx: T.Tensor((4, threads), T.int32), src: T.Tensor((n,), T.float32), out: T.Tensor((4, threads),
                                                                                                   T.float32)):
        with T.Kernel(4, threads=threads) as bx:
            tx = T.get_thread_binding(0)
            j = idx[bx, tx]
            T.device_assert(j < n)
            out[bx, tx] = src[j]

    return main


@pytest.mark.parametrize("target,backend,scale", BACKENDS)
def test_passing_assert_changes_nothing_and_failing_one_raises(target, backend, scale):
    kern = tw.compile(finite_scores(32 * scale), target=target, execution_backend=backend)
    s = np.random.default_rng(2307).standard_normal(16).astype(np.float32)
    out = poisoned((16,))
    kern(s, out)
    close(out, 3 * f64(s))
    s[5] = np.nan
    thread = r"\(T.Parallel iteration \(5,\)\)" if target == "interpret" else r"\d+"
    with pytest.raises(DeviceAssertError, match=rf"failed in block \(0, 0, 0\) thread {thread}: score must be finite"):
        kern(s, poisoned((16,)))


@pytest.mark.parametrize("target,backend,scale", BACKENDS)
def test_assert_names_the_failing_block_and_thread(target, backend, scale):
    threads, n = 32 * scale, 100
    kern = tw.compile(in_range(n, threads), target=target, execution_backend=backend)
    rng = np.random.default_rng(5)
    idx = rng.integers(0, n, size=(4, threads)).astype(np.int32)
    src = rng.standard_normal(n).astype(np.float32)
    out = poisoned((4, threads))
    kern(idx, src, out)
    close(out, f64(src)[idx])
    idx[2, 7] = n
    with pytest.raises(DeviceAssertError, match=r"T.device_assert\(.*\) failed in block \(2, 0, 0\) thread 7: "
                                                r"assertion failed"):
        kern(idx, src, poisoned((4, threads)))


def test_constant_false_assert_is_still_a_compile_error():
    with pytest.raises(tw.errors.CompileError, match="T.device_assert failed: never"):
        @T.prim_func
        def main(out: T.Tensor((4,), T.float32)):
            with T.Kernel(1, threads=32):
                T.device_assert(False, "never")
                out[0] = 1.0


@needs_nvrtc
def test_cuda_prints_and_traps():
    kern = tw.compile(finite_scores(), target="cuda -arch=sm_90a")
    src = kern.get_kernel_source()
    assert "__trap();" in src and 'tw_device_assert_with_msg(isfinite(' in src and '"score must be finite"' in src
    assert "for (int i = 0; i < 32; ++i)" not in src  # the loop is partitioned over the threads (issue 2307)
    assert kern.get_code_object()[:4] == b"\x7fELF"


@needs_hip_compiler
def test_hip_traps():
    kern = tw.compile(finite_scores(64), target="hip -arch=gfx942")
    assert "__builtin_trap();" in kern.get_kernel_source()
    assert kern.get_code_object()[:4] == b"\x7fELF"
