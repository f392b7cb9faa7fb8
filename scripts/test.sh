#!/usr/bin/env bash
# Installs, builds and runs the whole test suite (CPU; GPU tests skip visibly
# where there is no GPU), then installs the build into a temporary prefix and
# builds and runs examples/consumer against it. This is what .ci/run runs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc)"
scripts/consumer_check.sh
