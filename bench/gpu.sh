#!/usr/bin/env bash
# Everything that needs the GPU, in one call (for the device machine): the
# GPU tests, then the benchmarks side by side with the PyTorch peers. Run from
# the repository root with a build folder made on the CPU machine:
#   bench/gpu.sh BUILD_DIR COMMIT
# FP8C_PROFILE=1 adds an ncu profile of the main kernel; FP8C_NO_PEERS=1
# skips the PyTorch peers (when device time is short).
# FP8C_ONLY=quantize|layer runs one benchmark; FP8C_SKIP_TESTS=1 skips the tests.
# Writes under $OUT (or ./gpu-out): tests.log, executor_tests.log,
# host_example.log, quantize_fp8c.json, quantize_peers.json, quantize.json,
# layer_fp8c.json, layer_peers.json, layer.json (the merged records for
# bench/results/).
set -uo pipefail
build=${1:-build}
commit=${2:-unknown}
out=${OUT:-gpu-out}
mkdir -p "$out"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$out/gpu.txt"

tests=0
if [ "${FP8C_SKIP_TESTS:-0}" != 1 ]; then
echo "== GPU tests"
"$build/tests/runtime/runtime_tests" > "$out/tests.log" 2>&1
tests=$?
grep -E "^\[  (PASSED|FAILED|SKIPPED) \]" "$out/tests.log" | head -n 30
grep -E "Failure|Which is|want|differs" "$out/tests.log" | head -n 30
echo "== GPU executor and host API tests"
"$build/tests/gpu/gpu_executor_tests" --gtest_output=json:"$out/executor_tests.json" > "$out/executor_tests.log" 2>&1
executor=$?
[ $executor -ne 0 ] && tests=$executor
grep -E "^\[  (PASSED|FAILED|SKIPPED) \]" "$out/executor_tests.log" | head -n 40
grep -E "Failure|FAIL " "$out/executor_tests.log" | head -n 30
echo "== the example host program"
"$build/examples/host/gpt_mlp_step" examples/gpt_mlp.fp8 --tokens 2048 --steps 3 2>&1 | tee "$out/host_example.log"
fi

echo "== compute-sanitizer (memcheck, racecheck) on one aligned and one ragged shape"
for tool in memcheck racecheck; do
  compute-sanitizer --tool $tool --error-exitcode 3 "$build/tests/runtime/runtime_tests" \
    --gtest_filter='AllVariants/QuantizeGpu.MatchesTheCpuReference/quantize_bf16_e4m3_r_c_amax:AllVariants/QuantizeGpu.MatchesTheCpuReference/quantize_bf16_e5m2_r_c_amax_dbias_dgelu' \
    --gtest_brief=1 > "$out/sanitizer_$tool.log" 2>&1
  echo "$tool: exit $? ($(grep -c 'ERROR SUMMARY: 0' "$out/sanitizer_$tool.log") clean summaries)"
  tail -n 3 "$out/sanitizer_$tool.log"
done

echo "== start-up: every kernel of examples/gpt_mlp.fp8, cold then warm cache, on 2 cores"
cache=$(mktemp -d)
taskset -c 0,1 "$build/tools/fp8c" compile examples/gpt_mlp.fp8 --threads 2 --cache-dir "$cache" 2>/dev/null | tail -n 1 | tee "$out/startup.txt"
taskset -c 0,1 "$build/tools/fp8c" compile examples/gpt_mlp.fp8 --threads 2 --cache-dir "$cache" 2>/dev/null | tail -n 1 | tee -a "$out/startup.txt"
rm -rf "$cache"

if [ "${FP8C_ONLY:-quantize}" = layer ] || [ -z "${FP8C_ONLY:-}" ]; then
  echo "== layer benchmark"
  "$build/bench/layer_bench" --json "$out/layer_fp8c.json"
  if [ "${FP8C_NO_PEERS:-0}" != 1 ]; then
    python3 bench/peers/layer_peers.py "$out/layer_peers.json" > "$out/layer_peers.log" 2>&1 || tail -5 "$out/layer_peers.log"
    python3 bench/merge_layer_results.py "$out/layer_fp8c.json" "$out/layer_peers.json" "$commit" "$out/layer.json"
  fi
fi
[ "${FP8C_ONLY:-}" = layer ] && exit $tests

echo "== benchmarks"
"$build/bench/quantize_bench" --json "$out/quantize_fp8c.json"
if [ "${FP8C_PROFILE:-0}" = 1 ]; then
  for case in delayed_cast_transpose_amax; do
    ncu --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
      --section Occupancy -k regex:quantize --launch-skip 3 --launch-count 1 \
      "$build/bench/quantize_bench" --iters 2 --only $case > "$out/ncu_$case.txt" 2>&1
    grep -E "DRAM Throughput|Memory Throughput|Duration|Achieved Occupancy|Registers|Stall|L2 Hit" "$out/ncu_$case.txt" | head -n 20
  done
fi
if [ "${FP8C_NO_PEERS:-0}" != 1 ]; then
  python3 bench/peers/quantize_peers.py 16384 8192 "$out/quantize_peers.json" > "$out/peers.log" 2>&1 || tail -5 "$out/peers.log"
  python3 bench/merge_results.py "$out/quantize_fp8c.json" "$out/quantize_peers.json" "$commit" "$out/quantize.json"
fi
exit $tests
