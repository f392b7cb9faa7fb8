#!/usr/bin/env bash
# Everything that needs the GPU, in one call (for the device machine): the
# GPU tests, then the benchmarks side by side with the PyTorch peers. Run from
# the repository root with a build folder made on the CPU machine:
#   bench/gpu.sh BUILD_DIR COMMIT
# FP8C_PROFILE=1 adds an ncu profile of the main kernel; FP8C_NO_PEERS=1
# skips the PyTorch peers (when device time is short).
# FP8C_ONLY=quantize|layer|accumulate|chain|block|gemm runs one benchmark; FP8C_SKIP_TESTS=1 skips the
# tests and the sanitizer, FP8C_SKIP_BENCH=1 the benchmarks. The tests take
# about 5 minutes and the benchmarks with peers about as long: past the device
# tool's 10 minutes a call, so run it as two calls (FP8C_SKIP_BENCH=1, then
# FP8C_SKIP_TESTS=1).
# Writes $OUT/gpu_run.tgz (or ./gpu-out/) holding tests.log, executor_tests.log,
# host_example.log, quantize_fp8c.json, quantize_peers.json, quantize.json,
# layer_fp8c.json, layer_peers.json, layer.json, kernel_backends.json (quantize_bench under
# both kernel backends and before the kinds were IR), accumulate.json, chain.json, block_steps.json,
# gemm.json (the records for bench/results/), gemm_backward.json, and repeats.log (50 repeats of
# the step-runtime tests).
set -uo pipefail
build=${1:-build}
commit=${2:-unknown}
# The device tool returns at most 8 files from $OUT: everything is written to
# a work folder and comes back as one archive, plus the merged records. The
# folder is under $OUT so that, if the run is killed before it packs, some
# logs still come back; each long step has its own time limit, so it packs.
final=${OUT:-gpu-out}
out="$final/work"
rm -rf "$out"
mkdir -p "$out"
pack() {
  tar -czf "$final/gpu_run.tgz" -C "$out" .
  for record in layer.json quantize.json kernel_backends.json block_steps.json gemm.json chain.json accumulate.json; do
    [ -f "$out/$record" ] && cp "$out/$record" "$final/"
  done
  rm -rf "$out"
}
trap pack EXIT
# A time limit (timeout sends TERM) still packs what was written.
trap 'exit 143' TERM
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$out/gpu.txt"

# Both test programs in gtest shards, all at once (runtime tests: 8 shards,
# GPU-bound; executor tests: 12 shards, bound by the CPU oracle, which spreads
# its GEMMs over the cores; 8 shards left one with two of the slowest example
# tests past its 450 s at 00ae176); each program's shards end up in one log. The
# shards share one cubin cache (safe with concurrent writers). Output is
# line-buffered so that a shard killed by its time limit still shows the
# test it was in.
run_sharded() {  # NAME BINARY SHARDS SECONDS: writes $out/NAME.log, non-zero if a shard failed
  local name=$1 binary=$2 shards=$3 limit=$4 status=0 pids=() i rc
  for ((i = 0; i < shards; ++i)); do
    GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i timeout "$limit" stdbuf -oL -eL "$binary" \
      > "$out/$name.$i.tmp" 2>&1 &
    pids+=($!)
  done
  for ((i = 0; i < shards; ++i)); do
    wait "${pids[$i]}"
    rc=$?
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
      echo "$name shard $i of $shards: KILLED after ${limit} s (rc $rc) in: $(grep -E '^\[ RUN' "$out/$name.$i.tmp" | tail -n 1)"
      status=1
    elif [ $rc -ne 0 ]; then
      echo "$name shard $i of $shards: exit $rc"
      status=1
    fi
  done
  cat "$out/$name".*.tmp > "$out/$name.log" && rm -f "$out/$name".*.tmp
  return $status
}
tests=0
if [ "${FP8C_SKIP_TESTS:-0}" != 1 ]; then
echo "== GPU tests (kernels, cuBLASLt, collectives) and GPU executor / host API tests"
export FP8C_CACHE_DIR=${FP8C_CACHE_DIR:-$(mktemp -d)}
# compute-sanitizer memcheck, racecheck and synccheck over every kernel kind (445 tests at
# 6fd654d): each bf16 per-tensor quantize variant on its six shapes; block/MX variants,
# transposes (bytes and words), permutes, the epilogues (bf16) and the dequantizes (to bf16)
# under both kernel backends, several on misaligned pointers; scale updates; rank reductions;
# a block quantize fusing dact; the generated GEMM block-scaled with padded scale rows,
# with its fused FP8 output and amax, MXFP8 with NaN codes (both code orders), and its backward
# epilogue (act', dbias's shuffles and partials, FP8 D^T). They run alongside the test shards: correctness does
# not mind the shared GPU (about 6 minutes on the H200).
sanitized='AllVariants/QuantizeGpu.MatchesTheCpuReference/*bf16*_nvrtc:AllVariants/QuantizeGpu.MatchesTheCpuReference/quantize_bf16_e*_r_c_amax_llvm:AllVariants/QuantizeGpu.MatchesTheCpuReference/quantize_bf16_e5m2_r_c_amax_dbias_drelu_llvm:AllVariants/BlockQuantizeGpu.MisalignedPointers/*:Shapes/TransposeGpu.*:Shapes/TransposeWordsGpu.*:Variants/BlockQuantizeDactGpu.*b1x128*dsilu*:Shapes/PermuteGpu.*:Variants/ScaleUpdateGpu.*:Backends/ScaleUpdateGuardGpu.*:AllVariants/EpilogueGpu.ScalarPathOnMisalignedPointers/*bf16*:AllVariants/DequantizeGpu.ElementWisePathsOnMisalignedPointers/*to_bf16*:RankReduce*Gpu*:GeneratedGemmGpu.BlockScaledPaddedScaleRows:GeneratedGemmGpu.Fp8OutputSaturatesAndReportsAmax:GeneratedGemmGpu.MxNanCodePoisonsItsRowOrColumnOnly:GeneratedGemmGpu.DbiasIsDeterministic'
sanitized="$sanitized:GemmWorkspacePoolGpu.*"
# ... and the step runtime's graphs and weight cache through the executor and Session (one
# small layer each: the sanitizers run every kernel of the pass they capture and replay).
# (Not PassGraphGpu.APassThatCannotBeCaptured...: it makes a call CUDA refuses inside a capture on
# purpose, which memcheck reports as two API errors.)
sanitized_steps='PassGraphGpu.*:SessionGraphs.ATensorAtANewAddressIsCapturedAgain:SessionWeightCache.AWeightChangedUnderItsVersionIsCaughtByTheCheck-PassGraphGpu.APassThatCannotBeCapturedRunsEagerlyAndSaysWhy'
declare -A sanitizer_pid
for tool in memcheck racecheck synccheck; do
  (timeout 330 compute-sanitizer --tool $tool --error-exitcode 3 "$build/tests/runtime/runtime_tests" \
     --gtest_filter="$sanitized" > "$out/sanitizer_$tool.log" 2>&1 &&
   timeout 200 compute-sanitizer --tool $tool --error-exitcode 3 "$build/tests/gpu/gpu_executor_tests" \
     --gtest_filter="$sanitized_steps" >> "$out/sanitizer_$tool.log" 2>&1) &
  sanitizer_pid[$tool]=$!
done
# 50 repeats of the step runtime's tests and of the ones that once raced, beside the shards.
(timeout 300 "$build/tests/gpu/gpu_executor_tests" --gtest_repeat=50 --gtest_brief=1 \
   --gtest_filter='PassGraphGpu.*:SessionGraphs.*:SessionWeightCache.*:Session.Fp8Chain*:Session.ANan*' \
   > "$out/repeats.log" 2>&1 &&
 timeout 200 "$build/tests/runtime/runtime_tests" --gtest_repeat=50 --gtest_brief=1 \
   --gtest_filter='GemmWorkspacePoolGpu.*:LocalDeviceGroupGpu.*:Shapes/PermuteGpu.*_nvrtc' >> "$out/repeats.log" 2>&1) &
repeats_pid=$!
# (420 s: at 260aa94 one shard ran past 330 s with the repeats and sanitizers beside it.
# 6 shards: at 4362e1a, with both kernel backends' tests, shard 2 of 4 took 255 s alone and
# was killed at 420 s beside the sanitizers; 6 ran at 6fd654d on the H200.
# 8 shards: at 508dfd9, on an H100, the last of 6 shards was killed at 420 s with 10 of its 257
# tests left, after the generated GEMM's 256-row tests were added.
# 480 and 510 s: at 6b9ba25 on the H200 two runtime shards of 8 were killed at 420 s (each passed
# alone in 235 s) and one executor shard of 12 at 450 s, one test short (the last of its 15);
# the whole call took 471 s of the device tool's 600.)
run_sharded tests "$build/tests/runtime/runtime_tests" 8 ${FP8C_RUNTIME_LIMIT:-480} & runtime_pid=$!
run_sharded executor_tests "$build/tests/gpu/gpu_executor_tests" 12 ${FP8C_EXECUTOR_LIMIT:-510} & executor_pid=$!
wait $runtime_pid || tests=1
wait $executor_pid || tests=1
for log in tests executor_tests; do
  echo "$log: $(grep -hE '^\[  (PASSED|FAILED|SKIPPED) +\]' "$out/$log.log" | awk '{n[$2] += $4} END {for (k in n) printf "%s %d  ", k, n[k]}')"
  # A shard killed by its limit prints no summary: its failures show only here.
  echo "failed tests: $(grep -hE '^\[  FAILED  \] [A-Za-z]' "$out/$log.log" | sed 's/ (.*//; s/.*\] //' | sort -u | tr '\n' ' ')"
  grep -E "Failure|Which is|want|differs|FAILED" "$out/$log.log" | head -n 30
  echo "slowest: $(grep -hE '^\[       OK \]' "$out/$log.log" | sed -E 's/.*OK \] (.*) \(([0-9]+) ms\)/\2 \1/' | sort -rn | head -n 3 | tr '\n' ';')"
done
echo "== compute-sanitizer (memcheck, racecheck, synccheck) on every kernel kind"
for tool in memcheck racecheck synccheck; do
  wait "${sanitizer_pid[$tool]}"
  rc=$?
  [ $rc -ne 0 ] && tests=1
  echo "$tool: exit $rc, $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|SYNCCHECK SUMMARY' "$out/sanitizer_$tool.log" | tail -n 1)," \
       "$(grep -c '^\[       OK' "$out/sanitizer_$tool.log") tests ok"
done
wait "$repeats_pid" || tests=1
echo "== 50 repeats of the step runtime's tests (graphs, weight cache, workspaces) and of the race-prone ones, beside the shards"
echo "repeats: $(grep -c '^\[  PASSED' "$out/repeats.log") runs passed, $(grep -c '^\[  FAILED  \] [0-9]* test' "$out/repeats.log") failed"
grep -E "Failure|FAILED" "$out/repeats.log" | sort | uniq -c | head -n 10
echo "== the example host program"
"$build/examples/host/gpt_mlp_step" examples/gpt_mlp.fp8 --tokens 2048 --steps 3 2>&1 | tee "$out/host_example.log"
fi

echo "== start-up: every kernel of examples/gpt_mlp.fp8, cold then warm cache, on 2 cores"
cache=$(mktemp -d)
taskset -c 0,1 "$build/tools/fp8c" compile examples/gpt_mlp.fp8 --threads 2 --cache-dir "$cache" 2>/dev/null | tail -n 1 | tee "$out/startup.txt"
taskset -c 0,1 "$build/tools/fp8c" compile examples/gpt_mlp.fp8 --threads 2 --cache-dir "$cache" 2>/dev/null | tail -n 1 | tee -a "$out/startup.txt"
rm -rf "$cache"

[ "${FP8C_SKIP_BENCH:-0}" = 1 ] && exit $tests

if [ "${FP8C_ONLY:-quantize}" = layer ] || [ -z "${FP8C_ONLY:-}" ]; then
  echo "== layer benchmark"
  timeout 240 "$build/bench/layer_bench" --json "$out/layer_fp8c.json"
  if [ "${FP8C_NO_PEERS:-0}" != 1 ]; then
    # torchao's Float8Linear: the GPU machine has no network, so its wheel
    # comes carried in .whl/ (gitignored; on the CPU machine: `mkdir -p .whl
    # && cd .whl && pip download --no-deps torchao`, then carry ".whl").
    # Without it the peers' record says torchao was not importable.
    for wheel in .whl/torchao-*.whl; do
      [ -f "$wheel" ] && python3 -m pip install --no-deps --quiet "$wheel" > "$out/torchao_install.log" 2>&1
    done
    python3 bench/peers/layer_peers.py "$out/layer_peers.json" > "$out/layer_peers.log" 2>&1 || tail -5 "$out/layer_peers.log"
    python3 bench/merge_layer_results.py "$out/layer_fp8c.json" "$out/layer_peers.json" "$commit" "$out/layer.json"
  fi
fi
[ "${FP8C_ONLY:-}" = layer ] && exit $tests

if [ "${FP8C_ONLY:-quantize}" = accumulate ] || [ -z "${FP8C_ONLY:-}" ]; then
  echo "== gradient accumulation: 4 micro-batches of gpt_mlp's fc1, the weight cast once and every time"
  timeout 120 "$build/bench/accumulate_bench" --commit "$commit" --json "$out/accumulate.json"
fi
[ "${FP8C_ONLY:-}" = accumulate ] && exit $tests

if [ "${FP8C_ONLY:-quantize}" = chain ] || [ -z "${FP8C_ONLY:-}" ]; then
  echo "== two-layer MLP steps through fp8c::Session: FP8 hand-over against bf16"
  timeout 200 "$build/bench/chain_bench" --commit "$commit" --json "$out/chain.json"
fi
[ "${FP8C_ONLY:-}" = chain ] && exit $tests

if [ "${FP8C_ONLY:-quantize}" = block ] || [ -z "${FP8C_ONLY:-}" ]; then
  echo "== block-scaled layer steps: block-scaled FP8 GEMMs against the dequantize path"
  timeout 300 python3 bench/block_steps.py "$build/tools/fp8c" "$commit" "$out/block_steps.json"
fi
[ "${FP8C_ONLY:-}" = block ] && exit $tests

if [ "${FP8C_ONLY:-quantize}" = gemm ] || [ -z "${FP8C_ONLY:-}" ]; then
  echo "== FP8 GEMMs: the generated GEMM against cuBLASLt (fp8c's runner, then the peers' programs)"
  timeout 300 "$build/bench/gemm_bench" --only per_tensor,block,fused,mx --json "$out/gemm_fp8c.json" \
    ${FP8C_GEMM_ARGS:-}
  # The backward epilogue (act', dbias, e5m2 D with amax and D^T) against the plain GEMM, and
  # without dbias and without D^T: its own record, in the archive.
  timeout 150 "$build/bench/gemm_bench" --only backward --iters 20 --shape 8192x8192x8192 \
    --shape 16384x8192x8192 --shape 4096x4096x4096 --json "$out/gemm_backward.json"
  for p in cublaslt_bench cublaslt_block_bench; do
    [ "${FP8C_NO_PEERS:-0}" != 1 ] && [ -x "$build/bench/peers/$p" ] &&
      timeout 200 "$build/bench/peers/$p" > "$out/gemm_peer_$p.json"
  done
  python3 bench/merge_gemm_results.py "$out/gemm_fp8c.json" "$out/gemm_peer_cublaslt_bench.json" \
    "$out/gemm_peer_cublaslt_block_bench.json" "$commit" "$out/gemm.json"
  # The table `gemm = auto` can pick backends by (docs/gemm.md): the forms layers run.
  timeout 200 "$build/bench/gemm_bench" --promoted --only per_tensor,block --iters 10 \
    --table "$out/gemm_table.txt" > "$out/gemm_table.log" 2>&1 || echo "gemm table: FAILED"
fi
[ "${FP8C_ONLY:-}" = gemm ] && exit $tests

echo "== benchmarks"
timeout 150 "$build/bench/quantize_bench" --json "$out/quantize_fp8c.json"
# The kernels built as kernel IR through the LLVM backend, and (where the bundle carries one) the
# quantize_bench of the commit before the kinds became IR, set beside the NVRTC run above.
if [ "${FP8C_SKIP_BACKENDS:-0}" != 1 ]; then
  timeout 150 "$build/bench/quantize_bench" --backend llvm --json "$out/quantize_llvm.json"
  before=-
  if [ -x "$build/bench/quantize_bench_before" ]; then
    timeout 150 "$build/bench/quantize_bench_before" --json "$out/quantize_before.json" > /dev/null &&
      before="$out/quantize_before.json"
  fi
  python3 bench/merge_backend_results.py "$out/quantize_fp8c.json" "$out/quantize_llvm.json" "$before" \
    "$commit" "$(cat "$build/bench/quantize_bench_before.commit" 2>/dev/null || echo none)" \
    "$out/kernel_backends.json"
fi
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
