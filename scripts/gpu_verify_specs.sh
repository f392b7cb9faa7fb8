#!/usr/bin/env bash
# `fp8c verify --device gpu` (single-GPU multi-rank mode against the CPU
# reference and float64, docs/runtime.md) over every example and every
# spec in tests/specs, at each spec's own ranks, on the GPU machine:
#   scripts/gpu_verify_specs.sh [BUILD_DIR] [TOKENS] [STEPS]   (default build-gpu 96 2)
# 96 tokens divide by 1, 2, 3, 4, 6 and 8 ranks and keep every FP8 GEMM's K a
# multiple of 32. The examples' large layers run at 16 tokens with --force.
# Writes $OUT/verify_gpu.log (or ./gpu-out/); exits non-zero if a spec fails.
set -uo pipefail
build=${1:-build-gpu}
tokens=${2:-96}
steps=${3:-2}
out=${OUT:-gpu-out}
mkdir -p "$out"
log="$out/verify_gpu.log"
: > "$log"
failed=0
run() {  # FILE ARGS...
  local file=$1
  shift
  if timeout 240 "$build/tools/fp8c" verify "$file" --device gpu --steps "$steps" "$@" \
      > "$out/one.log" 2>&1; then
    echo "pass $file ($(grep -c ' pass' "$out/one.log") checks)" | tee -a "$log"
  else
    failed=$((failed + 1))
    echo "FAIL $file" | tee -a "$log"
    grep -E 'FAIL|error|rror:' "$out/one.log" | head -n 20 | tee -a "$log"
  fi
}
for f in tests/specs/*.fp8; do run "$f" --tokens "$tokens"; done
for f in examples/*.fp8; do run "$f" --tokens 16 --force; done
rm -f "$out/one.log"
echo "verify --device gpu: $failed failed" | tee -a "$log"
[ "$failed" -eq 0 ]
