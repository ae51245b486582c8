"""Host API tier: compile / jit / caching / argument checks / export, on the CPU backends and with
NVRTC (which compiles sm_80 and sm_90a code with no GPU present)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from toolchains import needs_nvrtc

import tilewright
import tilewright.language as T
from tilewright import compiler
from tilewright.kernels import matmul, softmax


def test_interpret_out_idx_numpy():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((96, 64)).astype(np.float16)
    b = rng.standard_normal((64, 80)).astype(np.float16)
    k = tilewright.compile(matmul(96, 80, 64, 64, 64, 32), out_idx=[-1], target="interpret")
    c = k(a, b)
    np.testing.assert_allclose(c.astype(np.float64), a.astype(np.float64) @ b.astype(np.float64), atol=0.05)


def test_interpret_with_torch_cpu_tensors():
    torch = pytest.importorskip("torch")
    x = torch.randn(8, 256)
    y = tilewright.compile(softmax(8, 256), out_idx=[-1], target="interpret")(x)
    assert isinstance(y, np.ndarray) or hasattr(y, "shape")
    np.testing.assert_allclose(np.asarray(y), torch.softmax(x.double(), -1).numpy(), rtol=1e-5, atol=1e-6)


def test_argument_errors_name_the_parameter():
    k = tilewright.compile(softmax(8, 256), out_idx=[-1], target="interpret")
    with pytest.raises(tilewright.ArgumentError):
        k(np.zeros((8, 128), np.float32))
    with pytest.raises(tilewright.ArgumentError, match="input"):
        k()


def test_jit_memoizes_per_arguments():
    calls = []

    @tilewright.jit(out_idx=[-1], target="interpret")
    def gemm(M, N, K):
        calls.append((M, N, K))
        return matmul(M, N, K, 64, 64, 32)

    k1 = gemm(64, 64, 64)
    k2 = gemm(64, 64, 64)
    assert k1 is k2 and len(calls) == 1
    gemm(128, 64, 64)
    assert len(calls) == 2


@needs_nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_cuda_compile_resources_and_code_object(arch, tmp_path, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path))
    k = tilewright.compile(matmul(512, 512, 512), target=f"cuda -arch={arch}")
    assert k.get_code_object()[:4] == b"\x7fELF"
    ru = k.resource_usage
    for key in ("registers", "shared_bytes", "local_bytes", "spills"):
        assert key in ru
    assert ru["spills"] == 0 and 0 < ru["registers"] <= 255
    src = k.get_kernel_source()
    if arch == "sm_80":
        assert "mma.sync.aligned.m16n8k16" in src and "ldmatrix" in src and "cp.async" in src
    else:  # the sm_90a default: a TMA producer warpgroup feeding wgmma consumers
        assert "wgmma.mma_async" in src and "cp.async.bulk.tensor" in src and "setmaxnreg" not in src
        assert "mma.sync" not in src and k.resource_usage.get("local_bytes", 0) == 0


@needs_nvrtc
def test_disk_cache_hit_skips_compilation(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path))
    f = matmul(256, 256, 128, 64, 64, 32)
    k1 = tilewright.compile(f, target="cuda -arch=sm_80")
    assert any(os.scandir(tmp_path))
    compiler._memo_by_obj.clear()
    compiler._memo_by_text.clear()
    called = []
    monkeypatch.setattr(compiler, "fill_code_object", lambda *a, **kw: called.append(1))
    k2 = tilewright.compile(f, target="cuda -arch=sm_80")
    assert not called and k2.get_code_object() == k1.get_code_object()
    assert k2.resource_usage == k1.resource_usage


@needs_nvrtc
def test_repeated_compile_is_a_memo_hit(monkeypatch):
    """Compiling an identical program again returns the same kernel without running any pass
    (how fast that is, is measured by bench/gemm.py, not here)."""
    k1 = tilewright.compile(matmul(256, 256, 256, 64, 64, 32), target="cuda -arch=sm_80")

    def no_passes(*a, **kw):
        raise AssertionError("the pipeline ran again")

    monkeypatch.setattr("tilewright.passes.pipeline.run_pipeline", no_passes)
    k2 = tilewright.compile(matmul(256, 256, 256, 64, 64, 32), target="cuda -arch=sm_80")
    assert k2 is k1


def test_emulator_backend_cuda_and_hip():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((64, 64)).astype(np.float16)
    b = rng.standard_normal((64, 64)).astype(np.float16)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    for tgt in ("cuda -arch=sm_90a", "hip -arch=gfx942", "hip -arch=gfx1100"):
        c = tilewright.compile(matmul(64, 64, 64, 64, 64, 32), out_idx=[-1], target=tgt,
                               execution_backend="emulator")(a, b)
        np.testing.assert_allclose(c.astype(np.float64), ref, atol=0.06)


def test_export_writes_extension_sources(tmp_path):
    m = T.dynamic("m")
    k = tilewright.compile(matmul(m, 128, 64, 64, 64, 32), target="hip -arch=gfx942", execution_backend="emulator")
    out = k.export(str(tmp_path / "ext"))
    files = sorted(os.listdir(out))
    assert files == ["build.py", "kernel.hip", "launcher.cpp"]
    launcher = open(os.path.join(out, "launcher.cpp")).read()
    assert "gemm_kernel<<<" in launcher and "A.size(0)" in launcher and "-lamdhip64" in open(
        os.path.join(out, "build.py")).read()


def test_target_parsing():
    from tilewright.target import Target

    assert Target.parse("cuda -arch=sm_90a").has("wgmma")
    assert Target.parse({"kind": "hip", "arch": "gfx90a"}).warp_size == 64
    assert Target.parse("rocm -arch=gfx1100").warp_size == 32
    with pytest.raises(tilewright.TilewrightError):
        Target.parse("cuda -arch=sm_70")


def test_optimize_level_trades_prefetch_for_registers():
    from tilewright.ir.thread_printer import print_thread_kernel

    f = matmul(256, 256, 256, 128, 128, 32)
    fast = print_thread_kernel(tilewright.lower(f, target="cuda -arch=sm_80", optimize_level=2))
    lean = print_thread_kernel(tilewright.lower(f, target="cuda -arch=sm_80", optimize_level=1))
    assert fast.count("ldmatrix") > lean.count("ldmatrix")  # the prefetch loads the next K step too
    # sm_90a: level 2 warp-specializes the mainloop (a producer warpgroup), level 1 does not
    assert tilewright.lower(f, target="cuda -arch=sm_90a", optimize_level=2).num_threads == 256
    assert tilewright.lower(f, target="cuda -arch=sm_90a", optimize_level=1).num_threads == 128
    with pytest.raises(tilewright.CompileError):
        tilewright.compile(f, optimize_level=7, target="interpret")


def test_reduction_of_rows_not_split_by_thread_bits():
    """Rows of 192 elements over 128 threads: the shuffle tree does not apply, the reduction goes
    through shared memory, on every target."""
    from zoo import layernorm, layernorm_ref

    M, N = 40, 192
    rng = np.random.default_rng(3)
    x = rng.standard_normal((M, N)).astype(np.float32)
    g, b = rng.standard_normal(N).astype(np.float32), rng.standard_normal(N).astype(np.float32)
    for tgt in ("cuda -arch=sm_90a", "hip -arch=gfx942", "hip -arch=gfx1100"):
        y = np.full((M, N), np.nan, np.float32)
        tilewright.compile(layernorm(M, N, 16), target=tgt, execution_backend="emulator")(x, g, b, y)
        np.testing.assert_allclose(y, layernorm_ref(x, g, b), rtol=1e-4, atol=1e-4, err_msg=tgt)


def test_dump_dir_writes_ir_after_every_pass_and_the_source(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_DUMP_DIR", str(tmp_path))
    monkeypatch.setenv("TILEWRIGHT_DISABLE_CACHE", "1")
    f = matmul(128, 128, 64, 64, 64, 32)
    tilewright.compile(f, target="hip -arch=gfx942", execution_backend="emulator")
    files = set(os.listdir(tmp_path / f.name))
    for name in ("after_pipeline_loops.py", "after_expand_tile_ops.py", "after_infer_layouts.py",
                 "after_insert_barriers.py", "plans.txt", "thread_ir.txt", "kernel.hip"):
        assert name in files, files
    assert "T.prim_func" in (tmp_path / f.name / "after_pipeline_loops.py").read_text()
    assert "mfma" in (tmp_path / f.name / "plans.txt").read_text()


def test_fp8_gemm_on_amd_uses_mfma_and_emulates_correctly():
    import ml_dtypes

    rng = np.random.default_rng(5)
    f = matmul(128, 128, 128, 64, 64, 32, dtype="float8_e4m3fnuz", out_dtype="float32", num_stages=2)
    a = rng.standard_normal((128, 128)).astype(ml_dtypes.float8_e4m3fnuz)
    b = rng.standard_normal((128, 128)).astype(ml_dtypes.float8_e4m3fnuz)
    k = tilewright.compile(f, out_idx=[-1], target="hip -arch=gfx942", execution_backend="emulator")
    np.testing.assert_allclose(k(a, b), a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-4)
    assert "__builtin_amdgcn_mfma_f32_" in k.get_kernel_source() and "fp8" in k.get_kernel_source()
    try:
        from tilewright.toolchain.hip import disassemble

        co = k.get_code_object()
    except tilewright.ToolchainError:
        pytest.skip("no HIP-capable compiler here")
    assert any("v_mfma" in line and "fp8" in line for line in disassemble(co).splitlines())
    assert k.resource_usage["spills"] == 0


def test_causal_flash_attention_on_the_emulator():
    """Block-dependent trip counts (causal masking) around pipelined waits run block by block."""
    from tilewright.kernels import flash_attention

    S, D = 96, 64
    rng = np.random.default_rng(11)
    q, k, v = [rng.standard_normal((1, S, 1, D)).astype(np.float16) for _ in range(3)]
    qd, kd, vd = [x.astype(np.float64)[0, :, 0, :] for x in (q, k, v)]
    s = qd @ kd.T / np.sqrt(D) + np.triu(np.full((S, S), -np.inf), 1)
    p = np.exp(s - s.max(-1, keepdims=True))
    ref = (p / p.sum(-1, keepdims=True)) @ vd
    for tgt in ("cuda -arch=sm_90a", "hip -arch=gfx942", "hip -arch=gfx1100"):
        o = np.full_like(q, np.nan)
        tilewright.compile(flash_attention(1, 1, S, D, is_causal=True), target=tgt, execution_backend="emulator")(
            q, k, v, o)
        np.testing.assert_allclose(o[0, :, 0, :].astype(np.float64), ref, atol=2e-3, err_msg=tgt)


def test_cli_info_and_source(capsys):
    from tilewright.cli.main import main

    assert main(["info"]) == 0
    assert "detected target" in capsys.readouterr().out
    path = os.path.join(os.path.dirname(__file__), "tilelang_quickstart.py")
    assert main(["source", f"{path}:matmul", "128", "128", "64", "64", "64", "32", "--target", "hip -arch=gfx1100"]) == 0
    out = capsys.readouterr().out
    assert "gemm_kernel" in out and "__builtin_amdgcn_wmma" in out


@needs_nvrtc
def test_fast_argument_path_matches_the_checked_one(monkeypatch):
    """GPU torch tensors take a short path to the launch; exercised here with CPU tensors that report
    is_cuda, and a recording stand-in for the launch."""
    torch = pytest.importorskip("torch")
    from tilewright.runtime.launcher import Launcher

    m = T.dynamic("m")

    @T.prim_func
    def scale(A: T.Tensor((m, 64), "float32"), B: T.Tensor((m, 64), "float32"), s: T.float32):
        with T.Kernel(T.ceildiv(m, 16), threads=64) as bx:
            for i, j in T.Parallel(16, 64):
                if bx * 16 + i < m:
                    B[bx * 16 + i, j] = A[bx * 16 + i, j] * s

    k = tilewright.compile(scale, target="cuda -arch=sm_90a")
    launches, synced = [], []

    class Recorder:
        def launch(self, *args):
            launches.append(args)

    class FakeRuntime:  # stands in for runtime.cuda_driver: what the launcher asks of a vendor
        def load_function(self, code_object, name, dev):
            assert code_object == k.code_object and name == k.kernel_name
            return Recorder()

        def current_stream(self, dev):
            return 0

        def synchronize(self, dev):
            synced.append(dev)

    k._launcher = Launcher(k.spec, FakeRuntime())

    class ClaimsCuda(torch.Tensor):
        @property
        def is_cuda(self):
            return True

    a = torch.randn(40, 64).as_subclass(ClaimsCuda)
    b = torch.empty(40, 64).as_subclass(ClaimsCuda)
    k(a, b, 2)
    grid, block, smem, stream, types, values = launches[-1]
    assert grid == (3, 1, 1) and block == (64, 1, 1)
    assert types == ("ptr", "ptr", "f32", "i32")
    assert values == (a.data_ptr(), b.data_ptr(), 2.0, 40)
    monkeypatch.setenv("TILEWRIGHT_SYNC_LAUNCH", "1")
    k(a, b, 2)
    assert synced == [a.device.index or 0]
    monkeypatch.delenv("TILEWRIGHT_SYNC_LAUNCH")
    # a mismatch leaves the short path; the checked path names the problem
    with pytest.raises(tilewright.ArgumentError, match="dtype"):
        k(a, torch.empty(40, 64, dtype=torch.float16).as_subclass(ClaimsCuda), 2.0)


def test_pass_config_enum_keys_mean_their_value():
    f = matmul(256, 256, 256, 128, 128, 32)
    k = tilewright.compile(f, target="cuda -arch=sm_90a", execution_backend="emulator",
                           pass_configs={tilewright.PassConfigKey.TW_DISABLE_GEMM_PREFETCH: True})
    assert k.options["tw.disable_gemm_prefetch"] is True
