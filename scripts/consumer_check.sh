#!/usr/bin/env bash
# After the tests (scripts/test.sh): `cmake --install` of build/ into a
# temporary prefix, then examples/consumer configured with find_package(fp8c)
# against that prefix only, built, and run on examples/gpt_mlp.fp8. Checks
# what it prints (the plan's summary, and that libfp8c.so finds the gloo
# module installed next to it), that nothing installed that users run needs
# libgloo, and that the installed bin/fp8c finds the modules (gloo, LLVM) at ../lib.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

fail() {
  echo "consumer_check: $*" >&2
  exit 1
}

echo "== cmake --install build --prefix $prefix"
cmake --install build --prefix "$prefix" >"$work/install.log" || { cat "$work/install.log"; fail "install failed"; }
libdir=$(dirname "$(find "$prefix" -name 'libfp8c_gloo.so' | head -n 1)")
[ -f "$prefix/bin/fp8c" ] || fail "no bin/fp8c installed"
[ -f "$prefix/include/fp8c/dsl.hpp" ] || fail "no include/fp8c/dsl.hpp installed"
[ -f "$prefix/include/fp8c-internal/codegen/plan/planner.hpp" ] || fail "no internal headers installed"
[ -f "$libdir/cmake/fp8c/fp8cConfig.cmake" ] || fail "no fp8cConfig.cmake installed"
for binary in "$prefix/bin/fp8c" "$libdir/libfp8c.so"; do
  if readelf -d "$binary" | grep NEEDED | grep -q gloo; then
    fail "$binary needs gloo: $(readelf -d "$binary" | grep NEEDED)"
  fi
done

echo "== examples/consumer against it (CMAKE_PREFIX_PATH=$prefix)"
cmake -S examples/consumer -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" >"$work/configure.log" || { cat "$work/configure.log"; fail "configure failed"; }
ninja -C "$work/build" >"$work/build.log" || { cat "$work/build.log"; fail "build failed"; }
# fp8cConfig.cmake finds cuda.h for the runtime/ headers where the build did.
if [ -f /usr/local/cuda/include/cuda.h ] || [ -n "${CUDA_HOME:-}" ]; then
  grep -q '^FP8C_CUDA_INCLUDE_DIR:PATH=/' "$work/build/CMakeCache.txt" \
    || fail "fp8cConfig.cmake did not find cuda.h"
fi
out=$("$work/build/fp8c_consumer" examples/gpt_mlp.fp8 2>&1) || { echo "$out"; fail "the consumer failed"; }
echo "$out"
for expected in "examples/gpt_mlp.fp8: 2 layers" "fc1: 8 ranks" "fc2: 8 ranks" "session: " \
                "gloo backend: available ($libdir/libfp8c_gloo.so)"; do
  grep -qF -- "$expected" <<<"$out" || fail "expected '$expected' in the consumer's output"
done

echo "== installed bin/fp8c verify (gloo from $libdir)"
out=$(env -u FP8C_GLOO_MODULE "$prefix/bin/fp8c" verify examples/current_scaling_debug.fp8 --tokens 64 --backend gloo 2>&1) \
  || { echo "$out"; fail "installed fp8c verify failed"; }
grep -q "checks passed" <<<"$out" || { echo "$out"; fail "installed fp8c verify did not pass"; }
if [ -f "$libdir/libfp8c_llvm.so" ]; then
  echo "== installed bin/fp8c emit --backend llvm (the LLVM module from $libdir)"
  out=$(env -u FP8C_LLVM_MODULE "$prefix/bin/fp8c" emit examples/gpt_mlp.fp8 --backend llvm \
        --kernel transpose_u8 2>&1) || { echo "$out"; fail "installed fp8c emit --backend llvm failed"; }
  grep -q ".entry transpose_u8" <<<"$out" || { echo "$out"; fail "no PTX from the installed LLVM module"; }
fi
echo "consumer_check: ok"
