#!/usr/bin/env bash
# Device-side correctness checks for the "never a wrong answer" work (run on the H200 from the tree):
#   1. a large GPU fuzz (interpreter, emulator for sm_90a and the GPU, against float64) in the background;
#   2. compute-sanitizer memcheck over the GPU test files (device errors only: host API probes such as
#      cuGetProcAddress are not reported), then racecheck and synccheck over the warp-specialized and
#      wgmma tests.
# Usage: TW_COMMIT=<hash> bash bench/sanitize_gpu_suite.sh [fuzz-cases] [seconds-per-phase]
set -u
CASES=${1:-10500}
PHASE=${2:-420}
OUT=${OUT:-/tmp/tw-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD
GPU_TESTS="tests/test_gpu.py tests/test_gpu_ops.py tests/test_gpu_ops_attention.py tests/test_gpu_wgmma.py
 tests/test_gpu_ws.py tests/test_eager_jit_gpu.py tests/test_ignored_args_gpu.py tests/test_regress_frontend.py
 tests/test_cuda_driver.py tests/test_tensor_args.py"
python bench/fuzz_many.py --jobs 12 --cases "$CASES" --gpu --backends interpret,emulator:sm_90a --seed 5000 \
  --time-limit $((PHASE + 120)) >"$OUT/fuzz.log" 2>&1 &
FUZZ=$!
SAN="compute-sanitizer --report-api-errors no --target-processes all --print-limit 50"
timeout "$PHASE" $SAN --tool memcheck --log-file "$OUT/memcheck.%p.log" \
  python -m pytest -q -p no:cacheprovider -n 3 $GPU_TESTS >"$OUT/memcheck-pytest.log" 2>&1
echo "memcheck pytest rc=$?" >>"$OUT/summary.txt"
timeout 120 $SAN --tool racecheck --log-file "$OUT/racecheck.%p.log" \
  python -m pytest -q -p no:cacheprovider tests/test_gpu_ws.py tests/test_gpu_wgmma.py >"$OUT/racecheck-pytest.log" 2>&1
echo "racecheck pytest rc=$?" >>"$OUT/summary.txt"
wait $FUZZ; echo "fuzz rc=$?" >>"$OUT/summary.txt"
{
  tail -3 "$OUT/memcheck-pytest.log"; tail -3 "$OUT/racecheck-pytest.log"
  echo "memcheck logs: $(ls "$OUT"/memcheck.*.log 2>/dev/null | wc -l); error summaries:"
  grep -h "ERROR SUMMARY" "$OUT"/memcheck.*.log | sort | uniq -c
  echo "racecheck summaries:"; grep -h "RACECHECK SUMMARY\|ERROR SUMMARY" "$OUT"/racecheck.*.log | sort | uniq -c
  head -5 "$OUT/fuzz.log"; grep "^| all" "$OUT/fuzz.log"; grep "^case " "$OUT/fuzz.log" | head -20
} >>"$OUT/summary.txt"
cat "$OUT/summary.txt"
