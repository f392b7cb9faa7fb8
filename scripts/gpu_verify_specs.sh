#!/usr/bin/env bash
# `fp8c verify --device gpu` (single-GPU multi-rank mode against the CPU
# reference and float64, docs/runtime.md) over every spec in tests/specs at
# its own ranks, four at a time, on the GPU machine:
#   scripts/gpu_verify_specs.sh [BUILD_DIR] [TOKENS] [STEPS] [FILES...]
#   (default build-gpu 96 2 tests/specs/*.fp8)
# 96 tokens divide by 1, 2, 3, 4, 6 and 8 ranks and keep every FP8 GEMM's K a
# multiple of 32. (The examples run in gpu_executor_tests' GpuExamples.)
# A spec the GPU executor refuses by name ("cannot run on the GPU yet", or a
# GEMM cuBLASLt does not take: "is not supported by cublaslt") is listed as
# unsupported, not as a failure.
# FP8C_VERIFY_GEMM=generated (or cublaslt) runs every layer's FP8 GEMMs on that
# backend (`fp8c verify --gemm`).
# Writes $OUT/verify_gpu.log (or ./gpu-out/); exits non-zero if a spec fails.
set -uo pipefail
build=${1:-build-gpu}
tokens=${2:-96}
steps=${3:-2}
shift $(( $# < 3 ? $# : 3 ))
files=("$@")
[ ${#files[@]} -eq 0 ] && files=(tests/specs/*.fp8)
out=${OUT:-gpu-out}
mkdir -p "$out/verify"
export build tokens steps out
one() {
  local file=$1 log="$out/verify/$(basename "$1").log"
  if timeout 300 "$build/tools/fp8c" verify "$file" --device gpu --tokens "$tokens" --steps "$steps" \
      ${FP8C_VERIFY_GEMM:+--gemm "$FP8C_VERIFY_GEMM"} > "$log" 2>&1; then
    echo "pass $file ($(grep -c ' pass' "$log") checks)"
  elif grep -q "cannot run on the GPU yet\|is not supported by cublaslt\|is not supported by generated" "$log"; then
    echo "unsupported $file: $(grep -m1 'needs\|is not supported' "$log")"
  else
    echo "FAIL $file (exit $?)"
    grep -E 'FAIL|error|rror:' "$log" | head -n 8
    tail -n 3 "$log"
  fi
}
export -f one
printf '%s\n' "${files[@]}" | xargs -P 4 -I{} bash -c 'one {}' | tee "$out/verify_gpu.log"
failed=$(grep -c '^FAIL' "$out/verify_gpu.log")
echo "verify --device gpu: $(grep -c '^pass' "$out/verify_gpu.log") pass, $(grep -c '^unsupported' "$out/verify_gpu.log") unsupported, $failed failed" | tee -a "$out/verify_gpu.log"
tar -czf "$out/verify_logs.tgz" -C "$out" verify && rm -rf "$out/verify"
[ "$failed" -eq 0 ]
