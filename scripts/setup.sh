#!/usr/bin/env bash
# Installs what fp8c needs from Debian's packages, if it is missing. The CUDA
# toolkit is expected in /usr/local/cuda (headers only at build time; its
# libraries are loaded at run time, and only where a GPU step asks for them).
set -euo pipefail

packages=(
  cmake ninja-build g++        # the build
  libboost-dev                 # Boost.Spirit X3 (header-only), the .fp8 grammar
  libgtest-dev                 # GoogleTest (static), the test suite
  libgloo-dev                  # gloo, the CPU collectives
  libdlpack-dev                # DLPack, tensors handed over from PyTorch/CuPy/JAX
  clang-14 libclang-rt-14-dev  # libFuzzer + ASan/UBSan, the parser fuzz test
  llvm-19-dev                  # the LLVM NVPTX kernel backend (optional: built where found)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
