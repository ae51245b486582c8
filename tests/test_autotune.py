"""The autotuner in TileLang's spelling, on the CPU (the interpreter with the CPU clock), plus its
parallel compile workers on NVRTC and its resource pruning.  No timing is asserted: only which
configurations were refused, pruned, found wrong, and that the chosen kernel is right."""

from __future__ import annotations

import os

import numpy as np
import pytest
from toolchains import needs_nvrtc

import tilewright as tilelang
import tilewright.language as T
from tilewright.autotune import AutoTuner, set_autotune_inputs
from tilewright.autotune import cache as tuning_cache
from tilewright.autotune.prune import judge
from tilewright.autotune.workers import compile_all
from tilewright.target.base import Target


@pytest.fixture(autouse=True)
def _fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEWRIGHT_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TILEWRIGHT_DISABLE_CACHE", raising=False)


def _scale_builder(n, block=64, factor=1.0, dtype="float32"):
    """B = 2 * A; ``factor`` != 1 makes a wrong kernel (to check that the tuner checks)."""

    @T.prim_func
    def scale(A: T.Tensor((n,), dtype), B: T.Tensor((n,), dtype)):
        with T.Kernel(T.ceildiv(n, block), threads=32) as bx:
            for i in T.Parallel(block):
                if bx * block + i < n:
                    B[bx * block + i] = A[bx * block + i] * 2.0 * factor

    return scale


def test_decorator_tunes_checks_and_caches():
    calls = []

    @tilelang.autotune(configs=[{"block": 32}, {"block": 64}, {"block": 128, "factor": 3.0}],
                       ref_prog=lambda a: 2.0 * a, warmup=1, rep=3)
    @tilelang.jit(out_idx=[-1], target="interpret")
    def scale(n, block=64, factor=1.0):
        calls.append(block)
        return _scale_builder(n, block, factor)

    result = scale.tune(1000)
    rows = {r["config"]["block"]: r for r in result.rows}
    assert rows[128]["status"] == "wrong" and "differ from the reference" in rows[128]["reason"]
    assert rows[32]["status"] == rows[64]["status"] == "timed"
    assert result.config["block"] in (32, 64) and not result.from_cache
    a = np.random.default_rng(1).standard_normal(1000).astype(np.float32)
    tuned = scale(1000)
    np.testing.assert_allclose(tuned(a), 2.0 * a.astype(np.float64), rtol=1e-6)
    assert tuned.config == result.config and tuned.latency == result.latency  # TileLang's attributes
    assert "| config | status |" in result.table()
    # a second tuner (a fresh process, as far as memory goes) answers from the tuning cache
    again = scale.tune(1000)
    assert again.from_cache and again.config == result.config
    # every tuning key given: no tuning, the configuration is compiled directly
    n_calls = len(calls)
    k = scale(1000, block=32, factor=1.0)
    np.testing.assert_allclose(k(a), 2.0 * a.astype(np.float64), rtol=1e-6)
    assert len(calls) == n_calls + 1


def test_failing_configurations_are_scored_not_fatal():
    def build(n, block=64):
        if block == 48:
            raise ValueError("not a supported block")
        return _scale_builder(n, block)

    tuner = AutoTuner.from_kernel(build, [{"block": 48}, {"block": 64}]).set_kernel_parameters((256,), {})
    result = tuner.set_compile_args(out_idx=[-1], target="interpret").set_profile_args(warmup=1, rep=2).run()
    bad = [r for r in result.rows if r["config"]["block"] == 48][0]
    assert bad["status"] == "refused" and "not a supported block" in bad["reason"]
    assert result.config == {"block": 64}

    only_bad = AutoTuner.from_kernel(build, [{"block": 48}]).set_kernel_parameters((256,), {})
    with pytest.raises(tilelang.TilewrightError, match="no configuration"):
        only_bad.set_compile_args(out_idx=[-1], target="interpret").run()


def test_autotune_inputs_are_used_and_corrupt_cache_entries_are_misses(tmp_path):
    seen = []
    a = np.arange(256, dtype=np.float32)
    b = np.full(256, np.nan, dtype=np.float32)

    def check(outs, ref):
        seen.append(np.array(outs[-1]))  # no out_idx: every argument, B last

    tuner = AutoTuner.from_kernel(lambda n, block=64: _scale_builder(n, block), [{"block": 64}, {"block": 128}])
    tuner.set_kernel_parameters((256,), {}).set_compile_args(target="interpret")
    tuner.set_profile_args(warmup=1, rep=2, manual_check_prog=check)
    with set_autotune_inputs(a, b):
        first = tuner.run()
    assert len(seen) == 2 and all(np.array_equal(s, 2 * a) for s in seen)
    folder = tuning_cache.tuning_dir()
    for name in os.listdir(folder):
        with open(os.path.join(folder, name), "w") as f:
            f.write('{"best_config": ')  # truncated by a crash
    with set_autotune_inputs(a, b):
        second = tuner.run()
    assert not second.from_cache and second.config in ({"block": 64}, {"block": 128}) and first.config


def test_tuning_keys_given_twice_are_refused():
    tuner = AutoTuner.from_kernel(lambda n, block=64: _scale_builder(n, block), [{"block": 64}])
    tuner.set_kernel_parameters((256,), {"block": 32}).set_compile_args(target="interpret")
    with pytest.raises(tilelang.TilewrightError, match="both as tuned"):
        tuner.run()


@needs_nvrtc
def test_compile_workers_return_launch_specs_and_errors():
    from tilewright.kernels import matmul

    configs = [{"bm": 64}, {"bm": 128}, {"bm": 0}]

    def build(cfg):
        if cfg["bm"] == 0:
            raise ZeroDivisionError("bad tile")
        return matmul(256, 256, 128, cfg["bm"], 64, 32)

    done = compile_all(build, configs, {"target": "cuda -arch=sm_90a"}, workers=2, timeout=120)
    assert [d.index for d in done] == [0, 1, 2]
    # (sm_90a warp-specializes the mainloop: a producer warpgroup joins the 128 threads)
    assert done[0].spec.code_object[:4] == b"\x7fELF" and done[1].spec.num_threads == 128 + 128
    assert done[0].kernel is None  # only the spec crosses the process boundary
    assert "ZeroDivisionError" in done[2].error and done[2].spec is None


def test_pruning_by_resources():
    tgt = Target.parse("cuda -arch=sm_90a")
    verdicts = judge([({"registers": 128, "shared_bytes": 1024, "spills": 0}, 128),
                      ({"registers": 255, "shared_bytes": 1024, "spills": 64}, 128),
                      ({"registers": 64, "shared_bytes": tgt.max_shared_bytes + 1}, 128),
                      ({"registers": 255, "shared_bytes": 0}, 1024)], tgt)
    assert verdicts[0].keep and verdicts[0].warps_per_sm > 0
    assert not verdicts[1].keep and "spills" in verdicts[1].reason
    assert not verdicts[2].keep and "shared memory" in verdicts[2].reason
    assert not verdicts[3].keep and "not one block" in verdicts[3].reason
    # when every candidate spills, spilling is no reason to drop one
    assert judge([({"registers": 255, "spills": 8}, 128)], tgt)[0].keep
