#!/usr/bin/env bash
# One device call's worth of checks and benchmarks, in parts (run on the H200 from the tree):
#   TW_COMMIT=<hash> bash bench/device_session.sh tests gemm overhead sanitize     # call A
#   TW_COMMIT=<hash> bash bench/device_session.sh attention memory tilelang fuzz    # call B
# Each part has its own time limit; logs go to $OUT, and only the result tables this call wrote are
# copied there (the device tool brings back a limited number of files).  A short summary is printed last.
set -u
OUT=${OUT:-/tmp/tw-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD
MARK=$(mktemp); SUMMARY="$OUT/summary.txt"; : >"$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }
for part in "$@"; do
  case $part in
    tests)
      timeout 420 python -m pytest -q -p no:cacheprovider -n 8 tests/test_gpu*.py tests/test_*gpu*.py \
        tests/test_regress_frontend.py tests/test_cuda_driver.py tests/test_tensor_args.py tests/test_llama_dropin.py \
        tests/test_ops_attention_hopper.py tests/test_launch_stub_driver.py tests/test_s6_gemm_streamk.py \
        >"$OUT/gpu-tests.log" 2>&1
      note "tests rc=$?: $(grep -E '[0-9]+ (passed|failed)' "$OUT/gpu-tests.log" | tail -1)"
      grep -E "^FAILED|^ERROR" "$OUT/gpu-tests.log" | head -20 | tee -a "$SUMMARY"
      # the GPU tests of files that are mostly CPU tests (their names say gpu)
      timeout 150 python -m pytest -q -p no:cacheprovider -n 8 -k gpu tests/test_regress_crashes.py \
        tests/test_attention_overlap.py tests/test_ieee_math.py tests/test_cast_modes.py tests/test_rng.py \
        tests/test_s7_fp8_saturation.py tests/test_s7_attn_even.py tests/test_s7_frag_*.py \
        >"$OUT/gpu-tests-mixed.log" 2>&1
      note "mixed-file GPU tests rc=$?: $(grep -E '[0-9]+ (passed|failed)' "$OUT/gpu-tests-mixed.log" | tail -1)"
      grep -E "^FAILED|^ERROR" "$OUT/gpu-tests-mixed.log" | head -20 | tee -a "$SUMMARY" ;;
    decode)
      timeout 120 python bench/decode_timeline.py >"$OUT/decode.log" 2>&1; note "decode rc=$?"
      grep "^|" "$OUT/decode.log" >>"$SUMMARY" ;;
    decode-splits)
      timeout 300 python bench/decode_splits.py >"$OUT/decode-splits.log" 2>&1; note "decode-splits rc=$?"
      grep "^|" "$OUT/decode-splits.log" | tail -16 >>"$SUMMARY" ;;
    gemm)
      timeout 330 python bench/gemm.py >"$OUT/gemm.log" 2>&1; note "gemm rc=$?"
      grep -E "^\| |gmean|geometric|Compile" "$OUT/gemm.log" | tail -40 >>"$SUMMARY" ;;
    overhead)
      timeout 120 python bench/launch_overhead.py --n 500 >"$OUT/overhead.log" 2>&1; note "overhead rc=$?"
      grep "^|" "$OUT/overhead.log" >>"$SUMMARY" ;;
    sanitize)
      for tool in memcheck racecheck; do
        timeout 120 compute-sanitizer --tool $tool --report-api-errors no python bench/sanitize_one_gemm.py \
          >"$OUT/$tool-gemm.log" 2>&1
        note "$tool rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$tool-gemm.log" | tr '\n' ' ') $(grep -c 'max relative' "$OUT/$tool-gemm.log") checked runs"
        grep "max relative" "$OUT/$tool-gemm.log" >>"$SUMMARY"
      done ;;
    attention)
      timeout 200 python bench/attention.py >"$OUT/attention.log" 2>&1; note "attention rc=$?"
      grep -E "^\| (dtype|bfloat16|float16)|Geometric" "$OUT/attention.log" | tail -36 >>"$SUMMARY" ;;
    memory)
      timeout 200 python bench/memory.py >"$OUT/memory.log" 2>&1; note "memory rc=$?"
      grep "^|" "$OUT/memory.log" | tail -30 >>"$SUMMARY" ;;
    tilelang)
      # a test hanging on the GPU is not stopped by the per-test alarm: shards are killed after 150 s
      # and the test they were running is reported as hung (twice the run did not finish without it)
      timeout 280 python scripts/tilelang_tests.py --tests-dir .tltests --jobs 14 --timeout 60 --shard-timeout 150 \
        --report "$OUT/tilelang-tests.md" >"$OUT/tilelang.log" 2>&1; note "tilelang rc=$?"
      head -30 "$OUT/tilelang-tests.md" >>"$SUMMARY" 2>/dev/null ;;
    fuzz)
      python bench/fuzz_many.py --jobs 14 --cases "${FUZZ_CASES:-2800}" --gpu --backends interpret,emulator:sm_90a --seed "${FUZZ_SEED:-9000}" \
        --templates "${FUZZ_TEMPLATES:-}" --time-limit "${FUZZ_LIMIT:-150}" >"$OUT/fuzz.log" 2>&1; note "fuzz rc=$?"
      head -3 "$OUT/fuzz.log" >>"$SUMMARY"; grep -E "^\| all|^case " "$OUT/fuzz.log" | head -20 >>"$SUMMARY" ;;
    autotune)
      # tilewright's side of issue 10's autotuner figure (TileLang's wheels are not on the device: see
      # bench/results/2026-12-01-0949-autotune-vs-tilelang-* for the side-by-side run)
      timeout 200 python bench/autotune_vs_tilelang.py >"$OUT/autotune.log" 2>&1; note "autotune rc=$?"
      grep "^|" "$OUT/autotune.log" >>"$SUMMARY" ;;
    hostprof)
      timeout 120 python bench/profile_host.py >"$OUT/profile-host.log" 2>&1; note "hostprof rc=$? (log profile-host.log)" ;;
    multigpu)
      timeout 200 python bench/autotune_gpus.py >"$OUT/autotune-gpus.log" 2>&1; note "autotune_gpus rc=$?"
      tail -8 "$OUT/autotune-gpus.log" >>"$SUMMARY"
      timeout 200 torchrun --nproc_per_node 2 examples/tensor_parallel.py >"$OUT/tensor-parallel.log" 2>&1
      note "tensor_parallel rc=$?"; tail -8 "$OUT/tensor-parallel.log" >>"$SUMMARY" ;;
    *) note "unknown part $part" ;;
  esac
done
find bench/results -newer "$MARK" -type f -exec cp {} "$OUT/" \;
cat "$SUMMARY"
