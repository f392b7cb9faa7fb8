#!/usr/bin/env bash
# Installs, builds and runs the whole test suite (CPU; GPU tests skip visibly
# where there is no GPU). This is what .ci/run runs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc)"
