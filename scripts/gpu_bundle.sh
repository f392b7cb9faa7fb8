#!/usr/bin/env bash
# The binaries the GPU machine runs, stripped, in the layout bench/gpu.sh
# and scripts/multi_gpu.sh expect (about 50 MB with the LLVM module; the
# device tool carries at most 64 MiB):
#   scripts/gpu_bundle.sh [BUILD_DIR] [OUT_DIR]    (default: build build-gpu)
# then carry OUT_DIR and run `bench/gpu.sh OUT_DIR <commit>` there.
set -euo pipefail
build=${1:-build}
out=${2:-build-gpu}
rm -rf "$out"
for f in tests/runtime/runtime_tests tests/gpu/gpu_executor_tests tests/multigpu/multi_gpu_tests \
         tools/fp8c examples/host/gpt_mlp_step bench/layer_bench bench/quantize_bench \
         bench/mlp_multi_gpu_bench bench/gemm_bench bench/chain_bench bench/accumulate_bench; do
  mkdir -p "$out/$(dirname "$f")"
  cp "$build/$f" "$out/$f"
  strip "$out/$f"
done
# The LLVM backend's module (LLVM linked in statically: about 27 MB
# stripped), where this build has one; the binaries find it in ../lib.
if [ -f "$build/lib/libfp8c_llvm.so" ]; then
  mkdir -p "$out/lib"
  cp "$build/lib/libfp8c_llvm.so" "$out/lib/"
  strip "$out/lib/libfp8c_llvm.so"
fi
# A quantize_bench built at an earlier commit (FP8C_BEFORE_BUILD, a build folder of that
# commit; its commit in FP8C_BEFORE_COMMIT), which bench/gpu.sh times beside this one's: the
# kernels as they were before a change to them.
if [ -n "${FP8C_BEFORE_BUILD:-}" ]; then
  cp "$FP8C_BEFORE_BUILD/bench/quantize_bench" "$out/bench/quantize_bench_before"
  strip "$out/bench/quantize_bench_before"
  echo "${FP8C_BEFORE_COMMIT:-unknown}" > "$out/bench/quantize_bench_before.commit"
fi
# The peers' cuBLASLt programs (best of the heuristic's top candidates), for
# bench/gpu.sh's GEMM benchmark, built here with nvcc when the peers' scripts
# are at hand (PEERS_DIR, default ../shared/peers).
peers=${PEERS_DIR:-../shared/peers}
if [ -x /usr/local/cuda/bin/nvcc ] && [ -f "$peers/cublaslt_bench.cu" ]; then
  mkdir -p "$out/bench/peers"
  for p in cublaslt_bench cublaslt_block_bench; do
    /usr/local/cuda/bin/nvcc -O2 -std=c++17 -arch=sm_90a "$peers/$p.cu" -lcublasLt -o "$out/bench/peers/$p"
  done
fi
du -sh "$out"
